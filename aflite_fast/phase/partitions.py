"""Each partition's training positions in a phase, drawn from its own seed.

Partition j of phase p draws from ``SeedSequence(entropy, spawn_key=(p, j))``, so nothing
depends on how partitions are blocked, on threads or on the backend.
"""
import numpy as np


def seed_entropy(random_state):
    """Entropy (an int) for every seed of a run, from None, an int, or a numpy Generator."""
    if random_state is None:
        return np.random.SeedSequence().entropy
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool) and random_state >= 0:
        return int(random_state)
    raise ValueError(f"random_state must be None, a non-negative int or a numpy Generator, got {random_state!r}")


#: Fill value of the training positions of a partition drawn as whole groups: each row of the
#: (m, t_max) array holds its partition's sorted positions, then this value up to t_max.
TRAIN_PAD = -1


def partition_train_positions(entropy, phase, n_active, train_size, n_partitions, groups=None):
    """Training positions (in the active set) of every partition of a phase.

    Partition j of phase p draws from ``SeedSequence(entropy, spawn_key=(p, j))``: a seed per
    partition, not per thread or block.  Without ``groups`` it draws ``train_size`` positions
    uniformly without replacement.  With ``groups`` it shuffles the groups present in the
    active set and takes them whole, in that order, until the training set holds at least
    ``train_size`` rows: so it holds from ``train_size`` to ``train_size + s - 1`` rows, s the
    size of the group that completed it, and no group is split between training and held out.

    Parameters
    ----------
    entropy : int
        Seed of the run (:func:`seed_entropy`).
    phase, n_active, train_size, n_partitions : int
    groups : ndarray (n_active,) of int, optional
        Group code of every active position: the draws depend on which positions share a code
        and on the codes' order (:func:`aflite_fast.phase.groups.encode_groups` numbers groups in
        order of first appearance, so ids that name the same groups give the same draws).  The caller
        ensures ``train_size <= n_active - (largest group)``, so every partition holds out rows
        (:func:`aflite_fast.phase.groups.check_group_train_size`).

    Returns
    -------
    ndarray of shape (n_partitions, t_max), int64
        Row j: partition j's sorted training positions.  Without groups t_max = train_size;
        with groups t_max is the largest training set and shorter rows end in
        :data:`TRAIN_PAD`.
    """
    if groups is not None:
        return _group_train_positions(entropy, phase, train_size, n_partitions, groups)
    out = np.empty((n_partitions, train_size), dtype=np.int64)
    for j in range(n_partitions):
        rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(phase, j)))
        out[j] = np.sort(rng.choice(n_active, size=train_size, replace=False))
    return out


def _group_train_positions(entropy, phase, train_size, n_partitions, groups):
    _, group_of, sizes = np.unique(np.asarray(groups), return_inverse=True, return_counts=True)
    group_of = group_of.ravel()
    n_groups = sizes.size
    picks = []
    for j in range(n_partitions):
        rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(phase, j)))
        order = rng.permutation(n_groups)
        # the shortest prefix of the shuffled groups with at least train_size rows
        n_taken = int(np.searchsorted(np.cumsum(sizes[order]), train_size)) + 1
        if n_taken >= n_groups:
            raise ValueError(f"groups: a training set of {train_size} rows drawn as whole groups takes all "
                             f"{n_groups} groups and leaves no row held out; lower train_size")
        taken = np.zeros(n_groups, dtype=bool)
        taken[order[:n_taken]] = True
        picks.append(np.flatnonzero(taken[group_of]))
    out = np.full((n_partitions, max(p.size for p in picks)), TRAIN_PAD, dtype=np.int64)
    for j, pos in enumerate(picks):
        out[j, :pos.size] = pos
    return out
