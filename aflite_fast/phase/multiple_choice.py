"""Multiple-choice input: X of shape (N, K, d), y the right candidate of each item (0..K-1).

a. Model: each partition model is a linear scorer of candidates, ``s_ik = w . x_ik``, plus a
   per-position bias ``b_k`` with ``position_bias=True`` (then answer-position artifacts
   become learnable; ``b_0 = 0``, the softmax being blind to a shift shared by all positions),
   trained with softmax cross entropy over each item's K candidates plus ``||w||^2 / (2 C n)``
   over its n training items (scikit-learn's meaning of C; the biases are not penalised).
   An item is a row of the algorithm: held out, predicted (arg max over its candidates),
   scored and removed as a row is in classification.
b. Kernel rows: the K candidates of an item are K consecutive float32 rows ``x_ik - center``
   followed by the position columns (:func:`tail_columns`): e_1..e_{K-1} of position k with
   ``position_bias``, else one column of zeros (the column of ones of classification would
   add a shift shared by an item's candidates: no effect, but a float32 gradient that is not
   exactly zero).  So D = d + K - 1 or d + 1, and the last D - d rows of every model are not
   penalised.  The centre cancels in the softmax (shared by an item's candidates), so it
   moves neither the optimum nor the predictions.
c. Losses: the loss of an item is a function of the probability of its right candidate, so
   cross entropy and the noise-robust losses that are functions of p_y alone (GCE, truncated
   GCE, MAE, SCE, user losses) apply unchanged with K "classes"; the forward correction
   (a transition matrix between classes) does not apply to positions and is refused.
"""
import numbers

import numpy as np

from aflite_fast.core import layout
from aflite_fast.io.inputs import gather_rows


def is_multiple_choice(X):
    """True for an (N, K, d) array."""
    return getattr(X, "ndim", 2) == 3


def check_shape(X):
    """(N, K, d) of a multiple-choice X; ValueError when it cannot be one."""
    n, K, d = X.shape
    if n == 0 or d == 0:
        raise ValueError(f"X is empty: shape {X.shape}; multiple-choice X is (items, candidates, features)")
    if K < 2:
        raise ValueError(f"multiple-choice X must have at least 2 candidates per item, got shape {X.shape}")
    return n, K, d


def n_extra_columns(K, position_bias):
    """Columns after the features: K - 1 position indicators, or one column of zeros."""
    return K - 1 if position_bias else 1


def tail_columns(K, position_bias):
    """(K, n_extra) float32: the columns after the features of the candidate at each position."""
    if position_bias:
        return np.eye(K, dtype=np.float32)[:, 1:]
    return np.zeros((K, 1), dtype=np.float32)


def candidate_rows(items, K):
    """Rows of the (N x K, d) view holding the candidates of ``items`` (sorted), in order."""
    return (np.asarray(items, dtype=np.int64)[:, None] * K + np.arange(K, dtype=np.int64)).ravel()


def gather_items(X, items, center, out, position_bias, chunk_bytes=None, n_threads=1):
    """Write the kernel rows (b) of ``items`` (sorted) of the (N, K, d) X into ``out``
    (len(items) x K, D), reading X as :func:`aflite_fast.io.inputs.gather_rows` does."""
    n, K, d = X.shape
    rows = candidate_rows(items, K)
    tail = tail_columns(K, position_bias)
    if out.shape != (rows.size, d + tail.shape[1]):
        raise ValueError(f"out must have shape {(rows.size, d + tail.shape[1])}, got {out.shape}")
    gather_rows(X.reshape(n * K, d), rows, center, out[:, :d + 1], chunk_bytes, n_threads)
    if rows.size:
        out[:, d:] = np.tile(tail, (len(items), 1))
    return out


def augment_items(X, center=None, position_bias=False):
    """Kernel rows (b) of every item of an (N, K, d) array (for tests and small data)."""
    n, K, d = X.shape
    center = np.zeros(d, dtype=np.float32) if center is None else center
    out = layout.empty_rows(n * K, d + n_extra_columns(K, position_bias))
    return gather_items(np.asarray(X), np.arange(n), center, out, position_bias)


def encode_choices(y, n_items, K):
    """Label codes (int32) of the right candidates: integers in [0, K), one per item.

    Raises
    ------
    ValueError
        If y is not 1-D of length ``n_items``, holds non-integers or values outside [0, K).
    """
    y = np.asarray(y)
    if y.ndim == 2 and 1 in y.shape:
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(f"y must be 1-D (the right candidate of each item), got shape {y.shape}")
    if y.shape[0] != n_items:
        raise ValueError(f"X and y have different lengths: {n_items} items in X, {y.shape[0]} labels")
    if y.dtype.kind == "f":
        if not np.all(np.isfinite(y)) or np.any(y != np.round(y)):
            raise ValueError("y must hold integer candidate positions in [0, K) for multiple-choice X")
    elif y.dtype.kind not in "iub" and not all(isinstance(v, numbers.Integral) for v in y.tolist()):
        raise ValueError(f"y must hold integer candidate positions in [0, K) for multiple-choice X, got dtype "
                         f"{y.dtype}")
    if y.size and (y.min() < 0 or y.max() >= K):
        bad = y[(y < 0) | (y >= K)][0]
        raise ValueError(f"y holds {bad.item()!r}, not a candidate position of items with K={K} candidates "
                         f"(0..{K - 1})")
    return y.astype(np.int32)


def scorer(coef, K, d, position_bias):
    """(w, b) of a kernel model (coef (D, 1)): weights (d,) and position biases (K,), b_0 = 0
    (all zeros without ``position_bias``), for raw (uncentred) candidates."""
    coef = np.asarray(coef, dtype=np.float64).reshape(-1)
    w = coef[:d].copy()
    b = np.zeros(K)
    if position_bias:
        b[1:] = coef[d:d + K - 1]
    return w, b
