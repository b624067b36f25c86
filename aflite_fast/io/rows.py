"""Row-level helpers of the filtering path (no temporaries over large, possibly memory-mapped X).

The loops are compiled at build time (``_rowscan.pyx``), so that a new process pays no
compilation on its first call; this module chooses their operands.
"""
import numpy as np

try:
    from aflite_fast.io import _rowscan
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    from aflite_fast._build_check import raise_build_error

    raise_build_error(exc)

_BITS = {
    np.dtype(np.float16): (np.uint16, 0x7C00),
    np.dtype(np.float32): (np.uint32, 0x7F800000),
    np.dtype(np.float64): (np.uint64, 0x7FF0000000000000),
}


def first_nonfinite_row(X):
    """Index of the first row of the 2-D float array X (native byte order) with NaN or inf, or -1.

    Works on X's bits (a value is NaN or inf exactly when all its exponent bits are set), so
    float16 is handled alike and nothing is allocated."""
    utype, mask = _BITS[X.dtype]
    bits = np.asarray(X).view(utype)
    return int(_rowscan.first_nonfinite_row(bits, bits.dtype.type(mask)))


def membership_matrix(train_positions, n_rows, out):
    """out[pos, j] = 1 for every training position of partition j (out is zeroed here).

    train_positions : int64 (m, t) sorted training positions of each partition; negative
        entries (``engine.TRAIN_PAD``, padding of partitions with fewer than t rows) are skipped.
    out : uint8 (n_rows, m), C-contiguous; returned.
    """
    _rowscan.membership_matrix(np.asarray(train_positions, dtype=np.int64), int(n_rows), out)
    return out


def first_row_beyond(X, limit):
    """Index of the first row of the 2-D native float64 array X with NaN, inf or a value of
    magnitude above ``limit``, or -1."""
    return int(_rowscan.first_row_beyond(np.ascontiguousarray(X, dtype=np.float64), float(limit)))
