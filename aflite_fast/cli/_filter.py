"""``aflite-fast filter EMB.npy LABELS --out DIR``: AFLite on an embedding file."""
import os
import sys
import time
import warnings

from .._loss_names import LOSS_NAMES
from .._version import __version__
from ._args import HelpFormatter, cap_threads, memory_size, positive_int

#: Files the command writes into --out, switched in together (aflite_fast._atomic).
OUTPUT_NAMES = ("keep.npy", "scores.npy", "report.json")

#: Library parameter names -> the flags of this command, for error messages.
PARAMETER_FLAGS = {
    "target_size": "--target-size", "n_partitions": "--partitions", "train_size": "--train-size",
    "slice_size": "--slice-size", "tau": "--tau", "C": "--C", "max_memory": "--max-memory",
    "random_state": "--seed", "n_jobs": "--threads", "max_iter": "--max-iter", "T": "--transition",
}

_DESCRIPTION = """\
Run AFLite on EMB.npy (N x d, float16/float32, memory-mapped) with LABELS (.npy, or a text/CSV
file with one label per line) and write DIR/keep.npy (sorted kept row indices), DIR/scores.npy
(last predictability score per row, NaN where never scored) and DIR/report.json (parameters,
per-phase history with solver status counts, timings).

The three files are switched in together when the run ends: a reader sees all of the previous
run's files or all of this run's, never a mix, even if the run is killed (they are links into
DIR/.aflite/; see docs/outputs.md). A second run on the same DIR refuses while one is running.

Exit codes: 0 done; 2 bad input (one line on stderr, DIR unchanged); 130 Ctrl-C, 143 SIGTERM.
"""


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
        "filter", help="filter an embedding file (.npy) with AFLite", description=_DESCRIPTION,
        formatter_class=HelpFormatter)
    p.add_argument("embeddings", metavar="EMB.npy")
    p.add_argument("labels", metavar="LABELS")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory (created)")
    p.add_argument("--target-size", type=int, required=True, metavar="N",
                   help="n: stop once this many rows remain (never keep fewer); must be below the "
                        "number of rows, e.g. the size you want the filtered set to have")
    p.add_argument("--partitions", type=int, default=64, metavar="M", help="m: models per phase")
    p.add_argument("--train-size", type=train_size_arg, required=True, metavar="T",
                   help="t: training rows per model (an integer), or a fraction in (0, 1) of the "
                        "active rows; the paper uses the size of the embedding model's warm-up "
                        "split, 0.5 is a safe start")
    p.add_argument("--slice-size", type=int, default=500, metavar="K", help="k: rows removed per phase at most")
    p.add_argument("--tau", type=float, default=0.75,
                   help="remove only rows predicted correctly by at least this share of the models "
                        "that held them out; filtering stops when fewer than K rows reach it; lower "
                        "it to filter harder")
    p.add_argument("--C", type=float, default=1.0, help="inverse L2 strength (scikit-learn's C)")
    p.add_argument("--loss", choices=LOSS_NAMES, default="ce", help="training loss")
    p.add_argument("--transition", metavar="T.npy", default=None,
                   help="noise transition matrix for --loss forward: C x C .npy, T[i, j] = "
                        "P(noisy label j | true label i), classes in sorted label order")
    p.add_argument("--max-iter", type=positive_int, default=1000, help="L-BFGS steps per model at most")
    p.add_argument("--max-memory", type=memory_size, default=None, metavar="SIZE",
                   help="memory budget: bytes, or K/M/G/T (powers of 1000, also KB/MB/GB/TB) or "
                        "Ki/Mi/Gi/Ti (powers of 1024, also KiB/...), e.g. 500M, 2GB, 1GiB "
                        "(default: RAM / 4)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="threads, capped at the available cores (default: all cores); results do "
                        "not depend on it")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run on a Dask cluster (e.g. tcp://host:8786); needs aflite_fast[dask]")
    p.add_argument("--quiet", action="store_true", help="no progress bar, notes or summary")
    return p


def _loss_params(args, n_classes):
    """The ``loss_params`` of --loss/--transition; ValueError naming the flag when they clash."""
    if args.loss != "forward":
        if args.transition is not None:
            raise ValueError(f"--transition applies to --loss forward only (got --loss {args.loss})")
        return None
    if args.transition is None:
        raise ValueError(f"--loss forward needs --transition T.npy (a {n_classes} x {n_classes} "
                         "noise transition matrix)")
    import numpy as np

    try:
        T = np.load(args.transition, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read --transition {args.transition!r}: {exc}") from exc
    return {"T": T}


def run(args):
    from ..algorithm import aflite
    from ..data import open_embeddings, read_labels_file
    from .._atomic import OutputSet
    from .._solver_status import ConvergenceWarning

    prog = "aflite-fast filter"
    start = time.perf_counter()
    X = open_embeddings(args.embeddings)
    y = read_labels_file(args.labels)
    n_rows = X.shape[0]
    if args.target_size >= n_rows:
        # nothing to filter: an error rather than a run that keeps every row
        raise ValueError(f"--target-size ({args.target_size}) must be smaller than the number of "
                         f"rows of {args.embeddings} ({n_rows}); nothing would be filtered")
    import numpy as np

    loss_params = _loss_params(args, len(np.unique(y)))
    params = dict(target_size=args.target_size, n_partitions=args.partitions,
                  train_size=args.train_size, slice_size=args.slice_size, tau=args.tau, C=args.C,
                  loss=args.loss, max_memory=args.max_memory, random_state=args.seed,
                  n_jobs=cap_threads(args.threads, prog, args.quiet), max_iter=args.max_iter)
    extra = {}
    if args.scheduler:
        from ..distributed import close_client, connect  # needs the extra aflite_fast[dask]

        extra = dict(backend="dask", client=connect(args.scheduler))
    try:
        # Entered before the first phase: an unwritable or busy --out fails now, not at the end.
        with OutputSet(args.out, OUTPUT_NAMES, label="--out") as out:
            with warnings.catch_warnings():
                # counted in the history; the note below says it once, in the CLI's words
                warnings.simplefilter("ignore", ConvergenceWarning)
                result = aflite(X, y, progress=not args.quiet, loss_params=loss_params, **params, **extra)
            seconds = time.perf_counter() - start
            history = [h.as_dict() for h in result.history]
            solver_status = {name: sum(h["solver_status"][name] for h in history)
                             for name in (history[0]["solver_status"] if history else {})}
            out.save_npy("keep.npy", result.keep)
            out.save_npy("scores.npy", result.scores)
            out.save_json("report.json", {
                "aflite_fast_version": __version__,
                "command": "filter",
                "embeddings": os.path.abspath(args.embeddings),
                "labels": os.path.abspath(args.labels),
                "transition": None if args.transition is None else os.path.abspath(args.transition),
                "n_rows": int(n_rows), "n_features": int(X.shape[1]), "dtype": str(X.dtype),
                "n_classes": int(len(result.classes)),
                "parameters": params,
                "n_kept": int(result.keep.size), "n_removed": int(result.removed.size),
                "stop_reason": result.stop_reason,
                "seconds": seconds,
                "solver_status": solver_status,
                "history": history,
            })
    finally:
        if extra:
            close_client(extra["client"])
    if not args.quiet:
        failed = sum(count for name, count in solver_status.items() if name != "converged")
        if failed:
            detail = ", ".join(f"{k}: {v}" for k, v in solver_status.items() if k != "converged" and v)
            print(f"{prog}: note: {failed} of {sum(solver_status.values())} models did not converge "
                  f"({detail}; per phase in report.json); raise --max-iter or standardize the "
                  "embeddings", file=sys.stderr)
        print(f"{prog}: kept {result.keep.size} of {n_rows} rows in "
              f"{len(result.history)} phase(s), {seconds:.1f} s ({result.stop_reason}); "
              f"wrote {os.path.join(args.out, 'keep.npy')}, scores.npy, report.json", file=sys.stderr)
    return 0
