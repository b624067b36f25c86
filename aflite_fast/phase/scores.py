"""The per-row results of one phase, as every backend returns them."""
from dataclasses import dataclass, field

import numpy as np


@dataclass
class PhaseScores:
    """Per-row results of one phase, indexed by position in the active set.

    ``seconds`` holds wall time of training (``train``) and prediction (``predict``), of
    the reads of X inside each (``read_train``, ``read_predict``) and of building the
    solver's preconditioner inside training (``preconditioner``, its reads included); ``n_blocks`` and
    ``n_chunks`` count the blocks of partitions and the prediction chunks; ``n_eval`` the
    evaluations of objective and gradient of each partition's model (None where the backend
    does not report them).  ``coef`` holds the models (m, d + 1, C), or None where only their
    mean ``mean_coef`` was formed (:meth:`mean_model`; warm-started phases in the row space,
    whose models are not checked).
    """

    seen: np.ndarray
    correct: np.ndarray
    prob_label: np.ndarray
    coef: np.ndarray
    n_iter: np.ndarray
    status: np.ndarray
    n_blocks: int
    seconds: dict = field(default_factory=dict)
    n_chunks: int = 1
    n_eval: np.ndarray = None
    mean_coef: np.ndarray = None

    def mean_model(self):
        """The mean of the phase's models, (d + 1, C): ``mean_coef`` where the backend gave it
        (``coef`` may then be None: models trained in the row space after a run's first
        phase), else the mean of ``coef``."""
        return self.mean_coef if self.mean_coef is not None else self.coef.mean(axis=0)

    @property
    def scores(self):
        """correct / seen, NaN where a row was never held out."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.seen > 0, self.correct / np.maximum(self.seen, 1), np.nan)
