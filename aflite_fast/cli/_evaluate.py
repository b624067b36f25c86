"""``aflite-fast evaluate DIR EMB LABELS``: did the filter run in DIR remove bias, or chance?"""
import os
import sys

from aflite_fast.cli._args import HelpFormatter, add_flag, cap_threads, positive_int
from aflite_fast.cli._inputs import add_groups_arguments, add_input_arguments

PARAMETER_FLAGS = {"features": "--features", "cv": "--cv", "n_random": "--n-random", "groups": "--groups",
                   "random_state": "--seed", "n_jobs": "--n-jobs", "keep": "DIR/keep.npy"}

_DESCRIPTION = """\
Compare the rows a filter run kept (DIR/keep.npy) with random subsets of the same size: a probe
(the package's out-of-fold logistic regression, --cv folds; for a multiple-choice EMB, N x K x d,
the filter's linear scorer of candidates, folds over items) on each set, on EMB (the
representation the run filtered with) and on --features F2 (a second representation of the same
rows that the filter never saw, e.g. bag of words when EMB holds sentence vectors). It reports
balanced accuracy (read this one: plain accuracy moves with the class balance), plain accuracy,
the majority rate and the class counts of every set, and a verdict:

  chance         the run's chance check (report.json: chance_check) found phase 0's rows at or
                 above tau within what permuted labels give; without a chance check
                 (--no-chance-check), a filter of the same size on permuted labels (the control)
                 drops balanced accuracy as much as the run's filter did
  no_evidence    no clear drop on EMB: balanced accuracy on the kept rows not below random
                 subsets' by 0.02 and more than 2 of their sd
  not_confirmed  a clear drop on EMB that F2 does not show
  bias_removed   clear drops on EMB and on F2 (when given), and not chance by the chance check
                 or the control

The evaluation joins DIR/report.json (key "evaluation"), and report.png gets one more panel if
DIR has one; DIR's output set is switched in whole (docs/outputs.md). See docs/evaluation.md.
"""


def add_parser(subparsers):
    p = subparsers.add_parser(
        "evaluate", help="did the filter run in DIR remove bias, or chance? (kept rows vs random subsets)",
        description=_DESCRIPTION, formatter_class=HelpFormatter)
    p.add_argument("dir", metavar="DIR", help="output directory of 'aflite-fast filter'")
    add_input_arguments(p)
    p.add_argument("--features", default=None, metavar="F2",
                   help="a second representation of the same rows (.npy/.npz), N x d2 (multiple-choice EMB: "
                        "N x K x d2, one vector per candidate)")
    add_groups_arguments(p, "group id per row: no group is split between a probe's training and "
                            "held-out rows")
    p.add_argument("--cv", type=int, default=5, help="folds of the probe")
    p.add_argument("--n-random", type=positive_int, default=5, metavar="N",
                   help="random subsets of the kept set's size (a drop must exceed 2 of their sd)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the subsets and folds")
    add_flag(p, "--n-jobs", "--threads", type=positive_int, default=None, metavar="N",
             help="threads (default: all cores); results do not depend on it")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    return p


def evaluation_of(X, y, keep, report, *, features=None, groups=None, seed=0, n_jobs=None, cv=5, n_random=5):
    """The dict report.json keeps under ``evaluation``: :meth:`EvaluationResult.to_dict` of
    :func:`aflite_fast.evaluate_filter` (with the run's chance check from ``report``), plus the
    path of ``features``."""
    from aflite_fast.filtering.filter_evaluation import evaluate_filter

    result = evaluate_filter(X, y, keep, result=report, features=features, cv=cv, n_random=n_random,
                             groups=groups, random_state=seed, n_jobs=n_jobs)
    out = result.to_dict()
    out["features_path"] = None if features is None else os.path.abspath(features)
    return out


def check_run_inputs(report, X, y, n_jobs=None):
    """Refuse EMB (``X``) or LABELS (``y``) that are not what the run whose ``report`` (the dict
    of DIR/report.json) filtered, by what the report records: the row count, the features per
    row, the dtype (either byte order), the classes, the fingerprint of the labels and that of
    X's content (one read of X; a report written before these were recorded is checked by what
    it has).

    Raises
    ------
    ValueError
        Naming EMB or LABELS and what differs.
    """
    import numpy as np

    from aflite_fast.io.fingerprint import ContentHash, canonical_dtype, labels_digest
    from aflite_fast.io.inputs import scan_rows

    again = "give the embeddings the run used"
    if report["n_rows"] != X.shape[0]:
        raise ValueError(f"EMB has {X.shape[0]} rows but the run in DIR filtered {report['n_rows']}: {again}")
    n_features = report.get("n_features")
    if n_features is not None and n_features != X.shape[-1]:
        raise ValueError(f"EMB has {X.shape[-1]} features per row but the run in DIR filtered {n_features}: {again}")
    dtype = report.get("dtype")
    if dtype is not None:
        try:
            same = canonical_dtype(np.dtype(dtype)) == canonical_dtype(X.dtype)
        except TypeError:
            raise ValueError(f"DIR/report.json records dtype {dtype!r}, which is not a dtype: it was not "
                             "written by 'aflite-fast filter'") from None
        if not same:
            raise ValueError(f"EMB holds {X.dtype} values but the run in DIR filtered {np.dtype(dtype)}: {again}")
    classes = report.get("classes")
    # multiple choice: the classes are the K positions, whether or not y uses all of them
    if classes is not None and X.ndim == 2 and np.unique(y).tolist() != classes:
        raise ValueError(f"LABELS hold the classes {_listed(np.unique(y).tolist())} but the run in DIR had "
                         f"{_listed(classes)}: give the labels the run used")
    digest = report.get("labels_sha256")
    if digest is not None and labels_digest(y) != digest:
        raise ValueError("LABELS hold the run's classes but not on the same rows (their fingerprint differs from "
                         "report.json's labels_sha256): give the labels the run used")
    digest = report.get("x_sha256")
    if digest is not None:
        from aflite_fast.io.sparse import is_sparse, sparse_digest

        if is_sparse(X):  # sparse X's own fingerprint (io.sparse.sparse_digest), as the run took it
            found = sparse_digest(X)
        else:
            # multiple choice: its N x K candidate rows, as the run read them
            rows = X.reshape(-1, X.shape[-1]) if X.ndim == 3 else X
            with ContentHash(rows.shape, X.dtype, n_jobs) as content:
                scan_rows(rows, fingerprint=content)
            found = content.hexdigest()
        if found != digest:
            raise ValueError("EMB has the run's shape and dtype but not its content (its fingerprint differs from "
                             f"report.json's x_sha256): {again}")


def _listed(values, most=6):
    """``values`` for a message: all of them, or the first ``most`` and how many more."""
    shown = ", ".join(map(repr, values[:most]))
    return f"[{shown}{f', ... ({len(values) - most} more)' if len(values) > most else ''}]"


def run(args):
    import numpy as np

    from aflite_fast.cli._figure import REPORT_JSON, REPORT_PNG, draw_report, read_report, require_matplotlib
    from aflite_fast.cli._inputs import read_groups, resolve_labels
    from aflite_fast.io.atomic import OutputSet
    from aflite_fast.io.inputs import open_embeddings
    from aflite_fast.io.labelfile import read_labels_file
    from aflite_fast.io.watch import InputWatch

    prog = "aflite-fast evaluate"
    out_dir = os.fspath(args.dir)
    if not os.path.isdir(out_dir):
        raise ValueError(f"DIR {out_dir!r} is not a directory")
    resolve_labels(args)
    watch = InputWatch([("EMB", args.embeddings), ("LABELS", args.labels), ("--groups", args.groups),
                        ("--features", args.features)])
    X = open_embeddings(args.embeddings, args.column, items=True)
    y = read_labels_file(args.labels, column=args.labels_column, header=args.labels_header)
    groups = None if args.groups is None else read_groups(args)
    with OutputSet(out_dir, [REPORT_JSON], label="DIR", extend=True, before_commit=watch.check) as out:
        # under DIR's lock; DIR/NAME still resolves to the committed set until the switch
        report = read_report(out_dir)
        if "keep.npy" not in out.names:
            raise ValueError(f"DIR {out_dir!r} holds no keep.npy of 'aflite-fast filter'")
        keep = np.load(out.file("keep.npy"), allow_pickle=False)
        n_jobs = cap_threads(args.n_jobs, prog, args.quiet)
        check_run_inputs(report, X, y, n_jobs)
        report["evaluation"] = evaluation_of(X, y, keep, report, features=args.features, groups=groups,
                                             seed=args.seed, n_jobs=n_jobs, cv=args.cv, n_random=args.n_random)
        out.save_json(REPORT_JSON, report)
        if REPORT_PNG in out.names:  # carried from the set: redraw it with the new panel
            require_matplotlib()
            os.unlink(out.file(REPORT_PNG))  # a hard link into the committed set: never write through it
            out.write(REPORT_PNG, lambda path: draw_report(report, path))
    if not args.quiet:
        print(f"{prog}: {report['evaluation']['summary']}", file=sys.stderr)
        print(f"{prog}: wrote {os.path.join(out_dir, REPORT_JSON)} (evaluation)"
              f"{', report.png' if REPORT_PNG in out.names else ''}", file=sys.stderr)
    return 0
