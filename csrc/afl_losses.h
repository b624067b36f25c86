/* Per-row losses of multinomial logistic regression for aflite_fast.
 *
 * Design:
 *  A. One training loop serves every loss: the kernel calls afl_row_loss() once per
 *     (row, model) with the row's logits; the loss is picked by an integer code with a
 *     switch the compiler hoists out of the row loop (no virtual call per row).
 *  B. For CE, GCE, truncated GCE, MAE and SCE the gradient w.r.t. the logits is
 *     w(p_y) * (p - e_y); each loss only supplies its value and w (afl_weight_*).
 *  C. Forward correction (Patrini et al. 2017) has its own branch: loss -log((T^T p)_y).
 *  D. A user loss is a C function pointer (e.g. a numba.cfunc) with the signature of
 *     afl_user_weight_fn: it returns the loss value and writes w(p_y).
 *  E. Arithmetic is in double; logits arrive in float32 from the GEMM.
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
    AFL_LOSS_FORWARD = 5,    /* params: T row-major C x C */
    AFL_LOSS_USER = 6        /* params: passed to the user function */
};

/* double loss(double p_y, const double *params, double *w_out) */
typedef double (*afl_user_weight_fn)(double, const double *, double *);

/* Smallest probability used inside a log, so that a row the model gets badly wrong has a
 * large but finite loss. */
#define AFL_PMIN 1e-30

/* Stable softmax of z[0:C] into p (double); returns the arg max (lowest index on ties). */
static inline int afl_softmax(int C, const float *z, double *p)
{
    int best = 0;
    double zmax = z[0];
    for (int c = 1; c < C; c++)
        if (z[c] > zmax) { zmax = z[c]; best = c; }
    double s = 0.0;
    for (int c = 0; c < C; c++) { p[c] = exp((double)z[c] - zmax); s += p[c]; }
    double inv = 1.0 / s;
    for (int c = 0; c < C; c++) p[c] *= inv;
    return best;
}

/* Loss of one row; writes g[c] = scale * d loss / d z_c as float32 into g (which may alias z). */
static inline double afl_row_loss(int code, const double *params, afl_user_weight_fn user,
                                  int C, float *z, int y, double *p, double scale, float *g)
{
    afl_softmax(C, z, p);
    double py = p[y];
    double loss, w;
    switch (code) {
    case AFL_LOSS_CE:
        loss = -log(py > AFL_PMIN ? py : AFL_PMIN);
        w = 1.0;
        break;
    case AFL_LOSS_GCE: {
        double q = params[0];
        double pq = pow(py, q);
        loss = (1.0 - pq) / q;
        w = pq;
        break;
    }
    case AFL_LOSS_GCE_TRUNC: {
        /* Zhang & Sabuncu 2018: rows with p_y <= k sit on the constant L_q(k) and are pruned. */
        double q = params[0], k = params[1];
        if (py > k) { double pq = pow(py, q); loss = (1.0 - pq) / q; w = pq; }
        else { loss = (1.0 - pow(k, q)) / q; w = 0.0; }
        break;
    }
    case AFL_LOSS_MAE:
        /* ||e_y - p||_1 = 2 - 2 p_y */
        loss = 2.0 - 2.0 * py;
        w = 2.0 * py;
        break;
    case AFL_LOSS_SCE: {
        /* alpha * CE + beta * reverse CE; RCE = -A (1 - p_y) with log 0 clipped to A. */
        double alpha = params[0], beta = params[1], A = params[2];
        loss = alpha * -log(py > AFL_PMIN ? py : AFL_PMIN) - beta * A * (1.0 - py);
        w = alpha - beta * A * py;
        break;
    }
    case AFL_LOSS_FORWARD: {
        /* q = T^T p; loss = -log q_y; d loss / d z_c = p_c - p_c T[c, y] / q_y */
        const double *T = params;
        double qy = 0.0;
        for (int c = 0; c < C; c++) qy += T[c * C + y] * p[c];
        if (qy < AFL_PMIN) qy = AFL_PMIN;
        loss = -log(qy);
        for (int c = 0; c < C; c++)
            g[c] = (float)(scale * (p[c] - p[c] * T[c * C + y] / qy));
        return loss;
    }
    case AFL_LOSS_USER:
        loss = user(py, params, &w);
        break;
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
