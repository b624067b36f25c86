/* Training in the row space: each model of a block by one thread, with the Gram matrix of the
 * rows' features instead of the features themselves.
 *
 * Design:
 *  A. Where a model trains on fewer rows t than it has columns D (small X: a few thousand
 *     rows of embeddings of a thousand dimensions), every L-BFGS vector of its run lies in
 *     span{x_i : i trains it} + span{u_1..u_C} + e (u_c: the feature weights of its warm
 *     start; e: the intercept), because the gradient of the mean loss plus the L2 term is
 *     X_S' r + l2 w (zero-mean form) + e sum(r), and with the identity H0 every search
 *     direction is a combination of gradients.  So a vector is held as its t + C + 1
 *     coefficients theta on that basis, together with G theta, G the basis' Gram matrix
 *     ([K_SS, XU_S, 0; XU_S', U'U, 0; 0, 0, 1], K = the centred features' Gram matrix):
 *     inner products a'G b, the logits of the training rows ((G theta) on the rows plus the
 *     intercept), and the L2 term all come from them.  One product with G per accepted step
 *     (that of the new gradient's coefficients: t^2 + 2 t C multiply-adds); the direction's
 *     G p follows from the stored pairs' G s, G y by the same recursion, the trial points'
 *     logits from G p.  A member pass costs 2 t D, so each round costs about t / (2 D) of
 *     the feature form's, without the preconditioner's D^2 product.
 *  B. With a preconditioner of rank r (the r leading eigenvectors V of the rows' second
 *     moment, see afl_dual_problem), the basis holds V's columns too, and H0 maps it into
 *     itself; its product costs t r.  The iterates are those of L-BFGS in the feature space
 *     with that H0 (scaled by s'y / y'H0y), the stopping rules the feature-space solver's: the largest gradient entry
 *     (of the features' gradient, not of the coefficients), tested exactly (X_S' c, t D)
 *     only when ||g||_2 (free: c'Gc) leaves it undecided: ||g||_inf <= ||g||_2 <=
 *     sqrt(D C) ||g||_inf, and no watched entry (t products each) exceeds the tolerance.  The
 *     watched entries are those largest at the model's last exact gradient; before its first,
 *     those of the features of largest second moment on the rows, which the caller names
 *     (32 of them; on 1,580 x 1,024 embeddings 29% of the exact products found an entry
 *     above the tolerance without them, 5% with them).  They only spare exact products: the
 *     answer is the product's either way.
 *  C. A model's K_SS is gathered once into the thread's scratch as its upper triangle (about
 *     t^2 / 2 floats; row a of K read from the model's row a on), and a product reads each
 *     stored entry once, for its row's dot product (16 float lanes, added in double by a fixed
 *     tree) and, as the column, for the rows after it (float sums over blocks of 64 rows, then
 *     in double; four rows a pass on AVX-512 and AVX2): a fixed order, so no bit depends on the
 *     thread count or on which other models the call holds.  When the call's rows are a subset
 *     of K's, their block of K is copied out once first (each model's gather then reads rows of
 *     n floats, not nk).  The weights come back in the feature space: U beta and the intercept
 *     here, X_S' alpha by the caller (one GEMM for all models).  A phase needs the models'
 *     logits on its rows and their mean, not each model's weights: the logits come from K
 *     (K alpha for all models by one GEMM of n^2 B C, the start, V and intercept terms from their
 *     products with the rows), where X W would take two products of n D B C (X_S' alpha, then
 *     X W).
 *  D. The whole model's solver (afl_dual_model.h) is compiled once per instruction set, as the
 *     member pass is, and reproducible per instruction set: its vector loops use the target's
 *     lanes (and fused multiply-adds where it has them), its inner products dual_ddot's 8
 *     lanes; the exact gradient's t x D product (the stopping check) sums float products over
 *     blocks of 64 rows in double, the GEMM's convention; the rank-r terms take float products
 *     summed in float over the r columns (their dot products in 16 float lanes summed in
 *     double), as the t x t product does; the binary cross-entropy takes its exps from
 *     exp_nonpositive (afl_exp_impl.h), its row terms in the target's lanes, its sums in 8 lanes
 *     (row i in lane i mod 8, a fixed tree) and its logs as the log of each lane's product of the
 *     rows' 1 + e, as the member pass's cross-entropy takes one log per few hundred rows.
 */
#ifndef AFL_DUAL_H
#define AFL_DUAL_H
#include <stdint.h>
#include "afl_losses.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Outputs a model may have (classes - 1). */
#define AFL_DUAL_MAX_OUT 63

typedef struct {
    int64_t nk;              /* K is nk x nk, row-major, stride ldk */
    int64_t ldk;
    const float *K;          /* Gram matrix of the centred features of the rows krow points to */
    const int64_t *krow;     /* n: row of K of each row of X */
    int64_t n, D, ldx;       /* the call's n rows of X (stride ldx), D columns, the last the ones column */
    const float *X;
    const int64_t *xrow;     /* NULL: row i of X is the call's row i; else row xrow[i] of X is */
    const int32_t *y;        /* n label codes */
    int C;                   /* outputs: classes - 1 (the reference-class form) */
    int loss_code;
    const double *params;
    afl_user_weight_fn user;
    double gtol, ftol, start_rtol;
    int max_iter, hist, max_ls;
    /* H0 (r > 0): (I + 11') x ((1 / mu) I + V diag(1 / (s sig_i + l2) - 1 / mu) V') on the
     * features, mu = s sig_rest + l2, and 1 / (s + l2) on the intercept: the inverse of
     * s X'X / n + l2 I with X'X / n replaced by its r leading eigenpairs (sig_i, the columns
     * of V) and sig_rest beyond them.  V (D - 1 x r, row-major) lies in the span of the rows
     * K is of, XV (nk x r, row-major) is X V on those rows (row of K order). */
    int r;
    const double *V, *Vt, *XV, *sig;   /* Vt: V transposed (r x D - 1) */
    double sig_rest, s;
    const float *XVt;        /* XV transposed (r x nk), float32: set by afl_dual_train itself */
    /* Features (< D - 1) whose gradient entries every model watches from its start (see B),
     * most telling first: the first AFL_DUAL_WATCH / C of them (at least one), each with its C
     * outputs, are taken.  NULL (n_watch 0): a model watches none until its first exact
     * gradient. */
    const int64_t *watch;
    int n_watch;
} afl_dual_problem;

/* The call's row i of X. */
static inline const float *afl_dual_xrow(const afl_dual_problem *pb, int64_t i)
{
    return pb->X + (pb->xrow ? pb->xrow[i] : i) * pb->ldx;
}

/* Gradient entries a model watches between exact gradients (see B). */
#define AFL_DUAL_WATCH 32

/* Train the B models (model j: rows mrows[mptr[j] .. mptr[j + 1]) of X, increasing), each from
 * coef[j] (D x C, row-major, double; the last row the intercept, unpenalised; the L2 term of
 * the reference-class form with weights l2[j]; the loss scaled by inv_n[j]).  The result is
 * coef[j] + X_rows' alpha_j: coef is overwritten with the first term, alpha (mptr[B] x C, in
 * the order of mrows) receives the coefficients of the second; n_iter, status, fval, n_eval as the feature-space solver
 * reports them.  A model whose coef is all zero is a cold start (its tolerance also
 * start_rtol times its first gradient's largest entry).  Unless logits is NULL, it receives
 * every model's logits on the n rows (n x B C, column k B + j: output k of model j, float32),
 * from K (the rows' alpha by one GEMM, the start, V and the intercept from their products
 * with the rows): no model's weights are formed for them; the models' starts must then be
 * all zero or all the same.  Unless mean_rows is NULL, it receives the mean over the models of
 * X_rows' alpha (D - 1 x C: the rows' part of the mean model).  krow must be increasing.
 * Returns 0, -1 if scratch memory could not be allocated, -3 if logits were asked for models of
 * different starts. */
int afl_dual_train(const afl_dual_problem *pb, int64_t B, const int64_t *mptr, const int32_t *mrows,
                   const double *l2, const double *inv_n, double *coef, double *alpha, int32_t *n_iter,
                   int32_t *status, double *fval, int32_t *n_eval, float *logits, double *mean_rows,
                   int n_threads);

/* Scratch bytes of one thread for models of up to t_max rows (the plan's memory count). */
int64_t afl_dual_scratch_bytes(int64_t t_max, int64_t D, int C, int r, int hist, int64_t nk);

#ifdef __cplusplus
}
#endif
#endif
