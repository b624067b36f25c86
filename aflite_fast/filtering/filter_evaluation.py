"""Did the filter remove bias, or chance?  The kept set against random subsets of its size.

Users judge a filtered set as the AFLite paper does: a probe trained on the kept rows, against
the same probe on random subsets of the same size, on the filtering representation and on a
second representation the filter never saw.  :func:`evaluate_filter` measures that:

a. Probe: out-of-fold predictions of the package's own kernel on each set, ``cv`` folds
   (grouped with ``groups``: no group split between a fold's training and held-out rows).
   Classification X (N, d): multinomial logistic regression
   (:func:`aflite_fast.filtering.oof.oof_run`, stratified folds), its prediction the most
   probable class.  Multiple-choice X (N, K, d): the filter's own model, a linear scorer of
   candidates shared over the K positions (:mod:`aflite_fast.phase.multiple_choice`), trained
   on each fold's items through the problem step (:meth:`aflite_fast.filtering.problem.Problem.score`,
   folds over items), its prediction the highest-scoring candidate; the "classes" are the
   positions of the right candidate.  ``features`` has the same shape as X but its own width.
b. Figures of each set (all rows, the kept rows, ``n_random`` uniform random subsets of all rows
   of the kept set's size): balanced accuracy (mean recall over the set's classes), plain
   accuracy, the majority rate (share of the set's largest class: what always predicting it
   scores) and the class counts.  Balanced accuracy is the figure to read: a filter that
   shifts the class balance moves plain accuracy even where nothing was learned (trap 1 of
   docs/evaluation.md).
c. A drop is "clear" when ``random_balanced_accuracy - kept_balanced_accuracy`` is at least
   :data:`MIN_DROP` and more than :data:`DROP_SIGMAS` times the random subsets' standard
   deviation (``n_random`` subsets, at least 5 by default, so that the deviation is measured).
d. The label-permuted control (:func:`control_drop`), run when ``result`` brings no chance check
   and the verdict depends on it: the labels permuted (within the design of ``groups``, as the
   null permutes them: :func:`aflite_fast.filtering.null.permuted_labels`), an AFLite run on X
   down to the kept set's size (:func:`control_keep`): a filter of the same size against X on
   labels that carry nothing.  How far such a filter pushes a probe below chance depends on
   its slices: measured on independent labels (8000 x 32, 5000 rows removed), runs in 12
   equal slices left X's probe at the random subsets' level (drops -0.013 to 0.003 over 6
   permutations) and runs in 64 slices 0.054 to 0.074 below it, while the paper's settings
   (slices of 400 rows, the last of 200) gave 0.054 to 0.066.  The control takes the small
   slices (:data:`CONTROL_PHASES`), the deep end of the effect, since the run's own slices are
   not known to it.  The probe then measures, with the
   permuted labels, that control set against the same random subsets, on the representation
   that confirms the verdict (``features``, else X).  The observed drop must exceed the
   control's by :data:`MIN_DROP` and by more than :data:`DROP_SIGMAS` times
   ``hypot(sd, sd_control)``, the random subsets' standard deviations of the two (the spread
   of a difference of two drops).  Filtering against X leaves a set on which
   X, and any representation that shares X's neighbourhoods (a bag of words and sentence
   vectors of the same text), scores below chance whatever the labels (trap 2); the control's
   drop is the size of that effect, and the observed drop must exceed it.
e. The verdict, in this order:

   - ``"chance"``: the run's chance check (``result``, :mod:`aflite_fast.filtering.chance`) found phase 0's
     rows at or above tau within what permuted labels give, or (without a chance check) the
     observed drop does not exceed the control's (d): what was removed is what chance
     removes, whatever the probes say.
   - ``"no_evidence"``: no clear drop on the filtering representation.
   - ``"not_confirmed"``: a clear drop on the filtering representation that the second
     representation (``features``) does not show.  Filtering against a representation leaves
     a set on which that representation scores below chance even for labels that carry
     nothing (trap 2), so this drop alone proves nothing.
   - ``"bias_removed"``: a clear drop on the filtering representation, a clear drop on the
     second one where it is given, and evidence that it is not chance: the run's chance check
     finding phase 0 above chance, or, without one, a drop that exceeds the control's (d).

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
#: Random subsets of the kept set's size, by default: enough for their standard deviation to mean something.
N_RANDOM = 5
#: Partitions and phases (equal slices) of the label-permuted control's run (module docstring, d).
CONTROL_PARTITIONS = 16
CONTROL_PHASES = 64
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
    control : dict or None
        The label-permuted control (module docstring, d) when it was run: ``representation``
        ("features" or "X"), ``n_partitions``, the control set's and the random subsets'
        balanced accuracy with the permuted labels (``kept_balanced_accuracy``,
        ``random_balanced_accuracy``, ``random_balanced_accuracy_std``), its ``drop``, the
        observed drop's ``excess`` over it, the ``margin`` the excess must pass and ``exceeds``.
    multiple_choice : bool
        X was (N, K, d): ``classes`` are the positions of the right candidate.
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
    control: Optional[dict] = None
    multiple_choice: bool = False
    verdict: str = "no_evidence"
    reason: str = ""

    def summary(self):
        """Two or three plain sentences with the numbers."""
        rows = "items" if self.multiple_choice else "rows"
        text = (f"A probe on the {self.n_kept} kept {rows} of {self.n_rows} reaches balanced accuracy "
                f"{self.kept_balanced_accuracy:.3f}, against {self.random_balanced_accuracy:.3f} "
                f"(sd {self.random_balanced_accuracy_std:.3f}) on {self.n_random} random subsets of the same "
                f"size and {self.full_balanced_accuracy:.3f} on all rows (majority rate kept "
                f"{self.kept_majority_rate:.3f}, random {self.random_majority_rate:.3f}).")
        if self.features is not None:
            f = self.features
            text += (f" On the second representation: kept {f.kept_balanced_accuracy:.3f} against random "
                     f"{f.random_balanced_accuracy:.3f} (sd {f.random_balanced_accuracy_std:.3f}).")
        if self.control is not None:
            c = self.control
            which = "second" if c["representation"] == "features" else "filtering"
            text += (f" With the labels permuted, a filter of the same size against the filtering representation "
                     f"drops balanced accuracy by {c['drop']:.3f} on the {which} representation.")
        return text + f" Verdict: {self.verdict} ({self.reason})."

    def to_dict(self):
        """A JSON-ready dict (report.json's ``evaluation``)."""
        out = RepresentationScores.as_dict(RepresentationScores(
            **{k: getattr(self, k) for k in RepresentationScores.__dataclass_fields__}))
        out.update(n_rows=int(self.n_rows), n_kept=int(self.n_kept), n_random=int(self.n_random), cv=int(self.cv),
                   classes=[c.item() if hasattr(c, "item") else c for c in self.classes],
                   class_counts={k: [int(v) for v in vs] for k, vs in self.class_counts.items()},
                   features=None if self.features is None else self.features.as_dict(),
                   chance=self.chance, control=self.control, multiple_choice=bool(self.multiple_choice),
                   verdict=self.verdict, reason=self.reason, summary=self.summary())
        return out


def balanced_accuracy(y_true, y_pred):
    """Mean recall over the classes present in ``y_true`` (scikit-learn's ``balanced_accuracy_score``)."""
    classes, codes = np.unique(y_true, return_inverse=True)
    hit = np.asarray(y_pred) == np.asarray(y_true)
    return float(np.mean(np.bincount(codes.ravel(), weights=hit, minlength=classes.size)
                         / np.bincount(codes.ravel(), minlength=classes.size)))


class _Representation:
    """One representation of the rows as the probe reads it: the opened X (classification) or
    a :class:`~aflite_fast.filtering.problem.Problem` of multiple-choice X (its rows scanned)."""

    def __init__(self, X, problem=None):
        self.X, self.problem = X, problem

    @property
    def multiple_choice(self):
        return self.problem is not None


def _hits(rep, y, rows, groups, cv, seed, n_jobs):
    """Whether the out-of-fold probe (module docstring, a) gets each of ``rows`` right."""
    if rep.multiple_choice:
        from aflite_fast.filtering.oof import make_folds
        from aflite_fast.phase.partitions import TRAIN_PAD

        # folds over items, not stratified: the scorer is the same at every position
        folds = make_folds(cv, np.zeros(rows.size, dtype=np.int64), seed,
                           groups=None if groups is None else groups[rows])
        train_pos = np.full((len(folds), max(tr.size for tr, _ in folds)), TRAIN_PAD, dtype=np.int64)
        for k, (train, _) in enumerate(folds):
            train_pos[k, :train.size] = train
        res = rep.problem.score(np.asarray(y, dtype=np.int32), rows, train_pos, what="probe model")
        return res.correct > 0
    from aflite_fast.filtering.oof import oof_run
    from aflite_fast.io.sparse import is_sparse

    X = rep.X
    Xr = X[rows] if isinstance(X, np.ndarray) or is_sparse(X) else np.asarray(X[rows])
    run = oof_run(Xr, y[rows], cv=cv, random_state=seed, n_jobs=n_jobs,
                  groups=None if groups is None else groups[rows])
    return run.classes[np.argmax(run.proba, axis=1)] == y[rows]


def _probe(rep, y, rows, groups, cv, seed, n_jobs, what, names):
    """(balanced accuracy, accuracy, majority rate) of the out-of-fold probe on ``rows`` (``y``:
    label codes, ``names`` the labels they stand for)."""
    y_rows = y[rows]
    classes, counts = np.unique(y_rows, return_counts=True)
    if rep.multiple_choice:
        if rows.size < cv:
            raise ValueError(f"the {what} holds only {rows.size} item(s), fewer than cv={cv} folds: lower cv")
    elif classes.size < 2:
        raise ValueError(f"the {what} holds a single class ({names[classes[0]]!r}): no probe can be trained on it")
    elif counts.min() < cv:
        raise ValueError(f"the {what} holds only {counts.min()} row(s) of class {names[classes[np.argmin(counts)]]!r}, "
                         f"fewer than cv={cv} folds: lower cv")
    hit = _hits(rep, y, rows, groups, cv, seed, n_jobs)
    codes = np.searchsorted(classes, y_rows)
    recall = np.bincount(codes, weights=hit, minlength=classes.size) / counts
    return float(np.mean(recall)), float(np.mean(hit)), float(counts.max() / rows.size)


def _random_figures(rep, y, subsets, groups, cv, seeds, n_jobs, names):
    """The probe's figures on each random subset, (n_random, 3)."""
    return np.array([_probe(rep, y, rows, groups, cv, seeds[i], n_jobs, "random subset", names)
                     for i, rows in enumerate(subsets)])


def _std(r):
    return r.std(axis=0, ddof=1) if len(r) > 1 else np.zeros(r.shape[1])


def _scores(rep, y, keep, subsets, groups, cv, seeds, n_jobs, names):
    full = np.arange(y.size, dtype=np.int64)
    f = _probe(rep, y, full, groups, cv, seeds[0], n_jobs, "full set", names)
    k = _probe(rep, y, keep, groups, cv, seeds[1], n_jobs, "kept set", names)
    r = _random_figures(rep, y, subsets, groups, cv, seeds[2:], n_jobs, names)
    std = _std(r)
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


def control_keep(X, codes, n_kept, *, groups=None, seed=0, n_jobs=None):
    """The rows an AFLite run down to ``n_kept`` rows keeps for the labels ``codes`` (module
    docstring, d): :data:`CONTROL_PARTITIONS` partitions, ``train_size`` 0.5, the removals in
    :data:`CONTROL_PHASES` equal slices, every row eligible (tau 0, so the run reaches
    ``n_kept`` whatever the labels), no chance check."""
    from aflite_fast.filtering.loop import aflite

    n = codes.size
    res = aflite(X, codes, target_size=n_kept, n_partitions=CONTROL_PARTITIONS, train_size=0.5,
                 slice_size=max(1, -(-(n - n_kept) // CONTROL_PHASES)), tau=0.0, groups=groups,
                 random_state=seed, n_jobs=n_jobs, progress=False, chance_check=False)
    return np.asarray(res.keep, dtype=np.int64)


def control_drop(rep_filter, rep_confirm, codes, keep, subsets, groups, cv, seed, n_jobs, names, observed):
    """The label-permuted control (module docstring, d): a dict of
    :attr:`EvaluationResult.control`; ``observed`` the :class:`RepresentationScores` of the
    representation that confirms (``rep_confirm``)."""
    from aflite_fast.filtering.null import permuted_labels

    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    perm_seq, phase_seq, fold_seq = ss.spawn(3)
    permuted = permuted_labels(codes, np.random.default_rng(perm_seq), groups).astype(np.int32)
    X = rep_filter.problem.X if rep_filter.multiple_choice else rep_filter.X
    kept = control_keep(X, permuted, keep.size, groups=groups, seed=int(phase_seq.generate_state(1)[0]),
                        n_jobs=n_jobs)
    seeds = [int(s.generate_state(1)[0]) for s in fold_seq.spawn(1 + len(subsets))]
    k = _probe(rep_confirm, permuted, kept, groups, cv, seeds[0], n_jobs, "control set", names)
    r = _random_figures(rep_confirm, permuted, subsets, groups, cv, seeds[1:], n_jobs, names)
    std = float(_std(r)[0])
    drop = float(r[:, 0].mean() - k[0])
    excess = observed.drop - drop
    # the spread of a difference of two drops, each measured against n_random subsets
    margin = max(MIN_DROP, DROP_SIGMAS * float(np.hypot(std, observed.random_balanced_accuracy_std)))
    return dict(representation="features" if rep_confirm is not rep_filter else "X",
                n_partitions=CONTROL_PARTITIONS, kept_balanced_accuracy=float(k[0]),
                random_balanced_accuracy=float(r[:, 0].mean()), random_balanced_accuracy_std=std, drop=drop,
                excess=float(excess), margin=float(margin), exceeds=bool(excess > margin))


def decide(scores, features, chance, control=None):
    """(verdict, reason) by the rule of the module docstring, e."""
    if chance is not None and chance.get("by_chance"):
        return "chance", (f"phase 0 found {chance['n_above_tau']} rows at or above tau, not more than the "
                          f"{chance['null_mean']:.0f} that permuted labels give by the null stop rule's margin")
    if not scores.clear_drop:
        return "no_evidence", f"the kept set's balanced accuracy is not clearly below random subsets' (drop {scores.drop:.3f})"
    if features is not None and not features.clear_drop:
        return "not_confirmed", (f"balanced accuracy drops by {scores.drop:.3f} on the filtering representation "
                                 f"but only {features.drop:.3f} on the second one, which the filter never saw")
    drops = (f"balanced accuracy drops by {scores.drop:.3f} on the filtering representation"
             + ("" if features is None else f" and by {features.drop:.3f} on the second one"))
    if chance is not None:
        return "bias_removed", f"{drops}, and phase 0 found more rows at or above tau than permuted labels give"
    if control is None:
        return "no_evidence", (f"{drops}, and nothing shows it is not chance: give the run's result (its chance "
                               "check)")
    which = "second" if control["representation"] == "features" else "filtering"
    if control["exceeds"]:
        return "bias_removed", (f"{drops}; with the labels permuted a filter of the same size drops the {which} "
                                f"representation by {control['drop']:.3f} only")
    return "chance", (f"{drops}, but with the labels permuted a filter of the same size drops the {which} "
                      f"representation by {control['drop']:.3f}: the excess {control['excess']:.3f} is within "
                      f"the margin {control['margin']:.3f}")


def evaluate_filter(X, y, keep, *, result=None, features=None, cv=5, n_random=N_RANDOM, groups=None,
                    random_state=None, n_jobs=None):
    """Compare a filtered set with random subsets of its size: did the filter remove bias, or chance?

    Parameters
    ----------
    X : ndarray, numpy.memmap or path to a ``.npy``/``.npz`` file, shape (N, d) or (N, K, d)
        The representation the filter used (opened as :func:`aflite_fast.aflite` opens it);
        (N, K, d) is multiple choice (``y`` the right candidate of each item), probed with the
        filter's linear candidate scorer.
    y : array-like of shape (N,)
        Labels (multiple choice: the right candidate's position, 0..K-1).
    keep : array-like of int or bool, or None
        The kept rows (items): indices (``AFLiteResult.keep``) or a boolean mask of length N;
        None takes ``result.keep``.
    result : AFLiteResult, dict or ChanceCheck, optional
        The run that made ``keep`` (or its report.json as a dict): its chance check enters the
        verdict.  Without a chance check, a label-permuted control takes its place (module
        docstring, d).
    features : ndarray, memmap or path, shape (N, d2) or (N, K, d2), optional
        A second representation of the same rows that the filter never saw (e.g. bag of
        words when the filter used sentence vectors; for multiple choice one vector per
        candidate); evaluated the same way, in ``.features``.
    cv : int, default=5
        Folds of the out-of-fold probe (stratified for classification; grouped with ``groups``).
    n_random : int, default=5
        Random subsets of the kept set's size (uniform over all rows); their standard
        deviation is what a drop must exceed.
    groups : array-like of shape (N,), optional
        Group ids: no group is split between a probe's training and held-out rows, and the
        control permutes labels within the groups' design
        (:func:`aflite_fast.filtering.null.permuted_labels`).
    random_state : None, int or numpy.random.Generator
        Seeds the random subsets, the folds and the control.
    n_jobs : int, optional
        Threads (None: all cores); results do not depend on it.

    Returns
    -------
    EvaluationResult
        With ``verdict`` in ``"bias_removed"``, ``"not_confirmed"``, ``"no_evidence"``,
        ``"chance"``, decided by this rule (module docstring, e): ``"chance"`` when the run's
        chance check found phase 0 within what permuted labels give, or, without a chance
        check, when the observed drop does not exceed a label-permuted control's;
        ``"no_evidence"`` without a clear drop on X (by at least 0.02 and more than 2 of the
        random subsets' standard deviations); ``"not_confirmed"`` when ``features`` shows no
        clear drop where X does; ``"bias_removed"`` when the drops are clear and the chance
        check or the control says they are not chance.  Never the drop on X alone.

    Raises
    ------
    ValueError
        For inconsistent inputs (lengths, a ``keep`` out of range or repeated, ``features`` of
        another row count or shape), a set holding a single class or fewer rows of a class than
        ``cv`` (multiple choice: fewer items than ``cv``), and the degenerate inputs of
        :mod:`aflite_fast.core.degenerate`.

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
    problem = Problem.open(X, y, backend=backend, tol=PROBE_TOL, items=True)
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
    rep = _Representation(X, _probe_problem(problem) if problem.multiple_choice else None)
    second = None
    if features is not None:
        second = _open_features(features, y, problem, backend)
    group_codes = None if groups is None else encode_groups(groups, n)
    ss = np.random.SeedSequence(seed_entropy(random_state))
    subset_seq, fold_seq, control_seq = ss.spawn(3)
    subsets = [np.sort(np.random.default_rng(s).choice(n, keep.size, replace=False))
               for s in subset_seq.spawn(n_random)]
    seeds = [int(s.generate_state(1)[0]) for s in fold_seq.spawn(2 + n_random)]
    codes, names = labels.codes, labels.classes.tolist()
    scores = _scores(rep, codes, keep, subsets, group_codes, cv, seeds, n_jobs, names)
    second_scores = None if second is None else _scores(second, codes, keep, subsets, group_codes, cv, seeds,
                                                        n_jobs, names)
    chance = _chance_of(result)
    control = None
    confirmed = second_scores is None or second_scores.clear_drop
    if chance is None and scores.clear_drop and confirmed:  # the verdict depends on the control
        confirm = rep if second is None else second
        control = control_drop(rep, confirm, codes, keep, subsets, group_codes, cv, control_seq, n_jobs, names,
                               scores if second is None else second_scores)
    verdict, reason = decide(scores, second_scores, chance, control)
    return EvaluationResult(
        **scores.__dict__, n_rows=n, n_kept=int(keep.size), n_random=int(n_random), cv=int(cv),
        classes=list(labels.classes.tolist()),
        class_counts={"full": np.bincount(codes, minlength=labels.n_classes).tolist(),
                      "kept": np.bincount(codes[keep], minlength=labels.n_classes).tolist()},
        features=second_scores, chance=chance, control=control, multiple_choice=problem.multiple_choice,
        verdict=verdict, reason=reason)


def _probe_problem(problem):
    """A scanned multiple-choice problem set up for the probe's models (C = 1, the default solver)."""
    problem.solver_arguments(C=1.0, max_iter=1000, max_memory=None)
    return problem


def _open_features(features, y, problem, backend):
    """The second representation, opened and checked against X: the same rows (items, and
    candidates per item for multiple choice)."""
    from aflite_fast.filtering.problem import Problem

    n = problem.n_rows
    if problem.multiple_choice:
        F, _ = backend.open(features, items=True)
        if F.ndim != 3 or F.shape[:2] != problem.X.shape[:2]:
            raise ValueError(f"features has shape {tuple(F.shape)}; for multiple-choice X of shape "
                             f"{tuple(problem.X.shape)} it must be (items, candidates, d2) = "
                             f"({problem.X.shape[0]}, {problem.X.shape[1]}, d2): the same items and candidates")
        F = Problem.open(F, y, backend=backend, tol=PROBE_TOL, items=True).scan()
        return _Representation(F.X, _probe_problem(F))
    F, F_rows = backend.open(features, items=False)
    if F.shape[0] != n:
        raise ValueError(f"features has {F.shape[0]} rows, X has {n}: they must describe the same rows")
    backend.check_scale(F_rows, backend.scan(F_rows), PROBE_TOL)
    return _Representation(F)
