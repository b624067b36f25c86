"""Opening and validating inputs: embeddings (ndarray, memmap or .npy path) and labels."""
import os
from dataclasses import dataclass

import numpy as np

from ._rows import first_nonfinite_row

SUPPORTED_DTYPES = (np.float16, np.float32, np.float64)

#: Rows read at a time by scans over X (validation, mean).
SCAN_CHUNK_BYTES = 64 << 20
#: Rows (in X's dtype) read at a time by :func:`gather_rows`; its only scratch buffer.
GATHER_CHUNK_BYTES = 8 << 20


def open_embeddings(X):
    """Return a 2-D float array view of X without copying it.

    Parameters
    ----------
    X : array-like, numpy.memmap, or str / os.PathLike to a ``.npy`` file
        A path is opened read-only with ``mmap_mode="r"``, so a file larger than memory is
        never loaded whole.

    Raises
    ------
    ValueError
        If the file cannot be read, X is not 2-D, is empty, or has a non-float dtype.
    """
    if isinstance(X, (str, os.PathLike)):
        path = os.fspath(X)
        try:
            X = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot read embeddings from {path!r}: {exc}") from exc
    elif not isinstance(X, np.ndarray):
        X = np.asarray(X)
        if X.dtype.kind in "iub":
            X = X.astype(np.float32)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (rows x features), got {X.ndim}-D with shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X is empty (shape {X.shape})")
    if X.dtype not in [np.dtype(t) for t in SUPPORTED_DTYPES]:
        raise ValueError(f"X must be float16, float32 or float64, got dtype {X.dtype}")
    return X


def scan_rows(X, progress=None):
    """One pass over X: checks every value is finite and returns the column means (float64).

    Raises
    ------
    ValueError
        Naming the first row that holds NaN or inf.
    """
    n, d = X.shape
    chunk = max(1, SCAN_CHUNK_BYTES // max(1, d * X.dtype.itemsize))
    total = np.zeros(d, dtype=np.float64)
    for start in range(0, n, chunk):
        block = np.asarray(X[start:start + chunk])
        bad = first_nonfinite_row(np.ascontiguousarray(block))
        if bad >= 0:
            raise ValueError(f"X contains NaN or inf (first at row {start + bad})")
        total += block.sum(axis=0, dtype=np.float64)
        if progress is not None:
            progress.update(block.shape[0])
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
        raise ValueError(f"y holds a single class ({classes[:1].tolist()[0]!r}); need at least two")
    counts = np.bincount(codes, minlength=len(classes))
    if counts.min() < min_per_class:
        i = int(np.argmin(counts))
        small = classes[i:i + 1].tolist()[0]  # a Python value: "9", not "np.int64(9)"
        raise ValueError(f"class {small!r} has {counts.min()} row(s); each class needs at least {min_per_class}")
    return Labels(classes=classes, codes=codes.astype(np.int32, copy=False))


def gather_rows(X, rows, center, out, chunk_bytes=None):
    """Write ``X[rows] - center`` (float32) and a trailing ones column into ``out``.

    ``rows`` must be sorted so a memory-mapped file is read front to back.  Rows are read in
    pieces of at most ``chunk_bytes`` (default :data:`GATHER_CHUNK_BYTES`) of the source dtype: a contiguous run of rows
    is converted straight from the (memory-mapped) file into ``out``; any other piece goes
    through one reused buffer of that size.  So a gather never holds a copy of its rows in
    the source dtype (``X[rows]`` would: as large as ``out`` itself for float32), and its
    anonymous memory is ``out`` plus that constant, whatever the number of rows.
    """
    rows = np.asarray(rows, dtype=np.int64)
    n = rows.size
    d = X.shape[1]
    if out.shape != (n, d + 1):
        raise ValueError(f"out must have shape {(n, d + 1)}, got {out.shape}")
    out[:, d] = 1.0
    if n == 0:
        return out
    chunk_bytes = GATHER_CHUNK_BYTES if chunk_bytes is None else int(chunk_bytes)
    piece = max(1, chunk_bytes // max(1, d * X.dtype.itemsize))
    buf = None
    for i0 in range(0, n, piece):
        i1 = min(n, i0 + piece)
        a, b = int(rows[i0]), int(rows[i1 - 1]) + 1
        if b - a == i1 - i0:  # a contiguous run: a view of X, no copy
            src = X[a:b]
        else:
            if buf is None:
                buf = np.empty((min(piece, n), d), dtype=X.dtype)
            src = np.take(X, rows[i0:i1], axis=0, out=buf[:i1 - i0])
        np.subtract(src, center, out=out[i0:i1, :d], casting="unsafe")
    return out


def read_labels_file(path):
    """Labels from a ``.npy`` file or a text/CSV file with one label per line.

    Text labels that all parse as integers become int64; otherwise they stay strings.
    """
    path = os.fspath(path)
    try:
        if path.endswith(".npy"):
            return np.load(path, allow_pickle=False)
        with open(path, encoding="utf-8") as fh:
            values = [line.strip().split(",")[0].strip() for line in fh if line.strip()]
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read labels from {path!r}: {exc}") from exc
    try:
        return np.array([int(v) for v in values], dtype=np.int64)
    except ValueError:
        return np.array(values)
