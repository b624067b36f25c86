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
 *  C. Determinism: every lane of the exponential loop runs the same code and the buffer is
 *     padded to a whole number of vectors, so a model's values do not depend on its position
 *     in the round, on the other models of the block or on the thread; sums over rows run in
 *     row order within the caller's row block.
 */
#ifndef AFL_ROWPASS_H
#define AFL_ROWPASS_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Length (doubles) of the scratch `work` of afl_ce_rows for n_logits = nA * C. */
int64_t afl_ce_work_len(int64_t n_logits);

/* For rows r0 <= i < r1 and active models a < nA (model index active[a] in 0..B-1):
 * where member[i * B + active[a]], replace Z[i, a*C : a*C+C] by inv_n[active[a]] * (p - e_y)
 * and add -log p_y to loss[a]; elsewhere set them to zero.  loss[a] is overwritten with the
 * block's sum.  work: afl_ce_work_len(nA * C) doubles; acc: 4 * nA doubles. */
void afl_ce_rows(int64_t r0, int64_t r1, int C, int64_t nA, int64_t B,
                 float *Z, int64_t ldz, const int32_t *y, const uint8_t *member,
                 const int64_t *active, const double *inv_n, double *loss,
                 double *work, double *acc);

#ifdef __cplusplus
}
#endif
#endif
