"""Filters for likely-mislabeled rows, from out-of-sample probabilities of the batched kernel.

AFLite (:func:`aflite_fast.aflite`) removes rows whose label is *too easy* to predict; the
filters here remove rows whose label is *hard to believe*: the held-out model puts little
probability on it, or confidently predicts another class.  See ``docs/label_issues.md``.

Design
A. Scoring is separate from deciding (as in cleanlab's ``rank`` vs ``filter``): each filter
   is a pure function of (pred_probs, labels) that returns a ranking and a boolean mask;
   the functions taking X run the kernel once through :func:`aflite_fast.filtering.oof.oof_run`, or
   reuse ``pred_probs=`` the caller already has.
B. Self-confidence (Northcutt et al., 2021, "Confident Learning", section on ranking):
   score_i = p(y_i | x_i) out of sample; low means suspicious.  Flag below ``threshold``
   (default 1 / n_classes) or the ``n_issues`` lowest.
C. Noisy label annealing (Wang et al., 2021, "Towards Zero-Label Language Learning", as
   summarised in ``seeds/data-generation-noisy-labels.txt``): a row is noisy when the
   predicted class differs from its label and its probability exceeds mu; mu starts at 0.9
   and is annealed towards 1 / n_classes.  Here the rule is applied once with a fixed mu
   (``threshold``); :func:`annealed_thresholds` gives the schedule.
D. :func:`audit` computes AFLite predictability (correct / seen over m random partitions)
   and both filters from one kernel run, so a dataset can be checked for both the too-easy
   and the mislabeled rows at the cost of one AFLite phase.
"""
from dataclasses import dataclass

import numpy as np

from aflite_fast.filtering.oof import oof_run
from aflite_fast.io.inputs import encode_labels


@dataclass
class LabelIssueResult:
    """Result of a label-issue filter.

    Attributes
    ----------
    issues : ndarray (N,) bool
        True where the row is flagged as likely mislabeled.
    ranking : ndarray (N,) int64
        Every row's index, most suspicious first.
    ranked_issues : ndarray (n_issues,) int64
        The flagged rows, most suspicious first (a prefix of ``ranking``).
    scores : ndarray (N,) float64
        The filter's per-row quality score, lower is more suspicious: p(label) for
        self-confidence; for annealing -p(predicted) on rows predicted as another class and
        p(label) elsewhere.
    pred_probs : ndarray (N, n_classes) float32
        Out-of-sample probabilities the filter used.
    classes : ndarray (n_classes,)
        Labels in the order of the columns of ``pred_probs``.
    method : str
    threshold : float
    """

    issues: np.ndarray
    ranking: np.ndarray
    ranked_issues: np.ndarray
    scores: np.ndarray
    pred_probs: np.ndarray
    classes: np.ndarray
    method: str
    threshold: float

    @property
    def keep(self):
        """Sorted indices of the rows not flagged (as ``AFLiteResult.keep``)."""
        return np.flatnonzero(~self.issues)

    @property
    def n_issues(self):
        return int(np.count_nonzero(self.issues))


@dataclass
class AuditResult:
    """Result of :func:`audit`: AFLite predictability and both label-issue filters from one run.

    Attributes
    ----------
    predictability : ndarray (N,) float64
        correct / seen over the partitions that held the row out (NaN if never held out).
    correct, seen : ndarray (N,) int32
    too_easy : ndarray (N,) bool
        predictability >= tau: the rows AFLite's first phase could remove.
    self_confidence : LabelIssueResult
    annealing : LabelIssueResult
    pred_probs : ndarray (N, n_classes) float32
    classes : ndarray
    n_iter : ndarray (n_models,) int32
    """

    predictability: np.ndarray
    correct: np.ndarray
    seen: np.ndarray
    too_easy: np.ndarray
    self_confidence: LabelIssueResult
    annealing: LabelIssueResult
    pred_probs: np.ndarray
    classes: np.ndarray
    n_iter: np.ndarray


def _check_probs(pred_probs, codes):
    P = np.asarray(pred_probs)
    if P.ndim != 2 or P.shape[0] != codes.shape[0]:
        raise ValueError(f"pred_probs must have shape (n_rows, n_classes) = ({codes.shape[0]}, C), got {P.shape}")
    if codes.size and codes.max() >= P.shape[1]:
        raise ValueError(f"labels have {codes.max() + 1} classes but pred_probs has {P.shape[1]} columns")
    if not np.all(np.isfinite(P)):
        raise ValueError("pred_probs contains NaN or inf (rows never held out?)")
    return P


def _check_fraction(name, value):
    if isinstance(value, bool) or not np.isscalar(value) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")
    return float(value)


def _result(scores, flagged, P, classes, method, threshold):
    n = scores.shape[0]
    ranking = np.lexsort((np.arange(n), scores)).astype(np.int64)  # ties by index: deterministic
    return LabelIssueResult(issues=flagged, ranking=ranking, ranked_issues=ranking[flagged[ranking]],
                            scores=scores, pred_probs=P, classes=classes, method=method,
                            threshold=float(threshold))


def self_confidence_issues(pred_probs, labels, *, threshold=None, n_issues=None, classes=None):
    """Flag rows whose out-of-sample probability of the given label is low.

    Parameters
    ----------
    pred_probs : ndarray (N, n_classes)
        Out-of-sample probabilities (e.g. from :func:`aflite_fast.oof_predict_proba`).
    labels : ndarray (N,) int
        Label codes 0..n_classes-1 (the columns of ``pred_probs``).
    threshold : float, optional
        Flag rows with p(label) < threshold; default ``1 / n_classes`` (the model gives the
        label less than chance probability).
    n_issues : int, optional
        Flag exactly the ``n_issues`` lowest rows instead of using a threshold.
    classes : ndarray, optional
        Stored in the result.

    Returns
    -------
    LabelIssueResult
    """
    codes = np.asarray(labels).astype(np.int64, copy=False)
    P = _check_probs(pred_probs, codes)
    n, C = P.shape
    scores = P[np.arange(n), codes].astype(np.float64)
    if n_issues is not None:
        if threshold is not None:
            raise ValueError("give threshold or n_issues, not both")
        if isinstance(n_issues, bool) or not isinstance(n_issues, (int, np.integer)) or not 0 <= n_issues <= n:
            raise ValueError(f"n_issues must be an integer in [0, {n}], got {n_issues!r}")
        flagged = np.zeros(n, dtype=bool)
        flagged[np.lexsort((np.arange(n), scores))[:int(n_issues)]] = True
        thr = float(np.nan)
    else:
        thr = 1.0 / C if threshold is None else _check_fraction("threshold", threshold)
        flagged = scores < thr
    return _result(scores, flagged, P, classes, "self_confidence", thr)


def annealed_thresholds(n_steps, n_classes, start=0.9):
    """The noisy-label-annealing schedule mu_t: ``start`` annealed linearly to 1 / n_classes."""
    if n_steps < 1:
        raise ValueError(f"n_steps must be >= 1, got {n_steps}")
    return np.linspace(float(start), 1.0 / n_classes, int(n_steps))


def annealing_issues(pred_probs, labels, *, threshold=0.9, classes=None):
    """Noisy-label-annealing rule: flag rows predicted as another class with probability > threshold.

    A row i is flagged when ``argmax_c p(c | x_i) != y_i`` and ``max_c p(c | x_i) > threshold``
    (Wang et al., 2021).  Rank: rows predicted as another class first, most confident first;
    then the rest by increasing p(label).

    Parameters
    ----------
    pred_probs : ndarray (N, n_classes)
    labels : ndarray (N,) int
        Label codes 0..n_classes-1.
    threshold : float, default=0.9
        mu; the annealing schedule lowers it towards 1 / n_classes (:func:`annealed_thresholds`).
    classes : ndarray, optional

    Returns
    -------
    LabelIssueResult
    """
    codes = np.asarray(labels).astype(np.int64, copy=False)
    P = _check_probs(pred_probs, codes)
    mu = _check_fraction("threshold", threshold)
    n = P.shape[0]
    pred = np.argmax(P, axis=1)
    p_pred = P[np.arange(n), pred].astype(np.float64)
    p_label = P[np.arange(n), codes].astype(np.float64)
    disagree = pred != codes
    # disagreeing rows get scores in [-1, -0] below every agreeing row's p(label) >= 0
    scores = np.where(disagree, -p_pred, p_label)
    flagged = disagree & (p_pred > mu)
    return _result(scores, flagged, P, classes, "annealing", mu)


def filter_label_issues(X, y, *, method="self_confidence", threshold=None, n_issues=None, pred_probs=None,
                      cv=5, C=1.0, loss="ce", loss_params=None, n_partitions=None, train_size=None,
                      max_memory=None, random_state=None, n_jobs=None, tol=1e-4, max_iter=1000):
    """Out-of-sample probabilities from the kernel, then one label-issue filter.

    Parameters
    ----------
    X : ndarray, numpy.memmap or path to ``.npy`` (N, d)
    y : array-like (N,)
        Labels of any sortable type.
    method : {"self_confidence", "annealing"}
    threshold : float, optional
        The filter's threshold (defaults: 1 / n_classes for self-confidence, 0.9 for annealing).
    n_issues : int, optional
        Self-confidence only: flag this many rows.
    pred_probs : ndarray (N, n_classes), optional
        Use these probabilities (columns in ``np.unique(y)`` order) instead of running the kernel.
    cv, C, loss, loss_params, n_partitions, train_size, max_memory, random_state, n_jobs, tol, max_iter
        As in :func:`aflite_fast.oof_predict_proba`.

    Returns
    -------
    LabelIssueResult
    """
    if method not in ("self_confidence", "annealing"):
        raise ValueError(f"method must be 'self_confidence' or 'annealing', got {method!r}")
    if pred_probs is None:
        run = oof_run(X, y, cv=cv, C=C, loss=loss, loss_params=loss_params, n_partitions=n_partitions,
                      train_size=train_size, max_memory=max_memory, random_state=random_state,
                      n_jobs=n_jobs, tol=tol, max_iter=max_iter)
        P, codes, classes = run.proba, run.codes, run.classes
    else:
        labels = encode_labels(y, None, min_per_class=1)
        P, codes, classes = pred_probs, labels.codes, labels.classes
    if method == "self_confidence":
        return self_confidence_issues(P, codes, threshold=threshold, n_issues=n_issues, classes=classes)
    if n_issues is not None:
        raise ValueError("n_issues applies to method='self_confidence' only")
    return annealing_issues(P, codes, threshold=0.9 if threshold is None else threshold, classes=classes)


def audit(X, y, *, n_partitions=64, train_size=0.5, tau=0.75, self_confidence_threshold=None,
          annealing_threshold=0.9, C=1.0, loss="ce", loss_params=None, max_memory=None,
          random_state=None, n_jobs=None, tol=1e-4, max_iter=1000):
    """AFLite predictability and both label-issue filters from one run of the kernel.

    Trains ``n_partitions`` models on random training sets (phase 0 of
    ``aflite(..., random_state=random_state)``, so ``predictability`` equals
    :func:`aflite_fast.predictability` for the same arguments) and from the same held-out
    predictions derives the too-easy rows (score >= tau) and the likely-mislabeled rows
    (self-confidence and annealing on the mean held-out probabilities).

    Parameters
    ----------
    X, y, n_partitions, train_size, C, loss, loss_params, max_memory, random_state, n_jobs, tol, max_iter
        As in :func:`aflite_fast.predictability`.
    tau : float, default=0.75
        Predictability threshold of ``too_easy``.
    self_confidence_threshold : float, optional
        Default 1 / n_classes.
    annealing_threshold : float, default=0.9

    Returns
    -------
    AuditResult
        Rows never held out (possible only with few partitions) have NaN probabilities and are
        never flagged.
    """
    tau = _check_fraction("tau", tau)
    run = oof_run(X, y, C=C, loss=loss, loss_params=loss_params, n_partitions=n_partitions,
                  train_size=train_size, max_memory=max_memory, random_state=random_state,
                  n_jobs=n_jobs, tol=tol, max_iter=max_iter)
    scored = run.seen > 0
    P = run.proba
    # rows never held out: score them as certain of their label so they rank last, flag none
    P_eval = P.copy()
    P_eval[~scored] = 0.0
    P_eval[np.flatnonzero(~scored), run.codes[~scored]] = 1.0
    sc = self_confidence_issues(P_eval, run.codes, threshold=self_confidence_threshold, classes=run.classes)
    an = annealing_issues(P_eval, run.codes, threshold=annealing_threshold, classes=run.classes)
    sc.pred_probs = an.pred_probs = P
    pred = run.scores
    return AuditResult(predictability=pred, correct=run.correct, seen=run.seen,
                       too_easy=scored & (np.nan_to_num(pred, nan=-1.0) >= tau), self_confidence=sc,
                       annealing=an, pred_probs=P, classes=run.classes, n_iter=run.n_iter)
