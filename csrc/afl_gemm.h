/* Deterministic single-precision GEMM for aflite_fast.  The measurements behind these choices,
 * and the designs tried before them, are in benchmarks/RESULTS.md.
 *
 * Design:
 *  A. C[M x N] (+)= op(A)[M x K] @ B[K x N], all row-major; op(A) = A or A^T.
 *  B. The K range is cut into blocks given by the caller (kb[0] = 0 < ... < kb[nkb] = K).
 *     Every element of C is computed as ((blk_0 + blk_1) + ...) where blk_i is a sequential
 *     fused-multiply-add sum over the k of block i in increasing order.  Nothing else
 *     (tile position, thread count, M, N, memory alignment) changes the arithmetic, so
 *     results are bitwise reproducible.  OpenBLAS sgemm was measured to change results with
 *     the thread count and with the shape of the call, which is why this file exists.
 *  C. A zero in B (or in A) adds an exact zero, so rows of A whose B row is zero can be present
 *     or absent without changing any bit of the result, as long as the block boundaries are
 *     defined by the caller independently of which rows are present.
 *  D. With a double output Cd, each block's float32 sum is added in double, so only
 *     within-block sums carry float32 rounding (the gradient over many rows needs this).
 *  E. Speed: a register-blocked micro-kernel written with GCC vector extensions, compiled for
 *     AVX-512, AVX2+FMA and a baseline, picked at run time.  B is packed into zero-padded
 *     panels a chunk of K-blocks at a time (at most AFL_GEMM_PACK_BYTES), so threads meet once
 *     per chunk; A is read where it lies: the products here have N of a few hundred columns
 *     or less, so each part of A is used by few B panels and a packed copy would not repay
 *     its memory traffic.
 *  F. Narrow gradient products (op(A) = A^T, N <= 28 columns with AVX-512, 12 otherwise)
 *     keep a vector strip of every output column in registers for a whole K-block and
 *     broadcast B straight from its rows: no padding of N, no packing.  Per element the
 *     arithmetic is the one of D and B above, so both paths give the same bits.
 */
#ifndef AFL_GEMM_H
#define AFL_GEMM_H
#include <stdint.h>

/* Upper bound of the shared packing buffer of B (one K-block more if a block is larger). */
#define AFL_GEMM_PACK_BYTES (4u << 20)

#ifdef __cplusplus
extern "C" {
#endif

/* Returns 0 on success, -1 if scratch memory could not be allocated. */
int afl_sgemm(int trans_a, int64_t M, int64_t N, int64_t K,
              const float *A, int64_t lda,
              const float *B, int64_t ldb,
              float *C, double *Cd, int64_t ldc,  /* output: float C, or double Cd when not NULL */
              int accumulate,            /* 0: C = op(A) B; 1: C += op(A) B (C's old value is block -1) */
              const int64_t *kb, int64_t nkb,
              int n_threads);

/* Name of the instruction set the kernel dispatches to ("avx512", "avx2", "generic"). */
const char *afl_gemm_isa(void);

/* Bytes of the shared packing buffer afl_sgemm allocates for a product with N output
 * columns, inner size K and K-blocks of at most max_kc (at most AFL_GEMM_PACK_BYTES unless
 * one block is larger; 0 where it packs nothing). */
int64_t afl_gemm_pack_bytes(int trans_a, int64_t N, int64_t K, int64_t max_kc);

#ifdef __cplusplus
}
#endif
#endif
