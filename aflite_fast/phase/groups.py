"""Groups of rows that must stay together: in a training set or held out, never split.

Rows that share content (WinoGrande twin sentences, NLI hypotheses of one premise,
near-duplicates) make each other look predictable when one is trained on and the other held
out.  Given a group id per row:

a. ``encode_groups`` checks the ids (one per row, no NaN, at least two groups) and maps them
   to codes 0..G-1 in order of first appearance, so results depend on which rows share a
   group, not on what the ids are.
b. Every partition draws whole groups for its training set
   (:func:`aflite_fast.phase.partitions.partition_train_positions`): groups in the order of their
   keys under the partition's own seed, taken until the set holds at least t rows, so it holds t to
   t + s - 1 rows (s: the size of the group that completed it).  ``check_group_train_size``
   makes sure that no draw can take every group: t <= (active rows) - (largest group).
c. Groups are those of the active rows of each phase: removed rows leave their groups.
d. ``select_groups`` is ``remove="group"``: a group goes as a whole when the mean score of
   its scored rows reaches tau.
"""
import numpy as np


def row_ids(values, n_rows, name):
    """``values`` as a 1-D array of one id per row (a column vector is flattened), or a
    ValueError naming ``name``: another shape or length, NaN/inf, a missing (None) id."""
    ids = np.asarray(values)
    if ids.ndim == 2 and 1 in ids.shape:
        ids = ids.ravel()
    if ids.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one {name[:-1]} id per row), got shape {ids.shape}")
    if ids.shape[0] != n_rows:
        raise ValueError(f"{name} has {ids.shape[0]} entries but X has {n_rows} rows")
    if ids.dtype.kind == "f" and not np.all(np.isfinite(ids)):
        raise ValueError(f"{name} contains NaN or inf (first at row {int(np.flatnonzero(~np.isfinite(ids))[0])})")
    if ids.dtype.kind == "O":
        bad = [i for i, v in enumerate(ids.tolist()) if v is None or v != v]
        if bad:
            raise ValueError(f"{name} contains a missing id (None or NaN, first at row {bad[0]})")
    return ids


def encode_groups(groups, n_rows):
    """Group ids of any sortable type -> int64 codes 0..G-1 (one per row), numbered in order
    of first appearance.

    Raises
    ------
    ValueError
        If ``groups`` is not 1-D, its length is not ``n_rows``, it holds NaN or None, its ids
        cannot be sorted, or it holds a single group.
    """
    g = row_ids(groups, n_rows, "groups")
    try:
        uniq, first, codes = np.unique(g, return_index=True, return_inverse=True)
    except TypeError as exc:
        raise ValueError(f"group ids must be sortable among themselves: {exc}") from exc
    if uniq.size < 2:
        raise ValueError("groups holds a single group: every partition would train on all rows or none; "
                         "give at least two groups")
    rank = np.empty(uniq.size, dtype=np.int64)
    rank[np.argsort(first)] = np.arange(uniq.size)
    return rank[codes.ravel()]


def check_group_train_size(active_groups, train_size):
    """Error text if a training set of ``train_size`` rows drawn as whole groups could take
    every active group (leaving nothing held out), else None.

    ``active_groups`` holds the group code of each active row.
    """
    sizes = np.bincount(active_groups)
    sizes = sizes[sizes > 0]
    n_active = active_groups.size
    if sizes.size < 2:
        return f"the {n_active} active rows form a single group; need at least two groups"
    largest = int(sizes.max())
    if train_size > n_active - largest:
        return (f"the largest of the {sizes.size} groups has {largest} of the {n_active} active rows, so a "
                f"training set of {train_size} rows drawn as whole groups could leave no row held out; "
                f"need train_size <= {n_active - largest} (or more, smaller groups)")
    return None


def partition_groups(groups, n_rows, train_size, is_eval=None):
    """Group codes for partitions of ``train_size`` rows over all ``n_rows`` rows (None without
    groups): :func:`encode_groups` then :func:`check_group_train_size` (over the rows that are
    not evaluation rows, ``is_eval``), as a ValueError."""
    if groups is None:
        return None
    codes = encode_groups(groups, n_rows)
    problem = check_group_train_size(codes if is_eval is None else codes[~is_eval], train_size)
    if problem:
        raise ValueError(f"groups: {problem}")
    return codes


def select_groups(scores, prob_label, seen, active_groups, tau, budget):
    """``remove="group"``: positions of the groups to remove, and how many rows were eligible.

    A group's score is the mean score of its rows held out this phase (groups with none are not
    removable), its tie-break the mean probability of the label over those predictions.  Groups
    whose score reaches ``tau`` are ranked by score, then tie-break, then first position, and
    taken whole in that order while their rows fit in ``budget`` (a group that does not fit is
    passed over for smaller ones below it).

    Returns
    -------
    selected : ndarray of int64
        Positions to remove: groups in rank order, each group's rows in position order.
    n_eligible : int
        Rows in the groups whose score reaches ``tau`` (the stopping rule counts these).
    """
    _, group_of = np.unique(active_groups, return_inverse=True)
    group_of = group_of.ravel()
    n_groups = int(group_of.max()) + 1
    scored = seen > 0
    n_scored = np.bincount(group_of, weights=scored, minlength=n_groups)
    score_sum = np.bincount(group_of, weights=np.where(scored, scores, 0.0), minlength=n_groups)
    prob_sum = np.bincount(group_of, weights=prob_label, minlength=n_groups)
    seen_sum = np.bincount(group_of, weights=seen, minlength=n_groups)
    size = np.bincount(group_of, minlength=n_groups)
    first = np.full(n_groups, group_of.size, dtype=np.int64)
    np.minimum.at(first, group_of, np.arange(group_of.size))
    with np.errstate(invalid="ignore", divide="ignore"):
        group_score = score_sum / n_scored
        group_prob = prob_sum / seen_sum
    eligible = np.flatnonzero((n_scored > 0) & (group_score >= tau))
    n_eligible = int(size[eligible].sum())
    order = eligible[np.lexsort((first[eligible], -group_prob[eligible], -group_score[eligible]))]
    taken, room = [], budget
    for g in order:
        if room == 0:
            break
        if size[g] <= room:
            taken.append(g)
            room -= size[g]
    if not taken:
        return np.empty(0, dtype=np.int64), n_eligible
    rank = np.full(n_groups, -1, dtype=np.int64)
    rank[np.asarray(taken)] = np.arange(len(taken))
    pos = np.flatnonzero(rank[group_of] >= 0)
    return pos[np.argsort(rank[group_of[pos]], kind="stable")].astype(np.int64), n_eligible
