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
    const int64_t *colptr;   /* the model's own rows as CSC over its own columns: column j's */
    const int32_t *rowind;   /* entries colptr[j]..colptr[j + 1], rows (0..n-1) increasing */
    const float *val;
    const int32_t *y;        /* the rows' labels */
    int64_t n;               /* its training rows */
    int64_t k;               /* its columns; row k of the weights is the intercept */
    int C;
    double inv_n, l2;
} afl_newton_model;

/* Z (n x C) = the rows' products with w (the intercept included), column by column: the weights
 * are read in order and only the rows' small array at random. */
static void newton_rows_times(const afl_newton_model *M, const double *w, double *Z)
{
    const int C = M->C;
    const int64_t k = M->k;
    for (int64_t q = 0; q < M->n; q++)
        for (int c = 0; c < C; c++) Z[q * C + c] = w[k * C + c];
    for (int64_t j = 0; j < k; j++) {
        const double *wj = w + j * C;
        for (int64_t e = M->colptr[j]; e < M->colptr[j + 1]; e++) {
            double *z = Z + (int64_t)M->rowind[e] * C;
            const double x = M->val[e];
            for (int c = 0; c < C; c++) z[c] += x * wj[c];
        }
    }
}

/* Objective (mean row loss plus l2 / 2 times the squared feature weights), its gradient g,
 * each row's probabilities (prob, n x C) and the diagonal of the Hessian (hd; the intercept
 * row's C entries replaced by their mean, so that the preconditioner keeps the intercept's
 * class sum); all in double.  Z: n x C scratch. */
static double newton_eval(const afl_newton_model *M, const double *w, double *g, double *prob, double *hd,
                          double *Z)
{
    const int C = M->C;
    const int64_t k = M->k;
    double loss = 0.0;
    newton_rows_times(M, w, Z);
    for (int c = 0; c < C; c++) { g[k * C + c] = 0.0; hd[k * C + c] = 0.0; }
    for (int64_t q = 0; q < M->n; q++) {
        const double *z = Z + q * C;
        double *p = prob + q * C;
        double zmax = z[0];
        for (int c = 1; c < C; c++)
            if (z[c] > zmax) zmax = z[c];
        double s = 0.0;
        for (int c = 0; c < C; c++) { p[c] = exp(z[c] - zmax); s += p[c]; }
        const double inv = 1.0 / s;
        for (int c = 0; c < C; c++) p[c] *= inv;
        const int yi = M->y[q];
        loss += zmax + log(s) - z[yi];
        for (int c = 0; c < C; c++) {
            g[k * C + c] += p[c] - (c == yi);
            hd[k * C + c] += p[c] * (1.0 - p[c]);
        }
    }
    double reg = 0.0;
    for (int64_t j = 0; j < k; j++) {
        double gj[AFL_NEWTON_MAX_C], hj[AFL_NEWTON_MAX_C];
        for (int c = 0; c < C; c++) { gj[c] = 0.0; hj[c] = 0.0; }
        for (int64_t e = M->colptr[j]; e < M->colptr[j + 1]; e++) {
            const int64_t q = M->rowind[e];
            const double *p = prob + q * C;
            const double x = M->val[e];
            const int yi = M->y[q];
            for (int c = 0; c < C; c++) {
                gj[c] += x * (p[c] - (c == yi));
                hj[c] += x * x * (p[c] * (1.0 - p[c]));
            }
        }
        for (int c = 0; c < C; c++) {
            const double wv = w[j * C + c];
            reg += wv * wv;
            g[j * C + c] = gj[c] * M->inv_n + M->l2 * wv;
            hd[j * C + c] = hj[c] * M->inv_n + M->l2;
        }
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

/* out = H v: the Hessian of the objective at the point whose probabilities are prob.  U: n x C
 * scratch. */
static void newton_hvp(const afl_newton_model *M, const double *prob, const double *v, double *out, double *U)
{
    const int C = M->C;
    const int64_t k = M->k;
    newton_rows_times(M, v, U);
    for (int c = 0; c < C; c++) out[k * C + c] = 0.0;
    for (int64_t q = 0; q < M->n; q++) {
        double *u = U + q * C;
        const double *p = prob + q * C;
        double pu = 0.0;
        for (int c = 0; c < C; c++) pu += p[c] * u[c];
        for (int c = 0; c < C; c++) {
            u[c] = p[c] * (u[c] - pu);
            out[k * C + c] += u[c];
        }
    }
    for (int64_t j = 0; j < k; j++) {
        double oj[AFL_NEWTON_MAX_C];
        for (int c = 0; c < C; c++) oj[c] = 0.0;
        for (int64_t e = M->colptr[j]; e < M->colptr[j + 1]; e++) {
            const double *u = U + (int64_t)M->rowind[e] * C;
            const double x = M->val[e];
            for (int c = 0; c < C; c++) oj[c] += x * u[c];
        }
        for (int c = 0; c < C; c++) out[j * C + c] = oj[c] * M->inv_n + M->l2 * v[j * C + c];
    }
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
                        int max_iter, int max_ls, int max_cg, double cg_eta, double cg_abs, int precond,
                        int32_t *n_iter, int32_t *status, double *fval, int32_t *n_eval, int32_t *n_hvp)
{
    const int C = M->C;
    const int64_t P = (M->k + 1) * (int64_t)C, nC = M->n * (int64_t)C;
    double *buf = (double *)malloc((size_t)(10 * P + 3 * nC) * sizeof(double));
    if (!buf) return -1;
    double *g = buf, *gt = g + P, *wt = gt + P, *hd = wt + P, *hdt = hd + P, *s = hdt + P, *r = s + P,
           *z = r + P, *dv = z + P, *Hd = dv + P, *prob = Hd + P, *probt = prob + nC, *Z = probt + nC;
    int cold = 1;
    for (int64_t q = 0; q < P; q++)
        if (w[q] != 0.0) { cold = 0; break; }
    double f = newton_eval(M, w, g, prob, hd, Z);
    *n_eval = 1; *n_iter = 0; *n_hvp = 0;
    *fval = f;
    if (!isfinite(f)) { *status = AFL_SOLVER_NOT_FINITE; free(buf); return 0; }
    const double g0 = vmaxabs(g, P);
    const double tol = cold && start_rtol * g0 < gtol ? start_rtol * g0 : gtol;
    if (g0 <= tol) { *status = AFL_SOLVER_CONVERGED; free(buf); return 0; }
    *status = AFL_SOLVER_MAX_ITER;
    while (*n_iter < max_iter) {
        /* the Newton direction: conjugate gradients on H s = -g preconditioned by diag(H), to a
         * residual of eta |g| or a largest residual entry of cg_abs * tol */
        const double gnorm = sqrt(vdot(g, g, P));
        const double eta = sqrt(gnorm) < cg_eta ? sqrt(gnorm) : cg_eta;
        double rz = 0.0;
        for (int64_t q = 0; q < P; q++) {
            s[q] = 0.0; r[q] = -g[q]; z[q] = precond ? r[q] / hd[q] : r[q]; dv[q] = z[q];
            rz += r[q] * z[q];
        }
        for (int it = 0; it < max_cg; it++) {
            newton_hvp(M, prob, dv, Hd, Z);
            *n_hvp += 1;
            const double dHd = vdot(dv, Hd, P);
            if (!(dHd > 0.0)) {
                if (it == 0) memcpy(s, dv, (size_t)P * sizeof(double));
                break;
            }
            const double alpha = rz / dHd;
            double rr = 0.0, rmax = 0.0, rz_new = 0.0;
            for (int64_t q = 0; q < P; q++) {
                s[q] += alpha * dv[q];
                r[q] -= alpha * Hd[q];
                rr += r[q] * r[q];
                if (fabs(r[q]) > rmax) rmax = fabs(r[q]);
                z[q] = precond ? r[q] / hd[q] : r[q];
                rz_new += r[q] * z[q];
            }
            /* r = -(g + H s): the gradient the quadratic model predicts after the step */
            if (sqrt(rr) <= eta * gnorm || rmax <= cg_abs * tol) break;
            const double beta = rz_new / rz;
            rz = rz_new;
            for (int64_t q = 0; q < P; q++) dv[q] = z[q] + beta * dv[q];
        }
        double gs = vdot(g, s, P);
        if (!(gs < 0.0)) {
            /* not a descent direction (rounding only: H is positive definite): the preconditioned gradient */
            for (int64_t q = 0; q < P; q++) s[q] = precond ? -g[q] / hd[q] : -g[q];
            gs = vdot(g, s, P);
        }
        /* backtracking line search from the Newton step (Armijo) */
        double step = 1.0, ft = 0.0;
        int accepted = 0;
        for (int ls = 0; ls <= max_ls; ls++) {
            for (int64_t q = 0; q < P; q++) wt[q] = w[q] + step * s[q];
            ft = newton_eval(M, wt, gt, probt, hdt, Z);
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
        memcpy(w, wt, (size_t)P * sizeof(double));
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

/* Model a's rows as CSC over its own columns (local column j = the j-th of its sorted columns),
 * rows 0..n-1 in the order given. */
static int newton_model(const int64_t *indptr, const int32_t *indices, const float *data, const int32_t *y,
                        const int64_t *rows, int64_t n, const int64_t *mc, int64_t k, int32_t *cm, int64_t d,
                        int64_t *colptr, int32_t *rowind, float *val, int32_t *ly)
{
    /* every column not the model's maps to -1: a row that uses one is refused (-3) */
    for (int64_t j = 0; j < d; j++) cm[j] = -1;
    for (int64_t j = 0; j < k; j++) cm[mc[j]] = (int32_t)j;
    memset(colptr, 0, (size_t)(k + 1) * sizeof(int64_t));
    for (int64_t q = 0; q < n; q++)
        for (int64_t e = indptr[rows[q]]; e < indptr[rows[q] + 1]; e++) {
            if (cm[indices[e]] < 0) return -3;
            colptr[cm[indices[e]] + 1]++;
        }
    for (int64_t j = 0; j < k; j++) colptr[j + 1] += colptr[j];
    for (int64_t q = 0; q < n; q++) {
        const int64_t i = rows[q];
        for (int64_t e = indptr[i]; e < indptr[i + 1]; e++) {
            const int64_t o = colptr[cm[indices[e]]]++;
            rowind[o] = (int32_t)q;
            val[o] = data[e];
        }
        ly[q] = y[i];
    }
    /* colptr[j] now holds column j's end: shift back */
    for (int64_t j = k; j > 0; j--) colptr[j] = colptr[j - 1];
    colptr[0] = 0;
    return 0;
}

int afl_sparse_newton(const int64_t *indptr, const int32_t *indices, const float *data, const int32_t *y, int C,
                      int64_t d, int64_t B, const int64_t *rptr, const int64_t *rows, const int64_t *cptr,
                      const int64_t *cols, double *w, const int64_t *wptr, const double *l2, double gtol,
                      double start_rtol, double ftol, int max_iter, int max_ls, int max_cg, double cg_eta,
                      double cg_abs, int precond, int32_t *n_iter, int32_t *status, double *fval,
                      int32_t *n_eval, int32_t *n_hvp, int n_threads)
{
    if (B <= 0) return 0;
    if (C > AFL_NEWTON_MAX_C) return -2;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > B) n_threads = (int)B;
    int rc = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads) reduction(|:rc)
#endif
    {
        int32_t *cm = (int32_t *)malloc((size_t)(d > 0 ? d : 1) * sizeof(int32_t));
        if (!cm) rc |= 1;
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
        for (int64_t a = 0; a < B; a++) {
            if (!cm) continue;
            const int64_t k = cptr[a + 1] - cptr[a], n = rptr[a + 1] - rptr[a];
            const int64_t *mr = rows + rptr[a];
            int64_t nnz = 0;
            for (int64_t q = 0; q < n; q++) nnz += indptr[mr[q] + 1] - indptr[mr[q]];
            int64_t *colptr = (int64_t *)malloc((size_t)(k + 1) * sizeof(int64_t));
            int32_t *rowind = (int32_t *)malloc((size_t)(nnz > 0 ? nnz : 1) * sizeof(int32_t));
            float *val = (float *)malloc((size_t)(nnz > 0 ? nnz : 1) * sizeof(float));
            int32_t *ly = (int32_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
            if (!colptr || !rowind || !val || !ly) {
                rc |= 1;
            } else {
                if (newton_model(indptr, indices, data, y, mr, n, cols + cptr[a], k, cm, d, colptr, rowind, val,
                                 ly) != 0) {
                    rc |= 2;
                } else {
                    afl_newton_model M = {colptr, rowind, val, ly, n, k, C, 1.0 / (double)n, l2[a]};
                    if (newton_solve(&M, w + wptr[a], gtol, start_rtol, ftol, max_iter, max_ls, max_cg, cg_eta,
                                     cg_abs, precond, n_iter + a, status + a, fval + a, n_eval + a, n_hvp + a) != 0)
                        rc |= 1;
                }
            }
            free(colptr); free(rowind); free(val); free(ly);
        }
        free(cm);
    }
    return (rc & 1) ? -1 : (rc & 2) ? -3 : 0;
}
