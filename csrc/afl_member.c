/* Row passes of the kernel (training member pass, prediction), compiled per instruction set:
 * see afl_member.h for the design. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "afl_omp.h"
#include "afl_gemm.h"
#include "afl_member.h"
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(_M_X64))
#define AFL_X86_CLONES 1
#include <immintrin.h>
#endif

#if defined(__GNUC__) && !defined(__clang__)
#define AFL_IVDEP _Pragma("GCC ivdep")
#else
#define AFL_IVDEP
#endif

/* Row counts of the CE pass are padded to whole vectors of doubles (two AVX-512 vectors),
 * so its loops over rows need no scalar remainder. */
static inline int64_t afl_member_pad(int64_t n) { return (n + 15) / 16 * 16; }

/* Per-thread scratch of one evaluation. */
typedef struct {
    float *Z;              /* logits of every model's rows of a row block */
    float *R;              /* logit gradients of every model's rows of a super-block */
    float *zb;
    int32_t *yl;
    int64_t *off;          /* where each (row block, model) starts in R (see super_block) */
    int64_t *cur;          /* 2 x models: each model's groups of rows in a sub-block */
    /* multiple choice item by item (NULL otherwise): per row block of a super-block its
     * items (ni), their model lists (istart, imax + 1 per row block; imodel, iidx), and
     * the models' running gradient sums of a slice (gf, ldg floats per model) */
    int64_t *ni, imax, ldg;
    int32_t *istart, *imodel, *iidx;
    float *gf;
    /* multiple choice with the cross-entropy loss, one pass per row block (item_block_ce):
     * the models' running gradient sums over all features (Dp floats per model) and the loss
     * terms of their items */
    float *gfull;
    double *igap, *isum;
    double *work;
} afl_member_scratch;

/* Floats of a feature slice of the gradient pass (rounded to whole vectors): a row block's
 * slice (512 rows x 1 KB) and every model's double sums of it stay in a core's L2 cache. */
#ifndef AFL_MEMBER_SLICE
#define AFL_MEMBER_SLICE 256
#endif
/* Floats of a feature slice of the logits (rounded to whole vectors; up to 1280 features are
 * one slice, so a row's logits are reduced across the vector lanes once), and the bytes of a
 * slice of a sub-block's rows, read from the core's L2 cache by every model that trains on
 * them. */
#ifndef AFL_LOGIT_SLICE
#define AFL_LOGIT_SLICE 1280
#endif
#ifndef AFL_LOGIT_L2
#define AFL_LOGIT_L2 (512 * 1024)
#endif

#define AFL_SFX _generic
#define AFL_VL 4
#define AFL_KG 4
#include "afl_member_impl.h"
#undef AFL_SFX
#undef AFL_VL
#undef AFL_KG

#ifdef AFL_X86_CLONES
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define AFL_SFX _avx2
#define AFL_VL 8
#define AFL_KG 2
#include "afl_member_impl.h"
#undef AFL_SFX
#undef AFL_VL
#undef AFL_KG
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx2,fma")
#define AFL_SFX _avx512
#define AFL_VL 16
#define AFL_KG 4
#include "afl_member_impl.h"
#undef AFL_SFX
#undef AFL_VL
#undef AFL_KG
#pragma GCC pop_options
#endif

/* The row passes of one instruction set. */
typedef struct {
    void (*super_block)(const afl_member_set *, int64_t, int64_t, const int64_t *, const float *,
                        const double *, double *, int64_t, afl_member_scratch *);
    void (*predict_rows)(int64_t, int64_t, int64_t, int, int, const float *, int64_t, const int32_t *,
                         const uint8_t *, int32_t *, int32_t *, double *, double *, double *,
                         int32_t *);
} afl_rows_impl;

/* The same instruction set as the GEMM (afl_gemm_isa honours AFLITE_FAST_ISA). */
static afl_rows_impl afl_rows_pick(void)
{
    const char *isa = afl_gemm_isa();
#ifdef AFL_X86_CLONES
    if (strcmp(isa, "avx512") == 0) return (afl_rows_impl){super_block_avx512, predict_rows_avx512};
    if (strcmp(isa, "avx2") == 0) return (afl_rows_impl){super_block_avx2, predict_rows_avx2};
#else
    (void)isa;
#endif
    return (afl_rows_impl){super_block_generic, predict_rows_generic};
}

static afl_rows_impl afl_rows = {NULL, NULL};  /* picked once (afl_member_init) */

void afl_member_init(void)
{
    if (!afl_rows.super_block) afl_rows = afl_rows_pick();
}

void afl_member_index(int64_t n, int64_t B, const uint8_t *member, int64_t nrb,
                      const int64_t *row_blocks, int64_t *mptr, int32_t *mrows, int G)
{
    const int64_t L = nrb + 1;
    if (G < 1) G = 1;
    /* counts per (model, row block), then offsets: model j's rows start after every row of
     * the models before it */
    for (int64_t j = 0; j < B * L; j++) mptr[j] = 0;
    for (int64_t rb = 0; rb < nrb; rb++)
        for (int64_t i = row_blocks[rb]; i < row_blocks[rb + 1]; i += G) {
            const uint8_t *m = member + (i / G) * B;
            for (int64_t j = 0; j < B; j++) mptr[j * L + rb + 1] += m[j] ? G : 0;
        }
    int64_t base = 0;
    for (int64_t j = 0; j < B; j++) {
        int64_t *mp = mptr + j * L;
        mp[0] = base;
        for (int64_t rb = 0; rb < nrb; rb++) mp[rb + 1] += mp[rb];
        base = mp[nrb];
    }
    /* fill in row order, each model's cursor starting at its first row */
    int64_t *cur = (int64_t *)malloc((size_t)(B > 0 ? B : 1) * sizeof(int64_t));
    if (cur) {
        for (int64_t j = 0; j < B; j++) cur[j] = mptr[j * L];
        for (int64_t i = 0; i < n; i += G) {
            const uint8_t *m = member + (i / G) * B;
            for (int64_t j = 0; j < B; j++)
                if (m[j])
                    for (int k = 0; k < G; k++) mrows[cur[j]++] = (int32_t)(i + k);
        }
        free(cur);
    } else {
        /* no scratch for cursors: one pass per model */
        for (int64_t j = 0; j < B; j++) {
            int64_t c = mptr[j * L];
            for (int64_t i = 0; i < n; i += G)
                if (member[(i / G) * B + j])
                    for (int k = 0; k < G; k++) mrows[c++] = (int32_t)(i + k);
        }
    }
}

/* Multiple choice with the cross-entropy loss in one pass per row block (item_block_ce), or
 * (0, for tests: the two passes it must equal bit for bit) scores first, then the gradient. */
static int afl_items_fused = 1;

void afl_member_fuse_items(int on)
{
    afl_items_fused = on != 0;
}

/* Where the member pass puts each unit's sums (called in unit order). */
typedef void (*afl_member_sink)(void *ctx, int64_t u, double **part, int64_t nA, int64_t P,
                                int64_t stride);

/* The member pass of the models active[0..nA) over every super-block, in units of
 * consecutive super-blocks (unit u: super-blocks units[u] .. units[u + 1]; units == NULL: one
 * super-block each).  A unit's sums start from zero and take its super-blocks' row blocks in
 * order, on one thread; sink(ctx, u, &part, ...) receives unit u's sums (nA x stride doubles:
 * P gradient entries, then the loss) in unit order, and may swap the buffer for another of
 * the same size (freed by whoever holds it last).  With n_threads > 1 the threads take units
 * and hand their sums over in unit order (an ordered section): the same bits as one thread.
 * Returns 0, or -1 if scratch memory could not be allocated. */
static int member_range(const afl_member_set *s, int64_t nA, const int64_t *active,
                        const float *W, const double *scale, int64_t nu, const int64_t *units,
                        afl_member_sink sink, void *ctx, int n_threads)
{
    const int C = s->C;
    const int64_t P = (int64_t)C * s->Dp, stride = P + 1;
    int64_t qmax = 0;
    for (int64_t rb = 0; rb < s->nrb; rb++)
        if (s->row_blocks[rb + 1] - s->row_blocks[rb] > qmax) qmax = s->row_blocks[rb + 1] - s->row_blocks[rb];
    if (nA == 0 || s->nsb == 0 || qmax == 0) return 0;
    void (*const fn)(const afl_member_set *, int64_t, int64_t, const int64_t *, const float *,
                     const double *, double *, int64_t, afl_member_scratch *) = afl_rows.super_block;
    /* the largest super-block: its row blocks and its member rows over the active models */
    int64_t rbmax = 0, qsb = 0;
    for (int64_t sb = 0; sb < s->nsb; sb++) {
        if (s->sb[sb + 1] - s->sb[sb] > rbmax) rbmax = s->sb[sb + 1] - s->sb[sb];
        int64_t q = 0;
        for (int64_t a = 0; a < nA; a++) {
            const int64_t *mp = s->mptr + active[a] * (s->nrb + 1);
            q += mp[s->sb[sb + 1]] - mp[s->sb[sb]];
        }
        if (q > qsb) qsb = q;
    }
    if (!units) nu = s->nsb;
    /* the loss step's scratch: per row of C classes, or per item of G candidates */
    const int G = s->G > 1 ? s->G : 1;
    const int64_t qp = afl_member_pad(qmax);
    const int CF = C + (s->ref ? 1 : 0);  /* classes of the loss step */
    const int64_t nwork = (CF + 4) * qp > (G + 4) * afl_member_pad(qmax / G)
        ? (CF + 4) * qp : (G + 4) * afl_member_pad(qmax / G);
    const int ncz = CF > G ? CF : G;
    if (n_threads < 1) n_threads = 1;
    if (n_threads > nu) n_threads = nu > 0 ? (int)nu : 1;
    int failed = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(n_threads)
#endif
    {
        afl_member_scratch w;
        double *part = (double *)malloc((size_t)(nA * stride) * sizeof(double));
        w.Z = (float *)malloc((size_t)(nA * qmax * C) * sizeof(float));
        w.R = (float *)malloc((size_t)((qsb > 0 ? qsb : 1) * C) * sizeof(float));
        w.zb = (float *)malloc((size_t)ncz * sizeof(float));
        w.yl = (int32_t *)malloc((size_t)qmax * sizeof(int32_t));
        w.off = (int64_t *)malloc((size_t)((nA + 1) * (rbmax > 0 ? rbmax : 1)) * sizeof(int64_t));
        w.work = (double *)malloc((size_t)nwork * sizeof(double));
        w.cur = (int64_t *)malloc((size_t)(2 * nA) * sizeof(int64_t));
        w.ni = NULL;
        w.istart = w.imodel = w.iidx = NULL;
        w.gf = w.gfull = NULL;
        w.igap = w.isum = NULL;
        w.imax = qmax / 2 + 1;
        w.ldg = AFL_MEMBER_SLICE + 32;  /* a gradient slice's floats, whatever the vector width */
        int item_ok = 1;
        if (C == 1 && G >= 2 && G <= 4) {
            const int64_t nrbs = rbmax > 0 ? rbmax : 1, ne = qsb / 2 + 1;
            w.ni = (int64_t *)malloc((size_t)nrbs * sizeof(int64_t));
            w.istart = (int32_t *)malloc((size_t)(nrbs * (w.imax + 1)) * sizeof(int32_t));
            w.imodel = (int32_t *)malloc((size_t)ne * sizeof(int32_t));
            w.iidx = (int32_t *)malloc((size_t)ne * sizeof(int32_t));
            item_ok = w.ni && w.istart && w.imodel && w.iidx;
            if (s->loss_code == AFL_LOSS_CE && afl_items_fused) {
                /* one pass per row block: running sums over all the features */
                w.gfull = (float *)malloc((size_t)(nA * s->Dp) * sizeof(float));
                w.igap = (double *)malloc((size_t)ne * sizeof(double));
                w.isum = (double *)malloc((size_t)ne * sizeof(double));
                item_ok = item_ok && w.gfull && w.igap && w.isum;
            } else {
                /* scores, then the gradient slice by slice */
                w.gf = (float *)malloc((size_t)(nA * w.ldg) * sizeof(float));
                item_ok = item_ok && w.gf;
            }
        }
        const int ok = part && w.Z && w.R && w.zb && w.yl && w.off && w.work && w.cur && item_ok;
        if (!ok) {
#ifdef _OPENMP
#pragma omp atomic write
#endif
            failed = 1;
        }
        /* units in order; with several threads each sums its units into `part` and the ordered
         * section hands the parts to the sink in unit order */
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1) ordered
#endif
        for (int64_t u = 0; u < nu; u++) {
            if (ok) {
                memset(part, 0, (size_t)(nA * stride) * sizeof(double));
                const int64_t sb0 = units ? units[u] : u, sb1 = units ? units[u + 1] : u + 1;
                for (int64_t sb = sb0; sb < sb1; sb++) fn(s, sb, nA, active, W, scale, part, stride, &w);
            }
#ifdef _OPENMP
#pragma omp ordered
#endif
            {
                if (ok) sink(ctx, u, &part, nA, P, stride);
            }
        }
        free(part);
        free(w.Z);
        free(w.R);
        free(w.zb);
        free(w.yl);
        free(w.off);
        free(w.work);
        free(w.cur);
        free(w.ni);
        free(w.istart);
        free(w.imodel);
        free(w.iidx);
        free(w.gf);
        free(w.gfull);
        free(w.igap);
        free(w.isum);
    }
    return failed ? -1 : 0;
}

/* Whether the threads take units of rows (each unit's sums over all the models) rather than
 * shares of the models (each thread's models over all the rows).  Multiple choice of 2-4
 * candidates goes item by item: a thread streams every item of its rows from memory whatever
 * its share of the models, so with the models split every thread would read all the rows,
 * and the pass would wait on memory.  Classification goes model by model over L2-sized
 * pieces of rows, where units gain nothing, and a share of the models keeps each thread's
 * sums smaller.  Units are fixed by the caller and handed over in order, so the bits are the
 * same either way. */
static int threads_take_units(const afl_member_set *s, int64_t n_units, int n_threads)
{
    return n_threads > 1 && s->C == 1 && s->G >= 2 && s->G <= 4 && n_units >= 2 * (int64_t)n_threads;
}

/* Work on the models [a0, a1) of a thread's share: 0, or an error code. */
typedef int (*afl_models_fn)(void *ctx, int thread, int64_t a0, int64_t a1);

/* fn on the threads' shares of nA models (one thread per model at most; thread t takes
 * [t nA / T, (t + 1) nA / T)): the first error code of any share (-1 preferred), else 0. */
static int by_model_shares(int n_threads, int64_t nA, afl_models_fn fn, void *ctx)
{
    if (n_threads < 1) n_threads = 1;
    const int T = nA < n_threads ? (int)(nA > 0 ? nA : 1) : n_threads;
    int rc = 0;
#ifdef _OPENMP
#pragma omp parallel num_threads(T)
#endif
    {
        const int t = omp_get_thread_num();
        const int r = fn(ctx, t, t * nA / T, (t + 1) * nA / T);
        if (r != 0) {
#ifdef _OPENMP
#pragma omp critical(afl_member_shares_rc)
#endif
            if (rc == 0 || r == -1) rc = r;
        }
    }
    return rc;
}

typedef struct {
    double *loss, *grad;
} afl_sum_sink;

/* Super-block sums added in order into grad and loss. */
static void sum_sink(void *ctx, int64_t sb, double **partp, int64_t nA, int64_t P, int64_t stride)
{
    const afl_sum_sink *o = (const afl_sum_sink *)ctx;
    const double *part = *partp;
    (void)sb;
    for (int64_t a = 0; a < nA; a++) {
        const double *pa = part + a * stride;
        double *ga = o->grad + a * P;
        for (int64_t k = 0; k < P; k++) ga[k] += pa[k];
        o->loss[a] += pa[P];
    }
}

/* afl_member_eval's arguments, for a thread's share of the models. */
typedef struct {
    const afl_member_set *s;
    const int64_t *active;
    const float *W;
    const double *scale;
    double *loss, *grad;
} afl_eval_share;

static int eval_share(void *ctx, int thread, int64_t a0, int64_t a1)
{
    const afl_eval_share *e = (const afl_eval_share *)ctx;
    const int64_t P = (int64_t)e->s->C * e->s->Dp;
    afl_sum_sink o = {e->loss + a0, e->grad + a0 * P};
    (void)thread;
    return member_range(e->s, a1 - a0, e->active + a0, e->W + a0 * P, e->scale + a0, 0, NULL,
                        sum_sink, &o, 1);
}

int afl_member_eval(const afl_member_set *s, int64_t nA, const int64_t *active,
                    const float *W, const double *scale, double *loss, double *grad,
                    int n_threads)
{
    const int64_t P = (int64_t)s->C * s->Dp;
    for (int64_t a = 0; a < nA; a++) loss[a] = 0.0;
    memset(grad, 0, (size_t)(nA * P) * sizeof(double));
    if (nA == 0) return 0;
    afl_member_init();
    if (n_threads > 1 && (nA < 2 * (int64_t)n_threads || threads_take_units(s, s->nsb, n_threads))) {
        /* fewer than two models a thread (a single estimator, a few folds), or multiple
         * choice (threads_take_units): the threads take super-blocks instead, with the same
         * bits */
        afl_sum_sink o = {loss, grad};
        return member_range(s, nA, active, W, scale, 0, NULL, sum_sink, &o, n_threads);
    }
    afl_eval_share e = {s, active, W, scale, loss, grad};
    return by_model_shares(n_threads, nA, eval_share, &e);
}

/* The reduction tree of afl_member_eval_tree: a stack of nodes (level, index, present),
 * each nA x stride doubles in a slot of its own. */
typedef struct {
    const int64_t *gleaf;    /* leaf of each group */
    int64_t next_leaf;       /* first leaf not pushed yet */
    int64_t len;             /* nA x stride */
    int64_t depth;           /* nodes on the stack */
    int64_t *level, *index;
    int *present;
    double **slot;           /* slot[k]: values of stack node k; slot[depth]: the group's sums */
} afl_tree_sink;

/* Push leaf `leaf` (present: its sums are in slot[depth]) and merge while the node below is
 * its left sibling: left + right, element by element (an absent node adds nothing). */
static void tree_push(afl_tree_sink *t, int64_t leaf, int present)
{
    int64_t k = t->depth, L = 0, i = leaf;
    t->level[k] = L;
    t->index[k] = i;
    t->present[k] = present;
    t->depth = k + 1;
    while (t->depth >= 2) {
        const int64_t top = t->depth - 1, below = top - 1;
        if (t->level[below] != t->level[top] || t->index[top] % 2 != 1 || t->index[below] != t->index[top] - 1)
            break;
        if (t->present[below] && t->present[top]) {
            double *l = t->slot[below];
            const double *r = t->slot[top];
            for (int64_t e = 0; e < t->len; e++) l[e] = l[e] + r[e];
        } else if (t->present[top]) {
            double *tmp = t->slot[below];
            t->slot[below] = t->slot[top];
            t->slot[top] = tmp;
            t->present[below] = 1;
        }
        t->level[below] += 1;
        t->index[below] /= 2;
        t->depth = top;
    }
}

/* Absent leaves up to (not including) `leaf`. */
static void tree_skip_to(afl_tree_sink *t, int64_t leaf)
{
    while (t->next_leaf < leaf) tree_push(t, t->next_leaf++, 0);
}

/* Group g's sums (the member pass's unit g): absent leaves before it, then its leaf joins
 * the tree (its buffer taken in exchange for a free slot: no copy). */
static void tree_sink(void *ctx, int64_t g, double **part, int64_t nA, int64_t P, int64_t stride)
{
    afl_tree_sink *t = (afl_tree_sink *)ctx;
    (void)nA; (void)P; (void)stride;
    tree_skip_to(t, t->gleaf[g]);
    double *free_slot = t->slot[t->depth];
    t->slot[t->depth] = *part;
    *part = free_slot;
    tree_push(t, t->gleaf[g], 1);
    t->next_leaf = t->gleaf[g] + 1;
}

/* The reduction tree of afl_member_eval_tree over the models [a0, a1): its nodes go to
 * out_nodes (model rows a0.. of each node); `first` also writes level, index and the node
 * count (the same for every share of the models: they depend on the groups alone).  Called
 * on one thread per share of the models, or once for all of them with n_threads taking the
 * groups (handed to the tree in group order). */
static int member_tree_range(const afl_member_set *s, int64_t nA, int64_t a0, int64_t a1,
                             const int64_t *active, const float *W, const double *scale,
                             int64_t ng, const int64_t *gsb, const int64_t *gleaf, int64_t leaf_lo,
                             int64_t leaf_hi, int64_t max_nodes, double *nodes, int64_t *level,
                             int64_t *index, int64_t *n_nodes, int first, int n_threads)
{
    const int64_t stride = (int64_t)s->C * s->Dp + 1, P = stride - 1, len = (a1 - a0) * stride;
    afl_tree_sink t;
    int rc = 0;
    t.gleaf = gleaf;
    t.next_leaf = leaf_lo;
    t.len = len;
    t.depth = 0;
    /* a stack of merged nodes holds at most one node per level, plus the group in progress */
    const int64_t cap = 2 * 64 + 2;
    t.level = (int64_t *)malloc((size_t)cap * sizeof(int64_t));
    t.index = (int64_t *)malloc((size_t)cap * sizeof(int64_t));
    t.present = (int *)malloc((size_t)cap * sizeof(int));
    t.slot = (double **)calloc((size_t)cap, sizeof(double *));
    int64_t n_slots = 0;
    for (int64_t lv = leaf_hi - leaf_lo; lv > 0; lv >>= 1) n_slots++;
    n_slots = 2 * n_slots + 3;
    if (n_slots > cap) n_slots = cap;
    /* slots one allocation each: the sink swaps them with the pass's buffer */
    int slots_ok = t.slot != NULL;
    for (int64_t k = 0; slots_ok && k < n_slots; k++)
        slots_ok = (t.slot[k] = (double *)malloc((size_t)(len > 0 ? len : 1) * sizeof(double))) != NULL;
    if (!t.level || !t.index || !t.present || !slots_ok) {
        rc = -1;
    } else {
        if (ng > 0 && a1 > a0)
            rc = member_range(s, a1 - a0, active + a0, W + a0 * P, scale + a0, ng, gsb, tree_sink, &t, n_threads);
        if (rc == 0) {
            tree_skip_to(&t, leaf_hi);
            int64_t out = 0;
            for (int64_t k = 0; k < t.depth; k++) {
                if (!t.present[k]) continue;
                if (out >= max_nodes) { rc = -2; break; }
                memcpy(nodes + out * nA * stride + a0 * stride, t.slot[k], (size_t)len * sizeof(double));
                if (first) {
                    level[out] = t.level[k];
                    index[out] = t.index[k];
                }
                out++;
            }
            if (first) *n_nodes = out;
        }
    }
    if (t.slot)
        for (int64_t k = 0; k < n_slots; k++) free(t.slot[k]);
    free(t.level);
    free(t.index);
    free(t.present);
    free(t.slot);
    return rc;
}

/* afl_member_eval_tree's arguments, for a thread's share of the models. */
typedef struct {
    const afl_member_set *s;
    int64_t nA;
    const int64_t *active;
    const float *W;
    const double *scale;
    int64_t ng;
    const int64_t *gsb, *gleaf;
    int64_t leaf_lo, leaf_hi, max_nodes;
    double *nodes;
    int64_t *level, *index, *n_nodes;
} afl_tree_share;

static int tree_share(void *ctx, int thread, int64_t a0, int64_t a1)
{
    const afl_tree_share *e = (const afl_tree_share *)ctx;
    return member_tree_range(e->s, e->nA, a0, a1, e->active, e->W, e->scale, e->ng, e->gsb, e->gleaf,
                             e->leaf_lo, e->leaf_hi, e->max_nodes, e->nodes, e->level, e->index,
                             e->n_nodes, thread == 0, 1);
}

int afl_member_eval_tree(const afl_member_set *s, int64_t nA, const int64_t *active,
                         const float *W, const double *scale, int64_t ng, const int64_t *gsb,
                         const int64_t *gleaf, int64_t leaf_lo, int64_t leaf_hi, int64_t max_nodes,
                         double *nodes, int64_t *level, int64_t *index, int64_t *n_nodes,
                         int n_threads)
{
    *n_nodes = 0;
    if (max_nodes < 1) return -1;
    if (nA == 0 || ng == 0) return 0;
    afl_member_init();
    int rc;
    if (threads_take_units(s, ng, n_threads)) {
        rc = member_tree_range(s, nA, 0, nA, active, W, scale, ng, gsb, gleaf, leaf_lo, leaf_hi, max_nodes,
                               nodes, level, index, n_nodes, 1, n_threads);
    } else {
        afl_tree_share e = {s, nA, active, W, scale, ng, gsb, gleaf, leaf_lo, leaf_hi, max_nodes, nodes,
                            level, index, n_nodes};
        rc = by_model_shares(n_threads, nA, tree_share, &e);
    }
    if (rc != 0) *n_nodes = 0;
    return rc;
}

/* The row pass of rows r0 <= i < r1 from their logits (row i at Z + (i - r0) * ldz): blocks of
 * 64 rows on the threads, each thread's scratch in work ((CI + 2) bp doubles) and am (bp). */
static void predict_row_pass(int64_t r0, int64_t r1, int64_t B, int CI, int ref, const float *Z, int64_t ldz,
                             const int32_t *y, const uint8_t *heldout, int32_t *seen, int32_t *correct,
                             double *prob_label, double *proba_sum, double *work, int32_t *am, int n_threads)
{
    const int64_t bp = afl_member_pad(B), nblk = (r1 - r0 + 63) / 64;
#ifdef _OPENMP
#pragma omp parallel for num_threads(n_threads) schedule(static)
#endif
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t i0 = r0 + b * 64, i1 = i0 + 64 < r1 ? i0 + 64 : r1;
        const int t = omp_get_thread_num();
        afl_rows.predict_rows(i0, i1, B, CI, ref, Z + (i0 - r0) * ldz, ldz, y, heldout, seen, correct, prob_label,
                              proba_sum, work + t * (CI + 2) * bp, am + t * bp);
    }
}

int afl_predict(int64_t n, int64_t D, const float *X, int64_t ldx, int64_t B, int C,
                const float *W, const int64_t *col_blocks, int64_t ncb, const int32_t *y,
                const uint8_t *heldout, int32_t *seen, int32_t *correct, double *prob_label,
                double *proba_sum, int64_t tile, int n_threads, int G, int ref)
{
    if (G < 1) G = 1;
    if (G > 1) ref = 0;
    ref = ref ? 1 : 0;
    /* BC: scores per row; CI: classes per item (an item's G candidates with G > 1; with ref,
     * the C outputs and the reference class) */
    const int64_t BC = B * (int64_t)C, bp = afl_member_pad(B);
    const int CI = C * G + ref;
    if (n <= 0 || B <= 0) return 0;
    afl_member_init();
    if (n_threads < 1) n_threads = 1;
    /* a tile of items at a time: its logits stay in cache for the row pass */
    if (tile <= 0) {
        tile = (int64_t)(AFL_PREDICT_TILE_BYTES / sizeof(float)) / (BC * G);
        if (tile < AFL_PREDICT_MIN_TILE) tile = AFL_PREDICT_MIN_TILE;
    }
    if (tile < 1) tile = 1;
    if (tile > n) tile = n;
    float *Z = (float *)malloc((size_t)(tile * G * BC) * sizeof(float));
    double *work = (double *)malloc((size_t)(n_threads * (CI + 2) * bp) * sizeof(double));
    int32_t *am = (int32_t *)malloc((size_t)(n_threads * bp) * sizeof(int32_t));
    int rc = (Z && work && am) ? 0 : -1;
    for (int64_t r0 = 0; r0 < n && rc == 0; r0 += tile) {
        const int64_t r1 = r0 + tile < n ? r0 + tile : n;
        rc = afl_sgemm(0, (r1 - r0) * G, BC, D, X + r0 * G * ldx, ldx, W, BC, Z, NULL, BC, 0,
                       col_blocks, ncb, n_threads);
        if (rc != 0) break;
        predict_row_pass(r0, r1, B, CI, ref, Z, G * BC, y, heldout, seen, correct, prob_label, proba_sum, work, am,
                         n_threads);
    }
    free(Z);
    free(work);
    free(am);
    return rc;
}

int afl_predict_logits(int64_t n, int64_t B, int C, const float *Z, const int32_t *y, const uint8_t *heldout,
                       int32_t *seen, int32_t *correct, double *prob_label, double *proba_sum, int n_threads,
                       int ref)
{
    ref = ref ? 1 : 0;
    const int64_t BC = B * (int64_t)C, bp = afl_member_pad(B);
    const int CI = C + ref;
    if (n <= 0 || B <= 0) return 0;
    afl_member_init();
    if (n_threads < 1) n_threads = 1;
    double *work = (double *)malloc((size_t)(n_threads * (CI + 2) * bp) * sizeof(double));
    int32_t *am = (int32_t *)malloc((size_t)(n_threads * bp) * sizeof(int32_t));
    if (!work || !am) {
        free(work);
        free(am);
        return -1;
    }
    predict_row_pass(0, n, B, CI, ref, Z, BC, y, heldout, seen, correct, prob_label, proba_sum, work, am, n_threads);
    free(work);
    free(am);
    return 0;
}
