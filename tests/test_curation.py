"""Decisions a curator can defend: stop gates, quotas, seed ensembles, the dataset card.

a. ``stop="chance"``: on no-signal data (8,000 x 32, class prior .4) it removes at most 1% of
   the rows, where the paper's rule removes most of the majority class; with a planted cue it
   still removes most of the cue's rows.  Below chance by more than the margin, the slice of the
   phase before is put back.
b. ``max_removed``: never more than the cap, whatever the stop rule.
c. ``class_quota="prior"``: the kept prior stays the input's; ``source_quota``: no source loses
   more than its share.
d. ``n_seeds``: the ensemble's Jaccard, removal frequency and consensus; every run is that of its
   own seed; ``keep_at(n)`` is the kept set of a run stopped at n.
e. Each keyword is one ValueError naming it; checkpoints record them only when given.
f. The command line: ``--stop chance --margin --max-removed``, ``--class-quota``, ``--sources
   --source-quota``, ``--n-seeds`` and ``--card`` (the card inside the output set).
"""
import json
import os
import warnings

import numpy as np
import pytest

from aflite_fast import aflite
from aflite_fast.cli import main
from aflite_fast.experiments.synthetic_data import make_biased_circles
from aflite_fast.filtering import curation, loop
from aflite_fast.filtering.card import dataset_card
from aflite_fast.filtering.curation import apply_quotas, class_quotas, largest_remainder

N, D, PRIOR = 8000, 32, 0.4
RUN = dict(target_size=2000, train_size=0.5, n_partitions=32, progress=False, random_state=0)


def no_signal(seed=0):
    """Gaussian X, labels drawn independently of it with P(y=1) = 0.4."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D)).astype(np.float32)
    y = (rng.random(N) < PRIOR).astype(np.int64)
    return X, y


def planted_cue(seed=0, n_cue=800, strength=6.0):
    """The no-signal data with a cue on ``n_cue`` rows: feature 0 set to +strength for label 1 and
    -strength for label 0."""
    X, y = no_signal(seed)
    cue = np.random.default_rng(seed + 100).choice(N, n_cue, replace=False)
    X[cue, 0] = np.where(y[cue] == 1, strength, -strength)
    return X, y, cue


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# ---------------------------------------------------------------- a. stop="chance"


def test_stop_chance_removes_at_most_one_percent_of_no_signal_data():
    X, y = no_signal()
    paper = aflite(X, y, **RUN)
    assert paper.removed.size > 0.5 * N  # the paper's rule is fooled ...
    assert y[paper.removed].mean() < 0.45  # ... and takes mostly the majority class
    res = aflite(X, y, stop="chance", **RUN)
    assert res.removed.size <= 0.01 * N, res.stop_reason
    probe = res.history[0].probe
    assert abs(probe["balanced_accuracy"] - 0.5) <= 0.02 and probe["chance"] == 0.5 and probe["margin"] == 0.02
    assert "within margin=0.02 of chance" in res.stop_reason


def test_stop_chance_still_removes_most_of_a_planted_cue():
    X, y, cue = planted_cue()
    res = aflite(X, y, stop="chance", **RUN)
    removed_cue = np.isin(cue, res.removed).mean()
    assert removed_cue > 0.9, (removed_cue, res.stop_reason)
    assert res.removed.size < 2 * cue.size  # and not much else
    assert res.history[0].probe["balanced_accuracy"] > 0.52  # the cue is seen ...
    assert res.history[-1].n_removed == 0 and res.history[-1].probe["balanced_accuracy"] <= 0.52  # ... until gone


def test_below_chance_puts_the_last_slice_back(monkeypatch):
    """A probe below chance by more than the margin ends the run with the phase before's slice back."""
    X, y, _ = planted_cue()
    real = curation.probe
    scripted = iter([0.6, 0.6, 0.4])

    def probe(*args):
        out = real(*args)
        out["balanced_accuracy"] = next(scripted)
        return out

    monkeypatch.setattr(loop, "probe", probe)
    res = aflite(X, y, stop="chance", slice_size=300, **dict(RUN, n_partitions=8))
    first_two = [h.n_removed for h in res.history[:2]]
    assert first_two == [300, 300] and len(res.history) == 3
    assert res.history[2].n_put_back == 300 and res.history[2].n_removed == 0
    assert res.removed.size == 300 and set(res.removed_phase) == {0}
    assert res.keep.size == N - 300 and np.all(np.diff(res.keep) > 0)
    assert "put back" in res.stop_reason


# ---------------------------------------------------------------- b. max_removed


@pytest.mark.parametrize("kwargs", [{}, {"class_quota": "prior"}, {"stop": "chance"}])
def test_max_removed_caps_every_stop_rule(kwargs):
    X, y, _ = planted_cue()
    for cap in (0.1, 0.05):
        res = aflite(X, y, max_removed=cap, **RUN, **kwargs)
        assert res.removed.size <= cap * N, (cap, kwargs, res.removed.size)
    res = aflite(X, y, max_removed=0.1, **RUN)
    assert res.removed.size == 800 and res.stop_reason == "max_removed: 800 rows removed"  # the paper's run goes on
    assert aflite(X, y, max_removed=123, **RUN).removed.size == 123


# ---------------------------------------------------------------- c. quotas


def test_class_quota_keeps_the_prior():
    X, y = no_signal()
    prior = y.mean()
    res = aflite(X, y, class_quota="prior", **RUN)
    assert abs(y[res.keep].mean() - prior) <= 0.01
    # where both classes have rows to give: many removed, the prior kept within a row per class
    X, y, cue = planted_cue()
    paper = aflite(X, y, **RUN)
    res = aflite(X, y, class_quota="prior", **RUN)
    assert abs(y[paper.keep].mean() - prior) > 0.05
    assert res.removed.size >= 1000 and abs(y[res.keep].mean() - prior) <= 0.01
    input_counts = np.bincount(y)
    for h in res.history:
        assert np.all(np.abs(np.array(h.class_active) - largest_remainder(input_counts, h.n_active)) <= 1)


def test_class_quotas_by_hand():
    # 60/40 input, 100 active rows; budget 10: 6 and 4
    assert class_quotas([60, 40], [50, 50], [600, 400], 10).tolist() == [6, 4]
    # only 2 rows of class 1 eligible: 6 rows in all (4 and 2 leave 56 and 38, 60/40 of 94 to a row);
    # 7 would leave 56 and 37, which takes 3 of class 1
    assert class_quotas([60, 40], [50, 2], [600, 400], 10).tolist() == [4, 2]
    # none of class 1: one row of class 0 (59 and 40 are 60/40 of 99 to a row), and then none
    assert class_quotas([60, 40], [50, 0], [600, 400], 10).tolist() == [1, 0]
    assert class_quotas([59, 40], [50, 0], [600, 400], 10).tolist() == [0, 0]
    order = np.array([5, 1, 4, 0, 2, 3])
    codes = np.array([0, 0, 1, 1, 0, 0])
    taken = apply_quotas(order, 3, class_codes=codes, prior_counts=np.array([2, 1]),
                         active_class_counts=np.array([4, 2]))
    assert taken.tolist() == [5, 1, 2]  # the ranking kept; class 1 gives 1 (its quota), class 0 two
    sources = np.array([0, 1, 1, 1, 0, 0])
    taken = apply_quotas(order, 6, source_codes=sources, source_allowance=np.array([1, 5]))
    assert taken.tolist() == [5, 1, 2, 3]


def test_source_quota_caps_what_any_source_loses():
    X, y = no_signal()
    sources = np.random.default_rng(7).choice(["a", "b", "c"], N, p=[0.5, 0.3, 0.2])
    plain = aflite(X, y, sources=sources, **RUN)
    res = aflite(X, y, sources=sources, source_quota=0.2, **RUN)
    assert plain.sources.tolist() == ["a", "b", "c"]
    assert np.array_equal(plain.keep, aflite(X, y, **RUN).keep)  # sources alone only count
    counts = plain.kept_per_source + plain.removed_per_source
    assert np.any(plain.removed_per_source > 0.2 * counts)
    assert np.all(res.removed_per_source <= np.floor(0.2 * counts)) and res.removed.size > 0
    assert sum(sum(h.source_removed) for h in res.history) == res.removed.size


# ---------------------------------------------------------------- d. seed ensembles


def test_seed_ensemble_and_keep_at():
    data = make_biased_circles(2000, random_state=0)
    run = dict(target_size=600, n_partitions=16, train_size=0.5, slice_size=100, progress=False, random_state=3,
               chance_check=False)
    res = aflite(data.X, data.y, n_seeds=5, **run)
    ens = res.ensemble
    assert ens.seeds == [3, 4, 5, 6, 7] and len(ens.runs) == 5 and ens.runs[0] is res
    J = ens.jaccard
    assert J.shape == (5, 5) and np.allclose(J, J.T) and np.all(np.diag(J) == 1)
    assert np.all((J > 0) & (J <= 1)) and 0 < ens.mean_jaccard < 1
    i, j = 1, 4
    a, b = ens.runs[i].keep, ens.runs[j].keep
    assert J[i, j] == len(np.intersect1d(a, b)) / len(np.union1d(a, b))
    removed = np.zeros(2000)
    for r in ens.runs:
        removed[r.removed] += 1
    assert np.array_equal(ens.removal_frequency, removed / 5)
    assert np.array_equal(ens.consensus_keep, np.flatnonzero(removed <= 2))
    # each run is that of its own seed
    alone = aflite(data.X, data.y, **dict(run, random_state=5))
    assert np.array_equal(alone.keep, ens.runs[2].keep) and np.array_equal(alone.removed, ens.runs[2].removed)
    # keep_at(n): the kept set of a run stopped at n (mid-phase and at a phase boundary)
    for n in (1850, 1700):
        stopped = aflite(data.X, data.y, **dict(run, target_size=n))
        assert np.array_equal(res.keep_at(n), stopped.keep), n
    assert np.array_equal(res.keep_at(2000), np.arange(2000)) and np.array_equal(res.keep_at(res.keep.size), res.keep)
    with pytest.raises(ValueError, match="keep_at"):
        res.keep_at(res.keep.size - 1)


# ---------------------------------------------------------------- e. arguments, checkpoints


@pytest.mark.parametrize("kwargs, message", [
    ({"margin": -0.1}, "margin"), ({"margin": "x"}, "margin"),
    ({"max_removed": 1.5}, "max_removed"), ({"max_removed": -3}, "max_removed"),
    ({"max_removed": "10%"}, "max_removed"),
    ({"class_quota": "equal"}, "class_quota"),
    ({"source_quota": 0.2}, "source_quota needs sources"),
    ({"sources": [0, 1]}, "sources has 2 entries"),
    ({"sources": np.arange(300), "source_quota": 2.0}, "source_quota"),
    ({"n_seeds": 0}, "n_seeds"), ({"n_seeds": 2, "checkpoint": "x.npz"}, "n_seeds"),
    ({"stop": "nope"}, "stop must be one of"),
])
def test_bad_curation_arguments_name_the_argument(kwargs, message):
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((300, 4)), np.arange(300) % 2
    with pytest.raises(ValueError, match=message):
        aflite(X, y, target_size=100, train_size=0.5, progress=False, **kwargs)


def test_checkpoint_records_curation_only_when_given(tmp_path):
    X, y, _ = planted_cue()
    small = dict(RUN, n_partitions=8, max_removed=600)
    path = str(tmp_path / "run.npz")
    first = aflite(X, y, checkpoint=path, class_quota="prior", **small)
    again = aflite(X, y, checkpoint=path, class_quota="prior", **small)
    assert np.array_equal(first.keep, again.keep)
    with pytest.raises(ValueError, match="class_quota"):
        aflite(X, y, checkpoint=path, **small)
    settings = type("S", (), dict(target_size=1, n_partitions=2, train_size=0.5, slice_size=1, tau=0.75, C=1.0))
    spec = type("L", (), dict(name="ce", code=0, params=np.zeros(0)))
    assert loop._run_parameters(settings, spec, 0, 1e-4, 10, "row", None, 1, "paper") == loop._run_parameters(
        settings, spec, 0, 1e-4, 10, "row", None, 1, "paper", curation=loop._Curation())


# ---------------------------------------------------------------- f. command line and card


def test_filter_card_and_curation_flags(tmp_path, capsys):
    X, y, _ = planted_cue()
    X, y = X[:3000], y[:3000]
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    (tmp_path / "src.txt").write_text("\n".join(["web", "books"][i % 2] for i in range(3000)) + "\n")
    out = tmp_path / "out"
    argv = ["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(out), "--target-size", "1000",
            "--train-size", "0.5", "--n-partitions", "8", "--slice-size", "100", "--stop", "chance",
            "--margin", "0.02", "--max-removed", "0.1", "--class-quota", "prior",
            "--sources", str(tmp_path / "src.txt"), "--source-quota", "0.5", "--n-seeds", "2", "--card", "--quiet"]
    assert main(argv) == 0
    names = sorted(n for n in os.listdir(out) if not n.startswith("."))
    assert names == ["consensus_keep.npy", "dataset_card.md", "keep.npy", "removal_frequency.npy", "report.json",
                     "scores.npy"]
    assert os.path.islink(out / "dataset_card.md")  # inside the atomic output set
    report = json.loads((out / "report.json").read_text())
    assert report["parameters"]["stop"] == "chance" and report["parameters"]["class_quota"] == "prior"
    assert all("balanced_accuracy" in h["probe"] for h in report["history"])
    assert report["n_removed"] <= 300 and report["source_ids"] == ["books", "web"]
    assert len(report["seeds"]["jaccard"]) == 2
    card = (out / "dataset_card.md").read_text()
    assert "AFLite" in card and "Le Bras" in card and "@inproceedings" in card
    assert "| stop | chance |" in card and "| class_quota | prior |" in card and "| n_seeds | 2 |" in card
    kept, removed = report["class_counts"]["kept"], report["class_counts"]["removed"]
    for c in (0, 1):
        assert f"| {c} | {kept[c] + removed[c]} | {kept[c]} | {removed[c]} |" in card
    assert "| books |" in card and "Mean pairwise Jaccard" in card
    # a flag that needs another: exit 2, one line naming it
    assert main(argv[:5] + ["--target-size", "1000", "--train-size", "0.5", "--source-quota", "0.5"]) == 2
    assert "--source-quota needs --sources" in capsys.readouterr().err


def test_dataset_card_of_an_api_run_names_method_parameters_and_classes():
    data = make_biased_circles(1000, random_state=0)
    params = dict(target_size=500, train_size=0.5, n_partitions=8, slice_size=100, random_state=0)
    res = aflite(data.X, data.y, progress=False, **params)
    card = dataset_card(res, params)
    assert card.startswith("## Filtering with AFLite") and "Adversarial Filters of Dataset Biases" in card
    assert "| tau |" not in card and "| target_size | 500 |" in card and "One run, seed 0." in card
    for c, k, r in zip(res.classes, res.kept_per_class, res.removed_per_class):
        assert f"| {c} | {k + r} | {k} | {r} |" in card
    assert card.count("\n| ") - card.count("\n|---") >= len(res.history)


def test_card_with_the_verdict_and_filter_dataset_returns_it():
    datasets = pytest.importorskip("datasets")
    from aflite_fast import evaluate_filter, filter_dataset

    data = make_biased_circles(1000, random_state=1)
    source = np.where(np.arange(1000) % 3 == 0, "forum", "news")
    ds = datasets.Dataset.from_dict({"emb": list(data.X.astype(np.float32)), "label": data.y, "source": source})
    kw = dict(target_size=500, train_size=0.5, n_partitions=8, slice_size=100, random_state=0, progress=False)
    kept, result, card = filter_dataset(ds, "emb", "label", sources_column="source", card=True, **kw)
    assert len(kept) == result.keep.size and result.sources.tolist() == ["forum", "news"]
    assert "| sources_column | source |" in card and "| forum |" in card and "### Evaluation" not in card
    assert len(filter_dataset(ds, "emb", "label", **kw)) == 2  # without card=True: as before
    ev = evaluate_filter(data.X, data.y, result.keep, result=result, n_random=2, random_state=0)
    card = dataset_card(result, kw, evaluation=ev)
    assert f"Verdict: **{ev.verdict}**" in card and f"{ev.kept_balanced_accuracy:.3f}" in card


@pytest.mark.parametrize("flags, message", [
    (["--margin", "0.05"], "--margin applies to --stop chance"),
    (["--max-removed", "1.5"], "--max-removed"),
    (["--max-removed", "-2"], "--max-removed"),
    (["--class-quota", "equal"], "--class-quota"),
    (["--sources-header"], "--sources-header needs --sources FILE"),
    (["--n-seeds", "0"], "--n-seeds"),
    (["--n-seeds", "2", "--checkpoint", "run.npz"], "--n-seeds"),
])
def test_filter_curation_flag_errors_are_one_line_naming_the_flag(tmp_path, capsys, flags, message):
    rng = np.random.default_rng(0)
    np.save(tmp_path / "X.npy", rng.standard_normal((200, 4)).astype(np.float32))
    np.save(tmp_path / "y.npy", np.arange(200) % 2)
    argv = ["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "out"),
            "--target-size", "100", "--train-size", "0.5", "--quiet"] + flags
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "out" / "keep.npy").exists()


def test_report_figure_draws_the_probe_per_phase(tmp_path):
    pytest.importorskip("matplotlib")
    from aflite_fast.cli import _figure

    plt = _figure.require_matplotlib()
    probe = lambda a: dict(balanced_accuracy=a, chance=0.5, margin=0.02, class_accuracy=[a, a])  # noqa: E731
    history = [dict(phase=p, n_active=100 - 10 * p, n_above_tau=30, n_removed=10, score_hist=[1] * 20,
                    class_active=[60, 40], class_removed=[6, 4], probe=probe(a)) for p, a in enumerate((0.6, 0.55))]
    history.append(dict(history[-1], phase=2, n_removed=0, probe=probe(0.45), n_put_back=10))
    fig, ax = plt.subplots()
    _figure.chance_probe(ax, {"history": history})
    accuracy = ax.lines[0]
    assert list(accuracy.get_ydata()) == [0.6, 0.55, 0.45] and list(ax.lines[-1].get_xdata()) == [2]
    plt.close(fig)
    report = dict(history=history, parameters=dict(tau=0.75, target_size=50), n_kept=90, n_rows=100,
                  classes=[0, 1], class_counts=dict(kept=[54, 36], removed=[6, 4]))
    _figure.draw_report(report, tmp_path / "r.png")  # the panel joins the figure
    assert (tmp_path / "r.png").stat().st_size > 0
