"""Embeddings in an Arrow column: a Hugging Face dataset saved with ``save_to_disk`` (a
directory of ``.arrow`` files) or an ``.arrow`` file, ``column=NAME``.

a. Hugging Face ``datasets`` writes Arrow IPC streams of record batches (1,000 rows each by
   default) and memory-maps them.  An embedding column is a list of floats per row: a
   fixed-size list (``Sequence(Value("float32"), length=d)``) or a plain list whose rows all
   have d values.  Either way the values of a record batch lie one after another in the file,
   so each batch is read in place: its byte offset in the file is found once from the memory
   map (where pyarrow placed the values buffer), and rows are then fetched with positioned
   reads (:class:`aflite_fast.io.rowsource.FileRows`; a file truncated during a run is an error,
   never a bus error).  Nothing is copied or converted beforehand.
b. When the values cannot be read in place (a compressed IPC file), batches are decoded one at
   a time (:class:`aflite_fast.io.rowsource.ChunkedRows`).
c. Refused, naming the column (and the row): a missing column, a column that is not a list of
   numbers, rows of different lengths, null rows or values.
d. A directory of a ``DatasetDict`` (``dataset_dict.json``) holds several splits: the message
   names them, so the user picks one (``DIR/train``).
e. pyarrow is imported on first use; :mod:`aflite_fast.io.formats` says which extra installs it.
"""
import json
import os

import numpy as np

from aflite_fast.io._pread import SharedFile
from aflite_fast.io.rowsource import ChunkedRows, ConcatRows, FileRows, natural_key


def _pa():
    from aflite_fast.io.optional import require

    return require("pyarrow")


def is_dataset_dir(path):
    """True for a directory saved by ``datasets`` (or one holding ``.arrow`` files)."""
    if not os.path.isdir(path):
        return False
    names = os.listdir(path)
    return ("state.json" in names or "dataset_dict.json" in names or "dataset_info.json" in names
            or any(n.endswith(".arrow") for n in names))


def arrow_files(path):
    """The ``.arrow`` files of ``path`` (a file, or a ``save_to_disk`` directory in its order)."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        return [path]
    names = os.listdir(path)
    if "dataset_dict.json" in names:
        splits = sorted(n for n in names if os.path.isdir(os.path.join(path, n)))
        raise ValueError(f"{path!r} holds a DatasetDict with splits {', '.join(splits) or 'none'}; give the "
                         f"directory of one split, e.g. {os.path.join(path, splits[0] if splits else 'train')!r}")
    state = os.path.join(path, "state.json")
    if os.path.isfile(state):
        try:
            with open(state, encoding="utf-8") as fh:
                files = [entry["filename"] for entry in json.load(fh)["_data_files"]]
            return [os.path.join(path, f) for f in files]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"cannot read the dataset's file list {state!r}: {exc}") from None
    files = sorted((n for n in names if n.endswith(".arrow")), key=natural_key)
    if not files:
        raise ValueError(f"{path!r} holds no .arrow files")
    return [os.path.join(path, f) for f in files]


def _mapped(path):
    """The file mapped read-only with read-ahead off (``MADV_RANDOM``), as a pyarrow buffer.

    Walking the record batches touches only their metadata, which lies between the batches'
    data: with the kernel's read-ahead (often megabytes) each touch would fetch the data around
    it too, and opening a dataset would read all of it.  Only the pages touched are read.
    """
    import mmap

    if os.path.getsize(path) == 0:
        raise ValueError(f"{path!r} is empty (0 bytes)")
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mm, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        mm.madvise(mmap.MADV_RANDOM)
    return _pa().py_buffer(mm)


def _open_ipc(source):
    """A reader of the record batches of an Arrow IPC stream or file."""
    pa = _pa()
    try:
        reader = pa.ipc.open_stream(source)
        return iter(reader)
    except pa.ArrowInvalid:
        if hasattr(source, "seek"):
            source.seek(0)
        reader = pa.ipc.open_file(source)
        return (reader.get_batch(i) for i in range(reader.num_record_batches))


def _schema(path):
    pa = _pa()
    with pa.memory_map(path) as mm:
        try:
            return pa.ipc.open_stream(mm).schema
        except pa.ArrowInvalid:
            mm.seek(0)
            return pa.ipc.open_file(mm).schema


def column_width(field, where):
    """``(d, value dtype)`` of a list-of-numbers field; ValueError naming it otherwise."""
    pa = _pa()
    t = field.type
    if pa.types.is_fixed_size_list(t):
        d = t.list_size
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        d = None
    else:
        raise ValueError(f"column {field.name!r} of {where} has type {t}, not a list of numbers (one "
                         "embedding per row)")
    vt = t.value_type
    if not (pa.types.is_floating(vt) or pa.types.is_integer(vt)):
        raise ValueError(f"column {field.name!r} of {where} holds lists of {vt}, not of numbers")
    return d, np.dtype(vt.to_pandas_dtype())


def list_values(arr, name, where, first_row, d=None):
    """``(values, d)``: the values of list array ``arr`` (a pyarrow Array of ``len(arr) * d``
    numbers, rows one after another), checking every row has ``d`` values and nothing is null.

    ``first_row`` is the index of ``arr``'s first row in the whole column (for messages)."""
    pa = _pa()
    if arr.null_count:
        row = first_row + int(np.flatnonzero(np.asarray(arr.is_null()))[0])
        raise ValueError(f"column {name!r} of {where} has no value at row {row} (null); every row needs an embedding")
    if pa.types.is_fixed_size_list(arr.type):
        d = arr.type.list_size
        values = arr.values.slice(arr.offset * d, len(arr) * d)
    else:
        offsets = np.asarray(arr.offsets)
        lengths = np.diff(offsets)
        if d is None:
            d = int(lengths[0]) if lengths.size else 0
        wrong = np.flatnonzero(lengths != d)
        if wrong.size:
            row = int(wrong[0])
            raise ValueError(f"column {name!r} of {where} holds lists of different lengths: row {first_row + row} "
                             f"has {int(lengths[row])} values, the rows before it {d}; every embedding must have "
                             "the same length")
        values = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    if values.null_count:
        pos = int(np.flatnonzero(np.asarray(values.is_null()))[0])
        raise ValueError(f"column {name!r} of {where} has a null value at row {first_row + pos // max(d, 1)}")
    return values, d


def _in_place_offset(values, base, size):
    """Byte offset in the mapped file of ``values``'s data, or None if it is not there."""
    buffers = values.buffers()
    data = buffers[1] if len(buffers) > 1 else None
    if data is None:
        return None
    itemsize = np.dtype(values.type.to_pandas_dtype()).itemsize
    start = data.address - base + values.offset * itemsize
    if start < 0 or start + len(values) * itemsize > size:
        return None
    return start


def _file_rows(path, column, what):
    """Row source of ``column`` in one Arrow file: in place per batch, or decoded per batch."""
    pa = _pa()
    schema = _schema(path)
    where = repr(path)
    pick_column(schema, column, path)
    d_declared, _ = column_width(schema.field(column), where)
    parts, names, in_place = [], [], True
    row, d = 0, d_declared
    shared = SharedFile(path, what)  # one descriptor for all the batches of the file
    mapped = _mapped(path)
    for i, batch in enumerate(_open_ipc(mapped)):
        if batch.num_rows == 0:
            continue
        values, d = list_values(batch.column(column), column, where, row, d)
        dtype = np.dtype(values.type.to_pandas_dtype())
        offset = _in_place_offset(values, mapped.address, mapped.size)
        if offset is None:
            in_place = False
            break
        parts.append(FileRows(shared, offset, (batch.num_rows, d), dtype, name=f"batch {i} of {where}"))
        names.append(f"{os.path.basename(path)!r}")
        row += batch.num_rows
    if in_place:
        if not parts:
            raise ValueError(f"{where} has no rows")
        return ConcatRows(parts, names, name=where)
    return _decoded_rows(path, column, what)


def _decoded_rows(path, column, what):
    """Row source decoding one record batch at a time (values not stored in place)."""
    pa = _pa()
    where = repr(path)
    counts, d, dtype = [], None, None
    with pa.memory_map(path) as mm:
        for batch in _open_ipc(mm):
            counts.append(batch.num_rows)
            if batch.num_rows and d is None:
                values, d = list_values(batch.column(column), column, where, sum(counts[:-1]))
                dtype = np.dtype(values.type.to_pandas_dtype())
    state = {"pos": None, "it": None, "mm": None}

    def decode(i):
        if state["pos"] is None or state["pos"] > i:
            if state["mm"] is not None:
                state["mm"].close()
            state["mm"] = pa.memory_map(path)
            state["it"], state["pos"] = _open_ipc(state["mm"]), 0
        while True:
            batch = next(state["it"])
            state["pos"] += 1
            if state["pos"] - 1 == i:
                break
        values, _ = list_values(batch.column(column), column, where, int(sum(counts[:i])), d)
        return values.to_numpy(zero_copy_only=False).reshape(-1, d).astype(dtype, copy=False)

    return ChunkedRows(counts, d, dtype, decode, files=(os.path.abspath(path),), name=where)


def open_arrow(path, column, what="embeddings"):
    """Column ``column`` of a ``save_to_disk`` directory or an ``.arrow`` file as a row source.

    Raises
    ------
    ValueError
        Naming the file and column: see the module docstring (c, d).
    """
    path = os.fspath(path)
    files = arrow_files(path)
    if column is None:
        column = pick_column(_schema(files[0]), None, path)
    parts, names = [], []
    for f in files:
        try:
            rows = _file_rows(f, column, what)
        except (OSError, _pa().ArrowException) as exc:
            raise ValueError(f"cannot read {what} from {f!r}: {exc}") from None
        parts.append(rows)
        names.append(f"file {os.path.basename(f)!r}")
    widths = {(p.shape[1], p.dtype) for p in parts}
    if len(widths) != 1:
        raise ValueError(f"the files of {path!r} differ in the width or dtype of column {column!r}")
    if len(parts) == 1:
        return parts[0]
    return ConcatRows(parts, names, name=repr(path))


def pick_column(schema, column, shown):
    """``column``, checked to be in ``schema``; without one, the table's only list column (or
    ValueError asking for ``column``)."""
    pa = _pa()
    if column is None:
        lists = [f.name for f in schema if pa.types.is_list(f.type) or pa.types.is_fixed_size_list(f.type)
                 or pa.types.is_large_list(f.type)]
        if len(lists) == 1:
            return lists[0]
        raise ValueError(f"{shown!r} is a table with columns {', '.join(schema.names)}; choose the embedding "
                         "column (--column NAME, or column=NAME)")
    if column not in schema.names:
        raise ValueError(f"no column {column!r} in {shown!r}; its columns are {', '.join(schema.names)}")
    return column


def read_arrow_column(path, column, what="labels"):
    """Column ``column`` of a ``save_to_disk`` directory or ``.arrow`` file, read whole (labels,
    group ids: one value per row)."""
    pa = _pa()
    pieces = []
    for f in arrow_files(path):
        try:
            schema = _schema(f)
            if column not in schema.names:
                raise ValueError(f"no column {column!r} in {f!r}; its columns are {', '.join(schema.names)}")
            # the arrays keep the map alive until they are converted below
            pieces.extend(batch.column(column) for batch in _open_ipc(_mapped(f)))
        except (OSError, pa.ArrowException) as exc:
            raise ValueError(f"cannot read {what} from {f!r}: {exc}") from None
    return column_to_numpy(pa.chunked_array(pieces) if pieces else None, column, repr(os.fspath(path)), what)


def column_to_numpy(chunked, column, where, what="labels"):
    """A scalar column as a NumPy array (numbers, or strings for text); nulls refused naming the row."""
    pa = _pa()
    if chunked is None or len(chunked) == 0:
        raise ValueError(f"column {column!r} of {where} has no rows")
    if isinstance(chunked, pa.ChunkedArray):
        chunked = chunked.combine_chunks()
    if pa.types.is_dictionary(chunked.type):
        chunked = chunked.dictionary_decode()
    if chunked.null_count:
        row = int(np.flatnonzero(np.asarray(chunked.is_null()))[0])
        raise ValueError(f"column {column!r} of {where} has a missing value at row {row}; every row needs one")
    t = chunked.type
    if pa.types.is_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t) or pa.types.is_struct(t):
        raise ValueError(f"column {column!r} of {where} has type {t}; {what} need one value per row")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return np.array(chunked.to_pylist())
    return chunked.to_numpy(zero_copy_only=False)


def dataset_rows(ds, column):
    """The embedding column of a ``datasets.Dataset`` without a copy: an ndarray view of the
    column's Arrow buffer (one chunk), or a row source over its chunks; through the dataset's
    index mapping (after ``select``/``shuffle``/``filter``) when it has one.

    Raises
    ------
    ValueError
        Naming the column: missing, not a list of numbers, lists of different lengths, nulls.
    """
    from aflite_fast.io.rowsource import ArrayRows, IndexedRows

    table = ds.data.table
    where = "the dataset"
    if column not in table.column_names:
        raise ValueError(f"the dataset has no column {column!r}; its columns are {', '.join(table.column_names)}")
    column_width(table.schema.field(column), where)
    arrays, names, row, d = [], [], 0, None
    for i, chunk in enumerate(table.column(column).chunks):
        if len(chunk) == 0:
            continue
        values, d = list_values(chunk, column, where, row, d)
        arrays.append(values.to_numpy(zero_copy_only=False).reshape(len(chunk), d))
        names.append(f"chunk {i}")
        row += len(chunk)
    if not arrays:
        raise ValueError(f"column {column!r} of the dataset has no rows")
    if len(arrays) == 1:
        rows = arrays[0]
    else:
        rows = ConcatRows([ArrayRows(a, name=n) for a, n in zip(arrays, names)], names, name=f"column {column!r}")
    indices = getattr(ds, "_indices", None)
    if indices is None:
        return rows
    mapping = indices.column(0).to_numpy()
    if not isinstance(rows, ConcatRows):
        rows = ArrayRows(rows, name=f"column {column!r}")
    return IndexedRows(rows, mapping, name=f"column {column!r}")


def dataset_column(ds, column, what="labels"):
    """A scalar column of a ``datasets.Dataset`` as a NumPy array, through its index mapping."""
    table = ds.data.table
    if column not in table.column_names:
        raise ValueError(f"the dataset has no column {column!r}; its columns are {', '.join(table.column_names)}")
    values = table.column(column)
    indices = getattr(ds, "_indices", None)
    if indices is not None:
        values = values.take(indices.column(0))
    return column_to_numpy(values, column, "the dataset", what)
