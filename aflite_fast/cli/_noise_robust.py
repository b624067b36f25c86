"""``aflite-fast noise-robust``: noise-robust losses vs cross-entropy under label noise."""
import time

from aflite_fast.cli._args import add_flag, cap_threads, positive_int

__all__ = ["add_parser", "run"]

#: Library parameter names -> this command's flags, for error messages.
PARAMETER_FLAGS = {"n_jobs": "--n-jobs", "max_iter": "--max-iter", "max_train": "--max-train",
                   "n_seeds": "--seeds"}

_DESCRIPTION = """\
Compare the kernel's losses (ce, gce, gce_trunc, mae, sce, forward with the true noise
matrix) as linear models on raw pixels, trained on labels with synthetic noise (uniform
0/20/40/60%, pair-flip 40%) and scored on clean test labels, as in Zhang & Sabuncu
(NeurIPS 2018). Datasets: scikit-learn's bundled digits; Fashion-MNIST from the Debian
package dataset-fashion-mnist. Writes DIR/table.csv, DIR/table.md and DIR/figure.png (the
figure needs matplotlib: pip install '.[plots]' in a clone of the repository).
"""


def _setting(text):
    import argparse

    try:
        kind, rate = text.split(":")
        return kind, float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected KIND:RATE such as uniform:0.4, got {text!r}")


def add_parser(subparsers):
    """Register the ``noise-robust`` subcommand.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The object returned by ``ArgumentParser.add_subparsers()``.

    Returns
    -------
    parser : argparse.ArgumentParser
        The subcommand's parser; its default ``func`` is :func:`run`.
    """
    from aflite_fast.core.loss_names import LOSS_NAMES
    from aflite_fast.experiments._names import DATASETS, FASHION_MNIST_DIR

    p = subparsers.add_parser(
        "noise-robust",
        help="noise-robust losses vs CE on digits / Fashion-MNIST with label noise: table and plot",
        description=_DESCRIPTION,
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created)")
    p.add_argument("--datasets", nargs="+", choices=DATASETS, default=["digits"],
                   help="datasets (default: digits)")
    p.add_argument("--seeds", type=int, default=5, help="repetitions, seeds 0..N-1 (default 5)")
    p.add_argument("--losses", nargs="+", choices=LOSS_NAMES, default=None,
                   help="losses to compare (default: all)")
    p.add_argument("--noise", nargs="+", type=_setting, default=None, metavar="KIND:RATE",
                   help="noise settings (default: uniform:0 uniform:0.2 uniform:0.4 uniform:0.6 "
                        "pairflip:0.4)")
    p.add_argument("--C", type=float, default=1.0, help="inverse L2 strength, every loss (default 1)")
    p.add_argument("--max-train", type=int, default=None,
                   help="stratified subsample of at most this many training rows per seed")
    p.add_argument("--fashion-mnist-dir", default=FASHION_MNIST_DIR,
                   help=f"directory of the Fashion-MNIST IDX files (default {FASHION_MNIST_DIR})")
    p.add_argument("--max-iter", type=int, default=1000, help="L-BFGS steps per fit (default 1000)")
    add_flag(p, "--n-jobs", "--threads", type=positive_int, default=None, metavar="N",
             help="threads, capped at the available cores (default: all cores); results do not depend on it")
    p.add_argument("--no-plot", action="store_true", help="write only the tables, no figure")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.set_defaults(func=run)
    return p


def run(args):
    """Run the ``noise-robust`` subcommand.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed arguments from the parser built by :func:`add_parser`.

    Returns
    -------
    status : int
        0 on success.  Invalid arguments, missing data and a missing optional dependency
        raise ValueError or ImportError, which ``aflite_fast.cli.main`` turns into exit code 2.
    """
    from aflite_fast.experiments.noise_robust import (
        DEFAULT_LOSSES,
        DEFAULT_SETTINGS,
        run_noise_robust_experiment,
        table_markdown,
    )

    losses = DEFAULT_LOSSES
    if args.losses:
        known = dict(DEFAULT_LOSSES)
        losses = tuple((name, known.get(name, {})) for name in args.losses)
    start = time.perf_counter()
    rows = run_noise_robust_experiment(
        args.out, plot=not args.no_plot, datasets=tuple(args.datasets),
        settings=tuple(args.noise) if args.noise else DEFAULT_SETTINGS, losses=losses,
        n_seeds=args.seeds, C=args.C, max_train=args.max_train,
        data_dir=args.fashion_mnist_dir, max_iter=args.max_iter,
        n_jobs=cap_threads(args.n_jobs, "aflite-fast noise-robust", args.quiet),
        progress=not args.quiet)
    if not args.quiet:
        written = "table.csv, table.md" + ("" if args.no_plot else ", figure.png")
        print(table_markdown(rows), end="")
        print(f"wrote {written} to {args.out} ({len(rows)} rows, "
              f"{time.perf_counter() - start:.1f} s)")
    return 0
