"""A synthetic multiple-choice experiment beside the paper's (``aflite-fast synthetic --multiple-choice``).

a. Generate items (:func:`aflite_fast.experiments.synthetic_data.make_multiple_choice`): the right candidate
   lies on the inner of two rings (real signal that a linear scorer cannot read), and in a
   share of the items it also carries a planted artifact (a shifted feature a linear scorer
   reads).
b. Before and after AFLite (multiple-choice mode, linear scorers), on the same split of the
   items into training and test items: the artifact share among the items, the test
   accuracy of a linear scorer (the kernel's, softmax over the candidates) and of a
   non-linear one (scikit-learn's ``HistGradientBoostingClassifier`` on candidate rows,
   "is this the right candidate", the item's best candidate taken).
c. The same after every phase (:func:`phase_trajectory`), for the figure: the artifact
   share falls while the linear scorer's accuracy falls toward chance, 1/K, and the
   non-linear scorer's stays well above it.

:func:`run_multiple_choice` computes (no files); :func:`run_multiple_choice_experiment` also
writes ``table.csv``, ``table.md`` and ``figure.png`` into a directory as one set.
"""
import time
from dataclasses import dataclass, field

import numpy as np

from aflite_fast.experiments.synthetic_data import make_multiple_choice
from aflite_fast.io.atomic import OutputSet

__all__ = ["MultipleChoiceResult", "run_multiple_choice", "run_multiple_choice_experiment"]

TABLE_COLUMNS = (
    ("stage", "stage"),
    ("n_items", "items"),
    ("artifact_share", "artifact share"),
    ("linear_accuracy", "linear scorer acc"),
    ("nonlinear_accuracy", "non-linear scorer acc"),
    ("chance", "chance (1/K)"),
)


@dataclass
class MultipleChoiceResult:
    """Outcome of the experiment: the data, the kept items, the before/after table rows and
    the per-phase trajectory (``phase``: items, artifact share, linear accuracy)."""

    data: object
    keep: np.ndarray
    rows: list
    trajectory: list = field(default_factory=list)
    aflite_seconds: float = 0.0


def linear_accuracy(X, y, train, test, C=1.0, n_jobs=1):
    """Test accuracy of the kernel's linear scorer (softmax over the candidates) trained on
    the items ``train`` and predicting the items ``test``."""
    from aflite_fast.core import prediction, solver
    from aflite_fast.phase.multiple_choice import augment_items

    K, d = X.shape[1], X.shape[2]
    center = X[train].reshape(-1, d).mean(axis=0, dtype=np.float64).astype(np.float32)
    Xa = augment_items(X[train], center)
    coef, _ = solver.train_models(Xa, y[train].astype(np.int32), np.ones((train.size, 1), np.uint8), 1, C=C,
                                  group=K, n_free=1, precond="auto", n_threads=n_jobs)
    proba = prediction.predict_proba(augment_items(X[test], center), coef[0], n_threads=n_jobs, group=K)
    return float(np.mean(proba.argmax(axis=1) == y[test]))


def nonlinear_accuracy(X, y, train, test, seed=0):
    """Test accuracy of gradient-boosted trees scoring each candidate ("is it the right one")
    on its own features, the item's highest-scoring candidate taken."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    n, K, d = X.shape
    right = np.zeros((n, K), dtype=np.int64)
    right[np.arange(n), y] = 1
    model = HistGradientBoostingClassifier(random_state=seed)
    model.fit(X[train].reshape(-1, d), right[train].ravel())
    score = model.predict_proba(X[test].reshape(-1, d))[:, 1].reshape(test.size, K)
    return float(np.mean(score.argmax(axis=1) == y[test]))


def _split(items, test_size, seed):
    """Training and test items (sorted) of ``items``: a seeded random share ``test_size`` tested."""
    order = np.random.default_rng(seed).permutation(items)
    n_test = int(round(test_size * items.size))
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def _measure(data, items, split_seed, test_size, n_jobs, nonlinear=True):
    train, test = _split(items, test_size, split_seed)
    X, y = data.X, data.y
    return {
        "n_items": int(items.size),
        "artifact_share": float(data.has_artifact[items].mean()),
        "linear_accuracy": linear_accuracy(X, y, train, test, n_jobs=n_jobs),
        "nonlinear_accuracy": nonlinear_accuracy(X, y, train, test, split_seed) if nonlinear else float("nan"),
        "chance": 1.0 / X.shape[1],
    }


def phase_trajectory(data, result, split_seed, test_size=0.3, n_jobs=1):
    """Items, artifact share and linear scorer accuracy of the active items at the start of
    every phase of ``result`` (an :class:`~aflite_fast.filtering.loop.AFLiteResult`) and at the end."""
    active = np.ones(data.y.size, dtype=bool)
    out = []
    for phase in range(len(result.history) + 1):
        items = np.flatnonzero(active)
        m = _measure(data, items, split_seed, test_size, n_jobs, nonlinear=False)
        out.append(dict(phase=phase, **{k: m[k] for k in ("n_items", "artifact_share", "linear_accuracy")}))
        active[result.removed[result.removed_phase == phase]] = False
    return out


def run_multiple_choice(*, n_items=4000, n_candidates=4, separation=0.4, noise=0.1, n_spurious=4,
                        artifact_share=0.5, artifact_strength=3.0, target_fraction=0.3, train_fraction=0.2,
                        slice_fraction=0.02, n_partitions=64, tau=0.75, test_size=0.3, random_state=0,
                        n_jobs=None, progress=True):
    """Run the experiment (no files).

    Parameters
    ----------
    n_items, n_candidates, separation, noise, n_spurious, artifact_share, artifact_strength
        The data (:func:`aflite_fast.experiments.synthetic_data.make_multiple_choice`).
    target_fraction, train_fraction, slice_fraction : float
        AFLite's target size, training-set size and slice size as shares of the items.
    n_partitions, tau : AFLite's m and tau.
    test_size : float
        Share of the (full or kept) items held out to measure accuracy.
    random_state : int
        Seed of the data, AFLite and the splits; the result is a function of it alone.
    n_jobs : int or None
        Threads.
    progress : bool
        Show AFLite's progress bar.

    Returns
    -------
    MultipleChoiceResult
    """
    target_size = int(round(target_fraction * n_items))
    train_size = int(round(train_fraction * n_items))
    slice_size = max(1, int(round(slice_fraction * n_items)))
    if not 0 < train_size < target_size < n_items:
        raise ValueError(f"need 0 < train size < target size < items, got train {train_size}, target "
                         f"{target_size}, items {n_items}")
    from aflite_fast import aflite
    from aflite_fast.runtime.threads import effective_n_threads

    data_seed, aflite_seed, split_seed = (int(s) for s in np.random.default_rng(random_state).integers(
        0, 2**31 - 1, size=3))
    data = make_multiple_choice(n_items, n_candidates=n_candidates, separation=separation, noise=noise,
                                n_spurious=n_spurious, artifact_share=artifact_share,
                                artifact_strength=artifact_strength, random_state=data_seed)
    threads = effective_n_threads(n_jobs)
    start = time.perf_counter()
    res = aflite(data.X, data.y, target_size=target_size, n_partitions=n_partitions, train_size=train_size,
                 slice_size=slice_size, tau=tau, random_state=aflite_seed, n_jobs=n_jobs, progress=progress)
    seconds = time.perf_counter() - start
    keep = np.asarray(res.keep, dtype=np.int64)
    rows = [dict(stage="before", **_measure(data, np.arange(n_items), split_seed, test_size, threads)),
            dict(stage="after AFLite", **_measure(data, keep, split_seed, test_size, threads))]
    trajectory = phase_trajectory(data, res, split_seed, test_size, threads)
    return MultipleChoiceResult(data=data, keep=keep, rows=rows, trajectory=trajectory, aflite_seconds=seconds)


def _format(value):
    if isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    return f"{value:.3f}"


def table_csv(rows):
    lines = [",".join(key for key, _ in TABLE_COLUMNS)]
    lines += [",".join(_format(row[key]) for key, _ in TABLE_COLUMNS) for row in rows]
    return "\n".join(lines) + "\n"


def table_markdown(rows):
    lines = ["| " + " | ".join(title for _, title in TABLE_COLUMNS) + " |",
             "|" + "---|" * len(TABLE_COLUMNS)]
    lines += ["| " + " | ".join(_format(row[key]) for key, _ in TABLE_COLUMNS) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def plot_figure(result, path, *, dpi=90):
    """Artifact share and linear scorer accuracy of the active items, phase by phase, with the
    non-linear scorer's accuracy before and after and chance (1/K)."""
    from aflite_fast.experiments.synthetic import _require_matplotlib

    Figure, FigureCanvasAgg = _require_matplotlib()
    fig = Figure(figsize=(7.5, 3.6))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    tr = result.trajectory
    n = [t["n_items"] for t in tr]
    ax.plot(n, [t["artifact_share"] for t in tr], "o-", ms=3, label="artifact share among items")
    ax.plot(n, [t["linear_accuracy"] for t in tr], "s-", ms=3, label="linear scorer accuracy")
    before, after = result.rows
    ax.plot([before["n_items"], after["n_items"]], [before["nonlinear_accuracy"], after["nonlinear_accuracy"]],
            "D--", ms=5, label="non-linear scorer accuracy")
    ax.axhline(before["chance"], color="grey", lw=1, ls=":", label="chance (1/K)")
    ax.set_xlim(max(n) * 1.02, min(n) * 0.98)  # filtering runs left to right
    ax.set_ylim(0, 1)
    ax.set_xlabel("items remaining (AFLite phases, left to right)")
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.set_title(f"Synthetic multiple choice, K={result.data.X.shape[1]}: AFLite with linear scorers", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, format="png")


def run_multiple_choice_experiment(out_dir, *, plot=True, **kwargs):
    """Run the experiment and write ``table.csv``, ``table.md`` and (``plot``) ``figure.png``
    into ``out_dir`` together (:class:`aflite_fast.io.atomic.OutputSet`); kwargs go to
    :func:`run_multiple_choice`."""
    if plot:
        from aflite_fast.experiments.synthetic import _require_matplotlib

        _require_matplotlib()
    names = ["table.csv", "table.md"] + (["figure.png"] if plot else [])
    with OutputSet(out_dir, names) as out:
        result = run_multiple_choice(**kwargs)
        out.save_text("table.csv", table_csv(result.rows))
        out.save_text("table.md", table_markdown(result.rows))
        if plot:
            out.write("figure.png", lambda path: plot_figure(result, path))
    return result
