/* Deterministic SGEMM: see afl_gemm.h for the design. */
#include <string.h>
#include <stdlib.h>
#include <stdint.h>
#include "afl_omp.h"
#include "afl_gemm.h"

static void *afl_aligned_alloc(size_t n)
{
    void *p = NULL;
    if (n == 0) n = 64;
    if (posix_memalign(&p, 64, n) != 0) return NULL;
    return p;
}
static void afl_aligned_free(void *p) { free(p); }

/* Baseline: whatever the compiler's default target is (SSE2 on x86-64). */
#define AFL_SFX _generic
#define AFL_VL 4
#define AFL_MR 6
#define AFL_MRS 12
#include "afl_gemm_impl.h"
#undef AFL_SFX
#undef AFL_VL
#undef AFL_MR
#undef AFL_MRS

#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(_M_X64))
#define AFL_X86_CLONES 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define AFL_SFX _avx2
#define AFL_VL 8
#define AFL_MR 6
#define AFL_MRS 12
#include "afl_gemm_impl.h"
#undef AFL_SFX
#undef AFL_VL
#undef AFL_MR
#undef AFL_MRS
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2,fma")
#define AFL_SFX _avx512
#define AFL_VL 16
#define AFL_MR 12
#define AFL_MRS 28
#include "afl_gemm_impl.h"
#undef AFL_SFX
#undef AFL_VL
#undef AFL_MR
#undef AFL_MRS
#pragma GCC pop_options
#endif

typedef int (*afl_sgemm_fn)(int, int64_t, int64_t, int64_t, const float *, int64_t,
                            const float *, int64_t, float *, double *, int64_t, int,
                            const int64_t *, int64_t, int);
typedef int64_t (*afl_pack_bytes_fn)(int, int64_t, int64_t, int64_t);

/* The implementation of one instruction set. */
typedef struct {
    const char *name;
    afl_sgemm_fn sgemm;
    afl_pack_bytes_fn pack_bytes;
} afl_gemm_impl;

static afl_gemm_impl afl_pick(void)
{
    const char *force = getenv("AFLITE_FAST_ISA");  /* for tests and benchmarks of each path */
#ifdef AFL_X86_CLONES
    __builtin_cpu_init();
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    /* exact names only (a short or unknown value leaves the machine's best path) */
    if (force && strcmp(force, "generic") == 0) { avx512 = 0; avx2 = 0; }
    if (force && strcmp(force, "avx2") == 0) avx512 = 0;
    if (avx512) return (afl_gemm_impl){"avx512", sgemm_avx512, pack_bytes_avx512};
    if (avx2) return (afl_gemm_impl){"avx2", sgemm_avx2, pack_bytes_avx2};
#else
    (void)force;
#endif
    return (afl_gemm_impl){"generic", sgemm_generic, pack_bytes_generic};
}

static afl_gemm_impl afl_impl = {NULL, NULL, NULL};

static const afl_gemm_impl *afl_current(void)
{
    if (!afl_impl.sgemm) afl_impl = afl_pick();
    return &afl_impl;
}

const char *afl_gemm_isa(void) { return afl_current()->name; }

int64_t afl_gemm_pack_bytes(int trans_a, int64_t N, int64_t K, int64_t max_kc)
{
    return afl_current()->pack_bytes(trans_a, N, K, max_kc);
}

int afl_sgemm(int trans_a, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
              const float *B, int64_t ldb, float *C, double *Cd, int64_t ldc, int accumulate,
              const int64_t *kb, int64_t nkb, int n_threads)
{
    return afl_current()->sgemm(trans_a, M, N, K, A, lda, B, ldb, C, Cd, ldc, accumulate, kb,
                                nkb, n_threads);
}
