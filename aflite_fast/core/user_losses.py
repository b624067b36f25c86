"""User-defined per-row losses written in Python, compiled once with Numba, run by the kernel.

The compiled kernel (``csrc/afl_losses.h``) trains with any loss of the form ``L(p_y)`` (a
function of the label's softmax probability alone), because then the gradient w.r.t. the
logits is ``w(p_y) * (p - e_y)`` with ``w(p_y) = -p_y L'(p_y)``.  A user loss supplies both
in one C function::

    double f(double p_y, const double *params, double *w_out)   /* returns L, writes w */

:func:`user_loss` compiles a Python function with that signature through
``numba.cfunc("float64(float64, CPointer(float64), CPointer(float64))")`` *once*, where it is
defined (module level), keeps the compiled object alive and hands its address to the kernel,
which calls it for every (row, model) at native speed without the GIL.  No rebuild of the
extension is needed.

Examples
--------
Generalized cross-entropy (the built-in "gce") as a user loss::

    from aflite_fast import user_loss

    @user_loss(params={"q": 0.7})
    def my_gce(p_y, params, w_out):
        q = params[0]
        pq = p_y ** q
        w_out[0] = pq                  # w(p_y) = -p_y dL/dp_y
        return (1.0 - pq) / q          # L(p_y)

    RobustLogisticRegression(loss=my_gce, q=0.5).fit(X, y)
    aflite(X, y, target_size=..., train_size=..., loss=my_gce, loss_params={"q": 0.5})

``my_gce.check_weight()`` compares ``w`` with ``-p_y L'(p_y)`` by finite differences, which
catches the most likely mistake (a wrong or missing ``w_out[0]``).

Notes
-----
The function must be Numba ``nopython`` code without Python objects; it runs on many
threads at once, so it must not write anything but ``w_out[0]``.  It is compiled with
``error_model="numpy"`` (division by zero gives inf/nan rather than raising, since an
exception cannot leave a C callback); a non-finite loss makes the solver backtrack, and a
non-finite value at the starting point stops the model with status ``not_finite``.
"""
import ctypes
import math

import numpy as np

from aflite_fast.core.losses import _CODES, LossSpec

__all__ = ["UserLoss", "user_loss", "SIGNATURE"]

#: Numba signature of a user loss: ``L = f(p_y, params, w_out)``.
SIGNATURE = "float64(float64, CPointer(float64), CPointer(float64))"

_CTYPES_PROTO = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double,
                                 ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double))


def _compile(fn):
    """``numba.cfunc`` of ``fn`` with :data:`SIGNATURE` (or ``fn`` itself if already compiled)."""
    try:
        import numba
        from numba.core import sigutils
        from numba.core.ccallback import CFunc as _CFunc
    except ImportError as exc:  # pragma: no cover - numba is a hard dependency
        raise ImportError("user losses need numba (pip install numba)") from exc
    if isinstance(fn, _CFunc):
        args, ret = sigutils.normalize_signature(SIGNATURE)
        if tuple(fn._sig.args) != tuple(args) or fn._sig.return_type != ret:
            # a wrong signature would crash inside the kernel, so refuse it here
            raise TypeError(f"a user loss cfunc must have the signature {SIGNATURE}, got {fn._sig}")
        return fn
    if not callable(fn):
        raise TypeError(f"a user loss must be a Python function or a numba cfunc, got {fn!r}")
    return numba.cfunc(SIGNATURE, nopython=True, error_model="numpy")(fn)


class UserLoss:
    """A per-row loss ``L(p_y)`` compiled with Numba, usable wherever ``loss=`` is accepted.

    Parameters
    ----------
    fn : callable or numba CFunc
        ``fn(p_y, params, w_out) -> L``: returns the loss of a row whose label has softmax
        probability ``p_y`` and writes ``w_out[0] = -p_y * dL/dp_y``.  ``params`` is a
        pointer to the float64 parameters in the order of ``params`` below.  A Python
        function is compiled here, once; an existing ``numba.cfunc`` with :data:`SIGNATURE`
        is used as is.
    params : dict of str to float, optional
        Parameter names and default values, in the order the function reads them.  Values
        can be overridden per use (``loss_params={"q": 0.5}`` everywhere, or
        ``RobustLogisticRegression(loss=L, q=0.5)`` for a name it has as a parameter).
    name : str, optional
        Name reported in results (defaults to the function's name).

    Attributes
    ----------
    cfunc : numba CFunc
        The compiled function; kept referenced as long as this object lives.
    address : int
        Its address, passed to the kernel.
    """

    def __init__(self, fn, params=None, name=None):
        self.cfunc = _compile(fn)
        self.address = int(self.cfunc.address)
        self.param_names = tuple(params or {})
        self.defaults = {k: float(v) for k, v in (params or {}).items()}
        self.name = name or getattr(fn, "__name__", None) or getattr(
            getattr(fn, "_pyfunc", None), "__name__", "user")
        # a ctypes view for calling from Python (tests, check_weight); no recompilation
        self._ctypes = _CTYPES_PROTO(self.address)

    def params_array(self, loss_params=None):
        """float64 parameter vector for ``loss_params`` (names checked, defaults filled in)."""
        values = dict(self.defaults)
        for key, value in (loss_params or {}).items():
            if key not in values:
                raise ValueError(f"user loss {self.name!r} does not take parameter {key!r}; "
                                 f"it takes {', '.join(self.param_names) or 'none'}")
            values[key] = float(value)
        arr = np.array([values[k] for k in self.param_names], dtype=np.float64)
        return arr if arr.size else np.zeros(1)

    def as_loss_spec(self, loss_params=None):
        """The :class:`~aflite_fast.core.losses.LossSpec` the kernel runs (code 6, this address)."""
        return LossSpec(self.name, _CODES["user"], self.params_array(loss_params), self.address)

    def __call__(self, p_y, **loss_params):
        """Evaluate the compiled function from Python: returns ``(loss, w)``."""
        params = self.params_array(loss_params)
        w = ctypes.c_double(np.nan)
        loss = self._ctypes(float(p_y), params.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                            ctypes.byref(w))
        return loss, w.value

    def check_weight(self, p=None, rtol=1e-5, **loss_params):
        """Check ``w(p_y) == -p_y L'(p_y)`` by central finite differences.

        Parameters
        ----------
        p : array-like, optional
            Probabilities to check at (default 20 points in [0.02, 0.98]).
        rtol : float
            Tolerance relative to ``max(1, |w|)``.
        **loss_params
            Parameter values to check with.

        Returns
        -------
        max_error : float
            Largest relative discrepancy.

        Raises
        ------
        ValueError
            If the discrepancy exceeds ``rtol`` (the message names the worst ``p_y``).
        """
        p = np.linspace(0.02, 0.98, 20) if p is None else np.asarray(p, dtype=np.float64)
        worst, worst_p = 0.0, None
        for pv in p:
            h = 1e-6 * max(pv, 1e-3)
            lp, _ = self(pv + h, **loss_params)
            lm, _ = self(pv - h, **loss_params)
            _, w = self(pv, **loss_params)
            ref = -pv * (lp - lm) / (2 * h)
            err = abs(w - ref) / max(1.0, abs(ref))
            if not math.isfinite(err) or err > worst:
                worst, worst_p = (err if math.isfinite(err) else math.inf), pv
        if worst > rtol:
            raise ValueError(f"user loss {self.name!r}: w(p_y) differs from -p_y dL/dp_y by "
                             f"{worst:.3g} (relative) at p_y={worst_p:.4g}")
        return worst

    # The compiled function cannot be copied; sharing it is safe (it is immutable), so
    # sklearn.base.clone and copy.deepcopy return the same object.
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __repr__(self):
        params = ", ".join(f"{k}={v:g}" for k, v in self.defaults.items())
        return f"UserLoss({self.name}{', ' if params else ''}{params})"


def user_loss(fn=None, *, params=None, name=None):
    """Decorator form of :class:`UserLoss`: compile ``fn`` once where it is defined.

    Use as ``@user_loss`` or ``@user_loss(params={"q": 0.7})`` on a module-level function
    ``fn(p_y, params, w_out) -> L`` (see the module documentation).
    """
    if fn is None:
        return lambda f: UserLoss(f, params=params, name=name)
    return UserLoss(fn, params=params, name=name)
