"""Labels (or group ids) from a file: a ``.npy``/``.npz`` array, or text/CSV with one per row.

The rules (``aflite-fast filter --help`` and the README repeat them):

a. ``.npy``, ``.npz`` or ``FILE.npz:KEY`` (recognised by content or name): the array as stored.
b. Text is UTF-8; a byte-order mark is dropped.  Fields are separated by commas (csv quoting
   rules), or by tabs in a ``.tsv`` file or one with tabs and no commas; whitespace around a
   field is dropped.
c. ``header=True``: the first line names the columns.
d. A file with one column holds the labels.  A file with several is refused unless
   ``column`` chooses one: a name from the header, or a 0-based index.  (An ``id,label`` file
   read as "the first field" used the ids as labels, silently.)
e. Every row has the same number of fields and a non-empty label; a NUL byte anywhere is
   refused (the file is binary or damaged).  Blank lines at the end
   are ignored; a blank line before the last label is an error naming the line, since
   skipping it would shift every later label onto the wrong row.
f. If every label is a number, labels are numbers: ``1``, ``1.0`` and ``01`` are one class
   (int64 when all are whole, float64 otherwise).  Otherwise labels are strings, compared as
   written.  ``inf`` is a string, as numpy would read it as a number.
h. A missing value is refused naming its line, as an empty field is: ``nan`` in any case
   (``NaN``, ``-nan``) and the usual spreadsheet and pandas markers (``NA``, ``N/A``, ``n/a``,
   ``<NA>``, ``#N/A``, ``NULL``, ``null``, ``None``).  Made a class of its own, a missing
   label would be learned and filtered like any other.
g. Without ``header=True``, a first line that is not a number above labels that all are is
   refused as a likely header.

i. A table (a Hugging Face dataset saved with ``save_to_disk``, an ``.arrow`` file, a Parquet
   file or directory; often the embeddings' own file) gives the column ``column`` names
   (:func:`aflite_fast.io.formats.read_column`); a missing value is refused naming its row.

Messages name the command-line flags (``--labels-column``, ``--labels-header``), as the
command line is this reader's user.  ``filter --groups FILE`` reads its group ids under the
same rules (``kind="groups"``: messages say "groups file" and name ``--groups-column`` and
``--groups-header``).
"""
import csv
import io
import os
import re
from typing import NamedTuple

import numpy as np

from aflite_fast.io.arrayfile import looks_like_array_file, open_array_file
from aflite_fast.io.formats import is_table, read_column

_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(r"[+-]?\d+")
#: Markers of a missing value (rule h); ``nan`` is matched in any case.
_MISSING = re.compile(r"NA|N/A|n/a|<NA>|#N/A|#NA|NULL|null|None")


class _Kind(NamedTuple):
    """How messages name what a file holds, and the flags that choose its column and header."""

    plural: str
    singular: str
    column_flag: str
    header_flag: str


#: ``kind=`` of :func:`read_labels_file`.
KINDS = {"labels": _Kind("labels", "label", "--labels-column", "--labels-header"),
         "groups": _Kind("groups", "group id", "--groups-column", "--groups-header"),
         "sources": _Kind("sources", "source id", "--sources-column", "--sources-header")}


def read_labels_file(path, *, column=None, header=False, kind="labels"):
    """Labels from ``path`` under the rules of this module.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.npy``/``.npz`` file (``FILE.npz:KEY``), a text/CSV file, or a table (rule i).
    column : int or str, optional
        Text files with several columns: the label column, a header name (with
        ``header=True``) or a 0-based index (an int, or a string of digits that is not a
        header name).
    header : bool, default=False
        The first line of a text file names the columns.
    kind : {"labels", "groups", "sources"}, default="labels"
        What the file holds, for the messages (and the flags they name).

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
    kind = KINDS[kind]
    if is_table(path):  # rule i
        if header:
            raise ValueError(f"{kind.header_flag} applies to text/CSV {kind.singular} files; {path!r} is a table "
                             "whose columns have names")
        if column is None:
            raise ValueError(f"{path!r} is a table (Arrow, Hugging Face dataset, Parquet): choose its "
                             f"{kind.singular} column with {kind.column_flag} NAME")
        try:
            return read_column(path, str(column), kind.plural)
        except ValueError as exc:
            raise ValueError(f"{kind.column_flag} {column!r}: {exc}") from None
    if looks_like_array_file(path):
        if column is not None or header:
            raise ValueError(f"{kind.column_flag} and {kind.header_flag} apply to text/CSV {kind.singular} "
                             f"files, not to the array file {path!r}")
        return np.asarray(open_array_file(path, kind.plural))
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {kind.plural} from {path!r}: {exc}") from exc
    if "\x00" in text:  # a binary file, or one damaged: no label holds a NUL
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise ValueError(f"line {line} of the {kind.plural} file {path!r} holds a NUL byte: it is not a text file "
                         "of labels")
    try:
        rows = _rows(text, _delimiter(path, text))
    except csv.Error as exc:
        raise ValueError(f"cannot read {kind.plural} from {path!r}: {exc}") from exc
    return _parse_labels(_labels_column(rows, path, column, header, kind), path, header, kind)


def _delimiter(path, text):
    if path.lower().endswith((".tsv", ".tab")) or ("\t" in text and "," not in text):
        return "\t"
    return ","


def _rows(text, delimiter):
    """(line number, stripped fields) of every row, blank rows as empty lists, trailing
    blank rows dropped."""
    # newline="": lines end at \n, \r\n or a lone \r (old Mac files), as the csv module expects
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, skipinitialspace=True)
    rows = []
    for fields in reader:
        fields = [f.strip() for f in fields]
        rows.append((reader.line_num, [] if fields in ([], [""]) else fields))
    while rows and not rows[-1][1]:
        rows.pop()
    return rows


def _labels_column(rows, path, column, header, kind):
    """[(line, label)] of the chosen column, checking the shape rules (d, e)."""
    what = f"the {kind.plural} file {path!r}"
    if not rows:
        raise ValueError(f"{what} is empty")
    names = None
    if header:
        names, rows = rows[0][1], rows[1:]
        if not rows:
            raise ValueError(f"{what} has a header line but no {kind.plural}")
    for line, fields in rows:
        if not fields:
            raise ValueError(f"line {line} of {what} is blank; every row needs a "
                             f"{kind.singular} (only blank lines at the end are ignored)")
    width = len(rows[0][1])
    for line, fields in rows:
        if len(fields) != width:
            raise ValueError(f"line {line} of {what} has {len(fields)} field(s), "
                             f"line {rows[0][0]} has {width}")
    if names is not None and len(names) != width:
        raise ValueError(f"the header of {what} names {len(names)} column(s), "
                         f"its rows have {width}")
    index = _column_index(column, names, width, path, rows[0], kind)
    out = []
    for line, fields in rows:
        if not fields[index]:
            raise ValueError(f"line {line} of {what} has an empty {kind.singular}")
        if _MISSING.fullmatch(fields[index]) or fields[index].lower().lstrip("+-") == "nan":
            raise ValueError(f"line {line} of {what} has a missing {kind.singular} ({fields[index]!r}); "
                             f"every row needs one")
        out.append((line, fields[index]))
    return out


def _column_index(column, names, width, path, first_row, kind):
    flag = kind.column_flag
    if column is None:
        if width == 1:
            return 0
        line, fields = first_row
        raise ValueError(f"the {kind.plural} file {path!r} has {width} columns (line {line}: "
                         f"{fields}); choose the {kind.singular} column with "
                         f"{flag} NAME (with {kind.header_flag}) or a 0-based INDEX")
    if isinstance(column, str) and names is not None and column in names:
        if names.count(column) > 1:
            raise ValueError(f"{flag} {column!r}: the header of {path!r} names it "
                             f"{names.count(column)} times")
        return names.index(column)
    if isinstance(column, str) and _INTEGER.fullmatch(column.strip()):
        column = int(column)
    if isinstance(column, (int, np.integer)) and not isinstance(column, bool):
        if not 0 <= column < width:
            raise ValueError(f"{flag} {column} is out of range: the {kind.plural} file {path!r} "
                             f"has {width} column(s), numbered from 0")
        return int(column)
    if names is None:
        raise ValueError(f"{flag} {column!r} is not a 0-based index; to choose a column "
                         f"by name, pass {kind.header_flag} so that the first line names the columns")
    raise ValueError(f"{flag} {column!r}: no such column in the header of {path!r} "
                     f"({', '.join(names)})")


def _parse_labels(labels, path, header, kind):
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
        raise ValueError(f"line {labels[0][0]} of the {kind.plural} file {path!r} ({values[0]!r}) is not a "
                         f"number but every other {kind.singular} is; if it is a header, pass {kind.header_flag}")
    return np.array(values)
