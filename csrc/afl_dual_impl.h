/* The inner loops of afl_dual.c, compiled once per instruction set (AFL_SFX, AFL_VL lanes of
 * floats): included by afl_dual.c under each target, followed by the model's solver that calls
 * them (afl_dual_model.h).  The order of every sum is fixed by the code (lane accumulators
 * reduced in a fixed order), so a model's bits do not depend on the thread that trains it. */
#define AFL_CAT2(a, b) a##b
#define AFL_CAT(a, b) AFL_CAT2(a, b)

#if AFL_DUAL_ISA == 2
/* The columns of a row of K marked in cmask, chunks q0..q1 (16 columns each), written in order
 * from out (cum[q]: members before chunk q; out receives chunk q0's first member), by masked
 * stores: never past the last one (rows may be written by other threads), and no store waits
 * for the previous chunk's count. */
static inline void AFL_CAT(dual_compress_row, AFL_SFX)(const float *row, int64_t ldk, const uint16_t *cmask,
                                                         const int64_t *cum, int64_t q0, int64_t q1, float *out)
{
    out -= cum[q0];
    for (int64_t q = q0; q <= q1; q++) {
        const __mmask16 mk = (__mmask16)cmask[q];
        const __m512 v = q * 16 + 16 <= ldk ? _mm512_loadu_ps(row + q * 16) : _mm512_maskz_loadu_ps(mk, row + q * 16);
        _mm512_mask_storeu_ps(out + cum[q], (__mmask16)((1u << (cum[q + 1] - cum[q])) - 1u),
                              _mm512_maskz_compress_ps(mk, v));
    }
}
#endif

/* out[a * ld + b] = K[krows[a] * ldk + kcols[b]] for a < n_rows, b < t (zero in the pad up to
 * ld); kcols increasing.  With AVX-512 each row of K is read in 16-column chunks and the
 * chunk's columns of kcols kept by a compress under the mask cmask (bit j of chunk q: column
 * 16 q + j is in kcols; cum: dual_chunk_counts of cmask). */
static void AFL_CAT(dual_gather, AFL_SFX)(int64_t n_rows, const int64_t *krows, int64_t t, int64_t ld,
                                           const float *K, int64_t ldk, const int64_t *kcols,
                                           const uint16_t *cmask, const int64_t *cum, float *out0)
{
    for (int64_t a = 0; a < n_rows; a++) {
        const float *row = K + krows[a] * ldk;
        float *out = out0 + a * ld;
#if AFL_DUAL_ISA == 2
        AFL_CAT(dual_compress_row, AFL_SFX)(row, ldk, cmask, cum, kcols[0] / 16, kcols[t - 1] / 16, out);
#else
        (void)cmask;
        (void)cum;
        for (int64_t b = 0; b < t; b++) out[b] = row[kcols[b]];
#endif
        for (int64_t b = t; b < ld; b++) out[b] = 0.0f;
    }
}

/* The symmetric t x t block of one model, its upper triangle only: row a holds columns
 * [a16, ld) (a16 = a rounded down to 16) with zeros at and below the diagonal and beyond t,
 * rows packed one after the other; the diagonal goes to diag.  Row a of K (krow kcols[a]) is
 * read from the chunk of 16 columns that holds kcols[a] on (cum[q]: members of kcols in the
 * chunks before q), compressed into rowbuf (ld + 16 floats). */
static void AFL_CAT(dual_gather_sym, AFL_SFX)(int64_t t, int64_t ld, const float *K, int64_t ldk,
                                               const int64_t *kcols, const uint16_t *cmask,
                                               const int64_t *cum, float *rowbuf, float *packed,
                                               float *diag)
{
    int64_t off = 0;
    for (int64_t a = 0; a < t; a++) {
        const float *row = K + kcols[a] * ldk;
#if AFL_DUAL_ISA == 2
        const int64_t qa = kcols[a] / 16;
        if (a + 1 < t) {
            /* the next row's first cache lines (its start is not where this row's stream goes) */
            const float *next = K + kcols[a + 1] * ldk + kcols[a + 1] / 16 * 16;
            for (int u = 0; u < 4; u++) _mm_prefetch((const char *)(next + 16 * u), _MM_HINT_T0);
        }
        AFL_CAT(dual_compress_row, AFL_SFX)(row, ldk, cmask, cum, qa, kcols[t - 1] / 16, rowbuf + cum[qa]);
#else
        (void)cmask;
        (void)cum;
        for (int64_t b = a; b < t; b++) rowbuf[b] = row[kcols[b]];
#endif
        diag[a] = rowbuf[a];
        const int64_t a16 = a / 16 * 16;
        float *dst = packed + off;
        for (int64_t b = a16; b <= a; b++) dst[b - a16] = 0.0f;
        for (int64_t b = a + 1; b < t; b++) dst[b - a16] = rowbuf[b];
        for (int64_t b = t; b < ld; b++) dst[b - a16] = 0.0f;
        off += ld - a16;
    }
}

/* The sum of 16 float lanes in double, by a fixed tree (lane l + lane l + 8, then halves; on
 * AVX2 the lanes of two 8-float halves). */
#if AFL_DUAL_ISA == 2
static inline double AFL_CAT(dual_lanes_sum, AFL_SFX)(__m512 s)
{
    const __m512d d = _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(s)),
                                    _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1))));
    const __m256d h = _mm256_add_pd(_mm512_castpd512_pd256(d), _mm512_extractf64x4_pd(d, 1));
    const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    return _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
}
#elif AFL_DUAL_ISA == 1
static inline double AFL_CAT(dual_lanes_sum, AFL_SFX)(__m256 lo, __m256 hi)
{
    const __m256d a = _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(lo)), _mm256_cvtps_pd(_mm256_castps256_ps128(hi)));
    const __m256d b = _mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(lo, 1)), _mm256_cvtps_pd(_mm256_extractf128_ps(hi, 1)));
    const __m256d h = _mm256_add_pd(a, b);
    const __m128d q = _mm_add_pd(_mm256_castpd256_pd128(h), _mm256_extractf128_pd(h, 1));
    return _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
}
#endif

/* out[a] = sum_b K_ab v[b] from the packed upper triangle (dual_gather_sym; v zero from t to
 * ld): row a's entries serve its own dot product (16 float lanes; with AVX-512 or AVX2 summed
 * in double by dual_lanes_sum, else in lane order) and, as the column, the rows after it
 * (added in float32 in row order in blocks of 64 rows, each block's sums then in double), the
 * diagonal apart; with AVX-512 or AVX2 four rows a pass (v and the column sums read once for
 * four rows).  accf (ld floats) and outx (ld doubles) are scratch.  A fixed order: no bit
 * depends on the thread. */
static void AFL_CAT(dual_matvec_sym, AFL_SFX)(int64_t t, int64_t ld, const float *packed, const float *diag,
                                               const float *v, float *accf, double *outx, double *out)
{
    for (int64_t b = 0; b < ld; b++) { accf[b] = 0.0f; outx[b] = 0.0; }
    int64_t off = 0;
    for (int64_t a0 = 0; a0 < t; a0 += 64) {
        const int64_t a1 = a0 + 64 < t ? a0 + 64 : t;
        int64_t a = a0;
#if AFL_DUAL_ISA == 2
        /* four rows a pass (rows 4q..4q+3 share their 16-block, so their stored length): v and
         * accf read once for four rows, the column updates in row order as one row at a time */
        for (; a + 4 <= a1; a += 4) {
            const int64_t a16 = a / 16 * 16, L = ld - a16;
            const float *r0p = packed + off, *r1p = r0p + L, *r2p = r1p + L, *r3p = r2p + L;
            off += 4 * L;
            __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
            const __m512 v0 = _mm512_set1_ps(v[a]), v1 = _mm512_set1_ps(v[a + 1]);
            const __m512 v2 = _mm512_set1_ps(v[a + 2]), v3 = _mm512_set1_ps(v[a + 3]);
            for (int64_t j = 0; j < L; j += 16) {
                const __m512 r0 = _mm512_loadu_ps(r0p + j), r1 = _mm512_loadu_ps(r1p + j);
                const __m512 r2 = _mm512_loadu_ps(r2p + j), r3 = _mm512_loadu_ps(r3p + j);
                const __m512 vb = _mm512_loadu_ps(v + a16 + j);
                s0 = _mm512_fmadd_ps(r0, vb, s0);
                s1 = _mm512_fmadd_ps(r1, vb, s1);
                s2 = _mm512_fmadd_ps(r2, vb, s2);
                s3 = _mm512_fmadd_ps(r3, vb, s3);
                __m512 acc = _mm512_loadu_ps(accf + a16 + j);
                acc = _mm512_fmadd_ps(r0, v0, acc);
                acc = _mm512_fmadd_ps(r1, v1, acc);
                acc = _mm512_fmadd_ps(r2, v2, acc);
                acc = _mm512_fmadd_ps(r3, v3, acc);
                _mm512_storeu_ps(accf + a16 + j, acc);
            }
            const __m512 sq[4] = {s0, s1, s2, s3};
            for (int u = 0; u < 4; u++)
                out[a + u] = AFL_CAT(dual_lanes_sum, AFL_SFX)(sq[u]) + (double)diag[a + u] * (double)v[a + u];
        }
#elif AFL_DUAL_ISA == 1
        for (; a + 4 <= a1; a += 4) {
            const int64_t a16 = a / 16 * 16, L = ld - a16;
            const float *rp[4] = {packed + off, packed + off + L, packed + off + 2 * L, packed + off + 3 * L};
            off += 4 * L;
            __m256 sl[4], sh[4], vv[4];
            for (int u = 0; u < 4; u++) {
                sl[u] = _mm256_setzero_ps();
                sh[u] = _mm256_setzero_ps();
                vv[u] = _mm256_set1_ps(v[a + u]);
            }
            for (int64_t j = 0; j < L; j += 16) {
                const __m256 vl = _mm256_loadu_ps(v + a16 + j), vh = _mm256_loadu_ps(v + a16 + j + 8);
                __m256 al = _mm256_loadu_ps(accf + a16 + j), ah = _mm256_loadu_ps(accf + a16 + j + 8);
                for (int u = 0; u < 4; u++) {
                    const __m256 rl = _mm256_loadu_ps(rp[u] + j), rh = _mm256_loadu_ps(rp[u] + j + 8);
                    sl[u] = _mm256_fmadd_ps(rl, vl, sl[u]);
                    sh[u] = _mm256_fmadd_ps(rh, vh, sh[u]);
                    al = _mm256_fmadd_ps(rl, vv[u], al);
                    ah = _mm256_fmadd_ps(rh, vv[u], ah);
                }
                _mm256_storeu_ps(accf + a16 + j, al);
                _mm256_storeu_ps(accf + a16 + j + 8, ah);
            }
            for (int u = 0; u < 4; u++)
                out[a + u] = AFL_CAT(dual_lanes_sum, AFL_SFX)(sl[u], sh[u]) + (double)diag[a + u] * (double)v[a + u];
        }
#endif
        for (; a < a1; a++) {
            const int64_t a16 = a / 16 * 16, L = ld - a16;
            const float *row = packed + off;
            off += L;
            const float va = v[a];
#if AFL_DUAL_ISA == 2
            __m512 s0 = _mm512_setzero_ps();
            const __m512 vv = _mm512_set1_ps(va);
            for (int64_t j = 0; j < L; j += 16) {
                const __m512 r = _mm512_loadu_ps(row + j);
                s0 = _mm512_fmadd_ps(r, _mm512_loadu_ps(v + a16 + j), s0);
                _mm512_storeu_ps(accf + a16 + j, _mm512_fmadd_ps(r, vv, _mm512_loadu_ps(accf + a16 + j)));
            }
            const double d0 = AFL_CAT(dual_lanes_sum, AFL_SFX)(s0);
#elif AFL_DUAL_ISA == 1
            __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
            const __m256 vv = _mm256_set1_ps(va);
            for (int64_t j = 0; j < L; j += 16) {
                const __m256 r0 = _mm256_loadu_ps(row + j), r1 = _mm256_loadu_ps(row + j + 8);
                s0 = _mm256_fmadd_ps(r0, _mm256_loadu_ps(v + a16 + j), s0);
                s1 = _mm256_fmadd_ps(r1, _mm256_loadu_ps(v + a16 + j + 8), s1);
                _mm256_storeu_ps(accf + a16 + j, _mm256_fmadd_ps(r0, vv, _mm256_loadu_ps(accf + a16 + j)));
                _mm256_storeu_ps(accf + a16 + j + 8, _mm256_fmadd_ps(r1, vv, _mm256_loadu_ps(accf + a16 + j + 8)));
            }
            const double d0 = AFL_CAT(dual_lanes_sum, AFL_SFX)(s0, s1);
#else
            float l0[16];
            for (int l = 0; l < 16; l++) l0[l] = 0.0f;
            for (int64_t j = 0; j < L; j += 16)
                for (int l = 0; l < 16; l++) {
                    l0[l] += row[j + l] * v[a16 + j + l];
                    accf[a16 + j + l] += row[j + l] * va;
                }
            double d0 = 0.0;
            for (int l = 0; l < 16; l++) d0 += l0[l];
#endif
            out[a] = d0 + (double)diag[a] * (double)va;
        }
        for (int64_t b = a0; b < ld; b++) { outx[b] += (double)accf[b]; accf[b] = 0.0f; }
    }
    for (int64_t a = 0; a < t; a++) out[a] += outx[a];
}

/* acc[f] += sum_i c[i] x_i[f] for f < n over the nr rows x_i: float products and sums over
 * blocks of DUAL_ROW_BLOCK rows (in row order; facc, n floats, holds a block's sums), each
 * block's sum then added in double (the sgemm's convention).  Four rows a pass over facc:
 * four sequential streams of X, facc read and written once for four rows. */
#define DUAL_ROW_BLOCK 64
static void AFL_CAT(dual_rows_product, AFL_SFX)(int64_t n, int64_t nr, const float *c, const float *const *x,
                                                float *restrict facc, double *restrict acc)
{
    for (int64_t i0 = 0; i0 < nr; i0 += DUAL_ROW_BLOCK) {
        const int64_t i1 = nr - i0 < DUAL_ROW_BLOCK ? nr : i0 + DUAL_ROW_BLOCK;
        for (int64_t f = 0; f < n; f++) facc[f] = 0.0f;
        int64_t i = i0;
        for (; i + 4 <= i1; i += 4) {
            const float *restrict x0 = x[i], *restrict x1 = x[i + 1], *restrict x2 = x[i + 2], *restrict x3 = x[i + 3];
            const float c0 = c[i], c1 = c[i + 1], c2 = c[i + 2], c3 = c[i + 3];
            for (int64_t f = 0; f < n; f++) {
                float s = facc[f];
                s += c0 * x0[f];
                s += c1 * x1[f];
                s += c2 * x2[f];
                s += c3 * x3[f];
                facc[f] = s;
            }
        }
        for (; i < i1; i++) {
            const float *restrict xi = x[i];
            const float ci = c[i];
            for (int64_t f = 0; f < n; f++) facc[f] += ci * xi[f];
        }
        for (int64_t f = 0; f < n; f++) acc[f] += (double)facc[f];
    }
}

/* sum_f x[f] u[f] for f < n, in double. */
static double AFL_CAT(dual_dot, AFL_SFX)(int64_t n, const float *x, const double *u)
{
    double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t f = 0;
    for (; f + 8 <= n; f += 8)
        for (int l = 0; l < 8; l++) s[l] += (double)x[f + l] * u[f + l];
    double r = 0.0;
    for (; f < n; f++) r += (double)x[f] * u[f];
    for (int l = 0; l < 8; l++) r += s[l];
    return r;
}

/* The sum of 16 float lanes in double by a fixed tree (lane q + lane q + 8, then halves). */
static inline double AFL_CAT(dual_lanes16, AFL_SFX)(const float *l)
{
    double h[8];
    for (int q = 0; q < 8; q++) h[q] = (double)l[q] + (double)l[q + 8];
    return ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
}

/* The sum of 8 lane sums by a fixed tree. */
static inline double AFL_CAT(dual_lanes8, AFL_SFX)(const double *l)
{
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* sum_i a[i] b[i] over n doubles, in 8 lanes (fixed order). */
static double AFL_CAT(dual_ddot, AFL_SFX)(int64_t n, const double *a, const double *b)
{
    double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) s[l] += a[i + l] * b[i + l];
    double r = 0.0;
    for (; i < n; i++) r += a[i] * b[i];
    for (int l = 0; l < 8; l++) r += s[l];
    return r;
}

/* The rank-r part of a product with the basis' Gram matrix in float lanes, as the t x t block's
 * product: g[a] += sum_i XVf[i][a] vV[i] (float products summed in float over i in order, then
 * added in double) for a < t, and unless dots is NULL, dots[i] = sum_a XVf[i][a] vf[a] (16 float
 * lanes summed in double by a fixed tree).  XVf: r rows of ld floats (zero from t to ld), vf: ld
 * floats (zero from t); gf: ld floats of scratch.  Four rows of XVf a pass. */
static void AFL_CAT(dual_rank_terms_f, AFL_SFX)(int64_t t, int64_t ld, int r, const float *XVf, const float *vf,
                                                const double *vV, float *restrict gf, double *restrict g,
                                                double *restrict dots)
{
    for (int64_t a = 0; a < ld; a++) gf[a] = 0.0f;
    int i = 0;
    if (!dots) {
        for (; i + 4 <= r; i += 4) {
            const float *restrict x0 = XVf + i * ld, *restrict x1 = x0 + ld, *restrict x2 = x1 + ld,
                        *restrict x3 = x2 + ld;
            const float w0 = (float)vV[i], w1 = (float)vV[i + 1], w2 = (float)vV[i + 2], w3 = (float)vV[i + 3];
            for (int64_t a = 0; a < ld; a++) {
                float z = gf[a];
                z += x0[a] * w0;
                z += x1[a] * w1;
                z += x2[a] * w2;
                z += x3[a] * w3;
                gf[a] = z;
            }
        }
        for (; i < r; i++) {
            const float *restrict x = XVf + i * ld;
            const float w = (float)vV[i];
            for (int64_t a = 0; a < ld; a++) gf[a] += x[a] * w;
        }
        for (int64_t a = 0; a < t; a++) g[a] += (double)gf[a];
        return;
    }
    for (; i + 4 <= r; i += 4) {
        const float *restrict x0 = XVf + i * ld, *restrict x1 = x0 + ld, *restrict x2 = x1 + ld, *restrict x3 = x2 + ld;
        const float w0 = (float)vV[i], w1 = (float)vV[i + 1], w2 = (float)vV[i + 2], w3 = (float)vV[i + 3];
        float l0[16], l1[16], l2[16], l3[16];
        for (int q = 0; q < 16; q++) { l0[q] = 0.0f; l1[q] = 0.0f; l2[q] = 0.0f; l3[q] = 0.0f; }
        for (int64_t a = 0; a < ld; a += 16)
            for (int q = 0; q < 16; q++) {
                const float v = vf[a + q];
                l0[q] += x0[a + q] * v;
                l1[q] += x1[a + q] * v;
                l2[q] += x2[a + q] * v;
                l3[q] += x3[a + q] * v;
                float z = gf[a + q];
                z += x0[a + q] * w0;
                z += x1[a + q] * w1;
                z += x2[a + q] * w2;
                z += x3[a + q] * w3;
                gf[a + q] = z;
            }
        dots[i] = AFL_CAT(dual_lanes16, AFL_SFX)(l0);
        dots[i + 1] = AFL_CAT(dual_lanes16, AFL_SFX)(l1);
        dots[i + 2] = AFL_CAT(dual_lanes16, AFL_SFX)(l2);
        dots[i + 3] = AFL_CAT(dual_lanes16, AFL_SFX)(l3);
    }
    for (; i < r; i++) {
        const float *restrict x = XVf + i * ld;
        const float w = (float)vV[i];
        float l[16];
        for (int q = 0; q < 16; q++) l[q] = 0.0f;
        for (int64_t a = 0; a < ld; a += 16)
            for (int q = 0; q < 16; q++) {
                l[q] += x[a + q] * vf[a + q];
                gf[a + q] += x[a + q] * w;
            }
        dots[i] = AFL_CAT(dual_lanes16, AFL_SFX)(l);
    }
    for (int64_t a = 0; a < t; a++) g[a] += (double)gf[a];
}

/* Rows i0 <= i < i1 of the logits from K (afl_dual.c, dual_logits): per entry the K part in
 * Zd, then the V terms in order, the start's, the intercept (Gt: those coefficients by term,
 * row q of BC), rounded to float32; a loop over the row's entries for each term. */
static void AFL_CAT(dual_logit_terms, AFL_SFX)(int64_t i0, int64_t i1, int64_t BC, int r, int C, const double *XV,
                                               const double *XU, const double *Gt, double *Zd, float *logits)
{
    for (int64_t i = i0; i < i1; i++) {
        double *restrict z = Zd + i * BC;
        const double *xv = XV + i * r, *xu = XU ? XU + i * C : NULL;
        for (int q = 0; q < r; q++) {
            const double x = xv[q], *restrict g = Gt + q * BC;
            for (int64_t e = 0; e < BC; e++) z[e] += x * g[e];
        }
        if (xu)
            for (int l = 0; l < C; l++) {
                const double x = xu[l], *restrict g = Gt + (r + l) * BC;
                for (int64_t e = 0; e < BC; e++) z[e] += x * g[e];
            }
        const double *restrict gb = Gt + (r + C) * BC;
        float *restrict out = logits + i * BC;
        for (int64_t e = 0; e < BC; e++) out[e] = (float)(z[e] + gb[e]);
    }
}

#define AFL_F(name) AFL_CAT(name, AFL_SFX)
#include "afl_exp_impl.h"
#undef AFL_F
#include "afl_dual_model.h"

#undef AFL_CAT
#undef AFL_CAT2
