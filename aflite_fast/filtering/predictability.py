"""One AFLite phase on all rows, without removal: scoring separate from deciding."""
from dataclasses import dataclass
from typing import Optional

import numpy as np

from aflite_fast.core.solver_status import status_counts, warn_not_converged
from aflite_fast.filtering.null import check_null_args, score_nulls
from aflite_fast.filtering.problem import Problem, validate_settings
from aflite_fast.phase.backends import LocalBackend
from aflite_fast.phase.groups import partition_groups
from aflite_fast.phase.partitions import seed_entropy


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
    null_scores : ndarray (n_null, N) float64 or None
        With ``null="permutation"``: the scores of the same partitions under each label
        permutation (NaN for rows never held out); count them at any tau.
    status : ndarray (n_partitions,) int32
        Solver status code of each partition's model (names: ``kernel.STATUS_NAMES``).
    """

    scores: np.ndarray
    correct: np.ndarray
    seen: np.ndarray
    prob_label: np.ndarray
    n_iter: np.ndarray
    null_scores: Optional[np.ndarray] = None
    status: np.ndarray = None

    @property
    def solver_status(self):
        """Models by solver status name, e.g. ``{"converged": 64, "max_iter": 0, ...}``."""
        return status_counts(self.status)


def predictability(X, y, *, n_partitions=64, train_size, C=1.0, loss="ce", loss_params=None,
                   max_memory=None, random_state=None, n_jobs=None, tol="auto", max_iter=1000, groups=None,
                   null=None, n_null=1, eval_rows=None, position_bias=False, column=None, progress=False):
    """Predictability score of every row from one phase of ``n_partitions`` random partitions.

    Parameters are those of :func:`aflite`.  The partitions are those of phase 0 of
    ``aflite(..., random_state=random_state, groups=groups)``, so the scores equal that run's
    first phase.  With ``groups`` every partition trains on whole groups.  With
    ``null="permutation"`` the same partitions are scored ``n_null`` more times with the
    labels permuted, the permutations of that run's phase 0 (``null_scores``; see
    :mod:`aflite_fast.filtering.null`).  With ``eval_rows`` (indices or a boolean mask) those rows are never
    drawn into a training set, so every model predicts them (``seen == n_partitions``), and
    ``train_size`` counts the other rows (see :mod:`aflite_fast.phase.evaluation_rows`).  A 3-D X (N, K, d)
    is multiple choice (``position_bias`` as in :func:`aflite`): scores are per item.
    ``progress=True`` shows a tqdm progress bar, as :func:`aflite` does (default False here):
    the rows validated, then the rows scored by the partitions (and by each permutation of
    ``null``).  Nothing else depends on it.

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
    problem = Problem.open(X, y, backend=LocalBackend(n_jobs), loss=loss, loss_params=loss_params, tol=tol,
                           position_bias=position_bias, column=column, eval_rows=eval_rows)
    n_rows, n_trainable = problem.n_rows, problem.n_trainable
    settings = validate_settings(n_trainable, n_partitions=n_partitions, train_size=train_size, C=C,
                                 n_eval=n_rows - n_trainable)
    n_null = check_null_args(null, n_null, "paper")
    problem.solver_arguments(C=settings.C, max_iter=max_iter, max_memory=max_memory)
    bar = _progress_bar(progress, problem.rows.shape[0] + n_rows * (1 + (n_null if null is not None else 0)))
    problem.scan(progress=bar)
    bar.set_description(f"predictability: scoring {settings.n_partitions} partitions")
    active = np.arange(n_rows, dtype=np.int64)
    t = settings.train_rows(n_trainable)
    group_codes = partition_groups(groups, n_rows, t, problem.is_eval)
    entropy = seed_entropy(random_state)
    train_pos = problem.train_positions(entropy, 0, active, t, settings.n_partitions, group_codes)
    res = problem.score(problem.labels.codes, active, train_pos)
    warn_not_converged(status_counts(res.status), what="partition model")
    bar.update(n_rows)
    null_scores = None
    if null is not None:
        bar.set_description("predictability: label permutations")
        null_scores = np.stack([_moved(bar, n_rows, null_res.scores) for null_res in score_nulls(
            problem, active, train_pos, entropy, 0, n_null, group_codes)])
    bar.close()  # (after an error, tqdm closes it when it is collected)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_prob = np.where(res.seen > 0, res.prob_label / np.maximum(res.seen, 1), np.nan)
    return PredictabilityResult(scores=res.scores, correct=res.correct, seen=res.seen, prob_label=mean_prob,
                                n_iter=res.n_iter, null_scores=null_scores, status=res.status)


def _progress_bar(progress, total):
    """A tqdm bar over ``total`` rows (hidden unless ``progress``), starting with the validation scan."""
    from tqdm.auto import tqdm

    return tqdm(total=total, disable=not progress, unit="row", desc="predictability: validating rows", leave=False)


def _moved(bar, n_rows, scores):
    """``scores``, after moving ``bar`` on by the ``n_rows`` they score."""
    bar.update(n_rows)
    return scores
