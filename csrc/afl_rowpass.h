/* Hot path of the training kernel for the cross-entropy loss: the per-row pass over the
 * logits of every model of a solver round.
 *
 * Design:
 *  A. The generic path (afl_losses.h) calls libm's exp C times and log once per (row, model).
 *     With 3-5 classes these calls are most of the time outside the two GEMMs.  Here the
 *     exponentials of a whole row of logits (all models of the round) are one vectorised
 *     loop over a padded buffer, and the logarithm is taken once per row block and model:
 *     sum_i log s_i = log prod_i s_i, with the product folded into the sum before it can
 *     overflow (each s_i lies in [1, C]).
 *  B. exp is a double-precision polynomial with range reduction, accurate to a few units in
 *     the last place: the objective keeps double precision so the line search sees the same
 *     decreases as with libm.
 *  C. Logits are laid out class-major (all models' class-0 logits, then class 1, ...), so
 *     the max, the denominators, the gradient scale and the running sums are loops over the
 *     models of the round that the compiler vectorises, whatever the number of classes.
 *  D. Determinism: every lane runs the same code and per-model buffers are padded to whole
 *     vectors, so a model's values do not depend on its position in the round, on the other
 *     models of the block or on the thread; sums over rows run in row order within the
 *     caller's row block.
 */
#ifndef AFL_ROWPASS_H
#define AFL_ROWPASS_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Model counts are padded to a multiple of this (two AVX-512 vectors of doubles), so every
 * per-model loop runs whole vectors and no element is computed by a scalar remainder loop. */
#define AFL_PAD 16
static inline int64_t afl_pad(int64_t n) { return (n + AFL_PAD - 1) / AFL_PAD * AFL_PAD; }

/* Length (doubles) of the scratch `work` of afl_ce_rows. */
static inline int64_t afl_ce_work_len(int C, int64_t nA) { return (C + 9) * afl_pad(nA); }

/* Logits are class-major within a row: class c of active model a is Z[i * ldz + c * nA + a],
 * so each per-model step is a loop over models.  For rows r0 <= i < r1 and models a < nA
 * (model active[a] of 0..B-1): where member[i * B + active[a]], replace the model's logits by
 * scale[a] * (p - e_y) and add -log p_y to its sum; elsewhere set them to zero.  loss[a]
 * receives the block's sum.  scale: afl_pad(nA) doubles (entries from nA on are ignored);
 * work: afl_ce_work_len(C, nA) doubles. */
void afl_ce_rows(int64_t r0, int64_t r1, int C, int64_t nA, int64_t B,
                 float *Z, int64_t ldz, const int32_t *y, const uint8_t *member,
                 const int64_t *active, const double *scale, double *loss, double *work);

#ifdef __cplusplus
}
#endif
#endif
