"""``aflite-fast filter EMB.npy LABELS --out DIR``: AFLite on an embedding file."""
import os
import sys
import time


from .. import __version__
from ..algorithm import aflite
from .._labelfile import read_labels_file
from ..data import open_embeddings
from ..losses import LOSS_NAMES
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
        description="Run AFLite on EMB (N x d, memory-mapped: a .npy file, a .npz archive "
                    "holding one array, or FILE.npz:KEY; float16/32/64 or integer, either byte "
                    "order) with LABELS and write DIR/keep.npy "
                    "(sorted kept row indices), DIR/scores.npy (last predictability score per row, "
                    "NaN where never scored) and DIR/report.json.",
        epilog="LABELS files: a .npy/.npz array, or UTF-8 text with one row per line of EMB "
               "(a byte-order mark is dropped). Fields are separated by commas (csv quoting), or "
               "by tabs in a .tsv file or one with tabs and no commas. A file with several "
               "columns needs --labels-column (a header name with --labels-header, or a 0-based "
               "index); a first line that names columns needs --labels-header. Blank lines are "
               "an error, except at the end. If every label is a number they are read as "
               "numbers, so 1, 1.0 and 01 are one class; otherwise labels are compared as "
               "written.")
    p.add_argument("embeddings", metavar="EMB", help="embeddings: EMB.npy, EMB.npz or EMB.npz:KEY")
    p.add_argument("labels", metavar="LABELS", help="labels: .npy/.npz, or text/CSV (see below)")
    p.add_argument("--labels-column", default=None, metavar="NAME|INDEX",
                   help="label column of a CSV/TSV labels file: a header name (with "
                        "--labels-header) or a 0-based index")
    p.add_argument("--labels-header", action="store_true",
                   help="the first line of the labels file names its columns")
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
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    return p


def run(args):
    start = time.perf_counter()
    X = open_embeddings(args.embeddings)
    y = read_labels_file(args.labels, column=args.labels_column, header=args.labels_header)
    params = dict(target_size=args.target_size, n_partitions=args.partitions,
                  train_size=args.train_size, slice_size=args.slice_size, tau=args.tau, C=args.C,
                  loss=args.loss, max_memory=args.max_memory, random_state=args.seed,
                  n_jobs=args.threads)
    extra = {}
    if args.scheduler:
        from ..distributed import close_client, connect  # needs the extra aflite_fast[dask]

        extra = dict(backend="dask", client=connect(args.scheduler))
    try:
        with AtomicOutputDir(args.out) as out:
            result = aflite(X, y, progress=not args.quiet, **params, **extra)
            seconds = time.perf_counter() - start
            out.save_npy("keep.npy", result.keep)
            out.save_npy("scores.npy", result.scores)
            out.save_json("report.json", {
                "aflite_fast_version": __version__,
                "command": "filter",
                "embeddings": os.path.abspath(args.embeddings),
                "labels": os.path.abspath(args.labels),
                "labels_column": args.labels_column, "labels_header": args.labels_header,
                "n_rows": int(X.shape[0]), "n_features": int(X.shape[1]), "dtype": str(X.dtype),
                "n_classes": int(len(result.classes)),
                "parameters": params,
                "n_kept": int(result.keep.size), "n_removed": int(result.removed.size),
                "stop_reason": result.stop_reason,
                "seconds": seconds,
                "history": [h.as_dict() for h in result.history],
            })
    finally:
        if extra:
            close_client(extra["client"])
    if not args.quiet:
        print(f"aflite-fast filter: kept {result.keep.size} of {X.shape[0]} rows in "
              f"{len(result.history)} phase(s), {seconds:.1f} s ({result.stop_reason}); "
              f"wrote {os.path.join(args.out, 'keep.npy')}, scores.npy, report.json", file=sys.stderr)
    return 0
