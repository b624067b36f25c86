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
    "aflite": "filtering.loop", "AFLiteResult": "filtering.loop", "PhaseRecord": "filtering.loop",
    "LOSS_NAMES": "core.loss_names",
    "predictability": "filtering.predictability", "PredictabilityResult": "filtering.predictability",
    "AFLite": "filtering.estimators", "RobustLogisticRegression": "filtering.estimators",
    "oof_predict_proba": "filtering.oof",
    "AuditResult": "filtering.label_issues", "LabelIssueResult": "filtering.label_issues",
    "annealed_thresholds": "filtering.label_issues", "annealing_issues": "filtering.label_issues",
    "audit": "filtering.label_issues", "filter_label_issues": "filtering.label_issues",
    "self_confidence_issues": "filtering.label_issues",
    "UserLoss": "core.user_losses", "user_loss": "core.user_losses",
    "filter_dataset": "filtering.hf_datasets", "open_embeddings": "io.inputs",
    "evaluate_filter": "filtering.filter_evaluation", "EvaluationResult": "filtering.filter_evaluation",
    "ChanceWarning": "filtering.chance", "ChanceCheck": "filtering.chance",
    "ClusterLost": "phase.failures",
}

# Module paths that earlier versions documented, and the modules that hold them now.  They
# keep importing (``from aflite_fast.synthetic import make_biased_circles``) through
# :class:`_ModuleAliases`, which loads the module only when such a path is imported.
_MODULE_ALIASES = {
    "synthetic": "experiments.synthetic_data",
    "multiple_choice": "phase.multiple_choice",
    "eval_rows": "phase.evaluation_rows",
    "distributed": "phase.dask_backend",
    "groups": "phase.groups",
    "losses": "core.losses",
    "degenerate": "core.degenerate",
    "oof": "filtering.oof",
    "label_issues": "filtering.label_issues",
    "evaluation": "filtering.filter_evaluation",
    "algorithm": "filtering.loop",
    "scoring": "filtering.predictability",
    "null": "filtering.null",
    "chance": "filtering.chance",
    "checkpoint": "filtering.checkpoint",
    "estimators": "filtering.estimators",
    "hf": "filtering.hf_datasets",
    "data": "io.inputs",
    "report": "cli._figure",
}

__all__ = ["aflite", "AFLiteResult", "PhaseRecord", "predictability", "PredictabilityResult",
           "AFLite", "RobustLogisticRegression", "LOSS_NAMES", "oof_predict_proba",
           "self_confidence_issues", "annealing_issues", "annealed_thresholds", "filter_label_issues",
           "audit", "LabelIssueResult", "AuditResult", "UserLoss", "user_loss", "filter_dataset",
           "open_embeddings", "evaluate_filter", "EvaluationResult", "ChanceWarning", "ChanceCheck",
           "ClusterLost", "__version__"]


def __getattr__(name):
    import importlib

    if name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    elif name in _MODULE_ALIASES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        # submodules as attributes (``aflite_fast.io``), as after an eager import
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


class _ModuleAliases:
    """Import hook: ``aflite_fast.<old path>`` gives the module that holds it now.

    The alias is the module object itself (``aflite_fast.synthetic is
    aflite_fast.experiments.synthetic_data``), so a name patched or read through either path is
    the same name.  The module's own ``__spec__`` is restored after the import machinery sets the
    alias's, so it still reports where it lives.
    """

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        prefix, _, name = fullname.rpartition(".")
        if prefix != __name__ or name not in _MODULE_ALIASES:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(fullname, cls, loader_state={})

    @staticmethod
    def create_module(spec):
        import importlib

        module = importlib.import_module(f"{__name__}.{_MODULE_ALIASES[spec.name.rpartition('.')[2]]}")
        spec.loader_state["spec"] = module.__spec__
        return module

    @staticmethod
    def exec_module(module):
        module.__spec__ = module.__spec__.loader_state["spec"]


_sys.meta_path.append(_ModuleAliases)
