"""What a curator decides around the loop: the chance probe and its stop, caps, quotas, seed ensembles.

a. The probe (:func:`probe`): a phase's own held-out predictions (``seen`` and ``correct`` of
   every active row, :class:`~aflite_fast.phase.scores.PhaseScores`) pooled per class give each
   class's held-out accuracy on the rows still active; their mean is the balanced accuracy of
   the phase's models, chance is 1 / (classes with a held-out prediction).  Nothing more is
   trained for it.
b. ``stop="chance"`` (:func:`chance_verdict`): a phase whose balanced accuracy is within
   ``margin`` of chance removes nothing and ends the run; one below chance by more than the
   margin also ends it and puts back the slice the phase before removed (a probe well below
   chance is a cue too: the removal overshot).
c. ``max_removed`` (:func:`removal_cap`): a count, or a fraction of the input's rows, that no
   stop rule may exceed; a phase's budget is cut to what is left of it.
d. Quotas, applied to a phase's ranking of the rows that reached tau (:func:`apply_quotas`):
   ``source_quota`` caps the share of each source's input rows that may be removed in all;
   ``class_quota="prior"`` then takes from each class as many rows as keep the active label
   counts at the input's distribution (largest remainders, so within a row per class), as
   many in all as the classes' eligible rows and the budget allow (:func:`class_quotas`).
e. Seed ensembles (:class:`SeedEnsemble`): the kept sets of several seeds, their pairwise
   Jaccard index, each row's removal frequency and the consensus keep (rows kept by at least
   half of the seeds).
"""
import numbers
from dataclasses import dataclass, field
from typing import List

import numpy as np

from aflite_fast.filtering.modes import CLASS_QUOTAS
from aflite_fast.phase.groups import row_ids

#: Default ``margin`` of ``stop="chance"``: balanced accuracy this close to chance is chance.
DEFAULT_MARGIN = 0.02


def check_curation_args(stop, margin, max_removed, class_quota, source_quota, sources, n_rows, remove):
    """Validate the curation keywords; return (margin, the cap as a row count or None, source codes
    or None).  One ValueError naming the argument."""
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not 0 <= margin < 1:
        raise ValueError(f"margin must be a number in [0, 1), got {margin!r}")
    cap = removal_cap(max_removed, n_rows)
    if class_quota not in CLASS_QUOTAS:
        raise ValueError(f"class_quota must be None or 'prior', got {class_quota!r}")
    if source_quota is not None:
        if isinstance(source_quota, bool) or not isinstance(source_quota, numbers.Real) or not 0 <= source_quota <= 1:
            raise ValueError(f"source_quota must be a fraction in [0, 1], got {source_quota!r}")
        if sources is None:
            raise ValueError("source_quota needs sources (a source id per row)")
    if remove == "group" and (class_quota is not None or source_quota is not None):
        raise ValueError("class_quota and source_quota apply to remove='row' only")
    codes = None if sources is None else encode_sources(sources, n_rows)
    return float(margin), cap, codes


def removal_cap(max_removed, n_rows):
    """``max_removed`` as a row count (None: no cap): an int >= 0 is a count, a float in (0, 1)
    a fraction of the ``n_rows`` input rows (rounded down)."""
    if max_removed is None:
        return None
    if isinstance(max_removed, bool) or not isinstance(max_removed, numbers.Real):
        raise ValueError(f"max_removed must be a row count or a fraction in (0, 1), got {max_removed!r}")
    if isinstance(max_removed, numbers.Integral):
        if max_removed < 0:
            raise ValueError(f"max_removed must be a row count >= 0 or a fraction in (0, 1), got {max_removed}")
        return int(max_removed)
    if not 0 < max_removed < 1:
        raise ValueError(f"max_removed must be a row count (an integer) or a fraction in (0, 1), got {max_removed!r}")
    return int(np.floor(max_removed * n_rows))


def encode_sources(sources, n_rows):
    """Source ids of any sortable type -> (codes 0..S-1 in sorted id order, the ids)."""
    s = row_ids(sources, n_rows, "sources")
    try:
        ids, codes = np.unique(s, return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"source ids must be sortable among themselves: {exc}") from exc
    return SourceCodes(codes=codes.ravel().astype(np.int64), ids=ids)


@dataclass
class SourceCodes:
    """Each row's source code and the ids they stand for."""

    codes: np.ndarray
    ids: np.ndarray

    @property
    def n_sources(self):
        return int(self.ids.size)

    def counts(self, rows=None):
        return np.bincount(self.codes if rows is None else self.codes[rows], minlength=self.n_sources)


def probe(seen, correct, codes, n_classes, margin):
    """The phase's models' held-out balanced accuracy on the active rows (module docstring, a).

    ``seen``, ``correct``: per active row; ``codes``: the active rows' label codes.  Returns a
    dict: ``balanced_accuracy``, ``chance``, ``margin`` and ``class_accuracy`` (None for a class
    with no held-out prediction)."""
    seen_c = np.bincount(codes, weights=seen, minlength=n_classes)
    correct_c = np.bincount(codes, weights=correct, minlength=n_classes)
    present = seen_c > 0
    acc = np.where(present, correct_c / np.maximum(seen_c, 1), np.nan)
    n_present = int(np.count_nonzero(present))
    return dict(balanced_accuracy=float(acc[present].mean()) if n_present else float("nan"),
                chance=1.0 / max(n_present, 1), margin=float(margin),
                class_accuracy=[None if not p else float(a) for p, a in zip(present, acc)])


def chance_verdict(record):
    """``stop="chance"`` on a probe (:func:`probe`): None (go on), ``"chance"`` (within the margin:
    stop) or ``"below"`` (below chance by more than the margin: stop and put the last slice back)."""
    gap = record["balanced_accuracy"] - record["chance"]
    if not np.isfinite(gap):
        return "chance"
    if gap < -record["margin"]:
        return "below"
    if gap <= record["margin"]:
        return "chance"
    return None


def _rank_within(keys, order):
    """For ``order`` (positions), each entry's rank among the earlier entries of the same key."""
    k = keys[order]
    by_key = np.argsort(k, kind="stable")
    sorted_keys = k[by_key]
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    run_start = np.repeat(starts, np.diff(np.r_[starts, k.size]))
    rank = np.empty(k.size, dtype=np.int64)
    rank[by_key] = np.arange(k.size) - run_start
    return rank


def largest_remainder(weights, total):
    """``total`` split in proportion to ``weights`` in integers (largest remainders first, then
    lower index)."""
    weights = np.asarray(weights, dtype=np.float64)
    exact = weights * total / weights.sum()
    out = np.floor(exact).astype(np.int64)
    short = int(total - out.sum())
    if short > 0:
        out[np.lexsort((np.arange(out.size), -(exact - out)))[:short]] += 1
    return out


def class_quotas(active_counts, eligible_counts, prior_counts, budget):
    """Rows to remove from each class: the most rows r <= ``budget`` such that the active counts
    less the quotas are the input's distribution (``prior_counts``) over the rows left
    (:func:`largest_remainder`), with no class asked for more than its eligible rows."""
    active_counts = np.asarray(active_counts, dtype=np.int64)
    eligible_counts = np.asarray(eligible_counts, dtype=np.int64)
    n_active = int(active_counts.sum())
    for r in range(int(min(budget, eligible_counts.sum())), 0, -1):
        quota = np.maximum(active_counts - largest_remainder(prior_counts, n_active - r), 0)
        if np.all(quota <= eligible_counts) and quota.sum() <= budget:
            return quota
    return np.zeros_like(active_counts)


def apply_quotas(order, budget, *, class_codes=None, prior_counts=None, active_class_counts=None,
                 source_codes=None, source_allowance=None):
    """Positions to remove from ``order`` (a phase's ranking of the removable rows that reached
    tau, best first), at most ``budget``: rows of a source whose allowance is used up are passed
    over, then each class gives at most its quota (:func:`class_quotas`); the ranking is kept."""
    order = np.asarray(order, dtype=np.int64)
    if source_codes is not None and order.size:
        order = order[_rank_within(source_codes, order) < source_allowance[source_codes[order]]]
    if class_codes is not None and order.size:
        n_classes = prior_counts.size
        eligible = np.bincount(class_codes[order], minlength=n_classes)
        quota = class_quotas(active_class_counts, eligible, prior_counts, budget)
        order = order[_rank_within(class_codes, order) < quota[class_codes[order]]]
    return order[:max(int(budget), 0)]


def jaccard(a, b):
    """|a & b| / |a | b| of two sets of row indices (1.0 for two empty sets)."""
    union = np.union1d(a, b).size
    return 1.0 if union == 0 else np.intersect1d(a, b, assume_unique=True).size / union


@dataclass
class SeedEnsemble:
    """The runs of several seeds on one input (``aflite(..., n_seeds=)``).

    Attributes
    ----------
    seeds : list of int
        The seed of each run: run i is ``aflite(..., random_state=seeds[i])``.
    runs : list of AFLiteResult
    jaccard : ndarray of shape (n_seeds, n_seeds)
        Pairwise Jaccard index of the kept sets (1 on the diagonal).
    removal_frequency : ndarray of shape (N,)
        Share of the runs that removed each row.
    consensus_keep : ndarray of int64
        Sorted rows kept by at least half of the runs.
    """

    seeds: List[int]
    runs: list = field(default_factory=list)
    jaccard: np.ndarray = None
    removal_frequency: np.ndarray = None
    consensus_keep: np.ndarray = None

    @classmethod
    def of(cls, seeds, runs, n_rows):
        n = len(runs)
        J = np.ones((n, n))
        for i in range(n):
            for j in range(i + 1, n):
                J[i, j] = J[j, i] = jaccard(runs[i].keep, runs[j].keep)
        removed = np.zeros(n_rows)
        for r in runs:
            removed[r.removed] += 1
        freq = removed / n
        return cls(seeds=[int(s) for s in seeds], runs=list(runs), jaccard=J, removal_frequency=freq,
                   consensus_keep=np.flatnonzero(1.0 - freq >= 0.5).astype(np.int64))

    @property
    def mean_jaccard(self):
        """Mean of the pairwise Jaccard indices (off the diagonal; 1.0 for one seed)."""
        n = self.jaccard.shape[0]
        return 1.0 if n < 2 else float(self.jaccard[np.triu_indices(n, 1)].mean())

    def as_dict(self):
        """What report.json and the dataset card say of the ensemble."""
        return dict(seeds=self.seeds, n_kept=[int(r.keep.size) for r in self.runs],
                    stop_reason=[r.stop_reason for r in self.runs], jaccard=self.jaccard.tolist(),
                    mean_jaccard=self.mean_jaccard, n_consensus_keep=int(self.consensus_keep.size))
