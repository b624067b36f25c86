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
"""
from .algorithm import AFLiteResult, PhaseRecord, aflite
from .losses import LOSS_NAMES
from .scoring import PredictabilityResult, predictability
from .estimators import AFLite, RobustLogisticRegression

__version__ = "0.1.0"

__all__ = ["aflite", "AFLiteResult", "PhaseRecord", "predictability", "PredictabilityResult",
           "AFLite", "RobustLogisticRegression", "LOSS_NAMES", "__version__"]
