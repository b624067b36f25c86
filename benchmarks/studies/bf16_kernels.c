/* Paired float32 / bf16 kernels for benchmarks/studies/bf16_experiment.py.
 *
 * Each pair has the same loop structure (four rows at a time, vectorised along the features,
 * one accumulator per row and class, lanes reduced at the end), so their ratio is what storing
 * rows in bf16 changes:
 *   logits   : z[i, c] = x_i . w_c for the member rows of one model (the member pass's first
 *              product); bf16 uses VDPBF16PS (32 bf16 products per instruction, float32 sums).
 *   gradient : g_c += r[i, c] x_i over the member rows (the second product); bf16 rows are
 *              widened to float32 in registers (a shift), so only the bytes read halve.
 *   predict  : logits of every row for K weight vectors (all models' classes), as prediction.
 * Rows are padded to a multiple of 32 columns with zeros.  Not part of the package.
 */
#include <immintrin.h>
#include <stdint.h>

static inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

void logits_f32(int64_t nrows, const int32_t *rows, int64_t Dp, const float *X, int C,
                const float *W, float *z)
{
    int64_t i = 0;
    for (; i + 4 <= nrows; i += 4) {
        const float *x0 = X + rows[i] * Dp, *x1 = X + rows[i + 1] * Dp;
        const float *x2 = X + rows[i + 2] * Dp, *x3 = X + rows[i + 3] * Dp;
        for (int c = 0; c < C; c++) {
            const float *w = W + c * Dp;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t k = 0; k < Dp; k += 16) {
                __m512 wv = _mm512_load_ps(w + k);
                a0 = _mm512_fmadd_ps(_mm512_load_ps(x0 + k), wv, a0);
                a1 = _mm512_fmadd_ps(_mm512_load_ps(x1 + k), wv, a1);
                a2 = _mm512_fmadd_ps(_mm512_load_ps(x2 + k), wv, a2);
                a3 = _mm512_fmadd_ps(_mm512_load_ps(x3 + k), wv, a3);
            }
            z[(i) * C + c] = hsum(a0);
            z[(i + 1) * C + c] = hsum(a1);
            z[(i + 2) * C + c] = hsum(a2);
            z[(i + 3) * C + c] = hsum(a3);
        }
    }
    for (; i < nrows; i++) {
        const float *x0 = X + rows[i] * Dp;
        for (int c = 0; c < C; c++) {
            __m512 a0 = _mm512_setzero_ps();
            for (int64_t k = 0; k < Dp; k += 16)
                a0 = _mm512_fmadd_ps(_mm512_load_ps(x0 + k), _mm512_load_ps(W + c * Dp + k), a0);
            z[i * C + c] = hsum(a0);
        }
    }
}

void logits_bf16(int64_t nrows, const int32_t *rows, int64_t Dp, const uint16_t *X, int C,
                 const uint16_t *W, float *z)
{
    int64_t i = 0;
    for (; i + 4 <= nrows; i += 4) {
        const uint16_t *x0 = X + rows[i] * Dp, *x1 = X + rows[i + 1] * Dp;
        const uint16_t *x2 = X + rows[i + 2] * Dp, *x3 = X + rows[i + 3] * Dp;
        for (int c = 0; c < C; c++) {
            const uint16_t *w = W + c * Dp;
            __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            for (int64_t k = 0; k < Dp; k += 32) {
                __m512bh wv = (__m512bh)_mm512_load_si512(w + k);
                a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_load_si512(x0 + k), wv);
                a1 = _mm512_dpbf16_ps(a1, (__m512bh)_mm512_load_si512(x1 + k), wv);
                a2 = _mm512_dpbf16_ps(a2, (__m512bh)_mm512_load_si512(x2 + k), wv);
                a3 = _mm512_dpbf16_ps(a3, (__m512bh)_mm512_load_si512(x3 + k), wv);
            }
            z[(i) * C + c] = hsum(a0);
            z[(i + 1) * C + c] = hsum(a1);
            z[(i + 2) * C + c] = hsum(a2);
            z[(i + 3) * C + c] = hsum(a3);
        }
    }
    for (; i < nrows; i++) {
        const uint16_t *x0 = X + rows[i] * Dp;
        for (int c = 0; c < C; c++) {
            __m512 a0 = _mm512_setzero_ps();
            for (int64_t k = 0; k < Dp; k += 32)
                a0 = _mm512_dpbf16_ps(a0, (__m512bh)_mm512_load_si512(x0 + k),
                                      (__m512bh)_mm512_load_si512(W + c * Dp + k));
            z[i * C + c] = hsum(a0);
        }
    }
}

/* g (C x Dp, float32, accumulated) += sum_i r[i, c] x_i, a slice of 256 columns at a time so
 * the slice of g stays in registers' reach of L1 while the rows stream. */
void grad_f32(int64_t nrows, const int32_t *rows, int64_t Dp, const float *X, int C,
              const float *r, float *g)
{
    for (int64_t k0 = 0; k0 < Dp; k0 += 256) {
        int64_t k1 = k0 + 256 < Dp ? k0 + 256 : Dp;
        for (int64_t i = 0; i < nrows; i++) {
            const float *x = X + rows[i] * Dp;
            for (int c = 0; c < C; c++) {
                __m512 rv = _mm512_set1_ps(r[i * C + c]);
                float *gc = g + c * Dp;
                for (int64_t k = k0; k < k1; k += 16)
                    _mm512_store_ps(gc + k, _mm512_fmadd_ps(rv, _mm512_load_ps(x + k), _mm512_load_ps(gc + k)));
            }
        }
    }
}

static inline __m512 bf16_lo(__m512i v) /* bf16 pairs -> the even-indexed halves as float32 */
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
static inline __m512 bf16_hi(__m512i v)
{
    return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)));
}

/* The same with bf16 rows widened in registers; g holds the columns de-interleaved per
 * 32-column group (even columns, then odd), which a real kernel would undo once per call. */
void grad_bf16(int64_t nrows, const int32_t *rows, int64_t Dp, const uint16_t *X, int C,
               const float *r, float *g)
{
    for (int64_t k0 = 0; k0 < Dp; k0 += 256) {
        int64_t k1 = k0 + 256 < Dp ? k0 + 256 : Dp;
        for (int64_t i = 0; i < nrows; i++) {
            const uint16_t *x = X + rows[i] * Dp;
            for (int c = 0; c < C; c++) {
                __m512 rv = _mm512_set1_ps(r[i * C + c]);
                float *gc = g + c * Dp;
                for (int64_t k = k0; k < k1; k += 32) {
                    __m512i v = _mm512_load_si512(x + k);
                    _mm512_store_ps(gc + k, _mm512_fmadd_ps(rv, bf16_lo(v), _mm512_load_ps(gc + k)));
                    _mm512_store_ps(gc + k + 16, _mm512_fmadd_ps(rv, bf16_hi(v), _mm512_load_ps(gc + k + 16)));
                }
            }
        }
    }
}

/* Prediction: z (n x K) = rows . W_k for K weight vectors, four rows and four vectors at a time. */
void predict_f32(int64_t n, int64_t Dp, const float *X, int64_t K, const float *W, float *z)
{
    for (int64_t i = 0; i + 4 <= n; i += 4)
        for (int64_t j = 0; j + 4 <= K; j += 4) {
            __m512 a[4][4];
            for (int p = 0; p < 4; p++)
                for (int q = 0; q < 4; q++) a[p][q] = _mm512_setzero_ps();
            for (int64_t k = 0; k < Dp; k += 16) {
                __m512 w[4], x;
                for (int q = 0; q < 4; q++) w[q] = _mm512_load_ps(W + (j + q) * Dp + k);
                for (int p = 0; p < 4; p++) {
                    x = _mm512_load_ps(X + (i + p) * Dp + k);
                    for (int q = 0; q < 4; q++) a[p][q] = _mm512_fmadd_ps(x, w[q], a[p][q]);
                }
            }
            for (int p = 0; p < 4; p++)
                for (int q = 0; q < 4; q++) z[(i + p) * K + j + q] = hsum(a[p][q]);
        }
}

void predict_bf16(int64_t n, int64_t Dp, const uint16_t *X, int64_t K, const uint16_t *W, float *z)
{
    for (int64_t i = 0; i + 4 <= n; i += 4)
        for (int64_t j = 0; j + 4 <= K; j += 4) {
            __m512 a[4][4];
            for (int p = 0; p < 4; p++)
                for (int q = 0; q < 4; q++) a[p][q] = _mm512_setzero_ps();
            for (int64_t k = 0; k < Dp; k += 32) {
                __m512bh w[4], x;
                for (int q = 0; q < 4; q++) w[q] = (__m512bh)_mm512_load_si512(W + (j + q) * Dp + k);
                for (int p = 0; p < 4; p++) {
                    x = (__m512bh)_mm512_load_si512(X + (i + p) * Dp + k);
                    for (int q = 0; q < 4; q++) a[p][q] = _mm512_dpbf16_ps(a[p][q], x, w[q]);
                }
            }
            for (int p = 0; p < 4; p++)
                for (int q = 0; q < 4; q++) z[(i + p) * K + j + q] = hsum(a[p][q]);
        }
}
