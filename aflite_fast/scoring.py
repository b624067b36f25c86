"""One AFLite phase on all rows, without removal: scoring separate from deciding."""
from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import engine
from ._solver_status import DataScale, check_trained, status_counts, warn_not_converged
from .degenerate import check_moved, check_scale
from ._threads import effective_n_threads
from .algorithm import check_multiple_choice_loss, open_problem, score_nulls, validate_settings
from .data import scan_rows
from .eval_rows import eval_mask, train_positions
from .groups import partition_groups
from .kernel import SolverOptions
from .losses import resolve_loss
from .null import check_null_args


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
                   max_memory=None, random_state=None, n_jobs=None, tol=1e-4, max_iter=1000, groups=None,
                   null=None, n_null=1, eval_rows=None, position_bias=False, column=None, progress=False):
    """Predictability score of every row from one phase of ``n_partitions`` random partitions.

    Parameters are those of :func:`aflite`.  The partitions are those of phase 0 of
    ``aflite(..., random_state=random_state, groups=groups)``, so the scores equal that run's
    first phase.  With ``groups`` every partition trains on whole groups.  With
    ``null="permutation"`` the same partitions are scored ``n_null`` more times with the
    labels permuted, the permutations of that run's phase 0 (``null_scores``; see
    :mod:`aflite_fast.null`).  With ``eval_rows`` (indices or a boolean mask) those rows are never
    drawn into a training set, so every model predicts them (``seen == n_partitions``), and
    ``train_size`` counts the other rows (see :mod:`aflite_fast.eval_rows`).  A 3-D X (N, K, d)
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
    X, labels, X_rows, multiple_choice = open_problem(X, y, position_bias, column)
    n_rows = X.shape[0]
    is_eval = eval_mask(eval_rows, n_rows)
    n_trainable = n_rows if is_eval is None else n_rows - int(is_eval.sum())
    settings = validate_settings(n_trainable, target_size=0, n_partitions=n_partitions,
                                 train_size=train_size, slice_size=1, tau=0.5, C=C, n_eval=n_rows - n_trainable)
    n_null = check_null_args(null, n_null, "paper")
    spec = resolve_loss(loss, loss_params, labels.n_classes)
    check_multiple_choice_loss(spec, multiple_choice)
    bar = _progress_bar(progress, X_rows.shape[0] + n_rows * (1 + (n_null if null is not None else 0)))
    center = scan_rows(X_rows, progress=bar).astype(np.float32)
    check_scale(X_rows, center, tol)  # no variance, or too small a scale (aflite_fast.degenerate)
    bar.set_description(f"predictability: scoring {settings.n_partitions} partitions")
    active = np.arange(n_rows, dtype=np.int64)
    t = settings.train_rows(n_trainable)
    group_codes = partition_groups(groups, n_rows, t, is_eval)
    entropy = engine.seed_entropy(random_state)
    train_pos = train_positions(entropy, 0, active, is_eval, t, settings.n_partitions, groups=group_codes)
    solver = dict(n_classes=labels.n_classes, C=settings.C, loss=spec,
                  options=SolverOptions(tol=tol, max_iter=max_iter), max_memory=max_memory,
                  n_threads=effective_n_threads(n_jobs), **({"position_bias": bool(position_bias)}
                                                            if multiple_choice else {}))
    scale = DataScale(X_rows, center)  # read only if a model failed
    res = engine.score_phase(X, labels.codes, active, center, train_pos, **solver)
    check_trained(res.n_iter, res.status, scale, what="partition model")
    check_moved(res.coef, res.status, X=X, center=center, train_rows=lambda j: train_pos[j][train_pos[j] >= 0],
                tol=tol, what="partition model")
    warn_not_converged(status_counts(res.status), what="partition model")
    bar.update(n_rows)
    null_scores = None
    if null is not None:
        bar.set_description("predictability: label permutations")
        null_scores = np.stack([_moved(bar, n_rows, null_res.scores) for null_res in score_nulls(
            engine.score_phase, X, labels.codes, active, center, train_pos, entropy, 0, n_null, group_codes,
            solver, scale)])
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
