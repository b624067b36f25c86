"""Python side of the sparse kernel: CSR rows trained and predicted by many linear models.

The models are the dense kernel's (multinomial logistic regression on the features and an
intercept, the same losses, the same batched L-BFGS solver: ``_kernel.LBFGSBlock`` through
:func:`aflite_fast.core.solver.train_models_with`); only the evaluation of loss and gradient
(``_sparse_kernel.sparse_eval``: each model over its own training rows, its sums in double in
row order by one thread) and the prediction (``_sparse_kernel.sparse_predict``: every model
at once, feature-major weights) read CSR rows.

Differences from dense rows, by design:

- Rows are not centred (subtracting the column means would fill every row); the intercept,
  which is not penalised, absorbs the mean, so the optimum is that of scikit-learn's
  ``LogisticRegression`` on the same (uncentred) sparse matrix.
- The preconditioner is diagonal, from the columns' second moments over the active rows:
  ``H0 = 1 / (s * mean(x_j^2) + l2)`` (``s = (C - 1) / C^2``, as the dense forms), a
  per-feature scaling that suits counts whose frequencies span orders of magnitude.  It
  changes the solver's path, never its optimum.

Memory of one model (:func:`model_bytes`): with ``P = (d + 1) * C`` weights and ``h``
correction pairs, ``(88 + 16 h) * P`` bytes (L-BFGS state ``(32 + 16 h) P``, the
preconditioner product ``24 P``, the caller's coefficients ``8 P``, trial weights and gradient
sums ``16 P``, the prediction stack ``4 P``, alignment ``4 P``), plus ``12 P`` per thread.
"""
import numpy as np

from aflite_fast.core.compiled import _kernel
from aflite_fast.core.losses import resolve_loss
from aflite_fast.core.preconditioning import Preconditioner
from aflite_fast.core.solver import SolverOptions, train_models_with
from aflite_fast.runtime.threads import limit_blas_threads


def _sparse_kernel():
    try:
        from aflite_fast.core import _sparse_kernel
    except ImportError as exc:  # pragma: no cover - a broken install only
        from aflite_fast._build_check import raise_build_error

        raise_build_error(exc)
    return _sparse_kernel


def model_bytes(n_features, n_classes, history=10):
    """Bytes one model of a sparse phase holds while it trains (see the module docstring)."""
    P = (int(n_features) + 1) * int(n_classes)
    return (88 + 16 * int(history)) * P


def thread_bytes(n_features, n_classes):
    """Scratch bytes per thread of the sparse member pass (a model's transposed weights and sums)."""
    return 12 * (int(n_features) + 1) * int(n_classes)


class CSRRows:
    """CSR rows in the kernel's types: ``indptr`` int64, ``indices`` int32, ``data`` float32.

    Parameters
    ----------
    X : scipy.sparse CSR matrix (checked by :func:`aflite_fast.io.sparse.check_sparse`)
    rows : int64 array, optional
        The rows of X to take (default all), in the order given.
    """

    def __init__(self, X, rows=None):
        if rows is not None:
            X = X[np.asarray(rows, dtype=np.int64)]
        self.n_rows, self.n_features = X.shape
        self.indptr = np.ascontiguousarray(X.indptr, dtype=np.int64)
        self.indices = np.ascontiguousarray(X.indices, dtype=np.int32)
        self.data = np.ascontiguousarray(X.data, dtype=np.float32)

    @property
    def nbytes(self):
        return self.indptr.nbytes + self.indices.nbytes + self.data.nbytes

    def column_second_moments(self):
        """(d,) float64: the sum of each column's squared values, in row order."""
        return _sparse_kernel().second_moments(self.indptr, self.indices, self.data, self.n_features)


def sparse_preconditioner(rows, n_classes, l2):
    """The diagonal preconditioner of CSR ``rows`` (a :class:`CSRRows`) and their ones column:
    ``1 / (s * mean(x_j^2) + l2)`` with ``s = (C - 1) / C^2`` (see the module docstring)."""
    s = (n_classes - 1) / float(n_classes) ** 2
    n = max(1, rows.n_rows)
    second = np.append(rows.column_second_moments() / n, 1.0)
    return Preconditioner("diagonal", diag=np.ascontiguousarray(1.0 / (s * second + l2), dtype=np.float32))


def model_lists(train_lists):
    """(rptr, rows): each model's training rows, concatenated, from a list of int64 arrays."""
    rptr = np.zeros(len(train_lists) + 1, dtype=np.int64)
    rptr[1:] = np.cumsum([len(r) for r in train_lists])
    rows = np.concatenate(train_lists).astype(np.int64) if len(train_lists) else np.zeros(0, np.int64)
    return rptr, rows


def train_sparse_models(rows, y, train_lists, n_classes, *, C=1.0, loss="ce", loss_params=None, coef=None,
                        precond=None, options=None, n_threads=1):
    """Train one model per entry of ``train_lists`` on those rows of the CSR ``rows``.

    Parameters
    ----------
    rows : CSRRows
    y : ndarray of shape (n,), int32
        Label codes of the rows, in ``[0, n_classes)``.
    train_lists : list of int64 arrays
        Each model's training rows (indices into ``rows``), sorted.
    n_classes : int
    C, loss, loss_params, options, n_threads : as in :func:`aflite_fast.core.solver.train_models`
        (``C`` used as given: the two-class halving is the caller's, as there)
    coef : ndarray of shape (B, d + 1, n_classes), float64, optional
        Starting point, updated in place.
    precond : Preconditioner or None

    Returns
    -------
    coef, info : as :func:`aflite_fast.core.solver.train_models` returns them
    """
    kernel = _sparse_kernel()
    options = options or SolverOptions()
    D = rows.n_features + 1
    Dp = _kernel.member_width(D)
    y = np.ascontiguousarray(y, dtype=np.int32)
    rptr, flat = model_lists(train_lists)
    n_rows = np.diff(rptr)
    spec = resolve_loss(loss, loss_params, n_classes)

    def evaluate(models, W, scale, loss_spec):
        lo, hi = rptr[models], rptr[models + 1]
        sub_ptr = np.zeros(models.size + 1, dtype=np.int64)
        sub_ptr[1:] = np.cumsum(hi - lo)
        sub_rows = flat if models.size == len(train_lists) else np.concatenate(
            [flat[a:b] for a, b in zip(lo, hi)])
        out = np.empty((models.size, n_classes * Dp + 1), dtype=np.float64)
        kernel.sparse_eval(rows.indptr, rows.indices, rows.data, y, D, Dp, n_classes, sub_ptr, sub_rows,
                           np.ascontiguousarray(W), np.ascontiguousarray(scale, dtype=np.float64),
                           loss_spec.code, loss_spec.params, int(loss_spec.address or 0), out, n_threads)
        return out

    return train_models_with(evaluate, n_rows, D, n_classes, C=C, loss=spec, coef=coef, precond=precond,
                             options=options, n_threads=n_threads)


def stack_weights_sparse(coef):
    """Feature-major float32 weights (D, B, C) of models ``coef`` (B, D, C)."""
    return np.ascontiguousarray(np.transpose(coef, (1, 0, 2)), dtype=np.float32)


def predict_sparse_accumulate(rows, y, heldout, W, seen, correct, prob_label, proba_sum=None, n_threads=1):
    """Add the held-out predictions of the models of ``W`` (:func:`stack_weights_sparse`) on CSR
    ``rows`` to the counts (``heldout`` (n, B) uint8, 1 where model b predicts row i)."""
    C = W.shape[2]
    if proba_sum is None:
        proba_sum = np.empty((0, C), dtype=np.float64)
    with limit_blas_threads():
        _sparse_kernel().sparse_predict(rows.indptr, rows.indices, rows.data, np.ascontiguousarray(y, np.int32),
                                        W, heldout, seen, correct, prob_label, proba_sum, n_threads)


def predict_proba_sparse(rows, coef, n_threads=1):
    """Probabilities (n, C) float64 of one model ``coef`` (D, C) on CSR ``rows``."""
    n, C = rows.n_rows, coef.shape[-1]
    out = np.zeros((n, C), dtype=np.float64)
    W = stack_weights_sparse(coef.reshape(1, *coef.shape))
    predict_sparse_accumulate(rows, np.full(n, -1, np.int32), np.ones((n, 1), np.uint8), W,
                              np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n), out, n_threads)
    return out
