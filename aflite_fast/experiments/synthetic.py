"""The synthetic experiment of the AFLite paper (section 3, Figure 2, Table 7).

For each separation level of the concentric-circles data (:mod:`aflite_fast.experiments.synthetic_data`):

a. generate one dataset (the most separated one with flipped labels, as in the paper);
b. fit scikit-learn's ``LogisticRegression`` and an RBF ``SVC`` on a stratified train/test
   split of the full data and record test accuracy ("before");
c. run AFLite on the full data, split the kept rows the same way, fit again ("after");
d. record the share of biased rows before and after, and the share of flipped rows removed.

Two reference numbers come with each level, fitted on the ring coordinates alone (no
spurious features): what a linear model and the RBF SVM can reach from the true 2-D signal.
AFLite should push the linear model's accuracy toward its reference, and leave the SVM well
above the linear model.

:func:`run_synthetic_levels` computes (no files); :func:`run_synthetic_experiment` also
writes ``table.csv``, ``table.md`` and ``figure.png`` into a directory as one set: staged
and switched in together (:class:`aflite_fast.io.atomic.OutputSet`), so no half-written or
mixed output is ever left behind.
"""

import csv
import io
import time
from dataclasses import dataclass

import numpy as np

from aflite_fast.experiments.synthetic_data import make_biased_circles, separation_levels
from aflite_fast.io.atomic import OutputSet

__all__ = ["SyntheticLevelResult", "run_synthetic_levels", "run_synthetic_experiment"]

# Columns of table.csv, in order, with the header used in table.md.
TABLE_COLUMNS = (
    ("separation", "separation"),
    ("n_rows", "rows"),
    ("n_kept", "kept"),
    ("n_phases", "phases"),
    ("lr_before", "LR acc before"),
    ("lr_after", "LR acc after"),
    ("lr_circles", "LR acc, rings only"),
    ("svm_before", "SVM acc before"),
    ("svm_after", "SVM acc after"),
    ("svm_circles", "SVM acc, rings only"),
    ("biased_share_before", "biased share before"),
    ("biased_share_after", "biased share after"),
    ("biased_removed", "biased rows removed"),
    ("flipped_removed", "flipped rows removed"),
    ("aflite_seconds", "AFLite s"),
)


@dataclass
class SyntheticLevelResult:
    """Outcome of the experiment at one separation level.

    Attributes
    ----------
    data : SyntheticData
        The generated dataset (see :func:`aflite_fast.experiments.synthetic_data.make_biased_circles`).
    keep : ndarray of int64
        Sorted indices of the rows AFLite kept.
    row : dict
        The table row: the keys of ``TABLE_COLUMNS``; accuracies and shares are floats in
        [0, 1], ``flipped_removed`` is NaN when the dataset has no flipped rows.
    """

    data: object
    keep: np.ndarray
    row: dict


def _require_matplotlib():
    """Import matplotlib's Agg canvas and Figure, or fail with a message that says what to do.

    The object-oriented API renders with Agg without touching pyplot or the process-wide
    backend, so running the experiment inside a notebook leaves the user's backend alone.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            "the synthetic experiment's figure needs matplotlib, an optional dependency: "
            "install it with `pip install matplotlib` (or pass plot=False / "
            "--no-plot to write only the tables)"
        ) from exc
    return Figure, FigureCanvasAgg


def _split_accuracy(model, X, y, seed, test_size):
    """Test accuracy of ``model`` on a stratified split of (X, y), or NaN if it cannot split."""
    from sklearn.base import clone
    from sklearn.model_selection import train_test_split

    counts = np.bincount(y, minlength=2)
    # A stratified split needs two rows of each class, and a classifier needs two classes.
    if counts.min() < 2:
        return float("nan")
    X_tr, X_te, y_tr, y_te = train_test_split(
        X, y, test_size=test_size, random_state=seed, stratify=y
    )
    return float(clone(model).fit(X_tr, y_tr).score(X_te, y_te))


def _models():
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC

    # scikit-learn defaults, as the paper ("standard implementations from scikit-learn").
    return LogisticRegression(C=1.0), SVC(kernel="rbf", C=1.0, gamma="scale")


def _aflite_sizes(n_rows, target_fraction, train_fraction, slice_fraction):
    """Absolute AFLite sizes from fractions of the dataset, validated against each other."""
    target_size = int(round(target_fraction * n_rows))
    train_size = int(round(train_fraction * n_rows))
    slice_size = max(1, int(round(slice_fraction * n_rows)))
    if not 0 < train_size < target_size < n_rows:
        raise ValueError(
            "need 0 < train size < target size < rows, got train "
            f"{train_size}, target {target_size}, rows {n_rows} (train_fraction="
            f"{train_fraction}, target_fraction={target_fraction})"
        )
    return target_size, train_size, slice_size


def run_synthetic_levels(
    *,
    n_samples=5000,
    separations=None,
    noise=0.1,
    n_spurious=4,
    bias_share=0.75,
    spurious_strength=4.0,
    flip_rate=0.1,
    target_fraction=0.25,
    train_fraction=0.2,
    slice_fraction=0.02,
    n_partitions=64,
    tau=0.75,
    test_size=0.3,
    random_state=0,
    n_jobs=None,
    progress=True,
):
    """Run the experiment at every separation level and return the results (no files).

    Parameters
    ----------
    n_samples : int, default=5000
        Rows per dataset.
    separations : sequence of float or None, default=None
        Separation levels, most separated first; None uses
        :func:`aflite_fast.experiments.synthetic_data.separation_levels`. Only the first level gets flipped
        labels, as in the paper.
    noise, n_spurious, bias_share, spurious_strength : see ``make_biased_circles``
        Generator parameters shared by all levels.
    flip_rate : float, default=0.1
        Share of biased rows whose label is flipped in the first (most separated) dataset.
    target_fraction : float, default=0.25
        AFLite's target size as a share of the rows. The default equals the share of rows
        without planted bias (1 - ``bias_share``): the size an ideal filter would keep.
    train_fraction : float, default=0.2
        AFLite's per-partition training-set size as a share of the rows; must be below
        ``target_fraction`` so that a training set always fits in the remaining data.
    slice_fraction : float, default=0.02
        AFLite's slice size (rows removed per phase at most) as a share of the rows.
    n_partitions : int, default=64
        AFLite's number of random partitions per phase.
    tau : float, default=0.75
        AFLite's predictability threshold.
    test_size : float, default=0.3
        Share of the (full or filtered) data held out to measure accuracy.
    random_state : int or None, default=0
        Seed for data, AFLite and splits; the results are a function of it alone.
    n_jobs : int or None, default=None
        Threads for AFLite.
    progress : bool, default=True
        Show a tqdm progress bar over the levels.

    Returns
    -------
    results : list of SyntheticLevelResult
        One per separation level, in the order of ``separations``.
    """
    # Validate before importing the compiled package, so a bad argument is reported first.
    target_size, train_size, slice_size = _aflite_sizes(
        n_samples, target_fraction, train_fraction, slice_fraction
    )
    if separations is None:
        separations = separation_levels()
    separations = [float(s) for s in separations]
    if not separations or not all(0.0 < s < 1.0 for s in separations):
        raise ValueError(f"separations must be one or more values in (0, 1), got {separations}")

    from tqdm.auto import tqdm

    from aflite_fast import aflite
    # Independent streams for each level's data, AFLite run and splits, from one seed.
    seeds = np.random.default_rng(random_state).integers(0, 2**31 - 1, size=(len(separations), 3))
    lr, svm = _models()

    results = []
    bar = tqdm(separations, desc="synthetic", unit="level", disable=not progress)
    for i, sep in enumerate(bar):
        data_seed, aflite_seed, split_seed = (int(s) for s in seeds[i])
        data = make_biased_circles(
            n_samples,
            separation=sep,
            noise=noise,
            n_spurious=n_spurious,
            bias_share=bias_share,
            spurious_strength=spurious_strength,
            flip_rate=flip_rate if i == 0 else 0.0,
            random_state=data_seed,
        )
        X, y = data.X, data.y
        rings = X[:, :2]

        bar.set_postfix_str(f"sep={sep:g} aflite")
        start = time.perf_counter()
        res = aflite(
            X,
            y,
            target_size=target_size,
            n_partitions=n_partitions,
            train_size=train_size,
            slice_size=slice_size,
            tau=tau,
            random_state=aflite_seed,
            n_jobs=n_jobs,
            progress=False,
        )
        seconds = time.perf_counter() - start
        keep = np.asarray(res.keep, dtype=np.int64)

        bar.set_postfix_str(f"sep={sep:g} fit")
        n_flipped = int(data.is_flipped.sum())
        n_biased = int(data.is_biased.sum())
        row = {
            "separation": sep,
            "n_rows": len(y),
            "n_kept": len(keep),
            "n_phases": len(res.history),
            "lr_before": _split_accuracy(lr, X, y, split_seed, test_size),
            "lr_after": _split_accuracy(lr, X[keep], y[keep], split_seed, test_size),
            "lr_circles": _split_accuracy(lr, rings, y, split_seed, test_size),
            "svm_before": _split_accuracy(svm, X, y, split_seed, test_size),
            "svm_after": _split_accuracy(svm, X[keep], y[keep], split_seed, test_size),
            "svm_circles": _split_accuracy(svm, rings, y, split_seed, test_size),
            "biased_share_before": float(data.is_biased.mean()),
            "biased_share_after": float(data.is_biased[keep].mean()) if len(keep) else float("nan"),
            "biased_removed": (
                1.0 - int(data.is_biased[keep].sum()) / n_biased if n_biased else float("nan")
            ),
            "flipped_removed": (
                1.0 - int(data.is_flipped[keep].sum()) / n_flipped if n_flipped else float("nan")
            ),
            "aflite_seconds": seconds,
        }
        results.append(SyntheticLevelResult(data=data, keep=keep, row=row))
    bar.close()
    return results


def _format(key, value):
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if np.isnan(value):
        return "-" if key == "flipped_removed" else "nan"
    if key == "separation":
        return f"{value:g}"
    if key == "aflite_seconds":
        return f"{value:.1f}"
    return f"{value:.3f}"


def table_csv(rows):
    """Render table rows as CSV text (full precision; empty cell for a missing value).

    Parameters
    ----------
    rows : list of dict
        The ``row`` of each :class:`SyntheticLevelResult`.

    Returns
    -------
    text : str
        A header line with the keys of ``TABLE_COLUMNS``, then one line per row.
    """
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([key for key, _ in TABLE_COLUMNS])
    for row in rows:
        cells = []
        for key, _ in TABLE_COLUMNS:
            value = row[key]
            is_missing = isinstance(value, float) and np.isnan(value)
            # float() first: repr of a NumPy scalar is "np.float64(...)" under NumPy 2.
            if is_missing:
                cells.append("")
            else:
                cells.append(repr(float(value)) if isinstance(value, float) else value)
        writer.writerow(cells)
    return buf.getvalue()


def table_markdown(rows):
    """Render table rows as a Markdown table (accuracies and shares to three decimals).

    Parameters
    ----------
    rows : list of dict
        The ``row`` of each :class:`SyntheticLevelResult`.

    Returns
    -------
    text : str
        The table, with the readable headers of ``TABLE_COLUMNS``; "-" marks a level
        without flipped rows.
    """
    lines = [
        "| " + " | ".join(header for _, header in TABLE_COLUMNS) + " |",
        "|" + "---:|" * len(TABLE_COLUMNS),
    ]
    for row in rows:
        lines.append("| " + " | ".join(_format(k, row[k]) for k, _ in TABLE_COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def plot_figure(results, path, *, dpi=90):
    """Draw the paper's Figure 2: rings before (top) and after AFLite (bottom), per level.

    Parameters
    ----------
    results : list of SyntheticLevelResult
        Output of :func:`run_synthetic_levels`.
    path : str or path-like
        Where to save the PNG (written as given; the caller stages it, see :class:`aflite_fast.io.atomic.OutputSet`).
    dpi : int, default=90
        Resolution of the saved figure.
    """
    Figure, FigureCanvasAgg = _require_matplotlib()
    n = len(results)
    fig = Figure(figsize=(3.4 * n, 7.0))
    FigureCanvasAgg(fig)  # attaches itself to the figure; savefig renders through it
    axes = fig.subplots(2, n, squeeze=False)
    colors = np.array(["#1f77b4", "#ff7f0e"])  # label 0 (outer ring), label 1 (inner ring)
    for j, res in enumerate(results):
        X, y, row = res.data.X, res.data.y, res.row
        for i, (rows, lr, svm) in enumerate(
            (
                (np.arange(len(y)), row["lr_before"], row["svm_before"]),
                (res.keep, row["lr_after"], row["svm_after"]),
            )
        ):
            ax = axes[i, j]
            ax.scatter(X[rows, 0], X[rows, 1], c=colors[y[rows]], s=2, linewidths=0)
            ax.set_aspect("equal")
            ax.set_xlim(-1.5, 1.5)
            ax.set_ylim(-1.5, 1.5)
            ax.set_xticks([])
            ax.set_yticks([])
            stage = "before" if i == 0 else "after AFLite"
            ax.set_title(
                f"sep {row['separation']:g}, {stage} (n={len(rows)})\n"
                f"LR {lr:.2f} | SVM {svm:.2f}",
                fontsize=9,
            )
    fig.suptitle(
        "Concentric circles with planted spurious features (colour = label); "
        "test accuracy of logistic regression and RBF SVM",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, format="png")


def run_synthetic_experiment(out_dir, *, plot=True, **kwargs):
    """Run the experiment and write ``table.csv``, ``table.md`` and ``figure.png``.

    Parameters
    ----------
    out_dir : str or path-like
        Output directory; created if missing. The files appear together once all are complete
        (see :class:`aflite_fast.io.atomic.OutputSet`).
    plot : bool, default=True
        Also write ``figure.png`` (needs matplotlib, the ``plots`` extra).
    **kwargs
        Passed to :func:`run_synthetic_levels`.

    Returns
    -------
    results : list of SyntheticLevelResult
        As returned by :func:`run_synthetic_levels`.

    Raises
    ------
    ImportError
        If ``plot`` is true and matplotlib is missing (checked before any work is done).
    ValueError
        If ``out_dir`` is an existing file, or a parameter is invalid (also checked first).
    """
    if plot:
        _require_matplotlib()
    names = ["table.csv", "table.md"] + (["figure.png"] if plot else [])
    # Entered before the work: an unusable out_dir fails in a second, not after minutes of
    # filtering; the files appear together, or not at all (aflite_fast.io.atomic).
    with OutputSet(out_dir, names) as out:
        results = run_synthetic_levels(**kwargs)
        rows = [r.row for r in results]
        out.save_text("table.csv", table_csv(rows))
        out.save_text("table.md", table_markdown(rows))
        if plot:
            out.write("figure.png", lambda path: plot_figure(results, path))
    return results
