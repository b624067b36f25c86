/* Training in the row space (see afl_dual.h for the design). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "afl_omp.h"
#include "afl_gemm.h"
#include "afl_dual.h"
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(_M_X64))
#define AFL_X86_CLONES 1
#include <immintrin.h>
#endif

/* status codes: those of the feature-space solver (_kernel.pyx) */
enum { DUAL_CONVERGED = 0, DUAL_MAX_ITER = 1, DUAL_LINE_SEARCH = 2, DUAL_NOT_FINITE = 3 };

#define DUAL_LANES 16
static inline int64_t dual_pad(int64_t t) { return (t + DUAL_LANES - 1) / DUAL_LANES * DUAL_LANES; }

/* cum[q] = members (set bits) of the chunks of cmask before chunk q, for q <= nchunk: where a
 * gather writes each chunk's first member. */
static inline void dual_chunk_counts(const uint16_t *cmask, int64_t nchunk, int64_t *cum)
{
    cum[0] = 0;
    for (int64_t q = 0; q < nchunk; q++) cum[q + 1] = cum[q] + __builtin_popcount((unsigned)cmask[q]);
}

/* One thread's scratch for models of up to t_max rows. */
typedef struct {
    float *Kss, *vf;
    double *mv;                                 /* matvec output (t) */
    double *th, *Gth, *c, *Gc, *tht, *Gtht, *ct, *Gct, *p, *Gp, *h, *Gh;
    double *S, *Y, *GS, *GY, *rho, *alph;
    double *XU, *VU, *UU, *acc, *st, *sg;
    float *XVf;                                 /* the rows' X V: r x ld, float32 */
    int64_t *kcol;
    uint16_t *cmask;                            /* nk / 16 + 1 chunks of K's columns */
    int64_t *cum;                               /* members of the chunks before each chunk */
    float *rowbuf, *diag, *accf;                /* the symmetric block's gather and product */
    double *outx;
    double *Xw;                                 /* watched features of the rows: t x DUAL_WATCH */
    const float **xrow;                         /* the model's rows of X (t) */
    float *facc;                                /* float sums of a block of rows (D) */
    double *ew, *ysg;                           /* the binary loss' row terms (3 ld), y as -1 / +1 (ld) */
    void *block;
} dual_scratch;

#define DUAL_WATCH AFL_DUAL_WATCH

static int64_t dual_scratch_layout(int64_t t_max, int64_t D, int C, int r, int hist, int64_t nk, int64_t *offsets)
{
    const int64_t ld = dual_pad(t_max), m = t_max + r + C + 1, P = m * C;
    /* sizes in bytes of each array, each rounded to 64 bytes */
    int64_t sizes[] = {
        (ld * ld + 16) * 4, ld * 4, ld * 8,
        P * 8, P * 8, P * 8, P * 8, P * 8, P * 8, P * 8, P * 8, P * 8, P * 8, P * 8, P * 8,
        hist * P * 8, hist * P * 8, hist * P * 8, hist * P * 8, hist * 8, hist * 8,
        t_max * C * 8, ld * (r + 1) * 4, (r + 1) * C * 8, C * C * 8, 2 * D * C * 8, m * 8, m * 8,
        t_max * 8, (nk / 16 + 1) * 2, t_max * DUAL_WATCH * 8,
        (nk / 16 + 2) * 8, (ld + 16) * 4, ld * 4, ld * 4, ld * 8, t_max * 8, D * 4, 3 * ld * 8, ld * 8,
    };
    int64_t total = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        if (offsets) offsets[i] = total;
        total += (sizes[i] + 63) / 64 * 64;
    }
    return total;
}

int64_t afl_dual_scratch_bytes(int64_t t_max, int64_t D, int C, int r, int hist, int64_t nk)
{
    return dual_scratch_layout(t_max, D, C, r, hist, nk, NULL) + 64;
}

static int dual_scratch_init(dual_scratch *s, int64_t t_max, int64_t D, int C, int r, int hist, int64_t nk)
{
    int64_t off[64];   /* one offset per array of dual_scratch_layout (40 of them) */
    int64_t total = dual_scratch_layout(t_max, D, C, r, hist, nk, off);
    char *b = NULL;
    memset(s, 0, sizeof(*s));
    if (posix_memalign((void **)&b, 64, (size_t)total) != 0) return -1;
    s->block = b;
    int i = 0;
    s->Kss = (float *)(b + off[i++]); s->vf = (float *)(b + off[i++]); s->mv = (double *)(b + off[i++]);
    s->th = (double *)(b + off[i++]); s->Gth = (double *)(b + off[i++]);
    s->c = (double *)(b + off[i++]); s->Gc = (double *)(b + off[i++]);
    s->tht = (double *)(b + off[i++]); s->Gtht = (double *)(b + off[i++]);
    s->ct = (double *)(b + off[i++]); s->Gct = (double *)(b + off[i++]);
    s->p = (double *)(b + off[i++]); s->Gp = (double *)(b + off[i++]);
    s->h = (double *)(b + off[i++]); s->Gh = (double *)(b + off[i++]);
    s->S = (double *)(b + off[i++]); s->Y = (double *)(b + off[i++]);
    s->GS = (double *)(b + off[i++]); s->GY = (double *)(b + off[i++]);
    s->rho = (double *)(b + off[i++]); s->alph = (double *)(b + off[i++]);
    s->XU = (double *)(b + off[i++]); s->XVf = (float *)(b + off[i++]); s->VU = (double *)(b + off[i++]);
    s->UU = (double *)(b + off[i++]);
    s->acc = (double *)(b + off[i++]); s->st = (double *)(b + off[i++]); s->sg = (double *)(b + off[i++]);
    s->kcol = (int64_t *)(b + off[i++]);
    s->cmask = (uint16_t *)(b + off[i++]);
    s->Xw = (double *)(b + off[i++]);
    s->cum = (int64_t *)(b + off[i++]);
    s->rowbuf = (float *)(b + off[i++]);
    s->diag = (float *)(b + off[i++]);
    s->accf = (float *)(b + off[i++]);
    s->outx = (double *)(b + off[i++]);
    s->xrow = (const float **)(b + off[i++]);
    s->facc = (float *)(b + off[i++]);
    s->ew = (double *)(b + off[i++]);
    s->ysg = (double *)(b + off[i++]);
    return 0;
}

/* One model's problem in the row space.  A vector is C blocks (one per output) of m
 * coefficients: t on the rows, r on V's columns (from oV), C on the start's feature weights
 * U (from oU), the intercept (at ob). */
typedef struct {
    const afl_dual_problem *pb;
    dual_scratch *s;
    const int32_t *rows;     /* its t rows of X */
    int64_t t, m, P, ld, oV, oU, ob;
    int r;
    const double *U;         /* D - 1 x C feature weights of the start (NULL: cold) */
    const double *XU_all, *UU_all, *VU_all;  /* its products on all rows, when every model shares it */
    const double *Xw_all;    /* the call's rows' features watched from the start (n x DUAL_WATCH) */
    int n_watch0;            /* entries watched from the start (features of pb->watch, C outputs each) */
    double *tail_out;        /* NULL, or C x (r + C + 1): its coefficients on V, U and the intercept */
    double l2, inv_n;
    double mu_inv, hb;       /* H0: 1 / mu, and its intercept entry */
    double *dV;              /* H0: 1 / (s sig_i + l2) - 1 / mu (r) */
} dual_model;

/* Entries of the feature-space gradient watched between its computations: those largest in
 * absolute value at the last one (a lower bound of the largest entry for the price of
 * DUAL_WATCH / D of the product); their features of the model's rows are copied into Xw. */

typedef struct {
    int n;
    int64_t idx[DUAL_WATCH];     /* entries f * C + k of the D x C gradient, f < D - 1 */
} dual_watch;

#define AFL_SFX _generic
#define AFL_VL 16
#define AFL_DUAL_ISA 0
#include "afl_dual_impl.h"
#undef AFL_SFX
#undef AFL_VL

#ifdef AFL_X86_CLONES
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#undef AFL_DUAL_ISA
#define AFL_DUAL_ISA 1
#define AFL_SFX _avx2
#define AFL_VL 16
#include "afl_dual_impl.h"
#undef AFL_SFX
#undef AFL_VL
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2,fma")
#undef AFL_DUAL_ISA
#define AFL_DUAL_ISA 2
#define AFL_SFX _avx512
#define AFL_VL 16
#include "afl_dual_impl.h"
#undef AFL_SFX
#undef AFL_VL
#pragma GCC pop_options
#endif
typedef struct {
    void (*gather)(int64_t, const int64_t *, int64_t, int64_t, const float *, int64_t, const int64_t *,
                   const uint16_t *, const int64_t *, float *);
    void (*start_products)(const afl_dual_problem *, const double *, int64_t, const int32_t *, int, double *,
                           double *, double *, double *, int);
    int (*train_model)(dual_model *, double *, double *, int32_t *, int32_t *, double *, int32_t *);
    void (*rows_product)(int64_t, int64_t, const float *, const float *const *, float *restrict, double *restrict);
    void (*logit_terms)(int64_t, int64_t, int64_t, int, int, const double *, const double *, const double *,
                        double *, float *);
} afl_dual_impl;

#define AFL_DUAL_IMPL(sfx) \
    (afl_dual_impl){dual_gather##sfx, dual_start_products##sfx, dual_train_model##sfx, dual_rows_product##sfx, \
                    dual_logit_terms##sfx}

static afl_dual_impl afl_dual_pick(void)
{
#ifdef AFL_X86_CLONES
    const char *isa = afl_gemm_isa();
    if (strcmp(isa, "avx512") == 0) return AFL_DUAL_IMPL(_avx512);
    if (strcmp(isa, "avx2") == 0) return AFL_DUAL_IMPL(_avx2);
#endif
    return AFL_DUAL_IMPL(_generic);
}

/* Logits of every model on the call's rows (logits: n x B C, column k B + j output k of model
 * j) from K: z = K_{i,S} alpha + (X V)_i gamma + (X U)_i beta + b, the first term one
 * deterministic GEMM for all models (the scattered alphas rounded to float32; blocks of 256
 * rows of the sum, added in double), the rest in double per entry, then rounded to float32.
 * pb's K and XV are the call's (row i of X is row i of K); XU_all the shared start's products
 * (NULL: no start). */
#define DUAL_LOGIT_BLOCK 256
static int dual_logits(const afl_dual_problem *pb, int64_t B, const int64_t *mptr, const int32_t *mrows,
                       const double *alpha, const double *tails, const double *XU_all, int r, float *logits,
                       int n_threads, const afl_dual_impl *impl)
{
    const int C = pb->C;
    const int64_t n = pb->n, BC = B * C, nt = r + C + 1, nkb = (n + DUAL_LOGIT_BLOCK - 1) / DUAL_LOGIT_BLOCK;
    float *A = calloc((size_t)(n * BC + 1), sizeof(float));
    double *Zd = malloc((size_t)(n * BC + 1) * sizeof(double));
    int64_t *kb = malloc((size_t)(nkb + 1) * sizeof(int64_t));
    double *Gt = malloc((size_t)((r + C + 1) * BC) * sizeof(double));   /* the tails by term: row q, column k B + j */
    if (!A || !Zd || !kb || !Gt) {
        free(A); free(Zd); free(kb); free(Gt);
        return -1;
    }
    for (int64_t j = 0; j < B; j++)
        for (int k = 0; k < C; k++)
            for (int64_t q = 0; q < nt; q++) Gt[q * BC + k * B + j] = tails[(j * C + k) * nt + q];
    for (int64_t j = 0; j < B; j++)
        for (int64_t a = mptr[j]; a < mptr[j + 1]; a++)
            for (int k = 0; k < C; k++) A[(int64_t)mrows[a] * BC + k * B + j] = (float)alpha[a * C + k];
    for (int64_t q = 0; q <= nkb; q++) kb[q] = q * DUAL_LOGIT_BLOCK < n ? q * DUAL_LOGIT_BLOCK : n;
    int rc = afl_sgemm(0, n, BC, n, pb->K, pb->ldk, A, BC, NULL, Zd, BC, 0, kb, nkb, n_threads);
    if (rc == 0) {
        /* every entry its own sum: rows split among threads, the same values */
        const int64_t per = (n + n_threads - 1) / n_threads;
#pragma omp parallel for num_threads(n_threads) schedule(static) if (n_threads > 1)
        for (int th = 0; th < n_threads; th++) {
            const int64_t i0 = th * per, i1 = i0 + per < n ? i0 + per : n;
            if (i1 > i0) impl->logit_terms(i0, i1, BC, r, C, pb->XV, XU_all, Gt, Zd, logits);
        }
    }
    free(A); free(Zd); free(kb); free(Gt);
    return rc;
}

/* mean_rows (D - 1 x C, row-major) = sum_i abar_i x_i over the call's rows, abar_i the mean over
 * the B models of row i's alpha (0 where a model does not train on it; the models' sum in model
 * order, rounded to float32): the rows' part of the mean model.  dual_rows_product's sums
 * (float products, double sums per block of rows) per feature, the features split among the
 * threads: the same values whatever their number. */
static int dual_mean_rows(const afl_dual_problem *pb, int64_t B, const int64_t *mptr, const int32_t *mrows,
                          const double *alpha, double *mean_rows, int n_threads, const afl_dual_impl *impl)
{
    const int C = pb->C;
    const int64_t n = pb->n, F = pb->D - 1;
    double *sum = calloc((size_t)(n * C + 1), sizeof(double));
    float *cf = malloc((size_t)(C * n + 1) * sizeof(float));
    const float **xp = malloc((size_t)(n_threads * n + 1) * sizeof(float *));
    float *facc = malloc((size_t)(n_threads * F + 1) * sizeof(float));
    double *acc = calloc((size_t)(C * F + 1), sizeof(double));
    if (!sum || !cf || !xp || !facc || !acc) {
        free(sum); free(cf); free(xp); free(facc); free(acc);
        return -1;
    }
    for (int64_t j = 0; j < B; j++)
        for (int64_t a = mptr[j]; a < mptr[j + 1]; a++)
            for (int k = 0; k < C; k++) sum[(int64_t)mrows[a] * C + k] += alpha[a * C + k];
    for (int k = 0; k < C; k++)
        for (int64_t i = 0; i < n; i++) cf[k * n + i] = (float)(sum[i * C + k] / (double)B);
    const int64_t per = (F + n_threads - 1) / n_threads;
#pragma omp parallel for num_threads(n_threads) schedule(static) if (n_threads > 1)
    for (int th = 0; th < n_threads; th++) {
        const int64_t f0 = th * per, f1 = f0 + per < F ? f0 + per : F;
        if (f1 > f0) {
            const float **x = xp + th * n;
            for (int64_t i = 0; i < n; i++) x[i] = afl_dual_xrow(pb, i) + f0;
            for (int k = 0; k < C; k++)
                impl->rows_product(f1 - f0, n, cf + k * n, x, facc + th * F, acc + k * F + f0);
        }
    }
    for (int64_t f = 0; f < F; f++)
        for (int k = 0; k < C; k++) mean_rows[f * C + k] = acc[k * F + f];
    free(sum); free(cf); free(xp); free(facc); free(acc);
    return 0;
}

int afl_dual_train(const afl_dual_problem *pb, int64_t B, const int64_t *mptr, const int32_t *mrows,
                   const double *l2, const double *inv_n, double *coef, double *alpha, int32_t *n_iter,
                   int32_t *status, double *fval, int32_t *n_eval, float *logits, double *mean_rows,
                   int n_threads)
{
    static afl_dual_impl impl = {NULL, NULL, NULL, NULL, NULL};
    if (!impl.train_model) impl = afl_dual_pick();
    if (pb->C > AFL_DUAL_MAX_OUT) return -2;
    const int r = pb->r > 0 ? pb->r : 0;
    int64_t t_max = 1;
    for (int64_t j = 0; j < B; j++)
        if (mptr[j + 1] - mptr[j] > t_max) t_max = mptr[j + 1] - mptr[j];
    int rc = 0;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > B) n_threads = (int)(B > 0 ? B : 1);
    /* K (and X V) of the call's rows only, when they are a subset of K's: every model's
     * gather then reads rows of n floats instead of nk */
    afl_dual_problem local = *pb;
    float *KA = NULL;
    double *XVA = NULL;
    int64_t *ident = NULL;
    int in_order = pb->n == pb->nk;
    for (int64_t i = 0; i < pb->n && in_order; i++) in_order = pb->krow[i] == i;
    if (!in_order) {
        const int64_t ldA = dual_pad(pb->n);
        KA = malloc((size_t)(pb->n * ldA + 16) * sizeof(float));
        XVA = malloc((size_t)(pb->n * r + 1) * sizeof(double));
        ident = malloc((size_t)(pb->n + 1) * sizeof(int64_t));
        uint16_t *cm = calloc((size_t)(pb->nk / 16 + 1), sizeof(uint16_t));
        int64_t *cum = malloc((size_t)(pb->nk / 16 + 2) * sizeof(int64_t));
        if (!KA || !XVA || !ident || !cm || !cum) {
            free(KA); free(XVA); free(ident); free(cm); free(cum);
            return -1;
        }
        for (int64_t i = 0; i < pb->n; i++) {
            ident[i] = i;
            cm[pb->krow[i] / 16] |= (uint16_t)(1u << (pb->krow[i] % 16));
            for (int q = 0; q < r; q++) XVA[i * r + q] = pb->XV[pb->krow[i] * r + q];
        }
        dual_chunk_counts(cm, pb->nk / 16 + 1, cum);
        const int64_t per = (pb->n + n_threads - 1) / n_threads;
#pragma omp parallel for num_threads(n_threads) schedule(static)
        for (int th = 0; th < n_threads; th++) {
            const int64_t a0 = th * per, a1 = a0 + per < pb->n ? a0 + per : pb->n;
            if (a1 > a0)
                impl.gather(a1 - a0, pb->krow + a0, pb->n, ldA, pb->K, pb->ldk, pb->krow, cm, cum, KA + a0 * ldA);
        }
        free(cm);
        free(cum);
        local.K = KA;
        local.ldk = ldA;
        local.nk = pb->n;
        local.krow = ident;
        local.XV = XVA;
        pb = &local;
    }
    /* X V transposed (r x nk): each model gathers its rows' entries one column of V at a time */
    float *XVt = malloc((size_t)(r * pb->nk + 1) * sizeof(float));
    if (!XVt) {
        free(KA); free(XVA); free(ident);
        return -1;
    }
    for (int64_t i = 0; i < pb->nk; i++)
        for (int q = 0; q < r; q++) XVt[q * pb->nk + i] = (float)pb->XV[i * r + q];
    local.XVt = XVt;
    pb = &local;
    /* a warm start every model shares (a run's phases start all partitions from the last
     * phase's mean model): its products with the rows computed once, for all rows */
    const int64_t FC = (pb->D - 1) * pb->C;
    int shared = 1;
    int warm0 = 0;
    for (int64_t k = 0; k < FC; k++)
        if (coef[k] != 0.0) { warm0 = 1; break; }
    for (int64_t j = 1; j < B && shared; j++)
        if (memcmp(coef, coef + j * pb->D * pb->C, (size_t)FC * sizeof(double)) != 0) shared = 0;
    /* logits from K need the start's products with the rows, computed for a shared start only:
     * starts that differ must all be zero */
    for (int64_t j = 0; logits && !shared && j < B; j++)
        for (int64_t k = 0; k < FC; k++)
            if (coef[j * pb->D * pb->C + k] != 0.0) {
                free(KA); free(XVA); free(ident); free(XVt);
                return -3;
            }
    double *XU_all = NULL, *UU_all = NULL, *VU_all = NULL, *Ut = NULL;
    if (shared && warm0) {
        XU_all = malloc((size_t)(pb->n * pb->C + 1) * sizeof(double));
        UU_all = malloc((size_t)(pb->C * pb->C) * sizeof(double));
        VU_all = malloc((size_t)(r * pb->C + 1) * sizeof(double));
        Ut = malloc((size_t)(FC + 1) * sizeof(double));
        if (!XU_all || !UU_all || !VU_all || !Ut) {
            free(XU_all); free(UU_all); free(VU_all); free(Ut);
            free(KA); free(XVA); free(ident); free(XVt);
            return -1;
        }
        impl.start_products(pb, coef, pb->n, NULL, r, Ut, XU_all, UU_all, VU_all, n_threads);
        free(Ut);
    }
    /* the features every model watches from its start, of all of the call's rows (read once
     * here, not by every model from its rows' scattered entries) */
    const int per_watch = DUAL_WATCH / pb->C > 0 ? DUAL_WATCH / pb->C : 1;
    const int n_wf = pb->watch ? (pb->n_watch < per_watch ? pb->n_watch : per_watch) : 0;
    const int n_entries = n_wf * pb->C < DUAL_WATCH ? n_wf * pb->C : DUAL_WATCH;
    double *Xw_all = NULL, *tails = NULL;
    if (logits) {
        tails = malloc((size_t)(B * pb->C * (r + pb->C + 1) + 1) * sizeof(double));
        if (!tails) {
            free(XU_all); free(UU_all); free(VU_all);
            free(KA); free(XVA); free(ident); free(XVt);
            return -1;
        }
    }
    if (n_wf > 0) {
        Xw_all = malloc((size_t)(pb->n * DUAL_WATCH) * sizeof(double));
        if (!Xw_all) {
            free(XU_all); free(UU_all); free(VU_all); free(tails);
            free(KA); free(XVA); free(ident); free(XVt);
            return -1;
        }
#pragma omp parallel for num_threads(n_threads) schedule(static) if (n_threads > 1)
        for (int64_t i = 0; i < pb->n; i++) {
            const float *x = afl_dual_xrow(pb, i);
            double *xw = Xw_all + i * DUAL_WATCH;
            for (int q = 0; q < DUAL_WATCH; q++) xw[q] = q < n_entries ? (double)x[pb->watch[q / pb->C]] : 0.0;
        }
    }
#pragma omp parallel num_threads(n_threads) reduction(min:rc)
    {
        dual_scratch s;
        s.block = NULL;
        /* a model's start's feature weights (copied: the result overwrites them), H0's terms */
        double *U = malloc((size_t)((pb->D - 1) * pb->C + 1) * sizeof(double));
        double *dV = malloc((size_t)(r + 1) * sizeof(double));
        int ok = U != NULL && dV != NULL && dual_scratch_init(&s, t_max, pb->D, pb->C, r, pb->hist, pb->nk) == 0;
        if (!ok) rc = -1;
        /* every thread takes part in the loop (a failed one skips its models: the call fails) */
#pragma omp for schedule(dynamic, 1)
        for (int64_t j = 0; j < B; j++) {
            if (!ok) continue;
            dual_model md;
            md.pb = pb;
            md.s = &s;
            md.rows = mrows + mptr[j];
            md.t = mptr[j + 1] - mptr[j];
            md.r = r;
            md.m = md.t + r + pb->C + 1;
            md.P = md.m * pb->C;
            md.oV = md.t;
            md.oU = md.t + r;
            md.ob = md.t + r + pb->C;
            md.ld = dual_pad(md.t);
            md.l2 = l2[j];
            md.inv_n = inv_n[j];
            const double mu = pb->s * pb->sig_rest + md.l2;
            md.mu_inv = r > 0 ? 1.0 / mu : 1.0;
            md.hb = r > 0 ? 1.0 / (pb->s + md.l2) : 1.0;
            for (int i = 0; i < r; i++) dV[i] = 1.0 / (pb->s * pb->sig[i] + md.l2) - md.mu_inv;
            md.dV = dV;
            double *cj = coef + j * pb->D * pb->C;
            int warm = 0;
            for (int64_t k = 0; k < (pb->D - 1) * pb->C; k++)
                if (cj[k] != 0.0) { warm = 1; break; }
            if (warm) memcpy(U, cj, (size_t)((pb->D - 1) * pb->C) * sizeof(double));
            md.U = warm ? U : NULL;
            md.XU_all = warm && XU_all ? XU_all : NULL;
            md.UU_all = UU_all;
            md.VU_all = VU_all;
            md.Xw_all = Xw_all;
            md.n_watch0 = Xw_all ? n_entries : 0;
            md.tail_out = tails ? tails + j * pb->C * (r + pb->C + 1) : NULL;
            impl.train_model(&md, cj, alpha + mptr[j] * pb->C, n_iter + j, status + j, fval + j, n_eval + j);
        }
        free(U);
        free(dV);
        free(s.block);
    }
    if (rc == 0 && logits)
        rc = dual_logits(pb, B, mptr, mrows, alpha, tails, XU_all, r, logits, n_threads, &impl);
    if (rc == 0 && mean_rows)
        rc = dual_mean_rows(pb, B, mptr, mrows, alpha, mean_rows, n_threads, &impl);
    free(XU_all); free(UU_all); free(VU_all); free(Xw_all); free(tails);
    free(KA); free(XVA); free(ident); free(XVt);
    return rc;
}
