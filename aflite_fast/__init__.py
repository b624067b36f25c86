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
"""
import os as _os

# The kernel opens a few short OpenMP regions per solver round.  With libgomp's default
# (active) waiting, a thread spins at every barrier; on a busy machine that spinning starves
# the thread it waits for, and two threads were measured 10-60x slower than one.  Passive
# waiting costs microseconds per region here.  It must be set before libgomp starts, i.e.
# before the compiled kernel is imported; a value the user set is kept.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from .algorithm import AFLiteResult, PhaseRecord, aflite
from .losses import LOSS_NAMES
from .scoring import PredictabilityResult, predictability
from .estimators import AFLite, RobustLogisticRegression
from .oof import oof_predict_proba
from .label_issues import (AuditResult, LabelIssueResult, annealed_thresholds, annealing_issues, audit,
                           filter_label_issues, self_confidence_issues)
from .user_loss import UserLoss, user_loss

__version__ = "0.1.0"

__all__ = ["aflite", "AFLiteResult", "PhaseRecord", "predictability", "PredictabilityResult",
           "AFLite", "RobustLogisticRegression", "LOSS_NAMES", "oof_predict_proba",
           "self_confidence_issues", "annealing_issues", "annealed_thresholds", "filter_label_issues",
           "audit", "LabelIssueResult", "AuditResult", "UserLoss", "user_loss", "__version__"]
