"""A permutation null for AFLite's phases: how many rows reach tau when the labels carry nothing.

Held-out predictions of a row repeat across partitions (the same neighbours' labels drive
them), so even labels shuffled at random leave many rows at or above tau, and the paper's
stopping rule ("fewer than k rows reach tau") is passed or failed by chance.  The null scores
the same partitions again with the labels permuted:

a. Permutation (:func:`permuted_labels`): a permutation of the active rows' labels, so every
   class keeps its count.  With groups it respects the design: groups of the same size
   exchange their labels as wholes (then the labels are shuffled inside each group), so a
   group keeps its mix of labels (twins of one label, or of opposite labels, stay so); the
   rows of groups whose size no other active group has are permuted as single rows among
   themselves.  Labels and embeddings become independent, nothing else changes.  Why: the
   null must be a no-signal version of the same design.  Across rows, a permutation would
   give half of the pairs of twins with opposite labels (WinoGrande's) one label; held out
   together, such a pair is predicted right or wrong twice, where real twins are right once,
   so the null's counts would describe other data.  The partitions train on whole groups, so
   the permutation's unit is the group too.  Multiple choice: an item is a row and its label
   the right candidate's position; permuting positions across items (or across whole groups
   of items) keeps each position's count, and to a scorer shared over positions it is the
   same as drawing each item's right candidate at random within the item.
b. Seeds (:func:`null_seed`): permutation i of phase p draws from
   ``SeedSequence(entropy, spawn_key=(p, NULL_TAG, i))``.  Partition j of phase p draws from
   ``spawn_key=(p, j)``; a key of three words is never one of two, so the two streams never
   share a seed, and neither depends on the thread count.
c. Scoring: in every phase (not every few), after the observed models, the caller runs
   ``score_phase`` (the same engine and batched kernel) ``n_null`` times on the same training
   positions with the permuted codes and a cold start (zero coefficients), so the null models
   never touch the observed models' warm start, and counts the rows at or above tau exactly as
   it counts the observed ones (:func:`score_nulls`, :func:`null_counts`; the null models that
   did not train are refused as the observed ones are, :meth:`aflite_fast.filtering.problem.Problem.score`).
d. Summary (:func:`summarize`): mean and standard deviation (ddof=1, None for one
   permutation) of the counts over ``n_null`` permutations, and the stop rule's margin
   ``NULL_SIGMAS * sigma * sqrt(1 + 1/n_null)``, where sigma is the larger of the counts'
   standard deviation and ``sqrt(mean)`` (the spread of a count of independent rows, a
   Poisson floor; the only estimate with one permutation).  ``sqrt(1 + 1/n_null)``: under the
   null the observed count is itself one more draw, and the mean of n draws has its own
   error.  ``stop="null"`` stops in the first phase whose count does not exceed
   mean + margin (:func:`within_null`).  Measured spreads of the counts were 1.5 to 8 times
   the Poisson floor (docs/null.md), so the floor alone (``n_null=1``) lets chance pass more
   often; use ``n_null >= 3`` for the stop rule.
"""
from dataclasses import dataclass
from typing import List, Optional

import numpy as np

from aflite_fast.filtering.modes import NULL_MODES, STOP_RULES

#: Standard deviations of the null count the observed count must exceed (see :func:`summarize`).
NULL_SIGMAS = 3.0
#: Middle word of a permutation's spawn key, "null" in ASCII; partition keys have two words.
NULL_TAG = 0x6E756C6C


def null_seed(entropy, phase, index):
    """The SeedSequence of permutation ``index`` of ``phase`` (see the module docstring, b)."""
    return np.random.SeedSequence(entropy, spawn_key=(phase, NULL_TAG, index))


def permuted_labels(labels, rng, groups=None):
    """A permutation of ``labels`` (the active rows' label codes), respecting ``groups``.

    Parameters
    ----------
    labels : ndarray (n_active,) of int
    rng : numpy.random.Generator
    groups : ndarray (n_active,) of int, optional
        Group code of every active row: groups of one size exchange their labels whole (then
        shuffled inside each group); rows of groups of a size no other group has are permuted
        as rows among themselves (module docstring, a).

    Returns
    -------
    ndarray like ``labels``, with the same count of every label.
    """
    labels = np.asarray(labels)
    if groups is None:
        return rng.permutation(labels)
    _, group_of, sizes = np.unique(np.asarray(groups), return_inverse=True, return_counts=True)
    group_of = group_of.ravel()
    by_group = np.argsort(group_of, kind="stable")  # rows of group 0, group 1, ... in position order
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = labels.copy()
    size_values, n_of_size = np.unique(sizes, return_counts=True)
    lone = []
    for size, count in zip(size_values, n_of_size):
        members = np.flatnonzero(sizes == size)
        rows = by_group[starts[members][:, None] + np.arange(size)]  # (groups of this size, size)
        if count == 1:
            lone.append(rows.ravel())
            continue
        block = labels[rows][rng.permutation(count)]
        out[rows] = rng.permuted(block, axis=1)
    if lone:
        rows = np.concatenate(lone)
        out[rows] = rng.permutation(labels[rows])
    return out


def null_codes(codes, active, entropy, phase, index, groups=None):
    """Label codes of all rows with the active rows' codes permuted (permutation ``index`` of
    ``phase``); rows outside the active set keep theirs (the engine reads only active rows)."""
    out = np.array(codes, dtype=np.int32, copy=True)
    rng = np.random.default_rng(null_seed(entropy, phase, index))
    out[active] = permuted_labels(out[active], rng, groups)
    return out


@dataclass
class NullSummary:
    """Rows at or above tau under ``n_null`` permutations, and the stop rule's margin."""

    counts: List[int]
    mean: float
    std: Optional[float]
    margin: float

    def within(self, n_above_tau):
        """True when ``n_above_tau`` does not exceed the null count by more than the margin."""
        return n_above_tau <= self.mean + self.margin


def summarize(counts, sigmas=NULL_SIGMAS):
    """Mean, standard deviation (ddof=1; None for one count) and margin of the null counts.

    The margin is ``sigmas * max(std, sqrt(mean)) * sqrt(1 + 1/n)`` (``sqrt(mean)`` alone for
    one count); see the module docstring, d.
    """
    c = np.asarray(counts, dtype=np.float64)
    if c.size == 0:
        raise ValueError("summarize needs at least one null count")
    mean = float(c.mean())
    std = float(c.std(ddof=1)) if c.size > 1 else None
    sigma = max(std or 0.0, float(np.sqrt(mean)))
    margin = float(sigmas * sigma * np.sqrt(1.0 + 1.0 / c.size))
    return NullSummary(counts=[int(v) for v in counts], mean=mean, std=std, margin=margin)


def check_null_args(null, n_null, stop):
    """Validate ``null``, ``n_null`` and ``stop``; return n_null as an int (ValueError naming
    the argument)."""
    if null not in NULL_MODES:
        raise ValueError(f"null must be None or 'permutation', got {null!r}")
    if isinstance(n_null, bool) or not isinstance(n_null, (int, np.integer)) or n_null < 1:
        raise ValueError(f"n_null must be an integer >= 1, got {n_null!r}")
    if stop not in STOP_RULES:
        raise ValueError(f"stop must be one of {', '.join(map(repr, STOP_RULES))}, got {stop!r}")
    if stop in ("null", "both") and null is None:
        raise ValueError(f"stop={stop!r} needs null='permutation' (the null count it compares with)")
    return int(n_null)


def score_nulls(problem, active, train_pos, entropy, phase, n_null, groups=None, first=0):
    """Yield this phase's partitions scored under label permutations ``first``..``n_null - 1``
    (c): a cold-started, checked phase each (:meth:`aflite_fast.filtering.problem.Problem.score`).

    The consumer drops each result before asking for the next (the local backend's memory
    budget holds one phase at a time).
    """
    for i in range(first, n_null):
        res = problem.score(null_codes(problem.labels.codes, active, entropy, phase, i, groups), active,
                            train_pos, what="null model")
        yield res
        del res


def null_counts(problem, active, train_pos, entropy, phase, n_null, active_groups, remove, tau, removable=None,
                first=0, per_view=None):
    """Rows at or above tau under permutations ``first``..``n_null - 1`` of this phase, on its
    partitions, counted as the observed rows are, and the bytes the scorings sent between processes.
    With views (:mod:`aflite_fast.filtering.views`) the counts are the combined scores'; each
    view's own are appended to ``per_view[name]`` when it is given."""
    from aflite_fast.filtering.selection import phase_selection

    counts, moved = [], 0
    for res in score_nulls(problem, active, train_pos, entropy, phase, n_null, active_groups, first=first):
        counts.append(phase_selection(res, active_groups, remove, tau, 0, removable)[1])
        if per_view is not None:
            for name, view in getattr(res, "views", {}).items():
                per_view.setdefault(name, []).append(phase_selection(view, active_groups, remove, tau, 0,
                                                                     removable)[1])
        moved += problem.backend.bytes_moved(res)
        del res
    return counts, moved
