"""``aflite-fast filter EMB.npy LABELS --out DIR``: AFLite on an embedding file."""
import os
import sys
import time


from .. import __version__
from ..algorithm import aflite
from ..data import open_embeddings, read_labels_file
from ..groups import REMOVE_MODES
from ..losses import LOSS_NAMES
from ..null import STOP_RULES
from ._output import AtomicOutputDir


def train_size_arg(text):
    """An int (rows) or a float in (0, 1) (fraction of the active rows)."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"--train-size must be an integer or a fraction, got {text!r}") from None


def add_parser(subparsers):
    p = subparsers.add_parser(
        "filter", help="filter an embedding file (.npy) with AFLite",
        description="Run AFLite on EMB.npy (N x d, float16/float32, memory-mapped) with LABELS "
                    "(.npy, or a text/CSV file with one label per line) and write DIR/keep.npy "
                    "(sorted kept row indices), DIR/scores.npy (last predictability score per row, "
                    "NaN where never scored) and DIR/report.json.")
    p.add_argument("embeddings", metavar="EMB.npy")
    p.add_argument("labels", metavar="LABELS")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--target-size", type=int, required=True, help="n: never keep fewer rows")
    p.add_argument("--partitions", type=int, default=64, help="m: models per phase (default 64)")
    p.add_argument("--train-size", type=train_size_arg, required=True,
                   help="t: training rows per model, or a fraction in (0, 1) of the active rows")
    p.add_argument("--slice-size", type=int, default=500, help="k: rows removed per phase (default 500)")
    p.add_argument("--tau", type=float, default=0.75, help="early-stopping threshold (default 0.75)")
    p.add_argument("--C", type=float, default=1.0, help="inverse L2 strength (default 1.0)")
    p.add_argument("--loss", choices=LOSS_NAMES, default="ce", help="training loss (default ce)")
    p.add_argument("--max-memory", default=None, help="memory budget, e.g. 2GB (default: RAM / 4)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on a Dask cluster (e.g. tcp://host:8786); needs aflite_fast[dask]")
    p.add_argument("--groups", default=None, metavar="FILE",
                   help="group id per row (.npy, or one id per line): every model trains on whole "
                        "groups, so rows of a group are never split between training and held out")
    p.add_argument("--remove", choices=REMOVE_MODES, default="row",
                   help="remove single rows (default) or whole groups whose mean score reaches tau "
                        "(needs --groups)")
    p.add_argument("--checkpoint", default=None, metavar="PATH",
                   help="save the state after every phase to PATH (.npz); rerunning the same command "
                        "continues from it with the same result; other parameters or data are refused")
    p.add_argument("--null", choices=["permutation"], default=None,
                   help="also score every phase's partitions with the labels permuted (class counts "
                        "kept; whole groups with --groups) and record how many rows reach tau by chance "
                        "(report.json history: null_*); each permutation costs about one more phase")
    p.add_argument("--n-null", type=int, default=1, metavar="N",
                   help="label permutations per phase with --null (default 1; 3 or more for --stop null)")
    p.add_argument("--stop", choices=STOP_RULES, default="paper",
                   help="paper (default): stop when fewer than slice-size rows reach tau; null (needs "
                        "--null): stop, removing nothing more, when the rows at or above tau do not "
                        "exceed the null's mean + 3 sd (at least sqrt(mean)) x sqrt(1 + 1/N); both: "
                        "whichever comes first (docs/null.md)")
    p.add_argument("--plot", action="store_true",
                   help="also draw DIR/report.png (see 'aflite-fast report'); needs aflite_fast[plots]")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    return p


def _read_groups(path):
    try:
        return read_labels_file(path)
    except ValueError as exc:
        raise ValueError(f"--groups: {exc}") from None


def run(args):
    start = time.perf_counter()
    X = open_embeddings(args.embeddings)
    y = read_labels_file(args.labels)
    if args.remove == "group" and args.groups is None:
        raise ValueError("--remove group needs --groups FILE")
    groups = None if args.groups is None else _read_groups(args.groups)
    if args.n_null < 1:
        raise ValueError(f"--n-null must be >= 1, got {args.n_null}")
    if args.stop != "paper" and args.null is None:
        raise ValueError(f"--stop {args.stop} needs --null permutation")
    if args.plot:
        from ..report import require_matplotlib

        require_matplotlib()  # fail before the run, not after it
    params = dict(target_size=args.target_size, n_partitions=args.partitions,
                  train_size=args.train_size, slice_size=args.slice_size, tau=args.tau, C=args.C,
                  loss=args.loss, max_memory=args.max_memory, random_state=args.seed,
                  n_jobs=args.threads, remove=args.remove, null=args.null, n_null=args.n_null,
                  stop=args.stop)
    extra = {}
    if args.scheduler:
        from ..distributed import close_client, connect  # needs the extra aflite_fast[dask]

        extra = dict(backend="dask", client=connect(args.scheduler))
    try:
        with AtomicOutputDir(args.out) as out:
            result = aflite(X, y, progress=not args.quiet, groups=groups, checkpoint=args.checkpoint,
                            **params, **extra)
            seconds = time.perf_counter() - start
            out.save_npy("keep.npy", result.keep)
            out.save_npy("scores.npy", result.scores)
            report = {
                "aflite_fast_version": __version__,
                "command": "filter",
                "embeddings": os.path.abspath(args.embeddings),
                "labels": os.path.abspath(args.labels),
                "n_rows": int(X.shape[0]), "n_features": int(X.shape[1]), "dtype": str(X.dtype),
                "n_classes": int(len(result.classes)),
                "parameters": params,
                "n_kept": int(result.keep.size), "n_removed": int(result.removed.size),
                "stop_reason": result.stop_reason,
                "seconds": seconds,
                "history": [h.as_dict() for h in result.history],
                "groups": None if args.groups is None else os.path.abspath(args.groups),
                "checkpoint": None if args.checkpoint is None else os.path.abspath(args.checkpoint),
                "resumed_from_phase": result.resumed_from,
                "classes": result.classes.tolist(),
                "class_counts": {"kept": result.kept_per_class.tolist(),
                                 "removed": result.removed_per_class.tolist()},
            }
            out.save_json("report.json", report)
            if args.plot:
                from ..report import draw_report

                draw_report(report, out.file("report.png"))
    finally:
        if extra:
            close_client(extra["client"])
    if not args.quiet:
        print(f"aflite-fast filter: kept {result.keep.size} of {X.shape[0]} rows in "
              f"{len(result.history)} phase(s), {seconds:.1f} s ({result.stop_reason}); "
              f"{f'resumed from phase {result.resumed_from}; ' if result.resumed_from else ''}"
              f"wrote {os.path.join(args.out, 'keep.npy')}, scores.npy, report.json"
              f"{', report.png' if args.plot else ''}", file=sys.stderr)
    return 0
