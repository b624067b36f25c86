# cython: language_level=3
"""Compiled sparse (CSR) member pass and prediction (``csrc/afl_sparse.h``).

The Python side is :mod:`aflite_fast.core.sparse_solver`; the solver itself is the dense
kernel's batched L-BFGS (``_kernel.LBFGSBlock``), driven through
:func:`aflite_fast.core.solver.train_models_with` with these sums.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uintptr_t

import numpy as np

cdef extern from "afl_losses.h" nogil:
    ctypedef double (*afl_user_weight_fn)(double, const double *, double *)

cdef extern from "afl_sparse.h" nogil:
    int afl_sparse_eval(const int64_t *indptr, const int32_t *indices, const float *data, const int32_t *y,
                        int64_t D, int64_t Dp, int C, int64_t nA, const int64_t *rptr, const int64_t *rows,
                        const int64_t *model, const int32_t *colmap, int64_t d, const float *W, const double *scale, int loss_code, const double *params,
                        afl_user_weight_fn user, double *out, int n_threads)
    int afl_sparse_predict(int64_t n, const int64_t *indptr, const int32_t *indices, const float *data,
                           const int32_t *y, int64_t D, int64_t B, int C, const float *W,
                           const uint8_t *heldout, int64_t ldh, int32_t *seen, int32_t *correct,
                           double *prob_label, double *proba_sum, int n_threads)
    void afl_sparse_mark_columns(const int64_t *indptr, const int32_t *indices, int64_t n_rows,
                                 const int64_t *rows, uint8_t *mark)


cdef int _check_csr(const int64_t[::1] indptr, const int32_t[::1] indices, const float[::1] data) except -1:
    if indptr.shape[0] < 1 or indices.shape[0] != data.shape[0] or indptr[indptr.shape[0] - 1] != data.shape[0]:
        raise ValueError("sparse kernel: inconsistent CSR arrays")
    return 0


def sparse_eval(const int64_t[::1] indptr, const int32_t[::1] indices, const float[::1] data,
                const int32_t[::1] y,            # IN  (n,) label codes of the rows
                int64_t D, int64_t Dp, int n_classes,
                const int64_t[::1] rptr,         # IN  (nA + 1,) each model's range in rows
                const int64_t[::1] rows,         # IN  training rows of the models, sorted per model
                const float[:, :, ::1] W,        # IN  (nA, C, Dp) class-major weights
                const double[::1] scale,         # IN  (nA,) gradient scale of each
                int loss_code, const double[::1] loss_params, uintptr_t user_fn,
                double[:, ::1] out,              # OUT (nA, C * Dp + 1) gradient sums, then the loss
                int n_threads,
                const int64_t[::1] model=None,   # IN  (nA,) each model's row of colmap
                const int32_t[:, ::1] colmap=None):  # IN  (B, d) column -> row of its weights (< D - 1)
    """Summed row losses and scaled gradient sums of ``nA`` models over their own rows,
    as :func:`aflite_fast.core.solver.train_models_with` takes them."""
    cdef int64_t nA = rptr.shape[0] - 1
    cdef int64_t n = indptr.shape[0] - 1
    cdef int64_t a
    _check_csr(indptr, indices, data)
    if (W.shape[0] != nA or W.shape[1] != n_classes or W.shape[2] != Dp or scale.shape[0] != nA
            or out.shape[0] != nA or out.shape[1] != n_classes * Dp + 1 or y.shape[0] != n
            or rptr[nA] != rows.shape[0] or Dp < D):
        raise ValueError("sparse_eval: inconsistent shapes")
    if nA == 0:
        return
    cdef const double *params = &loss_params[0] if loss_params.shape[0] > 0 else NULL
    cdef const int64_t *rp = &rows[0] if rows.shape[0] > 0 else NULL
    cdef const int32_t *ip = &indices[0] if indices.shape[0] > 0 else NULL
    cdef const float *dp = &data[0] if data.shape[0] > 0 else NULL
    cdef const int32_t *yp = &y[0] if y.shape[0] > 0 else NULL
    cdef const int64_t *mp = NULL
    cdef const int32_t *cp = NULL
    cdef int64_t d = 0
    if colmap is not None:
        d = colmap.shape[1]
        if model is None or model.shape[0] != nA or colmap.shape[0] == 0:
            raise ValueError("sparse_eval: inconsistent column maps")
        for a in range(nA):
            if model[a] < 0 or model[a] >= colmap.shape[0]:
                raise ValueError("sparse_eval: model out of range of the column maps")
        mp = &model[0]
        cp = &colmap[0, 0]
    cdef int rc
    with nogil:
        rc = afl_sparse_eval(&indptr[0], ip, dp, yp, D, Dp, n_classes, nA, &rptr[0], rp, mp, cp, d,
                             &W[0, 0, 0], &scale[0], loss_code, params, <afl_user_weight_fn> user_fn,
                             &out[0, 0], n_threads)
    if rc != 0:
        raise MemoryError("sparse_eval: could not allocate scratch memory")


def sparse_predict(const int64_t[::1] indptr, const int32_t[::1] indices, const float[::1] data,
                   const int32_t[::1] y,           # IN  (n,) label codes; -1: no label
                   const float[:, :, ::1] W,       # IN  (D, B, C) feature-major weights
                   const uint8_t[:, :] heldout,    # IN  (n, B) 1 where model b predicts row i
                   int32_t[::1] seen, int32_t[::1] correct, double[::1] prob_label,
                   double[:, ::1] proba_sum,       # IN/OUT (n, C), or (0, C)
                   int n_threads):
    """Add every held-out prediction of the B models to the rows' counts."""
    cdef int64_t n = indptr.shape[0] - 1, D = W.shape[0], B = W.shape[1]
    cdef int C = W.shape[2]
    cdef bint want = proba_sum.shape[0] > 0
    _check_csr(indptr, indices, data)
    if (y.shape[0] != n or heldout.shape[0] != n or heldout.shape[1] != B or seen.shape[0] != n
            or correct.shape[0] != n or prob_label.shape[0] != n
            or (want and (proba_sum.shape[0] != n or proba_sum.shape[1] != C))
            or (n > 0 and heldout.strides[1] != 1)):
        raise ValueError("sparse_predict: inconsistent shapes")
    if n == 0 or B == 0:
        return
    cdef const int32_t *ip = &indices[0] if indices.shape[0] > 0 else NULL
    cdef const float *dp = &data[0] if data.shape[0] > 0 else NULL
    cdef int rc
    with nogil:
        rc = afl_sparse_predict(n, &indptr[0], ip, dp, &y[0], D, B, C, &W[0, 0, 0], &heldout[0, 0],
                                heldout.strides[0], &seen[0], &correct[0], &prob_label[0],
                                &proba_sum[0, 0] if want else NULL, n_threads)
    if rc != 0:
        raise MemoryError("sparse_predict: could not allocate scratch memory")


def model_columns(const int64_t[::1] indptr, const int32_t[::1] indices, const int64_t[::1] rows, int64_t d):
    """(k,) int64: the sorted columns that the given rows use."""
    mark = np.zeros(d, dtype=np.uint8)
    cdef uint8_t[::1] mv = mark
    cdef int64_t n = indptr.shape[0] - 1, k
    for k in range(rows.shape[0]):
        if rows[k] < 0 or rows[k] >= n:
            raise ValueError("model_columns: row out of range")
    if rows.shape[0] > 0 and indices.shape[0] > 0 and d > 0:
        with nogil:
            afl_sparse_mark_columns(&indptr[0], &indices[0], rows.shape[0], &rows[0], &mv[0])
    return np.flatnonzero(mark)


cdef extern from "afl_sparse.h" nogil:
    int afl_sparse_newton(const int64_t *indptr, const int32_t *indices, const float *data, const int32_t *y,
                          int C, int64_t d, int64_t B, const int64_t *rptr, const int64_t *rows,
                          const int64_t *cptr, const int64_t *cols, double *w, const int64_t *wptr,
                          const double *l2, double gtol, double start_rtol, double ftol, int max_iter,
                          int max_ls, int max_cg, double cg_eta, double cg_abs, int precond, int32_t *n_iter, int32_t *status, double *fval,
                          int32_t *n_eval, int32_t *n_hvp, int n_threads)


def sparse_newton(const int64_t[::1] indptr, const int32_t[::1] indices, const float[::1] data,
                  const int32_t[::1] y,           # IN  (n,) label codes in [0, n_classes)
                  int n_classes, int64_t d,
                  const int64_t[::1] rptr,        # IN  (B + 1,) each model's range in rows
                  const int64_t[::1] rows,        # IN  training rows of the models, sorted per model
                  const int64_t[::1] cptr,        # IN  (B + 1,) each model's range in cols
                  const int64_t[::1] cols,        # IN  each model's columns, sorted, < d
                  double[::1] w,                  # IN/OUT each model's (k + 1) * C weights, feature-major
                  const double[::1] l2,           # IN  (B,) L2 weight of each model
                  double gtol, double start_rtol, double ftol, int max_iter, int max_ls, int max_cg,
                  double cg_eta, double cg_abs, int n_threads, bint precondition=True):
    """Train B cross-entropy models by Newton-CG (``csrc/afl_sparse.h``, D): conjugate gradients
    stop at a residual of min(cg_eta, sqrt|g|) |g| or a largest entry of cg_abs * the model's
    tolerance, or after max_cg steps; ``precondition`` False: without the Hessian's diagonal as
    their preconditioner.  Returns
    (n_iter, status, objective, n_eval, n_hvp), one entry per model."""
    cdef int64_t B = rptr.shape[0] - 1, n = indptr.shape[0] - 1, a, q, total = 0
    _check_csr(indptr, indices, data)
    if B < 0 or cptr.shape[0] != B + 1 or l2.shape[0] != B or y.shape[0] != n or n_classes < 2:
        raise ValueError("sparse_newton: inconsistent shapes")
    if rptr[B] != rows.shape[0] or cptr[B] != cols.shape[0]:
        raise ValueError("sparse_newton: inconsistent shapes")
    wptr = np.zeros(B + 1, dtype=np.int64)
    cdef int64_t[::1] wp = wptr
    for a in range(B):
        if rptr[a + 1] <= rptr[a] or cptr[a + 1] < cptr[a]:
            raise ValueError("sparse_newton: every model needs at least one training row")
        wp[a + 1] = wp[a] + (cptr[a + 1] - cptr[a] + 1) * n_classes
    if w.shape[0] != wp[B]:
        raise ValueError("sparse_newton: w must hold (k + 1) * n_classes weights a model")
    for q in range(rows.shape[0]):
        if rows[q] < 0 or rows[q] >= n or y[rows[q]] < 0 or y[rows[q]] >= n_classes:
            raise ValueError("sparse_newton: a row or its label out of range")
    for q in range(cols.shape[0]):
        if cols[q] < 0 or cols[q] >= d:
            raise ValueError("sparse_newton: a column out of range")
    n_iter = np.zeros(B, dtype=np.int32)
    status = np.zeros(B, dtype=np.int32)
    fval = np.zeros(B, dtype=np.float64)
    n_eval = np.zeros(B, dtype=np.int32)
    n_hvp = np.zeros(B, dtype=np.int32)
    if B == 0:
        return n_iter, status, fval, n_eval, n_hvp
    cdef int32_t[::1] iv = n_iter, sv = status, ev = n_eval, hv = n_hvp
    cdef double[::1] fv = fval
    cdef const int32_t *ip = &indices[0] if indices.shape[0] > 0 else NULL
    cdef const float *dp = &data[0] if data.shape[0] > 0 else NULL
    cdef const int64_t *cp = &cols[0] if cols.shape[0] > 0 else NULL
    cdef int rc
    with nogil:
        rc = afl_sparse_newton(&indptr[0], ip, dp, &y[0], n_classes, d, B, &rptr[0], &rows[0], &cptr[0], cp,
                               &w[0], &wp[0], &l2[0], gtol, start_rtol, ftol, max_iter, max_ls, max_cg,
                               cg_eta, cg_abs, precondition, &iv[0], &sv[0], &fv[0], &ev[0], &hv[0], n_threads)
    if rc == -2:
        raise ValueError("sparse_newton: at most 64 classes")
    if rc == -3:
        raise ValueError("sparse_newton: a model's rows use a column that is not among its columns")
    if rc != 0:
        raise MemoryError("sparse_newton: could not allocate scratch memory")
    return n_iter, status, fval, n_eval, n_hvp
