/* Sparse member pass and prediction (see afl_sparse.h for the design). */
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "afl_omp.h"
#include "afl_sparse.h"

int afl_sparse_eval(const int64_t *indptr, const int32_t *indices, const float *data, const int32_t *y,
                    int64_t D, int64_t Dp, int C, int64_t nA, const int64_t *rptr, const int64_t *rows,
                    const int64_t *model, const int32_t *colmap, int64_t d,
                    const float *W, const double *scale, int loss_code, const double *params,
                    afl_user_weight_fn user, double *out, int n_threads)
{
    const int64_t P = (int64_t)C * Dp, stride = P + 1, ones = D - 1;
    if (nA <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > nA) n_threads = (int)nA;
    int rc = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads) reduction(|:rc)
#endif
    {
        /* feature-major copies of one model's weights and gradient sums */
        float *wt = (float *)malloc((size_t)(D * C) * sizeof(float));
        double *gt = (double *)malloc((size_t)(D * C) * sizeof(double));
        double *zd = (double *)malloc((size_t)C * sizeof(double));
        double *p = (double *)malloc((size_t)C * sizeof(double));
        float *z = (float *)malloc((size_t)C * sizeof(float));
        float *g = (float *)malloc((size_t)C * sizeof(float));
        if (!wt || !gt || !zd || !p || !z || !g) rc = 1;
        /* every thread runs the loop (the barrier at its end), with nothing to do when short */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t a = 0; a < nA; a++) {
            if (!wt || !gt || !zd || !p || !z || !g) continue;
            const float *w = W + a * P;
            /* the model's own columns: global column -> its row of the weights (or the identity) */
            const int32_t *cm = colmap ? colmap + model[a] * d : NULL;
            for (int c = 0; c < C; c++)
                for (int64_t r = 0; r < D; r++) wt[r * C + c] = w[c * Dp + r];
            memset(gt, 0, (size_t)(D * C) * sizeof(double));
            double loss = 0.0;
            for (int64_t k = rptr[a]; k < rptr[a + 1]; k++) {
                const int64_t i = rows[k];
                const int64_t e0 = indptr[i], e1 = indptr[i + 1];
                for (int c = 0; c < C; c++) zd[c] = wt[ones * C + c];
                for (int64_t e = e0; e < e1; e++) {
                    const float *wr = wt + (int64_t)(cm ? cm[indices[e]] : indices[e]) * C;
                    const double v = data[e];
                    for (int c = 0; c < C; c++) zd[c] += v * wr[c];
                }
                for (int c = 0; c < C; c++) z[c] = (float)zd[c];
                loss += afl_row_loss(loss_code, params, user, C, z, y[i], p, scale[a], g);
                for (int64_t e = e0; e < e1; e++) {
                    double *gr = gt + (int64_t)(cm ? cm[indices[e]] : indices[e]) * C;
                    const double v = data[e];
                    for (int c = 0; c < C; c++) gr[c] += (double)g[c] * v;
                }
                for (int c = 0; c < C; c++) gt[ones * C + c] += (double)g[c];
            }
            double *o = out + a * stride;
            for (int c = 0; c < C; c++) {
                for (int64_t r = 0; r < D; r++) o[c * Dp + r] = gt[r * C + c];
                for (int64_t r = D; r < Dp; r++) o[c * Dp + r] = 0.0;
            }
            o[P] = loss;
        }
        free(wt); free(gt); free(zd); free(p); free(z); free(g);
    }
    return rc ? -1 : 0;
}

int afl_sparse_predict(int64_t n, const int64_t *indptr, const int32_t *indices, const float *data,
                       const int32_t *y, int64_t D, int64_t B, int C, const float *W,
                       const uint8_t *heldout, int64_t ldh, int32_t *seen, int32_t *correct,
                       double *prob_label, double *proba_sum, int n_threads)
{
    const int64_t BC = B * (int64_t)C, ones = D - 1;
    if (n <= 0 || B <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    int rc = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads) reduction(|:rc)
#endif
    {
        double *z = (double *)malloc((size_t)BC * sizeof(double));
        double *p = (double *)malloc((size_t)C * sizeof(double));
        if (!z || !p) rc = 1;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
        for (int64_t i = 0; i < n; i++) {
            if (!z || !p) continue;
            const uint8_t *h = heldout + i * ldh;
            int any = 0;
            for (int64_t b = 0; b < B; b++) any |= h[b];
            if (!any) continue;
            const float *w1 = W + ones * BC;
            for (int64_t q = 0; q < BC; q++) z[q] = w1[q];
            for (int64_t e = indptr[i]; e < indptr[i + 1]; e++) {
                const float *wr = W + (int64_t)indices[e] * BC;
                const double v = data[e];
                for (int64_t q = 0; q < BC; q++) z[q] += v * wr[q];
            }
            /* counts added in model order: the same bits whatever the grouping of the models */
            for (int64_t b = 0; b < B; b++) {
                if (!h[b]) continue;
                const double *zb = z + b * C;
                int best = 0;
                double zmax = zb[0];
                for (int c = 1; c < C; c++)
                    if (zb[c] > zmax) { zmax = zb[c]; best = c; }
                double s = 0.0;
                for (int c = 0; c < C; c++) { p[c] = exp(zb[c] - zmax); s += p[c]; }
                const double inv = 1.0 / s;
                seen[i] += 1;
                if (y[i] >= 0) {
                    correct[i] += best == y[i];
                    prob_label[i] += p[y[i]] * inv;
                }
                if (proba_sum)
                    for (int c = 0; c < C; c++) proba_sum[i * C + c] += p[c] * inv;
            }
        }
        free(z); free(p);
    }
    return rc ? -1 : 0;
}

void afl_sparse_mark_columns(const int64_t *indptr, const int32_t *indices, int64_t n_rows, const int64_t *rows,
                             uint8_t *mark)
{
    /* mark[j] = 1 for every column j that one of the rows uses (mark zeroed by the caller) */
    for (int64_t k = 0; k < n_rows; k++)
        for (int64_t e = indptr[rows[k]]; e < indptr[rows[k] + 1]; e++) mark[indices[e]] = 1;
}

/* ---- Newton-CG for the cross-entropy loss (afl_sparse.h, D) ---------------------------------- */

typedef struct {
    const int64_t *indptr;
    const int32_t *indices;
    const float *data;
    const int32_t *y;
    const int64_t *rows;     /* the model's training rows */
    int64_t n;               /* how many */
    const int32_t *cm;       /* global column -> local row (filled for the model's columns) */
    int64_t k;               /* the model's columns; row k of the weights is the intercept */
    int C;
    double inv_n, l2;
} afl_newton_model;

/* Objective (mean row loss plus l2 / 2 times the squared feature weights), its gradient g,
 * each row's probabilities (prob, n x C) and the diagonal of the Hessian (hd; the intercept
 * row's C entries replaced by their mean, so that the preconditioner keeps the intercept's
 * class sum); all in double, rows in the order given. */
static double newton_eval(const afl_newton_model *M, const double *w, double *g, double *prob, double *hd,
                          double *zd)
{
    const int C = M->C;
    const int64_t k = M->k, P = (k + 1) * (int64_t)C;
    const double *wi = w + k * C;
    double loss = 0.0;
    memset(g, 0, (size_t)P * sizeof(double));
    memset(hd, 0, (size_t)P * sizeof(double));
    for (int64_t q = 0; q < M->n; q++) {
        const int64_t i = M->rows[q];
        const int64_t e0 = M->indptr[i], e1 = M->indptr[i + 1];
        double *p = prob + q * C;
        for (int c = 0; c < C; c++) zd[c] = wi[c];
        for (int64_t e = e0; e < e1; e++) {
            const double *wr = w + (int64_t)M->cm[M->indices[e]] * C;
            const double v = M->data[e];
            for (int c = 0; c < C; c++) zd[c] += v * wr[c];
        }
        double zmax = zd[0];
        for (int c = 1; c < C; c++)
            if (zd[c] > zmax) zmax = zd[c];
        double s = 0.0;
        for (int c = 0; c < C; c++) { p[c] = exp(zd[c] - zmax); s += p[c]; }
        const double inv = 1.0 / s;
        for (int c = 0; c < C; c++) p[c] *= inv;
        const int yi = M->y[i];
        loss += zmax + log(s) - zd[yi];
        /* zd now holds the row's gradient of the loss by the logits, then the Hessian's diagonal */
        for (int64_t e = e0; e < e1; e++) {
            const int64_t r = (int64_t)M->cm[M->indices[e]] * C;
            const double v = M->data[e];
            for (int c = 0; c < C; c++) {
                const double gc = p[c] - (c == yi);
                g[r + c] += v * gc;
                hd[r + c] += v * v * (p[c] * (1.0 - p[c]));
            }
        }
        for (int c = 0; c < C; c++) {
            g[k * C + c] += p[c] - (c == yi);
            hd[k * C + c] += p[c] * (1.0 - p[c]);
        }
    }
    double reg = 0.0;
    for (int64_t r = 0; r < k * C; r++) {
        reg += w[r] * w[r];
        g[r] = g[r] * M->inv_n + M->l2 * w[r];
        hd[r] = hd[r] * M->inv_n + M->l2;
    }
    double hm = 0.0;
    for (int c = 0; c < C; c++) {
        g[k * C + c] *= M->inv_n;
        hm += hd[k * C + c];
    }
    hm = hm * M->inv_n / C;
    for (int c = 0; c < C; c++) hd[k * C + c] = hm > 0.0 ? hm : 1.0;
    return loss * M->inv_n + 0.5 * M->l2 * reg;
}

/* out = H v: the Hessian of the objective at the point whose probabilities are prob. */
static void newton_hvp(const afl_newton_model *M, const double *prob, const double *v, double *out, double *u)
{
    const int C = M->C;
    const int64_t k = M->k, P = (k + 1) * (int64_t)C;
    const double *vi = v + k * C;
    memset(out, 0, (size_t)P * sizeof(double));
    for (int64_t q = 0; q < M->n; q++) {
        const int64_t i = M->rows[q];
        const int64_t e0 = M->indptr[i], e1 = M->indptr[i + 1];
        const double *p = prob + q * C;
        for (int c = 0; c < C; c++) u[c] = vi[c];
        for (int64_t e = e0; e < e1; e++) {
            const double *vr = v + (int64_t)M->cm[M->indices[e]] * C;
            const double x = M->data[e];
            for (int c = 0; c < C; c++) u[c] += x * vr[c];
        }
        double pu = 0.0;
        for (int c = 0; c < C; c++) pu += p[c] * u[c];
        for (int c = 0; c < C; c++) u[c] = p[c] * (u[c] - pu);
        for (int64_t e = e0; e < e1; e++) {
            double *o = out + (int64_t)M->cm[M->indices[e]] * C;
            const double x = M->data[e];
            for (int c = 0; c < C; c++) o[c] += x * u[c];
        }
        for (int c = 0; c < C; c++) out[k * C + c] += u[c];
    }
    for (int64_t r = 0; r < k * C; r++) out[r] = out[r] * M->inv_n + M->l2 * v[r];
    for (int c = 0; c < C; c++) out[k * C + c] *= M->inv_n;
}

static double vdot(const double *a, const double *b, int64_t P)
{
    double s = 0.0;
    for (int64_t r = 0; r < P; r++) s += a[r] * b[r];
    return s;
}

static double vmaxabs(const double *a, int64_t P)
{
    double m = 0.0;
    for (int64_t r = 0; r < P; r++)
        if (fabs(a[r]) > m) m = fabs(a[r]);
    return m;
}

/* One model: Newton steps from w (P = (k + 1) C doubles, updated in place).  Returns -1 when
 * scratch could not be allocated. */
static int newton_solve(const afl_newton_model *M, double *w, double gtol, double start_rtol, double ftol,
                        int max_iter, int max_ls, int max_cg, int32_t *n_iter, int32_t *status, double *fval,
                        int32_t *n_eval, int32_t *n_hvp)
{
    const int C = M->C;
    const int64_t P = (M->k + 1) * (int64_t)C, nC = M->n * (int64_t)C;
    double *buf = (double *)malloc((size_t)(10 * P + 2 * nC + 2 * C) * sizeof(double));
    if (!buf) return -1;
    double *g = buf, *gt = g + P, *wt = gt + P, *hd = wt + P, *hdt = hd + P, *s = hdt + P, *r = s + P,
           *z = r + P, *dv = z + P, *Hd = dv + P, *prob = Hd + P, *probt = prob + nC, *zd = probt + nC;
    int cold = 1;
    for (int64_t q = 0; q < P; q++)
        if (w[q] != 0.0) { cold = 0; break; }
    double f = newton_eval(M, w, g, prob, hd, zd);
    *n_eval = 1; *n_iter = 0; *n_hvp = 0;
    *fval = f;
    if (!isfinite(f)) { *status = AFL_SOLVER_NOT_FINITE; free(buf); return 0; }
    const double g0 = vmaxabs(g, P);
    const double tol = cold && start_rtol * g0 < gtol ? start_rtol * g0 : gtol;
    if (g0 <= tol) { *status = AFL_SOLVER_CONVERGED; free(buf); return 0; }
    *status = AFL_SOLVER_MAX_ITER;
    while (*n_iter < max_iter) {
        /* the Newton direction: preconditioned CG on H s = -g, to a residual of eta |g| */
        const double gnorm = sqrt(vdot(g, g, P));
        const double eta = sqrt(gnorm) < 0.5 ? sqrt(gnorm) : 0.5;
        for (int64_t q = 0; q < P; q++) { s[q] = 0.0; r[q] = -g[q]; z[q] = r[q] / hd[q]; dv[q] = z[q]; }
        double rz = vdot(r, z, P);
        for (int it = 0; it < max_cg; it++) {
            newton_hvp(M, prob, dv, Hd, zd);
            *n_hvp += 1;
            const double dHd = vdot(dv, Hd, P);
            if (!(dHd > 0.0)) {
                if (it == 0) memcpy(s, dv, (size_t)P * sizeof(double));
                break;
            }
            const double alpha = rz / dHd;
            double rr = 0.0;
            for (int64_t q = 0; q < P; q++) {
                s[q] += alpha * dv[q];
                r[q] -= alpha * Hd[q];
                rr += r[q] * r[q];
            }
            if (sqrt(rr) <= eta * gnorm) break;
            double rz_new = 0.0;
            for (int64_t q = 0; q < P; q++) { z[q] = r[q] / hd[q]; rz_new += r[q] * z[q]; }
            const double beta = rz_new / rz;
            rz = rz_new;
            for (int64_t q = 0; q < P; q++) dv[q] = z[q] + beta * dv[q];
        }
        double gs = vdot(g, s, P);
        if (!(gs < 0.0)) {
            /* not a descent direction (rounding only: H is positive definite): the preconditioned gradient */
            for (int64_t q = 0; q < P; q++) s[q] = -g[q] / hd[q];
            gs = vdot(g, s, P);
        }
        /* backtracking line search from the Newton step (Armijo) */
        double step = 1.0, ft = 0.0;
        int accepted = 0;
        for (int ls = 0; ls <= max_ls; ls++) {
            for (int64_t q = 0; q < P; q++) wt[q] = w[q] + step * s[q];
            ft = newton_eval(M, wt, gt, probt, hdt, zd);
            *n_eval += 1;
            if (isfinite(ft) && ft <= f + 1e-4 * step * gs) { accepted = 1; break; }
            if (isfinite(ft)) {
                const double den = 2.0 * (ft - f - gs * step);
                double a_new = den > 0.0 ? -gs * step * step / den : 0.5 * step;
                if (a_new < 0.1 * step) a_new = 0.1 * step;
                if (a_new > 0.5 * step) a_new = 0.5 * step;
                step = a_new;
            } else {
                step *= 0.1;
            }
        }
        if (!accepted) { *status = AFL_SOLVER_LINE_SEARCH; break; }
        double *t;
        t = w; memcpy(w, wt, (size_t)P * sizeof(double)); (void)t;
        t = g; g = gt; gt = t;
        t = hd; hd = hdt; hdt = t;
        t = prob; prob = probt; probt = t;
        const double f_old = f;
        f = ft;
        *fval = f;
        *n_iter += 1;
        if (vmaxabs(g, P) <= tol) { *status = AFL_SOLVER_CONVERGED; break; }
        double den = fabs(f_old) > fabs(f) ? fabs(f_old) : fabs(f);
        if (den < 1.0) den = 1.0;
        if (f_old - f <= ftol * den) { *status = AFL_SOLVER_CONVERGED; break; }
    }
    free(buf);
    return 0;
}

int afl_sparse_newton(const int64_t *indptr, const int32_t *indices, const float *data, const int32_t *y, int C,
                      int64_t d, int64_t B, const int64_t *rptr, const int64_t *rows, const int64_t *cptr,
                      const int64_t *cols, double *w, const int64_t *wptr, const double *l2, double gtol,
                      double start_rtol, double ftol, int max_iter, int max_ls, int max_cg, int32_t *n_iter,
                      int32_t *status, double *fval, int32_t *n_eval, int32_t *n_hvp, int n_threads)
{
    if (B <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > B) n_threads = (int)B;
    int rc = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads) reduction(|:rc)
#endif
    {
        int32_t *cm = (int32_t *)malloc((size_t)(d > 0 ? d : 1) * sizeof(int32_t));
        if (!cm) rc = 1;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t a = 0; a < B; a++) {
            if (!cm) continue;
            const int64_t k = cptr[a + 1] - cptr[a];
            for (int64_t j = 0; j < k; j++) cm[cols[cptr[a] + j]] = (int32_t)j;
            afl_newton_model M = {indptr, indices, data, y, rows + rptr[a], rptr[a + 1] - rptr[a], cm, k, C,
                                  1.0 / (double)(rptr[a + 1] - rptr[a]), l2[a]};
            if (newton_solve(&M, w + wptr[a], gtol, start_rtol, ftol, max_iter, max_ls, max_cg, n_iter + a,
                             status + a, fval + a, n_eval + a, n_hvp + a) != 0)
                rc = 1;
        }
        free(cm);
    }
    return rc ? -1 : 0;
}
