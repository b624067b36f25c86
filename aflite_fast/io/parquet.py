"""Embeddings in a Parquet column: a ``.parquet`` file or a directory of them, ``column=NAME``.

a. Parquet stores a column compressed and encoded, so rows cannot be read in place: they are
   decoded in batches of about :data:`BATCH_BYTES` within one row group
   (:class:`aflite_fast.io.rowsource.ChunkedRows`, which keeps one decoded batch).  Reading
   front to back (the validation scan, the gathers, which take sorted rows) decodes each batch
   once per pass, and the memory held is one batch, however large the row groups are.
b. The column is a list of numbers per row (fixed-size or plain lists of equal length), as
   in :mod:`.arrow`, whose checks and messages apply: a missing column, lists of different
   lengths, nulls are refused naming the column and the row.
c. A file changed during a run (truncated, rewritten) makes pyarrow's read fail: that is an
   :class:`aflite_fast.io._pread.InputChangedError` naming the file.
"""
import os

import numpy as np

from aflite_fast.io._pread import InputChangedError
from aflite_fast.io.arrow import column_to_numpy, column_width, list_values, pick_column
from aflite_fast.io.rowsource import ChunkedRows, natural_key

#: Decoded bytes per batch (rows of the embedding column in their stored dtype).
BATCH_BYTES = 16 << 20


def _pq():
    from aflite_fast.io.optional import require

    require("pyarrow")
    import pyarrow.parquet as pq

    return pq


def parquet_files(path):
    """The ``.parquet`` files of ``path`` (a file, or a directory in natural order)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return [path]
    files = sorted((n for n in os.listdir(path) if n.lower().endswith((".parquet", ".pq"))
                    and not n.startswith(".")), key=natural_key)
    if not files:
        raise ValueError(f"{path!r} holds no .parquet files")
    return [os.path.join(path, f) for f in files]


def _open(path, what):
    pq = _pq()
    try:
        return pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    except Exception as exc:  # pyarrow raises its own error types (ArrowInvalid, OSError)
        raise ValueError(f"cannot read {what} from {path!r}: {exc}") from None


def open_parquet(path, column, what="embeddings"):
    """Column ``column`` of a Parquet file or directory as a row source, decoded a batch at a time.

    Raises
    ------
    ValueError
        Naming the file and column (see the module docstring).
    """
    files = parquet_files(path)
    shown = os.fspath(path)
    chunks = []  # (file, row group, first row in the group, rows)
    d = dtype = None
    for f in files:
        pf = _open(f, what)
        schema = pf.schema_arrow
        column = pick_column(schema, column, f)
        width, vtype = column_width(schema.field(column), repr(f))
        if d is None:
            # the width of a plain list column is read from its first row
            d = width if width is not None else _first_width(pf, column, f)
            dtype = vtype
        elif (width not in (None, d)) or vtype != dtype:
            raise ValueError(f"column {column!r} of {f!r} holds {width} x {vtype}, the files before it "
                             f"{d} x {dtype}")
        step = max(1, BATCH_BYTES // max(1, d * dtype.itemsize))
        for g in range(pf.metadata.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            for s in range(0, n, step):
                chunks.append((f, g, s, min(step, n - s)))
    if not chunks:
        raise ValueError(f"{shown!r} has no rows")
    starts = np.concatenate(([0], np.cumsum([c[3] for c in chunks])))
    state = {"key": None, "it": None, "file": None, "pf": None}

    def decode(i):
        f, g, s, n = chunks[i]
        try:
            if state["key"] != (f, g, s):  # not the batch that follows the last one decoded
                if state["file"] != f:
                    state["pf"], state["file"] = _open(f, what), f
                state["it"] = state["pf"].iter_batches(batch_size=step, row_groups=[g], columns=[column])
                for _ in range(s // step):
                    next(state["it"])
            batch = next(state["it"])
        except (StopIteration, OSError, ValueError) as exc:
            raise InputChangedError(f"cannot read {what} from {f!r} (row group {g}): {exc or 'it ended early'}; "
                                    "was it changed during the run?") from None
        except Exception as exc:  # pyarrow's own errors
            raise InputChangedError(f"cannot read {what} from {f!r} (row group {g}): {exc}") from None
        if batch.num_rows != n:
            raise InputChangedError(f"{what} file {f!r} changed during the run: row group {g} gave {batch.num_rows} "
                                    f"rows where {n} were expected")
        values, _ = list_values(batch.column(0), column, repr(f), int(starts[i]), d)
        state["key"] = (f, g, s + n)
        return values.to_numpy(zero_copy_only=False).reshape(n, d).astype(dtype, copy=False)

    names = [f"row group {g} of {os.path.basename(f)!r}" for f, g, _, _ in chunks]
    return ChunkedRows([c[3] for c in chunks], d, dtype, decode, files=[os.path.abspath(f) for f in files],
                       name=repr(shown), chunk_names=names)


def _first_width(pf, column, f):
    for batch in pf.iter_batches(batch_size=1, columns=[column]):
        if batch.num_rows:
            return list_values(batch.column(0), column, repr(f), 0)[1]
    raise ValueError(f"{f!r} has no rows")


def parquet_column_chunks(path, column, what):
    """Column ``column`` of every file of a Parquet file or directory, as a list of pyarrow arrays
    (the files' chunks in order); ValueError naming the file for a missing column or a read error."""
    pieces = []
    for f in parquet_files(path):
        pf = _open(f, what)
        if column not in pf.schema_arrow.names:
            raise ValueError(f"no column {column!r} in {f!r}; its columns are {', '.join(pf.schema_arrow.names)}")
        try:
            pieces.extend(pf.read(columns=[column]).column(0).chunks)
        except Exception as exc:  # pyarrow's own errors
            raise ValueError(f"cannot read {what} from {f!r}: {exc}") from None
    return pieces


def read_parquet_column(path, column, what="labels"):
    """Column ``column`` of a Parquet file or directory, read whole (labels, group ids)."""
    import pyarrow as pa

    pieces = parquet_column_chunks(path, column, what)
    return column_to_numpy(pa.chunked_array(pieces) if pieces else None, column, repr(os.fspath(path)), what)
