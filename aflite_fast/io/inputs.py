"""Opening and validating inputs: embeddings (ndarray, memmap or .npy/.npz path) and labels."""
import os
from dataclasses import dataclass

import numpy as np

from aflite_fast.io.fingerprint import block_rows
from aflite_fast.io.formats import open_rows
from aflite_fast.io.rows import first_nonfinite_row, first_row_beyond
from aflite_fast.io.rowsource import RowSource
from aflite_fast.io.sparse import check_sparse, is_sparse, is_sparse_npz, open_npz
from aflite_fast.runtime.threads import for_row_ranges

#: Largest magnitude the float32 kernel can hold; float64 values beyond it would become inf.
FLOAT32_MAX = float(np.finfo(np.float32).max)

#: Rows read at a time by scans over X (validation, mean).
SCAN_CHUNK_BYTES = 64 << 20
#: Rows (in X's dtype) read at a time by :func:`gather_rows`; its only scratch buffer.
GATHER_CHUNK_BYTES = 8 << 20


def check_dtype(dtype):
    """Raise unless the rows of X can be converted to float32 rows chunk by chunk.

    Accepted: float16/32/64, signed and unsigned integers and booleans, in either byte order
    (scikit-learn accepts the same).  Every read converts only the rows it reads, so a big-endian
    or integer file is never converted whole.
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        raise ValueError(f"Complex data not supported: X has dtype {dtype}; pass real embeddings")
    if not (dtype.kind in "iub" or (dtype.kind == "f" and dtype.itemsize <= 8)):
        raise ValueError(f"X must be float16, float32 or float64 (or integer), got dtype {dtype}")
    return dtype


def open_embeddings(X, column=None, items=False):
    """Return X as a 2-D array or row source without copying it (an object array of numbers,
    which cannot be viewed as numbers, is converted to float64).  With ``items=True`` a 3-D
    array (N items, K candidates, d features: multiple choice) is accepted too, made
    C-contiguous (a copy only for an in-memory array that is not).

    Parameters
    ----------
    X : array-like, numpy.memmap, row source, str / os.PathLike, or list of paths
        A path is opened read-only and read a chunk at a time, so a file larger than memory
        is never loaded whole.  It may name a ``.npy`` file, ``FILE.npz:KEY``, a sparse matrix
        saved by ``scipy.sparse.save_npz`` (``FILE.npz``: read as CSR), a directory or
        glob of ``.npy`` shards (or a list of their paths), ``FILE.safetensors[:KEY]``, a
        Hugging Face dataset saved with ``save_to_disk`` or an ``.arrow`` file, or a Parquet
        file or directory (docs/formats.md; :func:`aflite_fast.io.formats.open_rows`).  Rows of
        files are read with positioned reads: a file truncated during a run is a ValueError
        naming it, not a bus error.  Any byte order and integer dtypes are accepted (see
        :func:`check_dtype`).
    column : str, optional
        The embedding column of a table (Arrow, Hugging Face dataset, Parquet).
    items : bool, default False
        Accept a 3-D X (multiple choice).  A 3-D ``.npy`` file is memory-mapped.

    Returns
    -------
    ndarray, numpy.memmap or :class:`aflite_fast.io.rowsource.RowSource`, or a SciPy CSR matrix for
    sparse X (:func:`aflite_fast.io.sparse.check_sparse`: CSC, COO and other formats converted once)

    Raises
    ------
    ValueError
        If the file cannot be read, X is not 2-D (or 3-D with ``items``), is empty, or has a
        dtype that is not a real number.
    TypeError
        If X is an object array holding values that are not numbers.
    ImportError
        When reading the format needs an optional dependency that is missing (the message
        names the extra).
    """
    if isinstance(X, (str, os.PathLike)) and column is None and os.fspath(X).lower().endswith(".npz"):
        if is_sparse_npz(X):  # a scipy.sparse.save_npz file: read as CSR, never densified
            return check_sparse(open_npz(X), name=f"X ({os.fspath(X)})")
    if isinstance(X, (str, os.PathLike)) or _is_path_list(X):
        X = open_rows(X, column, "embeddings")
    elif column is not None:
        raise ValueError(f"column={column!r} chooses a column of a table file, but X is not a path")
    elif isinstance(X, RowSource):
        pass
    elif is_sparse(X):  # CSR checked, other formats converted once (docs/sparse.md)
        return check_sparse(X)
    elif not isinstance(X, np.ndarray):
        try:
            X = np.asarray(X)
        except ValueError as exc:  # ragged nested sequences
            raise ValueError(f"X cannot be read as a 2-D array: {exc}") from exc
        if X.dtype.kind in "iub":
            X = X.astype(np.float32)
    if X.dtype.kind == "O" and not isinstance(X, np.memmap):
        try:  # numbers held as Python objects, as scikit-learn's check_array accepts
            X = X.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"X of dtype object must hold numbers: {exc}") from exc
    if items and X.ndim == 3:
        if X.shape[0] == 0 or X.shape[1] == 0 or X.shape[2] == 0:
            raise ValueError(f"X is empty: shape {X.shape}; multiple-choice X is (items, candidates, features)")
        check_dtype(X.dtype)
        if not X.flags.c_contiguous:
            if isinstance(X, np.memmap):
                raise ValueError(multiple_choice_order_message(X))
            X = np.ascontiguousarray(X)
        return X
    if X.ndim != 2:
        message = (f"X must be 2-D (rows x features){' or 3-D (items x candidates x features)' if items else ''}, "
                   f"got {X.ndim}-D with shape {X.shape}")
        if X.ndim == 3:
            message += ("; multiple-choice X (items x candidates x features) is read by aflite, predictability "
                        "and the filter command")
        if X.ndim == 1:
            message += ". Reshape your data: X.reshape(-1, 1) for one feature, X.reshape(1, -1) for one row"
        raise ValueError(message)
    if X.shape[0] == 0 or X.shape[1] == 0:
        which = "0 sample(s)" if X.shape[0] == 0 else "0 feature(s)"
        raise ValueError(f"X is empty: {which} (shape={X.shape}) while a minimum of 1 is required in each dimension")
    check_dtype(X.dtype)
    return X


def multiple_choice_order_message(X):
    """Why the memory-mapped 3-D ``X`` (not C-contiguous) cannot be read, and what to do."""
    name = getattr(X, "filename", None)
    what = f"multiple-choice X{f' ({name!r})' if name else ''}"
    order = "in Fortran order" if X.flags.f_contiguous else "as a strided view, not C-ordered"
    return (f"{what} is stored {order}; its items are read a few at a time, which needs the array "
            "C-ordered (items, candidates, features): save it with np.save(path, np.ascontiguousarray(X)) "
            "(a 2-D X may be stored in either order)")


def _is_path_list(X):
    """True for a non-empty list or tuple of paths (``.npy`` shards)."""
    return isinstance(X, (list, tuple)) and bool(X) and all(isinstance(p, (str, os.PathLike)) for p in X)


def native_rows(block):
    """``block`` as a C-contiguous array in native byte order (a copy only when it is not).

    Applied to one chunk of rows at a time, so a big-endian or Fortran-ordered file is
    converted chunk by chunk; the Numba helpers need native, contiguous arrays.
    """
    block = np.asarray(block)
    if not block.dtype.isnative:
        block = block.astype(block.dtype.newbyteorder("="))
    return np.ascontiguousarray(block)


def first_bad_row(block):
    """``(row, message)`` of the first row of ``block`` the float32 kernel cannot take, or
    ``(-1, None)``.

    ``block`` is a chunk from :func:`native_rows`; ``row`` is its index in the chunk, and
    the message has a ``{row}`` field for the caller's absolute index.  A row is bad when it
    holds NaN or inf, or (float64) a value beyond :data:`FLOAT32_MAX`, which float32 would
    turn into inf.  Integer rows are always good (int64 values are far inside float32's range).
    """
    if block.dtype.kind != "f":
        return -1, None
    if block.dtype.itemsize <= 4:
        row = first_nonfinite_row(block)
        return (row, _NONFINITE) if row >= 0 else (-1, None)
    row = first_row_beyond(block, FLOAT32_MAX)
    if row < 0:
        return -1, None
    return row, (_NONFINITE if not np.all(np.isfinite(block[row])) else _BEYOND_FLOAT32)


_NONFINITE = "X contains NaN or inf (first at row {row})"
_BEYOND_FLOAT32 = ("X holds values beyond the float32 range (|x| > 3.4e38), first at row {row}; "
                   "the kernel computes in float32: rescale X")


def scan_block(rows, start, locate=None):
    """Check one chunk of rows of X (its first row is row ``start`` of X) and sum it.

    ``locate(row)``, if given, says where a bad row is (a row source's
    :meth:`~aflite_fast.io.rowsource.RowSource.locate`: the shard and its row).

    Returns
    -------
    problem : str or None
        A message naming the first row the kernel cannot take (see :func:`first_bad_row`).
    sums : ndarray (d,) float64 or None
        Column sums of the chunk (None with a problem).
    """
    block = native_rows(rows)
    bad, message = first_bad_row(block)
    if bad >= 0:
        return message.format(row=start + bad if locate is None else locate(start + bad)), None
    return None, block.sum(axis=0, dtype=np.float64)


def scan_chunk_rows(n_features, itemsize):
    """Rows per chunk of :func:`scan_rows` (about :data:`SCAN_CHUNK_BYTES`): a whole number of
    the content fingerprint's blocks (:func:`aflite_fast.io.fingerprint.block_rows`), so that
    a chunk can be hashed where it is read (the Dask scan)."""
    step = block_rows(n_features, itemsize)
    return step * max(1, SCAN_CHUNK_BYTES // (step * max(1, n_features * itemsize)))


def scan_rows(X, progress=None, fingerprint=None):
    """One pass over X: checks every row suits the float32 kernel; returns the column means (float64).

    ``fingerprint`` (an :class:`aflite_fast.io.fingerprint.ContentHash`) is given every chunk
    as it is read, so the content fingerprint costs no second pass over X.

    Raises
    ------
    ValueError
        Naming the first row that holds NaN or inf, or a float64 value beyond float32's range.
    """
    n, d = X.shape
    chunk = scan_chunk_rows(d, X.dtype.itemsize)
    total = np.zeros(d, dtype=np.float64)
    source = isinstance(X, RowSource)
    # a row source reads into a reused buffer; into two in turn with a fingerprint, whose threads
    # may still hash one chunk while the next is read (ContentHash.update waits for them
    # before the one after)
    buffers = [None, None] if fingerprint is not None else [None]
    for i, start in enumerate(range(0, n, chunk)):
        if source:
            m = min(n, start + chunk) - start
            k = i % len(buffers)
            if buffers[k] is None:
                buffers[k] = np.empty((min(chunk, n), d), dtype=X.dtype)
            rows = X.read_rows(start, start + m, out=buffers[k][:m])
        else:
            rows = X[start:start + chunk]
        if fingerprint is not None:
            fingerprint.update(rows)  # hashed in threads while this thread checks the same rows
        if source and not rows.dtype.isnative:
            # the buffer is ours: swapped in place instead of into a copy (the fingerprint
            # hashes big-endian rows from its own little-endian copy, made in update)
            rows = rows.byteswap(inplace=True).view(rows.dtype.newbyteorder("="))
        problem, sums = scan_block(rows, start, X.locate if source else None)
        if problem is not None:
            raise ValueError(problem)
        total += sums
        if progress is not None:
            progress.update(min(n, start + chunk) - start)
    return total / n


@dataclass
class Labels:
    """Labels encoded as 0..C-1 (``codes``, int32) with the original values in ``classes``."""

    classes: np.ndarray
    codes: np.ndarray

    @property
    def n_classes(self):
        return len(self.classes)


def encode_labels(y, n_rows=None, min_per_class=2):
    """Map labels of any hashable type to codes 0..C-1.

    Classes are sorted as numpy sorts them; labels that cannot be ordered among themselves
    (e.g. None next to strings) keep the order of their first appearance.

    Raises
    ------
    ValueError
        If y is not 1-D, its length differs from ``n_rows``, it holds a single class, or a
        class has fewer than ``min_per_class`` rows.
    """
    y = np.asarray(y)
    if y.ndim != 1:
        y = np.ravel(y) if (y.ndim == 2 and 1 in y.shape) else y
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D, got shape {y.shape}")
    if n_rows is not None and y.shape[0] != n_rows:
        raise ValueError(f"X and y have different lengths: {n_rows} rows in X, {y.shape[0]} labels")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise ValueError("y contains NaN or inf")
    try:
        classes, codes = np.unique(y, return_inverse=True)
    except TypeError:
        # hashable but not mutually orderable (e.g. None mixed with str): classes in order
        # of first appearance
        index = {}
        try:
            codes = np.fromiter((index.setdefault(v, len(index)) for v in y.tolist()),
                                dtype=np.int64, count=y.shape[0])
        except TypeError as exc:
            raise ValueError(f"labels must be hashable: {exc}") from exc
        classes = np.empty(len(index), dtype=object)
        classes[:] = list(index)
    if len(classes) < 2:
        raise ValueError(f"y holds only one class ({classes[:1].tolist()[0]!r}); need at least two")
    counts = np.bincount(codes, minlength=len(classes))
    if counts.min() < min_per_class:
        i = int(np.argmin(counts))
        small = classes[i:i + 1].tolist()[0]  # a Python value: "9", not "np.int64(9)"
        raise ValueError(f"class {small!r} has {counts.min()} row(s); each class needs at least {min_per_class}")
    return Labels(classes=classes, codes=codes.astype(np.int32, copy=False))


def gather_rows(X, rows, center, out, chunk_bytes=None, n_threads=1):
    """Write ``X[rows] - center`` (float32) and a trailing ones column into ``out``.

    ``rows`` must be sorted so a file is read front to back.  A row source
    (:class:`aflite_fast.io.rowsource.RowSource`) is read a piece at a time into the buffer.  Rows are read in
    pieces of at most ``chunk_bytes`` (default :data:`GATHER_CHUNK_BYTES`) of the source dtype: a contiguous run of rows
    is converted straight from the (memory-mapped) file into ``out``; any other piece goes
    through one reused buffer of that size.  So a gather never holds a copy of its rows in
    the source dtype (``X[rows]`` would: as large as ``out`` itself for float32), and its
    anonymous memory is ``out`` plus that constant, whatever the number of rows.

    With ``n_threads`` > 1 (and X not a row source) threads read contiguous ranges of
    ``rows``, each with its share of ``chunk_bytes``: the same values, read in parallel.
    """
    rows = np.asarray(rows, dtype=np.int64)
    n = rows.size
    d = X.shape[1]
    if out.shape != (n, d + 1):
        raise ValueError(f"out must have shape {(n, d + 1)}, got {out.shape}")
    if n == 0:
        return out
    chunk_bytes = GATHER_CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)
    if isinstance(X, RowSource):
        n_threads = 1  # one file position: its reads stay in order
    n_threads = max(1, int(n_threads))
    piece = max(1, chunk_bytes // n_threads // max(1, d * X.dtype.itemsize))
    for_row_ranges(lambda a, b: _gather_range(X, rows, center, out, piece, a, b), n, n_threads)
    return out


def _gather_range(X, rows, center, out, piece, start, stop):
    """:func:`gather_rows` of ``rows[start:stop]`` in pieces of ``piece`` rows."""
    d = X.shape[1]
    out[start:stop, d] = 1.0
    buf = None
    for i0 in range(start, stop, piece):
        i1 = min(stop, i0 + piece)
        a, b = int(rows[i0]), int(rows[i1 - 1]) + 1
        if isinstance(X, RowSource):  # read into the buffer, one read per run of rows
            if buf is None:
                buf = np.empty((min(piece, stop - start), d), dtype=X.dtype)
            src = X.take(rows[i0:i1], out=buf[:i1 - i0])
        elif b - a == i1 - i0:  # a contiguous run: a view of X, no copy
            src = X[a:b]
        else:
            if buf is None:
                buf = np.empty((min(piece, stop - start), d), dtype=X.dtype)
            src = np.take(X, rows[i0:i1], axis=0, out=buf[:i1 - i0])
        np.subtract(src, center, out=out[i0:i1, :d], casting="unsafe")
