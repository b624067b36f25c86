"""Training in the row space: models on fewer rows than columns, from the rows' Gram matrix.

A model trained on t rows of D columns (t < D: a few hundred rows of a thousand-dimensional
embedding) keeps every L-BFGS vector of its run in the span of its training rows, its
start's weights and the intercept (``csrc/afl_dual.h``, A), so the solver can hold each
vector as t + C + 1 coefficients and take its inner products, logits and L2 term from the
Gram matrix K of the rows' centred features: one product with a t x t block of K per step,
instead of two member passes of t x D and the preconditioner's D x D product.  The iterates
are those of the feature-space solver with H0 the identity, with its stopping rules
(:class:`~aflite_fast.core.solver.SolverOptions`), so the optimum is the same; the path and
the number of steps are those of the unpreconditioned solver.

:class:`RowGram` computes K once for a set of rows and serves every later subset of them (a
run's active rows shrink phase by phase): an entry of K is the same FMA chain whichever rows
are in the call (``_kernel.gram``), so K's entries, and the models, do not depend on which
phase computed it.
"""
import numpy as np

from aflite_fast.core.compiled import _kernel
from aflite_fast.core.layout import COL_BLOCK, block_bounds
from aflite_fast.core.losses import _LOSS_FORWARD, resolve_loss
from aflite_fast.core.reference_class import from_reference, to_reference
from aflite_fast.io import _rowscan
from aflite_fast.runtime.threads import limit_blas_threads, limit_threads

#: Largest X (rows) whose phases train in the row space: its Gram matrix (float32, 16 MB) and
#: eigenvectors are computed once a run from all of its rows (a function of X alone), at the
#: cost of a few phases.  On 5,000 x 768, whose last phases have fewer training rows than
#: columns, those costs (0.4-0.5 s) took what the row space saved there (measured).
MAX_GRAM_ROWS = 2048

#: Rank of the row-space solver's H0: the rows' second moment's leading eigenvectors.  On
#: skewed embeddings (1,580 x 1,024) rank 32 took as few evaluations as the dense D x D
#: preconditioner (6.7-7.3 a warm-started model against 6.2-9.8; rank 8: 10.6-11.9; none:
#: 17-23), for t r a product instead of D^2.
PRECOND_RANK = 32

#: Rows summed in float32 before their sum joins the double weights (X_rows' alpha).
_GEMM_ROW_BLOCK = 256


def _padded_width(Xa):
    return Xa.strides[0] // Xa.itemsize


def _padded_view(Xa):
    """``Xa`` with its row padding (the kernel's rows: a view of a wider buffer), C-contiguous."""
    width = _padded_width(Xa)
    if width == Xa.shape[1]:
        return np.ascontiguousarray(Xa)
    return np.lib.stride_tricks.as_strided(Xa, shape=(Xa.shape[0], width), strides=Xa.strides, writeable=False)


#: Extra columns and rounds of the subspace iteration that finds them.
_OVERSAMPLE = 16
_POWER_ROUNDS = 4


def row_space_worthwhile(t_max, n_columns, n_rows, n_classes, group=1):
    """Whether models of up to ``t_max`` training rows of ``n_columns`` columns (features and
    the ones column), drawn from ``n_rows`` rows, train in the row space: classifiers
    (``group`` 1, 2 to 64 classes) on fewer rows than columns, from at most
    :data:`MAX_GRAM_ROWS` rows.  A function of the sizes alone."""
    return (group == 1 and 2 <= n_classes <= _kernel.DUAL_MAX_OUT + 1 and 0 < t_max < n_columns
            and n_rows <= MAX_GRAM_ROWS)


def row_space_bytes(n_rows, t_max, n_columns, n_classes, history, n_threads=1):
    """Peak bytes of a row-space phase on X of ``n_rows`` rows beyond the phase's own rows: the
    Gram matrix (float32, and its double while it is built), while it is built X's rows (float32,
    their transpose, and float64 for the eigenvectors), the eigenvectors' work, and every
    thread's scratch."""
    n_out = max(1, n_classes - 1)
    r = PRECOND_RANK
    n, D = int(n_rows), int(n_columns)
    return (n * n * (4 + 8) + n * D * (4 + 4 + 8)
            + int(n_threads) * int(_kernel.dual_scratch_bytes(t_max, D, n_out, r, history, n))
            + n * (8 + (r + _OVERSAMPLE) * 8 * 3) + D * r * 8 * 2)


class RowGram:
    """The Gram matrix K (float32) of the centred features of some rows of X, kept while the
    rows asked for are among them.

    ``rows`` are row indices of X (sorted); :meth:`lookup` gives the rows of K of a sorted
    subset of them, or None when one is missing.
    """

    def __init__(self, rows, features, n_threads=1):
        rows = np.asarray(rows, dtype=np.int64)
        n, d = features.shape
        Ft = np.ascontiguousarray(features.T)
        G = np.zeros((n, n), dtype=np.float64)
        with limit_blas_threads():
            _kernel.gram(Ft, G, block_bounds(d, COL_BLOCK), False, n_threads)
        self.K = G.astype(np.float32)
        self.rows = rows
        del G, Ft
        # the features of largest second moment on these rows, whose gradient entries every
        # model watches from its start: they spare most of the exact gradients (t x D) that
        # otherwise find an entry above the tolerance (a function of the rows alone; the
        # models do not depend on it)
        moment = np.einsum("ij,ij->j", features, features, dtype=np.float64)
        self.watch = np.ascontiguousarray(np.argsort(-moment, kind="stable")[:_kernel.DUAL_WATCH], dtype=np.int64)

        self._precond = None
        #: the kernel rows (float32, centred, the ones column) of these rows, where the caller keeps them
        self.kernel_rows = None

    def preconditioner(self, features, rank=PRECOND_RANK, n_threads=1):
        """H0's terms (V, XV, sig, sig_rest; see ``csrc/afl_dual.h``) from the second moment of
        the rows K is of, ``features`` their centred features (the rows of K in order):
        its ``rank`` leading eigenvectors V (orthonormal, D - 1 x rank), X V on the rows, their
        eigenvalues and the next one.  Found by subspace iteration on K from a fixed start,
        then a Rayleigh-Ritz step in the feature space, on one BLAS thread: a function of
        these rows alone.  Computed once and kept."""
        if self._precond is not None:
            return self._precond
        if features is None:
            raise ValueError("RowGram.preconditioner: not computed yet, and no features given")
        n, F = features.shape
        r = int(min(rank, n - 1, F))
        if r <= 0:
            self._precond = (None, None, None, 0.0)
            return self._precond
        width = min(n, r + _OVERSAMPLE)
        kb = block_bounds(n, COL_BLOCK)
        KQ = np.empty((n, width), dtype=np.float64)
        with limit_threads(None):
            Q = np.random.default_rng(0).standard_normal((n, width))
            for _ in range(_POWER_ROUNDS):
                Q, _r = np.linalg.qr(Q)
                _kernel.sgemm(False, self.K, np.ascontiguousarray(Q, dtype=np.float32), KQ, kb, False, n_threads)
                Q = KQ.copy()
            Q, _r = np.linalg.qr(Q)
            _kernel.sgemm(False, self.K, np.ascontiguousarray(Q, dtype=np.float32), KQ, kb, False, n_threads)
            ritz, U = np.linalg.eigh(Q.T @ KQ)
            order = np.argsort(ritz)[::-1]
            ritz, U = ritz[order] / n, U[:, order]
            X64 = np.asarray(features, dtype=np.float64)
            V, _r = np.linalg.qr(X64.T @ (Q @ U[:, :r]))
            XV = X64 @ V
            sig, W = np.linalg.eigh(XV.T @ XV / n)
            order = np.argsort(sig)[::-1]
            sig, W = sig[order], W[:, order]
            V = np.ascontiguousarray(V @ W)
            XV = np.ascontiguousarray(X64 @ V)
        sig_rest = float(max(ritz[r], 0.0)) if r < ritz.size else 0.0
        self._precond = (V, XV, np.ascontiguousarray(np.maximum(sig, 0.0)), sig_rest)
        return self._precond

    def lookup(self, rows):
        """Rows of K (int64) of the sorted row indices ``rows``, or None if one is not held."""
        rows = np.asarray(rows, dtype=np.int64)
        at = np.searchsorted(self.rows, rows)
        if at.size and (at[-1] >= self.rows.size or np.any(self.rows[np.minimum(at, self.rows.size - 1)] != rows)):
            return None
        return at


def _solve(Xa, y, member, n_classes, gram, krow, *, C, loss, loss_params, coef, options, n_threads, precond,
           with_logits, rows=None, with_mean=False):
    """The row-space solver's call: (work, alpha, mptr, mrows, info, logits, mean_rows), work (B,
    D, C - 1) the reference-class weights but X_rows' alpha, alpha (rows of every model, C - 1)
    their coefficients, logits (n, B (C - 1)) float32 or None and mean_rows (D - 1, C - 1) the
    models' mean X_rows' alpha or None (both only ``with_logits``, ``with_mean``; see
    ``afl_dual_train``); the call's rows are ``Xa``'s, or its rows ``rows`` (then n = rows.size)."""
    from aflite_fast.core.solver import SolverOptions, starting_point

    options = options or SolverOptions()
    D = Xa.shape[1]
    n = Xa.shape[0] if rows is None else rows.size
    B = member.shape[1]
    spec = resolve_loss(loss, loss_params, n_classes)
    if spec.code == _LOSS_FORWARD:
        raise ValueError("the row-space solver does not take the forward-corrected loss")
    coef = starting_point(coef, B, D, n_classes)
    # each model's rows (increasing) in one compiled pass over member
    mptr = np.empty(B + 1, dtype=np.int64)
    mrows = np.empty(int(np.count_nonzero(member)), dtype=np.int32)
    _rowscan.member_rows(np.ascontiguousarray(member, dtype=np.uint8), mptr, mrows)
    counts = np.diff(mptr)
    if np.any(counts == 0):
        raise ValueError("every model needs at least one training row")
    if getattr(spec, "warmup", None) is not None:
        cold = ~coef.reshape(B, -1).any(axis=1)
        if cold.any():
            start, _ = train_models_row_space(Xa, y, np.ascontiguousarray(member[:, cold]), n_classes, gram, krow,
                                              C=C, loss=spec.warmup, coef=np.ascontiguousarray(coef[cold]),
                                              options=options, n_threads=n_threads, precond=precond, rows=rows)
            coef[cold] = start
    l2 = 1.0 / (float(C) * counts)
    inv_n = 1.0 / counts.astype(np.float64)
    n_out = n_classes - 1
    work = np.ascontiguousarray(to_reference(coef)).reshape(B, D * n_out)
    n_iter = np.zeros(B, dtype=np.int32)
    status = np.zeros(B, dtype=np.int32)
    fval = np.zeros(B, dtype=np.float64)
    n_eval = np.zeros(B, dtype=np.int32)
    pre = {}
    if precond is not None and options.precondition and precond[0] is not None:
        V, XV, sig, sig_rest = precond
        pre = dict(V=V, Vt=np.ascontiguousarray(V.T), XV=XV, sig=sig, sig_rest=sig_rest, curvature=1.0 / n_classes)
    # logits from K need the models' starts (on the features) all zero or all the same
    features = work.reshape(B, D, n_out)[:, :D - 1]
    if with_logits and not (features == features[:1]).all():
        with_logits = False
    logits = np.empty((n, B * n_out), dtype=np.float32) if with_logits else None
    mean_rows = np.empty((D - 1, n_out)) if with_logits and with_mean else None
    alpha = np.empty((mrows.size, n_out), dtype=np.float64)
    _kernel.dual_train(gram.K, np.ascontiguousarray(krow, dtype=np.int64), Xa, np.ascontiguousarray(y, np.int32),
                       mptr, mrows, work, alpha, l2, inv_n, n_out, spec.code, spec.params, spec.address,
                       options.tol, options.ftol, options.max_iter, options.history, options.max_line_search,
                       n_iter, status, fval, n_eval, n_threads, watch=gram.watch, logits=logits,
                       xrow=None if rows is None else np.ascontiguousarray(rows, dtype=np.int64),
                       mean_rows=mean_rows, **pre)
    info = {"n_iter": n_iter, "status": status, "objective": fval, "n_eval": n_eval}
    return work.reshape(B, D, n_out), alpha, mptr, mrows, info, logits, mean_rows


def _row_weights(Xa, alpha, mptr, mrows, n_out, n_threads, rows=None):
    """X_rows' alpha of every model at once, (D - 1, B, C - 1): the rows' coefficients scattered
    into a matrix of Xa's rows by B (C - 1) (the call's row i at Xa's row ``rows[i]``), one
    deterministic GEMM (float32 products, double sums per block of Xa's rows)."""
    n, D = Xa.shape
    B = mptr.size - 1
    A = np.zeros((n, B * n_out), dtype=np.float32)
    _rowscan.scatter_member_values(alpha, mptr, mrows if rows is None else rows[mrows].astype(np.int32), A)
    XW = np.zeros((_padded_width(Xa), B * n_out), dtype=np.float64)
    with limit_blas_threads():
        _kernel.sgemm(True, _padded_view(Xa), A, XW, block_bounds(n, _GEMM_ROW_BLOCK), False, n_threads)
    return XW[:D - 1].reshape(D - 1, B, n_out)


def train_models_row_space(Xa, y, member, n_classes, gram, krow, *, C=1.0, loss="ce", loss_params=None,
                           coef=None, options=None, n_threads=1, precond=None, rows=None):
    """:func:`~aflite_fast.core.solver.train_models` (classifiers, ``group`` 1, one unpenalised
    ones column) in the row space.

    Parameters
    ----------
    Xa, y, member, n_classes, C, loss, loss_params, coef, options, n_threads :
        as in :func:`~aflite_fast.core.solver.train_models`
    gram : RowGram
        Holds the Gram matrix of the rows of ``Xa`` (their centred features).
    krow : ndarray of shape (n,), int64
        Row of ``gram.K`` of each row of ``Xa`` (increasing).
    precond : tuple, optional
        H0's terms from :meth:`RowGram.preconditioner`; None (or ``options.precondition``
        False): the identity.
    rows : ndarray of shape (n,), int64, optional
        The rows of ``Xa`` the models are of (then ``y``, ``member`` and ``krow`` are of
        these n rows); None: all of them.

    Returns
    -------
    coef, info : as :func:`~aflite_fast.core.solver.train_models` returns them (the same
        optimum; the path of the solver without preconditioner)
    """
    work, alpha, mptr, mrows, info, _, _ = _solve(Xa, y, member, n_classes, gram, krow, C=C, loss=loss,
                                                  loss_params=loss_params, coef=coef, options=options,
                                                  n_threads=n_threads, precond=precond, with_logits=False, rows=rows)
    D, n_out = Xa.shape[1], n_classes - 1
    work[:, :D - 1, :] += _row_weights(Xa, alpha, mptr, mrows, n_out, n_threads, rows).transpose(1, 0, 2)
    out = np.empty((member.shape[1], D, n_classes))
    from_reference(work, out=out)
    return out, info


def phase_models_row_space(Xa, y, member, n_classes, gram, krow, *, C=1.0, loss="ce", loss_params=None,
                           coef=None, options=None, n_threads=1, precond=None, rows=None, models=True):
    """:func:`train_models_row_space` for a phase: the models' logits on their n rows too, and
    their mean, without forming every model's weights unless ``models``.

    Where the models' starts are all zero or all the same (a run's phases: cold, or the last
    phase's mean model), their logits come from K (``afl_dual_train``): one product of K with
    the rows' coefficients instead of the two products with X (X_rows' alpha, then X W), so no
    model's weights are needed for prediction; their mean (the next phase's start) takes one
    product of X with the mean coefficients.

    Returns
    -------
    coef : ndarray (B, D, n_classes) or None
        The models (None unless ``models``).
    mean : ndarray (D, n_classes)
        The mean model.
    logits : ndarray (n, B (n_classes - 1)) float32, or None
        Class-major (column k B + j: output k of model j, the reference-class form), or None
        where the starts differ (then ``coef`` is given whatever ``models`` says).
    info : dict
        As :func:`train_models_row_space`.
    """
    work, alpha, mptr, mrows, info, logits, mean_rows = _solve(
        Xa, y, member, n_classes, gram, krow, C=C, loss=loss, loss_params=loss_params, coef=coef, options=options,
        n_threads=n_threads, precond=precond, with_logits=True, rows=rows, with_mean=not models)
    n, D = Xa.shape
    B, n_out = member.shape[1], n_classes - 1
    if models or logits is None:
        work[:, :D - 1, :] += _row_weights(Xa, alpha, mptr, mrows, n_out, n_threads, rows).transpose(1, 0, 2)
        out = np.empty((B, D, n_classes))
        from_reference(work, out=out)
        return out, out.mean(axis=0), logits, info
    # the mean model: the mean of the starts' parts plus the rows' part (the kernel call's)
    mean = work.mean(axis=0)
    mean[:D - 1] += mean_rows
    return None, from_reference(mean[None])[0], logits, info
