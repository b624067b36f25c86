/* CE row pass, compiled per instruction set: see afl_rowpass.h. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "afl_gemm.h"
#include "afl_rowpass.h"

#if defined(__GNUC__) && !defined(__clang__)
#define AFL_IVDEP _Pragma("GCC ivdep")
#else
#define AFL_IVDEP
#endif

#define AFL_SFX _generic
#include "afl_rowpass_impl.h"
#undef AFL_SFX

#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(_M_X64))
#define AFL_X86_CLONES 1
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define AFL_SFX _avx2
#include "afl_rowpass_impl.h"
#undef AFL_SFX
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2,fma")
#define AFL_SFX _avx512
#include "afl_rowpass_impl.h"
#undef AFL_SFX
#pragma GCC pop_options
#endif

typedef void (*afl_ce_rows_fn)(int64_t, int64_t, int, int64_t, int64_t, float *, int64_t,
                               const int32_t *, const uint8_t *, const int64_t *,
                               const double *, double *, double *);

/* The same instruction set as the GEMM (afl_gemm_isa honours AFLITE_FAST_ISA). */
static afl_ce_rows_fn afl_ce_pick(void)
{
    const char *isa = afl_gemm_isa();
#ifdef AFL_X86_CLONES
    if (strcmp(isa, "avx512") == 0) return ce_rows_avx512;
    if (strcmp(isa, "avx2") == 0) return ce_rows_avx2;
#else
    (void)isa;
#endif
    return ce_rows_generic;
}

static afl_ce_rows_fn afl_ce_impl = NULL;  /* picked once: one pointer, the same value by any thread */

void afl_ce_rows(int64_t r0, int64_t r1, int C, int64_t nA, int64_t B,
                 float *Z, int64_t ldz, const int32_t *y, const uint8_t *member,
                 const int64_t *active, const double *scale, double *loss, double *work)
{
    if (!afl_ce_impl) afl_ce_impl = afl_ce_pick();
    afl_ce_impl(r0, r1, C, nA, B, Z, ldz, y, member, active, scale, loss, work);
}
