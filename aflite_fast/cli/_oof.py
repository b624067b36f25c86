"""``aflite-fast oof EMB LABELS --out PROBS.npy``: out-of-fold probabilities of every row."""
import os
import sys
import time
import warnings

from aflite_fast.cli._args import HelpFormatter, add_flag, cap_threads, memory_size, positive_int

#: Library parameter names -> the flags of this command, for error messages.
PARAMETER_FLAGS = {
    "cv": "--cv", "C": "--C", "max_memory": "--max-memory", "random_state": "--seed", "n_jobs": "--n-jobs",
    "max_iter": "--max-iter", "tol": "--tol", "T": "--transition", "groups": "--groups",
    "n_partitions": "--n-partitions", "train_size": "--train-size",
}

_DESCRIPTION = """\
Out-of-fold predicted probabilities of a linear model (multinomial logistic regression, or
another --loss) for every row of EMB (N x d: a .npy file, a .npz archive holding one array, or
FILE.npz:KEY, or any other input of 'aflite-fast filter': shards, a Hugging Face dataset,
safetensors, Parquet, with --column; float16/32/64 or integer, either byte order; read a chunk
at a time, never loaded whole)
with LABELS: each row's probabilities come from the model of the fold that held it out (--cv
stratified folds, all trained in one call of the batched kernel). Writes PROBS.npy, N x C
float32, columns in sorted label order, rows summing to 1, written atomically (a reader sees
the previous file or the whole new one, never a partial one). It is what cleanlab's
find_label_issues_batched(labels=..., pred_probs_file="PROBS.npy") reads (docs/oof.md).

Exit codes: 0 done; 2 bad input (one line on stderr, PROBS.npy unchanged); 130 Ctrl-C, 143 SIGTERM.
"""

_EPILOG = """\
LABELS and --groups files are read as by 'aflite-fast filter' (see its --help): a .npy/.npz
array, or UTF-8 text with one row per line of EMB, --labels-column / --labels-header (and
--groups-column / --groups-header) for CSV/TSV files with several columns; or a column of a
table (EMB's own included) named by --labels-column (--groups-column).
"""


def add_parser(subparsers):
    """Register the ``oof`` subcommand and return its parser."""
    from aflite_fast.cli._inputs import add_groups_arguments, add_input_arguments, add_model_arguments, train_size_arg

    p = subparsers.add_parser(
        "oof", help="out-of-fold probabilities (N x C .npy) for cleanlab and other label-error tools",
        description=_DESCRIPTION, epilog=_EPILOG, formatter_class=HelpFormatter)
    add_input_arguments(p)
    p.add_argument("--out", required=True, metavar="PROBS.npy",
                   help="the probabilities file to write (.npy; its directory must exist)")
    p.add_argument("--cv", type=int, default=5, metavar="K",
                   help="stratified folds (StratifiedKFold(K, shuffle=True, random_state=--seed); "
                        "with --groups StratifiedGroupKFold)")
    add_flag(p, "--n-partitions", "--partitions", type=positive_int, default=None, metavar="M",
                   help="instead of folds, M random training sets of --train-size rows (AFLite's "
                        "partitions), each row's probabilities averaged over the models that held it "
                        "out; a row no model held out is NaN")
    p.add_argument("--train-size", type=train_size_arg, default=None, metavar="T",
                   help="rows per partition (an integer) or a fraction in (0, 1); only with "
                        "--n-partitions (default 0.5)")
    add_model_arguments(p)
    p.add_argument("--tol", type=float, default=1e-4, help="L-BFGS stops when max |gradient| is below this")
    p.add_argument("--max-memory", type=memory_size, default=None, metavar="SIZE",
                   help="memory budget, as for 'aflite-fast filter' (e.g. 500M, 2GB, 1GiB; "
                        "default: RAM / 4); results do not depend on it")
    p.add_argument("--seed", type=int, default=0, help="random seed of the folds (or partitions)")
    add_flag(p, "--n-jobs", "--threads", type=positive_int, default=None, metavar="N",
                   help="threads, capped at the available cores (default: all cores); results do "
                        "not depend on it")
    add_groups_arguments(p, "group id per row (read as LABELS is): no group is split between a model's "
                            "training and held-out rows")
    p.add_argument("--quiet", action="store_true", help="no progress bar, notes or summary")
    return p


def _check_out(path):
    """Refuse an --out that cannot be written before any work is done."""
    if not path.lower().endswith(".npy"):
        raise ValueError(f"--out {path!r} must name a .npy file (PROBS.npy), which np.load and cleanlab read")
    if os.path.isdir(path):
        raise ValueError(f"--out {path!r} is a directory; give a file name such as {os.path.join(path, 'probs.npy')}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"--out {path!r}: directory {folder!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"--out {path!r}: directory {folder!r} is not writable")


def run(args):
    from aflite_fast.cli._inputs import loss_params, read_groups, resolve_labels
    from aflite_fast.core.solver_status import status_counts
    from aflite_fast.filtering.oof import oof_run
    from aflite_fast.io.atomic import write_file_atomically
    from aflite_fast.io.inputs import open_embeddings
    from aflite_fast.io.labelfile import read_labels_file
    from aflite_fast.io.watch import InputWatch

    prog = "aflite-fast oof"
    start = time.perf_counter()
    _check_out(args.out)
    if args.groups is None:
        for flag, given in (("--groups-column", args.groups_column), ("--groups-header", args.groups_header)):
            if given:
                raise ValueError(f"{flag} needs --groups FILE")
    if args.train_size is not None and args.n_partitions is None:
        raise ValueError("--train-size applies to --n-partitions only; with --cv the folds fix the training sets")
    # checked again just before PROBS.npy replaces the previous file
    resolve_labels(args)
    watch = InputWatch([("EMB", args.embeddings), ("LABELS", args.labels), ("--groups", args.groups),
                        ("--transition", args.transition)])
    X = open_embeddings(args.embeddings, args.column)
    y = read_labels_file(args.labels, column=args.labels_column, header=args.labels_header)
    groups = None if args.groups is None else read_groups(args)
    import numpy as np

    loss_params = loss_params(args, len(np.unique(y)))
    with warnings.catch_warnings():
        # rows never held out (partitions): said once below, in the command's words
        warnings.simplefilter("ignore", RuntimeWarning)
        result = oof_run(X, y, cv=args.cv, C=args.C, loss=args.loss, loss_params=loss_params,
                         n_partitions=args.n_partitions, train_size=args.train_size, max_memory=args.max_memory,
                         random_state=args.seed, n_jobs=cap_threads(args.n_jobs, prog, args.quiet),
                         tol=args.tol, max_iter=args.max_iter, groups=groups, progress=not args.quiet)

    def write(tmp):
        watch.check()  # inputs changed during the run: keep the previous file
        with open(tmp, "wb") as fh:
            np.save(fh, result.proba, allow_pickle=False)

    write_file_atomically(args.out, write, output=True)
    if not args.quiet:
        counts = status_counts(result.status)
        failed = sum(count for name, count in counts.items() if name != "converged")
        if failed:
            detail = ", ".join(f"{k}: {v}" for k, v in counts.items() if k != "converged" and v)
            print(f"{prog}: note: {failed} of {result.status.size} models did not converge ({detail}); raise "
                  "--max-iter or standardize the embeddings", file=sys.stderr)
        missing = int(np.count_nonzero(result.seen == 0))
        print(f"{prog}: wrote {args.out} ({result.proba.shape[0]} x {result.proba.shape[1]} float32, columns: "
              f"classes {result.classes.tolist()[:10]}{' ...' if result.classes.size > 10 else ''}"
              f"{f'; {missing} row(s) never held out are NaN' if missing else ''}) in "
              f"{time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0
