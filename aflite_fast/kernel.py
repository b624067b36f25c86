"""Python side of the compiled kernel: validate, allocate and call ``_kernel``.

The kernel trains a *block* of multinomial logistic regressions at once, each on a subset of
the same rows, and predicts held-out rows with all of them in one pass (see ``_kernel.pyx``).
Rows handed to the kernel are float32 with a trailing column of ones (the intercept);
``augment_rows`` and :mod:`aflite_fast.data` produce them.
"""
import numbers
from dataclasses import dataclass

import numpy as np

try:
    from . import _kernel
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    from ._build_check import raise_build_error

    raise_build_error(exc)

from ._threads import limit_blas_threads
from .losses import resolve_loss

#: Rows of the active set summed together before their sum joins the running total.  Row
#: blocks are aligned to positions in the active set (not in the block's training rows), so
#: a model's gradient does not depend on which other models share its block.
ROW_BLOCK = 256
#: Columns summed together in one block of the logits product.
COL_BLOCK = 256
STATUS_NAMES = {
    _kernel.STATUS_CONVERGED: "converged",
    _kernel.STATUS_MAX_ITER: "max_iter",
    _kernel.STATUS_LINE_SEARCH: "line_search",
    _kernel.STATUS_NOT_FINITE: "not_finite",
}


@dataclass
class SolverOptions:
    """Stopping rules of the batched L-BFGS solver.

    Parameters
    ----------
    tol : float
        Stop when the largest absolute gradient entry is at most ``tol`` (scikit-learn's
        ``tol`` for ``solver="lbfgs"``; the objective is the mean loss plus the L2 term).
        Logits are float32, so the gradient is exact to about 1e-6 only: below that, models
        stop through ``ftol`` or the line search (reported as converged, as SciPy reports
        its relative-reduction stop) rather than through ``tol``.
    max_iter : int
        Maximum number of accepted L-BFGS steps per model.
    ftol : float
        Stop when the relative decrease of the objective is at most ``ftol``.
    history : int
        Number of correction pairs kept by L-BFGS.
    max_line_search : int
        Backtracking steps before a model is declared stuck (at float32 precision).
    """

    tol: float = 1e-4
    max_iter: int = 1000
    ftol: float = 1e-12
    history: int = 10
    max_line_search: int = 30

    def __post_init__(self):
        # checked here, not in the kernel: a C int or double argument would take a float
        # max_iter or a NaN tol silently, or fail with a message naming no argument
        for name in ("tol", "ftol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < np.inf:
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
        for name, low in (("max_iter", 0), ("history", 1), ("max_line_search", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value < 2**31:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def augment_rows(X, center=None, out=None):
    """Return float32 rows ``X - center`` with a trailing column of ones (C-contiguous).

    Centering does not move the optimum (the intercept is unpenalized and absorbs the
    shift) but removes the cancellation between a large shared offset and the intercept,
    which otherwise costs float32 logits several digits; see ``uncenter_coef``.
    """
    X = np.asarray(X)
    n, d = X.shape
    if out is None:
        out = np.empty((n, d + 1), dtype=np.float32)
    if center is None:
        out[:, :d] = X
    else:
        np.subtract(X, center, out=out[:, :d], casting="unsafe")
    out[:, d] = 1.0
    return out


def uncenter_coef(coef, center):
    """Coefficients (..., d + 1, C) for centered rows -> the same model on raw rows."""
    coef = np.array(coef, dtype=np.float64, copy=True)
    if center is not None:
        coef[..., -1, :] -= np.einsum("k,...kc->...c", np.asarray(center, np.float64), coef[..., :-1, :])
    return coef


def center_coef(coef, center):
    """Inverse of :func:`uncenter_coef`."""
    coef = np.array(coef, dtype=np.float64, copy=True)
    if center is not None:
        coef[..., -1, :] += np.einsum("k,...kc->...c", np.asarray(center, np.float64), coef[..., :-1, :])
    return coef


def block_bounds(n, size):
    """Boundaries 0, size, 2 size, ..., n as int64 (at least [0, n])."""
    b = np.arange(0, n, size, dtype=np.int64)
    return np.append(b, np.int64(n)) if n > 0 else np.array([0, 0], dtype=np.int64)


def row_blocks_from_positions(positions, size=ROW_BLOCK):
    """Row-block boundaries of rows whose positions in the active set are ``positions``.

    A new block starts wherever ``positions // size`` changes, so the grouping of any
    model's rows is fixed by the active set alone.
    """
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size == 0:
        return np.array([0], dtype=np.int64)
    key = positions // size
    starts = np.flatnonzero(np.diff(key)) + 1
    return np.concatenate(([0], starts, [positions.size])).astype(np.int64)


def train_models(Xa, y, member, n_classes, *, C=1.0, loss="ce", loss_params=None, coef=None,
                 positions=None, options=None, n_threads=1):
    """Train ``member.shape[1]`` models on subsets of the rows ``Xa``.

    Parameters
    ----------
    Xa : ndarray of shape (n, d + 1), float32, C-contiguous
        Rows with a trailing column of ones.
    y : ndarray of shape (n,), int32
        Label codes in ``[0, n_classes)``.
    member : ndarray of shape (n, B), uint8
        ``member[i, j] == 1`` where row i trains model j.
    n_classes : int
        Number of classes C (>= 2).
    C : float
        Inverse L2 strength, scikit-learn's meaning.
    loss : str or Loss
        Loss name from :mod:`aflite_fast.losses` or a resolved loss.
    loss_params : dict, optional
        Parameters of the loss (e.g. ``{"q": 0.7}``).
    coef : ndarray of shape (B, d + 1, n_classes), float64, optional
        Starting point (warm start); updated in place and returned.  Zeros when omitted.
    positions : ndarray of shape (n,), int64, optional
        Positions of the rows in the active set (sorted); they fix the summation blocks.
        Defaults to ``arange(n)``.
    options : SolverOptions, optional
    n_threads : int

    Returns
    -------
    coef : ndarray of shape (B, d + 1, n_classes)
    info : dict with arrays ``n_iter``, ``status`` and ``objective`` (one entry per model)
    """
    options = options or SolverOptions()
    n, D = Xa.shape
    B = member.shape[1]
    spec = resolve_loss(loss, loss_params, n_classes)
    if coef is None:
        coef = np.zeros((B, D, n_classes), dtype=np.float64)
    if coef.shape != (B, D, n_classes) or coef.dtype != np.float64 or not coef.flags.c_contiguous:
        raise ValueError(f"coef must be a C-contiguous float64 array of shape {(B, D, n_classes)}")
    n_rows = member.sum(axis=0, dtype=np.int64)
    if np.any(n_rows == 0):
        raise ValueError("every model needs at least one training row")
    positions = np.arange(n, dtype=np.int64) if positions is None else positions
    if getattr(spec, "warmup", None) is not None:
        # e.g. truncated GCE: from all-zero weights every p_y = 1/C <= k, the gradient is
        # exactly zero and the solver cannot move; models starting at zero are first
        # trained with the warm-up loss (plain GCE), as Zhang & Sabuncu (2018) do.
        cold = ~coef.reshape(B, -1).any(axis=1)
        if cold.any():
            start, _ = train_models(Xa, y, np.ascontiguousarray(member[:, cold]), n_classes, C=C,
                                    loss=spec.warmup, coef=np.ascontiguousarray(coef[cold]),
                                    positions=positions, options=options, n_threads=n_threads)
            coef[cold] = start
    row_blocks = row_blocks_from_positions(positions)
    l2 = 1.0 / (float(C) * n_rows)
    inv_n = 1.0 / n_rows.astype(np.float64)
    n_iter = np.zeros(B, dtype=np.int32)
    status = np.zeros(B, dtype=np.int32)
    fval = np.zeros(B, dtype=np.float64)
    with limit_blas_threads():
        _kernel.train_block(
            Xa, y, member, row_blocks, block_bounds(D, COL_BLOCK), coef.reshape(B, D * n_classes),
            l2, inv_n, n_classes, spec.code, spec.params, spec.address,
            options.tol, options.ftol, options.max_iter, options.history,
            options.max_line_search, n_iter, status, fval, n_threads,
        )
    return coef, {"n_iter": n_iter, "status": status, "objective": fval}


def stack_weights(coef):
    """(B, D, C) float64 coefficients -> (D, B * C) float32 operand of the prediction GEMM."""
    B, D, C = coef.shape
    return np.ascontiguousarray(coef.transpose(1, 0, 2).reshape(D, B * C), dtype=np.float32)


def predict_accumulate(Xa, y, heldout, W, n_classes, seen, correct, prob_label,
                       proba_sum=None, n_threads=1):
    """Accumulate held-out predictions of the models in ``W`` (see ``stack_weights``)."""
    if proba_sum is None:
        proba_sum = np.empty((0, n_classes), dtype=np.float64)
    with limit_blas_threads():
        _kernel.predict_accumulate(Xa, y, heldout, W, block_bounds(Xa.shape[1], COL_BLOCK),
                                   n_classes, seen, correct, prob_label, proba_sum, n_threads)


def predict_proba(Xa, coef, n_threads=1):
    """Probabilities of one model (coef of shape (D, C)) on augmented rows, float64 (n, C)."""
    n = Xa.shape[0]
    C = coef.shape[-1]
    W = stack_weights(coef.reshape(1, *coef.shape))
    out = np.zeros((n, C), dtype=np.float64)
    predict_accumulate(Xa, np.full(n, -1, dtype=np.int32), np.ones((n, 1), dtype=np.uint8), W, C,
                       np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n), out, n_threads)
    return out
