"""Each partition's training rows in a phase, keyed by row: the t rows with the smallest keys.

Every active row (or group) has a key per partition and phase, a 64-bit hash of (the run's
seed, phase, partition, row id): :func:`row_keys`.  Partition j of phase p trains on the
``train_size`` active rows with the smallest keys (with groups: whole groups in the order of
their keys, the group id standing in for the row id).  Keys are independent and uniform, so a
partition's training set is a uniform ``train_size``-subset of the active rows, as in
Algorithm 1 of the paper.  The row id is the row's index in X, not its position among the active
rows, so removing a row changes no other row's key: two runs whose removals differ in one row
draw the same partitions from the rows they share, instead of being reshuffled into what
another seed would draw.  Nothing depends on how partitions are blocked, on threads or on the
backend.
"""
import numpy as np

from aflite_fast.io import _rowscan

#: Fill value of the training positions of a partition drawn as whole groups: each row of the
#: (m, t_max) array holds its partition's sorted positions, then this value up to t_max.
TRAIN_PAD = -1

#: First word of the spawn key of a partition's key seed, "part" in ASCII.
PARTITION_TAG = 0x70617274

# splitmix64 (Steele, Lea and Flood 2014): the stream's increment and its output mix
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_SHIFTS = (np.uint64(30), np.uint64(27), np.uint64(31))


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


def key_seed(entropy, *words):
    """The 64-bit seed of one family of keys: ``SeedSequence(entropy, spawn_key=words)``."""
    return np.random.SeedSequence(entropy, spawn_key=words).generate_state(1, np.uint64)[0]


def _uint32_words(value):
    """The 32-bit words of a non-negative int, lowest first (0: one word), as SeedSequence
    reads an int."""
    value = int(value)
    if value < 0:
        raise ValueError(f"seed words must be non-negative, got {value}")
    words = [value & 0xFFFFFFFF]
    value >>= 32
    while value:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
    return words


def key_seeds(entropy, words, count):
    """``[key_seed(entropy, *words, j) for j in range(count)]`` as a uint64 array: the same
    values, those of the children of one ``SeedSequence`` (a child's spawn key is its parent's
    plus its index), computed by a compiled copy of SeedSequence's mixing
    (:func:`aflite_fast.io._rowscan.seed_children`; a test compares it with NumPy's)."""
    run = _uint32_words(entropy)
    run += [0] * (4 - len(run))          # SeedSequence pads the entropy to its pool when spawned
    prefix = run + [w for word in words for w in _uint32_words(word)]
    out = np.empty(int(count), dtype=np.uint64)
    _rowscan.seed_children(np.asarray(prefix, dtype=np.uint32), out)
    return out


def row_keys(seed, ids):
    """Key of every id (int64, >= 0) under ``seed`` (:func:`key_seed`): value ``id`` of the
    splitmix64 stream that starts at ``seed``, uint64.  A key depends on the seed and the id
    only, never on which other ids are asked for."""
    z = np.asarray(ids, dtype=np.int64).astype(np.uint64)
    tmp = np.empty_like(z)
    with np.errstate(over="ignore"):
        z *= _GOLDEN
        z += np.uint64(seed)
        for shift, mult in zip(_SHIFTS, (_MIX1, _MIX2, None)):
            np.right_shift(z, shift, out=tmp)
            z ^= tmp
            if mult is not None:
                z *= mult
    return z


def uniform_keys(seed, ids):
    """:func:`row_keys` as floats uniform in [0, 1) (their top 53 bits)."""
    return (row_keys(seed, ids) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _key_threshold(count, n):
    """A key below which about the ``count`` smallest of ``n`` uniform keys lie, with a margin of
    six standard deviations (a compiled draw orders only keys below it, and all of them when
    fewer pass: a speed choice, never a result)."""
    p = count / n
    share = p + 6.0 * np.sqrt(p * (1.0 - p) / n) + 16.0 / n
    return np.uint64(min(int(share * 2.0**64), 2**64 - 1)) if share < 1.0 else np.uint64(2**64 - 1)


def partition_train_positions(entropy, phase, n_active, train_size, n_partitions, groups=None, row_ids=None,
                              n_threads=1):
    """Training positions (in the active set) of every partition of a phase.

    Partition j of phase p keys every active row by :func:`row_keys` under
    ``key_seed(entropy, PARTITION_TAG, p, j)`` and trains on the ``train_size`` rows with the
    smallest keys: a uniform subset without replacement, that depends on the rows' ids and not
    on their positions.  With ``groups`` the keys are those of the group codes: the partition
    takes the groups present in the active set whole, in the order of their keys, until its
    training set holds at least ``train_size`` rows: so it holds from ``train_size`` to
    ``train_size + s - 1`` rows, s the size of the group that completed it, and no group is
    split between training and held out.

    Parameters
    ----------
    entropy : int
        Seed of the run (:func:`seed_entropy`).
    phase, n_active, train_size, n_partitions : int
    groups : ndarray (n_active,) of int, optional
        Group code (>= 0) of every active position: the draws depend on the codes, so codes must
        name a group the same way in every phase (:func:`aflite_fast.phase.groups.encode_groups`
        numbers groups in order of first appearance in X, so ids that name the same groups give
        the same draws).  The caller ensures ``train_size <= n_active - (largest group)``, so
        every partition holds out rows (:func:`aflite_fast.phase.groups.check_group_train_size`).
    row_ids : ndarray (n_active,) of int, optional
        Id (>= 0) of every active position: its row's index in X.  Default: the positions
        themselves (all rows active).
    n_threads : int, default=1
        Threads that draw partitions (without groups): each partition's draw is its own, so
        the result is the same whatever the number.

    Returns
    -------
    ndarray of shape (n_partitions, t_max), int64
        Row j: partition j's sorted training positions.  Without groups t_max = train_size;
        with groups t_max is the largest training set and shorter rows end in
        :data:`TRAIN_PAD`.
    """
    if groups is not None:
        return _group_train_positions(entropy, phase, train_size, n_partitions, groups)
    ids = np.ascontiguousarray(np.arange(n_active) if row_ids is None else row_ids, dtype=np.int64)
    if ids.shape != (n_active,):
        raise ValueError(f"row_ids has shape {ids.shape}, expected ({n_active},)")
    seeds = key_seeds(entropy, (PARTITION_TAG, phase), n_partitions)
    if train_size <= 0 or train_size >= n_active:
        every = np.arange(n_active if train_size > 0 else 0, dtype=np.int64)
        return np.repeat(every[None], n_partitions, axis=0)
    out = np.empty((n_partitions, train_size), dtype=np.int64)
    # one compiled pass a partition (the keys below a threshold counted per bucket of their top
    # bits, the bucket of the train_size-th ordered), partitions on n_threads OpenMP threads
    _rowscan.smallest_keys(seeds, ids, _key_threshold(train_size, n_active), out, max(1, int(n_threads)))
    return out


def _group_train_positions(entropy, phase, train_size, n_partitions, groups):
    codes, group_of, sizes = np.unique(np.asarray(groups, dtype=np.int64), return_inverse=True,
                                       return_counts=True)
    group_of = group_of.ravel()
    n_groups = sizes.size
    n_rows = int(sizes.sum())
    p = min(1.0, train_size / n_rows)
    # groups whose keys pass this share hold train_size rows but in a draw of many standard
    # deviations; only they are ordered (all groups when they fall short)
    share = p + 6.0 * np.sqrt(p * float(np.sum(sizes.astype(np.float64) ** 2))) / n_rows + 2.0 * sizes.max() / n_rows
    seeds = key_seeds(entropy, (PARTITION_TAG, phase), n_partitions)
    below = np.uint64(min(int(share * 2.0**64), 2**64 - 1)) if share < 1.0 else np.uint64(2**64 - 1)
    # a compiled pass per partition: keys of the groups, the candidates ordered, the prefix
    taken = np.zeros((n_partitions, n_groups), dtype=np.uint8)
    n_taken = _rowscan.group_prefixes(seeds, np.ascontiguousarray(codes, dtype=np.int64),
                                      np.ascontiguousarray(sizes, dtype=np.int64), int(train_size), below, taken)
    if np.any(n_taken >= n_groups):
        raise ValueError(f"groups: a training set of {train_size} rows drawn as whole groups takes all "
                         f"{n_groups} groups and leaves no row held out; lower train_size")
    n_rows_taken = taken.astype(np.int64) @ np.asarray(sizes, dtype=np.int64)
    out = np.full((n_partitions, int(n_rows_taken.max())), TRAIN_PAD, dtype=np.int64)
    _rowscan.taken_positions(taken, np.ascontiguousarray(group_of, dtype=np.int64), out)
    return out

