"""Registry of the losses the kernel trains with, shared by the API and the command line.

For CE, GCE, truncated GCE, MAE and SCE the gradient w.r.t. the logits is
``w(p_y) * (p - e_y)``; the compiled kernel evaluates them with one loop
(``csrc/afl_losses.h``).  ``forward`` is cross-entropy of ``T^T p`` for a noise
transition matrix ``T`` (Patrini et al., 2017).
"""
from dataclasses import dataclass

import numpy as np

# codes match the enum in csrc/afl_losses.h
_CODES = {"ce": 0, "gce": 1, "gce_trunc": 2, "mae": 3, "sce": 4, "forward": 5, "user": 6}


@dataclass(frozen=True)
class LossSpec:
    """A loss resolved for the kernel: integer code, float64 parameters, function address."""

    name: str
    code: int
    params: np.ndarray
    address: int = 0


def _gce_params(params, n_classes):
    q = float(params.pop("q", 0.7))
    if not 0.0 < q <= 1.0:
        raise ValueError(f"gce: q must be in (0, 1], got {q}")
    return [q]


def _gce_trunc_params(params, n_classes):
    q = _gce_params(params, n_classes)[0]
    k = float(params.pop("k", 0.5))
    if not 0.0 <= k < 1.0:
        raise ValueError(f"gce_trunc: k must be in [0, 1), got {k}")
    return [q, k]


def _sce_params(params, n_classes):
    alpha = float(params.pop("alpha", 0.1))
    beta = float(params.pop("beta", 1.0))
    A = float(params.pop("A", -4.0))
    if alpha < 0 or beta < 0 or A >= 0:
        raise ValueError("sce: need alpha >= 0, beta >= 0 and A < 0")
    return [alpha, beta, A]


def _forward_params(params, n_classes):
    if "T" not in params:
        raise ValueError("forward: pass the noise transition matrix T (C x C, rows sum to 1)")
    T = np.asarray(params.pop("T"), dtype=np.float64)
    if T.shape != (n_classes, n_classes):
        raise ValueError(f"forward: T must have shape {(n_classes, n_classes)}, got {T.shape}")
    if np.any(T < 0) or not np.allclose(T.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError("forward: T must be non-negative with rows summing to 1")
    return list(T.ravel())


_PARAMS = {
    "ce": lambda params, n_classes: [],
    "gce": _gce_params,
    "gce_trunc": _gce_trunc_params,
    "mae": lambda params, n_classes: [],
    "sce": _sce_params,
    "forward": _forward_params,
}

#: Names accepted by ``loss=`` everywhere (API and command line).
LOSS_NAMES = tuple(_PARAMS)


def resolve_loss(loss="ce", loss_params=None, n_classes=2):
    """Turn ``loss`` (a name or a :class:`LossSpec`) and its parameters into a LossSpec."""
    if isinstance(loss, LossSpec):
        return loss
    if hasattr(loss, "as_loss_spec"):  # user losses (see aflite_fast.user_loss, issue 4)
        return loss.as_loss_spec(loss_params)
    if not isinstance(loss, str) or loss not in _PARAMS:
        raise ValueError(f"unknown loss {loss!r}; choose one of {', '.join(LOSS_NAMES)}")
    params = dict(loss_params or {})
    values = _PARAMS[loss](params, n_classes)
    if params:
        raise ValueError(f"loss {loss!r} does not take parameter(s) {', '.join(sorted(params))}")
    arr = np.asarray(values, dtype=np.float64)
    return LossSpec(loss, _CODES[loss], arr if arr.size else np.zeros(1), 0)
