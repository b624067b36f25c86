"""One AFLite phase on all rows, without removal: scoring separate from deciding."""
from dataclasses import dataclass

import numpy as np

from . import engine
from ._solver_status import DataScale, check_trained, status_counts, warn_not_converged
from ._threads import effective_n_threads
from .algorithm import validate_settings
from .data import encode_labels, open_embeddings, scan_rows
from .kernel import SolverOptions
from .losses import resolve_loss


@dataclass
class PredictabilityResult:
    """Per-row results of :func:`predictability`.

    Attributes
    ----------
    scores : ndarray (N,) float64
        correct / seen; NaN for rows never held out.
    correct, seen : ndarray (N,) int32
        Correct held-out predictions and held-out predictions.
    prob_label : ndarray (N,) float64
        Mean held-out probability of the given label (NaN where seen == 0).
    n_iter : ndarray (n_partitions,) int32
        L-BFGS iterations of each partition's model.
    status : ndarray (n_partitions,) int32
        Solver status code of each partition's model (names: ``kernel.STATUS_NAMES``).
    """

    scores: np.ndarray
    correct: np.ndarray
    seen: np.ndarray
    prob_label: np.ndarray
    n_iter: np.ndarray
    status: np.ndarray = None

    @property
    def solver_status(self):
        """Models by solver status name, e.g. ``{"converged": 64, "max_iter": 0, ...}``."""
        return status_counts(self.status)


def predictability(X, y, *, n_partitions=64, train_size, C=1.0, loss="ce", loss_params=None,
                   max_memory=None, random_state=None, n_jobs=None, tol=1e-4, max_iter=1000):
    """Predictability score of every row from one phase of ``n_partitions`` random partitions.

    Parameters are those of :func:`aflite`.  The partitions are those of phase 0 of
    ``aflite(..., random_state=random_state)``, so the scores equal that run's first phase.

    Returns
    -------
    PredictabilityResult

    Raises
    ------
    ValueError
        As :func:`aflite`, including partition models that did not move from their start or
        did not converge on badly scaled X.

    Warns
    -----
    sklearn.exceptions.ConvergenceWarning
        When any partition's model stopped without converging.
    """
    X = open_embeddings(X)
    n_rows = X.shape[0]
    labels = encode_labels(y, n_rows)
    settings = validate_settings(n_rows, target_size=0, n_partitions=n_partitions,
                                 train_size=train_size, slice_size=1, tau=0.5, C=C)
    spec = resolve_loss(loss, loss_params, labels.n_classes)
    center = scan_rows(X).astype(np.float32)
    active = np.arange(n_rows, dtype=np.int64)
    t = settings.train_rows(n_rows)
    train_pos = engine.partition_train_positions(engine.seed_entropy(random_state), 0, n_rows, t,
                                                 settings.n_partitions)
    res = engine.score_phase(X, labels.codes, active, center, train_pos, n_classes=labels.n_classes,
                             C=settings.C, loss=spec, options=SolverOptions(tol=tol, max_iter=max_iter),
                             max_memory=max_memory, n_threads=effective_n_threads(n_jobs))
    check_trained(res.n_iter, res.status, DataScale(X, center), what="partition model")
    warn_not_converged(status_counts(res.status), what="partition model")
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_prob = np.where(res.seen > 0, res.prob_label / np.maximum(res.seen, 1), np.nan)
    return PredictabilityResult(scores=res.scores, correct=res.correct, seen=res.seen,
                                prob_label=mean_prob, n_iter=res.n_iter, status=res.status)
