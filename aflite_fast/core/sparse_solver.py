"""Python side of the sparse kernel: CSR rows trained and predicted by many linear models.

The models are the dense kernel's (multinomial logistic regression on the features and an
intercept, the same losses).  Two solvers, both stopping when the largest gradient entry is at
most ``tol`` (and, from zero, at most ``START_RTOL`` times its value there) or the objective's
relative decrease is at most ``ftol``:

- Newton-CG (``_sparse_kernel.sparse_newton``, ``csrc/afl_sparse.h`` D), for the
  cross-entropy loss (the default of every entry point): each model by one thread over a CSC
  copy of its own rows, every step a conjugate-gradient solve of the Newton system
  preconditioned by the Hessian's diagonal, each Hessian-vector product one pass over the
  model's non-zeros.  No history of vectors: a few vectors a model, and the few Newton steps
  (4 to 7 at the default tolerances on hashed n-gram counts) replace the 40 to 150 L-BFGS steps
  whose vector updates over the model's columns dominated the time.
- L-BFGS, for the other losses (their Hessians are not computed): the dense kernel's batched
  solver (``_kernel.LBFGSBlock`` through :func:`aflite_fast.core.solver.train_models_with`)
  with the evaluation of loss and gradient by ``_sparse_kernel.sparse_eval`` (each model over
  its own training rows, its sums in double in row order by one thread), from the identity.

Prediction (``_sparse_kernel.sparse_predict``): every model at once, feature-major weights.

Differences from dense rows, by design:

- Rows are not centred (subtracting the column means would fill every row); the intercept,
  which is not penalised, absorbs the mean, so the optimum is that of scikit-learn's
  ``LogisticRegression`` on the same (uncentred) sparse matrix.
- L-BFGS has no preconditioner: each model is solved over its own columns (below), so no
  matrix is shared by a block's models, and a per-feature scaling from the columns' second
  moments was measured to take more steps than the identity on hashed n-gram counts
  (docs/sparse.md).  It changes the solver's path, never its optimum.

Each model is solved over its own columns (those its training rows use, plus the intercept):
the others' optimum is exactly zero.  Memory, with ``P = (k + 1) * C`` weights (k the most
columns a model of the phase uses, at most d), ``t`` the most training rows and ``z`` the most
non-zeros of a model:

- Newton-CG (:func:`model_bytes`, :func:`newton_thread_bytes`): per model of a group ``8 P``
  (its local weights) plus ``12 (d + 1) C`` (its coefficients and prediction weights); per
  thread, for the model it solves, ``80 P`` (ten vectors), ``24 t C`` (the rows'
  probabilities at the current and trial points and their products), the CSC copy
  ``8 z + 8 (k + 1) + 4 t`` and its column map ``4 d``.
- L-BFGS with ``h`` correction pairs: per model ``(88 + 16 h) * P`` bytes (L-BFGS state
  ``(32 + 16 h) P``, the preconditioner product ``24 P``, its local coefficients ``8 P``, trial
  weights and gradient sums ``16 P``, alignment ``8 P``), plus ``12 (d + 1) C + 4 d`` bytes of
  its full coefficients, its prediction weights and its column map, and ``12 P`` per thread.
"""
import numpy as np

from aflite_fast.core.compiled import _kernel
from aflite_fast.core.loss_names import LOSS_CODES
from aflite_fast.core.losses import resolve_loss
from aflite_fast.core.solver import START_RTOL, SolverOptions, train_models_with
from aflite_fast.runtime.threads import limit_blas_threads

#: The sparse solvers of :func:`train_sparse_models`.
SOLVERS = ("auto", "newton", "lbfgs")

#: Conjugate-gradient steps a Newton step takes at most.
NEWTON_MAX_CG = 250
#: The conjugate gradients of a Newton step stop at a residual of min(NEWTON_CG_ETA, sqrt|g|) |g|
#: or once the residual (the gradient the quadratic model predicts after the step) has no entry
#: above NEWTON_CG_ABS times the model's tolerance: solving further would not stop the model
#: sooner (six models of 5,600 rows of hashed 1-2-gram counts over 100,000 columns, tol 1e-4:
#: 68 Hessian products a model on average with the second rule, 132 with the first alone, and
#: 6 to 7 Newton steps either way).
NEWTON_CG_ETA = 0.5
NEWTON_CG_ABS = 0.5
#: The most classes Newton-CG takes (``csrc/afl_sparse.h``); more: L-BFGS.
NEWTON_MAX_CLASSES = 64


def _sparse_kernel():
    try:
        from aflite_fast.core import _sparse_kernel
    except ImportError as exc:  # pragma: no cover - a broken install only
        from aflite_fast._build_check import raise_build_error

        raise_build_error(exc)
    return _sparse_kernel


def model_bytes(n_features, n_classes, history=10, n_columns=None, solver="newton"):
    """Bytes one model of a sparse phase holds while its group trains (see the module docstring):
    ``n_columns`` (default ``n_features``) the most columns a model uses; ``solver`` the one
    that trains it ("newton": the solver's scratch is per thread, :func:`newton_thread_bytes`)."""
    d, C = int(n_features), int(n_classes)
    P = ((d if n_columns is None else int(n_columns)) + 1) * C
    if solver == "lbfgs":
        return (88 + 16 * int(history)) * P + 12 * (d + 1) * C + 4 * d
    return 8 * P + 12 * (d + 1) * C


def newton_thread_bytes(n_features, n_classes, n_columns=None, n_rows=0, n_nonzeros=0):
    """Scratch bytes of each thread of the Newton-CG solver, solving one model of at most
    ``n_columns`` columns, ``n_rows`` training rows and ``n_nonzeros`` non-zeros: ten vectors
    of ``P = (k + 1) C`` doubles, three doubles a row and class, the CSC copy of the rows and
    the thread's column map, ``80 P + 24 t C + 8 z + 8 (k + 1) + 4 t + 4 d``."""
    d, C = int(n_features), int(n_classes)
    k = d if n_columns is None else int(n_columns)
    t, z = int(n_rows), int(n_nonzeros)
    return 80 * (k + 1) * C + 24 * t * C + 8 * z + 8 * (k + 1) + 4 * t + 4 * d


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


def model_lists(train_lists):
    """(rptr, rows): each model's training rows, concatenated, from a list of int64 arrays."""
    rptr = np.zeros(len(train_lists) + 1, dtype=np.int64)
    rptr[1:] = np.cumsum([len(r) for r in train_lists])
    rows = np.concatenate(train_lists).astype(np.int64) if len(train_lists) else np.zeros(0, np.int64)
    return rptr, rows


def model_column_sets(rows, train_lists):
    """Each model's columns: the sorted columns its own training rows use (int64 arrays)."""
    kernel = _sparse_kernel()
    return [kernel.model_columns(rows.indptr, rows.indices, np.ascontiguousarray(r, dtype=np.int64),
                                 rows.n_features) for r in train_lists]


def local_width(columns):
    """The solver's rows D of models with these column sets: the most columns any uses, plus the
    intercept (the same for every group of the same models, so grouping changes no bit)."""
    return max((c.size for c in columns), default=0) + 1


def train_sparse_models(rows, y, train_lists, n_classes, *, C=1.0, loss="ce", loss_params=None, coef=None,
                        precond=None, options=None, n_threads=1, columns=None, width=None, solver="auto"):
    """Train one model per entry of ``train_lists`` on those rows of the CSR ``rows``.

    Each model is solved over its own columns only (those its training rows use, ``columns``;
    the intercept last): a column no training row uses has a zero gradient but for its L2
    term, so its weight's optimum is exactly zero, and the solver's vectors shrink from
    ``d + 1`` rows to ``width`` (:func:`local_width`).  A warm start's weights on such columns are
    dropped (set at their optimum, zero): the same optimum, another path.

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
        Starting point, updated in place (and returned).
    precond : None or Preconditioner
        Over the ``width`` local rows (shared by the models); None: the identity.
    columns : list of int64 arrays, optional
        Each model's columns (default: :func:`model_column_sets`).
    width : int, optional
        The local rows D of the L-BFGS solver (default: :func:`local_width` of ``columns``).
    solver : {"auto", "newton", "lbfgs"}, default="auto"
        ``"newton"``: Newton-CG (:func:`_train_newton`), the cross-entropy loss only;
        ``"lbfgs"``: the dense kernel's batched L-BFGS over the local columns; ``"auto"``:
        Newton-CG where it applies (:func:`newton_applies`, at most ``NEWTON_MAX_CLASSES``
        classes), else L-BFGS.  Both stop by the same rule and reach the same optimum, within
        the solver's tolerance.

    Returns
    -------
    coef, info : as :func:`aflite_fast.core.solver.train_models` returns them
    """
    kernel = _sparse_kernel()
    options = options or SolverOptions()
    B, d = len(train_lists), rows.n_features
    columns = model_column_sets(rows, train_lists) if columns is None else columns
    spec = resolve_loss(loss, loss_params, n_classes)
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
    if solver == "newton" and not newton_applies(spec):
        raise ValueError(f"solver='newton' takes the cross-entropy loss only, got loss {spec.name!r}")
    if solver == "newton" and n_classes > NEWTON_MAX_CLASSES:
        raise ValueError(f"solver='newton' takes at most {NEWTON_MAX_CLASSES} classes, got {n_classes}")
    if solver == "newton" or (solver == "auto" and newton_applies(spec) and n_classes <= NEWTON_MAX_CLASSES):
        return _train_newton(rows, y, train_lists, n_classes, C=C, coef=coef, options=options,
                             n_threads=n_threads, columns=columns)
    D = local_width(columns) if width is None else int(width)
    Dp = _kernel.member_width(D)
    y = np.ascontiguousarray(y, dtype=np.int32)
    rptr, flat = model_lists(train_lists)
    n_rows = np.diff(rptr)
    colmap = np.zeros((B, d), dtype=np.int32)
    local = np.zeros((B, D, n_classes), dtype=np.float64)
    if coef is None:
        coef = np.zeros((B, d + 1, n_classes), dtype=np.float64)
    for j, cols in enumerate(columns):
        colmap[j, cols] = np.arange(cols.size, dtype=np.int32)
        local[j, :cols.size] = coef[j, cols]
        local[j, -1] = coef[j, -1]

    def evaluate(models, W, scale, loss_spec):
        lo, hi = rptr[models], rptr[models + 1]
        sub_ptr = np.zeros(models.size + 1, dtype=np.int64)
        sub_ptr[1:] = np.cumsum(hi - lo)
        sub_rows = flat if models.size == B else np.concatenate([flat[a:b] for a, b in zip(lo, hi)])
        out = np.empty((models.size, n_classes * Dp + 1), dtype=np.float64)
        kernel.sparse_eval(rows.indptr, rows.indices, rows.data, y, D, Dp, n_classes, sub_ptr, sub_rows,
                           np.ascontiguousarray(W), np.ascontiguousarray(scale, dtype=np.float64),
                           loss_spec.code, loss_spec.params, int(loss_spec.address or 0), out, n_threads,
                           np.ascontiguousarray(models, dtype=np.int64), colmap)
        return out

    # the sparse member pass evaluates the symmetric softmax (C outputs)
    local, info = train_models_with(evaluate, n_rows, D, n_classes, C=C, loss=spec, coef=local, precond=precond,
                                    options=options, n_threads=n_threads, reference=False)
    coef[:] = 0.0
    for j, cols in enumerate(columns):
        coef[j, cols] = local[j, :cols.size]
        coef[j, -1] = local[j, -1]
    return coef, info


def phase_solver(loss, loss_params, n_classes):
    """The solver :func:`train_sparse_models` picks for this loss ("newton" or "lbfgs")."""
    spec = resolve_loss(loss, loss_params, n_classes)
    return "newton" if newton_applies(spec) and n_classes <= NEWTON_MAX_CLASSES else "lbfgs"


def newton_applies(spec):
    """True when Newton-CG solves this resolved loss: plain cross-entropy (its Hessian is the
    one :func:`_train_newton` computes)."""
    return spec.code == LOSS_CODES["ce"] and not spec.address and getattr(spec, "warmup", None) is None


def _train_newton(rows, y, train_lists, n_classes, *, C, coef, options, n_threads, columns):
    """:func:`train_sparse_models` by Newton-CG (``_sparse_kernel.sparse_newton``): each model
    over its own columns at its own width, by one thread, so neither the thread count nor the
    other models of the call change a bit.  ``options.max_iter`` counts Newton steps,
    ``options.max_line_search`` backtracking steps; ``history`` does not apply, and
    ``precondition`` (default True) preconditions the conjugate gradients by the Hessian's
    diagonal (False: the identity, slower; for measurements)."""
    B, d = len(train_lists), rows.n_features
    y = np.ascontiguousarray(y, dtype=np.int32)
    rptr, flat = model_lists(train_lists)
    n_rows = np.diff(rptr)
    if np.any(n_rows == 0):
        raise ValueError("every model needs at least one training row")
    if coef is None:
        coef = np.zeros((B, d + 1, n_classes), dtype=np.float64)
    cptr = np.zeros(B + 1, dtype=np.int64)
    cptr[1:] = np.cumsum([c.size for c in columns])
    cols = np.concatenate(columns).astype(np.int64) if B else np.zeros(0, np.int64)
    w = np.concatenate([np.concatenate([coef[j, c], coef[j, -1:]]).ravel() for j, c in enumerate(columns)])
    l2 = 1.0 / (float(C) * n_rows)
    n_iter, status, fval, n_eval, n_hvp = _sparse_kernel().sparse_newton(
        rows.indptr, rows.indices, rows.data, y, n_classes, d, rptr, flat, cptr, cols, w, l2,
        options.tol, START_RTOL, options.ftol, options.max_iter, options.max_line_search, NEWTON_MAX_CG,
        NEWTON_CG_ETA, NEWTON_CG_ABS, n_threads, bool(options.precondition))
    coef[:] = 0.0
    at = 0
    for j, c in enumerate(columns):
        size = (c.size + 1) * n_classes
        local = w[at:at + size].reshape(c.size + 1, n_classes)
        coef[j, c] = local[:-1]
        coef[j, -1] = local[-1]
        at += size
    return coef, {"n_iter": n_iter, "status": status, "objective": fval, "n_eval": n_eval, "n_hvp": n_hvp}


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
