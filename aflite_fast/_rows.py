"""Row-level helpers compiled with Numba (no temporaries over large, possibly memory-mapped X)."""
import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _first_nonfinite_row(bits, exp_mask):
    """Index of the first row holding NaN or inf, or -1.

    ``bits`` is X viewed as unsigned integers of the same width (float16 -> uint16,
    float32 -> uint32, float64 -> uint64); a value is NaN or inf exactly when all its
    exponent bits are set.  Working on the bits handles float16, which Numba cannot
    load as a float, and allocates nothing.
    """
    n, d = bits.shape
    for i in range(n):
        for k in range(d):
            if bits[i, k] & exp_mask == exp_mask:
                return i
    return -1


_BITS = {
    np.dtype(np.float16): (np.uint16, 0x7C00),
    np.dtype(np.float32): (np.uint32, 0x7F800000),
    np.dtype(np.float64): (np.uint64, 0x7FF0000000000000),
}


def first_nonfinite_row(X):
    """Index of the first row of the 2-D float array X (native byte order) with NaN or inf, or -1."""
    utype, mask = _BITS[X.dtype]
    bits = np.asarray(X).view(utype)
    return int(_first_nonfinite_row(bits, bits.dtype.type(mask)))


@numba.njit(cache=True, nogil=True)
def membership_matrix(train_positions, n_rows, out):
    """out[pos, j] = 1 for every training position of partition j (out is zeroed here).

    train_positions : int64 (m, t) sorted training positions of each partition; negative
        entries (``engine.TRAIN_PAD``, padding of partitions with fewer than t rows) are skipped.
    out : uint8 (n_rows, m).
    """
    out[:, :] = 0
    m, t = train_positions.shape
    for j in range(m):
        for r in range(t):
            pos = train_positions[j, r]
            if pos >= 0:
                out[pos, j] = 1
    return out


@numba.njit(cache=True, nogil=True)
def _first_row_beyond(X, limit):
    n, d = X.shape
    for i in range(n):
        for k in range(d):
            if not abs(X[i, k]) <= limit:  # also true for NaN
                return i
    return -1


def first_row_beyond(X, limit):
    """Index of the first row of the 2-D native float64 array X with NaN, inf or a value of
    magnitude above ``limit``, or -1."""
    return int(_first_row_beyond(np.ascontiguousarray(X), float(limit)))
