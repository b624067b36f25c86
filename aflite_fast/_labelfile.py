"""Labels from a file: a ``.npy``/``.npz`` array, or text/CSV with one label per row.

The rules (``aflite-fast filter --help`` and the README repeat them):

a. ``.npy``, ``.npz`` or ``FILE.npz:KEY`` (recognised by content or name): the array as stored.
b. Text is UTF-8; a byte-order mark is dropped.  Fields are separated by commas (csv quoting
   rules), or by tabs in a ``.tsv`` file or one with tabs and no commas; whitespace around a
   field is dropped.
c. ``header=True``: the first line names the columns.
d. A file with one column holds the labels.  A file with several is refused unless
   ``column`` chooses one: a name from the header, or a 0-based index.  (An ``id,label`` file
   read as "the first field" used the ids as labels, silently.)
e. Every row has the same number of fields and a non-empty label.  Blank lines at the end
   are ignored; a blank line before the last label is an error naming the line, since
   skipping it would shift every later label onto the wrong row.
f. If every label is a number, labels are numbers: ``1``, ``1.0`` and ``01`` are one class
   (int64 when all are whole, float64 otherwise).  Otherwise labels are strings, compared as
   written.  Words numpy would read as numbers (``nan``, ``inf``) are strings.
g. Without ``header=True``, a first line that is not a number above labels that all are is
   refused as a likely header.

Messages name the command-line flags (``--labels-column``, ``--labels-header``), as the
command line is this reader's user.
"""
import csv
import io
import os
import re

import numpy as np

from ._arrayfile import looks_like_array_file, open_array_file

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d+")


def read_labels_file(path, *, column=None, header=False):
    """Labels from ``path`` under the rules of this module.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.npy``/``.npz`` file (``FILE.npz:KEY``) or a text/CSV file.
    column : int or str, optional
        Text files with several columns: the label column, a header name (with
        ``header=True``) or a 0-based index (an int, or a string of digits that is not a
        header name).
    header : bool, default=False
        The first line of a text file names the columns.

    Returns
    -------
    ndarray (n_rows,)
        int64 or float64 for numeric labels, strings otherwise (or the stored array).

    Raises
    ------
    ValueError
        Naming the file, and the line where one is at fault.
    """
    path = os.fspath(path)
    if looks_like_array_file(path):
        if column is not None or header:
            raise ValueError(f"--labels-column and --labels-header apply to text/CSV label files, "
                             f"not to the array file {path!r}")
        return np.asarray(open_array_file(path, "labels"))
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read labels from {path!r}: {exc}") from exc
    try:
        rows = _rows(text, _delimiter(path, text))
    except csv.Error as exc:
        raise ValueError(f"cannot read labels from {path!r}: {exc}") from exc
    return _parse_labels(_labels_column(rows, path, column, header), path, header)


def _delimiter(path, text):
    if path.lower().endswith((".tsv", ".tab")) or ("\t" in text and "," not in text):
        return "\t"
    return ","


def _rows(text, delimiter):
    """(line number, stripped fields) of every row, blank rows as empty lists, trailing
    blank rows dropped."""
    reader = csv.reader(io.StringIO(text), delimiter=delimiter, skipinitialspace=True)
    rows = []
    for fields in reader:
        fields = [f.strip() for f in fields]
        rows.append((reader.line_num, [] if fields in ([], [""]) else fields))
    while rows and not rows[-1][1]:
        rows.pop()
    return rows


def _labels_column(rows, path, column, header):
    """[(line, label)] of the chosen column, checking the shape rules (d, e)."""
    if not rows:
        raise ValueError(f"the labels file {path!r} is empty")
    names = None
    if header:
        names, rows = rows[0][1], rows[1:]
        if not rows:
            raise ValueError(f"the labels file {path!r} has a header line but no labels")
    for line, fields in rows:
        if not fields:
            raise ValueError(f"line {line} of the labels file {path!r} is blank; every row needs a "
                             "label (only blank lines at the end are ignored)")
    width = len(rows[0][1])
    for line, fields in rows:
        if len(fields) != width:
            raise ValueError(f"line {line} of the labels file {path!r} has {len(fields)} field(s), "
                             f"line {rows[0][0]} has {width}")
    if names is not None and len(names) != width:
        raise ValueError(f"the header of the labels file {path!r} names {len(names)} column(s), "
                         f"its rows have {width}")
    index = _column_index(column, names, width, path, rows[0])
    out = []
    for line, fields in rows:
        if not fields[index]:
            raise ValueError(f"line {line} of the labels file {path!r} has an empty label")
        out.append((line, fields[index]))
    return out


def _column_index(column, names, width, path, first_row):
    if column is None:
        if width == 1:
            return 0
        line, fields = first_row
        raise ValueError(f"the labels file {path!r} has {width} columns (line {line}: "
                         f"{fields}); choose the label column with "
                         "--labels-column NAME (with --labels-header) or a 0-based INDEX")
    if isinstance(column, str) and names is not None and column in names:
        if names.count(column) > 1:
            raise ValueError(f"--labels-column {column!r}: the header of {path!r} names it "
                             f"{names.count(column)} times")
        return names.index(column)
    if isinstance(column, str) and _INTEGER.fullmatch(column.strip()):
        column = int(column)
    if isinstance(column, (int, np.integer)) and not isinstance(column, bool):
        if not 0 <= column < width:
            raise ValueError(f"--labels-column {column} is out of range: the labels file {path!r} "
                             f"has {width} column(s), numbered from 0")
        return int(column)
    if names is None:
        raise ValueError(f"--labels-column {column!r} is not a 0-based index; to choose a column "
                         "by name, pass --labels-header so that the first line names the columns")
    raise ValueError(f"--labels-column {column!r}: no such column in the header of {path!r} "
                     f"({', '.join(names)})")


def _parse_labels(labels, path, header):
    """Numbers when every label is one (rule f), else strings; rule g's header check."""
    values = [v for _, v in labels]
    numeric = [bool(_NUMBER.fullmatch(v)) for v in values]
    if all(numeric):
        numbers = [int(v) if _INTEGER.fullmatch(v) else float(v) for v in values]
        if all(isinstance(v, int) or v.is_integer() for v in numbers):
            try:
                return np.array([int(v) for v in numbers], dtype=np.int64)
            except OverflowError:  # beyond int64: still one class per value
                return np.array([int(v) for v in numbers], dtype=object)
        return np.array(numbers, dtype=np.float64)
    if not header and len(values) > 2 and not numeric[0] and all(numeric[1:]):
        raise ValueError(f"line {labels[0][0]} of the labels file {path!r} ({values[0]!r}) is not a "
                         "number but every other label is; if it is a header, pass --labels-header")
    return np.array(values)
