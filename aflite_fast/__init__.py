"""aflite_fast: fast AFLite (adversarial filtering of dataset biases) on a compiled kernel.

Main entry points
-----------------
aflite
    Filter the most predictable rows of (X, y); returns an :class:`AFLiteResult`.
predictability
    Score every row once (one AFLite phase without removal).
AFLite
    imbalanced-learn style estimator: ``AFLite(...).fit_resample(X, y)``.
RobustLogisticRegression
    scikit-learn classifier on the same kernel, with noise-robust losses.
oof_predict_proba
    Out-of-sample predicted probabilities (all folds in one kernel call).
self_confidence_issues, annealing_issues, audit
    Likely-mislabeled rows from out-of-sample probabilities.
evaluate_filter
    Did the filter remove bias, or chance?  The kept set against random subsets of its size.
"""
import os as _os
import sys as _sys
import types as _types

# The kernel opens a few short OpenMP regions per solver round.  With libgomp's default
# (active) waiting, a thread spins at every barrier; on a busy machine that spinning starves
# the thread it waits for, and two threads were measured 10-60x slower than one.  Passive
# waiting costs microseconds per region here.  It must be set before libgomp starts, i.e.
# before the compiled kernel is imported; a value the user set is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from aflite_fast._version import __version__  # noqa: E402

# Names are imported on first use (PEP 562), so ``import aflite_fast`` and the command line's
# ``--version``/``--help`` do not load the compiled kernel, NumPy or Numba.
_EXPORTS = {
    "aflite": "algorithm", "AFLiteResult": "algorithm", "PhaseRecord": "algorithm",
    "LOSS_NAMES": "_loss_names",
    "predictability": "scoring", "PredictabilityResult": "scoring",
    "AFLite": "estimators", "RobustLogisticRegression": "estimators",
    "oof_predict_proba": "oof",
    "AuditResult": "label_issues", "LabelIssueResult": "label_issues",
    "annealed_thresholds": "label_issues", "annealing_issues": "label_issues", "audit": "label_issues",
    "filter_label_issues": "label_issues", "self_confidence_issues": "label_issues",
    "UserLoss": "user_loss", "user_loss": "user_loss",
    "filter_dataset": "hf", "open_embeddings": "data",
    "evaluate_filter": "evaluation", "EvaluationResult": "evaluation",
    "ChanceWarning": "chance", "ChanceCheck": "chance",
}

__all__ = ["aflite", "AFLiteResult", "PhaseRecord", "predictability", "PredictabilityResult",
           "AFLite", "RobustLogisticRegression", "LOSS_NAMES", "oof_predict_proba",
           "self_confidence_issues", "annealing_issues", "annealed_thresholds", "filter_label_issues",
           "audit", "LabelIssueResult", "AuditResult", "UserLoss", "user_loss", "filter_dataset",
           "open_embeddings", "evaluate_filter", "EvaluationResult", "ChanceWarning", "ChanceCheck",
           "__version__"]


def __getattr__(name):
    import importlib

    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    else:
        # submodules as attributes (``aflite_fast.synthetic``), as after an eager import
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise  # the submodule exists but needs something missing: say what
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))


class _Package(_types.ModuleType):
    """The package module.  Importing the submodule ``aflite_fast.user_loss`` binds it as the
    package attribute ``user_loss``; the public name is the decorator of that module, as it
    was when this file imported everything eagerly."""

    def __setattr__(self, name, value):
        if (isinstance(value, _types.ModuleType) and name in _EXPORTS
                and value.__name__ == f"{__name__}.{name}"):
            value = getattr(value, name)
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
