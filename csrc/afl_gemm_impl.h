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

/* Copy one micro-panel of op(A) (rows m0:m0+mr, mr <= MR, columns k0:k0+kc) into the
 * packed layout kc x MR, zero padded; used only for the last, partial micro-tile of M. */
static void AFL_F(pack_a_edge)(int trans_a, const float *A, int64_t lda, int64_t m0, int64_t mr,
                               int64_t k0, int64_t kc, float *restrict out)
{
    for (int64_t k = 0; k < kc; k++) {
        int64_t i = 0;
        if (!trans_a)
            for (; i < mr; i++) out[k * AFL_MR + i] = A[(m0 + i) * lda + k0 + k];
        else
            for (; i < mr; i++) out[k * AFL_MR + i] = A[(k0 + k) * lda + m0 + i];
        for (; i < AFL_MR; i++) out[k * AFL_MR + i] = 0.0f;
    }
}

/* acc[MR x NR] = sum_k a[k, :]^T b[k, :], k in increasing order, one FMA chain per element.
 * Element (k, i) of the A micro-panel is a[k * aks + i * ais]: A is read where it lies
 * (no packing: a micro-panel of A is used by only N / NR panels of B, too few to repay a
 * copy when N is a few hundred columns or less), or from the edge buffer. */
static inline __attribute__((always_inline)) void
AFL_F(micro)(int64_t kc, const float *restrict a, int64_t aks, int64_t ais,
             const float *restrict b, float *restrict acc)
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
            float ai = a[i * ais];
            c0[i] += b0 * ai;
            c1[i] += b1 * ai;
        }
        a += aks;
        b += AFL_NR;
    }
#pragma GCC unroll 16
    for (int i = 0; i < AFL_MR; i++) {
        *(AFL_F(vf_t) *)(acc + i * AFL_NR) = c0[i];
        *(AFL_F(vf_t) *)(acc + i * AFL_NR + AFL_VL) = c1[i];
    }
}

/* One micro-tile of one K-block: three call sites so that each gets constant strides. */
static void AFL_F(tile)(int trans_a, const float *A, int64_t lda, int64_t m, int64_t mr,
                        int64_t k0, int64_t kc, const float *restrict bpanel,
                        float *restrict edge, float *restrict acc)
{
    if (mr < AFL_MR) {
        AFL_F(pack_a_edge)(trans_a, A, lda, m, mr, k0, kc, edge);
        AFL_F(micro)(kc, edge, AFL_MR, 1, bpanel, acc);
    } else if (trans_a) {
        /* op(A)[m + i, k] = A[k, m + i]: MR contiguous floats per k */
        AFL_F(micro)(kc, A + k0 * lda + m, lda, 1, bpanel, acc);
    } else {
        AFL_F(micro)(kc, A + m * lda + k0, 1, lda, bpanel, acc);
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
     * thread idles at the barrier after each chunk (e.g. M = d + 1 = 769 in the gradient
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
    /* B is packed a chunk of whole K-blocks at a time (at most AFL_GEMM_PACK_BYTES, at least
     * one block), so threads meet at a barrier once per chunk, not once per K-block. */
    int64_t chunk_k = (int64_t)(AFL_GEMM_PACK_BYTES / sizeof(float)) / n_pad;
    if (chunk_k < max_kc) chunk_k = max_kc;
    if (chunk_k > K) chunk_k = K;
    float *bp = (float *)afl_aligned_alloc((size_t)(chunk_k * n_pad) * sizeof(float));
    if (!bp) return -1;
    if (n_threads > n_tiles) n_threads = (int)n_tiles;
    int failed = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads)
#endif
    {
        float *edge = (float *)afl_aligned_alloc((size_t)(AFL_MR * max_kc) * sizeof(float));
        float acc[AFL_MR * AFL_NR] __attribute__((aligned(64)));
        int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
        if (!edge) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            failed = 1;
        }
        for (int64_t b0 = 0, b1; b0 < nkb; b0 = b1) {
            /* every thread computes the same chunk [b0, b1) */
            int64_t rows = kb[b0 + 1] - kb[b0];
            for (b1 = b0 + 1; b1 < nkb && rows + (kb[b1 + 1] - kb[b1]) <= chunk_k; b1++)
                rows += kb[b1 + 1] - kb[b1];
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
            for (int64_t b = b0; b < b1; b++)
                AFL_F(pack_b)(B, ldb, kb[b], kb[b + 1] - kb[b], N, bp + (kb[b] - kb[b0]) * n_pad);
            /* implicit barrier: the chunk is packed for every thread */
            /* Each thread owns a fixed range of tiles.  op(A) = A^T (the gradient: M = d + 1,
             * K = rows) walks the K-blocks outermost so each block of rows is read once while
             * it is in cache; op(A) = A (the logits: M = rows) walks its tiles outermost. */
            int64_t t_lo = n_tiles * tid / nth, t_hi = n_tiles * (tid + 1) / nth;
            int bo = trans_a;  /* blocks outermost */
            int64_t n_outer = bo ? b1 - b0 : t_hi - t_lo;
            int64_t n_inner = bo ? t_hi - t_lo : b1 - b0;
            for (int64_t o = 0; o < n_outer && edge; o++) {
                for (int64_t in = 0; in < n_inner; in++) {
                    int64_t t = bo ? t_lo + in : t_lo + o;
                    int64_t b = bo ? b0 + o : b0 + in;
                    int64_t m0 = t * mc_tile;
                    int64_t mc = M - m0 < mc_tile ? M - m0 : mc_tile;
                    int64_t k0 = kb[b], kc = kb[b + 1] - kb[b];
                    int first = (b == 0) && !accumulate;
                    if (kc <= 0 && !first) continue;
                    const float *bblock = bp + (k0 - kb[b0]) * n_pad;
                    for (int64_t j0 = 0; j0 < N; j0 += AFL_NR) {
                        int64_t nr = N - j0 < AFL_NR ? N - j0 : AFL_NR;
                        const float *bpanel = bblock + (j0 / AFL_NR) * kc * AFL_NR;
                        for (int64_t i0 = 0; i0 < mc; i0 += AFL_MR) {
                            int64_t mr = mc - i0 < AFL_MR ? mc - i0 : AFL_MR;
                            AFL_F(tile)(trans_a, A, lda, m0 + i0, mr, k0, kc, bpanel, edge, acc);
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
            }
#ifdef _OPENMP
#pragma omp barrier
#endif
            /* barrier: every tile is done with the chunk before it is repacked */
        }
        afl_aligned_free(edge);
    }
    afl_aligned_free(bp);
    return failed ? -1 : 0;
}

#undef AFL_MC
#undef AFL_NR
#undef AFL_F
#undef AFL_CAT
#undef AFL_CAT_
