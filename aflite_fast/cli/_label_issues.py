"""``aflite-fast label-issues EMB LABELS --out FILE``: likely-mislabeled rows of an embedding file."""
import os
import sys
import time

from aflite_fast.cli._args import HelpFormatter, add_flag, cap_threads, memory_size, non_negative_int, positive_int
from aflite_fast.cli._inputs import add_input_arguments

#: Library parameter names -> the flags of this command, for error messages.
PARAMETER_FLAGS = {"threshold": "--threshold", "n_issues": "--n-issues", "cv": "--cv", "C": "--C",
                   "max_memory": "--max-memory", "random_state": "--seed", "n_jobs": "--n-jobs",
                   "max_iter": "--max-iter"}

#: --method values -> the library's filter names.
METHODS = {"self-confidence": "self_confidence", "annealing": "annealing"}

_DESCRIPTION = """\
Find the rows of EMB (N x d, as 'aflite-fast filter' reads it) whose label LABELS is hard to
believe, from out-of-sample probabilities of the kernel's logistic regression (K stratified
folds, one kernel call for all of them):

  self-confidence  rows whose out-of-sample p(given label) is below --threshold (default
                   1 / number of classes), or the --n-issues lowest;
  annealing        rows predicted as another class with probability above --threshold
                   (default 0.9): the noisy-label annealing rule for generated labels.

Writes FILE with the flagged rows, most suspicious first: FILE.npy holds their row indices
(int64); any other name gets CSV text with a header: row, label, p_label (the out-of-sample
probability of the given label), predicted, p_predicted. FILE is written whole or not at all.
docs/label_issues.md compares the two rules and AFLite.

Exit codes: 0 done; 2 bad input (one line on stderr, FILE unchanged); 130 Ctrl-C, 143 SIGTERM.
"""


def add_parser(subparsers):
    """Register ``label-issues`` on ``subparsers`` and return its parser."""
    p = subparsers.add_parser(
        "label-issues", help="rank likely-mislabeled rows from out-of-sample probabilities",
        description=_DESCRIPTION, formatter_class=HelpFormatter)
    add_input_arguments(p, "labels: .npy/.npz, or text/CSV (as 'aflite-fast filter')")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="flagged rows: FILE.npy (row indices) or CSV text (any other name)")
    p.add_argument("--method", choices=sorted(METHODS), default="self-confidence", help="the filter")
    p.add_argument("--threshold", type=float, default=None,
                   help="self-confidence: flag p(label) below it (default: 1 / classes); annealing: "
                        "flag max p of another class above it (default: 0.9)")
    p.add_argument("--n-issues", type=non_negative_int, default=None, metavar="N",
                   help="self-confidence only: flag the N rows of lowest p(label) instead (0 to N rows)")
    p.add_argument("--cv", type=positive_int, default=5, metavar="K", help="stratified folds")
    p.add_argument("--C", type=float, default=1.0, help="inverse L2 strength (scikit-learn's C)")
    p.add_argument("--max-iter", type=positive_int, default=1000, help="L-BFGS steps per model at most")
    p.add_argument("--max-memory", type=memory_size, default=None, metavar="SIZE",
                   help="memory budget, as 'aflite-fast filter --max-memory' (default: RAM / 4)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the folds")
    add_flag(p, "--n-jobs", "--threads", type=positive_int, default=None, metavar="N",
             help="threads, capped at the available cores (default: all cores); results do not depend on it")
    p.add_argument("--quiet", action="store_true", help="no summary line")
    return p


def _csv_text(result, y):
    """The flagged rows as CSV text, most suspicious first; ``y`` holds every row's label."""
    import csv
    import io

    import numpy as np

    P = result.pred_probs
    rows = result.ranked_issues
    codes = np.searchsorted(result.classes, y)  # every row's label as a column of P
    predicted = np.argmax(P[rows], axis=1)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["row", "label", "p_label", "predicted", "p_predicted"])
    for row, pred in zip(rows.tolist(), predicted.tolist()):
        code = int(codes[row])
        writer.writerow([row, result.classes[code], f"{float(P[row, code]):.6g}",
                         result.classes[pred], f"{float(P[row, pred]):.6g}"])
    return buffer.getvalue()


def run(args):
    """Run the ``label-issues`` subcommand; returns 0 (bad input raises ValueError: exit 2)."""
    from aflite_fast.cli._inputs import resolve_labels
    from aflite_fast.filtering.label_issues import filter_label_issues
    from aflite_fast.io.atomic import write_file_atomically
    from aflite_fast.io.inputs import open_embeddings
    from aflite_fast.io.labelfile import read_labels_file

    prog = "aflite-fast label-issues"
    start = time.perf_counter()
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        raise ValueError(f"--out {args.out!r}: directory {out_dir!r} does not exist")
    if os.path.isdir(args.out):
        raise ValueError(f"--out {args.out!r} is a directory; give a file name")
    if args.n_issues is not None and args.method != "self-confidence":
        raise ValueError("--n-issues applies to --method self-confidence only")
    if args.n_issues is not None and args.threshold is not None:
        raise ValueError("--threshold and --n-issues each choose the rows flagged: give one of them")
    X = open_embeddings(args.embeddings, args.column)
    y = read_labels_file(resolve_labels(args), column=args.labels_column, header=args.labels_header)
    result = filter_label_issues(
        X, y, method=METHODS[args.method], threshold=args.threshold, n_issues=args.n_issues, cv=args.cv,
        C=args.C, max_memory=args.max_memory, random_state=args.seed,
        n_jobs=cap_threads(args.n_jobs, prog, args.quiet), max_iter=args.max_iter)
    if args.out.endswith(".npy"):
        import numpy as np

        write_file_atomically(args.out, lambda tmp: _save_npy(tmp, np.asarray(result.ranked_issues, np.int64)),
                              output=True)
    else:
        text = _csv_text(result, y)
        write_file_atomically(args.out, lambda tmp: _save_text(tmp, text), output=True)
    if not args.quiet:
        rule = (f"the {args.n_issues} lowest p(label)" if args.n_issues is not None
                else f"threshold {result.threshold:.4g}")
        print(f"{prog}: flagged {result.ranked_issues.size} of {X.shape[0]} rows ({args.method}, {rule}) "
              f"in {time.perf_counter() - start:.1f} s; wrote {args.out}", file=sys.stderr)
    return 0


def _save_npy(path, array):
    import numpy as np

    with open(path, "wb") as fh:
        np.save(fh, array)


def _save_text(path, text):
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
