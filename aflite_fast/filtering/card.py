"""A dataset-card section saying how a dataset was filtered: :func:`dataset_card`.

Hugging Face dataset cards are Markdown; the section this writes ("Filtering with AFLite")
holds what a reader needs to judge and reproduce the filter: the method and its citation, the
parameters, the seeds (and their agreement), the package version, the rows in and out per
class (and per source), the per-phase table, the chance check of phase 0 and, when the kept
rows were evaluated, the verdict.  ``aflite-fast filter --card`` writes it as
``DIR/dataset_card.md`` with the run's other files; ``filter_dataset(..., card=True)`` returns it.
"""
import numpy as np

from aflite_fast._version import __version__

#: The method's reference, as the card cites it.
CITATION = """\
@inproceedings{lebras2020adversarial,
  title     = {Adversarial Filters of Dataset Biases},
  author    = {Le Bras, Ronan and Swayamdipta, Swabha and Bhagavatula, Chandra and Zellers, Rowan
               and Peters, Matthew E. and Sabharwal, Ashish and Choi, Yejin},
  booktitle = {Proceedings of the 37th International Conference on Machine Learning (ICML)},
  year      = {2020}
}"""


def _cell(value):
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _evaluation_dict(evaluation):
    if evaluation is None or isinstance(evaluation, dict):
        return evaluation
    return evaluation.to_dict()


def dataset_card(result, parameters, *, evaluation=None, title="Filtering with AFLite"):
    """The Markdown section of a dataset card describing an AFLite run.

    Parameters
    ----------
    result : AFLiteResult
        The run (:func:`aflite_fast.aflite`); with ``n_seeds`` > 1 its ensemble is described too.
    parameters : dict
        The run's parameters as given (``target_size``, ``train_size``, ``tau``, ...): written
        as a table, in their order; values that are not numbers, strings, booleans or None are
        written by ``str``.
    evaluation : EvaluationResult or dict, optional
        :func:`aflite_fast.evaluate_filter` of the kept rows (or its ``to_dict()``): its
        balanced accuracies and verdict are written.
    title : str
        The section's heading.

    Returns
    -------
    str
        Markdown, ending with a newline.
    """
    n_kept, n_removed = int(result.keep.size), int(result.removed.size)
    n_rows = n_kept + n_removed
    out = [f"## {title}", "",
           f"This dataset was filtered with AFLite (adversarial filtering of dataset biases; Le Bras et al., "
           f"ICML 2020) as implemented by `aflite_fast` {__version__}: in each phase many linear models are "
           f"trained on random subsets of the remaining rows, each row is scored by the share of the models "
           f"that held it out and predicted its label, and the most predictable rows are removed.",
           "", f"Rows: {n_rows} in, {n_kept} kept, {n_removed} removed, in {len(result.history)} phase(s). "
           f"Stop: {result.stop_reason}.", ""]
    if result.fingerprint:
        out += [f"Input fingerprint (SHA-256 of the embeddings' values): `{result.fingerprint}`.", ""]
    out += ["### Parameters", "", _table(["parameter", "value"], [(k, _param(v)) for k, v in parameters.items()]),
            ""]
    ensemble = result.ensemble
    if ensemble is not None:
        freq = ensemble.removal_frequency
        out += ["### Seeds", "",
                f"{len(ensemble.seeds)} runs with the seeds {', '.join(map(str, ensemble.seeds))}; the kept rows "
                f"above are those of the first. Mean pairwise Jaccard index of the kept sets: "
                f"{ensemble.mean_jaccard:.3f}. Rows kept by at least half of the runs (consensus): "
                f"{ensemble.consensus_keep.size}; removed by every run: {int(np.count_nonzero(freq == 1.0))}; "
                f"by none: {int(np.count_nonzero(freq == 0.0))}.", "",
                _table(["seed", "kept", "stop"], [(s, r.keep.size, r.stop_reason)
                                                  for s, r in zip(ensemble.seeds, ensemble.runs)]), ""]
    else:
        seed = parameters.get("random_state")
        out += ["### Seeds", "", f"One run, seed {seed}." if seed is not None else "One run.", ""]
    out += ["### Rows per class", "",
            _table(["class", "in", "kept", "removed", "kept share"],
                   [(c, k + r, k, r, k / max(n_kept, 1)) for c, k, r in
                    zip(_labels(result.classes), result.kept_per_class.tolist(), result.removed_per_class.tolist())]),
            ""]
    if result.sources is not None:
        out += ["### Rows per source", "",
                _table(["source", "in", "kept", "removed", "removed share"],
                       [(s, k + r, k, r, r / max(k + r, 1)) for s, k, r in
                        zip(_labels(result.sources), result.kept_per_source.tolist(),
                            result.removed_per_source.tolist())]), ""]
    with_probe = any(h.probe for h in result.history)
    header = ["phase", "active", "train size", "at or above tau", "removed"] + (
        ["balanced accuracy (held out)", "put back"] if with_probe else [])
    rows = []
    for h in result.history:
        row = [h.phase, h.n_active, h.train_size, h.n_above_tau, h.n_removed]
        if with_probe:
            row += [h.probe["balanced_accuracy"] if h.probe else "", h.n_put_back]
        rows.append(row)
    out += ["### Phases", "", _table(header, rows), ""]
    chance = result.chance
    out += ["### Chance check", ""]
    if chance is None:
        out += ["Not run.", ""]
    else:
        out += [f"Phase 0 found {chance.n_above_tau} of {chance.n_active} rows at or above tau={chance.tau:g}; "
                f"with the labels permuted ({len(chance.null_above_tau)} permutations) {chance.null_mean:.1f} on "
                f"average (margin {chance.margin:.1f}). "
                + ("The observed rows do not exceed that: what the filter removed may be chance, not bias."
                   if chance.by_chance else "The observed rows exceed that."), ""]
    ev = _evaluation_dict(evaluation)
    if ev is not None:
        out += ["### Evaluation", "",
                f"A probe trained out of fold on the kept rows reaches a balanced accuracy of "
                f"{ev['kept_balanced_accuracy']:.3f}, against {ev['full_balanced_accuracy']:.3f} on all rows and "
                f"{ev['random_balanced_accuracy']:.3f} on random subsets of the kept size. Verdict: "
                f"**{ev['verdict']}** ({ev['reason']}).", ""]
    out += ["### Citation", "", "```bibtex", CITATION, "```", ""]
    return "\n".join(out)


def _labels(values):
    return [v.item() if hasattr(v, "item") else v for v in np.asarray(values).tolist()] if values is not None else []


def _param(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return "None" if value is None else value
    if isinstance(value, np.generic):
        return value.item()
    return str(value)
