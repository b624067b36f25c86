"""Sparse X: a SciPy CSR matrix checked once, and ``save_npz`` files read without densifying.

Rows of sparse X are CSR with float32 or float64 values (docs/sparse.md).  :func:`check_sparse`
gives one clear ValueError for each way a matrix can be unusable (NaN or inf values, values
beyond float32, negative or out-of-range column indices, unsorted or repeated indices within a
row, an ``indptr`` of the wrong length or not non-decreasing, no rows or columns), and converts
CSC, COO and the other formats to CSR once, with a :class:`SparseFormatWarning` saying so.

Nothing here imports SciPy unless X is sparse or a sparse file is read: a sparse matrix can
exist only once ``scipy.sparse`` is imported.
"""
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
        if X.dtype.kind in "iub" or X.dtype == np.float16:
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
    if indices.size:
        lo, hi = int(indices.min()), int(indices.max())
        if lo < 0:
            raise ValueError(f"{name} has a negative column index ({lo})")
        if hi >= d:
            raise ValueError(f"{name} has a column index {hi} out of range for {d} columns")
        step = np.diff(indices.astype(np.int64))
        starts = indptr[1:-1]
        inside = np.ones(step.size, dtype=bool)
        inside[starts[(starts > 0) & (starts < indices.size)] - 1] = False  # steps across rows
        if np.any(step[inside] == 0):
            row = int(np.searchsorted(indptr, np.flatnonzero(inside & (step == 0))[0], side="right") - 1)
            raise ValueError(f"{name} repeats a column index within row {row}: sum the duplicates first "
                             "(X.sum_duplicates())")
        if np.any(step[inside] < 0):
            row = int(np.searchsorted(indptr, np.flatnonzero(inside & (step < 0))[0], side="right") - 1)
            raise ValueError(f"{name}'s column indices are not sorted within row {row}: sort them first "
                             "(X.sort_indices())")
    if data.size:
        finite = np.isfinite(data)
        if not finite.all():
            where = int(np.flatnonzero(~finite)[0])
            row = int(np.searchsorted(indptr, where, side="right") - 1)
            raise ValueError(f"{name} has a NaN or infinite value (row {row}, column {int(indices[where])})")
        if data.dtype == np.float64 and np.abs(data).max() > _F32_MAX:
            raise ValueError(f"{name} has values beyond float32's range (largest |value| "
                             f"{float(np.abs(data).max()):.3g}); rescale X")
    return X


def column_stats(X):
    """(mean, largest |x - mean|, its column) of CSR X's columns, implicit zeros included."""
    n = X.shape[0]
    mean = np.asarray(X.sum(axis=0), dtype=np.float64).ravel() / n
    hi = np.asarray(X.max(axis=0).toarray(), dtype=np.float64).ravel()
    lo = np.asarray(X.min(axis=0).toarray(), dtype=np.float64).ravel()
    spread = np.maximum(hi - mean, mean - lo)
    col = int(np.argmax(spread))
    return mean, float(spread[col]), col


def open_npz(path):
    """A ``scipy.sparse.save_npz`` file as CSR (values and indices read into memory, never a dense
    matrix); ValueError naming the file when it is not such a file."""
    import scipy.sparse as sp

    try:
        X = sp.load_npz(os.fspath(path))
    except (OSError, ValueError, KeyError) as exc:
        raise ValueError(f"cannot read a sparse matrix (scipy.sparse.save_npz) from {os.fspath(path)}: {exc}") \
            from None
    return X


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
    """Column means (float64) of checked CSR X (its values were checked by :func:`check_sparse`);
    ``fingerprint`` is not fed (sparse X has its own: :func:`sparse_digest`)."""
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
