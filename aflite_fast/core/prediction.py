"""Held-out prediction with all the models of a phase in one pass over the rows.

Rows are those of :mod:`aflite_fast.core.layout`; the weights of every model are stacked once
(:func:`stack_weights`), and each row's held-out predictions add to its counts (seen, correct,
summed probability of the label, and optionally every class's probability).
"""
import numpy as np

from aflite_fast.core.compiled import _kernel
from aflite_fast.core.layout import COL_BLOCK, block_bounds
from aflite_fast.core.reference_class import to_reference, uses_reference
from aflite_fast.runtime.threads import limit_blas_threads


def stack_weights(coef):
    """(B, D, C) float64 coefficients -> the float32 operand of the prediction GEMM,
    class-major (column ``c * B + j`` is output c of model j) so that the row pass after it
    runs over the models: (D, (C - 1) * B) in the reference-class form for C >= 2 classes
    (:mod:`aflite_fast.core.reference_class`; one output less to compute), (D, B) for one
    output (multiple-choice scorers)."""
    if coef.shape[2] >= 2:
        coef = to_reference(coef)
    B, D, C = coef.shape
    return np.ascontiguousarray(coef.transpose(1, 2, 0).reshape(D, C * B), dtype=np.float32)


def predict_accumulate(Xa, y, heldout, W, n_classes, seen, correct, prob_label,
                       proba_sum=None, n_threads=1, group=1):
    """Accumulate held-out predictions of the models in ``W`` (see ``stack_weights``).

    Logits are computed a tile at a time (``_kernel.predict_tile_bytes()`` of logits, at least
    ``_kernel.predict_min_tile_rows()`` rows, at most the rows given), so a call's scratch grows
    with its rows up to a fixed cap.  With ``group`` = K > 1
    (``n_classes`` 1) ``Xa`` holds K candidate rows per item and the other arrays are per item
    (``proba_sum`` (items, K)): an item's prediction is its highest-scoring candidate.  With
    ``n_classes`` >= 2, ``W`` holds n_classes - 1 outputs a model (the reference-class form
    :func:`stack_weights` gives)."""
    if proba_sum is None:
        proba_sum = np.empty((0, n_classes * group), dtype=np.float64)
    with limit_blas_threads():
        _kernel.predict_accumulate(Xa, y, heldout, W, block_bounds(Xa.shape[1], COL_BLOCK),
                                   n_classes, seen, correct, prob_label, proba_sum, n_threads, 0, group,
                                   int(uses_reference(n_classes, group)))


def predict_from_logits(Z, y, heldout, n_classes, seen, correct, prob_label, proba_sum=None, n_threads=1):
    """:func:`predict_accumulate` from the models' logits ``Z`` (n, (n_classes - 1) B) float32,
    class-major in the reference-class form (column k B + j: output k of model j), for
    ``n_classes`` >= 2 classes: the counts :func:`predict_accumulate` adds from the same logits."""
    if proba_sum is None:
        proba_sum = np.empty((0, n_classes), dtype=np.float64)
    _kernel.predict_logits(Z, y, heldout, n_classes, seen, correct, prob_label, proba_sum, n_threads, 1)


def predict_proba(Xa, coef, n_threads=1, group=1):
    """Probabilities of one model (coef of shape (D, C)) on augmented rows, float64 (n, C);
    with ``group`` = K > 1, of each item's K candidates (n / K, K)."""
    n = Xa.shape[0] // group
    C = coef.shape[-1]
    W = stack_weights(coef.reshape(1, *coef.shape))
    out = np.zeros((n, C * group), dtype=np.float64)
    predict_accumulate(Xa, np.full(n, -1, dtype=np.int32), np.ones((n, 1), dtype=np.uint8), W, C,
                       np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n), out, n_threads, group)
    return out
