"""The input files the commands read: the arguments that name them, and their readers.

``filter``, ``evaluate``, ``oof`` and ``label-issues`` take EMB and LABELS (and the options of
a labels file), ``--groups``, ``--eval-rows``, ``--loss``/``--transition`` alike; each reader's
errors name the flag.  NumPy and the readers are imported when a file is read, never to build
the parsers (``--help`` starts without them).
"""
from aflite_fast.cli._args import positive_int
from aflite_fast.core.loss_names import LOSS_NAMES


def train_size_arg(text):
    """An int (rows) or a float in (0, 1) (fraction of the active rows); a whole number written
    as a float (``1e3``, ``2.0``) is refused with the integer to write instead."""
    import argparse

    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if 0 < value < 1:
        return value
    if value >= 1 and value.is_integer():
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number of rows (write {int(value)}) nor a "
                                         "fraction in (0, 1)")
    raise argparse.ArgumentTypeError(f"must be a whole number of rows or a fraction in (0, 1), got {text!r}")


def add_input_arguments(p, labels_help="labels: .npy/.npz, or text/CSV (see below)"):
    """EMB, LABELS and the options of a labels file (``filter``, ``oof`` and ``label-issues``
    read them alike)."""
    p.add_argument("embeddings", metavar="EMB",
                   help="embeddings: EMB.npy, EMB.npz[:KEY], a directory or glob of .npy shards, "
                        "EMB.safetensors[:KEY], a Hugging Face dataset saved with save_to_disk or an "
                        ".arrow file, a .parquet file or directory (docs/formats.md)")
    p.add_argument("labels", metavar="LABELS", nargs="?", default=None,
                   help=f"{labels_help}; may be left out when EMB is a table holding the labels: "
                        "--labels-column NAME then reads them from EMB")
    p.add_argument("--column", default=None, metavar="NAME",
                   help="the embedding column of a table EMB (Arrow, Hugging Face dataset, Parquet); "
                        "needed when it has several list columns")
    p.add_argument("--labels-column", default=None, metavar="NAME|INDEX",
                   help="label column of a CSV/TSV labels file: a header name (with "
                        "--labels-header) or a 0-based index; or of a table LABELS (which may be "
                        "EMB itself)")
    p.add_argument("--labels-header", action="store_true",
                   help="the first line of the labels file names its columns")


def resolve_labels(args):
    """``args.labels``, set to EMB when LABELS was left out and ``--labels-column`` names a
    column of the table EMB; ValueError saying what to give otherwise."""
    if args.labels is not None:
        return args.labels
    from aflite_fast.io.formats import is_table

    if args.labels_column is None:
        raise ValueError("LABELS is missing: give a labels file, or --labels-column NAME to read the labels "
                         "from a column of the table EMB")
    if not is_table(args.embeddings):
        raise ValueError(f"LABELS is missing and EMB {args.embeddings!r} is not a table (Arrow, Hugging Face "
                         "dataset, Parquet) whose --labels-column could hold them: give LABELS")
    args.labels = args.embeddings
    return args.labels


def add_model_arguments(p):
    """The linear models' options: --C, --loss, --transition, --max-iter."""
    p.add_argument("--C", type=float, default=1.0, help="inverse L2 strength (scikit-learn's C)")
    p.add_argument("--loss", choices=LOSS_NAMES, default="ce", help="training loss")
    p.add_argument("--transition", metavar="T.npy", default=None,
                   help="noise transition matrix for --loss forward: C x C .npy, T[i, j] = "
                        "P(noisy label j | true label i), classes in sorted label order")
    p.add_argument("--max-iter", type=positive_int, default=1000, help="L-BFGS steps per model at most")


def add_groups_arguments(p, help):
    """--groups FILE (``help`` says what the command does with it) and the options of its file."""
    p.add_argument("--groups", default=None, metavar="FILE", help=help)
    p.add_argument("--groups-column", default=None, metavar="NAME|INDEX",
                   help="group column of a CSV/TSV groups file, as --labels-column")
    p.add_argument("--groups-header", action="store_true",
                   help="the first line of the groups file names its columns")


def read_groups(args):
    """Group ids of --groups FILE, read as LABELS files are; errors name the flag."""
    from aflite_fast.io.labelfile import read_labels_file

    try:
        return read_labels_file(args.groups, column=args.groups_column, header=args.groups_header, kind="groups")
    except ValueError as exc:
        raise ValueError(f"--groups: {exc}") from None


def read_eval_rows(path, flag="--eval-rows"):
    """Row indices or a boolean mask from FILE: a .npy/.npz array, or text with one integer per
    line (blank lines ignored); ValueError naming the flag."""
    import numpy as np

    from aflite_fast.io.arrayfile import open_array_file

    try:
        if str(path).endswith((".npy", ".npz")) or ".npz:" in str(path):
            rows = np.array(open_array_file(path, "the evaluation rows"))
        else:
            with open(path, encoding="utf-8-sig") as f:
                lines = [line.strip() for line in f if line.strip()]
            try:
                rows = np.array([int(line) for line in lines], dtype=np.int64)
            except ValueError as exc:
                raise ValueError(f"{path}: one integer row index per line expected ({exc})") from None
    except OSError as exc:
        raise ValueError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{flag}: {exc}") from None
    return rows


def loss_params(args, n_classes):
    """The ``loss_params`` of --loss/--transition; ValueError naming the flag when they clash."""
    if args.loss != "forward":
        if args.transition is not None:
            raise ValueError(f"--transition applies to --loss forward only (got --loss {args.loss})")
        return None
    if args.transition is None:
        raise ValueError(f"--loss forward needs --transition T.npy (a {n_classes} x {n_classes} "
                         "noise transition matrix)")
    import numpy as np

    from aflite_fast.io.arrayfile import open_array_file

    try:
        T = np.array(open_array_file(args.transition, "the transition matrix"))
    except ValueError as exc:  # names the file and the problem (a text file is not unpickled)
        raise ValueError(f"--transition: {exc}") from None
    return {"T": T}
