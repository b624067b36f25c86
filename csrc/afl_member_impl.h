/* Body of the member-row pass, included once per instruction-set target by afl_member.c with
 * AFL_SFX (name suffix), AFL_VL (floats per vector) and AFL_KG (vectors of features per
 * gradient micro-tile) defined.  See afl_member.h for the design. */
#define AFL_CAT_(a, b) a##b
#define AFL_CAT(a, b) AFL_CAT_(a, b)
#define AFL_F(name) AFL_CAT(name, AFL_SFX)

typedef float AFL_F(mvf_t) __attribute__((vector_size(AFL_VL * 4), aligned(4)));

#include "afl_exp_impl.h"

/* The first n < VL floats of p, zeros in the other lanes; never reads past p + n. */
static inline __attribute__((always_inline)) AFL_F(mvf_t) AFL_F(load_part)(const float *p, int n)
{
#if AFL_VL == 16 && defined(AFL_X86_CLONES)
    return (AFL_F(mvf_t))_mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), p);
#elif AFL_VL == 8 && defined(AFL_X86_CLONES)
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return (AFL_F(mvf_t))_mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx));
#else
    AFL_F(mvf_t) v = {0};
    for (int l = 0; l < n; l++) v[l] = p[l];
    return v;
#endif
}

/* out[0..3] = the lane sums of a, b, c, d, each by the same fixed tree: lane i plus lane
 * i + VL/2, then i + VL/4, ... (the four sums share the shuffles). */
static inline __attribute__((always_inline)) void
AFL_F(reduce4)(AFL_F(mvf_t) a, AFL_F(mvf_t) b, AFL_F(mvf_t) c, AFL_F(mvf_t) d, float *out)
{
    typedef float v4 __attribute__((vector_size(16)));
#if AFL_VL >= 8
    typedef float v8 __attribute__((vector_size(32)));
#endif
#if AFL_VL == 16
    v8 a8 = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7)
          + __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
    v8 b8 = __builtin_shufflevector(b, b, 0, 1, 2, 3, 4, 5, 6, 7)
          + __builtin_shufflevector(b, b, 8, 9, 10, 11, 12, 13, 14, 15);
    v8 c8 = __builtin_shufflevector(c, c, 0, 1, 2, 3, 4, 5, 6, 7)
          + __builtin_shufflevector(c, c, 8, 9, 10, 11, 12, 13, 14, 15);
    v8 d8 = __builtin_shufflevector(d, d, 0, 1, 2, 3, 4, 5, 6, 7)
          + __builtin_shufflevector(d, d, 8, 9, 10, 11, 12, 13, 14, 15);
#elif AFL_VL == 8
    v8 a8 = a, b8 = b, c8 = c, d8 = d;
#endif
#if AFL_VL >= 8
    /* [a: i + 4 pairs | b: i + 4 pairs] */
    v8 ab = __builtin_shufflevector(a8, b8, 0, 1, 2, 3, 8, 9, 10, 11)
          + __builtin_shufflevector(a8, b8, 4, 5, 6, 7, 12, 13, 14, 15);
    v8 cd = __builtin_shufflevector(c8, d8, 0, 1, 2, 3, 8, 9, 10, 11)
          + __builtin_shufflevector(c8, d8, 4, 5, 6, 7, 12, 13, 14, 15);
    /* [a: i + 2 | b | c | d], two lanes each */
    v8 abcd = __builtin_shufflevector(ab, cd, 0, 1, 4, 5, 8, 9, 12, 13)
            + __builtin_shufflevector(ab, cd, 2, 3, 6, 7, 10, 11, 14, 15);
    v4 r = __builtin_shufflevector(abcd, abcd, 0, 2, 4, 6)
         + __builtin_shufflevector(abcd, abcd, 1, 3, 5, 7);
#else
    v4 ab = __builtin_shufflevector(a, b, 0, 1, 4, 5) + __builtin_shufflevector(a, b, 2, 3, 6, 7);
    v4 cd = __builtin_shufflevector(c, d, 0, 1, 4, 5) + __builtin_shufflevector(c, d, 2, 3, 6, 7);
    v4 r = __builtin_shufflevector(ab, cd, 0, 2, 4, 6) + __builtin_shufflevector(ab, cd, 1, 3, 5, 7);
#endif
    __builtin_memcpy(out, &r, sizeof r);
}

/* res[c][r] = x[r] . w[c] for four rows and cg <= 4 classes (w: cg class rows of stride Dp,
 * zero beyond D): a vector accumulator per (row, class) over the features in order, the
 * last partial vector of x read masked, its lanes summed by reduce4. */
static inline __attribute__((always_inline)) void
AFL_F(dot4)(const float *const x[4], const float *const xn[4], const float *restrict w,
            int64_t D, int64_t Dp, int cg, float res[4][4])
{
    const int64_t nv = D / AFL_VL;
    const int rem = (int)(D - nv * AFL_VL);
    const AFL_F(mvf_t) zero = {0};
    AFL_F(mvf_t) acc[4][4];
#pragma GCC unroll 4
    for (int c = 0; c < cg; c++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[c][r] = zero;
    for (int64_t v = 0; v < nv; v++) {
        AFL_F(mvf_t) xv[4];
        /* the next group's rows, a line at a time: a model's rows are scattered (at t/N = 0.1
         * one row in ten), so the hardware prefetchers see a new stream at every row */
        if ((v * AFL_VL) % 16 == 0)
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) __builtin_prefetch(xn[r] + v * AFL_VL, 0, 3);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) xv[r] = *(const AFL_F(mvf_t) *)(x[r] + v * AFL_VL);
#pragma GCC unroll 4
        for (int c = 0; c < cg; c++) {
            AFL_F(mvf_t) wv = *(const AFL_F(mvf_t) *)(w + c * Dp + v * AFL_VL);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) acc[c][r] += xv[r] * wv;
        }
    }
    if (rem) {
        AFL_F(mvf_t) xv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) xv[r] = AFL_F(load_part)(x[r] + nv * AFL_VL, rem);
#pragma GCC unroll 4
        for (int c = 0; c < cg; c++) {
            AFL_F(mvf_t) wv = *(const AFL_F(mvf_t) *)(w + c * Dp + nv * AFL_VL);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) acc[c][r] += xv[r] * wv;
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < cg; c++) AFL_F(reduce4)(acc[c][0], acc[c][1], acc[c][2], acc[c][3], res[c]);
}

/* Z[i * C + c] = logits of the q member rows X[rows[i]] (stride ldx) for the class-major
 * weights W (C x Dp).  Rows go four at a time; the last group is padded with the last row,
 * so every row's logits come from the same instructions. */
static void AFL_F(logits)(const float *X, int64_t ldx, int64_t D, int64_t Dp,
                          const int32_t *rows, int64_t q, const float *W, int C, float *Z)
{
    float res[4][4];
    for (int64_t i0 = 0; i0 < q; i0 += 4) {
        const float *x[4], *xn[4];
        for (int r = 0; r < 4; r++) {
            x[r] = X + (int64_t)rows[i0 + r < q ? i0 + r : q - 1] * ldx;
            xn[r] = X + (int64_t)rows[i0 + 4 + r < q ? i0 + 4 + r : q - 1] * ldx;
        }
        int nr = q - i0 < 4 ? (int)(q - i0) : 4;
        for (int c0 = 0; c0 < C; c0 += 4) {
            int cg = C - c0 < 4 ? C - c0 : 4;
            const float *w = W + (int64_t)c0 * Dp;
            /* constant class counts, so each call site keeps its accumulators in registers */
            switch (cg) {
            case 1: AFL_F(dot4)(x, xn, w, D, Dp, 1, res); break;
            case 2: AFL_F(dot4)(x, xn, w, D, Dp, 2, res); break;
            case 3: AFL_F(dot4)(x, xn, w, D, Dp, 3, res); break;
            default: AFL_F(dot4)(x, xn, w, D, Dp, 4, res); break;
            }
            for (int r = 0; r < nr; r++)
                for (int c = 0; c < cg; c++) Z[(i0 + r) * C + c0 + c] = res[c][r];
        }
    }
}

/* G[c][v0 * VL ...] += sum over the q rows, in order, of R[i][c] x_i for nvg vectors of
 * features (the last one read masked when `rem`) and cg classes (R row-major q x C, offset
 * to the first class).  Each element is a float32 FMA chain from zero over the rows, then
 * added in double. */
static inline __attribute__((always_inline)) void
AFL_F(grad_tile)(const float *X, int64_t ldx, const int32_t *rows, int64_t q, const float *R,
                 int C, int cg, int64_t v0, int nvg, int rem, int64_t Dp, double *G)
{
    /* all zero (not only cg x nvg): the compiler cannot see that the rest is never read */
    AFL_F(mvf_t) acc[4][AFL_KG] = {{{0}}};
    for (int64_t i = 0; i < q; i++) {
        const float *xr = X + (int64_t)rows[i] * ldx + v0 * AFL_VL;
        AFL_F(mvf_t) xv[AFL_KG];
#pragma GCC unroll 8
        for (int g = 0; g < nvg; g++)
            xv[g] = (rem && g == nvg - 1) ? AFL_F(load_part)(xr + g * AFL_VL, rem)
                                          : *(const AFL_F(mvf_t) *)(xr + g * AFL_VL);
#pragma GCC unroll 4
        for (int c = 0; c < cg; c++) {
            float rc = R[i * C + c];
#pragma GCC unroll 8
            for (int g = 0; g < nvg; g++) acc[c][g] += xv[g] * rc;
        }
    }
    float t[AFL_VL] __attribute__((aligned(64)));
#pragma GCC unroll 4
    for (int c = 0; c < cg; c++)
#pragma GCC unroll 8
        for (int g = 0; g < nvg; g++) {
            *(AFL_F(mvf_t) *)t = acc[c][g];
            double *gd = G + (int64_t)c * Dp + (v0 + g) * AFL_VL;
            for (int l = 0; l < AFL_VL; l++) gd[l] += (double)t[l];
        }
}

/* G (C x Dp, double) += X_rows^T R over the q member rows (columns from D on get zeros). */
static void AFL_F(grad_add)(const float *X, int64_t ldx, int64_t D, int64_t Dp,
                            const int32_t *rows, int64_t q, const float *R, int C, double *G)
{
    const int64_t nv = D / AFL_VL;
    const int rem = (int)(D - nv * AFL_VL);
    for (int c0 = 0; c0 < C; c0 += 4) {
        int cg = C - c0 < 4 ? C - c0 : 4;
        const float *Rc = R + c0;
        double *Gc = G + (int64_t)c0 * Dp;
        int64_t v0 = 0;
        for (; v0 + AFL_KG <= nv; v0 += AFL_KG) {
            switch (cg) {
            case 1: AFL_F(grad_tile)(X, ldx, rows, q, Rc, C, 1, v0, AFL_KG, 0, Dp, Gc); break;
            case 2: AFL_F(grad_tile)(X, ldx, rows, q, Rc, C, 2, v0, AFL_KG, 0, Dp, Gc); break;
            case 3: AFL_F(grad_tile)(X, ldx, rows, q, Rc, C, 3, v0, AFL_KG, 0, Dp, Gc); break;
            default: AFL_F(grad_tile)(X, ldx, rows, q, Rc, C, 4, v0, AFL_KG, 0, Dp, Gc); break;
            }
        }
        /* the remaining whole vectors, then the last partial one */
        for (; v0 < nv; v0++)
            AFL_F(grad_tile)(X, ldx, rows, q, Rc, C, cg, v0, 1, 0, Dp, Gc);
        if (rem) AFL_F(grad_tile)(X, ldx, rows, q, Rc, C, cg, nv, 1, rem, Dp, Gc);
    }
}

/* Over n columns of class-major doubles e (C rows of stride ld): e -= mx, e = exp(e), and
 * s = the sum over the classes (the softmax's denominators). */
static inline void AFL_F(exp_and_sum)(double *e, int C, int64_t n, int64_t ld, const double *mx,
                                      double *s)
{
    for (int c = 0; c < C; c++) {
        AFL_IVDEP
        for (int64_t i = 0; i < n; i++) e[c * ld + i] -= mx[i];  /* exact: both floats */
    }
    AFL_F(exp_nonpositive)(e, C * ld);
    AFL_IVDEP
    for (int64_t i = 0; i < n; i++) s[i] = e[i];
    for (int c = 1; c < C; c++) {
        AFL_IVDEP
        for (int64_t i = 0; i < n; i++) s[i] += e[c * ld + i];
    }
}

/* Cross-entropy over q rows: returns sum_i -log p_{y_i} and writes
 * R[i * C + c] = scale * (p_ic - [c == y_i]) (float32).  Vectorised over the rows: logits are
 * moved into class-major doubles (rows padded to whole vectors with zeros), so the max, the
 * exponentials and the sums are loops over rows.  work: (C + 4) * afl_member_pad(q) doubles. */
static double AFL_F(ce_rows)(int64_t q, int C, const float *Z, const int32_t *yl,
                             double scale, float *R, double *work)
{
    const int64_t qp = afl_member_pad(q);
    double *e = work, *mx = e + C * qp, *gap = mx + qp, *s = gap + qp, *sc = s + qp;
    for (int c = 0; c < C; c++) {
        double *ec = e + c * qp;
        for (int64_t i = 0; i < q; i++) ec[i] = (double)Z[i * C + c];
        for (int64_t i = q; i < qp; i++) ec[i] = 0.0;
    }
    AFL_IVDEP
    for (int64_t i = 0; i < qp; i++) mx[i] = e[i];
    for (int c = 1; c < C; c++) {
        AFL_IVDEP
        for (int64_t i = 0; i < qp; i++) mx[i] = e[c * qp + i] > mx[i] ? e[c * qp + i] : mx[i];
    }
    for (int64_t i = 0; i < q; i++) gap[i] = mx[i] - e[yl[i] * qp + i];  /* max - label logit */
    AFL_F(exp_and_sum)(e, C, qp, qp, mx, s);
    AFL_IVDEP
    for (int64_t i = 0; i < qp; i++) sc[i] = scale / s[i];
    for (int c = 0; c < C; c++) {
        const double *ec = e + c * qp;
        for (int64_t i = 0; i < q; i++)
            R[i * C + c] = (float)(ec[i] * sc[i] - (c == yl[i] ? scale : 0.0));
    }
    /* -log p_y = (max - z_y) + log s: one log per 8 rows at most (a product of s_i in
     * [1, C], folded into the sum before it can overflow) */
    double lin = 0.0, logs = 0.0, prod = 1.0;
    for (int64_t i = 0; i < q; i++) {
        lin += gap[i];
        prod *= s[i];
        if (prod > 1e280) { logs += log(prod); prod = 1.0; }
    }
    return lin + (logs + log(prod));
}

/* Any other loss: afl_row_loss once per row (libm, double). */
static double AFL_F(generic_rows)(const afl_member_set *s, int64_t q, const float *Z,
                                  const int32_t *yl, double scale, float *R, float *zb,
                                  double *pbuf)
{
    const int C = s->C;
    double loss = 0.0;
    for (int64_t i = 0; i < q; i++) {
        for (int c = 0; c < C; c++) zb[c] = Z[i * C + c];
        loss += afl_row_loss(s->loss_code, s->params, s->user, C, zb, yl[i], pbuf, scale,
                             R + i * C);
    }
    return loss;
}

/* One model over its member rows of one row block: part[0:C*Dp] += gradient (class-major),
 * part[C*Dp] += loss. */
static void AFL_F(model_block)(const afl_member_set *s, int64_t rb, int64_t j, const float *W,
                               double scale, double *part, afl_member_scratch *w)
{
    const int64_t *mp = s->mptr + j * (s->nrb + 1);
    const int64_t lo = mp[rb], q = mp[rb + 1] - lo;
    if (q <= 0) return;
    const int32_t *rows = s->mrows + lo;
    const int C = s->C;
    const int64_t D = s->D;
    for (int64_t i = 0; i < q; i++) w->yl[i] = s->y[rows[i]];
    AFL_F(logits)(s->X, s->ldx, D, s->Dp, rows, q, W, C, w->Z);
    double loss = s->loss_code == AFL_LOSS_CE
                      ? AFL_F(ce_rows)(q, C, w->Z, w->yl, scale, w->R, w->work)
                      : AFL_F(generic_rows)(s, q, w->Z, w->yl, scale, w->R, w->zb, w->work);
    AFL_F(grad_add)(s->X, s->ldx, D, s->Dp, rows, q, w->R, C, part);
    part[(int64_t)C * s->Dp] += loss;
}

/* Prediction of rows i0 <= i < i1 from their logits Z (row i at Z + (i - i0) * ldz; class c of
 * model j at c * B + j, class-major so every step is a loop over the models): where
 * heldout[i * B + j], seen[i] += 1, correct[i] += (arg max == y[i]) (lowest class on ties),
 * prob_label[i] += p_{y[i]} (y[i] >= 0), proba_sum[i * C + c] += p_c (when not NULL); sums over
 * the models in model order.  work: (C + 2) * afl_member_pad(B) doubles, am: B ints. */
static void AFL_F(predict_rows)(int64_t i0, int64_t i1, int64_t B, int C, const float *Z,
                                int64_t ldz, const int32_t *y, const uint8_t *heldout,
                                int32_t *seen, int32_t *correct, double *prob_label,
                                double *proba_sum, double *work, int32_t *am)
{
    const int64_t bp = afl_member_pad(B);
    double *e = work, *mx = e + C * bp, *inv = mx + bp;
    for (int64_t j = 0; j < (C + 2) * bp; j++) work[j] = 0.0;
    for (int64_t i = i0; i < i1; i++) {
        const float *z = Z + (i - i0) * ldz;
        const uint8_t *h = heldout + i * B;
        const int yi = y[i];
        for (int c = 0; c < C; c++) {
            AFL_IVDEP
            for (int64_t j = 0; j < B; j++) e[c * bp + j] = (double)z[c * B + j];
            for (int64_t j = B; j < bp; j++) e[c * bp + j] = 0.0;  /* pads: exp(0), harmless */
        }
        AFL_IVDEP
        for (int64_t j = 0; j < B; j++) { mx[j] = e[j]; am[j] = 0; }
        for (int c = 1; c < C; c++) {
            AFL_IVDEP
            for (int64_t j = 0; j < B; j++) {
                int gt = e[c * bp + j] > mx[j];
                mx[j] = gt ? e[c * bp + j] : mx[j];
                am[j] = gt ? c : am[j];
            }
        }
        AFL_F(exp_and_sum)(e, C, bp, bp, mx, inv);
        AFL_IVDEP
        for (int64_t j = 0; j < bp; j++) inv[j] = 1.0 / inv[j];
        int32_t n_seen = 0, n_correct = 0;
        double pl = 0.0;
        for (int64_t j = 0; j < B; j++) {
            if (!h[j]) continue;
            n_seen += 1;
            if (yi >= 0) {
                n_correct += am[j] == yi;
                pl += e[yi * bp + j] * inv[j];
            }
            if (proba_sum)
                for (int c = 0; c < C; c++) proba_sum[i * C + c] += e[c * bp + j] * inv[j];
        }
        seen[i] += n_seen;
        correct[i] += n_correct;
        if (yi >= 0) prob_label[i] += pl;
    }
}

#undef AFL_F
#undef AFL_CAT
#undef AFL_CAT_
