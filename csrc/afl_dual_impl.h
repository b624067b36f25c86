/* The inner loops of afl_dual.c, compiled once per instruction set (AFL_SFX, AFL_VL lanes of
 * floats): included by afl_dual.c under each target.  The order of every sum is fixed by the
 * code (AFL_VL lane accumulators, reduced in lane order), so a model's bits do not depend on
 * the thread that trains it. */
#define AFL_CAT2(a, b) a##b
#define AFL_CAT(a, b) AFL_CAT2(a, b)

#if AFL_DUAL_ISA == 2
/* The columns of a row of K marked in cmask, chunks q0..q1 (16 columns each), written in order
 * from out (a masked store: never past the last one, since rows may be written by other
 * threads). */
static inline void AFL_CAT(dual_compress_row, AFL_SFX)(const float *row, int64_t ldk, const uint16_t *cmask,
                                                      int64_t q0, int64_t q1, float *out)
{
    int64_t pos = 0;
    for (int64_t q = q0; q <= q1; q++) {
        const __mmask16 mk = (__mmask16)cmask[q];
        if (!mk) continue;
        __m512 v = q * 16 + 16 <= ldk ? _mm512_loadu_ps(row + q * 16) : _mm512_maskz_loadu_ps(mk, row + q * 16);
        const int cnt = __builtin_popcount((unsigned)mk);
        _mm512_mask_storeu_ps(out + pos, (__mmask16)((1u << cnt) - 1u), _mm512_maskz_compress_ps(mk, v));
        pos += cnt;
    }
}
#endif

/* out[a * ld + b] = K[krows[a] * ldk + kcols[b]] for a < n_rows, b < t (zero in the pad up to
 * ld); kcols increasing.  With AVX-512 each row of K is read in 16-column chunks and the
 * chunk's columns of kcols kept by a compress under the mask cmask (bit j of chunk q: column
 * 16 q + j is in kcols; nchunk chunks). */
static void AFL_CAT(dual_gather, AFL_SFX)(int64_t n_rows, const int64_t *krows, int64_t t, int64_t ld,
                                           const float *K, int64_t ldk, const int64_t *kcols,
                                           const uint16_t *cmask, int64_t nchunk, float *out0)
{
    for (int64_t a = 0; a < n_rows; a++) {
        const float *row = K + krows[a] * ldk;
        float *out = out0 + a * ld;
#if AFL_DUAL_ISA == 2
        const int64_t q1 = kcols[t - 1] / 16;
        AFL_CAT(dual_compress_row, AFL_SFX)(row, ldk, cmask, kcols[0] / 16, q1 < nchunk ? q1 : nchunk - 1, out);
#else
        (void)cmask;
        (void)nchunk;
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
        AFL_CAT(dual_compress_row, AFL_SFX)(row, ldk, cmask, qa, kcols[t - 1] / 16, rowbuf + cum[qa]);
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

/* out[a] = sum_b K_ab v[b] from the packed upper triangle (dual_gather_sym; v zero from t to
 * ld): row a's entries serve its own dot product and, as the column, the rows after it (added
 * in float32 in blocks of 64 rows, each block's sums then in double), the diagonal apart.
 * accf (ld floats) and outx (ld doubles) are scratch.  A fixed order: no bit depends on the
 * thread. */
static void AFL_CAT(dual_matvec_sym, AFL_SFX)(int64_t t, int64_t ld, const float *packed, const float *diag,
                                               const float *v, float *accf, double *outx, double *out)
{
    for (int64_t b = 0; b < ld; b++) { accf[b] = 0.0f; outx[b] = 0.0; }
    int64_t off = 0;
    for (int64_t a0 = 0; a0 < t; a0 += 64) {
        const int64_t a1 = a0 + 64 < t ? a0 + 64 : t;
        for (int64_t a = a0; a < a1; a++) {
            const int64_t a16 = a / 16 * 16, L = ld - a16;
            const float *row = packed + off;
            off += L;
            const float va = v[a];
            float l0[16];
#if AFL_DUAL_ISA == 2
            __m512 s0 = _mm512_setzero_ps();
            const __m512 vv = _mm512_set1_ps(va);
            for (int64_t j = 0; j < L; j += 16) {
                const __m512 r = _mm512_loadu_ps(row + j);
                s0 = _mm512_fmadd_ps(r, _mm512_loadu_ps(v + a16 + j), s0);
                _mm512_storeu_ps(accf + a16 + j, _mm512_fmadd_ps(r, vv, _mm512_loadu_ps(accf + a16 + j)));
            }
            _mm512_storeu_ps(l0, s0);
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
            _mm256_storeu_ps(l0, s0);
            _mm256_storeu_ps(l0 + 8, s1);
#else
            for (int l = 0; l < 16; l++) l0[l] = 0.0f;
            for (int64_t j = 0; j < L; j += 16)
                for (int l = 0; l < 16; l++) {
                    l0[l] += row[j + l] * v[a16 + j + l];
                    accf[a16 + j + l] += row[j + l] * va;
                }
#endif
            double d0 = 0.0;
            for (int l = 0; l < 16; l++) d0 += l0[l];
            out[a] = d0 + (double)diag[a] * (double)va;
        }
        for (int64_t b = a0; b < ld; b++) { outx[b] += (double)accf[b]; accf[b] = 0.0f; }
    }
    for (int64_t a = 0; a < t; a++) out[a] += outx[a];
}

/* acc[f] += a * x[f] for f < n (double sums of float features, in row order). */
static void AFL_CAT(dual_axpy, AFL_SFX)(int64_t n, double a, const float *x, double *acc)
{
    for (int64_t f = 0; f < n; f++) acc[f] += a * (double)x[f];
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

#undef AFL_CAT
#undef AFL_CAT2
