"""Several views of the same rows, scored on the same partitions: ``aflite(..., views=)``.

A view is one representation of every row (an embedding, a bag of words of one text field, the
question alone, the answer options alone, ...).  With views, AFLite counts a row as predictable
from what any view (or the views on average) predicts:

a. Problems: every view is opened, scanned and checked as X is (one
   :class:`~aflite_fast.filtering.problem.Problem` per view, :func:`open_views`); they must hold
   the same rows (the same N) and be of the same kind (all classification, or all multiple
   choice with the same candidates), so the labels are encoded once for all.  With the local
   backend each view has its own backend, whose gathered rows it keeps from phase to phase.
b. Partitions: each phase draws its training positions once; every view's m models train on
   those same positions (:meth:`ViewSet.score`), so a row is held out by the same models'
   partitions in every view and ``seen`` is the same in all of them.
c. Scores: each view scores every held-out row as a run on that view alone would; the combined
   score of a row is the largest of its views' scores (``combine="max"``, the default: a row is
   predictable when any view predicts it) or their mean (``combine="mean"``).  The label's held-out
   probability, which orders equal scores, is combined the same way.  The loop selects, stops and
   counts the null and the chance check on the combined scores, and records each view's own
   (``history[p].views``, ``AFLiteResult.view_scores``, ``AFLiteResult.view_chance``).
d. One view: the combined score is the view's own, bit for bit: a run with one view gives the
   result of the same run on that view's X.
"""
import hashlib
from dataclasses import dataclass, field

import numpy as np

from aflite_fast.filtering.modes import COMBINE_RULES


def check_views(X, views, combine):
    """The views of a run as an ordered {name: X} dict (X itself, when also given, is the view
    ``"X"``, first), with ``combine`` checked; ValueError naming the problem."""
    if combine not in COMBINE_RULES:
        raise ValueError(f"combine must be one of {', '.join(map(repr, COMBINE_RULES))}, got {combine!r}")
    if not isinstance(views, dict) or not views:
        raise ValueError(f"views must be a non-empty dict {{name: X}}, got {type(views).__name__}"
                         + (" (empty)" if isinstance(views, dict) else ""))
    out = {}
    if X is not None:
        if "X" in views:
            raise ValueError("views has a view named 'X' and X is given too: X is the view 'X'; rename one")
        out["X"] = X
    for name, value in views.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"view names must be non-empty strings, got {name!r}")
        if value is None:
            raise ValueError(f"view {name!r} is None: give its rows (an array, a sparse matrix or a path)")
        out[name] = value
    return out


@dataclass
class ViewScores:
    """One phase's combined per-row results (what selection reads, as
    :class:`~aflite_fast.phase.scores.PhaseScores`), and each view's own in ``views``.

    ``scores`` is the combined score (NaN where a row was never held out), ``correct`` and
    ``prob_label`` the views' combined by the same rule; ``coef`` the list of the views' model
    weights (one array per view, or None where only their mean was formed); ``n_iter`` and
    ``status`` hold the models of every view, view after view.
    """

    seen: np.ndarray
    correct: np.ndarray
    prob_label: np.ndarray
    scores: np.ndarray
    coef: list
    n_iter: np.ndarray
    status: np.ndarray
    n_blocks: int
    views: dict = field(default_factory=dict)

    def mean_model(self):
        """The mean model of each view's phase (a list, in the views' order)."""
        return [res.mean_model() for res in self.views.values()]


def combine_scores(results, combine):
    """The combined :class:`ViewScores` of the views' PhaseScores ``results`` ({name: PhaseScores},
    scored on the same training positions), by ``combine`` (module docstring, c and d)."""
    names = list(results)
    first = results[names[0]]
    for name in names[1:]:  # the same partitions hold out the same rows in every view (b)
        if not np.array_equal(results[name].seen, first.seen):
            raise RuntimeError(f"views {names[0]!r} and {name!r} were not scored on the same partitions")
    if len(names) == 1:  # d: the view's own arrays, bit for bit
        correct, prob_label, scores = first.correct, first.prob_label, first.scores
    else:
        rule = np.max if combine == "max" else np.mean
        # the scores themselves are combined (max of correct / seen, or their mean), not recomputed
        # from combined counts, so that the combined score is exactly the rule applied to the views'
        correct, prob_label, scores = (rule([getattr(results[n], what) for n in names], axis=0)
                                       for what in ("correct", "prob_label", "scores"))
    return ViewScores(seen=first.seen, correct=correct, prob_label=prob_label, scores=scores,
                      coef=[results[n].coef for n in names],
                      n_iter=np.concatenate([np.asarray(results[n].n_iter).ravel() for n in names]),
                      status=np.concatenate([np.asarray(results[n].status).ravel() for n in names]),
                      n_blocks=int(sum(results[n].n_blocks for n in names)), views=results)


class _Backends:
    """The views' backends seen as one by the loop: bytes moved and failures summed (a backend
    shared by several views counted once)."""

    def __init__(self, names, backends):
        self.names = names
        self.by_view = dict(zip(names, backends))
        self.distinct = list({id(b): b for b in backends}.values())

    def bytes_moved(self, res):
        return int(sum(self.by_view[name].bytes_moved(r) for name, r in res.views.items()))

    def failures(self):
        total = {"workers_lost": 0, "rounds_repeated": 0}
        for backend in self.distinct:
            for key, value in backend.failures().items():
                total[key] += value
        return total


class _Watches:
    """The views' input watches checked together (:mod:`aflite_fast.io.watch`)."""

    def __init__(self, watches):
        self.watches = watches
        self.files = [f for w in watches for f in w.files]

    def check(self):
        for watch in self.watches:
            watch.check()


class ViewSet:
    """The problems of a run with views, seen by the loop as one problem (module docstring).

    Attributes
    ----------
    names : list of str
    problems : dict {name: Problem}
    combine : {"max", "mean"}
    """

    def __init__(self, problems, combine):
        self.problems = problems
        self.names = list(problems)
        self.combine = combine
        first = problems[self.names[0]]
        self.labels, self.is_eval, self.multiple_choice = first.labels, first.is_eval, first.multiple_choice
        self.loss = first.loss
        self.backend = _Backends(self.names, [p.backend for p in problems.values()])
        self.watch = _Watches([p.watch for p in problems.values()])

    @property
    def n_rows(self):
        return self.problems[self.names[0]].n_rows

    @property
    def n_trainable(self):
        return self.problems[self.names[0]].n_trainable

    @property
    def content_digest(self):
        """The view's own fingerprint with one view; with several, the SHA-256 of the views'
        names and fingerprints in order."""
        digests = [self.problems[n].content_digest for n in self.names]
        if len(digests) == 1 or any(d is None for d in digests):
            return digests[0] if len(digests) == 1 else None
        return hashlib.sha256("\n".join(f"{n}:{d}" for n, d in zip(self.names, digests)).encode()).hexdigest()

    def solver_arguments(self, **kwargs):
        """Every view's :meth:`Problem.solver_arguments`."""
        for p in self.problems.values():
            p.solver_arguments(**kwargs)

    def check_phase_memory(self, *args, **kwargs):
        """Every view's :meth:`Problem.check_phase_memory` (each view's backend holds its own rows)."""
        for p in self.problems.values():
            p.check_phase_memory(*args, **kwargs)

    def scan(self, **kwargs):
        """Every view's :meth:`Problem.scan`; returns self."""
        for name, p in self.problems.items():
            try:
                p.scan(**kwargs)
            except ValueError as exc:
                raise ValueError(f"view {name!r}: {exc}") from None
        return self

    def train_positions(self, *args, **kwargs):
        """The phase's training positions, drawn once for every view (b)."""
        return self.problems[self.names[0]].train_positions(*args, **kwargs)

    def score(self, codes, active, train_pos, *, warm_coef=None, what="partition model"):
        """Every view's checked phase on ``train_pos`` (``warm_coef``: None or one array per view),
        combined (:func:`combine_scores`)."""
        results = {}
        for i, name in enumerate(self.names):
            warm = None if warm_coef is None else warm_coef[i]
            shown = what if len(self.names) == 1 else f"{what} of view {name!r}"
            results[name] = self.problems[name].score(codes, active, train_pos, warm_coef=warm, what=shown)
        return combine_scores(results, self.combine)


def check_same_rows(problems):
    """Refuse views that do not hold the same rows of the same kind (module docstring, a)."""
    names = list(problems)
    first = problems[names[0]]
    for name in names[1:]:
        p = problems[name]
        if p.n_rows != first.n_rows:
            raise ValueError(f"views must hold the same rows: view {name!r} has {p.n_rows} rows, view "
                             f"{names[0]!r} has {first.n_rows}")
        if p.multiple_choice != first.multiple_choice or (
                p.multiple_choice and p.X.shape[1] != first.X.shape[1]):
            kind = lambda q: f"multiple choice with {q.X.shape[1]} candidates" if q.multiple_choice else "2-D rows"
            raise ValueError(f"views must be of one kind: view {name!r} is {kind(p)}, view {names[0]!r} is "
                             f"{kind(first)}")


def view_record(res, n_above_tau, bins):
    """What one view's scores of a phase say on their own: rows at or above tau (counted as the
    combined ones are), rows scored, mean iterations, solver status and the score histogram
    (``bins`` equal bins over [0, 1])."""
    from aflite_fast.core.solver_status import status_counts

    return dict(n_above_tau=int(n_above_tau), n_scored=int(np.count_nonzero(res.seen)),
                mean_iterations=float(np.mean(res.n_iter)), solver_status=status_counts(res.status),
                score_hist=np.histogram(res.scores[res.seen > 0], bins=bins, range=(0.0, 1.0))[0].tolist())


def _is_table_column(X):
    """True for a view given as ``(table path, column)``."""
    import os

    from aflite_fast.io.formats import is_table

    return (isinstance(X, tuple) and len(X) == 2 and isinstance(X[0], (str, os.PathLike))
            and isinstance(X[1], str) and is_table(X[0]))


def open_views(views, y, *, backend, client=None, n_jobs=None, columns=None, **open_kwargs):
    """One :class:`~aflite_fast.filtering.problem.Problem` per view (module docstring, a):
    ``{name: Problem}`` in the order of ``views``.  ``backend`` is the run's ``backend=``:
    ``"local"`` gives each view its own local backend, a backend object is shared by all;
    ``columns`` ({name: column}) the table columns of views given as paths (a view may also be
    ``(table path, column)``); ``open_kwargs`` go to :meth:`Problem.open`.  Errors name the view."""
    from aflite_fast.filtering.problem import Problem
    from aflite_fast.phase.backends import make_backend

    shared = None if isinstance(backend, str) and backend == "local" else make_backend(backend, client, n_jobs)
    problems = {}
    for name, X in views.items():
        view_backend = shared if shared is not None else make_backend("local", client, n_jobs)
        kwargs = dict(open_kwargs, column=(columns or {}).get(name))
        if _is_table_column(X):  # (table, column): the view is that column of the table
            X, kwargs["column"] = X
        try:
            problems[name] = Problem.open(X, y, backend=view_backend, **kwargs)
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"view {name!r}: {exc}") from None
    check_same_rows(problems)
    return problems
