"""Did the filter remove bias, or chance?  The kept set against random subsets of its size.

Users judge a filtered set as the AFLite paper does: a probe trained on the kept rows, against
the same probe on random subsets of the same size, on the filtering representation and on a
second representation the filter never saw.  :func:`evaluate_filter` measures that:

a. Probe: out-of-fold probabilities of the package's own kernel
   (:func:`aflite_fast.filtering.oof.oof_run`: multinomial logistic regression, stratified ``cv`` folds,
   grouped folds with ``groups``) on each set, its prediction the most probable class.
b. Figures of each set (all rows, the kept rows, ``n_random`` uniform random subsets of all rows
   of the kept set's size): balanced accuracy (mean recall over the set's classes), plain
   accuracy, the majority rate (share of the set's largest class: what always predicting it
   scores) and the class counts.  Balanced accuracy is the figure to read: a filter that
   shifts the class balance moves plain accuracy even where nothing was learned (trap 1 of
   docs/evaluation.md).
c. A drop is "clear" when ``random_balanced_accuracy - kept_balanced_accuracy`` is at least
   :data:`MIN_DROP` and at least :data:`DROP_SIGMAS` times the random subsets' standard deviation.
d. The verdict, in this order:

   - ``"chance"``: the run's chance check (``result``, :mod:`aflite_fast.filtering.chance`) found phase 0's
     rows at or above tau within what permuted labels give: what was removed is what chance
     removes, whatever the probes say.
   - ``"bias_removed"``: a clear drop on the filtering representation, confirmed either by a
     clear drop on the second representation (``features``) or, without ``features``, by the
     run's chance check finding phase 0 above chance.
   - ``"not_confirmed"``: a clear drop on the filtering representation that the second
     representation does not show.  Filtering against a representation leaves a set on which
     that representation scores below chance even for labels that carry nothing (trap 2), so
     this drop alone proves nothing.
   - ``"no_evidence"``: no clear drop on the filtering representation, or a drop with neither a
     chance check nor a second representation to confirm it.

   The in-sample drop alone never gives ``"bias_removed"``.
"""
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

#: A drop smaller than this (in balanced accuracy) is never "clear" (module docstring, c).
MIN_DROP = 0.02
#: ... nor one within this many standard deviations of the random subsets' balanced accuracy.
DROP_SIGMAS = 2.0
#: The verdicts :func:`evaluate_filter` gives.
VERDICTS = ("bias_removed", "not_confirmed", "no_evidence", "chance")
#: The probes' solver tolerance (:func:`aflite_fast.filtering.oof.oof_run`'s default): X and the
#: features must have a larger scale than this, as a run's X must have than its ``tol``.
PROBE_TOL = 1e-4


@dataclass
class RepresentationScores:
    """The probe's figures on one representation (module docstring, b).

    ``*_balanced_accuracy``, ``*_accuracy``, ``*_majority_rate`` for all rows (``full``), the
    kept rows (``kept``) and the random subsets (``random``: mean over ``n_random``, with
    ``random_*_std`` their standard deviation, ddof=1; 0 for one subset).  ``drop`` is
    ``random_balanced_accuracy - kept_balanced_accuracy`` and ``clear_drop`` whether it is clear
    (module docstring, c).
    """

    full_balanced_accuracy: float
    kept_balanced_accuracy: float
    random_balanced_accuracy: float
    random_balanced_accuracy_std: float
    full_accuracy: float
    kept_accuracy: float
    random_accuracy: float
    random_accuracy_std: float
    full_majority_rate: float
    kept_majority_rate: float
    random_majority_rate: float
    drop: float = 0.0
    clear_drop: bool = False

    def as_dict(self):
        return {k: (bool(v) if isinstance(v, (bool, np.bool_)) else float(v)) for k, v in self.__dict__.items()}


@dataclass
class EvaluationResult(RepresentationScores):
    """Result of :func:`evaluate_filter`: the filtering representation's figures
    (:class:`RepresentationScores`) and

    Attributes
    ----------
    n_rows, n_kept, n_random, cv : int
    classes : list
        The distinct labels.
    class_counts : dict
        ``{"full": [...], "kept": [...]}``, rows per class in the order of ``classes``.
    features : RepresentationScores or None
        The same figures on the second representation (``features=``).
    chance : dict or None
        The run's chance check (:meth:`aflite_fast.filtering.chance.ChanceCheck.as_dict`) when ``result``
        carried one.
    verdict : str
        One of :data:`VERDICTS` (module docstring, d); ``reason`` says why in one sentence.
    """

    n_rows: int = 0
    n_kept: int = 0
    n_random: int = 0
    cv: int = 5
    classes: list = field(default_factory=list)
    class_counts: dict = field(default_factory=dict)
    features: Optional[RepresentationScores] = None
    chance: Optional[dict] = None
    verdict: str = "no_evidence"
    reason: str = ""

    def summary(self):
        """Two or three plain sentences with the numbers."""
        text = (f"A probe on the {self.n_kept} kept rows of {self.n_rows} reaches balanced accuracy "
                f"{self.kept_balanced_accuracy:.3f}, against {self.random_balanced_accuracy:.3f} "
                f"(sd {self.random_balanced_accuracy_std:.3f}) on {self.n_random} random subsets of the same "
                f"size and {self.full_balanced_accuracy:.3f} on all rows (majority rate kept "
                f"{self.kept_majority_rate:.3f}, random {self.random_majority_rate:.3f}).")
        if self.features is not None:
            f = self.features
            text += (f" On the second representation: kept {f.kept_balanced_accuracy:.3f} against random "
                     f"{f.random_balanced_accuracy:.3f} (sd {f.random_balanced_accuracy_std:.3f}).")
        return text + f" Verdict: {self.verdict} ({self.reason})."

    def to_dict(self):
        """A JSON-ready dict (report.json's ``evaluation``)."""
        out = RepresentationScores.as_dict(RepresentationScores(
            **{k: getattr(self, k) for k in RepresentationScores.__dataclass_fields__}))
        out.update(n_rows=int(self.n_rows), n_kept=int(self.n_kept), n_random=int(self.n_random), cv=int(self.cv),
                   classes=[c.item() if hasattr(c, "item") else c for c in self.classes],
                   class_counts={k: [int(v) for v in vs] for k, vs in self.class_counts.items()},
                   features=None if self.features is None else self.features.as_dict(),
                   chance=self.chance, verdict=self.verdict, reason=self.reason, summary=self.summary())
        return out


def balanced_accuracy(y_true, y_pred):
    """Mean recall over the classes present in ``y_true`` (scikit-learn's ``balanced_accuracy_score``)."""
    classes, codes = np.unique(y_true, return_inverse=True)
    hit = np.asarray(y_pred) == np.asarray(y_true)
    return float(np.mean(np.bincount(codes.ravel(), weights=hit, minlength=classes.size)
                         / np.bincount(codes.ravel(), minlength=classes.size)))


def _probe(X, y, rows, groups, cv, seed, n_jobs, what, names):
    """(balanced accuracy, accuracy, majority rate) of the out-of-fold probe on ``rows`` (``y``:
    label codes, ``names`` the labels they stand for)."""
    from aflite_fast.filtering.oof import oof_run

    y_rows = y[rows]
    classes, counts = np.unique(y_rows, return_counts=True)
    if classes.size < 2:
        raise ValueError(f"the {what} holds a single class ({names[classes[0]]!r}): no probe can be trained on it")
    if counts.min() < cv:
        raise ValueError(f"the {what} holds only {counts.min()} row(s) of class {names[classes[np.argmin(counts)]]!r}, "
                         f"fewer than cv={cv} folds: lower cv")
    Xr = X[rows] if isinstance(X, np.ndarray) else np.asarray(X[rows])
    run = oof_run(Xr, y_rows, cv=cv, random_state=seed, n_jobs=n_jobs,
                  groups=None if groups is None else groups[rows])
    pred = run.classes[np.argmax(run.proba, axis=1)]
    return balanced_accuracy(y_rows, pred), float(np.mean(pred == y_rows)), float(counts.max() / rows.size)


def _scores(X, y, keep, subsets, groups, cv, seeds, n_jobs, names):
    full = np.arange(y.size, dtype=np.int64)
    f = _probe(X, y, full, groups, cv, seeds[0], n_jobs, "full set", names)
    k = _probe(X, y, keep, groups, cv, seeds[1], n_jobs, "kept set", names)
    r = np.array([_probe(X, y, rows, groups, cv, seeds[2 + i], n_jobs, "random subset", names)
                  for i, rows in enumerate(subsets)])
    std = r.std(axis=0, ddof=1) if len(subsets) > 1 else np.zeros(3)
    drop = float(r[:, 0].mean() - k[0])
    return RepresentationScores(
        full_balanced_accuracy=f[0], kept_balanced_accuracy=k[0], random_balanced_accuracy=float(r[:, 0].mean()),
        random_balanced_accuracy_std=float(std[0]), full_accuracy=f[1], kept_accuracy=k[1],
        random_accuracy=float(r[:, 1].mean()), random_accuracy_std=float(std[1]), full_majority_rate=f[2],
        kept_majority_rate=k[2], random_majority_rate=float(r[:, 2].mean()), drop=drop,
        clear_drop=bool(drop >= MIN_DROP and drop > DROP_SIGMAS * float(std[0])))


def _chance_of(result):
    """The chance check's dict from an AFLiteResult, a report.json dict, a ChanceCheck or None."""
    if result is None:
        return None
    if isinstance(result, dict):
        return result.get("chance_check")
    chance = getattr(result, "chance", result)
    return None if chance is None else (chance.as_dict() if hasattr(chance, "as_dict") else dict(chance))


def decide(scores, features, chance):
    """(verdict, reason) by the rule of the module docstring, d."""
    if chance is not None and chance.get("by_chance"):
        return "chance", (f"phase 0 found {chance['n_above_tau']} rows at or above tau, not more than the "
                          f"{chance['null_mean']:.0f} that permuted labels give by the null stop rule's margin")
    if not scores.clear_drop:
        return "no_evidence", f"the kept set's balanced accuracy is not clearly below random subsets' (drop {scores.drop:.3f})"
    if features is not None:
        if features.clear_drop:
            return "bias_removed", (f"balanced accuracy drops by {scores.drop:.3f} on the filtering representation "
                                    f"and by {features.drop:.3f} on the second one")
        return "not_confirmed", (f"balanced accuracy drops by {scores.drop:.3f} on the filtering representation "
                                 f"but only {features.drop:.3f} on the second one, which the filter never saw")
    if chance is not None:
        return "bias_removed", (f"balanced accuracy drops by {scores.drop:.3f}, and phase 0 found more rows at or "
                                "above tau than permuted labels give")
    return "no_evidence", (f"balanced accuracy drops by {scores.drop:.3f} on the filtering representation, which "
                           "alone proves nothing; give features= or the run's result (its chance check)")


def evaluate_filter(X, y, keep, *, result=None, features=None, cv=5, n_random=3, groups=None,
                    random_state=None, n_jobs=None):
    """Compare a filtered set with random subsets of its size: did the filter remove bias, or chance?

    Parameters
    ----------
    X : ndarray, numpy.memmap or path to a ``.npy``/``.npz`` file, shape (N, d)
        The representation the filter used (opened as :func:`aflite_fast.aflite` opens it).
    y : array-like of shape (N,)
        Labels.
    keep : array-like of int or bool, or None
        The kept rows: indices (``AFLiteResult.keep``) or a boolean mask of length N; None
        takes ``result.keep``.
    result : AFLiteResult, dict or ChanceCheck, optional
        The run that made ``keep`` (or its report.json as a dict): its chance check enters the
        verdict.
    features : ndarray, memmap or path, shape (N, d2), optional
        A second representation of the same rows that the filter never saw (e.g. bag of
        words when the filter used sentence vectors); evaluated the same way, in ``.features``.
    cv : int, default=5
        Folds of the out-of-fold probe (stratified; grouped with ``groups``).
    n_random : int, default=3
        Random subsets of the kept set's size (uniform over all rows).
    groups : array-like of shape (N,), optional
        Group ids: no group is split between a probe's training and held-out rows.
    random_state : None, int or numpy.random.Generator
        Seeds the random subsets and the folds.
    n_jobs : int, optional
        Threads (None: all cores); results do not depend on it.

    Returns
    -------
    EvaluationResult
        With ``verdict`` in ``"bias_removed"``, ``"not_confirmed"``, ``"no_evidence"``,
        ``"chance"``, decided by this rule (module docstring, d): ``"chance"`` when the run's
        chance check found phase 0 within what permuted labels give; ``"bias_removed"`` when the
        kept set's balanced accuracy is clearly below the random subsets' (by at least 0.02 and
        2 of their standard deviations) on X, confirmed by a clear drop on ``features`` or,
        without ``features``, by the chance check finding phase 0 above chance;
        ``"not_confirmed"`` when ``features`` shows no clear drop where X does; else
        ``"no_evidence"``.  Never the drop on X alone.

    Raises
    ------
    ValueError
        For inconsistent inputs (lengths, a ``keep`` out of range or repeated, ``features`` of
        another row count), a set holding a single class or fewer rows of a class than ``cv``,
        and the degenerate inputs of :mod:`aflite_fast.degenerate`.

    Examples
    --------
    >>> res = aflite(X, y, target_size=2000, train_size=0.5, random_state=0)      # doctest: +SKIP
    >>> ev = evaluate_filter(X, y, res.keep, result=res, features=X_bow)          # doctest: +SKIP
    >>> print(ev.summary())                                                       # doctest: +SKIP
    """
    from aflite_fast.filtering.problem import Problem
    from aflite_fast.phase.backends import LocalBackend
    from aflite_fast.phase.groups import encode_groups
    from aflite_fast.phase.partitions import seed_entropy

    backend = LocalBackend(n_jobs)
    problem = Problem.open(X, y, backend=backend, tol=PROBE_TOL, items=False)
    X, labels, n = problem.X, problem.labels, problem.n_rows
    if keep is None:
        if result is None or not hasattr(result, "keep"):
            raise ValueError("keep is None: pass the kept rows, or an AFLiteResult as result")
        keep = result.keep
    keep = np.asarray(keep)
    if keep.dtype == bool:
        if keep.shape != (n,):
            raise ValueError(f"a boolean keep must have one entry per row ({n}), got shape {keep.shape}")
        keep = np.flatnonzero(keep)
    elif keep.ndim != 1 or (keep.size and keep.dtype.kind not in "iu"):
        raise ValueError(f"keep must be row indices (1-d integers) or a boolean mask, got dtype {keep.dtype}")
    keep = np.sort(keep.astype(np.int64))
    if keep.size == 0 or keep[0] < 0 or keep[-1] >= n or np.any(np.diff(keep) == 0):
        raise ValueError(f"keep must hold distinct row indices in [0, {n}), at least one")
    if isinstance(cv, bool) or not isinstance(cv, (int, np.integer)) or cv < 2:
        raise ValueError(f"cv must be an integer >= 2, got {cv!r}")
    if isinstance(n_random, bool) or not isinstance(n_random, (int, np.integer)) or n_random < 1:
        raise ValueError(f"n_random must be an integer >= 1, got {n_random!r}")
    problem.scan()  # NaN/inf refused, and X with no variance or too small a scale for the probe
    F = None
    if features is not None:
        F, F_rows = backend.open(features, items=False)
        if F.shape[0] != n:
            raise ValueError(f"features has {F.shape[0]} rows, X has {n}: they must describe the same rows")
        backend.check_scale(F_rows, backend.scan(F_rows), PROBE_TOL)
    group_codes = None if groups is None else encode_groups(groups, n)
    ss = np.random.SeedSequence(seed_entropy(random_state))
    subset_seq, fold_seq = ss.spawn(2)
    subsets = [np.sort(np.random.default_rng(s).choice(n, keep.size, replace=False))
               for s in subset_seq.spawn(n_random)]
    seeds = [int(s.generate_state(1)[0]) for s in fold_seq.spawn(2 + n_random)]
    codes, names = labels.codes, labels.classes.tolist()
    scores = _scores(X, codes, keep, subsets, group_codes, cv, seeds, n_jobs, names)
    second = None if F is None else _scores(F, codes, keep, subsets, group_codes, cv, seeds, n_jobs, names)
    chance = _chance_of(result)
    verdict, reason = decide(scores, second, chance)
    return EvaluationResult(
        **scores.__dict__, n_rows=n, n_kept=int(keep.size), n_random=int(n_random), cv=int(cv),
        classes=list(labels.classes.tolist()),
        class_counts={"full": np.bincount(codes, minlength=labels.n_classes).tolist(),
                      "kept": np.bincount(codes[keep], minlength=labels.n_classes).tolist()},
        features=second, chance=chance, verdict=verdict, reason=reason)
