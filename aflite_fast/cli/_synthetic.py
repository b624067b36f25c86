"""``aflite-fast synthetic``: the paper's section-3 experiment (Figure 2, Table 7) to files."""

import time

from aflite_fast.cli._args import add_flag, cap_threads, positive_int

__all__ = ["add_parser", "run"]

#: Library parameter names -> this command's flags, for error messages.
PARAMETER_FLAGS = {"n_jobs": "--n-jobs", "n_samples": "--n-samples", "n_partitions": "--n-partitions",
                   "tau": "--tau", "n_items": "--n-samples", "n_candidates": "--n-candidates",
                   "artifact_share": "--artifact-share", "artifact_strength": "--spurious-strength"}

_DESCRIPTION = """\
Reproduce the synthetic experiment of Le Bras et al. (ICML 2020, section 3): concentric
circles at four separation levels with class-specific spurious features on 75% of each
class (labels of some biased rows flipped in the most separated set). For each level, fit
logistic regression and an RBF SVM before and after AFLite and write DIR/table.csv,
DIR/table.md and DIR/figure.png (the figure needs matplotlib: pip install '.[plots]' in a clone of the repository).

With --multiple-choice: the multiple-choice experiment instead (docs/multiple_choice.md):
items of K candidates whose right one lies on the inner of two rings (a signal a linear
scorer cannot read), a planted artifact on the right candidate of --artifact-share of them;
AFLite with linear scorers; artifact share, linear and non-linear scorer accuracy before and
after, and the same phase by phase in the figure.
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
    p.add_argument("--n-samples", type=int, default=None,
                   help="rows per dataset (default 5000; items with --multiple-choice, default 4000)")
    p.add_argument("--multiple-choice", action="store_true",
                   help="run the multiple-choice experiment instead (see above)")
    p.add_argument("--n-candidates", type=int, default=4, metavar="K",
                   help="candidates per item with --multiple-choice (default 4)")
    p.add_argument("--artifact-share", type=float, default=0.5,
                   help="share of items whose right candidate carries the artifact, with "
                        "--multiple-choice (default 0.5)")
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
        default=None,
        help="distance between the class means of the spurious features, in SDs (default 4); with "
             "--multiple-choice the shift of the artifact feature (default 3)",
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
        default=None,
        help="AFLite target size as a share of the rows (default 0.25; 0.3 with --multiple-choice)",
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
    if args.multiple_choice:
        return _run_multiple_choice(args)
    for flag, given in (("--n-candidates", args.n_candidates != 4), ("--artifact-share", args.artifact_share != 0.5)):
        if given:
            raise ValueError(f"{flag} applies to --multiple-choice only")
    from aflite_fast.experiments.synthetic import run_synthetic_experiment, table_markdown

    start = time.perf_counter()
    results = run_synthetic_experiment(
        args.out,
        plot=not args.no_plot,
        n_samples=5000 if args.n_samples is None else args.n_samples,
        separations=args.separations,
        n_spurious=args.n_spurious,
        bias_share=args.bias_share,
        spurious_strength=4.0 if args.spurious_strength is None else args.spurious_strength,
        flip_rate=args.flip_rate,
        target_fraction=0.25 if args.target_fraction is None else args.target_fraction,
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


def _run_multiple_choice(args):
    """``synthetic --multiple-choice``: :func:`aflite_fast.experiments.multiple_choice.run_multiple_choice_experiment`."""
    for flag, given in (("--separations", args.separations is not None), ("--flip-rate", args.flip_rate != 0.1),
                        ("--bias-share", args.bias_share != 0.75)):
        if given:
            raise ValueError(f"{flag} does not apply to --multiple-choice (see --artifact-share)")
    from aflite_fast.experiments.multiple_choice import run_multiple_choice_experiment, table_markdown

    start = time.perf_counter()
    result = run_multiple_choice_experiment(
        args.out, plot=not args.no_plot, n_items=4000 if args.n_samples is None else args.n_samples,
        n_candidates=args.n_candidates, n_spurious=args.n_spurious, artifact_share=args.artifact_share,
        artifact_strength=3.0 if args.spurious_strength is None else args.spurious_strength,
        target_fraction=0.3 if args.target_fraction is None else args.target_fraction,
        train_fraction=args.train_fraction, slice_fraction=args.slice_fraction, n_partitions=args.n_partitions,
        tau=args.tau, random_state=args.seed,
        n_jobs=cap_threads(args.n_jobs, "aflite-fast synthetic", args.quiet), progress=not args.quiet)
    if not args.quiet:
        written = "table.csv, table.md" + ("" if args.no_plot else ", figure.png")
        print(table_markdown(result.rows), end="")
        print(f"wrote {written} to {args.out} ({time.perf_counter() - start:.1f} s)")
    return 0
