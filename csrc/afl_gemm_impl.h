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

/* ---- Narrow gradient products: op(A) = A^T with N <= AFL_MRS columns -------------------
 * C[m, j] = sum_k A[k, m] B[k, j] where B has a few columns (the logit gradients of a round
 * with few models, e.g. 25 for 5 folds x 5 classes).  The general path pads N to 2 * VL and
 * re-reads each A row segment per micro-tile; here a strip of VL consecutive m is one
 * vector, the N accumulators (one per column j) stay in registers for a whole K-block, and
 * B[k, j] is broadcast straight from B's row.  Every element is still a sequential FMA chain
 * over the k of a block from zero, and blocks are combined as in the general path, so the
 * two paths give the same bits. */
#define AFL_SN(n) AFL_CAT(AFL_F(strip), AFL_CAT(_n, n))
#define AFL_DEF_STRIP(n)                                                                     \
    static void AFL_SN(n)(int64_t kc, const float *restrict x, int64_t ldx,                  \
                          const float *restrict b, int64_t ldb, AFL_F(vf_t) *restrict out)    \
    {                                                                                        \
        AFL_F(vf_t) c[n];                                                                    \
        const AFL_F(vf_t) zero = {0};                                                        \
        _Pragma("GCC unroll 32") for (int i = 0; i < n; i++) c[i] = zero;                    \
        for (int64_t k = 0; k < kc; k++) {                                                   \
            AFL_F(vf_t) xv = *(const AFL_F(vf_t) *)(x + k * ldx);                            \
            _Pragma("GCC unroll 32") for (int i = 0; i < n; i++) c[i] += xv * b[k * ldb + i];\
        }                                                                                    \
        _Pragma("GCC unroll 32") for (int i = 0; i < n; i++) out[i] = c[i];                  \
    }
#define AFL_STRIPS_12(X) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12)
#define AFL_STRIPS_28(X) AFL_STRIPS_12(X) X(13) X(14) X(15) X(16) X(17) X(18) X(19) X(20) \
    X(21) X(22) X(23) X(24) X(25) X(26) X(27) X(28)
#if AFL_MRS == 28
#define AFL_STRIPS AFL_STRIPS_28
#elif AFL_MRS == 12
#define AFL_STRIPS AFL_STRIPS_12
#else
#error "AFL_MRS must be 12 or 28"
#endif
AFL_STRIPS(AFL_DEF_STRIP)
typedef void (*AFL_F(strip_fn))(int64_t, const float *, int64_t, const float *, int64_t,
                                AFL_F(vf_t) *);
#define AFL_STRIP_ENTRY(n) AFL_SN(n),
static const AFL_F(strip_fn) AFL_F(strip_table)[AFL_MRS + 1] = {NULL, AFL_STRIPS(AFL_STRIP_ENTRY)};

static int AFL_F(sgemm_narrow_t)(int64_t M, int64_t N, const float *A, int64_t lda,
                                 const float *B, int64_t ldb, float *C, double *Cd, int64_t ldc,
                                 int accumulate, const int64_t *kb, int64_t nkb, int n_threads)
{
    AFL_F(strip_fn) fn = AFL_F(strip_table)[N];
    int64_t n_strips = (M + AFL_VL - 1) / AFL_VL, max_kc = 0;
    for (int64_t b = 0; b < nkb; b++)
        if (kb[b + 1] - kb[b] > max_kc) max_kc = kb[b + 1] - kb[b];
    if (n_threads > n_strips) n_threads = (int)n_strips;
    if (n_threads < 1) n_threads = 1;
    int failed = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads)
#endif
    {
        /* each thread owns strips [s_lo, s_hi) for every K-block: no barrier is needed */
        int64_t tid = omp_get_thread_num(), nth = omp_get_num_threads();
        int64_t s_lo = n_strips * tid / nth, s_hi = n_strips * (tid + 1) / nth, ns = s_hi - s_lo;
        /* running sums of the thread's strips, transposed: T[((s - s_lo) * N + j) * VL + l] */
        size_t tlen = (size_t)(ns * N * AFL_VL);
        double *Td = Cd ? (double *)afl_aligned_alloc(tlen * sizeof(double)) : NULL;
        float *Tf = Cd ? NULL : (float *)afl_aligned_alloc(tlen * sizeof(float));
        float *xs = (float *)afl_aligned_alloc((size_t)(max_kc * AFL_VL) * sizeof(float));
        AFL_F(vf_t) acc[AFL_MRS];
        float *af = (float *)acc;
        int ok = (Cd ? Td != NULL : Tf != NULL) && xs != NULL;
        if (!ok) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            failed = 1;
        }
        if (ok && accumulate)
            for (int64_t s = s_lo; s < s_hi; s++) {
                int64_t m0 = s * AFL_VL, w = M - m0 < AFL_VL ? M - m0 : AFL_VL;
                for (int64_t j = 0; j < N; j++)
                    for (int64_t l = 0; l < w; l++) {
                        size_t t = (size_t)(((s - s_lo) * N + j) * AFL_VL + l);
                        if (Cd) Td[t] = Cd[(m0 + l) * ldc + j]; else Tf[t] = C[(m0 + l) * ldc + j];
                    }
            }
        for (int64_t b = 0; b < nkb && ok; b++) {
            int64_t k0 = kb[b], kc = kb[b + 1] - kb[b];
            int first = (b == 0) && !accumulate;
            if (kc <= 0 && !first) continue;
            for (int64_t s = s_lo; s < s_hi; s++) {
                int64_t m0 = s * AFL_VL, w = M - m0 < AFL_VL ? M - m0 : AFL_VL;
                const float *x = A + k0 * lda + m0;
                int64_t ldx = lda;
                if (w < AFL_VL) {
                    /* last, partial strip: a zero-padded copy (never read past A's end) */
                    for (int64_t k = 0; k < kc; k++)
                        for (int64_t l = 0; l < AFL_VL; l++)
                            xs[k * AFL_VL + l] = l < w ? A[(k0 + k) * lda + m0 + l] : 0.0f;
                    x = xs;
                    ldx = AFL_VL;
                }
                fn(kc, x, ldx, B + k0 * ldb, ldb, acc);
                size_t t0 = (size_t)((s - s_lo) * N * AFL_VL);
                if (Cd) {
                    if (first) for (int64_t t = 0; t < N * AFL_VL; t++) Td[t0 + t] = (double)af[t];
                    else for (int64_t t = 0; t < N * AFL_VL; t++) Td[t0 + t] += (double)af[t];
                } else {
                    if (first) for (int64_t t = 0; t < N * AFL_VL; t++) Tf[t0 + t] = af[t];
                    else for (int64_t t = 0; t < N * AFL_VL; t++) Tf[t0 + t] += af[t];
                }
            }
        }
        if (ok)
            for (int64_t s = s_lo; s < s_hi; s++) {
                int64_t m0 = s * AFL_VL, w = M - m0 < AFL_VL ? M - m0 : AFL_VL;
                for (int64_t l = 0; l < w; l++)
                    for (int64_t j = 0; j < N; j++) {
                        size_t t = (size_t)(((s - s_lo) * N + j) * AFL_VL + l);
                        if (Cd) Cd[(m0 + l) * ldc + j] = Td[t]; else C[(m0 + l) * ldc + j] = Tf[t];
                    }
            }
        afl_aligned_free(Td);
        afl_aligned_free(Tf);
        afl_aligned_free(xs);
    }
    return failed ? -1 : 0;
}
#undef AFL_STRIPS
#undef AFL_STRIP_ENTRY
#undef AFL_DEF_STRIP
#undef AFL_SN

/* K-rows of B packed at once: as many as fit AFL_GEMM_PACK_BYTES, at least one whole K-block,
 * at most K (n_pad: N rounded up to whole panels). */
static int64_t AFL_F(pack_rows)(int64_t n_pad, int64_t K, int64_t max_kc)
{
    int64_t rows = (int64_t)(AFL_GEMM_PACK_BYTES / sizeof(float)) / n_pad;
    if (rows < max_kc) rows = max_kc;
    return rows > K ? K : rows;
}

/* Bytes of the shared packing buffer of a product (0 on the narrow path, which packs none). */
static int64_t AFL_F(pack_bytes)(int trans_a, int64_t N, int64_t K, int64_t max_kc)
{
    if (N <= 0 || K <= 0 || max_kc <= 0 || (trans_a && N <= AFL_MRS)) return 0;
    int64_t n_pad = ((N + AFL_NR - 1) / AFL_NR) * AFL_NR;
    return AFL_F(pack_rows)(n_pad, K, max_kc) * n_pad * (int64_t)sizeof(float);
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
    if (trans_a && N <= AFL_MRS)
        return AFL_F(sgemm_narrow_t)(M, N, A, lda, B, ldb, C, Cd, ldc, accumulate, kb, nkb, n_threads);
    /* B is packed a chunk of whole K-blocks at a time (at most AFL_GEMM_PACK_BYTES, at least
     * one block), so threads meet at a barrier once per chunk, not once per K-block. */
    int64_t chunk_k = AFL_F(pack_rows)(n_pad, K, max_kc);
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
