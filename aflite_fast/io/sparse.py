"""Sparse X: a SciPy CSR matrix checked once, and ``save_npz`` files read without densifying.

Rows of sparse X are CSR with float32 or float64 values (docs/sparse.md).  :func:`check_sparse`
gives one clear ValueError for each way a matrix can be unusable (NaN or inf values, values
beyond float32, negative or out-of-range column indices, unsorted or repeated indices within a
row, an ``indptr`` of the wrong length or not non-decreasing, no rows or columns), and converts
CSC, COO and the other formats to CSR once, with a :class:`SparseFormatWarning` saying so.

Nothing here imports SciPy unless X is sparse or a sparse file is read: a sparse matrix can
exist only once ``scipy.sparse`` is imported.
"""
import mmap
import os
import sys
import warnings

import numpy as np

#: Largest finite float32: values beyond it cannot be rows of the float32 kernel.
_F32_MAX = float(np.finfo(np.float32).max)


class SparseFormatWarning(UserWarning):
    """Sparse X given in a format other than CSR: converted once (a copy)."""


def is_sparse(X):
    """True for a SciPy sparse matrix or array (without importing SciPy)."""
    sparse = sys.modules.get("scipy.sparse")
    return sparse is not None and sparse.issparse(X)


def check_sparse(X, name="X"):
    """X as a CSR matrix with float32 or float64 values, checked (see the module docstring).

    Raises
    ------
    ValueError
        One message per defect, naming it and where it is.
    """
    import scipy.sparse as sp

    if X.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got a sparse array of shape {X.shape}")
    n, d = X.shape
    if n == 0 or d == 0:
        raise ValueError(f"{name} is empty: shape {X.shape}")
    if X.format != "csr":
        warnings.warn(f"{name} is a sparse {X.format.upper()} matrix: converted once to CSR (a copy); pass CSR "
                      f"to avoid it", SparseFormatWarning, stacklevel=4)
        if X.format == "coo" and X.nnz:
            # COO may repeat (row, column) pairs, which CSR conversion adds together: refuse them
            key = np.asarray(X.row, np.int64) * d + np.asarray(X.col, np.int64)
            if np.unique(key).size != key.size:
                raise ValueError(f"{name} (COO) repeats a (row, column) entry: give each entry once")
        X = sp.csr_matrix(X)
    if X.dtype not in (np.float32, np.float64):
        if (X.dtype.kind in "iub" or X.dtype == np.float16) and is_mapped(X):
            pass  # a mapped file's counts stay in the file: read as float32 a piece at a time (gather_csr_rows)
        elif X.dtype.kind in "iub" or X.dtype == np.float16:
            X = X.astype(np.float32 if X.dtype.itemsize <= 2 or X.dtype.kind == "b" else np.float64)
        else:
            raise ValueError(f"{name} must hold real numbers (float32 or float64 values), got dtype {X.dtype}")
    indptr, indices, data = X.indptr, X.indices, X.data
    if indptr.shape != (n + 1,):
        raise ValueError(f"{name}'s indptr has {indptr.size} entries, not rows + 1 = {n + 1}: the matrix is "
                         "malformed")
    if indptr[0] != 0 or indptr[-1] != data.size or indices.size != data.size or np.any(np.diff(indptr) < 0):
        raise ValueError(f"{name}'s indptr must start at 0, never decrease and end at the number of stored "
                         f"values ({data.size}): the matrix is malformed")
    found = _scan_values(indptr, indices, data)
    if indices.size:
        if found["lo"] < 0:
            raise ValueError(f"{name} has a negative column index ({found['lo']})")
        if found["hi"] >= d:
            raise ValueError(f"{name} has a column index {found['hi']} out of range for {d} columns")
        if found["repeat"] is not None:
            raise ValueError(f"{name} repeats a column index within row {found['repeat']}: sum the duplicates "
                             "first (X.sum_duplicates())")
        if found["unsorted"] is not None:
            raise ValueError(f"{name}'s column indices are not sorted within row {found['unsorted']}: sort them "
                             "first (X.sort_indices())")
    if data.size:
        if found["bad"] is not None:
            row, where = found["bad"]
            raise ValueError(f"{name} has a NaN or infinite value (row {row}, column {int(indices[where])})")
        if data.dtype == np.float64 and found["big"] > _F32_MAX:
            raise ValueError(f"{name} has values beyond float32's range (largest |value| "
                             f"{found['big']:.3g}); rescale X")
    return X


#: Stored values checked or read a piece at a time (a mapped file is never copied whole).
CHUNK_VALUES = 1 << 22


def row_pieces(indptr, max_values=CHUNK_VALUES, start=0, stop=None):
    """``(r0, r1)`` row ranges of CSR ``indptr`` holding about ``max_values`` stored values each
    (one row at least), covering rows ``start`` to ``stop``."""
    stop = indptr.shape[0] - 1 if stop is None else stop
    r0 = start
    while r0 < stop:
        r1 = int(np.searchsorted(indptr, int(indptr[r0]) + max_values, side="right")) - 1
        r1 = min(stop, max(r0 + 1, r1))
        yield r0, r1
        r0 = r1


def _scan_values(indptr, indices, data):
    """One pass over the stored values, a row range at a time: the smallest and largest column
    index, the first row that repeats or unsorts its indices, the first NaN/inf (row, position)
    and the largest |value| (float64 values only)."""
    found = dict(lo=0, hi=-1, repeat=None, unsorted=None, bad=None, big=0.0)
    if not indices.size:
        return found
    found["lo"], found["hi"] = None, None
    for r0, r1 in row_pieces(indptr):
        e0, e1 = int(indptr[r0]), int(indptr[r1])
        if e1 == e0:
            continue
        part = np.asarray(indices[e0:e1], dtype=np.int64)
        lo, hi = int(part.min()), int(part.max())
        found["lo"] = lo if found["lo"] is None else min(found["lo"], lo)
        found["hi"] = hi if found["hi"] is None else max(found["hi"], hi)
        step = np.diff(part)
        starts = np.asarray(indptr[r0 + 1:r1], dtype=np.int64) - e0
        inside = np.ones(step.size, dtype=bool)
        inside[starts[(starts > 0) & (starts < part.size)] - 1] = False  # steps across rows
        for key, hit in (("repeat", step == 0), ("unsorted", step < 0)):
            if found[key] is None and np.any(hit & inside):
                where = e0 + int(np.flatnonzero(inside & hit)[0])
                found[key] = int(np.searchsorted(indptr, where, side="right") - 1)
        values = np.asarray(data[e0:e1])
        finite = np.isfinite(values)
        if found["bad"] is None and not finite.all():
            where = e0 + int(np.flatnonzero(~finite)[0])
            found["bad"] = (int(np.searchsorted(indptr, where, side="right") - 1), where)
        if values.dtype == np.float64 and finite.any():
            found["big"] = max(found["big"], float(np.abs(values[finite]).max()))
    if found["lo"] is None:
        found["lo"], found["hi"] = 0, -1
    return found


def _mapped(array):
    while array is not None:
        if isinstance(array, (np.memmap, mmap.mmap)):
            return True
        array = getattr(array, "base", None)
    return False


def is_mapped(X):
    """True for CSR X whose stored values are memory-mapped from a file (:func:`open_npz`)."""
    return _mapped(getattr(X, "data", None)) or _mapped(getattr(X, "indices", None))


def gather_csr_rows(X, rows, max_values=CHUNK_VALUES):
    """The CSR arrays of ``rows`` (sorted int64 row numbers) of CSR X in the kernel's types:
    ``(indptr int64, indices int32, data float32)``, copied a piece of about ``max_values``
    stored values at a time (a run of consecutive rows as one slice), so a memory-mapped X is
    read only where those rows lie and never copied whole in another type."""
    rows = np.asarray(rows, dtype=np.int64)
    starts = np.asarray(X.indptr[rows], dtype=np.int64)
    lengths = np.asarray(X.indptr[rows + 1], dtype=np.int64) - starts
    indptr = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int32)
    data = np.empty(int(indptr[-1]), dtype=np.float32)
    for r0, r1 in row_pieces(indptr, max_values):
        o0, o1 = int(indptr[r0]), int(indptr[r1])
        if o1 == o0:
            continue
        if rows[r1 - 1] - rows[r0] == r1 - 1 - r0:  # consecutive rows: one slice of the file
            src = slice(int(starts[r0]), int(starts[r0]) + (o1 - o0))
        else:
            src = np.repeat(starts[r0:r1] - indptr[r0:r1], lengths[r0:r1]) + np.arange(o0, o1, dtype=np.int64)
        indices[o0:o1] = X.indices[src]
        data[o0:o1] = X.data[src]
    return indptr, indices, data


def column_stats(X):
    """(mean, largest |x - mean|, its column) of CSR X's columns, implicit zeros included (a
    memory-mapped X a row range at a time)."""
    n = X.shape[0]
    if is_mapped(X):
        total, hi, lo = np.zeros(X.shape[1]), np.full(X.shape[1], -np.inf), np.full(X.shape[1], np.inf)
        for r0, r1 in row_pieces(X.indptr):
            part = X[r0:r1]
            total += np.asarray(part.sum(axis=0, dtype=np.float64)).ravel()
            np.maximum(hi, part.max(axis=0).toarray().ravel(), out=hi)
            np.minimum(lo, part.min(axis=0).toarray().ravel(), out=lo)
        mean = total / n
    else:
        mean = np.asarray(X.sum(axis=0), dtype=np.float64).ravel() / n
        hi = np.asarray(X.max(axis=0).toarray(), dtype=np.float64).ravel()
        lo = np.asarray(X.min(axis=0).toarray(), dtype=np.float64).ravel()
    spread = np.maximum(hi - mean, mean - lo)
    col = int(np.argmax(spread))
    return mean, float(spread[col]), col


def compressed_limit():
    """Bytes of arrays a compressed ``.npz`` may decompress into memory (the default budget)."""
    from aflite_fast.runtime.memory import parse_memory

    return parse_memory(None)


def open_npz(path):
    """A ``scipy.sparse.save_npz`` file as CSR, never a dense matrix.

    A CSR file saved uncompressed (``save_npz(path, X, compressed=False)``) is memory-mapped:
    its ``data``, ``indices`` and ``indptr`` members are stored as they are, at fixed offsets of
    the archive, so rows are read from the file where they lie and a file larger than memory
    works (docs/sparse.md).  A compressed file cannot be read in place: it is decompressed into
    memory when its arrays take at most :func:`compressed_limit` bytes, and refused otherwise
    (ValueError naming ``compressed=False``).  Other formats (CSC, COO, ...) are read into memory.

    Raises
    ------
    ValueError
        Naming the file, when it is not such a file or is too large to decompress.
    """
    import zipfile

    import scipy.sparse as sp

    from aflite_fast.io.arrayfile import _open_npz
    from aflite_fast.runtime.memory import format_size

    path = os.fspath(path)
    what = f"a sparse matrix (scipy.sparse.save_npz) from {path}"
    try:
        with zipfile.ZipFile(path) as archive:
            infos = {i.filename[:-4]: i for i in archive.infolist() if i.filename.endswith(".npy")}
            with archive.open(infos["format"]) as fh:
                fmt = np.lib.format.read_array(fh, allow_pickle=False)
            with archive.open(infos["shape"]) as fh:
                shape = tuple(int(s) for s in np.lib.format.read_array(fh, allow_pickle=False))
        fmt = fmt.item().decode("ascii") if isinstance(fmt.item(), bytes) else str(fmt.item())
        members = [infos[k] for k in ("data", "indices", "indptr") if k in infos]
        stored = all(i.compress_type == zipfile.ZIP_STORED and not i.flag_bits & 0x1 for i in members)
        if fmt == "csr" and len(members) == 3 and stored:
            data, indices, indptr = (_open_npz(path, k) for k in ("data", "indices", "indptr"))
            if data.ndim != 1 or indices.ndim != 1 or indptr.ndim != 1 or len(shape) != 2:
                raise ValueError("its data, indices and indptr must be 1-D and its shape two numbers")
            if indptr.dtype.kind not in "iu" or indices.dtype.kind not in "iu":
                raise ValueError(f"its indices ({indices.dtype}) and indptr ({indptr.dtype}) must be integers")
            # the arrays set as they are: scipy's constructor would copy indices it can narrow to int32
            # (check_sparse checks them, a piece at a time)
            X = sp.csr_matrix(shape, dtype=data.dtype)
            X.data, X.indices, X.indptr = data, indices, indptr
            return X
        size = sum(i.file_size for i in members)
        if not stored and size > compressed_limit():
            raise ValueError(
                f"{path} is a compressed .npz whose arrays take {format_size(size)} once decompressed, more "
                f"than {format_size(compressed_limit())} (a quarter of memory); a compressed file cannot be "
                "read in place: save it with scipy.sparse.save_npz(path, X, compressed=False)")
        return sp.load_npz(path)
    except ValueError as exc:
        if str(exc).startswith(path):
            raise
        raise ValueError(f"cannot read {what}: {exc}") from None
    except (OSError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"cannot read {what}: {exc}") from None


def is_sparse_npz(path):
    """True when ``path`` is a ``.npz`` file written by ``scipy.sparse.save_npz`` (it holds
    ``indices``, ``indptr``, ``format`` and ``shape``)."""
    path = os.fspath(path)
    if not path.endswith(".npz") or not os.path.isfile(path):
        return False
    import zipfile

    try:
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as f:
            return {"format", "shape", "data"} <= set(f.files)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return False  # not an archive: the dense reader names the problem


def sparse_scan(X, fingerprint=None, progress=None):
    """Column means (float64) of checked CSR X (its values were checked by :func:`check_sparse`;
    a memory-mapped X a row range at a time); ``fingerprint`` is not fed (sparse X has its own:
    :func:`sparse_digest`)."""
    if is_mapped(X):
        total = np.zeros(X.shape[1])
        for r0, r1 in row_pieces(X.indptr):
            total += np.asarray(X[r0:r1].sum(axis=0, dtype=np.float64)).ravel()
        mean = total / X.shape[0]
    else:
        mean = np.asarray(X.sum(axis=0, dtype=np.float64), dtype=np.float64).ravel() / X.shape[0]
    if progress is not None and hasattr(progress, "update"):
        progress.update(X.shape[0])
    return mean


def sparse_digest(X):
    """SHA-256 of CSR X's shape, row pointers, column indices and values (float64), in hex: the
    content fingerprint of sparse X (checkpoints), the same for float32 and float64 values of
    the same numbers."""
    import hashlib

    h = hashlib.sha256(b"aflite_fast sparse csr v1")
    h.update(np.asarray(X.shape, dtype="<i8").tobytes())
    for part, dtype in ((X.indptr, "<i8"), (X.indices, "<i8"), (X.data, "<f8")):
        for s in range(0, part.size, 1 << 22):
            h.update(np.ascontiguousarray(part[s:s + (1 << 22)], dtype=dtype).tobytes())
    return h.hexdigest()
