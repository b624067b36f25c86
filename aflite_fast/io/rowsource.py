"""Row sources: an N x d matrix stored in one or many files, read a run of rows at a time.

a. The engine needs three things of X: its shape and dtype, a run of rows (the validation
   scan, contiguous gathers) and a sorted set of rows (gathers of partitions).  A
   :class:`RowSource` offers exactly these (``shape``, ``dtype``, :meth:`~RowSource.read_rows`,
   :meth:`~RowSource.take`), always into a buffer the caller may reuse, so a reader never
   holds more than the chunk it was asked for: the data layer's chunked float32 conversion and
   memory budget apply to every format alike.
b. Formats are composed from three kinds of source: :class:`FileRows` (rows stored
   uncompressed at a byte offset of a file: a ``.npy`` shard, a tensor of a safetensors file,
   a record batch of an Arrow file), read with positioned reads (:mod:`._pread`: a file
   truncated during a run is an error naming it, never a bus error); :class:`ArrayRows`
   (rows already in memory, e.g. a decoded Parquet batch or an Arrow column held by a
   ``datasets.Dataset``); and :class:`ConcatRows`, sources one after another along the rows
   (shards, record batches).  :class:`ChunkedRows` decodes rows a chunk at a time for
   formats that cannot be read in place (Parquet).
c. Messages name a row as the matrix's row and, for a source of several parts, its place in
   the part (:meth:`RowSource.locate`): ``row 1204, row 180 of shard 'part_10.npy'``.
d. ``X[a:b]`` and ``X[rows]`` read those rows (an ndarray), and ``np.asarray(X)`` reads them
   all: the estimators, which hold X in memory anyway, take a source like an array.
"""
import os
import re

import numpy as np

from aflite_fast.io._pread import InputChangedError, SharedFile

__all__ = ["RowSource", "FileRows", "ArrayRows", "ConcatRows", "ChunkedRows", "IndexedRows", "InputChangedError",
           "natural_key", "MERGE_BYTES"]


#: Rows of a sorted selection closer than this many bytes are copied by one read of the span
#: between them, from sources that hold their rows in memory (a decoded batch, an array): one
#: copy of a few kilobytes more costs less than a Python step per row.  Files are read one run
#: of consecutive rows at a time instead (:attr:`FileRows.merge_bytes` is 0): spans read from a
#: cold file were measured 4 times slower than reads of the rows alone (benchmarks/RESULTS.md).
MERGE_BYTES = 16 << 10


def natural_key(name):
    """Sort key putting ``part_2`` before ``part_10`` (digit runs compared as numbers)."""
    return [(0, int(tok), "") if tok.isdigit() else (1, 0, tok) for tok in re.split(r"(\d+)", os.fspath(name))]


def pieces(offsets, start, stop):
    """``(i, a, b)`` for every part ``i`` that rows [start, stop) touch, the rows [a, b) of it;
    part ``i`` holds rows [offsets[i], offsets[i + 1])."""
    i = int(np.searchsorted(offsets, start, side="right")) - 1
    pos = start
    while pos < stop:
        end = min(stop, int(offsets[i + 1]))
        if end > pos:
            yield i, pos, end
        pos = end
        i += 1


def _locate(offsets, names, row):
    """``"1204, row 180 of shard 'part_10.npy'"``: the row, and its place in the part holding it."""
    i = int(np.searchsorted(offsets, row, side="right")) - 1
    return f"{int(row)}, row {int(row - offsets[i])} of {names[i]}"


class RowSource:
    """An (N, d) matrix whose rows are read on request.  Subclasses implement :meth:`_read`.

    Attributes
    ----------
    shape : tuple (N, d)
    dtype : numpy.dtype of the rows as stored
    files : tuple of str, the files holding the rows (watched for changes, see
        :mod:`aflite_fast.io.watch`)
    name : str, how messages name the source
    """

    ndim = 2
    #: See :meth:`take`; None: :data:`MERGE_BYTES`.
    merge_bytes = None

    def __init__(self, shape, dtype, files=(), name="X"):
        self.shape = (int(shape[0]), int(shape[1]))
        self.dtype = np.dtype(dtype)
        self.files = tuple(files)
        self.name = name

    # ---------------------------------------------------------------- what subclasses give
    def _read(self, start, stop, out):
        """Write rows [start, stop) into ``out`` (C-contiguous, (stop - start, d), self.dtype)."""
        raise NotImplementedError

    def locate(self, row):
        """Where row ``row`` is, for messages that say "row {where}": the row, and for a source of
        several parts the part and the row in it (``1204, row 180 of shard 'part_10.npy'``)."""
        return str(int(row))

    # ---------------------------------------------------------------- reading
    def _out(self, n, out):
        if out is None:
            return np.empty((n, self.shape[1]), dtype=self.dtype)
        if out.shape != (n, self.shape[1]) or out.dtype != self.dtype or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous {(n, self.shape[1])} {self.dtype} array, "
                             f"got {out.shape} {out.dtype}")
        return out

    def read_rows(self, start, stop, out=None):
        """Rows [start, stop) as an ndarray of the stored dtype (written into ``out`` if given)."""
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.shape[0]:
            raise IndexError(f"rows [{start}, {stop}) are outside the {self.shape[0]} rows of {self.name}")
        out = self._out(stop - start, out)
        if stop > start:
            self._read(start, stop, out)
        return out

    def take(self, rows, out=None):
        """Rows ``rows`` (sorted, int) as an ndarray.

        A run of consecutive rows is read straight into ``out``.  Rows closer than
        :attr:`merge_bytes` (:data:`MERGE_BYTES` unless the source says otherwise) are read as
        one span from the first to the last, into a scratch buffer no larger than ``out``, and
        picked from it.
        """
        rows = np.asarray(rows, dtype=np.int64)
        out = self._out(rows.size, out)
        if rows.size == 0:
            return out
        if rows[0] < 0 or rows[-1] >= self.shape[0]:
            raise IndexError(f"rows outside the {self.shape[0]} rows of {self.name}")
        merge = MERGE_BYTES if self.merge_bytes is None else self.merge_bytes
        gap = merge // max(1, self.shape[1] * self.dtype.itemsize)
        bounds = np.concatenate(([0], np.flatnonzero(np.diff(rows) > gap + 1) + 1, [rows.size]))
        if gap == 0:  # runs of consecutive rows only: each read straight into out
            firsts, lasts = rows[bounds[:-1]].tolist(), rows[bounds[1:] - 1].tolist()
            for i0, i1, a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), firsts, lasts):
                self._read(a, b + 1, out[i0:i1])
            return out
        limit = rows.size  # rows a read spans at most: the scratch buffer is no larger than out
        scratch = None
        for i0, i1 in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            while i0 < i1:
                a = int(rows[i0])
                j = i0 + int(np.searchsorted(rows[i0:i1], a + limit))
                b = int(rows[j - 1]) + 1
                if b - a == j - i0:
                    self._read(a, b, out[i0:j])
                else:
                    if scratch is None:
                        scratch = np.empty((limit, self.shape[1]), dtype=self.dtype)
                    self._read(a, b, scratch[:b - a])
                    np.take(scratch, rows[i0:j] - a, axis=0, out=out[i0:j])
                i0 = j
        return out

    def close(self):
        """Release open files (they are reopened when read again)."""

    # ---------------------------------------------------------------- array-like
    def __len__(self):
        return self.shape[0]

    @property
    def size(self):
        return self.shape[0] * self.shape[1]

    @property
    def nbytes(self):
        return self.size * self.dtype.itemsize

    def __getitem__(self, key):
        if isinstance(key, tuple):  # X[rows, :]
            if len(key) == 2 and key[1] == slice(None):
                return self[key[0]]
            raise IndexError(f"{type(self).__name__} selects rows only")
        if isinstance(key, slice):
            start, stop, step = key.indices(self.shape[0])
            if step != 1:
                return self[np.arange(start, stop, step)]
            return self.read_rows(start, max(start, stop))
        if isinstance(key, (int, np.integer)):
            row = int(key) + (self.shape[0] if key < 0 else 0)
            return self.read_rows(row, row + 1)[0]
        rows = np.asarray(key)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        rows = rows.astype(np.int64, copy=False)
        rows = np.where(rows < 0, rows + self.shape[0], rows)
        order = np.argsort(rows, kind="stable")
        sorted_rows = rows[order]
        if np.all(order == np.arange(order.size)):
            return self.take(sorted_rows)
        got = self.take(sorted_rows)
        out = np.empty_like(got)
        out[order] = got
        return out

    def __array__(self, dtype=None, copy=None):
        rows = self.read_rows(0, self.shape[0])
        return rows if dtype is None else rows.astype(dtype, copy=False)

    def __repr__(self):
        return f"{type(self).__name__}({self.name}, shape={self.shape}, dtype={self.dtype})"


class FileRows(RowSource):
    """Rows stored C-ordered and uncompressed at byte ``offset`` of a file, read with positioned
    reads (:class:`aflite_fast.io._pread.SharedFile`), one read per run of consecutive rows."""

    merge_bytes = 0

    def __init__(self, file, offset, shape, dtype, name=None):
        if not isinstance(file, SharedFile):
            file = SharedFile(file)
        super().__init__(shape, dtype, (file.path,), name or repr(file.path))
        self.file = file
        self.offset = int(offset)
        self.row_bytes = self.shape[1] * self.dtype.itemsize

    def _read(self, start, stop, out):
        self.file.read_into(out, self.offset + start * self.row_bytes)

    def close(self):
        self.file.close()


class ArrayRows(RowSource):
    """Rows held by an array (in memory, or mapped by another library)."""

    def __init__(self, array, name="X", files=()):
        array = np.asarray(array)
        super().__init__(array.shape, array.dtype, files, name)
        self.array = array

    def _read(self, start, stop, out):
        out[...] = self.array[start:stop]


class ConcatRows(RowSource):
    """Sources of the same width and dtype one after another along the rows.

    Parameters
    ----------
    parts : list of RowSource
    part_names : list of str, optional
        How messages name each part (``"shard 'part_10.npy'"``).
    """

    def __init__(self, parts, part_names=None, name="X"):
        parts = list(parts)
        if not parts:
            raise ValueError(f"{name} holds no rows")
        widths = {p.shape[1] for p in parts}
        dtypes = {p.dtype for p in parts}
        if len(widths) != 1 or len(dtypes) != 1:
            raise ValueError(f"the parts of {name} differ in width or dtype")
        files = []
        for p in parts:
            files.extend(f for f in p.files if f not in files)
        super().__init__((sum(p.shape[0] for p in parts), parts[0].shape[1]), parts[0].dtype, files, name)
        self.parts = parts
        self.part_names = list(part_names) if part_names is not None else [p.name for p in parts]
        self.offsets = np.concatenate(([0], np.cumsum([p.shape[0] for p in parts]))).astype(np.int64)

    def _read(self, start, stop, out):
        for i, a, b in pieces(self.offsets, start, stop):
            first = int(self.offsets[i])
            self.parts[i]._read(a - first, b - first, out[a - start:b - start])

    def take(self, rows, out=None):
        """Rows ``rows`` (sorted), each part's taken by the part (its own way of reading)."""
        rows = np.asarray(rows, dtype=np.int64)
        out = self._out(rows.size, out)
        if rows.size and (rows[0] < 0 or rows[-1] >= self.shape[0]):
            raise IndexError(f"rows outside the {self.shape[0]} rows of {self.name}")
        cut = np.searchsorted(rows, self.offsets)
        for i in np.flatnonzero(np.diff(cut)).tolist():
            a, b = int(cut[i]), int(cut[i + 1])
            self.parts[i].take(rows[a:b] - self.offsets[i], out[a:b])
        return out

    def locate(self, row):
        return _locate(self.offsets, self.part_names, row)

    def close(self):
        for p in self.parts:
            p.close()


class ChunkedRows(RowSource):
    """Rows decoded a chunk at a time by ``decode(i) -> ndarray`` for chunks of known sizes
    (Parquet batches): the last decoded chunk is kept, so reading rows front to back decodes
    each chunk once per pass, and no more than one chunk is held.

    Parameters
    ----------
    chunk_rows : sequence of int, the number of rows of every chunk
    decode : callable(i) -> (chunk_rows[i], d) ndarray of ``dtype``
    chunk_names : list of str, how messages name the chunks
    """

    def __init__(self, chunk_rows, d, dtype, decode, files=(), name="X", chunk_names=None):
        self.offsets = np.concatenate(([0], np.cumsum(chunk_rows))).astype(np.int64)
        super().__init__((int(self.offsets[-1]), d), dtype, files, name)
        self.decode = decode
        self.chunk_names = chunk_names
        self._held = (None, None)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_held"] = (None, None)
        return state

    def _chunk(self, i):
        if self._held[0] != i:
            self._held = (None, None)  # let the previous chunk go first
            self._held = (i, self.decode(i))
        return self._held[1]

    def _read(self, start, stop, out):
        for i, a, b in pieces(self.offsets, start, stop):
            first = int(self.offsets[i])
            out[a - start:b - start] = self._chunk(i)[a - first:b - first]

    def locate(self, row):
        return _locate(self.offsets, self.chunk_names, row) if self.chunk_names else str(int(row))

    def close(self):
        self._held = (None, None)


class IndexedRows(RowSource):
    """Rows ``base[indices[i]]``: a view through an index mapping (a ``datasets.Dataset`` after
    ``select``, ``shuffle`` or ``filter``), read without materialising the selection."""

    def __init__(self, base, indices, name="X"):
        indices = np.asarray(indices, dtype=np.int64)
        super().__init__((indices.size, base.shape[1]), base.dtype, base.files, name)
        if indices.size and (indices.min() < 0 or indices.max() >= base.shape[0]):
            raise ValueError(f"the index mapping of {name} points outside its {base.shape[0]} rows")
        self.base = base
        self.indices = indices

    def _read(self, start, stop, out):
        wanted = self.indices[start:stop]
        order = np.argsort(wanted, kind="stable")
        out[order] = self.base.take(wanted[order])

    def locate(self, row):
        return f"{int(row)}, row {int(self.indices[row])} of the underlying table"
