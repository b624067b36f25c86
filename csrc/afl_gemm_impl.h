/* Body of the GEMM, included once per instruction-set target by afl_gemm.c with
 * AFL_SFX (name suffix), AFL_VL (floats per vector) and AFL_MR (rows per micro-tile) defined.
 * A micro-tile is AFL_MR x (2 * AFL_VL). */
#define AFL_CAT_(a, b) a##b
#define AFL_CAT(a, b) AFL_CAT_(a, b)
#define AFL_F(name) AFL_CAT(name, AFL_SFX)
#define AFL_NR (2 * AFL_VL)

typedef float AFL_F(vf_t) __attribute__((vector_size(AFL_VL * 4), aligned(4)));

/* Pack B[k0:k1, 0:N] into panels of NR columns, each kc x NR, zero padded. */
static void AFL_F(pack_b)(const float *B, int64_t ldb, int64_t k0, int64_t kc, int64_t N,
                          float *restrict out)
{
    for (int64_t j0 = 0; j0 < N; j0 += AFL_NR) {
        int64_t nr = N - j0 < AFL_NR ? N - j0 : AFL_NR;
        for (int64_t k = 0; k < kc; k++) {
            const float *src = B + (k0 + k) * ldb + j0;
            int64_t j = 0;
            for (; j < nr; j++) out[j] = src[j];
            for (; j < AFL_NR; j++) out[j] = 0.0f;
            out += AFL_NR;
        }
    }
}

/* Pack rows m0:m0+mc of op(A), columns k0:k0+kc, into micro-panels of MR rows (kc x MR), zero padded. */
static void AFL_F(pack_a)(int trans_a, const float *A, int64_t lda, int64_t m0, int64_t mc,
                          int64_t k0, int64_t kc, float *restrict out)
{
    for (int64_t i0 = 0; i0 < mc; i0 += AFL_MR) {
        int64_t mr = mc - i0 < AFL_MR ? mc - i0 : AFL_MR;
        if (!trans_a) {
            for (int64_t k = 0; k < kc; k++) {
                int64_t i = 0;
                for (; i < mr; i++) out[k * AFL_MR + i] = A[(m0 + i0 + i) * lda + k0 + k];
                for (; i < AFL_MR; i++) out[k * AFL_MR + i] = 0.0f;
            }
        } else {
            /* op(A)[m, k] = A[k, m]: each k reads MR contiguous floats. */
            for (int64_t k = 0; k < kc; k++) {
                const float *src = A + (k0 + k) * lda + m0 + i0;
                int64_t i = 0;
                for (; i < mr; i++) out[k * AFL_MR + i] = src[i];
                for (; i < AFL_MR; i++) out[k * AFL_MR + i] = 0.0f;
            }
        }
        out += kc * AFL_MR;
    }
}

/* acc[MR x NR] = sum_k a[k, :]^T b[k, :], k in increasing order, one FMA chain per element. */
static inline void AFL_F(micro)(int64_t kc, const float *restrict a, const float *restrict b,
                                float *restrict acc)
{
    AFL_F(vf_t) c0[AFL_MR], c1[AFL_MR];
    const AFL_F(vf_t) zero = {0};
#pragma GCC unroll 16
    for (int i = 0; i < AFL_MR; i++) { c0[i] = zero; c1[i] = zero; }
    for (int64_t k = 0; k < kc; k++) {
        AFL_F(vf_t) b0 = *(const AFL_F(vf_t) *)(b);
        AFL_F(vf_t) b1 = *(const AFL_F(vf_t) *)(b + AFL_VL);
#pragma GCC unroll 16
        for (int i = 0; i < AFL_MR; i++) {
            float ai = a[i];
            c0[i] += b0 * ai;
            c1[i] += b1 * ai;
        }
        a += AFL_MR;
        b += AFL_NR;
    }
#pragma GCC unroll 16
    for (int i = 0; i < AFL_MR; i++) {
        *(AFL_F(vf_t) *)(acc + i * AFL_NR) = c0[i];
        *(AFL_F(vf_t) *)(acc + i * AFL_NR + AFL_VL) = c1[i];
    }
}

#define AFL_MC (AFL_MR * 16)

static int AFL_F(sgemm)(int trans_a, int64_t M, int64_t N, int64_t K,
                        const float *A, int64_t lda, const float *B, int64_t ldb,
                        float *C, double *Cd, int64_t ldc, int accumulate,
                        const int64_t *kb, int64_t nkb, int n_threads)
{
    int64_t max_kc = 0;
    for (int64_t b = 0; b < nkb; b++)
        if (kb[b + 1] - kb[b] > max_kc) max_kc = kb[b + 1] - kb[b];
    int64_t n_pad = ((N + AFL_NR - 1) / AFL_NR) * AFL_NR;
    if (M <= 0 || N <= 0) return 0;
    if (n_threads < 1) n_threads = 1;
    /* Tiles of at most MC rows, their number a multiple of the thread count so that no
     * thread idles at the barrier after each K-block (e.g. M = d + 1 = 769 in the gradient
     * product).  The tile height changes no element's arithmetic. */
    int64_t n_tiles = (M + AFL_MC - 1) / AFL_MC;
    n_tiles = ((n_tiles + n_threads - 1) / n_threads) * n_threads;
    int64_t mc_tile = (((M + n_tiles - 1) / n_tiles) + AFL_MR - 1) / AFL_MR * AFL_MR;
    n_tiles = (M + mc_tile - 1) / mc_tile;
    if (nkb == 0 || max_kc == 0) {
        if (!accumulate)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    if (Cd) Cd[i * ldc + j] = 0.0; else C[i * ldc + j] = 0.0f;
                }
        return 0;
    }
    float *bp = (float *)afl_aligned_alloc((size_t)(max_kc * n_pad) * sizeof(float));
    if (!bp) return -1;
    if (n_threads > n_tiles) n_threads = (int)n_tiles;
    int failed = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads)
#endif
    {
        float *ap = (float *)afl_aligned_alloc((size_t)(AFL_MC * max_kc) * sizeof(float));
        float acc[AFL_MR * AFL_NR] __attribute__((aligned(64)));
        if (!ap) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            failed = 1;
        }
        for (int64_t blk = 0; blk < nkb; blk++) {
            int64_t k0 = kb[blk], kc = kb[blk + 1] - kb[blk];
            int first = (blk == 0) && !accumulate;
            if (kc <= 0 && !first) continue;
#ifdef _OPENMP
#pragma omp single
#endif
            AFL_F(pack_b)(B, ldb, k0, kc, N, bp);
            /* implicit barrier: bp is ready for every thread */
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t t = 0; t < n_tiles; t++) {
                if (!ap) continue;
                int64_t m0 = t * mc_tile;
                int64_t mc = M - m0 < mc_tile ? M - m0 : mc_tile;
                AFL_F(pack_a)(trans_a, A, lda, m0, mc, k0, kc, ap);
                for (int64_t j0 = 0; j0 < N; j0 += AFL_NR) {
                    int64_t nr = N - j0 < AFL_NR ? N - j0 : AFL_NR;
                    const float *bpanel = bp + (j0 / AFL_NR) * kc * AFL_NR;
                    for (int64_t i0 = 0; i0 < mc; i0 += AFL_MR) {
                        int64_t mr = mc - i0 < AFL_MR ? mc - i0 : AFL_MR;
                        AFL_F(micro)(kc, ap + (i0 / AFL_MR) * kc * AFL_MR, bpanel, acc);
                        if (Cd) {
                            /* double accumulator: only the within-block sums are float32 */
                            double *drow = Cd + (m0 + i0) * ldc + j0;
                            for (int64_t i = 0; i < mr; i++)
                                for (int64_t j = 0; j < nr; j++) {
                                    if (first) drow[i * ldc + j] = (double)acc[i * AFL_NR + j];
                                    else drow[i * ldc + j] += (double)acc[i * AFL_NR + j];
                                }
                            continue;
                        }
                        float *crow = C + (m0 + i0) * ldc + j0;
                        if (first) {
                            for (int64_t i = 0; i < mr; i++)
                                for (int64_t j = 0; j < nr; j++) crow[i * ldc + j] = acc[i * AFL_NR + j];
                        } else {
                            for (int64_t i = 0; i < mr; i++)
                                for (int64_t j = 0; j < nr; j++) crow[i * ldc + j] += acc[i * AFL_NR + j];
                        }
                    }
                }
            }
            /* implicit barrier: all tiles of this block are done before bp is repacked */
        }
        afl_aligned_free(ap);
    }
    afl_aligned_free(bp);
    return failed ? -1 : 0;
}

#undef AFL_MC
#undef AFL_NR
#undef AFL_F
#undef AFL_CAT
#undef AFL_CAT_
