"""What the solver did for each trained model, and what callers may report from it.

a. ``status_counts``: models by solver status (``kernel.STATUS_NAMES``: converged, max_iter,
   line_search, not_finite), every name present, for ``PhaseRecord.solver_status`` and
   report.json.
b. ``check_trained``: a model with no accepted L-BFGS step that did not converge is still its
   starting point (all zeros, or the warm start), not a trained model; its "predictions" are
   chance or someone else's.  Callers never report such a result: they raise ValueError,
   naming the likely cause from one statistic of X (its largest deviation from the column
   means, :class:`DataScale`: float32 rows scaled by 1e12 stop the line search at the first
   step, or after two or three).  On X that large any model that did not converge is refused
   the same way, since the scale explains its failure and its few steps prove nothing.
c. ``warn_not_converged``: a ConvergenceWarning when any model stopped at max_iter, in a failed
   line search or on a non-finite value.  It is scikit-learn's class
   (``sklearn.exceptions.ConvergenceWarning``), so the usual filters apply; scikit-learn is
   imported only when such a warning is due (``ConvergenceWarning`` here resolves to that class
   on first use), because importing it costs about a second and the filtering path needs
   nothing else from it.  ``NOT_CONVERGED_MESSAGE`` matches the warning's message, for callers
   that silence it without importing scikit-learn (``warnings.filterwarnings(message=...)``).
"""
import warnings

import numpy as np

from aflite_fast.core.solver import STATUS_NAMES
from aflite_fast.io.scale import DataScale

_CONVERGED = next(code for code, name in STATUS_NAMES.items() if name == "converged")


#: A regular expression matching the message of :func:`warn_not_converged`'s warning.
NOT_CONVERGED_MESSAGE = r"\d+ of \d+ .*\(s\) did not converge \("


__all__ = ["ConvergenceWarning", "NOT_CONVERGED_MESSAGE", "DataScale", "status_counts", "total_status", "unmoved", "check_trained",
           "warn_not_converged"]


def __getattr__(name):
    # PEP 562: ``ConvergenceWarning`` is scikit-learn's class, imported on first use
    if name == "ConvergenceWarning":
        from sklearn.exceptions import ConvergenceWarning

        return ConvergenceWarning
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def status_counts(status):
    """Number of models per status name, e.g. ``{"converged": 62, "max_iter": 2, ...}``."""
    codes = np.asarray(status)
    return {name: int(np.count_nonzero(codes == code)) for code, name in STATUS_NAMES.items()}


def total_status(counts):
    """Sum of several :func:`status_counts` dicts (e.g. of every phase); names missing from
    some (records of an older checkpoint) count as 0."""
    total = {}
    for one in counts:
        for name, count in one.items():
            total[name] = total.get(name, 0) + int(count)
    return total


def unmoved(n_iter, status):
    """True for each model that took no step and did not converge (still its starting point)."""
    return (np.asarray(n_iter) == 0) & (np.asarray(status) != _CONVERGED)


def check_trained(n_iter, status, scale=None, *, what="model"):
    """Raise ValueError when the models cannot be reported as trained.

    Two cases: (b) of the module docstring, a model still at its starting point; and a model
    that did not converge while X's values are too large for the float32 solver (``scale``
    beyond :data:`LARGE_VALUE`): the scale explains the failure and the models that did move
    are not to be trusted either.  Anything else that did not converge is only warned about
    (:func:`warn_not_converged`).

    Parameters
    ----------
    n_iter, status : array-like (n_models,)
        Accepted L-BFGS steps and ``kernel.STATUS_*`` code of each model.
    scale : DataScale, optional
        The training data, read (once) only when a model failed, to name the likely cause.
    what : str
        What a model is called in the message ("partition model", "model").
    """
    status = np.asarray(status)
    stuck = unmoved(n_iter, status)
    failed = status != _CONVERGED
    if not failed.any():
        return
    fix = ": standardize X's columns (or divide X by a constant) and retry"
    if stuck.any():
        message = (f"{int(stuck.sum())} of {stuck.size} {what}(s) did not move from their starting point "
                   f"({_detail(status[stuck])}): the solver found no step that lowers the loss, so "
                   "they are untrained and their predictions would mean nothing")
        if scale is not None and scale.too_large():
            message += f"; likely cause: values of X too large for the float32 solver ({scale.describe()}){fix}"
        elif scale is not None and scale.largest() is not None:
            message += (f"; X's scale looks ordinary (largest {scale.describe()}): check the loss "
                        "and its parameters, C, tol and max_iter")
        raise ValueError(message)
    if scale is not None and scale.too_large():
        raise ValueError(
            f"{int(failed.sum())} of {failed.size} {what}(s) did not converge ({_detail(status[failed])}) "
            f"on values of X too large for the float32 solver ({scale.describe()}), so none of the "
            f"models can be trusted{fix}")


def _detail(status):
    return ", ".join(f"{name}: {count}" for name, count in status_counts(status).items() if count)


def warn_not_converged(counts, *, what="model", stacklevel=3):
    """ConvergenceWarning if ``counts`` (from :func:`status_counts`) has unconverged models."""
    total = sum(counts.values())
    failed = {name: count for name, count in counts.items() if name != "converged" and count}
    if failed:
        from sklearn.exceptions import ConvergenceWarning

        detail = ", ".join(f"{name}: {count}" for name, count in failed.items())
        warnings.warn(
            f"{sum(failed.values())} of {total} {what}(s) did not converge ({detail}); their "
            "predictions are used as they are. Raise max_iter, or standardize X's columns",
            ConvergenceWarning, stacklevel=stacklevel)
