"""Registry of the losses the kernel trains with, shared by the API and the command line.

Every loss is a function of one row's logits ``z`` and label ``y``; ``p = softmax(z)``.

========== ====================================== ========================= =================
name       per-row loss                           logit gradient            parameters
========== ====================================== ========================= =================
ce         ``-log p_y``                           ``p - e_y``
gce        ``(1 - p_y**q) / q``                   ``p_y**q (p - e_y)``      q=0.7
gce_trunc  ``L_q(max(p_y, k))`` (flat below k)    as gce, 0 where p_y <= k  q=0.7, k=0.5
mae        ``2 - 2 p_y``                          ``2 p_y (p - e_y)``
sce        ``alpha CE - beta A (1 - p_y)``        ``(alpha - beta A p_y)``  alpha=0.1, beta=1,
                                                  ``(p - e_y)``             A=-4
forward    ``-log (T^T p)_y``                     ``p - pi`` (see below)    T (C x C)
========== ====================================== ========================= =================

References: GCE and truncated GCE, Zhang & Sabuncu (NeurIPS 2018); MAE, Ghosh et al. (AAAI
2017); SCE, Wang et al. (ICCV 2019); forward correction, Patrini et al. (CVPR 2017), with
``T[i, j] = P(noisy label j | true label i)`` and ``pi_c = T[c, y] p_c / (T^T p)_y``.

For the first five the gradient w.r.t. the logits is ``w(p_y) * (p - e_y)``; the compiled
kernel evaluates them with one loop (``csrc/afl_losses.h``).  A loss written in Python and
compiled with Numba plugs into the same loop: see :mod:`aflite_fast.core.user_losses`.

GCE, truncated GCE, MAE and SCE are not convex in the weights; the L-BFGS solver keeps only
curvature pairs with ``s^T y > 0`` and restarts from steepest descent when needed, and it
converges to a stationary point that depends on the starting point (zeros by default).

``gce_trunc`` has zero gradient at the uniform starting point (every ``p_y = 1/C <= k`` for
``k >= 1/C``), so trained from zeros it stays there.  Zhang & Sabuncu start pruning only after
training with plain ``L_q``; :class:`LossSpec` records that as ``warmup`` (a spec of plain
``gce`` with the same q): a caller starting from zeros trains with ``spec.warmup`` first and
then continues from that solution with ``spec`` (see :func:`needs_warmup`).
"""
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import numpy as np

from aflite_fast.core.loss_names import LOSS_CODES as _CODES
from aflite_fast.core.loss_names import LOSS_CODES as _LOSS_CODES
from aflite_fast.core.loss_names import LOSS_NAMES

_USER_CODE = _CODES["user"]


@dataclass(frozen=True)
class LossSpec:
    """A loss resolved for the kernel.

    Attributes
    ----------
    name : str
        Registry name (or the user loss's name).
    code : int
        Integer code of ``csrc/afl_losses.h``.
    params : ndarray of float64
        Parameters passed to the per-row function (at least one entry).
    address : int
        Address of the user function (code 6), else 0.
    warmup : LossSpec or None
        Loss to train with first when starting from zeros (``gce_trunc``), else None.
    """

    name: str
    code: int
    params: np.ndarray
    address: int = 0
    warmup: Optional["LossSpec"] = None


#: Parameters each loss takes and their defaults (None: no default, the caller must pass
#: it).  The one place that knows them: the functions below read the defaults here, and
#: :class:`aflite_fast.RobustLogisticRegression` has one constructor parameter per name.
LOSS_PARAMETERS = {
    "ce": {},
    "gce": {"q": 0.7},
    "gce_trunc": {"q": 0.7, "k": 0.5},
    "mae": {},
    "sce": {"alpha": 0.1, "beta": 1.0, "A": -4.0},
    "forward": {"T": None},
}
#: Every parameter name of a built-in loss, in a fixed order.
PARAMETER_NAMES = tuple(dict.fromkeys(name for p in LOSS_PARAMETERS.values() for name in p))


def _real(params, loss, name):
    """Pop parameter ``name`` of ``loss`` as a float (its default when absent)."""
    value = params.pop(name, LOSS_PARAMETERS[loss][name])
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{loss}: {name} must be a real number, got {value!r}")
    return float(value)


def _gce_params(params, n_classes, loss="gce"):
    q = _real(params, loss, "q")
    if not 0.0 < q <= 1.0:
        raise ValueError(f"{loss}: q must be in (0, 1], got {q}")
    return [q]


def _gce_trunc_params(params, n_classes):
    q = _gce_params(params, n_classes, "gce_trunc")[0]
    k = _real(params, "gce_trunc", "k")
    if not 0.0 <= k < 1.0:
        raise ValueError(f"gce_trunc: k must be in [0, 1), got {k}")
    return [q, k]


def _sce_params(params, n_classes):
    alpha, beta, A = (_real(params, "sce", name) for name in ("alpha", "beta", "A"))
    if not (alpha >= 0 and beta >= 0 and alpha + beta > 0 and A < 0 and np.isfinite([alpha, beta, A]).all()):
        raise ValueError(f"sce: need alpha >= 0, beta >= 0 (not both 0) and A < 0, got "
                         f"alpha={alpha}, beta={beta}, A={A}")
    return [alpha, beta, A]


def _forward_params(params, n_classes):
    if params.get("T") is None:
        raise ValueError("forward: pass the noise transition matrix T (C x C, rows sum to 1)")
    try:
        T = np.asarray(params.pop("T"), dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"forward: T must be a C x C matrix of numbers: {exc}") from exc
    if T.shape != (n_classes, n_classes):
        raise ValueError(f"forward: T must have shape {(n_classes, n_classes)}, got {T.shape}")
    empty = np.flatnonzero(T.sum(axis=0) <= 0) if np.all(np.isfinite(T)) and np.all(T >= 0) else []
    if len(empty):
        raise ValueError(f"forward: column(s) {empty.tolist()} of T are all zero, so those labels "
                         "could never be observed; T[i, j] is P(noisy label j | true label i)")
    check_transition(T)  # row-stochastic and invertible
    return list(T.ravel())


_PARAMS = {
    "ce": lambda params, n_classes: [],
    "gce": _gce_params,
    "gce_trunc": _gce_trunc_params,
    "mae": lambda params, n_classes: [],
    "sce": _sce_params,
    "forward": _forward_params,
}


def _check_spec(spec):
    if not isinstance(spec.code, (int, np.integer)) or not 0 <= spec.code <= _USER_CODE:
        raise ValueError(f"LossSpec {spec.name!r}: unknown loss code {spec.code!r}")
    params = np.asarray(spec.params)
    if params.dtype != np.float64 or params.ndim != 1 or params.size == 0 or not params.flags.c_contiguous:
        raise ValueError(f"LossSpec {spec.name!r}: params must be a non-empty 1-d C-contiguous "
                         "float64 array")
    if spec.code == _USER_CODE and not spec.address:
        raise ValueError(f"LossSpec {spec.name!r}: a user loss (code 6) needs the address of its "
                         "compiled function; build it with aflite_fast.core.user_losses.UserLoss")
    if spec.code != _USER_CODE and spec.address:
        raise ValueError(f"LossSpec {spec.name!r}: only user losses (code 6) take an address")
    return spec


def resolve_loss(loss="ce", loss_params=None, n_classes=2):
    """Turn ``loss`` and its parameters into a :class:`LossSpec`.

    Parameters
    ----------
    loss : str, LossSpec or object with ``as_loss_spec(loss_params)``
        A name from :data:`LOSS_NAMES`, an already resolved spec (``loss_params`` must then
        be empty), or a user loss (:class:`aflite_fast.core.user_losses.UserLoss`).
    loss_params : dict, optional
        Parameters of the loss, e.g. ``{"q": 0.7}``; unknown names are an error.
    n_classes : int
        Number of classes (checked against the shape of ``T`` for "forward").

    Returns
    -------
    LossSpec
    """
    if loss_params is not None and not isinstance(loss_params, Mapping):
        raise TypeError(f"loss_params must be a dict of parameter names to values, got {loss_params!r}")
    if isinstance(loss, LossSpec):
        if loss_params:
            raise ValueError(f"loss {loss.name!r} is already resolved; it takes no parameters "
                             f"(got {', '.join(sorted(loss_params))})")
        return _check_spec(loss)
    if hasattr(loss, "as_loss_spec"):  # user losses (aflite_fast.core.user_losses)
        return _check_spec(loss.as_loss_spec(dict(loss_params or {})))
    if not isinstance(loss, str) or loss not in _PARAMS:
        raise ValueError(f"unknown loss {loss!r}; choose one of {', '.join(LOSS_NAMES)} "
                         "or pass an aflite_fast.core.user_losses.UserLoss")
    params = dict(loss_params or {})
    values = _PARAMS[loss](params, n_classes)
    if params:
        raise ValueError(f"loss {loss!r} does not take parameter(s) {', '.join(sorted(params))}")
    arr = np.asarray(values, dtype=np.float64)
    warmup = None
    if loss == "gce_trunc":
        warmup = LossSpec("gce", _CODES["gce"], arr[:1].copy(), 0)
    return LossSpec(loss, _CODES[loss], arr if arr.size else np.zeros(1), 0, warmup)


def needs_warmup(spec):
    """True when ``spec`` must be warm-started (by training with ``spec.warmup``) from zeros."""
    return spec.warmup is not None


_LOSS_FORWARD = _LOSS_CODES["forward"]


#: Why multiple choice refuses the forward-corrected loss.
MC_FORWARD_MESSAGE = ("loss='forward' does not apply to multiple choice: a noise transition matrix relates "
                      "classes, and the candidates of an item are positions, not classes; use 'ce', 'gce', "
                      "'gce_trunc', 'mae', 'sce' or a user loss")


#: T is singular when its smallest singular value is at most this times its largest.
SINGULAR_RTOL = 1e-8


def check_transition(T):
    """Raise ValueError unless ``T`` (C x C, float64) is row-stochastic and invertible (c)."""
    T = np.asarray(T, dtype=np.float64)
    if not np.all(np.isfinite(T)) or np.any(T < 0) or not np.allclose(T.sum(axis=1), 1.0, atol=1e-6):
        sums = ", ".join(f"{s:.4g}" for s in T.sum(axis=1)[:6]) if np.all(np.isfinite(T)) else "not finite"
        raise ValueError("forward: T must be row-stochastic (finite, non-negative, each row summing to 1: "
                         f"T[i, j] = P(noisy label j | true label i)); its row sums are {sums}")
    s = np.linalg.svd(T, compute_uv=False)
    if s[-1] <= SINGULAR_RTOL * s[0]:
        rank = int(np.count_nonzero(s > SINGULAR_RTOL * s[0]))
        raise ValueError(f"forward: T is singular (rank {rank} of {T.shape[0]}): some true classes give the "
                         "same noisy-label distribution, so forward correction cannot tell them apart; "
                         "give an invertible T")
