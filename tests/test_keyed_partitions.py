"""Partitions and random ties keyed by row: a row's key depends on the seed, phase, partition
and the row's index in X, never on which other rows are active."""
import json
import zipfile

import numpy as np
import pytest

from aflite_fast import aflite
from aflite_fast.filtering.selection import tie_key
from aflite_fast.phase import partitions
from aflite_fast.phase.evaluation_rows import train_positions


def _rows(active, pos):
    return [set(active[p[p >= 0]].tolist()) for p in pos]


def test_draws_are_uniform_subsets():
    """Every row is drawn t/n of the time and every pair (t/n)((t-1)/(n-1)) of the time, within
    5 standard deviations of 4,000 draws (a draw by position of a sorted key would not be)."""
    n, t, m = 40, 10, 4000
    pos = partitions.partition_train_positions(7, 0, n, t, m)
    assert pos.shape == (m, t) and np.all(np.diff(pos, axis=1) > 0)
    member = np.zeros((m, n))
    np.put_along_axis(member, pos, 1.0, axis=1)
    p = t / n
    assert np.all(np.abs(member.mean(axis=0) - p) < 5 * np.sqrt(p * (1 - p) / m))
    pair = (member.T @ member / m)[np.triu_indices(n, 1)]
    q = p * (t - 1) / (n - 1)
    assert np.all(np.abs(pair - q) < 5 * np.sqrt(q * (1 - q) / m))
    # large n takes the threshold path: still exactly t rows, those of the t smallest keys
    big = partitions.partition_train_positions(3, 4, 100_000, 7_000, 2, row_ids=np.arange(100_000) * 3 + 1)
    keys = partitions.row_keys(partitions.key_seed(3, partitions.PARTITION_TAG, 4, 1), np.arange(100_000) * 3 + 1)
    assert np.array_equal(big[1], np.sort(np.argsort(keys, kind="stable")[:7_000]))


def test_draws_on_threads_are_the_same_positions():
    """Partitions drawn on several threads: each draw is its own, so the same positions, with
    row ids, evaluation rows or neither."""
    rng = np.random.default_rng(11)
    active = np.sort(rng.choice(60_000, 50_000, replace=False)).astype(np.int64)
    is_eval = np.zeros(60_000, dtype=bool)
    is_eval[rng.choice(60_000, 5_000, replace=False)] = True
    one = partitions.partition_train_positions(4, 2, active.size, 3_000, 9, row_ids=active)
    for n_threads in (2, 3, 16):
        assert np.array_equal(one, partitions.partition_train_positions(4, 2, active.size, 3_000, 9,
                                                                        row_ids=active, n_threads=n_threads))
        assert np.array_equal(train_positions(4, 2, active, is_eval, 3_000, 9),
                              train_positions(4, 2, active, is_eval, 3_000, 9, n_threads=n_threads))


def test_removing_a_row_changes_no_other_rows_draw():
    n, t, m = 2_000, 300, 16
    active = np.arange(n)
    full = _rows(active, partitions.partition_train_positions(5, 3, n, t, m, row_ids=active))
    for gone in (0, 977, 1999):
        rest = np.delete(active, gone)
        after = _rows(rest, partitions.partition_train_positions(5, 3, n - 1, t, m, row_ids=rest))
        for a, b in zip(full, after):
            if gone in a:  # the row is replaced by the one of the next key
                assert len(a - b) == 1 and len(b - a) == 1
            else:
                assert a == b
    # by position (the rows' indices ignored) the same removal reshuffles every partition
    by_pos = _rows(np.delete(active, 0), partitions.partition_train_positions(5, 3, n - 1, t, m))
    assert sum(a == b for a, b in zip(full, by_pos)) == 0


def test_eval_rows_and_groups_draw_by_id():
    n, t, m = 1_200, 200, 6
    rng = np.random.default_rng(0)
    active = np.sort(rng.choice(3_000, n, replace=False))
    is_eval = np.zeros(3_000, dtype=bool)
    is_eval[rng.choice(3_000, 500, replace=False)] = True
    with_eval = _rows(active, train_positions(9, 1, active, is_eval, t, m))
    eligible = active[~is_eval[active]]
    plain = _rows(eligible, train_positions(9, 1, eligible, None, t, m))
    assert with_eval == plain and not any(is_eval[list(s)].any() for s in with_eval)
    # groups keyed by code: dropping a group that no partition took leaves every draw as it was
    codes = np.arange(3_000) // 3
    g = _rows(active, partitions.partition_train_positions(9, 1, n, t, m, groups=codes[active]))
    untaken = sorted(set(codes[active].tolist()) - {c for s in g for c in codes[list(s)].tolist()})
    rest = active[codes[active] != untaken[0]]
    assert _rows(rest, partitions.partition_train_positions(9, 1, rest.size, t, m, groups=codes[rest])) == g


def test_random_ties_are_keyed_by_row():
    seen = np.full(10, 4)
    ids = np.arange(100, 110)
    key = tie_key("random", 8, 2, seen, ids)
    assert np.all((key >= 0) & (key < 4))
    assert np.allclose(tie_key("random", 8, 2, seen[1::2], ids[1::2]), key[1::2], rtol=0, atol=0)
    assert not np.array_equal(tie_key("random", 8, 3, seen, ids), key)
    assert tie_key("label_prob", 8, 2, seen, ids) is None


def test_a_run_that_differs_in_one_removal_keeps_its_partitions(seed):
    """Two runs whose first slices differ in one row: the later phases' partitions of the rows
    both runs keep are the same, but for the two rows that differ."""
    n, t, m = 3_000, 600, 8
    a = np.arange(n)[50:]
    b = np.delete(np.arange(n), [*range(49), 50])  # row 49 kept instead of row 50
    pa = _rows(a, partitions.partition_train_positions(seed, 1, a.size, t, m, row_ids=a))
    pb = _rows(b, partitions.partition_train_positions(seed, 1, b.size, t, m, row_ids=b))
    for x, y in zip(pa, pb):
        assert len(x ^ y) <= 2


def test_old_checkpoints_are_refused_naming_the_version(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((400, 4)).astype(np.float32)
    y = (X[:, 0] > 0).astype(int)
    path = tmp_path / "c.npz"
    run = dict(target_size=300, n_partitions=4, train_size=0.5, slice_size=20, progress=False,
               chance_check=False, random_state=1)
    aflite(X, y, checkpoint=path, **run)
    with np.load(path) as npz:
        arrays = {k: npz[k] for k in npz.files}
    header = json.loads(arrays["header"].tobytes())
    header["version"] = 1
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="is of version 1, written by an earlier aflite_fast that drew partitions"):
        aflite(X, y, checkpoint=path, **run)
    assert zipfile.is_zipfile(path)


def test_seeds_of_a_phase_at_once_are_each_partitions_seed():
    # key_seeds is a compiled copy of SeedSequence's mixing: NumPy's values for entropies and
    # spawn keys of one word and of several (ints above 2**32), none, and zero children
    for entropy in (0, 1, 12345, 2**32 - 1, 2**32, 2**63 - 7, 2**64 + 3, 12345678901234567890123):
        for words in ((partitions.PARTITION_TAG, 3), (partitions.PARTITION_TAG, 0), (), (0,), (2**33, 5, 6),
                      (1, 2, 3, 4, 5)):
            for count in (0, 1, 9, 70):
                seeds = partitions.key_seeds(entropy, words, count)
                assert seeds.dtype == np.uint64 and seeds.shape == (count,)
                assert list(seeds) == [partitions.key_seed(entropy, *words, j) for j in range(count)]
    with pytest.raises(ValueError, match="non-negative"):
        partitions.key_seeds(-1, (partitions.PARTITION_TAG, 3), 2)



def _group_draws_by_definition(entropy, phase, train_size, n_partitions, groups):
    """The definition of partitions of whole groups: every group keyed by ``row_keys`` of its
    code, the shortest prefix in (key, code) order holding train_size rows, its rows."""
    codes, group_of, sizes = np.unique(groups, return_inverse=True, return_counts=True)
    out = []
    for seed in partitions.key_seeds(entropy, (partitions.PARTITION_TAG, phase), n_partitions):
        keys = partitions.row_keys(seed, codes)
        order = np.lexsort((codes, keys))
        n_taken = int(np.searchsorted(np.cumsum(sizes[order]), train_size)) + 1
        taken = np.zeros(codes.size, dtype=bool)
        taken[order[:n_taken]] = True
        out.append(np.flatnonzero(taken[group_of.ravel()]))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_compiled_group_draws_are_the_definitions(seed):
    # the compiled draw selects the prefix (partitions around pivots, sizes summed per side)
    # instead of sorting: layouts of groups of 1 to 5 rows on average, of 50 to 2,500 rows
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 2500))
    groups = rng.integers(0, max(2, n // int(rng.integers(1, 6))), size=n)
    train_size = int(rng.integers(n // 10, n // 2))
    got = partitions.partition_train_positions(seed, 3, n, train_size, 8, groups=groups)
    for row, want in zip(got, _group_draws_by_definition(seed, 3, train_size, 8, groups)):
        np.testing.assert_array_equal(row[:want.size], want)
        assert np.all(row[want.size:] == partitions.TRAIN_PAD)


@pytest.mark.parametrize("seed", range(6))
def test_compiled_draws_are_the_definitions(seed):
    # the compiled draw (keys counted per bucket of their top bits, one bucket ordered) against
    # the definition: the t smallest keys of row_keys, ties by position; row ids that are not
    # positions, thresholds too low (every key ordered) and any number of threads
    from aflite_fast.io import _rowscan

    rng = np.random.default_rng(seed)
    for trial in range(40):
        n = int(rng.integers(2, 3000)) if trial % 3 else int(rng.integers(2, 40))
        t = int(rng.integers(1, n))
        ids = (np.sort(rng.choice(10 * n, n, replace=False)) if trial % 2 else np.arange(n)).astype(np.int64)
        seeds = partitions.key_seeds(seed, (partitions.PARTITION_TAG, trial), 4)
        below = partitions._key_threshold(t, n) if trial % 4 else np.uint64(int(0.3 * t / n * 2.0**64) + 1)
        out = np.empty((4, t), dtype=np.int64)
        _rowscan.smallest_keys(seeds, ids, below, out, 1 + trial % 3)
        for j in range(4):
            keys = partitions.row_keys(seeds[j], ids)
            np.testing.assert_array_equal(out[j], np.sort(np.lexsort((np.arange(n), keys))[:t]))
    got = partitions.partition_train_positions(seed, 2, 500, 200, 8, row_ids=np.arange(500) * 7 + 3, n_threads=2)
    for j, seed_j in enumerate(partitions.key_seeds(seed, (partitions.PARTITION_TAG, 2), 8)):
        keys = partitions.row_keys(seed_j, np.arange(500) * 7 + 3)
        np.testing.assert_array_equal(got[j], np.sort(np.lexsort((np.arange(500), keys))[:200]))
