# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled core of aflite_fast: batched multinomial logistic regression.

Design
A. One call trains a *block* of B models, each on its own subset of the same rows
   (``member[i, j] == 1``).  Every solver round evaluates all unfinished models in one
   member-row pass (``csrc/afl_member.h``): each model's logits, loss and gradient over its
   own rows only, with each row block of X in cache while every model works through it, so
   the work is sum_j n_j x D x C whatever share of the rows each model trains on.
B. Rows carry a trailing column of ones, so the intercept is the last row of each model's
   (d + 1) x C coefficient matrix; the L2 penalty skips that row (unpenalized intercept).
C. Objective of model j: mean loss over its n_j rows + l2_j / 2 * ||W_j||^2.  With
   l2_j = 1 / (C * n_j) the optimum is scikit-learn's LogisticRegression(C=C).
D. Solver: L-BFGS with a backtracking (Armijo) line search, one state machine per model, so
   each model converges on its own; models that have converged leave the pass.
E. Preconditioning: the initial inverse Hessian H0 of L-BFGS may be shared by the block's
   models (kernel.preconditioner: the inverse of the rows' second-moment matrix times the
   softmax curvature, plus the L2 weight), scaled by s'y / y'Hy as usual, in one of three
   forms (``_precond_apply``): dense (D x D), low rank plus diagonal
   (diag(h) + F' G F with F r x D, G r x r: e.g. the exact inverse by the Woodbury identity),
   or diagonal.  It changes the path, not the
   optimum; on embeddings whose feature variances span orders of magnitude it cuts the
   iterations several-fold.  The products with it are one to three GEMMs per round for all
   models that need a new direction.
F. Determinism: a model's loss and gradient are sums over its rows in an order fixed by
   positions in the active set (see afl_member.h); the preconditioner product is a GEMM
   with fixed K-blocks.  So no result depends on the thread count, on B, or on which other
   models share the block.
G. Prediction evaluates all models of a block on a chunk of rows with one GEMM and
   accumulates, per row, held-out predictions seen, correct, and the summed probability of
   the given label (and optionally the summed probability vectors).
H. Multiple choice (``group`` = K > 1, one output per row): a model is a linear scorer of
   candidates, an item K consecutive rows whose loss is the softmax over their K scores; the
   same member pass and prediction serve it (afl_member.h, E), the last ``n_free`` rows of
   each model unpenalised (the intercept of classification; the position biases).

Every array argument is marked IN or OUT; outputs are allocated by the caller (core/solver.py, core/prediction.py, core/layout.py).
"""
from libc.stdlib cimport malloc, free
from posix.stdlib cimport posix_memalign
from libc.string cimport memset, memcpy
from libc.math cimport fabs, sqrt, isfinite
from libc.stdint cimport int64_t, int32_t, uint8_t, uintptr_t
from cython.parallel cimport prange

import numpy as np

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

cdef extern from "afl_losses.h" nogil:
    ctypedef double (*afl_user_weight_fn)(double, const double *, double *)

cdef extern from "afl_dual.h" nogil:
    ctypedef struct afl_dual_problem:
        int64_t nk, ldk
        const float *K
        const int64_t *krow
        int64_t n, D, ldx
        const float *X
        const int64_t *xrow
        const int32_t *y
        int C, loss_code
        const double *params
        afl_user_weight_fn user
        double gtol, ftol, start_rtol
        int max_iter, hist, max_ls
        int r
        const double *V
        const double *Vt
        const double *XV
        const double *sig
        double sig_rest, s
        const int64_t *watch
        int n_watch
    int AFL_DUAL_MAX_OUT
    int AFL_DUAL_WATCH
    int afl_dual_train(const afl_dual_problem *pb, int64_t B, const int64_t *mptr, const int32_t *mrows,
                       const double *l2, const double *inv_n, double *coef, double *alpha, int32_t *n_iter,
                       int32_t *status, double *fval, int32_t *n_eval, float *logits, double *mean_rows,
                       int n_threads)
    int64_t afl_dual_scratch_bytes(int64_t t_max, int64_t D, int C, int r, int hist, int64_t nk)

cdef extern from "afl_member.h" nogil:
    ctypedef struct afl_member_set:
        int64_t n, D, ldx, Dp
        int C
        int ref
        int G
        const float *X
        const int32_t *y
        int64_t B, nrb
        const int64_t *row_blocks
        const int64_t *mptr
        const int32_t *mrows
        int64_t nsb
        const int64_t *sb
        int loss_code
        const double *params
        afl_user_weight_fn user
    int64_t afl_member_width(int64_t D)
    void afl_member_index(int64_t n, int64_t B, const uint8_t *member, int64_t nrb,
                          const int64_t *row_blocks, int64_t *mptr, int32_t *mrows, int G)
    int afl_member_eval(const afl_member_set *s, int64_t nA, const int64_t *active,
                        const float *W, const double *scale, double *loss, double *grad,
                        int n_threads)
    int afl_member_eval_tree(const afl_member_set *s, int64_t nA, const int64_t *active,
                             const float *W, const double *scale, int64_t ng, const int64_t *gsb,
                             const int64_t *gleaf, int64_t leaf_lo, int64_t leaf_hi, int64_t max_nodes,
                             double *nodes, int64_t *level, int64_t *index, int64_t *n_nodes,
                             int n_threads)
    void afl_member_init()
    void afl_member_fuse_items(int on)
    unsigned AFL_PREDICT_TILE_BYTES
    int AFL_PREDICT_MIN_TILE
    int afl_predict(int64_t n, int64_t D, const float *X, int64_t ldx, int64_t B, int C,
                    const float *W, const int64_t *col_blocks, int64_t ncb, const int32_t *y,
                    const uint8_t *heldout, int32_t *seen, int32_t *correct, double *prob_label,
                    double *proba_sum, int64_t tile, int n_threads, int G, int ref)
    int afl_predict_logits(int64_t n, int64_t B, int C, const float *Z, const int32_t *y, const uint8_t *heldout,
                           int32_t *seen, int32_t *correct, double *prob_label, double *proba_sum, int n_threads,
                           int ref)

cdef enum:
    ST_INIT = 0      # needs its first evaluation at the starting point
    ST_SEARCH = 1    # a trial point x + alpha * p is being evaluated
    ST_DONE = 2
    ST_DIRECTION = 3 # accepted a point; waits for its new search direction

# status codes reported per model
cdef enum:
    _CONVERGED = 0
    _MAX_ITER = 1
    _LINE_SEARCH = 2   # no decrease found: the objective is flat to float32 precision
    _NOT_FINITE = 3

STATUS_CONVERGED = _CONVERGED

# A model started from zero stops on its gradient only once the largest entry is at most
# min(gtol, START_RTOL * its largest entry at the start): on rows whose gradient at zero is
# already below gtol (twins of opposite labels cancel each other's terms) the absolute test
# alone would report the start as converged, untrained.  Warm starts keep the absolute test.
cdef double _START_RTOL = 1e-2
START_RTOL = _START_RTOL
STATUS_MAX_ITER = _MAX_ITER
STATUS_LINE_SEARCH = _LINE_SEARCH
STATUS_NOT_FINITE = _NOT_FINITE


# pick the instruction set before any thread can ask for it
afl_gemm_isa()
afl_member_init()


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


ctypedef fused gemm_out_t:
    float
    double


def sgemm(bint trans_a,
          const float[:, ::1] A,        # IN  (M, K), or (K, M) when trans_a
          const float[:, ::1] B,        # IN  (K, N)
          gemm_out_t[:, ::1] C,         # OUT (M, N), float32 or float64
          const int64_t[::1] kb,        # IN  K-block boundaries
          bint accumulate, int n_threads):
    """C (+)= op(A) @ B with the deterministic GEMM (exposed for tests, benchmarks and the
    preconditioner's Gram matrix).  With a float64 C each K-block's float32 sum is added in
    double."""
    cdef int64_t M = A.shape[1] if trans_a else A.shape[0]
    cdef int64_t K = A.shape[0] if trans_a else A.shape[1]
    cdef int64_t N = B.shape[1]
    cdef int rc
    cdef float *Cf = NULL
    cdef double *Cd = NULL
    if B.shape[0] != K or C.shape[0] != M or C.shape[1] != N or kb[kb.shape[0] - 1] != K:
        raise ValueError("sgemm: shapes do not match")
    if gemm_out_t is float:
        Cf = &C[0, 0]
    else:
        Cd = &C[0, 0]
    with nogil:
        rc = afl_sgemm(trans_a, M, N, K, &A[0, 0], A.shape[1], &B[0, 0], N, Cf, Cd, N,
                       accumulate, &kb[0], kb.shape[0] - 1, n_threads)
    if rc != 0:
        raise MemoryError("sgemm: could not allocate scratch memory")


#: Columns of a panel of the Gram matrix (:func:`gram`): narrow enough that the panels'
#: squares on the diagonal, computed twice, add little (about GRAM_PANEL / (2 D) of the work),
#: wide enough (a multiple of the GEMM's 32-column panels) to keep the GEMM at its rate.
GRAM_PANEL = 256


def gram(const float[:, ::1] A,         # IN  (K, M) rows
         double[:, ::1] G,              # IN/OUT (M, M)
         const int64_t[::1] kb,         # IN  K-block boundaries over the rows
         bint accumulate, int n_threads):
    """G (+)= A^T A, float32 products added in double per K-block, as :func:`sgemm` with
    ``trans_a`` computes it, at about half its work: only the panels of columns on and below
    the diagonal are computed, and the upper triangle is copied from the lower one.  An
    element is the same FMA chain whichever call computes it, and x_ki x_kj = x_kj x_ki, so
    the result is bitwise that of ``sgemm(True, A, A, G, ...)``."""
    cdef int64_t K = A.shape[0], M = A.shape[1]
    cdef int64_t j0, w, i, j, i0, j1, bi, bj
    cdef int64_t panel = GRAM_PANEL
    cdef int rc = 0
    if G.shape[0] != M or G.shape[1] != M or kb[kb.shape[0] - 1] != K:
        raise ValueError("gram: shapes do not match")
    if M == 0:
        return
    with nogil:
        j0 = 0
        while j0 < M and rc == 0:
            w = panel if M - j0 > panel else M - j0
            # rows j0.. of the panel's columns j0 .. j0 + w: G[j0:, j0:j0 + w] (+)= A[:, j0:]^T A[:, j0:j0 + w]
            rc = afl_sgemm(1, M - j0, w, K, &A[0, j0], M, &A[0, j0], M, NULL, &G[j0, j0], M,
                           accumulate, &kb[0], kb.shape[0] - 1, n_threads)
            j0 += w
        if rc == 0:
            # the upper triangle from the lower one, in square tiles that stay in cache
            bi = 0
            while bi < M:
                bj = 0
                while bj <= bi:
                    for i in range(bi, min(bi + 64, M)):
                        for j in range(bj, min(bj + 64, i)):
                            G[j, i] = G[i, j]
                    bj += 64
                bi += 64
    if rc != 0:
        raise MemoryError("gram: could not allocate scratch memory")


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


cdef void _first_loop(int64_t P, int hist, int mem_len, int mem_head,
                      const double *S, const double *Y, const double *rho,
                      const double *g, double *q, double *alph) noexcept nogil:
    """q = g minus the stored pairs' corrections: the first loop of the L-BFGS two-loop
    recursion (newest pair first); alph receives the coefficients."""
    cdef int t, idx
    cdef int64_t k
    cdef double a
    for k in range(P):
        q[k] = g[k]
    for t in range(mem_len):
        idx = (mem_head - 1 - t + hist) % hist
        a = rho[idx] * _dot(S + idx * P, q, P)
        alph[idx] = a
        for k in range(P):
            q[k] -= a * Y[idx * P + k]


cdef void _second_loop(int64_t P, int hist, int mem_len, int mem_head,
                       const double *S, const double *Y, const double *rho,
                       const double *alph, double *r) noexcept nogil:
    """r = H q from r = H0 q: the second loop of the two-loop recursion (oldest pair first)."""
    cdef int t, idx
    cdef int64_t k
    cdef double b
    for t in range(mem_len - 1, -1, -1):
        idx = (mem_head - 1 - t + hist) % hist
        b = rho[idx] * _dot(Y + idx * P, r, P)
        for k in range(P):
            r[k] += S[idx * P + k] * (alph[idx] - b)


cdef void _solver_update(int64_t P, int hist, int *state, int *status, int *n_iter,
                         double *x, double *g, double *f, const double *xt, const double *gt,
                         double ft, double *p, double *S, double *Y, double *rho,
                         int *mem_len, int *mem_head, double *alph,
                         double *alpha, double *gp, int *n_ls,
                         double *gtol_j, double gtol, double ftol, int max_iter, int max_ls) noexcept nogil:
    """Advance one model's L-BFGS state machine after evaluating f, g at its trial point.

    A first evaluation or an accepted step leaves the model in ST_DIRECTION with q (the first
    loop of the two-loop recursion) in p: its new direction needs H0 q, which the caller
    computes for all such models at once (_solver_direction finishes it).  A rejected step
    shortens alpha; a stopping rule ends the model (ST_DONE, with its status).  gtol_j is the
    model's own gradient tolerance: negative for a cold start until its first evaluation sets
    it to min(gtol, START_RTOL * the largest gradient entry there), gtol for a warm start."""
    cdef int64_t k
    cdef double sy, yy, f_old, a_new, denom, g0
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
        g0 = _max_abs(g, P)
        if gtol_j[0] < 0.0:
            gtol_j[0] = gtol if gtol <= _START_RTOL * g0 else _START_RTOL * g0
        if g0 <= gtol_j[0]:
            state[0] = ST_DONE
            status[0] = _CONVERGED
            return
        if max_iter <= 0:
            state[0] = ST_DONE
            status[0] = _MAX_ITER
            return
        memcpy(p, g, P * sizeof(double))
        state[0] = ST_DIRECTION
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
        if _max_abs(g, P) <= gtol_j[0]:
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
        _first_loop(P, hist, mem_len[0], mem_head[0], S, Y, rho, g, p, alph)
        state[0] = ST_DIRECTION
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


cdef void _solver_direction(int64_t P, int hist, int *state, int n_iter, const double *g,
                            double *p, const double *S, const double *Y, const double *rho,
                            int *mem_len, int mem_head, const double *alph,
                            const double *Hq, double yHy, double *alpha, double *gp,
                            int *n_ls) noexcept nogil:
    """Finish the search direction of a model in ST_DIRECTION (q in p) and start its line
    search.  Hq = H0 q from the preconditioner product (NULL: H0 is the identity, q stays in
    p); yHy = y'H0y of the newest pair.  H0 is scaled by s'y / y'H0y (Nocedal & Wright,
    eq. 7.20) once a pair is stored."""
    cdef int64_t k
    cdef double gamma, gg
    cdef int newest = (mem_head - 1 + hist) % hist
    gamma = 1.0
    if mem_len[0] > 0 and yHy > 0.0:
        gamma = 1.0 / (rho[newest] * yHy)
    if Hq != NULL:
        for k in range(P):
            p[k] = gamma * Hq[k]
    else:
        for k in range(P):
            p[k] = gamma * p[k]
    _second_loop(P, hist, mem_len[0], mem_head, S, Y, rho, alph, p)
    for k in range(P):
        p[k] = -p[k]
    gp[0] = _dot(g, p, P)
    alpha[0] = 1.0
    if not (gp[0] < 0.0):
        # not a descent direction (possible for non-convex losses): restart from -g
        mem_len[0] = 0
        for k in range(P):
            p[k] = -g[k]
        gp[0] = -_dot(g, g, P)
        if Hq == NULL and n_iter == 0:
            gg = -gp[0]
            alpha[0] = 1.0 / sqrt(gg) if gg > 1.0 else 1.0
    elif Hq == NULL and n_iter == 0:
        # unpreconditioned first step: of length at most 1 in parameter space, as L-BFGS-B
        # does (with a preconditioner the unit step is already a Newton-like step)
        gg = _dot(g, g, P)
        alpha[0] = 1.0 / sqrt(gg) if gg > 1.0 else 1.0
    n_ls[0] = 0
    state[0] = ST_SEARCH


# forms of the preconditioner (kernel.Preconditioner.form)
cdef enum:
    PRE_NONE = 0
    PRE_DENSE = 1       # H0 = dense (D x D)
    PRE_LOWRANK = 2     # H0 = diag(h) + F' G F, F (r x D), G (r x r)
    PRE_DIAGONAL = 3    # H0 = diag(h)

ctypedef struct _precond_t:
    int kind
    const float *dense
    const float *diag
    const float *factor
    const float *core
    int64_t r
    const int64_t *rb     # K-blocks over the r rows of the factor
    int64_t nrb


cdef int _precond_apply(const _precond_t *pc, int64_t D, int64_t ncols, const float *V, double *O,
                        const int64_t *col_blocks, int64_t ncb, int n_threads) noexcept nogil:
    """O = H0 V for V (D x ncols, row-major float32), O double; GEMMs with fixed K-blocks and
    an elementwise diagonal, so O does not depend on the thread count or on ncols.  Returns
    -1 when scratch could not be allocated."""
    cdef int64_t r = pc.r, i, c
    cdef float *T1
    cdef float *T2
    cdef int rc = 0
    if pc.kind == PRE_DENSE:
        return afl_sgemm(0, D, ncols, D, pc.dense, D, V, ncols, NULL, O, ncols, 0, col_blocks, ncb, n_threads)
    if pc.kind == PRE_LOWRANK and r > 0:
        T1 = <float *> malloc(r * ncols * sizeof(float))
        T2 = <float *> malloc(r * ncols * sizeof(float))
        if T1 == NULL or T2 == NULL:
            rc = -1
        else:
            # F V, then G (F V), then F' G F V: each a deterministic GEMM
            rc = afl_sgemm(0, r, ncols, D, pc.factor, D, V, ncols, T1, NULL, ncols, 0, col_blocks, ncb, n_threads)
            if rc == 0:
                rc = afl_sgemm(0, r, ncols, r, pc.core, r, T1, ncols, T2, NULL, ncols, 0, pc.rb, pc.nrb,
                               n_threads)
            if rc == 0:
                rc = afl_sgemm(1, D, ncols, r, pc.factor, D, T2, ncols, NULL, O, ncols, 0, pc.rb, pc.nrb,
                               n_threads)
        free(T1)
        free(T2)
        if rc != 0:
            return rc
        for i in prange(D, num_threads=n_threads, schedule='static'):
            for c in range(ncols):
                O[i * ncols + c] = O[i * ncols + c] + <double> pc.diag[i] * V[i * ncols + c]
        return 0
    for i in prange(D, num_threads=n_threads, schedule='static'):
        for c in range(ncols):
            O[i * ncols + c] = <double> pc.diag[i] * V[i * ncols + c]
    return 0


def precond_apply(const float[:, ::1] V,             # IN  (D, ncols)
                  double[:, ::1] O,                  # OUT (D, ncols) H0 V
                  const int64_t[::1] col_blocks,     # IN  K-blocks over the D columns
                  const float[:, ::1] dense=None,    # IN  (D, D), or
                  const float[::1] diag=None,        # IN  (D,) with optional
                  const float[:, ::1] factor=None,   # IN  (r, D) and
                  const float[:, ::1] core=None,     # IN  (r, r)
                  const int64_t[::1] factor_blocks=None,  # IN  K-blocks over the r rows
                  int n_threads=1):
    """O = H0 V with the preconditioner's product inside training (exposed for tests)."""
    cdef _precond_t pc
    cdef int rc
    _precond_fill(&pc, V.shape[0], dense, diag, factor, core, factor_blocks)
    if O.shape[0] != V.shape[0] or O.shape[1] != V.shape[1] or col_blocks[col_blocks.shape[0] - 1] != V.shape[0]:
        raise ValueError("precond_apply: inconsistent shapes")
    if pc.kind == PRE_NONE or V.shape[1] == 0:
        raise ValueError("precond_apply: no preconditioner given")
    with nogil:
        rc = _precond_apply(&pc, V.shape[0], V.shape[1], &V[0, 0], &O[0, 0], &col_blocks[0],
                            col_blocks.shape[0] - 1, n_threads)
    if rc != 0:
        raise MemoryError("precond_apply: could not allocate scratch memory")


cdef int _precond_fill(_precond_t *pc, int64_t D, const float[:, ::1] dense, const float[::1] diag,
                       const float[:, ::1] factor, const float[:, ::1] core,
                       const int64_t[::1] factor_blocks) except -1:
    """Check the arrays of one form of H0 (all None: no preconditioner) and point pc at them."""
    memset(pc, 0, sizeof(_precond_t))
    pc.kind = PRE_NONE
    if dense is not None and dense.shape[0] > 0:
        if dense.shape[0] != D or dense.shape[1] != D or diag is not None or factor is not None:
            raise ValueError("preconditioner: a dense H0 must be (D, D) and come alone")
        pc.kind = PRE_DENSE
        pc.dense = &dense[0, 0]
        return 0
    if diag is None:
        if factor is not None or core is not None:
            raise ValueError("preconditioner: a low-rank H0 needs its diagonal")
        return 0
    if diag.shape[0] != D:
        raise ValueError("preconditioner: the diagonal must have D entries")
    pc.diag = &diag[0]
    pc.kind = PRE_DIAGONAL
    if factor is not None and factor.shape[0] > 0:
        if (factor.shape[1] != D or core is None or core.shape[0] != factor.shape[0]
                or core.shape[1] != factor.shape[0] or factor_blocks is None
                or factor_blocks[factor_blocks.shape[0] - 1] != factor.shape[0]):
            raise ValueError("preconditioner: a low-rank H0 needs factor (r, D), core (r, r) and "
                             "K-blocks over r")
        pc.kind = PRE_LOWRANK
        pc.factor = &factor[0, 0]
        pc.core = &core[0, 0]
        pc.r = factor.shape[0]
        pc.rb = &factor_blocks[0]
        pc.nrb = factor_blocks.shape[0] - 1
    return 0


def member_index(const uint8_t[:, ::1] member,      # IN  (n / G, B) 1 where item i trains model j
                 const int64_t[::1] row_blocks,     # IN  (nrb + 1,) row-block boundaries (rows)
                 int64_t[:, ::1] mptr,              # OUT (B, nrb + 1) see afl_member.h
                 int32_t[::1] mrows,                # OUT (G * member.sum(),) member rows
                 int group=1):
    """Each model's member rows by row block (exposed for tests)."""
    cdef int64_t n = member.shape[0] * group, B = member.shape[1], nrb = row_blocks.shape[0] - 1
    if mptr.shape[0] != B or mptr.shape[1] != nrb + 1 or row_blocks[nrb] != n:
        raise ValueError("member_index: inconsistent shapes")
    if n == 0 or B == 0:
        return
    with nogil:
        afl_member_index(n, B, &member[0, 0], nrb, &row_blocks[0], &mptr[0, 0],
                         &mrows[0] if mrows.shape[0] > 0 else NULL, group)


def predict_tile_bytes():
    """Bytes of the tile of logits one prediction call holds (unless that is fewer rows than
    :func:`predict_min_tile_rows`)."""
    return int(AFL_PREDICT_TILE_BYTES)


def predict_min_tile_rows():
    """Rows (items) of a prediction tile at least."""
    return int(AFL_PREDICT_MIN_TILE)


def _fuse_items(bint on):
    """For tests: multiple choice with the cross-entropy loss in one pass per row block (the
    default) or scores then gradient (``False``), which must give the same bits."""
    afl_member_fuse_items(on)


def center_items(float[:, :] rows, int group):
    """Subtract from each item's ``group`` consecutive rows (in place) their mean row: per
    column, the candidates summed in double in order, divided by ``group`` and rounded to
    float32, then subtracted in float32, the operations of NumPy's
    ``rows - rows.mean(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)`` on the
    (items, group, columns) view, in one pass instead of five."""
    cdef Py_ssize_t n = rows.shape[0], d = rows.shape[1], it, i, c, k
    cdef double acc
    cdef float m
    if group < 1 or n % group != 0:
        raise ValueError("center_items: the rows are not whole items")
    with nogil:
        for it in range(n // group):
            i = it * group
            for k in range(d):
                acc = <double> rows[i, k]
                for c in range(1, group):
                    acc = acc + <double> rows[i + c, k]
                m = <float> (acc / group)
                for c in range(group):
                    rows[i + c, k] = rows[i + c, k] - m


def member_width(int64_t D):
    """Stride (floats) of the class rows of the member pass's weights and gradients."""
    return int(afl_member_width(D))


cdef inline int _row_stride(const float[:, :] X) except -1:
    """Row stride of X in floats; its columns must be contiguous."""
    if X.shape[0] > 1 and X.strides[1] != sizeof(float):
        raise ValueError("rows must have contiguous columns")
    if X.strides[0] % sizeof(float) != 0 or (X.shape[0] > 1 and X.strides[0] < X.shape[1] * sizeof(float)):
        raise ValueError("rows must not overlap")
    return X.strides[0] // sizeof(float) if X.shape[0] > 1 else X.shape[1]


cdef void *_aligned_zeros(size_t n_bytes) noexcept nogil:
    """64-byte aligned, zeroed memory (NULL on failure); release with free()."""
    cdef void *ptr = NULL
    if posix_memalign(&ptr, 64, n_bytes if n_bytes > 0 else 64) != 0:
        return NULL
    memset(ptr, 0, n_bytes)
    return ptr


cdef void _member_set_init(afl_member_set *ms, int64_t n, int64_t D, int64_t ldx, int C, int G,
                           const float *X, const int32_t *y, int64_t B, int64_t nrb,
                           const int64_t *row_blocks, const int64_t *mptr, const int32_t *mrows,
                           int64_t nsb, const int64_t *super_blocks, int loss_code,
                           const double *params, afl_user_weight_fn user) noexcept nogil:
    """The descriptor of a member pass: n rows of D columns (stride ldx), C outputs, items of
    G rows, B models' member lists over nrb row blocks and nsb super-blocks, and the loss."""
    ms.n = n
    ms.D = D
    ms.ldx = ldx
    ms.Dp = afl_member_width(D)
    ms.C = C
    ms.ref = 0
    ms.G = G
    ms.X = X
    ms.y = y
    ms.B = B
    ms.nrb = nrb
    ms.row_blocks = row_blocks
    ms.mptr = mptr
    ms.mrows = mrows
    ms.nsb = nsb
    ms.sb = super_blocks
    ms.loss_code = loss_code
    ms.params = params
    ms.user = user


cdef int _member_set_fill(afl_member_set *ms, const float[:, :] X, const int32_t[::1] y,
                          const int64_t[:, ::1] mptr, const int32_t[::1] mrows,
                          const int64_t[::1] row_blocks, const int64_t[::1] super_blocks, int C,
                          int G, int loss_code, const double[::1] loss_params) except -1:
    """_member_set_init from arrays (built-in losses)."""
    _member_set_init(ms, X.shape[0], X.shape[1], _row_stride(X), C, G, &X[0, 0], &y[0], mptr.shape[0],
                     row_blocks.shape[0] - 1, &row_blocks[0], &mptr[0, 0],
                     &mrows[0] if mrows.shape[0] > 0 else NULL, super_blocks.shape[0] - 1,
                     &super_blocks[0], loss_code, &loss_params[0] if loss_params.shape[0] > 0 else NULL,
                     NULL)
    return 0


def member_eval(const float[:, :] X,             # IN  (n, D) rows with a trailing ones column
                const int32_t[::1] y,            # IN  (n,) label codes
                const int64_t[:, ::1] mptr,      # IN  (B, nrb + 1) from member_index
                const int32_t[::1] mrows,        # IN  member rows from member_index
                const int64_t[::1] row_blocks,   # IN  (nrb + 1,) row-block boundaries
                const int64_t[::1] super_blocks, # IN  (nsb + 1,) super-block boundaries
                const float[:, :, ::1] W,        # IN  (B, C, member_width(D)) class-major weights,
                                                 #     zero from column D on
                const double[::1] scale,         # IN  (B,) gradient scale of each model
                int loss_code,
                const double[::1] loss_params,   # IN  parameters of the loss
                double[::1] loss,                # OUT (B,) summed row losses
                double[:, :, ::1] grad,          # OUT (B, C, member_width(D)) summed scale * dloss/dz x
                int repeat, int n_threads, int group=1, int reference=0):
    """One member-row pass of every model (``repeat`` times; exposed for tests and benchmarks).
    ``reference`` = 1: the C outputs are C of C + 1 classes, the last one's logit fixed at 0
    (the reference-class form; ``y`` codes up to C)."""
    cdef afl_member_set ms
    cdef int64_t B = mptr.shape[0], nrb = row_blocks.shape[0] - 1, a
    cdef int rc = 0, rep
    cdef int64_t Dp = afl_member_width(X.shape[1])
    if (W.shape[0] != B or W.shape[2] != Dp or grad.shape[0] != B
            or grad.shape[1] != W.shape[1] or grad.shape[2] != Dp or loss.shape[0] != B
            or scale.shape[0] != B or y.shape[0] * group != X.shape[0] or mptr.shape[1] != nrb + 1
            or row_blocks[nrb] != X.shape[0] or super_blocks[super_blocks.shape[0] - 1] != nrb):
        raise ValueError("member_eval: inconsistent shapes")
    if B == 0 or X.shape[0] == 0:
        return
    if reference not in (0, 1) or (reference and group != 1):
        raise ValueError("member_eval: reference must be 0, or 1 with group 1")
    _member_set_fill(&ms, X, y, mptr, mrows, row_blocks, super_blocks, W.shape[1], group, loss_code,
                     loss_params)
    ms.ref = reference
    cdef int64_t *active = <int64_t *> malloc(B * sizeof(int64_t))
    if active == NULL:
        raise MemoryError("member_eval: could not allocate scratch memory")
    for a in range(B):
        active[a] = a
    with nogil:
        for rep in range(repeat):
            rc = afl_member_eval(&ms, B, active, &W[0, 0, 0], &scale[0], &loss[0],
                                 &grad[0, 0, 0], n_threads)
            if rc != 0:
                break
    free(active)
    if rc != 0:
        raise MemoryError("member_eval: could not allocate scratch memory")


def train_block(const float[:, :] X,            # IN  (n, D): rows with a trailing column of ones
                                                 #     (contiguous columns; rows 64-byte aligned
                                                 #     with a stride of member_width(D) run fastest);
                                                 #     with group > 1: n / group items of group rows
                const int32_t[::1] y,            # IN  (n / group,) label codes in [0, n_classes)
                                                 #     (group > 1: the right candidate, < group)
                const uint8_t[:, ::1] member,    # IN  (n / group, B) 1 where row (item) i trains model j
                const int64_t[::1] n_rows,       # IN  (B,) rows of each model (member column sums)
                const int64_t[::1] row_blocks,   # IN  (nrb + 1,) row-block boundaries
                const int64_t[::1] super_blocks, # IN  (nsb + 1,) super-block boundaries (row blocks)
                const int64_t[::1] col_blocks,   # IN  (ncb + 1,) K-blocks over the D columns
                const float[:, ::1] precond,     # IN  (D, D) symmetric H0, or (0, 0): identity
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
                int32_t[::1] n_eval,             # OUT (B,) evaluations of objective and gradient
                int n_threads,
                const float[::1] pre_diag=None,          # IN  (D,) diagonal of H0 (other forms), or
                const float[:, ::1] pre_factor=None,     # IN  (r, D) F of a low-rank H0
                const float[:, ::1] pre_core=None,       # IN  (r, r) G of a low-rank H0
                const int64_t[::1] pre_blocks=None,      # IN  K-blocks over the r rows of F
                int group=1, int n_free=1,
                const int64_t[::1] group_blocks=None,    # IN  (ng + 1,) reduction groups (super-blocks)
                const int64_t[::1] group_leaves=None,    # IN  (ng,) leaf of each group
                int64_t n_leaves=0,                      # IN  leaves of the reduction tree
                int reference=0):
    """Train B multinomial logistic regressions on subsets of the same rows (see module doc).
    H0 is ``precond`` when it is not empty, else diag(pre_diag) + F' G F (F, G optional),
    else the identity.  With ``group`` > 1 (and n_classes == 1) the models are multiple-choice
    scorers: an item is ``group`` consecutive rows, its loss the softmax over their scores
    (afl_member.h, E).  The last ``n_free`` rows of each model are not penalised (the
    intercept; 0 or the position biases for multiple choice).  With ``group_blocks`` the sums
    of each evaluation go through the reduction tree of ``member_eval_tree`` (leaves
    [0, n_leaves)), else they are added in super-block order.  ``reference`` = 1: the
    reference-class form of n_classes + 1 classes (see ``_lbfgs_advance``); ``y`` codes up to
    n_classes."""
    cdef int64_t n = X.shape[0], D = X.shape[1], B = member.shape[1]
    cdef int C = n_classes
    cdef int64_t P = D * C
    cdef int64_t nrb = row_blocks.shape[0] - 1, ncb = col_blocks.shape[0] - 1
    cdef int64_t nsb = super_blocks.shape[0] - 1
    cdef int hist = history if history > 0 else 1
    cdef int rc = 0
    cdef int64_t total = 0, j, ng = 0
    cdef const int64_t *gsb = NULL
    cdef const int64_t *gleaf = NULL
    cdef _precond_t pc
    _precond_fill(&pc, D, precond, pre_diag, pre_factor, pre_core, pre_blocks)
    if group < 1 or (group > 1 and C != 1) or n_free < 0 or n_free > D or n % group != 0:
        raise ValueError("train_block: bad group or n_free")
    if reference not in (0, 1) or (reference and group != 1):
        raise ValueError("train_block: reference must be 0, or 1 with group 1")
    if (y.shape[0] * group != n or member.shape[0] * group != n or coef.shape[0] != B or coef.shape[1] != P
            or n_rows.shape[0] != B or l2.shape[0] != B or inv_n.shape[0] != B
            or n_iter.shape[0] != B or status.shape[0] != B or fval.shape[0] != B
            or n_eval.shape[0] != B or row_blocks[nrb] != n or col_blocks[ncb] != D or super_blocks[nsb] != nrb):
        raise ValueError("train_block: inconsistent shapes")
    if group_blocks is not None:
        ng = group_blocks.shape[0] - 1
        if (group_leaves is None or group_leaves.shape[0] != ng or group_blocks[ng] != nsb
                or group_blocks[0] != 0 or n_leaves < 1 or (ng > 0 and group_leaves[ng - 1] >= n_leaves)):
            raise ValueError("train_block: inconsistent reduction groups")
        if ng > 0:
            gsb = &group_blocks[0]
            gleaf = &group_leaves[0]
    if n == 0 or B == 0:
        return
    for j in range(B):
        total += n_rows[j] * group
    cdef const double *params = &loss_params[0] if loss_params.shape[0] > 0 else NULL
    cdef int64_t ldx = _row_stride(X)
    with nogil:
        rc = _train(&X[0, 0], ldx, &y[0], &member[0, 0], total, &row_blocks[0], nrb,
                    &super_blocks[0], nsb, &col_blocks[0], ncb,
                    &pc,
                    &coef[0, 0], &l2[0], &inv_n[0], n, D, B, C, loss_code, params,
                    <afl_user_weight_fn> user_fn, gtol, ftol, max_iter, hist, max_ls,
                    &n_iter[0], &status[0], &fval[0], &n_eval[0], n_threads, group, n_free,
                    ng, gsb, gleaf, n_leaves, reference)
    if rc != 0:
        raise MemoryError("train_block: could not allocate scratch memory")


# The batched L-BFGS solver as a state machine: _lbfgs_trial gives the trial points of the
# models still running (class-major float32 weights), the caller evaluates loss and gradient
# there (the member pass on all rows, or partial sums from elsewhere added in the same
# order), and _lbfgs_advance moves every model on.  _train drives it with the member pass;
# LBFGSBlock drives it from Python.
ctypedef struct _lbfgs_t:
    int64_t D, B, P, Dp, Pp, C2
    int C, ref, hist, max_iter, max_ls, n_threads, n_free
    double gtol, ftol
    const _precond_t *pc
    const int64_t *col_blocks
    int64_t ncb
    double *coef
    const double *l2
    const double *inv_n
    int32_t *n_eval_out
    bint use_pre
    int64_t nA
    float *Wc
    double *sca
    double *xt
    double *gt
    double *g
    double *p
    double *S
    double *Y
    double *rho
    double *alph
    double *f
    double *ft
    double *alpha
    double *gp
    double *gtol_j
    int *state
    int *status
    int *iters
    int *n_ls
    int *mem_len
    int *mem_head
    int64_t *active
    int64_t *dirs
    float *V
    double *O


cdef int _lbfgs_init(_lbfgs_t *st, int64_t D, int64_t B, int C, const _precond_t *pc,
                     const int64_t *col_blocks, int64_t ncb, double *coef, const double *l2,
                     const double *inv_n, double gtol, double ftol, int max_iter, int hist, int max_ls,
                     int32_t *n_eval_out, int n_threads, int n_free, int ref) noexcept nogil:
    """Allocate the state of B models starting at coef (B x D * C), whose last n_free rows are
    not penalised (ref: the penalty of the reference-class form, see _lbfgs_advance); -1 when
    memory is short (free it with _lbfgs_free either way)."""
    cdef int64_t j, k
    cdef int64_t P = D * C
    memset(st, 0, sizeof(_lbfgs_t))
    st.D = D
    st.B = B
    st.C = C
    st.ref = ref
    st.P = P
    st.Dp = afl_member_width(D)
    st.Pp = st.Dp * C
    st.C2 = 2 * C
    st.hist = hist
    st.max_iter = max_iter
    st.max_ls = max_ls
    st.n_threads = n_threads
    st.n_free = n_free
    st.gtol = gtol
    st.ftol = ftol
    st.pc = pc
    st.col_blocks = col_blocks
    st.ncb = ncb
    st.coef = coef
    st.l2 = l2
    st.inv_n = inv_n
    st.n_eval_out = n_eval_out
    st.use_pre = pc.kind != PRE_NONE
    # class-major weights of the member pass, class rows padded to Dp (the pad stays zero)
    # and 64-byte aligned
    st.Wc = <float *> _aligned_zeros(B * st.Pp * sizeof(float))
    st.sca = <double *> malloc(B * sizeof(double))
    st.xt = <double *> malloc(B * P * sizeof(double))
    st.gt = <double *> malloc(B * P * sizeof(double))
    st.g = <double *> malloc(B * P * sizeof(double))
    st.p = <double *> malloc(B * P * sizeof(double))
    st.S = <double *> malloc(B * hist * P * sizeof(double))
    st.Y = <double *> malloc(B * hist * P * sizeof(double))
    st.rho = <double *> malloc(B * hist * sizeof(double))
    st.alph = <double *> malloc(B * hist * sizeof(double))
    st.f = <double *> malloc(B * sizeof(double))
    st.ft = <double *> malloc(B * sizeof(double))
    st.alpha = <double *> malloc(B * sizeof(double))
    st.gp = <double *> malloc(B * sizeof(double))
    st.gtol_j = <double *> malloc(B * sizeof(double))
    st.state = <int *> malloc(B * sizeof(int))
    st.status = <int *> malloc(B * sizeof(int))
    st.iters = <int *> malloc(B * sizeof(int))
    st.n_ls = <int *> malloc(B * sizeof(int))
    st.mem_len = <int *> malloc(B * sizeof(int))
    st.mem_head = <int *> malloc(B * sizeof(int))
    st.active = <int64_t *> malloc(B * sizeof(int64_t))
    st.dirs = <int64_t *> malloc(B * sizeof(int64_t))
    # the preconditioner product: [q, y] of every model that needs a direction, D x 2 C each
    st.V = <float *> malloc(D * B * st.C2 * sizeof(float)) if st.use_pre else NULL
    st.O = <double *> malloc(D * B * st.C2 * sizeof(double)) if st.use_pre else NULL
    if (st.Wc == NULL or st.sca == NULL or st.xt == NULL or st.gt == NULL or st.g == NULL
            or st.p == NULL or st.S == NULL or st.Y == NULL or st.rho == NULL or st.alph == NULL
            or st.f == NULL or st.ft == NULL or st.alpha == NULL or st.gp == NULL or st.gtol_j == NULL
            or st.state == NULL or st.status == NULL or st.iters == NULL or st.n_ls == NULL
            or st.mem_len == NULL or st.mem_head == NULL or st.active == NULL or st.dirs == NULL
            or (st.use_pre and (st.V == NULL or st.O == NULL))):
        return -1
    for j in range(B):
        n_eval_out[j] = 0
        st.state[j] = ST_INIT
        st.status[j] = _MAX_ITER
        st.iters[j] = 0
        st.n_ls[j] = 0
        st.mem_len[j] = 0
        st.mem_head[j] = 0
        st.alpha[j] = 0.0
        memset(st.p + j * P, 0, P * sizeof(double))
        # a cold start (every weight zero) gets its tolerance from its first gradient
        st.gtol_j[j] = gtol
        for k in range(P):
            if coef[j * P + k] != 0.0:
                break
        else:
            st.gtol_j[j] = -1.0
    return 0


cdef void _lbfgs_free(_lbfgs_t *st) noexcept nogil:
    free(st.Wc); free(st.sca); free(st.xt); free(st.gt); free(st.g); free(st.p); free(st.S)
    free(st.Y); free(st.rho); free(st.alph); free(st.f); free(st.ft); free(st.alpha); free(st.gp)
    free(st.gtol_j)
    free(st.state); free(st.status); free(st.iters); free(st.n_ls); free(st.mem_len)
    free(st.mem_head); free(st.active); free(st.dirs); free(st.V); free(st.O)
    memset(st, 0, sizeof(_lbfgs_t))


cdef int64_t _lbfgs_trial(_lbfgs_t *st) noexcept nogil:
    """The models still running (st.active[:nA]), their trial points (st.xt, and st.Wc as
    class-major float32: row a for model active[a]) and gradient scales (st.sca); returns nA."""
    cdef int64_t P = st.P, Pp = st.Pp, Dp = st.Dp, D = st.D
    cdef int C = st.C
    cdef int64_t j, a, k, r, c, nA = 0
    cdef double xv
    for j in range(st.B):
        if st.state[j] != ST_DONE:
            st.active[nA] = j
            nA += 1
    st.nA = nA
    for a in range(nA):
        st.n_eval_out[st.active[a]] += 1
    for a in prange(nA, num_threads=st.n_threads, schedule='static'):
        j = st.active[a]
        for k in range(P):
            xv = st.coef[j * P + k]
            if st.state[j] == ST_SEARCH:
                xv = xv + st.alpha[j] * st.p[j * P + k]
            st.xt[j * P + k] = xv
        for r in range(D):
            for c in range(C):
                st.Wc[a * Pp + c * Dp + r] = <float> st.xt[j * P + r * C + c]
        st.sca[a] = st.inv_n[j]
    return nA


cdef int _lbfgs_advance(_lbfgs_t *st, const double *grad, int64_t gstride, const double *lossv,
                        int64_t lstride) noexcept nogil:
    """Move every model of the last trial on, given its summed row losses (lossv[a * lstride])
    and scaled gradient sums (grad[a * gstride + c * Dp + r]); -1 when memory is short."""
    cdef int64_t P = st.P, Dp = st.Dp, D = st.D, C2 = st.C2
    cdef int C = st.C, hist = st.hist
    cdef int64_t j, a, b, k, r, c, nN, ncols
    cdef int64_t nA = st.nA
    cdef int newest
    cdef double reg, yhy, sr, tq, ty
    # The reference-class form (st.ref): the C outputs v_c are w_c - w_C of the softmax over
    # C + 1 classes, whose L2 term on zero-mean class weights (where its optimum lies) is, per
    # penalised row, sum_c v_c^2 - (sum_c v_c)^2 / (C + 1); so the optimum is the symmetric
    # softmax's, with one class's arithmetic less in every pass.
    cdef double inv_cf = 1.0 / (C + st.ref)
    for a in prange(nA, num_threads=st.n_threads, schedule='static'):
        j = st.active[a]
        reg = 0.0
        for k in range((D - st.n_free) * C):
            reg = reg + st.xt[j * P + k] * st.xt[j * P + k]
        if st.ref:
            for r in range(D - st.n_free):
                sr = 0.0
                for c in range(C):
                    sr = sr + st.xt[j * P + r * C + c]
                reg = reg - sr * sr * inv_cf
        st.ft[j] = lossv[a * lstride] * st.inv_n[j] + 0.5 * st.l2[j] * reg
        for r in range(D):
            sr = 0.0
            if st.ref and r < D - st.n_free:
                for c in range(C):
                    sr = sr + st.xt[j * P + r * C + c]
                sr = sr * inv_cf
            for c in range(C):
                st.gt[j * P + r * C + c] = grad[a * gstride + c * Dp + r]
                if r < D - st.n_free:
                    st.gt[j * P + r * C + c] = st.gt[j * P + r * C + c] + st.l2[j] * (st.xt[j * P + r * C + c] - sr)
        _solver_update(P, hist, &st.state[j], &st.status[j], &st.iters[j],
                       st.coef + j * P, st.g + j * P, &st.f[j], st.xt + j * P, st.gt + j * P, st.ft[j],
                       st.p + j * P, st.S + j * hist * P, st.Y + j * hist * P, st.rho + j * hist,
                       &st.mem_len[j], &st.mem_head[j], st.alph + j * hist,
                       &st.alpha[j], &st.gp[j], &st.n_ls[j], &st.gtol_j[j], st.gtol, st.ftol, st.max_iter,
                       st.max_ls)
    # new search directions: H0 [q, y] of all such models in one product
    nN = 0
    for j in range(st.B):
        if st.state[j] == ST_DIRECTION:
            st.dirs[nN] = j
            nN += 1
    if nN == 0:
        return 0
    if st.use_pre:
        ncols = nN * C2
        for b in prange(nN, num_threads=st.n_threads, schedule='static'):
            j = st.dirs[b]
            newest = (st.mem_head[j] - 1 + hist) % hist
            for r in range(D):
                for c in range(C):
                    st.V[r * ncols + b * C2 + c] = <float> st.p[j * P + r * C + c]
                    st.V[r * ncols + b * C2 + C + c] = (
                        <float> st.Y[(j * hist + newest) * P + r * C + c] if st.mem_len[j] > 0 else 0.0)
        if _precond_apply(st.pc, D, ncols, st.V, st.O, st.col_blocks, st.ncb, st.n_threads) != 0:
            return -1
        # the reference-class form: H0 = (I + 1 1') x M^-1 over (outputs x columns), the exact
        # inverse of the objective's Hessian at uniform probabilities (1/(C+1) (I - 1 1'/(C+1))
        # x X'X/n plus l2 (I - 1 1'/(C+1)) x I, whose class factor's inverse is C+1 times
        # I + 1 1'): the product gave M^-1 [q, y], the outputs are mixed here
        for b in prange(nN, num_threads=st.n_threads, schedule='static'):
            j = st.dirs[b]
            newest = (st.mem_head[j] - 1 + hist) % hist
            yhy = 0.0
            for r in range(D):
                tq = 0.0
                ty = 0.0
                if st.ref:
                    for c in range(C):
                        tq = tq + st.O[r * ncols + b * C2 + c]
                        ty = ty + st.O[r * ncols + b * C2 + C + c]
                for c in range(C):
                    st.gt[j * P + r * C + c] = st.O[r * ncols + b * C2 + c] + tq
                    if st.mem_len[j] > 0:
                        yhy = yhy + st.Y[(j * hist + newest) * P + r * C + c] * (st.O[r * ncols + b * C2 + C + c] + ty)
            _solver_direction(P, hist, &st.state[j], st.iters[j], st.g + j * P, st.p + j * P,
                              st.S + j * hist * P, st.Y + j * hist * P, st.rho + j * hist,
                              &st.mem_len[j], st.mem_head[j], st.alph + j * hist,
                              st.gt + j * P, yhy, &st.alpha[j], &st.gp[j], &st.n_ls[j])
    else:
        for b in prange(nN, num_threads=st.n_threads, schedule='static'):
            j = st.dirs[b]
            newest = (st.mem_head[j] - 1 + hist) % hist
            yhy = 0.0
            if st.mem_len[j] > 0:
                yhy = _dot(st.Y + (j * hist + newest) * P, st.Y + (j * hist + newest) * P, P)
            _solver_direction(P, hist, &st.state[j], st.iters[j], st.g + j * P, st.p + j * P,
                              st.S + j * hist * P, st.Y + j * hist * P, st.rho + j * hist,
                              &st.mem_len[j], st.mem_head[j], st.alph + j * hist,
                              NULL, yhy, &st.alpha[j], &st.gp[j], &st.n_ls[j])
    return 0


cdef void _lbfgs_results(const _lbfgs_t *st, int32_t *n_iter_out, int32_t *status_out,
                         double *fval_out) noexcept nogil:
    cdef int64_t j
    for j in range(st.B):
        n_iter_out[j] = st.iters[j]
        status_out[j] = st.status[j]
        fval_out[j] = st.f[j]


cdef int _train(const float *X, int64_t ldx, const int32_t *y, const uint8_t *member, int64_t total,
                const int64_t *row_blocks, int64_t nrb, const int64_t *super_blocks, int64_t nsb,
                const int64_t *col_blocks, int64_t ncb, const _precond_t *pc,
                double *coef, const double *l2, const double *inv_n,
                int64_t n, int64_t D, int64_t B, int C, int loss_code, const double *params,
                afl_user_weight_fn user, double gtol, double ftol, int max_iter, int hist,
                int max_ls, int32_t *n_iter_out, int32_t *status_out, double *fval_out,
                int32_t *n_eval_out, int n_threads, int group, int n_free, int64_t ng, const int64_t *gsb,
                const int64_t *gleaf, int64_t n_leaves, int ref) noexcept nogil:
    cdef int64_t Dp = afl_member_width(D), Pp = Dp * C
    cdef int64_t nA, n_nodes = 0
    cdef int64_t lvl = 0, idx = 0
    cdef int rc = 0
    cdef afl_member_set ms
    cdef _lbfgs_t st

    # scratch; freed at the end whatever happens
    cdef int64_t *mptr = <int64_t *> malloc(B * (nrb + 1) * sizeof(int64_t))
    cdef int32_t *mrows = <int32_t *> malloc((total if total > 0 else 1) * sizeof(int32_t))
    # sums of the member pass: gradients (class-major, class rows padded to Dp) and losses; with
    # reduction groups, one node of the tree per model (Pp gradient entries, then the loss)
    cdef double *gradc = <double *> _aligned_zeros(B * (Pp + 1) * sizeof(double))
    cdef double *lossv = <double *> malloc(B * sizeof(double))

    if (_lbfgs_init(&st, D, B, C, pc, col_blocks, ncb, coef, l2, inv_n, gtol, ftol, max_iter, hist,
                    max_ls, n_eval_out, n_threads, n_free, ref) != 0
            or mptr == NULL or mrows == NULL or gradc == NULL or lossv == NULL):
        rc = -1
    else:
        afl_member_index(n, B, member, nrb, row_blocks, mptr, mrows, group)
        _member_set_init(&ms, n, D, ldx, C, group, X, y, B, nrb, row_blocks, mptr, mrows, nsb,
                         super_blocks, loss_code, params, user)
        ms.ref = ref
        while True:
            nA = _lbfgs_trial(&st)
            if nA == 0:
                break
            # loss and gradient of every active model over its own rows: one pass
            if gsb != NULL:
                if afl_member_eval_tree(&ms, nA, st.active, st.Wc, st.sca, ng, gsb, gleaf, 0, n_leaves,
                                        1, gradc, &lvl, &idx, &n_nodes, n_threads) != 0 or n_nodes != 1:
                    rc = -1
                    break
                rc = _lbfgs_advance(&st, gradc, Pp + 1, gradc + Pp, Pp + 1)
            else:
                if afl_member_eval(&ms, nA, st.active, st.Wc, st.sca, lossv, gradc, n_threads) != 0:
                    rc = -1
                    break
                rc = _lbfgs_advance(&st, gradc, Pp, lossv, 1)
            if rc != 0:
                break
        if rc == 0:
            _lbfgs_results(&st, n_iter_out, status_out, fval_out)

    _lbfgs_free(&st)
    free(mptr); free(mrows); free(gradc); free(lossv)
    return rc


cdef class LBFGSBlock:
    """The kernel's batched L-BFGS solver driven from Python: the same arithmetic as
    ``train_block``, with the evaluation of loss and gradient left to the caller.

    ``trial()`` returns the models still running and their trial weights; the caller
    evaluates every one of them (summed row losses and scaled gradient sums, as
    ``member_eval_tree`` returns them) and passes the sums to ``advance``; ``trial()`` returns
    no model once every model has stopped.  Fed the sums of ``train_block``'s own pass, the
    models end bitwise where ``train_block`` leaves them."""
    cdef _lbfgs_t st
    cdef _precond_t pc
    cdef object keep
    cdef double[:, ::1] coef
    cdef int32_t[::1] n_eval
    cdef bint ready

    def __cinit__(self):
        memset(&self.st, 0, sizeof(_lbfgs_t))
        self.ready = False

    def __init__(self, double[:, ::1] coef,             # IN/OUT (B, D * C) start and solution
                 const double[::1] l2,                  # IN  (B,) L2 weight of each model
                 const double[::1] inv_n,               # IN  (B,) 1 / (rows of model j)
                 int n_classes,
                 const int64_t[::1] col_blocks,         # IN  (ncb + 1,) K-blocks over the D columns
                 const float[:, ::1] precond,           # IN  (D, D) H0, or (0, 0)
                 double gtol, double ftol, int max_iter, int history, int max_ls, int n_threads,
                 const float[::1] pre_diag=None, const float[:, ::1] pre_factor=None,
                 const float[:, ::1] pre_core=None, const int64_t[::1] pre_blocks=None,
                 int n_free=1, int reference=0):
        cdef int64_t B = coef.shape[0]
        cdef int64_t D = col_blocks[col_blocks.shape[0] - 1]
        if coef.shape[1] != D * n_classes or l2.shape[0] != B or inv_n.shape[0] != B or B == 0:
            raise ValueError("LBFGSBlock: inconsistent shapes")
        if n_free < 0 or n_free > D:
            raise ValueError("LBFGSBlock: bad n_free")
        if reference not in (0, 1):
            raise ValueError("LBFGSBlock: reference must be 0 or 1")
        _precond_fill(&self.pc, D, precond, pre_diag, pre_factor, pre_core, pre_blocks)
        self.keep = (coef, l2, inv_n, col_blocks, precond, pre_diag, pre_factor, pre_core, pre_blocks)
        self.coef = coef
        self.n_eval = np.zeros(B, dtype=np.int32)
        rc = _lbfgs_init(&self.st, D, B, n_classes, &self.pc, &col_blocks[0], col_blocks.shape[0] - 1,
                         &coef[0, 0], &l2[0], &inv_n[0], gtol, ftol, max_iter,
                         history if history > 0 else 1, max_ls, &self.n_eval[0], n_threads, n_free,
                         reference)
        if rc != 0:
            _lbfgs_free(&self.st)
            raise MemoryError("LBFGSBlock: could not allocate the solver's state")
        self.ready = True

    def __dealloc__(self):
        _lbfgs_free(&self.st)

    def trial(self):
        """(active, W): int64 (nA,) models still running, float32 (nA, C, member_width(D))
        their class-major trial weights (zero from column D on)."""
        cdef int64_t nA, a
        with nogil:
            nA = _lbfgs_trial(&self.st)
        active = np.empty(nA, dtype=np.int64)
        W = np.empty((nA, self.st.C, self.st.Dp), dtype=np.float32)
        cdef int64_t[::1] av = active
        cdef float[:, :, ::1] Wv = W
        for a in range(nA):
            av[a] = self.st.active[a]
        if nA > 0:
            memcpy(&Wv[0, 0, 0], self.st.Wc, nA * self.st.Pp * sizeof(float))
        return active, W

    def scales(self):
        """(nA,) gradient scale of each running model (1 / its rows)."""
        out = np.empty(self.st.nA, dtype=np.float64)
        cdef double[::1] ov = out
        cdef int64_t a
        for a in range(self.st.nA):
            ov[a] = self.st.sca[a]
        return out

    def advance(self, const double[:, ::1] sums):   # IN (nA, C * member_width(D) + 1)
        """Move the models of the last trial on: row a holds model active[a]'s gradient
        sums (class-major, C * member_width(D)) and then its summed row loss."""
        cdef int rc
        cdef int64_t stride = self.st.Pp + 1
        if sums.shape[0] != self.st.nA or sums.shape[1] != stride:
            raise ValueError("LBFGSBlock.advance: sums must be (models of the trial, C * Dp + 1)")
        if self.st.nA == 0:
            return
        with nogil:
            rc = _lbfgs_advance(&self.st, &sums[0, 0], stride, &sums[0, self.st.Pp], stride)
        if rc != 0:
            raise MemoryError("LBFGSBlock.advance: could not allocate scratch memory")
        self.st.nA = 0

    def results(self):
        """(n_iter, status, fval, n_eval) arrays, one entry per model."""
        B = self.st.B
        n_iter = np.zeros(B, dtype=np.int32)
        status = np.zeros(B, dtype=np.int32)
        fval = np.zeros(B, dtype=np.float64)
        cdef int32_t[::1] a = n_iter
        cdef int32_t[::1] b = status
        cdef double[::1] c = fval
        _lbfgs_results(&self.st, &a[0], &b[0], &c[0])
        return n_iter, status, fval, np.array(self.n_eval, copy=True)


def member_eval_tree(const float[:, :] X,             # IN  (n, D) rows with a trailing ones column
                     const int32_t[::1] y,            # IN  (n,) label codes
                     const int64_t[:, ::1] mptr,      # IN  (B, nrb + 1) from member_index
                     const int32_t[::1] mrows,        # IN  member rows from member_index
                     const int64_t[::1] row_blocks,   # IN  (nrb + 1,) row-block boundaries
                     const int64_t[::1] super_blocks, # IN  (nsb + 1,) super-block boundaries
                     const int64_t[::1] group_blocks, # IN  (ng + 1,) group boundaries (super-blocks)
                     const int64_t[::1] group_leaves, # IN  (ng,) leaf of each group, increasing
                     int64_t leaf_lo, int64_t leaf_hi,
                     const int64_t[::1] active,       # IN  (nA,) models to evaluate
                     const float[:, :, ::1] W,        # IN  (nA, C, member_width(D)) their weights
                     const double[::1] scale,         # IN  (nA,) gradient scale of each
                     int loss_code,
                     const double[::1] loss_params,   # IN  parameters of the loss
                     int n_threads, int group=1, int reference=0):
    """Partial sums of the member pass over the rows given, through the reduction tree
    (``afl_member_eval_tree``): (level, index, sums) of the maximal subtrees of leaves
    [leaf_lo, leaf_hi) that hold rows, left to right; sums (nA, C * member_width(D) + 1).
    With ``group`` = K > 1 (C = 1) the rows are items of K candidate rows and ``y`` has one
    entry per item (afl_member.h, E).  ``reference`` as in ``member_eval``."""
    cdef afl_member_set ms
    cdef int64_t nA = active.shape[0], nrb = row_blocks.shape[0] - 1, B = mptr.shape[0]
    cdef int64_t ng = group_blocks.shape[0] - 1
    cdef int64_t Dp = afl_member_width(X.shape[1])
    cdef int64_t stride = W.shape[1] * Dp + 1
    cdef int64_t max_nodes = 2, span = leaf_hi - leaf_lo, n_nodes = 0, a
    cdef int rc
    if group < 1 or (group > 1 and W.shape[1] != 1) or X.shape[0] % group != 0:
        raise ValueError("member_eval_tree: bad group")
    if reference not in (0, 1) or (reference and group != 1):
        raise ValueError("member_eval_tree: reference must be 0, or 1 with group 1")
    if (W.shape[0] != nA or W.shape[2] != Dp or scale.shape[0] != nA or y.shape[0] * group != X.shape[0]
            or mptr.shape[1] != nrb + 1 or row_blocks[nrb] != X.shape[0]
            or super_blocks[super_blocks.shape[0] - 1] != nrb or group_blocks[ng] != super_blocks.shape[0] - 1
            or group_leaves.shape[0] != ng or span < 1):
        raise ValueError("member_eval_tree: inconsistent shapes")
    for a in range(nA):
        if active[a] < 0 or active[a] >= B:
            raise ValueError("member_eval_tree: model index out of range")
    while span > 1:
        span >>= 1
        max_nodes += 2
    nodes = np.empty((max_nodes, nA, stride), dtype=np.float64)
    level = np.zeros(max_nodes, dtype=np.int64)
    index = np.zeros(max_nodes, dtype=np.int64)
    cdef double[:, :, ::1] nv = nodes
    cdef int64_t[::1] lv = level
    cdef int64_t[::1] iv = index
    if nA == 0 or X.shape[0] == 0 or ng == 0:
        return []
    _member_set_fill(&ms, X, y, mptr, mrows, row_blocks, super_blocks, W.shape[1], group, loss_code,
                     loss_params)
    ms.ref = reference
    with nogil:
        rc = afl_member_eval_tree(&ms, nA, &active[0], &W[0, 0, 0], &scale[0], ng, &group_blocks[0],
                                  &group_leaves[0], leaf_lo, leaf_hi, max_nodes, &nv[0, 0, 0], &lv[0],
                                  &iv[0], &n_nodes, n_threads)
    if rc == -1:
        raise MemoryError("member_eval_tree: could not allocate scratch memory")
    if rc != 0:
        raise ValueError("member_eval_tree: more subtrees than expected (leaves out of range?)")
    return [(int(level[o]), int(index[o]), nodes[o]) for o in range(n_nodes)]


def predict_accumulate(const float[:, :] X,          # IN  (n, D) rows with a trailing ones column
                       const int32_t[::1] y,          # IN  (n,) label codes; -1: no label
                       const uint8_t[:, ::1] heldout, # IN  (n, B) 1 where model j predicts row i
                       const float[:, ::1] W,         # IN  (D, C * B) class-major: column c * B + j
                       const int64_t[::1] col_blocks, # IN  blocks over the D columns
                       int n_classes,
                       int32_t[::1] seen,             # IN/OUT (n,) held-out predictions
                       int32_t[::1] correct,          # IN/OUT (n,) correct held-out predictions
                       double[::1] prob_label,        # IN/OUT (n,) summed probability of the label
                       double[:, ::1] proba_sum,      # IN/OUT (n, C) summed probabilities, or (0, C)
                       int n_threads, int64_t tile_rows=0, int group=1, int reference=0):
    """Predict rows with every model that holds them out and accumulate the counts; the logits
    of ``tile_rows`` rows at a time (0: predict_tile_bytes() of them, at least
    predict_min_tile_rows()).  With ``group`` > 1 (and
    n_classes == 1) X holds ``group`` candidate rows per item, and y, heldout, seen, correct,
    prob_label and proba_sum (n / group, group) are per item.  ``reference`` = 1 (group 1): W
    has the weights of n_classes - 1 classes, the last class's logit is 0 (the reference-class
    form), so W is (D, (n_classes - 1) * B)."""
    if group < 1 or (group > 1 and n_classes != 1) or X.shape[0] % group != 0:
        raise ValueError("predict_accumulate: bad group")
    if reference not in (0, 1) or (reference and (group != 1 or n_classes < 2)):
        raise ValueError("predict_accumulate: reference must be 0, or 1 with group 1 and 2+ classes")
    cdef int n_out = n_classes - reference
    cdef int64_t n = X.shape[0] // group, D = X.shape[1], B = heldout.shape[1]
    cdef int C = n_classes * group
    cdef int rc = 0
    cdef bint want_proba = proba_sum.shape[0] > 0
    cdef int64_t ldx = _row_stride(X)
    if (y.shape[0] != n or heldout.shape[0] != n or W.shape[0] != D or W.shape[1] != B * n_out
            or seen.shape[0] != n or correct.shape[0] != n or prob_label.shape[0] != n
            or (want_proba and (proba_sum.shape[0] != n or proba_sum.shape[1] != C))
            or col_blocks[col_blocks.shape[0] - 1] != D):
        raise ValueError("predict_accumulate: inconsistent shapes")
    if n == 0 or B == 0:
        return
    with nogil:
        rc = afl_predict(n, D, &X[0, 0], ldx, B, n_out, &W[0, 0], &col_blocks[0],
                         col_blocks.shape[0] - 1, &y[0], &heldout[0, 0], &seen[0], &correct[0],
                         &prob_label[0], &proba_sum[0, 0] if want_proba else NULL, tile_rows,
                         n_threads, group, reference)
    if rc != 0:
        raise MemoryError("predict_accumulate: could not allocate scratch memory")


def predict_logits(const float[:, ::1] Z,          # IN  (n, (n_classes - reference) * B) class-major logits
                   const int32_t[::1] y,          # IN  (n,) label codes; -1: no label
                   const uint8_t[:, ::1] heldout, # IN  (n, B) 1 where model j predicts row i
                   int n_classes,
                   int32_t[::1] seen, int32_t[::1] correct, double[::1] prob_label,
                   double[:, ::1] proba_sum,      # IN/OUT (n, n_classes) summed probabilities, or (0, n_classes)
                   int n_threads, int reference=0):
    """:func:`predict_accumulate` from the models' logits (one row per item, ``group`` 1): the
    same counts from the same logits."""
    if reference not in (0, 1) or (reference and n_classes < 2):
        raise ValueError("predict_logits: reference must be 0, or 1 with 2+ classes")
    cdef int n_out = n_classes - reference
    cdef int64_t n = Z.shape[0], B = heldout.shape[1]
    cdef int rc = 0
    cdef bint want_proba = proba_sum.shape[0] > 0
    if (y.shape[0] != n or heldout.shape[0] != n or Z.shape[1] != B * n_out or seen.shape[0] != n
            or correct.shape[0] != n or prob_label.shape[0] != n
            or (want_proba and (proba_sum.shape[0] != n or proba_sum.shape[1] != n_classes))):
        raise ValueError("predict_logits: inconsistent shapes")
    if n == 0 or B == 0:
        return
    with nogil:
        rc = afl_predict_logits(n, B, n_out, &Z[0, 0], &y[0], &heldout[0, 0], &seen[0], &correct[0],
                                &prob_label[0], &proba_sum[0, 0] if want_proba else NULL, n_threads, reference)
    if rc != 0:
        raise MemoryError("predict_logits: could not allocate scratch memory")


DUAL_MAX_OUT = AFL_DUAL_MAX_OUT
DUAL_WATCH = AFL_DUAL_WATCH


def dual_scratch_bytes(int64_t t_max, int64_t D, int C, int r, int hist, int64_t nk):
    """Scratch bytes of one thread of :func:`dual_train` (models of up to ``t_max`` rows, H0 of
    rank ``r``)."""
    return afl_dual_scratch_bytes(t_max, D, C, r, hist, nk)


def dual_train(const float[:, ::1] K,             # IN  (nk, nk) Gram matrix of centred features
               const int64_t[::1] krow,           # IN  (n,) row of K of each row of X
               const float[:, :] X,               # IN  (n, D) rows with a trailing ones column
               const int32_t[::1] y,              # IN  (n,) label codes
               const int64_t[::1] mptr,           # IN  (B + 1,) model j's rows: mrows[mptr[j]:mptr[j + 1]]
               const int32_t[::1] mrows,          # IN  rows of X, increasing per model
               double[:, ::1] coef,               # IN/OUT (B, D * C) start, then the result but X_rows' alpha
               double[:, ::1] alpha,              # OUT (mptr[B], C) the coefficients of the rows
               const double[::1] l2, const double[::1] inv_n,
               int C, int loss_code, const double[::1] params, uintptr_t loss_address,
               double gtol, double ftol, int max_iter, int hist, int max_ls,
               int32_t[::1] n_iter, int32_t[::1] status, double[::1] fval, int32_t[::1] n_eval,
               int n_threads,
               const double[:, ::1] V=None,       # IN  (D - 1, r) H0's leading eigenvectors (None: H0 = I)
               const double[:, ::1] Vt=None,      # IN  (r, D - 1) V transposed
               const double[:, ::1] XV=None,      # IN  (nk, r) X V on the rows of K
               const double[::1] sig=None,        # IN  (r,) their eigenvalues
               double sig_rest=0.0, double curvature=1.0,
               const int64_t[::1] watch=None,     # IN  features every model watches from its start
               float[:, ::1] logits=None,         # OUT (n, B * C) the models' logits (class-major), or None
               const int64_t[::1] xrow=None,      # IN  (n,) row of X of each of the call's rows (None: X's rows)
               double[:, ::1] mean_rows=None):    # OUT (D - 1, C) the models' mean X_rows' alpha, or None
    """Train the B models in the row space (``csrc/afl_dual.h``): C outputs of the reference-class
    form, the last column of X the unpenalised intercept.  ``watch``: features (most telling
    first) whose gradient entries every model watches from its start, sparing exact gradients
    (the models are the same with or without)."""
    cdef afl_dual_problem pb
    cdef int rc
    cdef int64_t B = mptr.shape[0] - 1
    cdef Py_ssize_t i
    if X.shape[1] > 1 and X.strides[1] != sizeof(float):
        raise ValueError("dual_train: X rows must be contiguous")
    memset(&pb, 0, sizeof(pb))
    pb.nk = K.shape[0]
    pb.ldk = K.shape[1]
    pb.K = &K[0, 0]
    pb.krow = &krow[0]
    pb.n = X.shape[0]
    if xrow is not None:
        for i in range(xrow.shape[0]):
            if xrow[i] < 0 or xrow[i] >= X.shape[0]:
                raise ValueError("dual_train: xrow holds a row X does not have")
        pb.n = xrow.shape[0]
        pb.xrow = &xrow[0] if xrow.shape[0] else NULL
    if krow.shape[0] != pb.n or y.shape[0] != pb.n:
        raise ValueError("dual_train: krow and y need one entry per row")
    pb.D = X.shape[1]
    pb.ldx = X.strides[0] // sizeof(float)
    pb.X = &X[0, 0]
    pb.y = &y[0]
    pb.C = C
    pb.loss_code = loss_code
    pb.params = &params[0] if params.shape[0] else NULL
    pb.user = <afl_user_weight_fn> loss_address
    pb.gtol = gtol
    pb.ftol = ftol
    pb.start_rtol = _START_RTOL
    pb.max_iter = max_iter
    pb.hist = hist
    pb.max_ls = max_ls
    if V is not None and V.shape[1] > 0:
        if (V.shape[0] != X.shape[1] - 1 or XV is None or Vt is None or Vt.shape[0] != V.shape[1]
                or Vt.shape[1] != V.shape[0] or XV.shape[0] != K.shape[0] or XV.shape[1] != V.shape[1]
                or sig is None or sig.shape[0] != V.shape[1]):
            raise ValueError("dual_train: V, XV and sig do not match")
        pb.r = V.shape[1]
        pb.V = &V[0, 0]
        pb.Vt = &Vt[0, 0]
        pb.XV = &XV[0, 0]
        pb.sig = &sig[0]
        pb.sig_rest = sig_rest
        pb.s = curvature
    if watch is not None and watch.shape[0] > 0:
        for i in range(watch.shape[0]):
            if watch[i] < 0 or watch[i] >= X.shape[1] - 1:
                raise ValueError("dual_train: watch holds a column that is not a feature")
        pb.watch = &watch[0]
        pb.n_watch = <int> min(watch.shape[0], AFL_DUAL_WATCH)
    cdef float *logits_ptr = NULL
    if logits is not None:
        if logits.shape[0] != pb.n or logits.shape[1] != B * C:
            raise ValueError("dual_train: logits must be (n, B * C)")
        if pb.n > 0:
            logits_ptr = &logits[0, 0]
    cdef double *mean_ptr = NULL
    if mean_rows is not None:
        if mean_rows.shape[0] != X.shape[1] - 1 or mean_rows.shape[1] != C:
            raise ValueError("dual_train: mean_rows must be (D - 1, C)")
        if mean_rows.shape[0] > 0:
            mean_ptr = &mean_rows[0, 0]
    for i in range(1, krow.shape[0]):
        if krow[i] <= krow[i - 1]:
            raise ValueError("dual_train: krow must be increasing")
    with nogil:
        rc = afl_dual_train(&pb, B, &mptr[0], &mrows[0], &l2[0], &inv_n[0], &coef[0, 0], &alpha[0, 0],
                            &n_iter[0], &status[0], &fval[0], &n_eval[0], logits_ptr, mean_ptr, n_threads)
    if rc == -3:
        raise ValueError("dual_train: logits need the models' starts all zero or all the same")
    if rc == -2:
        raise ValueError(f"dual_train: at most {AFL_DUAL_MAX_OUT} outputs, got {C}")
    if rc != 0:
        raise MemoryError("dual_train: could not allocate scratch memory")
