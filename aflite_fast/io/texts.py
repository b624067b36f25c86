"""Text columns of a table, read and checked: the inputs of ``--text-column`` and ``text_columns=``.

a. Formats, each read by an existing reader (no parser of the package's own): a Parquet file or
   directory and a Hugging Face dataset saved with ``save_to_disk`` or an ``.arrow`` file
   (:func:`aflite_fast.io.formats.read_column`); CSV (``.csv``), TSV (``.tsv``, ``.tab``) through
   ``pyarrow.csv``; JSON Lines (``.jsonl``, ``.ndjson``, ``.json`` with one object per line)
   through ``pyarrow.json``; a ``datasets.Dataset`` in memory
   (:func:`aflite_fast.io.arrow.dataset_column`).
b. CSV, TSV and JSON Lines files must be UTF-8: they are checked before they are parsed (the
   JSON reader would replace a bad byte with U+FFFD silently), and the first bad byte is named
   by its line.  A CSV text column is read as text whatever it looks like (a column of numbers
   too).
c. Every row of a text column holds a string with something besides white space: a missing
   value, an empty or blank string, a column that is not text are each one ValueError naming
   the column and the row.  A missing column names the columns there are.
"""
import codecs
import os

import numpy as np

#: Suffixes read by ``pyarrow.csv`` with a comma, or a tab.
CSV_SUFFIXES = (".csv",)
TSV_SUFFIXES = (".tsv", ".tab")
#: Suffixes read by ``pyarrow.json`` (one JSON object per line).
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
#: Bytes read at a time by the UTF-8 check.
CHECK_CHUNK = 16 << 20


def text_format(spec):
    """``"csv"``, ``"tsv"``, ``"jsonl"`` or ``"table"`` (Arrow, Hugging Face, Parquet) for ``spec``;
    ValueError for anything else."""
    from aflite_fast.io.formats import is_table

    path = os.fspath(spec)
    lower = path.lower()
    for suffixes, fmt in ((CSV_SUFFIXES, "csv"), (TSV_SUFFIXES, "tsv"), (JSONL_SUFFIXES, "jsonl")):
        if lower.endswith(suffixes):
            if not os.path.isfile(path):
                raise ValueError(f"cannot read {path!r}: no such file")
            return fmt
    if os.path.exists(path) and is_table(path):
        return "table"
    if not os.path.exists(path):
        raise ValueError(f"cannot read {path!r}: no such file or directory")
    raise ValueError(f"{path!r} is not a table of texts: give a .csv, .tsv, .jsonl or .parquet file, a Parquet "
                     "directory, or a Hugging Face dataset saved with save_to_disk (or an .arrow file)")


def check_utf8(path):
    """Raise ValueError naming the line of the first byte of ``path`` that is not UTF-8 (b)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    line, offset = 1, 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHECK_CHUNK)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                bad = chunk[exc.start] if exc.start < len(chunk) else None
                line += chunk.count(b"\n", 0, max(exc.start, 0))
                shown = f"byte 0x{bad:02x}" if bad is not None else "a truncated character at the end"
                raise ValueError(f"{os.fspath(path)!r} is not UTF-8 text: {shown} at line {line} (offset "
                                 f"{offset + max(exc.start, 0)}); save it as UTF-8") from None
            if not chunk:
                return
            line += chunk.count(b"\n")
            offset += len(chunk)


def _read_table(path, fmt, text_columns):
    """A CSV/TSV/JSON Lines file as a pyarrow Table, ``text_columns`` read as text (a)."""
    from aflite_fast.io.optional import require

    pa = require("pyarrow")
    check_utf8(path)
    try:
        if fmt == "jsonl":
            import pyarrow.json as pj

            table = pj.read_json(path)
        else:
            import pyarrow.csv as pc

            convert = pc.ConvertOptions(column_types={c: pa.string() for c in text_columns},
                                        strings_can_be_null=False)
            table = pc.read_csv(path, parse_options=pc.ParseOptions(delimiter="\t" if fmt == "tsv" else ","),
                                convert_options=convert)
    except pa.ArrowException as exc:
        raise ValueError(f"cannot read {os.fspath(path)!r}: {exc}") from None
    return table


def _column(table, column, path):
    """Column ``column`` of the pyarrow Table read from ``path``; ValueError naming the columns there are."""
    if column not in table.column_names:
        raise ValueError(f"no column {column!r} in {os.fspath(path)!r}; its columns are "
                         f"{', '.join(table.column_names)}")
    return table.column(column)


def check_texts(chunked, column, where):
    """The texts of the pyarrow column ``chunked`` as a list of str (never a fixed-width NumPy
    array, which one long text would make as wide for every row); ValueError naming the row of a
    missing, empty or blank value, or naming a column that is not text (c)."""
    import pyarrow as pa

    if isinstance(chunked, pa.ChunkedArray):
        chunked = chunked.combine_chunks() if chunked.num_chunks else pa.array([], pa.string())
    if pa.types.is_dictionary(chunked.type):
        chunked = chunked.dictionary_decode()
    t = chunked.type
    if len(chunked) == 0:
        raise ValueError(f"column {column!r} of {where} has no rows")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        raise ValueError(f"column {column!r} of {where} holds bytes that are not UTF-8 text; save it as UTF-8")
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise ValueError(f"column {column!r} of {where} is not a text column (its type is {t})")
    if chunked.null_count:
        row = int(np.flatnonzero(np.asarray(chunked.is_null()))[0])
        raise ValueError(f"column {column!r} of {where} has a missing text at row {row}; every row needs one "
                         "(drop the row, or fill it)")
    texts = chunked.to_pylist()
    for row, text in enumerate(texts):
        if not text.strip():
            raise ValueError(f"column {column!r} of {where} has an empty text at row {row}; every row needs one "
                             "(drop the row, or fill it)")
    return texts


def _table_column(spec, column):
    """Column ``column`` of an Arrow/Hugging Face or Parquet table as a pyarrow ChunkedArray."""
    import pyarrow as pa

    from aflite_fast.io.formats import detect

    pieces, path = [], os.fspath(spec)
    if detect(spec) == "parquet":
        from aflite_fast.io.parquet import parquet_column_chunks

        pieces = parquet_column_chunks(spec, column, "texts")
    else:
        from aflite_fast.io.arrow import _mapped, _open_ipc, _schema, arrow_files

        for f in arrow_files(spec):
            try:
                names = _schema(f).names
                if column not in names:
                    raise ValueError(f"no column {column!r} in {f!r}; its columns are {', '.join(names)}")
                pieces.extend(batch.column(column) for batch in _open_ipc(_mapped(f)))
            except (OSError, pa.ArrowException) as exc:
                raise ValueError(f"cannot read texts from {f!r}: {exc}") from None
    if not pieces:
        raise ValueError(f"column {column!r} of {path!r} has no rows")
    return pa.chunked_array(pieces)


def read_text_table(spec, text_columns, other_columns=(), text_flag=None):
    """Read ``text_columns`` (checked texts) and ``other_columns`` (labels, group ids: as
    :func:`aflite_fast.io.formats.read_column` reads them) of the table ``spec``.

    Parameters
    ----------
    spec : str, os.PathLike or datasets.Dataset
        A CSV/TSV/JSON Lines file, a Parquet file or directory, a Hugging Face dataset saved with
        ``save_to_disk`` or an ``.arrow`` file, or a ``datasets.Dataset`` (module docstring, a).
    text_columns : sequence of str
    other_columns : sequence of (column, what) or (column, what, flag)
        ``what`` names the values in messages ("labels", "group ids"); ``flag``, when given,
        starts the messages about that column (the command line's flag).
    text_flag : str, optional
        Starts the messages about the file and the text columns.

    Returns
    -------
    texts : dict {column: list of str}
    others : list of ndarray, one per ``other_columns``

    Raises
    ------
    ValueError
        One clear message for a missing file or column, a file that is not UTF-8, a missing,
        empty or blank text, a column that is not text (module docstring, b and c).
    """
    from aflite_fast.io.arrow import column_to_numpy, dataset_column

    if not text_columns:
        raise ValueError("no text column given")
    if len(set(text_columns)) != len(text_columns):
        raise ValueError(f"{text_flag + ': ' if text_flag else ''}text columns repeat: {', '.join(text_columns)}")
    if hasattr(spec, "data") and hasattr(spec, "select"):  # a datasets.Dataset
        where = "the dataset"
        table = spec.data.table
        indices = getattr(spec, "_indices", None)

        def raw(column):
            if column not in table.column_names:
                raise ValueError(f"the dataset has no column {column!r}; its columns are "
                                 f"{', '.join(table.column_names)}")
            values = table.column(column)
            return values if indices is None else values.take(indices.column(0))

        read = lambda column, what: dataset_column(spec, column, what)  # noqa: E731
    else:
        where = repr(os.fspath(spec))
        fmt = _flagged(text_flag, lambda: text_format(spec))
        if fmt == "table":
            from aflite_fast.io.formats import read_column

            raw = lambda column: _table_column(spec, column)  # noqa: E731
            read = lambda column, what: read_column(spec, column, what)  # noqa: E731
        else:
            table = _flagged(text_flag, lambda: _read_table(spec, fmt, text_columns))
            raw = lambda column: _column(table, column, spec)  # noqa: E731
            read = lambda column, what: column_to_numpy(_column(table, column, spec), column, where, what)  # noqa: E731
    texts = {column: _flagged(text_flag, lambda: check_texts(raw(column), column, where)) for column in text_columns}
    return texts, [_flagged(other[2] if len(other) > 2 else None, lambda: read(other[0], other[1]))
                   for other in other_columns]


def _flagged(flag, read):
    """``read()``, its ValueError starting with ``flag`` when given."""
    try:
        return read()
    except ValueError as exc:
        if flag is None:
            raise
        raise ValueError(f"{flag}: {exc}") from None
