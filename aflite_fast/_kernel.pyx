# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled core of aflite_fast: batched multinomial logistic regression.

Design
A. One call trains a *block* of B models, each on its own subset of the same rows
   (``member[i, j] == 1``); every solver round evaluates all unfinished models with one
   GEMM for the logits and one for the gradient (``csrc/afl_gemm.h``), not one small
   product per model.
B. Rows carry a trailing column of ones, so the intercept is the last row of each model's
   (d + 1) x C coefficient matrix; the L2 penalty skips that row (unpenalized intercept).
C. Objective of model j: mean loss over its n_j rows + l2_j / 2 * ||W_j||^2.  With
   l2_j = 1 / (C * n_j) the optimum is scikit-learn's LogisticRegression(C=C).
D. Solver: L-BFGS with a backtracking (Armijo) line search, one state machine per model, so
   each model converges on its own; models that have converged leave the GEMMs.
E. Determinism: per-row work is independent across rows; sums over rows are taken in fixed
   row blocks (``row_blocks``, aligned by the caller to positions in the active set) and
   then in block order; the GEMM's summation order depends only on the blocks.  So no
   result depends on the thread count, on B, or on which other models share the block.
F. Prediction evaluates all models of a block on a chunk of rows with one GEMM and
   accumulates, per row, held-out predictions seen, correct, and the summed probability of
   the given label (and optionally the summed probability vectors).

Every array argument is marked IN or OUT; outputs are allocated by the caller (kernel.py).
"""
from libc.stdlib cimport malloc, calloc, free
from libc.string cimport memset, memcpy
from libc.math cimport fabs, sqrt, isfinite
from libc.stdint cimport int64_t, int32_t, uint8_t, uintptr_t
from cython.parallel cimport prange, parallel, threadid

cdef extern from "afl_omp.h" nogil:
    int AFL_HAVE_OPENMP

cdef extern from "afl_gemm.h" nogil:
    int afl_sgemm(int trans_a, int64_t M, int64_t N, int64_t K,
                  const float *A, int64_t lda, const float *B, int64_t ldb,
                  float *C, double *Cd, int64_t ldc, int accumulate,
                  const int64_t *kb, int64_t nkb, int n_threads)
    const char *afl_gemm_isa()
    int64_t afl_gemm_pack_bytes(int trans_a, int64_t N, int64_t K, int64_t max_kc)
    unsigned AFL_GEMM_PACK_BYTES

cdef extern from "afl_rowpass.h" nogil:
    int64_t afl_pad(int64_t n)
    int64_t afl_ce_work_len(int C, int64_t nA)
    void afl_ce_rows(int64_t r0, int64_t r1, int C, int64_t nA, int64_t B,
                     float *Z, int64_t ldz, const int32_t *y, const uint8_t *member,
                     const int64_t *active, const double *scale, double *loss, double *work)

cdef extern from "afl_losses.h" nogil:
    enum: AFL_LOSS_CE
    ctypedef double (*afl_user_weight_fn)(double, const double *, double *)
    int afl_softmax(int C, const float *z, double *p)
    double afl_row_loss(int code, const double *params, afl_user_weight_fn user,
                        int C, float *z, int y, double *p, double scale, float *g)

cdef enum:
    ST_INIT = 0      # needs its first evaluation at the starting point
    ST_SEARCH = 1    # a trial point x + alpha * p is being evaluated
    ST_DONE = 2

# status codes reported per model
cdef enum:
    _CONVERGED = 0
    _MAX_ITER = 1
    _LINE_SEARCH = 2   # no decrease found: the objective is flat to float32 precision
    _NOT_FINITE = 3

STATUS_CONVERGED = _CONVERGED
STATUS_MAX_ITER = _MAX_ITER
STATUS_LINE_SEARCH = _LINE_SEARCH
STATUS_NOT_FINITE = _NOT_FINITE


# pick the instruction set before any thread can ask for it
afl_gemm_isa()


def openmp_enabled():
    """True when the extension was compiled with OpenMP."""
    return bool(AFL_HAVE_OPENMP)


def gemm_isa():
    """Instruction set the GEMM dispatches to on this machine."""
    return afl_gemm_isa().decode()


def gemm_pack_bytes():
    """Cap of the GEMM's shared buffer of packed B (one K-block more when a block is larger)."""
    return int(AFL_GEMM_PACK_BYTES)


def gemm_pack_buffer_bytes(bint trans_a, int64_t N, int64_t K, int64_t max_block):
    """Bytes of the packing buffer the GEMM allocates for a product with N output columns,
    inner size K and K-blocks of at most ``max_block`` (0 where it packs nothing)."""
    return int(afl_gemm_pack_bytes(trans_a, N, K, max_block))


def sgemm(bint trans_a,
          const float[:, ::1] A,        # IN  (M, K), or (K, M) when trans_a
          const float[:, ::1] B,        # IN  (K, N)
          float[:, ::1] C,              # OUT (M, N)
          const int64_t[::1] kb,        # IN  K-block boundaries
          bint accumulate, int n_threads):
    """C (+)= op(A) @ B with the deterministic GEMM (exposed for tests and benchmarks)."""
    cdef int64_t M = A.shape[1] if trans_a else A.shape[0]
    cdef int64_t K = A.shape[0] if trans_a else A.shape[1]
    cdef int64_t N = B.shape[1]
    cdef int rc
    if B.shape[0] != K or C.shape[0] != M or C.shape[1] != N or kb[kb.shape[0] - 1] != K:
        raise ValueError("sgemm: shapes do not match")
    with nogil:
        rc = afl_sgemm(trans_a, M, N, K, &A[0, 0], A.shape[1], &B[0, 0], N, &C[0, 0], NULL, N,
                       accumulate, &kb[0], kb.shape[0] - 1, n_threads)
    if rc != 0:
        raise MemoryError("sgemm: could not allocate scratch memory")


cdef inline double _dot(const double *a, const double *b, int64_t n) noexcept nogil:
    cdef double s = 0.0
    cdef int64_t k
    for k in range(n):
        s += a[k] * b[k]
    return s


cdef inline double _max_abs(const double *a, int64_t n) noexcept nogil:
    cdef double m = 0.0
    cdef int64_t k
    for k in range(n):
        if fabs(a[k]) > m:
            m = fabs(a[k])
    return m


cdef void _two_loop(int64_t P, int hist, int mem_len, int mem_head,
                    const double *S, const double *Y, const double *rho,
                    const double *g, double *p, double *alph) noexcept nogil:
    """p = -H g by the L-BFGS two-loop recursion over the stored pairs (newest first)."""
    cdef int t, idx
    cdef int64_t k
    cdef double a, b, gamma, yy
    for k in range(P):
        p[k] = g[k]
    for t in range(mem_len):
        idx = (mem_head - 1 - t + hist) % hist
        a = rho[idx] * _dot(S + idx * P, p, P)
        alph[idx] = a
        for k in range(P):
            p[k] -= a * Y[idx * P + k]
    if mem_len > 0:
        idx = (mem_head - 1 + hist) % hist
        yy = _dot(Y + idx * P, Y + idx * P, P)
        gamma = 1.0 / (rho[idx] * yy)
        for k in range(P):
            p[k] *= gamma
    for t in range(mem_len - 1, -1, -1):
        idx = (mem_head - 1 - t + hist) % hist
        b = rho[idx] * _dot(Y + idx * P, p, P)
        for k in range(P):
            p[k] += S[idx * P + k] * (alph[idx] - b)
    for k in range(P):
        p[k] = -p[k]


cdef void _solver_step(int64_t P, int hist, int *state, int *status, int *n_iter,
                       double *x, double *g, double *f, const double *xt, const double *gt,
                       double ft, double *p, double *S, double *Y, double *rho,
                       int *mem_len, int *mem_head, double *alph,
                       double *alpha, double *gp, int *n_ls,
                       double gtol, double ftol, int max_iter, int max_ls) noexcept nogil:
    """Advance one model's L-BFGS state machine after evaluating f, g at its trial point."""
    cdef int64_t k
    cdef double sy, yy, gg, f_old, a_new, denom
    cdef double *s
    cdef double *yv
    if state[0] == ST_INIT:
        if not isfinite(ft):
            state[0] = ST_DONE
            status[0] = _NOT_FINITE
            return
        f[0] = ft
        memcpy(x, xt, P * sizeof(double))
        memcpy(g, gt, P * sizeof(double))
        if _max_abs(g, P) <= gtol:
            state[0] = ST_DONE
            status[0] = _CONVERGED
            return
        if max_iter <= 0:
            state[0] = ST_DONE
            status[0] = _MAX_ITER
            return
        gg = _dot(g, g, P)
        for k in range(P):
            p[k] = -g[k]
        gp[0] = -gg
        # first step of length at most 1 in parameter space, as L-BFGS-B does
        alpha[0] = 1.0 / sqrt(gg) if gg > 1.0 else 1.0
        n_ls[0] = 0
        state[0] = ST_SEARCH
        return

    # ST_SEARCH: Armijo sufficient decrease
    if isfinite(ft) and ft <= f[0] + 1e-4 * alpha[0] * gp[0]:
        s = S + mem_head[0] * P
        yv = Y + mem_head[0] * P
        for k in range(P):
            s[k] = xt[k] - x[k]
            yv[k] = gt[k] - g[k]
        sy = _dot(s, yv, P)
        yy = _dot(yv, yv, P)
        if sy > 2.2e-16 * yy and sy > 0.0:
            # keep the pair only with positive curvature (always true for convex losses)
            rho[mem_head[0]] = 1.0 / sy
            mem_head[0] = (mem_head[0] + 1) % hist
            if mem_len[0] < hist:
                mem_len[0] += 1
        f_old = f[0]
        f[0] = ft
        memcpy(x, xt, P * sizeof(double))
        memcpy(g, gt, P * sizeof(double))
        n_iter[0] += 1
        if _max_abs(g, P) <= gtol:
            state[0] = ST_DONE
            status[0] = _CONVERGED
            return
        denom = fabs(f_old)
        if fabs(ft) > denom:
            denom = fabs(ft)
        if denom < 1.0:
            denom = 1.0
        if f_old - ft <= ftol * denom:
            state[0] = ST_DONE
            status[0] = _CONVERGED
            return
        if n_iter[0] >= max_iter:
            state[0] = ST_DONE
            status[0] = _MAX_ITER
            return
        _two_loop(P, hist, mem_len[0], mem_head[0], S, Y, rho, g, p, alph)
        gp[0] = _dot(g, p, P)
        if not (gp[0] < 0.0):
            # not a descent direction (possible for non-convex losses): restart from -g
            mem_len[0] = 0
            for k in range(P):
                p[k] = -g[k]
            gp[0] = -_dot(g, g, P)
        alpha[0] = 1.0
        n_ls[0] = 0
        return

    n_ls[0] += 1
    if n_ls[0] > max_ls:
        state[0] = ST_DONE
        status[0] = _LINE_SEARCH
        return
    if isfinite(ft):
        # minimiser of the quadratic through f(0), f'(0) and f(alpha), kept in [0.1, 0.5] alpha
        denom = 2.0 * (ft - f[0] - gp[0] * alpha[0])
        a_new = -gp[0] * alpha[0] * alpha[0] / denom if denom > 0.0 else 0.5 * alpha[0]
        if a_new < 0.1 * alpha[0]:
            a_new = 0.1 * alpha[0]
        if a_new > 0.5 * alpha[0]:
            a_new = 0.5 * alpha[0]
    else:
        a_new = 0.1 * alpha[0]
    alpha[0] = a_new


def train_block(const float[:, ::1] X,          # IN  (n, D): rows with a trailing column of ones
                const int32_t[::1] y,            # IN  (n,) label codes in [0, n_classes)
                const uint8_t[:, ::1] member,    # IN  (n, B) 1 where row i trains model j
                const int64_t[::1] row_blocks,   # IN  (nrb + 1,) row-block boundaries
                const int64_t[::1] col_blocks,   # IN  (ncb + 1,) blocks over the D columns
                double[:, ::1] coef,             # IN/OUT (B, D * C) start (warm start) and solution
                const double[::1] l2,            # IN  (B,) L2 weight of each model
                const double[::1] inv_n,         # IN  (B,) 1 / (rows of model j)
                int n_classes,
                int loss_code,
                const double[::1] loss_params,   # IN  parameters of the loss
                uintptr_t user_fn,               # IN  address of a user weight function or 0
                double gtol, double ftol, int max_iter, int history, int max_ls,
                int32_t[::1] n_iter,             # OUT (B,) accepted iterations
                int32_t[::1] status,             # OUT (B,) STATUS_* code
                double[::1] fval,                # OUT (B,) final objective
                int n_threads):
    """Train B multinomial logistic regressions on subsets of the same rows (see module doc)."""
    cdef int64_t n = X.shape[0], D = X.shape[1], B = member.shape[1]
    cdef int C = n_classes
    cdef int64_t P = D * C
    cdef int64_t nrb = row_blocks.shape[0] - 1, ncb = col_blocks.shape[0] - 1
    cdef int hist = history if history > 0 else 1
    cdef int rc = 0
    if (y.shape[0] != n or member.shape[0] != n or coef.shape[0] != B or coef.shape[1] != P
            or l2.shape[0] != B or inv_n.shape[0] != B or n_iter.shape[0] != B
            or status.shape[0] != B or fval.shape[0] != B or row_blocks[nrb] != n
            or col_blocks[ncb] != D):
        raise ValueError("train_block: inconsistent shapes")
    if n == 0 or B == 0:
        return
    cdef const double *params = &loss_params[0] if loss_params.shape[0] > 0 else NULL
    with nogil:
        rc = _train(&X[0, 0], &y[0], &member[0, 0], &row_blocks[0], nrb, &col_blocks[0], ncb,
                    &coef[0, 0], &l2[0], &inv_n[0], n, D, B, C, loss_code, params,
                    <afl_user_weight_fn> user_fn, gtol, ftol, max_iter, hist, max_ls,
                    &n_iter[0], &status[0], &fval[0], n_threads)
    if rc != 0:
        raise MemoryError("train_block: could not allocate scratch memory")


cdef int _train(const float *X, const int32_t *y, const uint8_t *member,
                const int64_t *row_blocks, int64_t nrb, const int64_t *col_blocks, int64_t ncb,
                double *coef, const double *l2, const double *inv_n,
                int64_t n, int64_t D, int64_t B, int C, int loss_code, const double *params,
                afl_user_weight_fn user, double gtol, double ftol, int max_iter, int hist,
                int max_ls, int32_t *n_iter_out, int32_t *status_out, double *fval_out,
                int n_threads) noexcept nogil:
    cdef int64_t P = D * C, BC = B * C
    cdef int64_t i, j, a, k, r, c, rb, nA, ldz
    cdef int rc = 0
    cdef double loss_sum, reg, xv
    cdef double *pbuf
    cdef float *zrow
    cdef float *zb

    # scratch; freed at the end whatever happens
    cdef float *Wt = <float *> malloc(D * BC * sizeof(float))
    cdef float *Z = <float *> malloc(n * BC * sizeof(float))
    cdef double *Gw = <double *> malloc(D * BC * sizeof(double))
    cdef double *lossp = <double *> malloc(nrb * B * sizeof(double))
    cdef double *xt = <double *> malloc(B * P * sizeof(double))
    cdef double *gt = <double *> malloc(B * P * sizeof(double))
    cdef double *g = <double *> malloc(B * P * sizeof(double))
    cdef double *p = <double *> malloc(B * P * sizeof(double))
    cdef double *S = <double *> malloc(B * hist * P * sizeof(double))
    cdef double *Y = <double *> malloc(B * hist * P * sizeof(double))
    cdef double *rho = <double *> malloc(B * hist * sizeof(double))
    cdef double *alph = <double *> malloc(B * hist * sizeof(double))
    cdef double *f = <double *> malloc(B * sizeof(double))
    cdef double *ft = <double *> malloc(B * sizeof(double))
    cdef double *alpha = <double *> malloc(B * sizeof(double))
    cdef double *gp = <double *> malloc(B * sizeof(double))
    cdef int *state = <int *> malloc(B * sizeof(int))
    cdef int *status = <int *> malloc(B * sizeof(int))
    cdef int *iters = <int *> malloc(B * sizeof(int))
    cdef int *n_ls = <int *> malloc(B * sizeof(int))
    cdef int *mem_len = <int *> malloc(B * sizeof(int))
    cdef int *mem_head = <int *> malloc(B * sizeof(int))
    cdef int64_t *active = <int64_t *> malloc(B * sizeof(int64_t))
    # gradient scale (1 / rows) of each active model, padded for the vectorised CE row pass
    cdef double *sca = <double *> calloc(afl_pad(B), sizeof(double))
    # per-thread scratch of the row pass, allocated once and checked like the rest
    cdef int n_thr = n_threads if n_threads > 0 else 1
    cdef int64_t row_len = afl_ce_work_len(C, B)
    cdef double *rowbuf = <double *> malloc(n_thr * row_len * sizeof(double))
    cdef float *zbuf = <float *> malloc(n_thr * C * sizeof(float))

    if (Wt == NULL or Z == NULL or Gw == NULL or lossp == NULL or xt == NULL or gt == NULL
            or g == NULL or p == NULL or S == NULL or Y == NULL or rho == NULL or alph == NULL
            or f == NULL or ft == NULL or alpha == NULL or gp == NULL or state == NULL
            or status == NULL or iters == NULL or n_ls == NULL or mem_len == NULL
            or mem_head == NULL or active == NULL or sca == NULL or rowbuf == NULL
            or zbuf == NULL):
        rc = -1
    else:
        for j in range(B):
            state[j] = ST_INIT
            status[j] = _MAX_ITER
            iters[j] = 0
            n_ls[j] = 0
            mem_len[j] = 0
            mem_head[j] = 0
            alpha[j] = 0.0
            memset(p + j * P, 0, P * sizeof(double))
        while True:
            nA = 0
            for j in range(B):
                if state[j] != ST_DONE:
                    active[nA] = j
                    nA += 1
            if nA == 0:
                break
            ldz = nA * C
            # trial points of the active models, in double and as float32 GEMM operands
            for a in prange(nA, num_threads=n_threads, schedule='static'):
                j = active[a]
                for k in range(P):
                    xv = coef[j * P + k]
                    if state[j] == ST_SEARCH:
                        xv = xv + alpha[j] * p[j * P + k]
                    xt[j * P + k] = xv
                for r in range(D):
                    for c in range(C):
                        Wt[r * ldz + c * nA + a] = <float> xt[j * P + r * C + c]
                sca[a] = inv_n[j]
            # logits of every row for every active model: one GEMM
            if afl_sgemm(0, n, ldz, D, X, D, Wt, ldz, Z, NULL, ldz, 0, col_blocks, ncb, n_threads) != 0:
                rc = -1
                break
            # per-row loss and logit gradient (in place), row blocks in parallel
            with parallel(num_threads=n_thr):
                pbuf = rowbuf + threadid() * row_len
                zb = zbuf + threadid() * C
                for rb in prange(nrb, schedule='dynamic'):
                    if loss_code == AFL_LOSS_CE:
                        # cross-entropy: vectorised over the models of the round
                        afl_ce_rows(row_blocks[rb], row_blocks[rb + 1], C, nA, B, Z, ldz, y,
                                    member, active, sca, lossp + rb * B, pbuf)
                        continue
                    for a in range(nA):
                        lossp[rb * B + a] = 0.0
                    for i in range(row_blocks[rb], row_blocks[rb + 1]):
                        for a in range(nA):
                            j = active[a]
                            zrow = Z + i * ldz + a
                            if member[i * B + j]:
                                for c in range(C):
                                    zb[c] = zrow[c * nA]
                                lossp[rb * B + a] += afl_row_loss(loss_code, params, user, C, zb,
                                                                  y[i], pbuf, inv_n[j], zb)
                                for c in range(C):
                                    zrow[c * nA] = zb[c]
                            else:
                                for c in range(C):
                                    zrow[c * nA] = 0.0
            # gradient of every active model: one GEMM, summed over the same row blocks
            if afl_sgemm(1, D, ldz, n, X, D, Z, ldz, NULL, Gw, ldz, 0, row_blocks, nrb, n_threads) != 0:
                rc = -1
                break
            for a in prange(nA, num_threads=n_threads, schedule='static'):
                j = active[a]
                loss_sum = 0.0
                for rb in range(nrb):
                    loss_sum = loss_sum + lossp[rb * B + a]
                reg = 0.0
                for k in range((D - 1) * C):
                    reg = reg + xt[j * P + k] * xt[j * P + k]
                ft[j] = loss_sum * inv_n[j] + 0.5 * l2[j] * reg
                for r in range(D):
                    for c in range(C):
                        gt[j * P + r * C + c] = Gw[r * ldz + c * nA + a]
                        if r < D - 1:
                            gt[j * P + r * C + c] = gt[j * P + r * C + c] + l2[j] * xt[j * P + r * C + c]
                _solver_step(P, hist, &state[j], &status[j], &iters[j],
                             coef + j * P, g + j * P, &f[j], xt + j * P, gt + j * P, ft[j],
                             p + j * P, S + j * hist * P, Y + j * hist * P, rho + j * hist,
                             &mem_len[j], &mem_head[j], alph + j * hist,
                             &alpha[j], &gp[j], &n_ls[j], gtol, ftol, max_iter, max_ls)
        if rc == 0:
            for j in range(B):
                n_iter_out[j] = iters[j]
                status_out[j] = status[j]
                fval_out[j] = f[j]

    free(Wt); free(Z); free(Gw); free(lossp); free(xt); free(gt); free(g); free(p)
    free(S); free(Y); free(rho); free(alph); free(f); free(ft); free(alpha); free(gp)
    free(state); free(status); free(iters); free(n_ls); free(mem_len); free(mem_head)
    free(active); free(sca); free(rowbuf); free(zbuf)
    return rc


def predict_accumulate(const float[:, ::1] X,        # IN  (n, D) rows with a trailing ones column
                       const int32_t[::1] y,          # IN  (n,) label codes; -1: no label
                       const uint8_t[:, ::1] heldout, # IN  (n, B) 1 where model j predicts row i
                       const float[:, ::1] W,         # IN  (D, B * C) coefficients of the B models
                       const int64_t[::1] col_blocks, # IN  blocks over the D columns
                       int n_classes,
                       int32_t[::1] seen,             # IN/OUT (n,) held-out predictions
                       int32_t[::1] correct,          # IN/OUT (n,) correct held-out predictions
                       double[::1] prob_label,        # IN/OUT (n,) summed probability of the label
                       double[:, ::1] proba_sum,      # IN/OUT (n, C) summed probabilities, or (0, C)
                       int n_threads):
    """Predict rows with every model that holds them out and accumulate the counts."""
    cdef int64_t n = X.shape[0], D = X.shape[1], B = heldout.shape[1]
    cdef int C = n_classes
    cdef int64_t BC = B * C
    cdef int64_t i, j, c
    cdef int amax, rc = 0
    cdef bint want_proba = proba_sum.shape[0] > 0
    cdef int n_thr = n_threads if n_threads > 0 else 1
    cdef double *pbuf
    cdef double *pbufs = NULL
    cdef float *Z
    if (y.shape[0] != n or heldout.shape[0] != n or W.shape[0] != D or W.shape[1] != BC
            or seen.shape[0] != n or correct.shape[0] != n or prob_label.shape[0] != n
            or (want_proba and (proba_sum.shape[0] != n or proba_sum.shape[1] != C))
            or col_blocks[col_blocks.shape[0] - 1] != D):
        raise ValueError("predict_accumulate: inconsistent shapes")
    if n == 0 or B == 0:
        return
    with nogil:
        Z = <float *> malloc(n * BC * sizeof(float))
        pbufs = <double *> malloc(n_thr * C * sizeof(double))  # per-thread softmax scratch
        if Z == NULL or pbufs == NULL:
            rc = -1
        else:
            rc = afl_sgemm(0, n, BC, D, &X[0, 0], D, &W[0, 0], BC, Z, NULL, BC, 0,
                           &col_blocks[0], col_blocks.shape[0] - 1, n_threads)
        if rc == 0:
            with parallel(num_threads=n_thr):
                pbuf = pbufs + threadid() * C
                for i in prange(n, schedule='static'):
                    for j in range(B):
                        if heldout[i, j]:
                            amax = afl_softmax(C, Z + i * BC + j * C, pbuf)
                            seen[i] += 1
                            if y[i] >= 0:
                                correct[i] += (amax == y[i])
                                prob_label[i] += pbuf[y[i]]
                            if want_proba:
                                for c in range(C):
                                    proba_sum[i, c] += pbuf[c]
        free(Z)
        free(pbufs)
    if rc != 0:
        raise MemoryError("predict_accumulate: could not allocate scratch memory")
