"""``aflite-fast demo``: AFLite on the built-in synthetic biased dataset, before/after table.

The data are the paper's section-3 construction (:mod:`aflite_fast.experiments.synthetic_data`): two
concentric circles (not linearly separable) plus class-correlated spurious Gaussian
features on 75% of the rows.  A linear model scores well only through the spurious
features; AFLite should remove the rows carrying them, and the linear model's accuracy on
what is left should fall toward chance.
"""
import time
from argparse import RawDescriptionHelpFormatter

from aflite_fast.cli._args import add_flag, cap_threads, positive_int

#: Library parameter names -> this command's flags, for error messages.
PARAMETER_FLAGS = {"n_jobs": "--n-jobs", "n_samples": "--n-samples", "random_state": "--seed"}


_DESCRIPTION = """\
Run AFLite on the built-in synthetic biased dataset and print a before/after table. The data
are the construction of the paper's section 3: two concentric circles (not linearly separable)
plus class-correlated spurious Gaussian features on 75% of the rows. A linear model scores well
only through the spurious features; AFLite should remove the rows carrying them, and the linear
model's accuracy on what is left should fall toward chance.
"""


def add_parser(subparsers):
    p = subparsers.add_parser(
        "demo", help="run AFLite on built-in synthetic biased data and print a before/after table",
        description=_DESCRIPTION, formatter_class=RawDescriptionHelpFormatter)
    p.add_argument("--n-samples", type=int, default=6000, help="rows (default 6000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    add_flag(p, "--n-jobs", "--threads", type=positive_int, default=None, metavar="N",
                   help="threads, capped at the available cores (default: all cores)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def linear_accuracy(X, y, n_jobs=None, n_folds=5):
    """Cross-validated accuracy of logistic regression (C=1), on the package's own kernel.

    Folds are stratified: the rows of each class, in order, go to folds in turn.  The models
    are scikit-learn's ``LogisticRegression()`` optimum (the kernel converges to it), without
    importing scikit-learn, which would cost this command about a second."""
    import numpy as np

    from aflite_fast.filtering.oof import oof_predict_proba

    y = np.asarray(y)
    fold = np.empty(y.size, dtype=np.int64)
    for c in np.unique(y):
        rows = np.flatnonzero(y == c)
        fold[rows] = np.arange(rows.size) % n_folds
    folds = [(np.flatnonzero(fold != f), np.flatnonzero(fold == f)) for f in range(n_folds)]
    proba = oof_predict_proba(X, y, cv=folds, n_jobs=n_jobs)
    return float(np.mean(np.unique(y)[proba.argmax(axis=1)] == y))


def demo_table(n_samples=6000, seed=0, n_jobs=None, progress=True):
    """Run the demo; return (measures, AFLiteResult, seconds).

    ``measures`` maps each measure's name to its (before, after) values.
    """
    import numpy as np

    from aflite_fast.experiments.synthetic_data import make_biased_circles
    from aflite_fast.filtering.loop import aflite

    if n_samples < 200:
        raise ValueError(f"--n-samples must be at least 200, got {n_samples}")
    data = make_biased_circles(n_samples, separation=0.3, random_state=seed)
    X, y = data.X, data.y
    start = time.perf_counter()
    result = aflite(X, y, target_size=n_samples // 4, n_partitions=64, train_size=0.5,
                    slice_size=max(1, n_samples // 20), tau=0.75, random_state=seed,
                    n_jobs=n_jobs, progress=progress)
    seconds = time.perf_counter() - start
    keep = result.keep
    measures = {
        "rows": (len(y), keep.size),
        "share with spurious feature": (data.is_biased.mean(), data.is_biased[keep].mean()),
        "linear model accuracy (5-fold CV)": (linear_accuracy(X, y, n_jobs),
                                              linear_accuracy(X[keep], y[keep], n_jobs)),
        "majority class share": (np.bincount(y).max() / len(y), np.bincount(y[keep]).max() / keep.size),
    }
    return measures, result, seconds


def run(args):
    threads = cap_threads(args.n_jobs, "aflite-fast demo", args.quiet)
    measures, result, seconds = demo_table(args.n_samples, args.seed, threads, not args.quiet)
    width = max(len(name) for name in measures)
    print(f"AFLite demo: circles + spurious features on 75% of rows "
          f"({len(result.history)} phases, {seconds:.1f} s; stopped: {result.stop_reason})")
    print(f"{'':{width}}  {'before':>8}  {'after':>8}")
    for name, values in measures.items():
        before, after = (f"{v}" if name == "rows" else f"{v:.1%}" for v in values)
        print(f"{name:{width}}  {before:>8}  {after:>8}")
    return 0
