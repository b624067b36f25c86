"""``aflite-fast synthetic``: the paper's section-3 experiment (Figure 2, Table 7) to files."""

import time

from ._args import add_flag, cap_threads, positive_int

__all__ = ["add_parser", "run"]

#: Library parameter names -> this command's flags, for error messages.
PARAMETER_FLAGS = {"n_jobs": "--n-jobs", "n_samples": "--n-samples", "n_partitions": "--n-partitions",
                   "tau": "--tau"}

_DESCRIPTION = """\
Reproduce the synthetic experiment of Le Bras et al. (ICML 2020, section 3): concentric
circles at four separation levels with class-specific spurious features on 75% of each
class (labels of some biased rows flipped in the most separated set). For each level, fit
logistic regression and an RBF SVM before and after AFLite and write DIR/table.csv,
DIR/table.md and DIR/figure.png (the figure needs matplotlib: pip install '.[plots]' in a clone of the repository).
"""


def add_parser(subparsers):
    """Register the ``synthetic`` subcommand.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The object returned by ``ArgumentParser.add_subparsers()``.

    Returns
    -------
    parser : argparse.ArgumentParser
        The subcommand's parser; its default ``func`` is :func:`run`.
    """
    p = subparsers.add_parser(
        "synthetic",
        help="paper's synthetic experiment (circles + planted bias): table and figure",
        description=_DESCRIPTION,
    )
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created)")
    p.add_argument("--n-samples", type=int, default=5000, help="rows per dataset (default 5000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument(
        "--separations",
        type=float,
        nargs="+",
        default=None,
        metavar="S",
        help="separation levels, most separated first (default 0.5 0.3 0.2 0.1)",
    )
    p.add_argument("--n-spurious", type=int, default=4, help="spurious feature columns (default 4)")
    p.add_argument(
        "--spurious-strength",
        type=float,
        default=4.0,
        help="distance between the class means of the spurious features, in SDs (default 4)",
    )
    p.add_argument(
        "--bias-share", type=float, default=0.75, help="biased share of each class (default 0.75)"
    )
    p.add_argument(
        "--flip-rate",
        type=float,
        default=0.1,
        help="share of biased rows flipped in the most separated set (default 0.1)",
    )
    p.add_argument(
        "--target-fraction",
        type=float,
        default=0.25,
        help="AFLite target size as a share of the rows (default 0.25)",
    )
    p.add_argument(
        "--train-fraction",
        type=float,
        default=0.2,
        help="AFLite training-set size as a share of the rows (default 0.2)",
    )
    p.add_argument(
        "--slice-fraction",
        type=float,
        default=0.02,
        help="AFLite slice size as a share of the rows (default 0.02)",
    )
    add_flag(p, "--n-partitions", "--partitions", type=int, default=64, metavar="M",
             help="AFLite partitions (default 64)")
    p.add_argument("--tau", type=float, default=0.75, help="AFLite threshold (default 0.75)")
    add_flag(p, "--n-jobs", "--threads", type=positive_int, default=None, metavar="N",
             help="threads, capped at the available cores (default: all cores); results do not depend on it")
    p.add_argument("--no-plot", action="store_true", help="write only the tables, no figure")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.set_defaults(func=run)
    return p


def run(args):
    """Run the ``synthetic`` subcommand.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed arguments from the parser built by :func:`add_parser`.

    Returns
    -------
    status : int
        0 on success.  Invalid arguments and a missing optional dependency raise
        ValueError or ImportError, which ``aflite_fast.cli.main`` turns into exit code 2.
    """
    from ..experiments.synthetic import run_synthetic_experiment, table_markdown

    start = time.perf_counter()
    results = run_synthetic_experiment(
        args.out,
        plot=not args.no_plot,
        n_samples=args.n_samples,
        separations=args.separations,
        n_spurious=args.n_spurious,
        bias_share=args.bias_share,
        spurious_strength=args.spurious_strength,
        flip_rate=args.flip_rate,
        target_fraction=args.target_fraction,
        train_fraction=args.train_fraction,
        slice_fraction=args.slice_fraction,
        n_partitions=args.n_partitions,
        tau=args.tau,
        random_state=args.seed,
        n_jobs=cap_threads(args.n_jobs, "aflite-fast synthetic", args.quiet),
        progress=not args.quiet,
    )
    if not args.quiet:
        written = "table.csv, table.md" + ("" if args.no_plot else ", figure.png")
        print(table_markdown([r.row for r in results]), end="")
        print(
            f"wrote {written} to {args.out} "
            f"({len(results)} levels, {time.perf_counter() - start:.1f} s)"
        )
    return 0
