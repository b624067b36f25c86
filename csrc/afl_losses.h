/* Per-row losses of multinomial logistic regression for aflite_fast.
 *
 * Design:
 *  A. One training loop serves every loss: the kernel calls afl_row_loss() once per
 *     (row, model) with the row's logits; the loss is picked by an integer code with a
 *     switch (an inlined branch on a loop-invariant value, not a virtual call per row).
 *  B. For CE, GCE, truncated GCE, MAE and SCE the gradient w.r.t. the logits is
 *     w(p_y) * (p - e_y), because every one of them is a function L(p_y) of the label's
 *     probability alone and d p_y / d z_c = p_y (e_y - p)_c, so w = -p_y L'(p_y).
 *     Each loss only supplies its value and w.
 *  C. Forward correction (Patrini et al. 2017) has its own branch: loss -log((T^T p)_y),
 *     evaluated in the log domain so that it stays finite and consistent with its gradient.
 *  D. A user loss is a C function pointer (e.g. a numba.cfunc, see aflite_fast/core/user_losses.py)
 *     with the signature of afl_user_weight_fn: it returns L(p_y) and writes w(p_y).
 *  E. Arithmetic is in double; logits arrive in float32 from the member pass.  Log-probabilities
 *     come from the log-sum-exp of the logits, never from log(p) of an underflowed p, so
 *     CE and SCE have no clipping that would make the value disagree with the gradient.
 */
#ifndef AFL_LOSSES_H
#define AFL_LOSSES_H
#include <math.h>

enum {
    AFL_LOSS_CE = 0,
    AFL_LOSS_GCE = 1,        /* params: q */
    AFL_LOSS_GCE_TRUNC = 2,  /* params: q, k */
    AFL_LOSS_MAE = 3,
    AFL_LOSS_SCE = 4,        /* params: alpha, beta, A (log of the clipped zero, -4) */
    AFL_LOSS_FORWARD = 5,    /* params: T row-major C x C, T[i, j] = P(noisy j | true i) */
    AFL_LOSS_USER = 6        /* params: passed to the user function */
};

/* double loss(double p_y, const double *params, double *w_out) */
typedef double (*afl_user_weight_fn)(double, const double *, double *);

/* Softmax of z into p; returns log-sum-exp(z) (so log p_c = z_c - lse exactly). */
static inline double afl_softmax_lse(int C, const float *z, double *p)
{
    double zmax = z[0];
    for (int c = 1; c < C; c++)
        if (z[c] > zmax) zmax = z[c];
    double s = 0.0;
    for (int c = 0; c < C; c++) { p[c] = exp((double)z[c] - zmax); s += p[c]; }
    double inv = 1.0 / s;
    for (int c = 0; c < C; c++) p[c] *= inv;
    return zmax + log(s);
}

/* Forward correction: loss -log(sum_c T[c, y] p_c); g = scale * (p - pi) with the
 * "posterior" pi_c = T[c, y] p_c / sum_k T[k, y] p_k.  Both are evaluated relative to the
 * largest logit among the classes that can produce label y, so neither underflows. */
static inline double afl_forward_loss(int C, const double *T, const float *z, int y,
                                      const double *p, double lse, double scale, float *g)
{
    double m = -INFINITY;
    for (int c = 0; c < C; c++)
        if (T[c * C + y] > 0.0 && (double)z[c] > m) m = z[c];
    if (m == -INFINITY) {
        /* label y cannot be produced by T (rejected by core/losses.py; kept finite-safe here) */
        for (int c = 0; c < C; c++) g[c] = 0.0f;
        return INFINITY;
    }
    double t = 0.0;
    for (int c = 0; c < C; c++)
        if (T[c * C + y] > 0.0) t += T[c * C + y] * exp((double)z[c] - m);
    double loss = lse - m - log(t);
    for (int c = 0; c < C; c++) {
        double pi = T[c * C + y] > 0.0 ? T[c * C + y] * exp((double)z[c] - m) / t : 0.0;
        g[c] = (float)(scale * (p[c] - pi));
    }
    return loss;
}

/* Loss of one row; writes g[c] = scale * d loss / d z_c as float32 into g (which may alias z).
 * p is scratch of length C. */
static inline double afl_row_loss(int code, const double *params, afl_user_weight_fn user,
                                  int C, float *z, int y, double *p, double scale, float *g)
{
    double lse = afl_softmax_lse(C, z, p);
    double py = p[y];
    double loss, w;
    switch (code) {
    case AFL_LOSS_CE:
        loss = lse - (double)z[y];   /* -log p_y */
        w = 1.0;
        break;
    case AFL_LOSS_GCE: {
        /* Zhang & Sabuncu 2018: L_q = (1 - p_y^q) / q; w = p_y^q */
        double q = params[0];
        double pq = pow(py, q);
        loss = (1.0 - pq) / q;
        w = pq;
        break;
    }
    case AFL_LOSS_GCE_TRUNC: {
        /* Zhang & Sabuncu 2018, truncated L_q: rows with p_y <= k sit on the constant L_q(k)
         * (zero gradient: pruned).  From a uniform start every p_y = 1/C <= k, so this loss
         * must be warm-started (losses.LossSpec.warmup; see core/losses.py). */
        double q = params[0], k = params[1];
        if (py > k) { double pq = pow(py, q); loss = (1.0 - pq) / q; w = pq; }
        else { loss = (1.0 - pow(k, q)) / q; w = 0.0; }
        break;
    }
    case AFL_LOSS_MAE:
        /* Ghosh et al. 2017: ||e_y - p||_1 = 2 - 2 p_y */
        loss = 2.0 - 2.0 * py;
        w = 2.0 * py;
        break;
    case AFL_LOSS_SCE: {
        /* Wang et al. 2019: alpha * CE + beta * RCE; RCE = -sum_c p_c log(e_y)_c with
         * log 0 clipped to A, i.e. -A (1 - p_y). */
        double alpha = params[0], beta = params[1], A = params[2];
        loss = alpha * (lse - (double)z[y]) - beta * A * (1.0 - py);
        w = alpha - beta * A * py;
        break;
    }
    case AFL_LOSS_FORWARD:
        return afl_forward_loss(C, params, z, y, p, lse, scale, g);
    case AFL_LOSS_USER:
        if (user != NULL) { loss = user(py, params, &w); break; }
        /* fall through: no function given */
    default:
        loss = NAN;
        w = NAN;
    }
    double sw = scale * w;
    for (int c = 0; c < C; c++) g[c] = (float)(sw * p[c]);
    g[y] = (float)(sw * (p[y] - 1.0));
    return loss;
}
#endif
