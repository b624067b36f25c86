/* Row passes of the kernel: member-row evaluation of a block of linear models (objective
 * sums and gradients of each model over its own training rows only), and held-out prediction.
 * The measurements behind these choices, and the designs tried before them, are in
 * benchmarks/RESULTS.md.
 *
 * Design:
 *  A. Work is proportional to the training rows of each model (sum_j n_j x D x C), not to
 *     (union of the block's rows) x (models): a masked GEMM over the union does N / t times
 *     the arithmetic needed when t is a small share of the active rows (t/N = 0.1 with 64
 *     partitions: the union is all rows, so 10x), which is how AFLite runs at scale.
 *  B. Rows come in row blocks fixed by the caller (positions in the active set // 512) and
 *     super-blocks of row blocks (about 4 MB of rows, also fixed by positions); the caller
 *     may gather super-blocks into units (the reduction groups), whose sums start from zero.
 *     Threads split the models, not the rows: each thread passes over every unit for its
 *     share of the models and keeps its own sums, so nothing is handed between threads.
 *     With fewer than two models a thread (a single estimator, a few folds), and for
 *     multiple choice item by item (E), whose pass streams all of a thread's rows whatever
 *     its share of the models, the threads take units instead and hand their sums over in
 *     unit order, with the same bits.  Within a super-block, row block by row block, every
 *     model is evaluated over its member rows of the block: the first model that needs a
 *     row's features brings them from memory, every other model (a row trains m t/N of them:
 *     6 at t/N = 0.1, 32 at 0.5) reads them from the core's L2 cache.
 *  C. Per row block: logits of every model's member rows, in logit slices of up to 1280
 *     features (fixed by D; one slice for most embeddings, so a row's lanes are reduced once)
 *     over sub-blocks of the row block whose slice of rows fits about 512 KB of L2 (the next
 *     sub-block prefetched meanwhile): dot products vectorised along the features, four rows
 *     at a time so each weight vector load serves four rows and each row vector load, kept in
 *     a register, up to four classes, the slice's lanes reduced and added to the row's logits
 *     in slice order.  Then per model the per-row loss and logit gradient (cross-entropy
 *     vectorised over the rows; other losses through afl_row_loss).  Then, per super-block,
 *     the gradient X_rows^T R in slices of about 256 floats and within a slice row block by
 *     row block (vectorised along the features, a sequential FMA chain over a block's rows in
 *     order, from zero, added in double), so the slice of every model's double sums stays in
 *     L2 while the row blocks are added to it.  This is the one kernel of the member pass: a
 *     chunk of rows with its member lists (afl_member_set) is evaluated by afl_member_eval,
 *     whose sums a caller holding several chunks adds in a fixed chunk order.
 *  D. Determinism: a row's logits are computed by the same instructions wherever the row
 *     sits (groups of four are padded with copies of the last row, whose results are
 *     dropped; its slices depend on D alone); a model's gradient and loss over a row block
 *     are sums over its member rows in row order, added in double in row-block order within
 *     a unit (super-blocks and units are fixed ranges given by the caller from positions
 *     alone), and unit sums are added in unit order (afl_member_eval) or by the reduction
 *     tree (afl_member_eval_tree).  So no bit depends on the thread count, on which other
 *     models are evaluated, or on which other rows the block holds.  Results are
 *     reproducible per instruction set (AVX-512, AVX2, generic), as the GEMM's are.
 *  E. Multiple choice (G > 1): an item's G candidates are G consecutive rows and the model
 *     has one output (C == 1), the candidate's score.  The member lists hold whole items
 *     (member is one row per item) and row blocks end on item boundaries, so a model's rows
 *     of a row block are whole items: its q scores are q / G items of G "classes" in the
 *     layout of C-class logits, and the loss step is the classification loss over items
 *     (softmax over each item's candidates, the item's label the right candidate).  The
 *     gradient pass is the same: R holds d loss / d score per candidate row.  So one kernel
 *     serves both model shapes, with work per round proportional to the t x G candidate rows
 *     of each model, and the same determinism.  With 2 <= G <= 4 the scores and the gradient
 *     go item by item (an item's candidate rows in registers serve every model that trains
 *     on it, models four at a time), by the same instructions per dot product and per
 *     gradient element as model by model, so with the same bits; with the cross-entropy loss
 *     a row block is one pass over its items (scores, loss step and gradient of an item while
 *     its rows are in L1: each row read once per evaluation, not twice), again with the same
 *     operations in the same order, so the same bits.  Prediction: the GEMM
 *     scores every candidate row, and the row pass reads an item's G x B scores as G classes
 *     of B models.
 */
#ifndef AFL_MEMBER_H
#define AFL_MEMBER_H
#include <stdint.h>
#include "afl_losses.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The rows of one training call and each model's member rows among them. */
typedef struct {
    int64_t n, D;            /* rows of X; columns (features + the ones column) */
    int64_t ldx;             /* stride of X's rows (>= D); a multiple of 16 keeps rows aligned */
    int64_t Dp;              /* stride of W's and grad's class rows: D rounded up to AFL_MEMBER_ALIGN */
    int C;                   /* outputs per row: classes (1 with G > 1), or with ref all but one */
    int ref;                 /* 1: C + 1 classes, the last one's logit fixed at 0 (the
                              * reference-class form, G == 1); 0: C classes */
    int G;                   /* rows per item: 1, or G > 1 candidates of a multiple-choice item */
    const float *X;          /* n rows of ldx floats, the first D of each used */
    const int32_t *y;        /* n / G label codes (per item: the right candidate with G > 1) */
    int64_t B;               /* models of the call */
    int64_t nrb;             /* row blocks */
    const int64_t *row_blocks; /* nrb + 1 boundaries (rows) */
    const int64_t *mptr;     /* B x (nrb + 1): model j's rows of row block rb are
                              * mrows[mptr[j * (nrb + 1) + rb] : mptr[j * (nrb + 1) + rb + 1]] */
    const int32_t *mrows;    /* member rows, model by model, increasing */
    int64_t nsb;             /* super-blocks */
    const int64_t *sb;       /* nsb + 1 boundaries (row blocks) */
    int loss_code;
    const double *params;
    afl_user_weight_fn user;
} afl_member_set;

/* Class rows of weights and gradients are padded to whole vectors of this many floats. */
#define AFL_MEMBER_ALIGN 16
static inline int64_t afl_member_width(int64_t D)
{
    return (D + AFL_MEMBER_ALIGN - 1) / AFL_MEMBER_ALIGN * AFL_MEMBER_ALIGN;
}

/* Fill mptr (B x (nrb + 1)) and mrows (G x member.sum() entries) from the (n / G) x B 0/1
 * mask of items (rows when G == 1); row blocks end on item boundaries. */
void afl_member_index(int64_t n, int64_t B, const uint8_t *member, int64_t nrb,
                      const int64_t *row_blocks, int64_t *mptr, int32_t *mrows, int G);

/* For the nA models active[0..nA) with class-major float32 weights W (nA x C x Dp, zero
 * beyond D in every class row):
 * loss[a] = sum of the row losses over model active[a]'s rows, and
 * grad[a * C * Dp + c * Dp + k] = sum over those rows of scale[a] * dloss/dz_c * X[row, k]
 * for k < D (zero beyond).
 * Returns 0, or -1 if scratch memory could not be allocated. */
int afl_member_eval(const afl_member_set *s, int64_t nA, const int64_t *active,
                    const float *W, const double *scale, double *loss, double *grad,
                    int n_threads);

/* afl_member_eval with a fixed reduction tree over groups of rows, so that a caller holding
 * only some of the groups computes partial sums that add up to the same bits.
 * The super-blocks form ng groups (group g: super-blocks gsb[g] .. gsb[g + 1]), group g is
 * leaf gleaf[g] (increasing) of a binary tree over leaves [0, 2^k).  A group's sums are its
 * row blocks' sums added in order from zero (design D: a group is a unit); a node of the
 * tree is its left child plus its right child, element by element (a leaf without rows adds
 * nothing).  For the leaves [leaf_lo, leaf_hi) this writes the maximal whole subtrees that
 * hold rows, left to right: node o (level[o], index[o]: leaves index << level .. (index + 1)
 * << level) is nodes[o * nA * (C * Dp + 1) ..], model by model, C * Dp gradient entries (as
 * afl_member_eval's grad) and then the loss.  With [leaf_lo, leaf_hi) the whole tree there is
 * one node, the root (none when no row is given).  Returns 0, -1 if scratch memory could not
 * be allocated, -2 if more than max_nodes nodes were due. */
int afl_member_eval_tree(const afl_member_set *s, int64_t nA, const int64_t *active,
                         const float *W, const double *scale, int64_t ng, const int64_t *gsb,
                         const int64_t *gleaf, int64_t leaf_lo, int64_t leaf_hi, int64_t max_nodes,
                         double *nodes, int64_t *level, int64_t *index, int64_t *n_nodes,
                         int n_threads);

/* Multiple choice with the cross-entropy loss: one pass per row block (on, the default) or the
 * scores and then the gradient (off; for tests, which compare the two bit for bit).  Not to be
 * called while a pass runs. */
void afl_member_fuse_items(int on);

/* Pick the instruction set of the row passes (call once before any thread may use them). */
void afl_member_init(void);

/* Bytes of logits a prediction tile holds by default (they are consumed while in cache), and
 * its rows at least: each tile is one GEMM call, which packs all of W again, so with many
 * outputs per row (C = 100 classes of 32 models: 327 rows in 4 MB) small tiles would repeat
 * that packing and the threads' start-up every few hundred rows. */
#define AFL_PREDICT_TILE_BYTES (4u << 20)
#define AFL_PREDICT_MIN_TILE 2048

/* Held-out predictions of B models on n rows (stride ldx), W the D x (C * B) class-major
 * weights (column c * B + j: class c of model j).  With G > 1 (and C == 1) the n items are
 * n x G candidate rows, scored by the GEMM, and an item's G scores are its G classes.  With
 * ref = 1 (G == 1) the rows have C + 1 classes, the last with logit 0 (the reference-class
 * form; proba_sum rows of C + 1).  Where heldout[i * B + j], seen[i] += 1,
 * correct[i] += (arg max == y[i]) (lowest class on ties; y[i] < 0: no label), prob_label[i] +=
 * p_{y[i]}, proba_sum[i * C + c] += p_c (when not NULL).  Logits: the deterministic GEMM with
 * K-blocks col_blocks, `tile` rows at a time (<= 0: AFL_PREDICT_TILE_BYTES of logits);
 * softmax in double; sums over models in model order.  Returns 0, or -1 if scratch memory
 * could not be allocated. */
int afl_predict(int64_t n, int64_t D, const float *X, int64_t ldx, int64_t B, int C,
                const float *W, const int64_t *col_blocks, int64_t ncb, const int32_t *y,
                const uint8_t *heldout, int32_t *seen, int32_t *correct, double *prob_label,
                double *proba_sum, int64_t tile, int n_threads, int G, int ref);

/* afl_predict's row pass from given logits Z (n x C B, float32, class-major as W's columns;
 * G = 1): the same counts from the same logits.  Returns 0, or -1 if scratch memory could not
 * be allocated. */
int afl_predict_logits(int64_t n, int64_t B, int C, const float *Z, const int32_t *y, const uint8_t *heldout,
                       int32_t *seen, int32_t *correct, double *prob_label, double *proba_sum, int n_threads,
                       int ref);

#ifdef __cplusplus
}
#endif
#endif
