/* Body of the member-row pass, included once per instruction-set target by afl_member.c with
 * AFL_SFX (name suffix), AFL_VL (floats per vector) and AFL_KG (vectors of features per
 * gradient micro-tile) defined.  See afl_member.h for the design. */
#define AFL_CAT_(a, b) a##b
#define AFL_CAT(a, b) AFL_CAT_(a, b)
#define AFL_F(name) AFL_CAT(name, AFL_SFX)

#ifndef AFL_PF_CURSOR_DEFINED
#define AFL_PF_CURSOR_DEFINED
/* Lines still to be brought into L2 while a pass computes: a range of features [f0, f1) of
 * consecutive rows, walked a line per step.  The loops of the passes take a step or two per
 * vector step, so the next rows stream in while the current ones are used and memory and
 * arithmetic overlap; asking for all of a block's lines at once (a burst) would fill the
 * core's queue of misses and stall it until they arrived. */
typedef struct {
    const char *p;     /* the next line */
    const char *lend;  /* end of the range in p's row */
    const char *stop;  /* start of the range in the row after the last */
    int64_t ld, span;  /* row stride and range length, bytes */
} afl_pf_cursor;
/* A loop's copy of the cursor (pf NULL: none), so that its conditional steps stay in
 * registers; AFL_PF_END writes it back. */
#define AFL_PF_BEGIN(pf)                                                      \
    afl_pf_cursor pf_copy_ = (pf) ? *(pf) : (afl_pf_cursor){0, 0, 0, 0, 0};   \
    afl_pf_cursor *const pfc_ = (pf) ? &pf_copy_ : NULL
#define AFL_PF_END(pf)                                                        \
    do {                                                                      \
        if (pf) *(pf) = pf_copy_;                                             \
    } while (0)
#define AFL_PF_STEP(pf)                                                       \
    do {                                                                      \
        if ((pf) && (pf)->p < (pf)->stop) {                                   \
            __builtin_prefetch((pf)->p, 0, 2);                                \
            (pf)->p += 64;                                                    \
            if ((pf)->p >= (pf)->lend) {                                      \
                (pf)->lend += (pf)->ld;                                       \
                (pf)->p = (pf)->lend - (pf)->span;                            \
            }                                                                 \
        }                                                                     \
    } while (0)

/* The cursor over features [f0, f1) (f1 capped at D) of rows r0 <= i < r1 of X. */
static inline void afl_pf_set(afl_pf_cursor *pf, const float *X, int64_t ldx, int64_t D, int64_t r0,
                              int64_t r1, int64_t f0, int64_t f1)
{
    if (f1 > D) f1 = D;
    pf->ld = ldx * 4;
    pf->span = f1 > f0 ? (f1 - f0) * 4 : 0;
    pf->p = (const char *)X + r0 * pf->ld + f0 * 4;
    pf->lend = pf->p + pf->span;
    pf->stop = pf->span > 0 && r1 > r0 ? (const char *)X + r1 * pf->ld + f0 * 4 : pf->p;
}
#endif
#ifndef AFL_ITEM_AHEAD
#define AFL_ITEM_AHEAD 4
#endif

#ifndef AFL_PIN
#if defined(__GNUC__) && (defined(__x86_64__) || defined(_M_X64))
#define AFL_PIN(v) __asm__("" : "+v"(v))
#else
#define AFL_PIN(v) ((void)0)
#endif
#endif

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

/* res[c][r] = x[r] . w[c] over the feature vectors v0 <= v < v1 for four rows and cg <= 4
 * weight vectors (class rows of a model, or one row each of several models; zero beyond D):
 * a vector accumulator per (row, weight vector) over the features in order, the last vector
 * of the rows read masked when it holds only `rem` < VL features, the lanes summed by
 * reduce4.  So a row's dot product with a weight vector comes from the same instructions
 * whichever rows and weight vectors share the call. */
static inline __attribute__((always_inline)) void
AFL_F(dot4)(const float *const x[4], const float *const xn[4], const float *const w[4],
            int64_t v0, int64_t v1, int rem, int cg, float res[4][4], afl_pf_cursor *pf)
{
    const int64_t nv = rem ? v1 - 1 : v1;
    const AFL_F(mvf_t) zero = {0};
    AFL_F(mvf_t) acc[4][4];
    AFL_PF_BEGIN(pf);
#pragma GCC unroll 4
    for (int c = 0; c < cg; c++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) acc[c][r] = zero;
    for (int64_t v = v0; v < nv; v++) {
        AFL_F(mvf_t) xv[4];
        /* the next group's rows, a line at a time: a model's rows are scattered (at t/N = 0.1
         * one row in ten), so the hardware prefetchers see a new stream at every row */
#ifndef AFL_NO_PF
        if ((v * AFL_VL) % 16 == 0)
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) __builtin_prefetch(xn[r] + v * AFL_VL, 0, 3);
#endif
        AFL_PF_STEP(pfc_);
        AFL_PF_STEP(pfc_);
        /* each row's vector loaded once into a register (the empty asm keeps the compiler
         * from folding a reload into every FMA: one load per FMA would bound the loop by
         * the load ports, not by the FMAs) */
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            xv[r] = *(const AFL_F(mvf_t) *)(x[r] + v * AFL_VL);
            AFL_PIN(xv[r]);
        }
#pragma GCC unroll 4
        for (int c = 0; c < cg; c++) {
            AFL_F(mvf_t) wv = *(const AFL_F(mvf_t) *)(w[c] + v * AFL_VL);
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
            AFL_F(mvf_t) wv = *(const AFL_F(mvf_t) *)(w[c] + nv * AFL_VL);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) acc[c][r] += xv[r] * wv;
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < cg; c++) AFL_F(reduce4)(acc[c][0], acc[c][1], acc[c][2], acc[c][3], res[c]);
    AFL_PF_END(pf);
}

/* dot4 with the weight-vector count constant at each call site (accumulators in registers). */
static inline __attribute__((always_inline)) void
AFL_F(dots)(const float *const x[4], const float *const xn[4], const float *const w[4],
            int64_t v0, int64_t v1, int rem, int cg, float res[4][4], afl_pf_cursor *pf)
{
    switch (cg) {
    case 1: AFL_F(dot4)(x, xn, w, v0, v1, rem, 1, res, pf); break;
    case 2: AFL_F(dot4)(x, xn, w, v0, v1, rem, 2, res, pf); break;
    case 3: AFL_F(dot4)(x, xn, w, v0, v1, rem, 3, res, pf); break;
    default: AFL_F(dot4)(x, xn, w, v0, v1, rem, 4, res, pf); break;
    }
}

/* Logits of the member rows X[rows[i]] (stride ldx), i_begin <= i < i_end (i_begin a multiple
 * of four), for the class-major weights W (C x Dp), over the feature vectors of one slice
 * [v0, v1): Z[i * C + c] = the slice's dot product (first slice) or Z + it (later slices).
 * Rows go four at a time (i_begin, i_begin + 4, ...); a group reaching past the q rows is
 * padded with the last row, so every row's logits come from the same instructions, whichever
 * group it is in. */
static void AFL_F(logits)(const float *X, int64_t ldx, int64_t Dp, const int32_t *rows,
                          int64_t q, int64_t i_begin, int64_t i_end, const float *W, int C,
                          int64_t v0, int64_t v1, int rem, int first, float *Z, afl_pf_cursor *pf)
{
    float res[4][4];
    for (int64_t i0 = i_begin; i0 < i_end; i0 += 4) {
        const float *x[4], *xn[4];
        for (int r = 0; r < 4; r++) {
            x[r] = X + (int64_t)rows[i0 + r < q ? i0 + r : q - 1] * ldx;
            xn[r] = X + (int64_t)rows[i0 + 4 + r < q ? i0 + 4 + r : q - 1] * ldx;
        }
        int nr = q - i0 < 4 ? (int)(q - i0) : 4;
        for (int c0 = 0; c0 < C; c0 += 4) {
            int cg = C - c0 < 4 ? C - c0 : 4;
            const float *w[4];
            for (int c = 0; c < 4; c++) w[c] = W + (int64_t)(c0 + (c < cg ? c : 0)) * Dp;
            AFL_F(dots)(x, xn, w, v0, v1, rem, cg, res, pf);
            float *z = Z + i0 * C + c0;
            if (first)
                for (int r = 0; r < nr; r++)
                    for (int c = 0; c < cg; c++) z[r * C + c] = res[c][r];
            else
                for (int r = 0; r < nr; r++)
                    for (int c = 0; c < cg; c++) z[r * C + c] += res[c][r];
        }
    }
}

/* gd[0..VL) += a, converted to double (two half vectors). */
static inline __attribute__((always_inline)) void AFL_F(add_double)(double *gd, AFL_F(mvf_t) a)
{
#if AFL_VL == 16
    typedef float hf __attribute__((vector_size(32)));
    typedef double hd __attribute__((vector_size(64), aligned(8)));
    hf lo = __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7);
    hf hi = __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
#elif AFL_VL == 8
    typedef float hf __attribute__((vector_size(16)));
    typedef double hd __attribute__((vector_size(32), aligned(8)));
    hf lo = __builtin_shufflevector(a, a, 0, 1, 2, 3);
    hf hi = __builtin_shufflevector(a, a, 4, 5, 6, 7);
#else
    typedef float hf __attribute__((vector_size(8)));
    typedef double hd __attribute__((vector_size(16), aligned(8)));
    hf lo = __builtin_shufflevector(a, a, 0, 1);
    hf hi = __builtin_shufflevector(a, a, 2, 3);
#endif
    hd *g = (hd *)gd;
    g[0] += __builtin_convertvector(lo, hd);
    g[1] += __builtin_convertvector(hi, hd);
}

/* G[c][v0 * VL ...] += sum over the q rows, in order, of R[i][c] x_i for nvg vectors of
 * features (the last one read masked when `rem`) and cg classes (R row-major q x C, offset
 * to the first class).  Each element is a float32 FMA chain from zero over the rows, then
 * added in double. */
static inline __attribute__((always_inline)) void
AFL_F(grad_tile)(const float *X, int64_t ldx, const int32_t *rows, int64_t q, const float *R,
                 int C, int cg, int64_t v0, int nvg, int rem, int64_t Dp, double *G, afl_pf_cursor *pf)
{
    /* all zero (not only cg x nvg): the compiler cannot see that the rest is never read */
    AFL_F(mvf_t) acc[4][AFL_KG] = {{{0}}};
    AFL_PF_BEGIN(pf);
    for (int64_t i = 0; i < q; i++) {
        const float *xr = X + (int64_t)rows[i] * ldx + v0 * AFL_VL;
        AFL_F(mvf_t) xv[AFL_KG];
        AFL_PF_STEP(pfc_);
        AFL_PF_STEP(pfc_);
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
#pragma GCC unroll 4
    for (int c = 0; c < cg; c++)
#pragma GCC unroll 8
        for (int g = 0; g < nvg; g++)
            AFL_F(add_double)(G + (int64_t)c * Dp + (v0 + g) * AFL_VL, acc[c][g]);
    AFL_PF_END(pf);
}

/* grad_tile over nt <= AFL_KG vectors (the last one partial when rem), with the class and
 * vector counts constant at each call site so the accumulators stay in registers. */
static void AFL_F(grad_tail)(const float *X, int64_t ldx, const int32_t *rows, int64_t q,
                             const float *R, int C, int cg, int64_t v, int nt, int rem, int64_t Dp,
                             double *G, afl_pf_cursor *pf)
{
#define AFL_GT(cg_, n_) AFL_F(grad_tile)(X, ldx, rows, q, R, C, cg_, v, n_, rem, Dp, G, pf)
#define AFL_GT_CG(n_)                                                                        \
    switch (cg) {                                                                            \
    case 1: AFL_GT(1, n_); break;                                                            \
    case 2: AFL_GT(2, n_); break;                                                            \
    case 3: AFL_GT(3, n_); break;                                                            \
    default: AFL_GT(4, n_); break;                                                           \
    }
    switch (nt) {
    case 1: AFL_GT_CG(1); break;
#if AFL_KG >= 2
    case 2: AFL_GT_CG(2); break;
#endif
#if AFL_KG >= 3
    case 3: AFL_GT_CG(3); break;
#endif
#if AFL_KG >= 4
    case 4: AFL_GT_CG(4); break;
#endif
    default: break;
    }
#undef AFL_GT_CG
#undef AFL_GT
}

/* G (C x Dp, double) += X_rows^T R over the q member rows, for the feature vectors of one
 * slice [v0, v1) (the last one holding `rem` features when rem > 0; columns from D on get
 * zeros). */
static void AFL_F(grad_add)(const float *X, int64_t ldx, int64_t Dp, const int32_t *rows,
                            int64_t q, const float *R, int C, int64_t v0, int64_t v1, int rem,
                            double *G, afl_pf_cursor *pf)
{
    const int64_t nv = rem ? v1 - 1 : v1;
    for (int c0 = 0; c0 < C; c0 += 4) {
        int cg = C - c0 < 4 ? C - c0 : 4;
        const float *Rc = R + c0;
        double *Gc = G + (int64_t)c0 * Dp;
        int64_t v = v0;
        for (; v + AFL_KG <= nv; v += AFL_KG) {
            switch (cg) {
            case 1: AFL_F(grad_tile)(X, ldx, rows, q, Rc, C, 1, v, AFL_KG, 0, Dp, Gc, pf); break;
            case 2: AFL_F(grad_tile)(X, ldx, rows, q, Rc, C, 2, v, AFL_KG, 0, Dp, Gc, pf); break;
            case 3: AFL_F(grad_tile)(X, ldx, rows, q, Rc, C, 3, v, AFL_KG, 0, Dp, Gc, pf); break;
            default: AFL_F(grad_tile)(X, ldx, rows, q, Rc, C, 4, v, AFL_KG, 0, Dp, Gc, pf); break;
            }
        }
        /* the remaining whole vectors and the last partial one in one tile, so the rows are
         * passed over once more, not once per vector (at D = 513 a slice of 11 vectors
         * leaves 3) */
        const int nt = (int)(nv - v) + (rem ? 1 : 0);
        if (nt > 0) AFL_F(grad_tail)(X, ldx, rows, q, Rc, C, cg, v, nt, rem, Dp, Gc, pf);
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

/* sum_i -log p_{y_i} = sum_i (max_i - z_{i,y_i}) + log s_i over q rows from gap_i = max_i -
 * z_{i,y_i} and the softmax denominators s_i, in row order: one log per 8 rows at most (a
 * product of s_i in [1, C], folded into the sum before it can overflow). */
static inline double AFL_F(ce_loss_sum)(const double *gap, const double *s, int64_t q)
{
    double lin = 0.0, logs = 0.0, prod = 1.0;
    for (int64_t i = 0; i < q; i++) {
        lin += gap[i];
        prod *= s[i];
        if (prod > 1e280) { logs += log(prod); prod = 1.0; }
    }
    return lin + (logs + log(prod));
}

/* Cross-entropy over q rows of C logits (ref = 1: C + 1 classes, the last one's logit fixed
 * at 0, the reference-class form): returns sum_i -log p_{y_i} and writes
 * R[i * C + c] = scale * (p_ic - [c == y_i]) for the C logits (float32).  Vectorised over the
 * rows: logits are moved into class-major doubles (rows padded to whole vectors with zeros), so
 * the max, the exponentials and the sums are loops over rows.  work: (C + ref + 4) *
 * afl_member_pad(q) doubles. */
static double AFL_F(ce_rows)(int64_t q, int C, int ref, const float *Z, const int32_t *yl,
                             double scale, float *R, double *work)
{
    const int64_t qp = afl_member_pad(q);
    const int CF = C + ref;  /* classes */
    double *e = work, *mx = e + CF * qp, *gap = mx + qp, *s = gap + qp, *sc = s + qp;
    for (int c = 0; c < C; c++) {
        double *ec = e + c * qp;
        for (int64_t i = 0; i < q; i++) ec[i] = (double)Z[i * C + c];
        for (int64_t i = q; i < qp; i++) ec[i] = 0.0;
    }
    for (int c = C; c < CF; c++)
        for (int64_t i = 0; i < qp; i++) e[c * qp + i] = 0.0;  /* the reference class */
    AFL_IVDEP
    for (int64_t i = 0; i < qp; i++) mx[i] = e[i];
    for (int c = 1; c < CF; c++) {
        AFL_IVDEP
        for (int64_t i = 0; i < qp; i++) mx[i] = e[c * qp + i] > mx[i] ? e[c * qp + i] : mx[i];
    }
    for (int64_t i = 0; i < q; i++) gap[i] = mx[i] - e[yl[i] * qp + i];  /* max - label logit */
    AFL_F(exp_and_sum)(e, CF, qp, qp, mx, s);
    AFL_IVDEP
    for (int64_t i = 0; i < qp; i++) sc[i] = scale / s[i];
    for (int c = 0; c < C; c++) {
        const double *ec = e + c * qp;
        for (int64_t i = 0; i < q; i++)
            R[i * C + c] = (float)(ec[i] * sc[i] - (c == yl[i] ? scale : 0.0));
    }
    return AFL_F(ce_loss_sum)(gap, s, q);
}

/* Any other loss: afl_row_loss once per row (libm, double); C logits a row, ref as in
 * ce_rows (zb: C + ref floats). */
static double AFL_F(generic_rows)(const afl_member_set *s, int64_t q, int C, int ref,
                                  const float *Z, const int32_t *yl, double scale, float *R,
                                  float *zb, double *pbuf)
{
    double loss = 0.0;
    for (int64_t i = 0; i < q; i++) {
        for (int c = 0; c < C; c++) zb[c] = Z[i * C + c];
        if (ref) zb[C] = 0.0f;
        /* the gradient over the C + ref classes, in place of the logits */
        loss += afl_row_loss(s->loss_code, s->params, s->user, C + ref, zb, yl[i], pbuf, scale, zb);
        for (int c = 0; c < C; c++) R[i * C + c] = zb[c];
    }
    return loss;
}

/* Feature slice k of ns over nvec vectors: [*v0, *v1), *rem features in its last vector when
 * that is the row's last, partial vector (0 otherwise).  Slices are fixed by D alone. */
static inline void AFL_F(slice)(int64_t D, int64_t nvec, int64_t ns, int64_t k, int64_t *v0,
                                int64_t *v1, int *rem)
{
    *v0 = k * nvec / ns;
    *v1 = (k + 1) * nvec / ns;
    *rem = (*v1 == nvec) ? (int)(D - (nvec - 1) * AFL_VL) % AFL_VL : 0;
}

/* Multiple choice with 2 <= G <= 4 candidates per item (C == 1) goes item by item instead of
 * model by model: a row of a model's logits or gradient then costs one load per multiply-add
 * (one output per row), while an item's G candidate rows, held in registers, serve every model
 * that trains on the item (about 6 of 64 at t/N = 0.1, 32 at 0.5), so a weight or gradient
 * vector load feeds G multiply-adds.  Each dot product and each gradient element takes the
 * same instructions in the same order as model by model (dot4 over the same slices; a chain
 * over the model's rows in row order from zero, added in double per row block), so the two
 * orders give the same bits. */

/* The items of row block rb and, for each, the models (indices into active[0..nA)) that train
 * on it, in model order: item it's models are imodel[istart[it] .. istart[it + 1]) and iidx
 * the item's first candidate among that model's rows of the row block.  Returns the items. */
static int64_t AFL_F(item_lists)(const afl_member_set *s, int64_t rb, int64_t nA,
                                 const int64_t *active, const int64_t *off, int32_t *istart,
                                 int32_t *imodel, int32_t *iidx)
{
    const int G = s->G;
    const int64_t L = s->nrb + 1, r0 = s->row_blocks[rb], ni = (s->row_blocks[rb + 1] - r0) / G;
    for (int64_t it = 0; it <= ni; it++) istart[it] = 0;
    for (int64_t a = 0; a < nA; a++) {
        const int64_t q = off[a + 1] - off[a];
        const int32_t *rows = s->mrows + s->mptr[active[a] * L + rb];
        for (int64_t i = 0; i < q; i += G) istart[(rows[i] - r0) / G + 1]++;
    }
    for (int64_t it = 0; it < ni; it++) istart[it + 1] += istart[it];
    /* fill with istart[it] as item it's cursor, then shift the ends back to starts */
    for (int64_t a = 0; a < nA; a++) {
        const int64_t q = off[a + 1] - off[a];
        const int32_t *rows = s->mrows + s->mptr[active[a] * L + rb];
        for (int64_t i = 0; i < q; i += G) {
            const int32_t p = istart[(rows[i] - r0) / G]++;
            imodel[p] = (int32_t)a;
            iidx[p] = (int32_t)i;
        }
    }
    for (int64_t it = ni; it > 0; it--) istart[it] = istart[it - 1];
    istart[0] = 0;
    return ni;
}

/* The candidate rows of the item at `row` and of the next one (the last candidate repeated up
 * to four; its results are dropped). */
static inline void AFL_F(item_rows)(const afl_member_set *s, int64_t row, int64_t next,
                                    const float *x[4], const float *xn[4])
{
    const int G = s->G;
    for (int c = 0; c < 4; c++) {
        x[c] = s->X + (row + (c < G ? c : G - 1)) * s->ldx;
        xn[c] = s->X + (next + (c < G ? c : G - 1)) * s->ldx;
    }
}

/* Item it of a row block starting at row r0 (ni items) is next: the cursor to walk features
 * [f0, f1) of the rows up to AFL_ITEM_AHEAD items on (from the next item, if it fell behind). */
static inline void AFL_F(items_ahead)(const afl_member_set *s, afl_pf_cursor *pf, int64_t r0,
                                      int64_t it, int64_t ni, int64_t f0, int64_t f1)
{
    const int G = s->G;
    const int64_t next = r0 + (it + 1) * G;
    const int64_t ahead = r0 + (it + AFL_ITEM_AHEAD + 1 < ni ? it + AFL_ITEM_AHEAD + 1 : ni) * G;
    if (pf->p < (const char *)(s->X + next * s->ldx + f0))
        afl_pf_set(pf, s->X, s->ldx, s->D, next, ahead, f0, f1);
    else
        pf->stop = (const char *)(s->X + ahead * s->ldx + f0);
}

/* Logits (scores) of every item of row block rb for each model that trains on it, over the
 * feature vectors [v0, v1) of a logit slice: into Z as AFL_F(logits) writes them (model a's
 * rows at Z + off[a] - off[0]).  Models go four at a time with the item's candidates padded
 * to four rows (copies of the last, dropped). */
static void AFL_F(item_logits)(const afl_member_set *s, int64_t rb, int64_t ni,
                               const int32_t *istart, const int32_t *imodel, const int32_t *iidx,
                               const int64_t *off, const float *W, int64_t P, int64_t v0,
                               int64_t v1, int rem, int first, float *Z)
{
    const int G = s->G;
    const int64_t r0 = s->row_blocks[rb];
    float res[4][4];
    afl_pf_cursor pf;
    afl_pf_set(&pf, s->X, s->ldx, s->D, r0, r0, v0 * AFL_VL, v1 * AFL_VL);
    for (int64_t it = 0; it < ni; it++) {
        const int32_t p0 = istart[it], p1 = istart[it + 1];
        if (p0 == p1) continue;
        const int64_t row = r0 + it * G, next = it + 1 < ni ? row + G : row;
        /* items AFL_ITEM_AHEAD on into L2 (the next one into L1 comes with dot4) */
        AFL_F(items_ahead)(s, &pf, r0, it, ni, v0 * AFL_VL, v1 * AFL_VL);
        const float *x[4], *xn[4];
        AFL_F(item_rows)(s, row, next, x, xn);
        for (int32_t p = p0; p < p1; p += 4) {
            const int M = p1 - p < 4 ? p1 - p : 4;
            const float *w[4];
            for (int m = 0; m < 4; m++) w[m] = W + (int64_t)imodel[p + (m < M ? m : 0)] * P;
            AFL_F(dots)(x, xn, w, v0, v1, rem, M, res, &pf);
            for (int m = 0; m < M; m++) {
                float *z = Z + (off[imodel[p + m]] - off[0]) + iidx[p + m];
                if (first)
                    for (int c = 0; c < G; c++) z[c] = res[m][c];
                else
                    for (int c = 0; c < G; c++) z[c] += res[m][c];
            }
        }
    }
}

/* g[m][0 .. nv * VL) += sum over the G candidates, in order, of r[m][c] x[c] for M models (the
 * vectors of the slice; the last read masked when `rem`): float32 FMAs into the models'
 * running sums in memory. */
static inline __attribute__((always_inline)) void
AFL_F(item_grad_tile)(const float *const x[4], int G, const float r[4][4], float *const g[4],
                      int M, int64_t nv, int rem, afl_pf_cursor *pf)
{
    AFL_F(mvf_t) rv[4][4];
#pragma GCC unroll 4
    for (int m = 0; m < M; m++)
#pragma GCC unroll 4
        for (int c = 0; c < G; c++) {
            const float rc = r[m][c];
            rv[m][c] = rc - (AFL_F(mvf_t)){0};  /* rc in every lane (x - 0 == x, -0 too) */
        }
    AFL_PF_BEGIN(pf);
    for (int64_t v = 0; v < nv; v++) {
        AFL_F(mvf_t) xv[4];
        AFL_PF_STEP(pfc_);
        AFL_PF_STEP(pfc_);
#pragma GCC unroll 4
        for (int c = 0; c < G; c++) {
            xv[c] = (rem && v == nv - 1) ? AFL_F(load_part)(x[c] + v * AFL_VL, rem)
                                         : *(const AFL_F(mvf_t) *)(x[c] + v * AFL_VL);
            AFL_PIN(xv[c]);
        }
#pragma GCC unroll 4
        for (int m = 0; m < M; m++) {
            AFL_F(mvf_t) gv = *(AFL_F(mvf_t) *)(g[m] + v * AFL_VL);
#pragma GCC unroll 4
            for (int c = 0; c < G; c++) gv += xv[c] * rv[m][c];
            *(AFL_F(mvf_t) *)(g[m] + v * AFL_VL) = gv;
        }
    }
    AFL_PF_END(pf);
}

#define AFL_ITEM_GRAD_M(Gv)                                                   \
    switch (M) {                                                              \
    case 1: AFL_F(item_grad_tile)(x, Gv, r, g, 1, nv, rem, pf); break;        \
    case 2: AFL_F(item_grad_tile)(x, Gv, r, g, 2, nv, rem, pf); break;        \
    case 3: AFL_F(item_grad_tile)(x, Gv, r, g, 3, nv, rem, pf); break;        \
    default: AFL_F(item_grad_tile)(x, Gv, r, g, 4, nv, rem, pf); break;       \
    }

/* item_grad_tile with the candidate and model counts constant at each call site. */
static inline __attribute__((always_inline)) void
AFL_F(item_grad_models)(const float *const x[4], int G, const float r[4][4], float *const g[4],
                        int M, int64_t nv, int rem, afl_pf_cursor *pf)
{
    switch (G) {
    case 2: AFL_ITEM_GRAD_M(2) break;
    case 3: AFL_ITEM_GRAD_M(3) break;
    default: AFL_ITEM_GRAD_M(4) break;
    }
}
#undef AFL_ITEM_GRAD_M

/* part[a * stride + (v0 + v) * VL ...] += the running float sums gf[a * ldg + v * VL ...],
 * v < nv, in double, for the models with rows in the row block (off as in super_block). */
static inline void AFL_F(add_item_sums)(int64_t nA, const int64_t *off, const float *gf,
                                        int64_t ldg, int64_t v0, int64_t nv, double *part,
                                        int64_t stride)
{
    for (int64_t a = 0; a < nA; a++) {
        if (off[a + 1] == off[a]) continue;
        for (int64_t v = 0; v < nv; v++)
            AFL_F(add_double)(part + a * stride + (v0 + v) * AFL_VL,
                              *(const AFL_F(mvf_t) *)(gf + a * ldg + v * AFL_VL));
    }
}

/* The gradient of every model over its items of row block rb, for the feature vectors
 * [v0, v1) of a gradient slice: running float sums per model (gf, ldg floats per model) from
 * zero over the items in row order, then added in double to part (model a at a * stride),
 * for the models with rows in the row block.  R: the logit gradients as AFL_F(super_block)
 * holds them (model a's rows of the row block at R + off[a]). */
static void AFL_F(item_grad)(const afl_member_set *s, int64_t rb, int64_t ni, int64_t nA,
                             const int32_t *istart, const int32_t *imodel, const int32_t *iidx,
                             const int64_t *off, const float *R, int64_t v0, int64_t v1, int rem,
                             float *gf, int64_t ldg, double *part, int64_t stride)
{
    const int G = s->G;
    const int64_t r0 = s->row_blocks[rb], ldx = s->ldx, nv = v1 - v0;
    for (int64_t a = 0; a < nA; a++)
        if (off[a + 1] > off[a]) memset(gf + a * ldg, 0, (size_t)(nv * AFL_VL) * sizeof(float));
    afl_pf_cursor pf;
    afl_pf_set(&pf, s->X, ldx, s->D, r0, r0, v0 * AFL_VL, v1 * AFL_VL);
    for (int64_t it = 0; it < ni; it++) {
        const int32_t p0 = istart[it], p1 = istart[it + 1];
        if (p0 == p1) continue;
        const int64_t row = r0 + it * G;
        AFL_F(items_ahead)(s, &pf, r0, it, ni, v0 * AFL_VL, v1 * AFL_VL);
        const float *x[4];
        for (int c = 0; c < 4; c++) x[c] = s->X + (row + (c < G ? c : G - 1)) * ldx + v0 * AFL_VL;
        for (int32_t p = p0; p < p1; p += 4) {
            const int M = p1 - p < 4 ? p1 - p : 4;
            float r[4][4] = {{0}};
            float *g[4];
            for (int m = 0; m < 4; m++) {
                const int32_t a = imodel[p + (m < M ? m : 0)];
                g[m] = gf + a * ldg;
                for (int c = 0; c < G; c++) r[m][c] = R[off[a] + iidx[p + (m < M ? m : 0)] + c];
            }
            AFL_F(item_grad_models)(x, G, r, g, M, nv, rem, &pf);
        }
    }
    AFL_F(add_item_sums)(nA, off, gf, ldg, v0, nv, part, stride);
}

/* exp_nonpositive, not inlined: with a constant count the compiler turns its loop into scalar
 * code; out of line it stays the vectorised loop (the same values either way). */
static __attribute__((noinline)) void AFL_F(exp_vec)(double *w, int64_t n)
{
    AFL_F(exp_nonpositive)(w, n);
}

/* Multiple choice of 2-4 candidates with the cross-entropy loss: row block rb in one pass over
 * its items.  For each item, the models that train on it, four at a time: their scores (dot4
 * over the logit slices, as item_logits), the loss step of ce_rows for those items (the same
 * double operations per item), and at once the gradient, while the item's candidate rows are
 * still in L1 (item_grad_tile over all the features, into the models' running float sums,
 * gfull: Dp floats per model).  So a row comes from memory once per evaluation instead of once
 * for the scores and again for the gradient.  Every score, logit gradient, loss term and
 * gradient chain takes the same operations in the same order as the two passes, so the bits
 * are theirs.  The loss terms (gap, ssum: per model's item, at (off[a] - off[0]) / G + its
 * index) are summed per model at the end of the row block, in ce_rows's order. */
static void AFL_F(item_block_ce)(const afl_member_set *s, int64_t rb, int64_t ni, int64_t nA,
                                 const int32_t *istart, const int32_t *imodel, const int32_t *iidx,
                                 const int64_t *off, const float *W, int64_t P, int64_t nsl,
                                 const double *scale, float *gfull, double *gap, double *ssum,
                                 double *part, int64_t stride)
{
    const int G = s->G;
    const int64_t D = s->D, Dp = s->Dp, r0 = s->row_blocks[rb];
    const int64_t nvec = (D + AFL_VL - 1) / AFL_VL;
    int64_t v_begin, nv;
    int rem;
    AFL_F(slice)(D, nvec, 1, 0, &v_begin, &nv, &rem);  /* all features as one slice: [0, nvec) */
    for (int64_t a = 0; a < nA; a++)
        if (off[a + 1] > off[a]) memset(gfull + a * Dp, 0, (size_t)(nvec * AFL_VL) * sizeof(float));
    double e[16] __attribute__((aligned(64)));
    float res[4][4];
    afl_pf_cursor pf;
    afl_pf_set(&pf, s->X, s->ldx, D, r0, r0, 0, D);
    for (int64_t it = 0; it < ni; it++) {
        const int32_t p0 = istart[it], p1 = istart[it + 1];
        if (p0 == p1) continue;
        const int64_t row = r0 + it * G, next = it + 1 < ni ? row + G : row;
        const int32_t yi = s->y[row / G];
        /* the rows up to AFL_ITEM_AHEAD items on, brought into L2 a line or two per vector
         * step of this item's loops (a burst of all of an item's lines stalls the core until
         * they arrive, and memory then waits while the core computes) */
        AFL_F(items_ahead)(s, &pf, r0, it, ni, 0, D);
        const float *x[4], *xn[4];
        AFL_F(item_rows)(s, row, next, x, xn);
        for (int32_t p = p0; p < p1; p += 4) {
            const int M = p1 - p < 4 ? p1 - p : 4;
            const float *w[4];
            float *g[4];
            for (int m = 0; m < 4; m++) {
                const int32_t a = imodel[p + (m < M ? m : 0)];
                w[m] = W + (int64_t)a * P;
                g[m] = gfull + a * Dp;
            }
            /* scores: the logit slices in order, as item_logits adds them up */
            float z[4][4];
            for (int64_t k = 0; k < nsl; k++) {
                int64_t v0, v1;
                int srem;
                AFL_F(slice)(D, nvec, nsl, k, &v0, &v1, &srem);
                AFL_F(dots)(x, xn, w, v0, v1, srem, M, res, &pf);
                for (int m = 0; m < M; m++)
                    for (int c = 0; c < G; c++) z[m][c] = k == 0 ? res[m][c] : z[m][c] + res[m][c];
            }
            /* the loss step of ce_rows over these items of G candidates */
            for (int j = 0; j < 16; j++) e[j] = 0.0;
            double mx[4];
            for (int m = 0; m < M; m++) {
                for (int c = 0; c < G; c++) e[m * 4 + c] = (double)z[m][c];
                mx[m] = e[m * 4];
                for (int c = 1; c < G; c++) mx[m] = e[m * 4 + c] > mx[m] ? e[m * 4 + c] : mx[m];
            }
            for (int m = 0; m < M; m++) {
                const int64_t a = imodel[p + m], idx = (off[a] - off[0]) / G + iidx[p + m] / G;
                gap[idx] = mx[m] - e[m * 4 + yi];
                for (int c = 0; c < G; c++) e[m * 4 + c] -= mx[m];  /* exact: both floats */
            }
            AFL_F(exp_vec)(e, 16);
            float r[4][4] = {{0}};
            for (int m = 0; m < M; m++) {
                const int64_t a = imodel[p + m], idx = (off[a] - off[0]) / G + iidx[p + m] / G;
                double sm = e[m * 4];
                for (int c = 1; c < G; c++) sm += e[m * 4 + c];
                ssum[idx] = sm;
                const double sa = scale[a], sc = sa / sm;
                for (int c = 0; c < G; c++) r[m][c] = (float)(e[m * 4 + c] * sc - (c == yi ? sa : 0.0));
            }
            /* the gradient from the rows still in L1 */
            AFL_F(item_grad_models)(x, G, r, g, M, nv, rem, &pf);
        }
    }
    for (int64_t a = 0; a < nA; a++) {
        if (off[a + 1] == off[a]) continue;
        /* the model's loss as ce_rows sums it */
        const int64_t qi = (off[a + 1] - off[a]) / G, b0 = (off[a] - off[0]) / G;
        part[a * stride + P] += AFL_F(ce_loss_sum)(gap + b0, ssum + b0, qi);
    }
    AFL_F(add_item_sums)(nA, off, gfull, Dp, 0, nvec, part, stride);
}

/* Every active model over its member rows of the row blocks of super-block sb:
 * part[a * stride + 0 : C * Dp] += the gradient (class-major), part[a * stride + C * Dp] +=
 * the loss.  Row block by row block, the logits in slices of up to AFL_LOGIT_SLICE floats
 * over L2-sized sub-blocks (a slice of a sub-block's rows is read from memory by the first
 * model that needs it and from the core's L2 cache by every other model; multiple choice of
 * 2-4 candidates: item by item) and the loss and logit gradient R of each model; then in
 * slices of about AFL_MEMBER_SLICE floats, row block by row block, each model's gradient, so
 * the slice of every model's double sums stays in L2 while the super-block's row blocks are
 * added to it (in row-block order).
 * w->off[(rb - sb start) * (nA + 1) + a]: start of model a's rows of row block rb in R. */
static void AFL_F(super_block)(const afl_member_set *s, int64_t sb, int64_t nA,
                               const int64_t *active, const float *W, const double *scale,
                               double *part, int64_t stride, afl_member_scratch *w)
{
    const int C = s->C;
    const int64_t D = s->D, Dp = s->Dp, P = (int64_t)C * Dp, L = s->nrb + 1;
    const int64_t rb0 = s->sb[sb], rb1 = s->sb[sb + 1], A1 = nA + 1;
    int64_t Q = 0;
    for (int64_t rb = rb0; rb < rb1; rb++) {
        int64_t *off = w->off + (rb - rb0) * A1;
        for (int64_t a = 0; a < nA; a++) {
            const int64_t *mp = s->mptr + active[a] * L;
            off[a] = Q;
            Q += mp[rb + 1] - mp[rb];
        }
        off[nA] = Q;
    }
    if (Q == 0) return;
    const int64_t nvec = (D + AFL_VL - 1) / AFL_VL;
    /* logits: slices of up to AFL_LOGIT_SLICE floats (fixed by D), in sub-blocks of as many
     * rows as keep a slice of them within AFL_LOGIT_L2 bytes */
    const int64_t nsl = (nvec * AFL_VL + AFL_LOGIT_SLICE - 1) / AFL_LOGIT_SLICE;
    const int64_t slice_bytes = (nvec + nsl - 1) / nsl * AFL_VL * 4;
    const int64_t sub = AFL_LOGIT_L2 / slice_bytes > 16 ? AFL_LOGIT_L2 / slice_bytes : 16;
    /* the gradient: slices of about AFL_MEMBER_SLICE floats */
    const int64_t ns = (nvec * AFL_VL + AFL_MEMBER_SLICE - 1) / AFL_MEMBER_SLICE;
    int64_t v0, v1, p0 = 0, p1 = 0;
    int rem, prem;
    int64_t *beg = w->cur, *end = w->cur + nA;
    afl_pf_cursor pf;
    /* multiple choice of 2-4 candidates: item by item (see AFL_F(item_lists)) */
    const int item_major = C == 1 && s->G >= 2 && s->G <= 4 && w->istart != NULL;
    const int64_t ist = w->imax + 1;
    if (item_major)
        for (int64_t rb = rb0; rb < rb1; rb++) {
            const int64_t *off = w->off + (rb - rb0) * A1, e0 = off[0] / s->G;
            w->ni[rb - rb0] = AFL_F(item_lists)(s, rb, nA, active, off, w->istart + (rb - rb0) * ist,
                                                w->imodel + e0, w->iidx + e0);
        }
    if (item_major && s->loss_code == AFL_LOSS_CE && w->gfull) {
        for (int64_t rb = rb0; rb < rb1; rb++) {
            const int64_t *off = w->off + (rb - rb0) * A1, e0 = off[0] / s->G;
            if (off[nA] == off[0]) continue;
            AFL_F(item_block_ce)(s, rb, w->ni[rb - rb0], nA, w->istart + (rb - rb0) * ist,
                                 w->imodel + e0, w->iidx + e0, off, W, P, nsl, scale, w->gfull,
                                 w->igap + e0, w->isum + e0, part, stride);
        }
        return;
    }
    for (int64_t rb = rb0; rb < rb1; rb++) {
        const int64_t *off = w->off + (rb - rb0) * A1;
        if (off[nA] == off[0]) continue;
        const int64_t r0 = s->row_blocks[rb], r1 = s->row_blocks[rb + 1];
        if (item_major) {
            const int64_t e0 = off[0] / s->G;
            for (int64_t k = 0; k < nsl; k++) {
                AFL_F(slice)(D, nvec, nsl, k, &v0, &v1, &rem);
                AFL_F(item_logits)(s, rb, w->ni[rb - rb0], w->istart + (rb - rb0) * ist,
                                   w->imodel + e0, w->iidx + e0, off, W, P, v0, v1, rem, k == 0, w->Z);
            }
        }
        else {
            for (int64_t a = 0; a < nA; a++) end[a] = 0;
            for (int64_t s0 = r0; s0 < r1; s0 += sub) {
                const int64_t s1 = s0 + sub < r1 ? s0 + sub : r1;
                /* each model's groups of four rows that start in this sub-block (a group may
                 * reach into the next one: its logits do not depend on where it is cut) */
                for (int64_t a = 0; a < nA; a++) {
                    const int64_t q = off[a + 1] - off[a];
                    const int32_t *rows = s->mrows + s->mptr[active[a] * L + rb];
                    int64_t e = end[a];
                    beg[a] = e;
                    while (e < q && rows[e] < s1) e += 4;
                    end[a] = e;
                }
                for (int64_t k = 0; k < nsl; k++) {
                    AFL_F(slice)(D, nvec, nsl, k, &v0, &v1, &rem);
                    /* while this slice is in use: the sub-block's next slice, or the next
                     * sub-block's (or row block's) first */
                    int64_t n0 = s0, n1 = s1;
                    if (k + 1 < nsl) AFL_F(slice)(D, nvec, nsl, k + 1, &p0, &p1, &prem);
                    else {
                        AFL_F(slice)(D, nvec, nsl, 0, &p0, &p1, &prem);
                        n0 = s1;
                        n1 = s1 < r1 ? (s1 + sub < r1 ? s1 + sub : r1)
                           : rb + 1 < rb1 ? (s->row_blocks[rb + 2] - r1 < sub ? s->row_blocks[rb + 2]
                                                                              : r1 + sub)
                           : r1;
                    }
                    afl_pf_set(&pf, s->X, s->ldx, D, n0, n1, p0 * AFL_VL, p1 * AFL_VL);
                    for (int64_t a = 0; a < nA; a++) {
                        if (end[a] <= beg[a]) continue;
                        const int64_t q = off[a + 1] - off[a];
                        const int32_t *rows = s->mrows + s->mptr[active[a] * L + rb];
                        AFL_F(logits)(s->X, s->ldx, Dp, rows, q, beg[a], end[a], W + a * P, C, v0, v1,
                                      rem, k == 0, w->Z + (off[a] - off[0]) * C, &pf);
                    }
                }
            }
        }
        for (int64_t a = 0; a < nA; a++) {
            const int64_t q = off[a + 1] - off[a];
            if (q <= 0) continue;
            const int32_t *rows = s->mrows + s->mptr[active[a] * L + rb];
            /* rows of C classes, or (G > 1) items of G candidates whose one score each sits
             * where an item's G classes would: the same loss step over q / G items */
            const int G = s->G > 1 ? s->G : 1, CI = C * G;
            const int64_t qi = q / G;
            for (int64_t i = 0; i < qi; i++) w->yl[i] = s->y[rows[i * G] / G];
            const float *Z = w->Z + (off[a] - off[0]) * C;
            float *R = w->R + off[a] * C;
            part[a * stride + P] += s->loss_code == AFL_LOSS_CE
                ? AFL_F(ce_rows)(qi, CI, s->ref, Z, w->yl, scale[a], R, w->work)
                : AFL_F(generic_rows)(s, qi, CI, s->ref, Z, w->yl, scale[a], R, w->zb, w->work);
        }
    }
    /* the last slice first: the last row block's is still in cache from the logits */
    for (int64_t k = ns - 1; k >= 0; k--) {
        AFL_F(slice)(D, nvec, ns, k, &v0, &v1, &rem);
        for (int64_t rb = rb0; rb < rb1; rb++) {
            const int64_t *off = w->off + (rb - rb0) * A1;
            if (item_major) {
                if (off[nA] == off[0]) continue;
                const int64_t e0 = off[0] / s->G;
                AFL_F(item_grad)(s, rb, w->ni[rb - rb0], nA, w->istart + (rb - rb0) * ist,
                                 w->imodel + e0, w->iidx + e0, off, w->R, v0, v1, rem, w->gf,
                                 w->ldg, part, stride);
                continue;
            }
            /* while this row block's slice is in use: the next row block's, or the first
             * row block's next slice */
            int64_t nb = rb + 1 < rb1 ? rb + 1 : rb0;
            if (rb + 1 < rb1) { p0 = v0; p1 = v1; }
            else if (k > 0) AFL_F(slice)(D, nvec, ns, k - 1, &p0, &p1, &prem);
            else nb = -1;
            const int64_t n0 = nb >= 0 ? s->row_blocks[nb] : 0;
            const int64_t n1 = nb >= 0 ? s->row_blocks[nb + 1] : 0;
            afl_pf_set(&pf, s->X, s->ldx, D, n0, n1, p0 * AFL_VL, p1 * AFL_VL);
            for (int64_t a = 0; a < nA; a++) {
                const int64_t q = off[a + 1] - off[a];
                if (q <= 0) continue;
                const int32_t *rows = s->mrows + s->mptr[active[a] * L + rb];
                AFL_F(grad_add)(s->X, s->ldx, Dp, rows, q, w->R + off[a] * C, C, v0, v1, rem,
                                part + a * stride, &pf);
            }
        }
    }
}

/* Prediction of rows i0 <= i < i1 from their logits Z (row i at Z + (i - i0) * ldz; class c of
 * model j at c * B + j, class-major so every step is a loop over the models; with ref = 1 the
 * last of the C classes has no logit in Z, its logit is 0, the reference-class form): where
 * heldout[i * B + j], seen[i] += 1, correct[i] += (arg max == y[i]) (lowest class on ties),
 * prob_label[i] += p_{y[i]} (y[i] >= 0), proba_sum[i * C + c] += p_c (when not NULL); sums over
 * the models in model order.  work: (C + 2) * afl_member_pad(B) doubles, am: B ints. */
static void AFL_F(predict_rows)(int64_t i0, int64_t i1, int64_t B, int C, int ref, const float *Z,
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
        for (int c = 0; c < C - ref; c++) {
            AFL_IVDEP
            for (int64_t j = 0; j < B; j++) e[c * bp + j] = (double)z[c * B + j];
            for (int64_t j = B; j < bp; j++) e[c * bp + j] = 0.0;  /* pads: exp(0), harmless */
        }
        for (int c = C - ref; c < C; c++)
            for (int64_t j = 0; j < bp; j++) e[c * bp + j] = 0.0;  /* the reference class */
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
