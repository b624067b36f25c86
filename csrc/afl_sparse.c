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
