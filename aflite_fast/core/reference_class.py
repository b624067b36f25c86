"""The reference-class form in which the kernel trains and predicts softmax models.

A softmax over C classes with the same L2 term on every class's weights has its optimum where
the penalised rows of the class weights have zero mean over the classes: subtracting a row's
mean changes no probability and lowers the term.  There, with ``v_c = w_c - w_C`` for the first
C - 1 classes, ``sum_c w_c^2 = sum_c v_c^2 - (sum_c v_c)^2 / C`` per row, so the model of C - 1
outputs ``v`` with the last class's logit fixed at 0 and that L2 term (``_kernel``'s
``reference=1``) has the same optimum, reached with (C - 1) / C of the arithmetic in every pass
over the rows: half for two classes (it is then the binomial model scikit-learn fits), two
thirds for three.  Every loss of :mod:`aflite_fast.core.losses` is a function of the
probabilities, so of the logits' differences only, and takes the form as it is.

Callers keep C columns of weights: :func:`to_reference` and :func:`from_reference` convert at
the kernel's door.  The latter gives the last class's weights as zeros, not the zero-mean
weights (the same probabilities), so that a model handed back as a warm start is the same
outputs bit for bit; :func:`centered` gives the zero-mean weights of the symmetric optimum
(scikit-learn's ``coef_``).  Multiple-choice scorers (one output) are not affected.
"""
import numpy as np


def uses_reference(n_classes, group=1):
    """Whether models of ``n_classes`` outputs over items of ``group`` rows train in the
    reference-class form (classifiers of two or more classes)."""
    return group == 1 and n_classes >= 2


def to_reference(coef):
    """Symmetric coefficients (..., D, C) -> the reference-class outputs (..., D, C - 1),
    float64, C-contiguous: each class's weights minus the last class's."""
    coef = np.asarray(coef, dtype=np.float64)
    return np.ascontiguousarray(coef[..., :-1] - coef[..., -1:])


def from_reference(v, out=None):
    """Reference-class outputs (..., D, C - 1) -> coefficients (..., D, C), the last class's
    zero (into ``out`` when given); :func:`to_reference` gives ``v`` back exactly."""
    v = np.asarray(v, dtype=np.float64)
    shape = v.shape[:-1] + (v.shape[-1] + 1,)
    if out is None:
        out = np.empty(shape, dtype=np.float64)
    elif out.shape != shape:
        raise ValueError(f"out must have shape {shape}, got {out.shape}")
    out[..., :-1] = v
    out[..., -1] = 0.0
    return out


def centered(coef):
    """Coefficients (..., C) with every row's mean over the classes subtracted: the same
    probabilities, and the weights of the symmetric softmax's optimum (whose L2 term is
    smallest among them)."""
    coef = np.asarray(coef, dtype=np.float64)
    return coef - coef.mean(axis=-1, keepdims=True)
