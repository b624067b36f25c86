/* Sparse (CSR) rows for aflite_fast: the member pass and prediction of many linear models.
 *
 * A. Rows are CSR: indptr (int64, n + 1), indices (int32, sorted, unique, < d) and values
 *    (float32) of the features; the model's weights hold d + 1 rows, the last the intercept
 *    (the ones column of the dense kernel, never stored in the CSR arrays).
 * B. Member pass (afl_sparse_eval): each model visits its own training rows only, in the
 *    order given (sorted positions), and sums its loss and gradient in double, row by row.
 *    One thread computes a model's sums from start to end (threads split the models), so no
 *    bit depends on the thread count or on the other models of the call.  Weights are read
 *    feature-major (a feature's C weights side by side) from a per-thread transposed copy, so
 *    a non-zero costs one cache line, not C of them.  With a column map (colmap, B x d) each
 *    model's weights hold only the columns its own rows use (row colmap[model][j] for column j,
 *    the intercept last): the solver's vectors shrink from d + 1 to those columns + 1 rows.
 * C. Prediction (afl_sparse_predict): every row scored by every model at once from the
 *    feature-major stack W (d + 1, B, C): a non-zero adds x * W[j] (B * C contiguous floats)
 *    to the row's logits.  Rows are independent (threads split the rows) and each row's counts
 *    are added in model order, so calling it on models in groups gives the same bits.
 * D. Newton-CG (afl_sparse_newton), the solver of the cross-entropy loss: each model over its
 *    own columns (k of them; local row k the intercept), weights feature-major (a column's C
 *    weights side by side), by one thread from start to end (threads split the models), so no
 *    bit depends on the thread count or on the other models of the call.  The model's rows are
 *    first copied as CSC over its own columns, so that every pass reads the weight vectors in
 *    order and only the rows' small n x C arrays at random (a CSR pass would read vectors of
 *    (k + 1) C doubles, megabytes, at random: one cache miss a non-zero).  Each step solves
 *    H s = -g by conjugate gradients preconditioned by the Hessian's diagonal (each
 *    Hessian-vector product one pass over the model's rows, from the rows' probabilities at
 *    the current point), to a residual of min(0.5, sqrt|g|) |g|, then backtracks from the
 *    full step until the Armijo condition holds.  It stops, as the L-BFGS solver does, when
 *    the largest gradient entry is at most gtol (a cold start: also at most start_rtol times
 *    its value at zero) or the objective's relative decrease is at most ftol.  State per
 *    model: 10 vectors of (k + 1) C doubles, 3 C doubles per training row, and the CSC copy
 *    (8 bytes a non-zero, 8 a column, 4 a row).
 */
#ifndef AFL_SPARSE_H
#define AFL_SPARSE_H
#include <stdint.h>
#include "afl_losses.h"

int afl_sparse_eval(const int64_t *indptr, const int32_t *indices, const float *data, const int32_t *y,
                    int64_t D, int64_t Dp, int C, int64_t nA, const int64_t *rptr, const int64_t *rows,
                    const int64_t *model, const int32_t *colmap, int64_t d, const float *W, const double *scale, int loss_code, const double *params,
                    afl_user_weight_fn user, double *out, int n_threads);

int afl_sparse_predict(int64_t n, const int64_t *indptr, const int32_t *indices, const float *data,
                       const int32_t *y, int64_t D, int64_t B, int C, const float *W,
                       const uint8_t *heldout, int64_t ldh, int32_t *seen, int32_t *correct,
                       double *prob_label, double *proba_sum, int n_threads);

void afl_sparse_mark_columns(const int64_t *indptr, const int32_t *indices, int64_t n_rows, const int64_t *rows,
                             uint8_t *mark);

/* the most classes afl_sparse_newton takes (per-column sums on the stack) */
#define AFL_NEWTON_MAX_C 64

enum {
    AFL_SOLVER_CONVERGED = 0,
    AFL_SOLVER_MAX_ITER = 1,
    AFL_SOLVER_LINE_SEARCH = 2,
    AFL_SOLVER_NOT_FINITE = 3
};

/* Newton-CG (D) for B models: model a trains on rows[rptr[a]:rptr[a+1]] over the columns
 * cols[cptr[a]:cptr[a+1]] (sorted, < d) and its weights w[wptr[a]:] ((k + 1) C doubles,
 * feature-major, intercept last; start in, solution out).  Returns -1 when scratch memory
 * could not be allocated, -2 for more than AFL_NEWTON_MAX_C classes, -3 when a model's rows use
 * a column not among its columns.  precond 0: conjugate
 * gradients without the diagonal preconditioner (for measurements). */
int afl_sparse_newton(const int64_t *indptr, const int32_t *indices, const float *data, const int32_t *y, int C,
                      int64_t d, int64_t B, const int64_t *rptr, const int64_t *rows, const int64_t *cptr,
                      const int64_t *cols, double *w, const int64_t *wptr, const double *l2, double gtol,
                      double start_rtol, double ftol, int max_iter, int max_ls, int max_cg, double cg_eta, double cg_abs, int precond, int32_t *n_iter,
                      int32_t *status, double *fval, int32_t *n_eval, int32_t *n_hvp, int n_threads);

#endif
