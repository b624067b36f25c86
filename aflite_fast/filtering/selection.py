"""Which rows a phase removes: highest score first among those at or above tau, ties ordered.

a. :func:`select_rows`: rows scored this phase with score >= tau, highest score first, ties by
   the mean held-out probability of the row's label (or a random key of the row standing in
   for it, :func:`tie_key`), then by position; at most the phase's budget.
b. :func:`phase_selection`: the same per row or per group (``remove="group"``:
   :func:`aflite_fast.phase.groups.select_groups`), optionally restricted to the positions that
   may be removed (``eval_only_score``).
"""
from dataclasses import dataclass

import numpy as np

from aflite_fast.phase.groups import select_groups
from aflite_fast.phase.partitions import key_seed, uniform_keys

#: First word of the spawn key of the random tie-break's keys, "tie" in ASCII.
TIE_TAG = 0x746965


def select_rows(scores, prob_label, seen, tau, budget):
    """Positions to remove: highest score first, ties by mean probability of the label (or the
    random key standing in for it, :func:`tie_key`), then by position; only rows scored this
    phase with score >= tau.  Returns (selected, n_eligible)."""
    eligible = np.flatnonzero((seen > 0) & (scores >= tau))
    if eligible.size == 0 or budget <= 0:
        return np.empty(0, dtype=np.int64), eligible.size
    n_eligible = eligible.size
    score = -scores[eligible]
    mean_prob = -(prob_label[eligible] / seen[eligible])
    if budget < n_eligible:
        # only the rows that can be among the first ``budget`` are ordered (a phase orders its
        # slice, not the hundreds of thousands of rows at or above tau): every row whose score
        # beats the budget-th's, and of the rows tied with it those whose mean probability
        # does not fall behind the one that fills the budget.  Ordering them sorts the same
        # first ``budget`` rows as ordering all would.
        last = score.min()  # the best score, often held by more rows than the budget
        if np.count_nonzero(score == last) < budget:
            # (a partial sort of a few distinct values is slow: asked only when needed)
            last = np.partition(score, budget - 1)[budget - 1]
        ahead = score < last
        tied = np.flatnonzero(score == last)
        room = budget - int(np.count_nonzero(ahead))
        if room < tied.size:
            cut = np.partition(mean_prob[tied], room - 1)[room - 1]
            if not np.isnan(cut):  # (NaN sorts last: then every tied row stays)
                tied = tied[mean_prob[tied] <= cut]
        ahead[tied] = True
        keep = np.flatnonzero(ahead)
        eligible, score, mean_prob = eligible[keep], score[keep], mean_prob[keep]
    order = np.lexsort((eligible, mean_prob, score))
    return eligible[order[:budget]], n_eligible


def tie_key(tie_break, entropy, phase, seen, row_ids=None):
    """What orders rows of equal score, as a summed "probability" (divided by ``seen`` where
    used): None for ``"label_prob"`` (the label's held-out probability itself); for ``"random"``
    a uniform key per row times ``seen``, so its mean is the key (a group's mean: a random mix
    of its rows' keys).  The key of a row is
    :func:`~aflite_fast.phase.partitions.uniform_keys` of its id (``row_ids``: its index in X;
    default its position) under ``key_seed(entropy, TIE_TAG, phase)``: it depends on the row, not
    on which other rows are still active."""
    if tie_break == "label_prob":
        return None
    ids = np.arange(seen.size, dtype=np.int64) if row_ids is None else row_ids
    return uniform_keys(key_seed(entropy, TIE_TAG, phase), ids) * seen


def phase_selection(res, active_groups, remove, tau, budget, removable=None, tie_key=None):
    """Positions to remove (at most ``budget`` rows) and the rows that could be removed, from
    one phase's :class:`~aflite_fast.phase.scores.PhaseScores`: per row or per group.  ``removable``
    (positions, sorted) restricts both to those positions (``eval_only_score``); ``tie_key``
    (:func:`tie_key`) stands in for the label's probability between equal scores."""
    if removable is not None:
        sub = _Subset(res.scores[removable], res.prob_label[removable], res.seen[removable])
        groups = None if active_groups is None else active_groups[removable]
        key = None if tie_key is None else tie_key[removable]
        chosen, n_eligible = phase_selection(sub, groups, remove, tau, budget, tie_key=key)
        return removable[chosen], n_eligible
    prob_label = res.prob_label if tie_key is None else tie_key
    if remove == "group":
        return select_groups(res.scores, prob_label, res.seen, active_groups, tau, budget)
    return select_rows(res.scores, prob_label, res.seen, tau, budget)


@dataclass
class _Subset:
    """The per-row results :func:`phase_selection` reads, for a subset of the positions."""

    scores: np.ndarray
    prob_label: np.ndarray
    seen: np.ndarray
