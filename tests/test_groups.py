"""Group-aware partitions (issue 12): ``groups=`` and ``remove="group"``.

a. Duplicated rows with random labels: without groups a held-out twin is predicted from its
   trained twin (mean score about 0.76); with groups both twins are always on the same side
   and the mean score is chance (about 0.5).
b. No partition the engine draws splits a group, in any phase of an AFLite run; each holds
   t to t + s - 1 rows (s: the last group taken) and partitions differ in size.
c. Without groups the partitions are exactly today's; with groups the result depends on the
   seed only (not threads, memory budget, memmap), and partition j has its own seed.
d. ``remove="group"`` removes whole groups whose mean score reaches tau.
e. Bad groups get a ValueError naming ``groups``; predictability, oof_predict_proba and
   AFLite.fit_resample take groups too.
"""
import numpy as np
import pytest
from sklearn.model_selection import GroupKFold

from aflite_fast import AFLite, aflite, oof_predict_proba, predictability
from aflite_fast.filtering.oof import oof_run
from aflite_fast.phase import local, partitions
from aflite_fast.phase.groups import encode_groups

RUN = dict(n_partitions=8, train_size=0.5, slice_size=60, tau=0.7, progress=False, n_jobs=1)


def twins(rng, n_pairs, d):
    """Every row twice (same label), labels at random: nothing to learn but the twin."""
    base = rng.standard_normal((n_pairs, d)).astype(np.float32)
    labels = rng.integers(0, 2, n_pairs)
    return np.repeat(base, 2, axis=0), np.repeat(labels, 2), np.repeat(np.arange(n_pairs), 2)


@pytest.fixture
def grouped(seed, make_problem):
    """A problem whose rows come in groups of 1 to 4 (ids shuffled, non-contiguous)."""
    rng = np.random.default_rng([seed, 120])
    X, y = make_problem(rng, 900, 10, 3, signal=0.7)
    sizes = rng.integers(1, 5, size=900)
    groups = np.repeat(np.arange(sizes.size), sizes)[:900]
    return X, y, rng.permutation(1000)[groups]  # ids are not 0..G-1


def test_twins_look_predictable_without_groups_and_chance_with_them(seed):
    X, y, g = twins(np.random.default_rng([seed, 121]), 400, 1024)
    run = dict(n_partitions=32, train_size=0.5, C=100.0, random_state=seed, n_jobs=1)
    plain = predictability(X, y, **run)
    with_groups = predictability(X, y, groups=g, **run)
    assert np.nanmean(plain.scores) > 0.68, np.nanmean(plain.scores)
    assert np.nanmean(with_groups.scores) < 0.6, np.nanmean(with_groups.scores)
    assert np.all(with_groups.seen > 0)


def _check_whole_groups(train_pos, active_groups, t):
    sizes = np.bincount(active_groups)
    lengths = []
    for row in train_pos:
        pos = row[row != partitions.TRAIN_PAD]
        assert np.all(row[pos.size:] == partitions.TRAIN_PAD) and np.all(np.diff(pos) > 0)
        taken = np.unique(active_groups[pos])
        # every taken group is in whole: the positions are exactly the rows of those groups
        assert pos.size == sizes[taken].sum()
        assert np.array_equal(pos, np.flatnonzero(np.isin(active_groups, taken)))
        # t is reached by the last group taken, and not before it: t <= size < t + largest taken
        assert t <= pos.size < t + sizes[taken].max()
        assert pos.size < active_groups.size  # rows are held out
        lengths.append(pos.size)
    return lengths


def test_no_partition_splits_a_group(grouped, monkeypatch):
    X, y, groups = grouped
    codes = encode_groups(groups, X.shape[0])
    seen_phases = []
    real = local.score_phase

    def spy(X_, codes_, active, center, train_pos, **kw):
        t = round(RUN["train_size"] * active.size)
        lengths = _check_whole_groups(train_pos, codes[active], t)
        seen_phases.append((active.size, len(set(lengths))))
        return real(X_, codes_, active, center, train_pos, **kw)

    monkeypatch.setattr(local, "score_phase", spy)
    res = aflite(X, y, target_size=600, random_state=3, groups=groups, chance_check=False, **RUN)
    assert len(seen_phases) == len(res.history) >= 3
    assert seen_phases[1][0] < seen_phases[0][0]  # later phases: groups of the active rows only
    assert any(n_sizes > 1 for _, n_sizes in seen_phases)  # partitions differ in size (padding)


def test_partitions_without_groups_are_unchanged_and_seeded_per_partition(grouped):
    X, y, groups = grouped
    codes = encode_groups(groups, X.shape[0])
    plain = partitions.partition_train_positions(11, 2, 900, 300, 5)
    for j in range(5):  # the rows of the 300 smallest keys of partition j's own seed
        keys = partitions.row_keys(partitions.key_seed(11, partitions.PARTITION_TAG, 2, j), np.arange(900))
        assert np.array_equal(plain[j], np.sort(np.argsort(keys, kind="stable")[:300]))
    a = partitions.partition_train_positions(11, 2, 900, 300, 5, groups=codes)
    b = partitions.partition_train_positions(11, 2, 900, 300, 8, groups=codes)
    for j in range(5):  # partition j depends on its own seed, not on how many there are
        ra, rb = a[j][a[j] >= 0], b[j][b[j] >= 0]
        assert np.array_equal(ra, rb)
    assert not np.array_equal(a, partitions.partition_train_positions(12, 2, 900, 300, 5, groups=codes))
    # only which rows share a group matters: other ids (even of another sort order) give the same draws
    renamed = np.array([f"id{v}" for v in (groups * 7919) % 1009])
    assert np.array_equal(encode_groups(renamed, 900), codes)
    assert np.array_equal(a, partitions.partition_train_positions(11, 2, 900, 300, 5,
                                                              groups=encode_groups(renamed, 900)))


def test_groups_result_depends_only_on_seed(grouped, readonly_memmap):
    X, y, groups = grouped
    run = dict(RUN, target_size=650, random_state=5)
    base = aflite(X, y, groups=groups, **run)
    assert len(base.history) >= 2
    for other in (aflite(X, y, groups=groups, **dict(run, n_jobs=2)),
                  aflite(readonly_memmap(X), y, groups=groups.tolist(), **run),
                  aflite(X, y, groups=groups, max_memory="175KB", **run)):
        assert np.array_equal(base.keep, other.keep)
        assert np.array_equal(base.removed, other.removed)
        assert np.array_equal(base.scores, other.scores, equal_nan=True)
    assert any(h.n_blocks > 1 for h in aflite(X, y, groups=groups, max_memory="175KB", **run).history)


def test_remove_group_removes_whole_groups(grouped):
    X, y, groups = grouped
    res = aflite(X, y, target_size=600, random_state=4, groups=groups, remove="group", **RUN)
    assert res.removed.size > 0
    removed_phase = dict(zip(res.removed.tolist(), res.removed_phase.tolist()))
    kept = set(res.keep.tolist())
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        if any(r in kept for r in rows):
            assert all(r in kept for r in rows), f"group {g} split"
        else:
            phases = {removed_phase[r] for r in rows}
            assert len(phases) == 1  # removed together, in one phase
            s = res.scores[rows]
            assert np.nanmean(s) >= RUN["tau"]  # the group's mean score reached tau
    for h in res.history:
        assert h.n_removed <= RUN["slice_size"]
    # per row, the same data removes rows out of their groups
    rows = aflite(X, y, target_size=600, random_state=4, groups=groups, **RUN)
    split = [g for g in np.unique(groups) if 0 < np.isin(np.flatnonzero(groups == g), rows.keep).sum()
             < np.count_nonzero(groups == g)]
    assert split


def test_bad_groups(grouped):
    X, y, groups = grouped
    run = dict(RUN, target_size=600, random_state=0)
    bad = [
        (groups[:-1], "groups has 899 entries but X has 900"),
        (np.where(np.arange(900) == 17, np.nan, groups.astype(float)), "groups contains NaN"),
        (np.array([None] + groups[1:].tolist(), dtype=object), "groups contains a missing id"),
        (np.zeros(900), "single group"),
        (np.arange(900) // 500, "largest of the 2 groups has 500"),  # t = 450 > 900 - 500
        (np.zeros((30, 30)), "groups must be 1-D"),
    ]
    for g, message in bad:
        with pytest.raises(ValueError, match=message):
            aflite(X, y, groups=g, **run)
    with pytest.raises(ValueError, match="groups"):
        predictability(X, y, train_size=0.5, groups=np.arange(900) // 500)
    with pytest.raises(ValueError, match="remove='group' needs groups"):
        aflite(X, y, remove="group", **run)
    with pytest.raises(ValueError, match="remove must be"):
        aflite(X, y, groups=groups, remove="groups", **run)


def test_estimator_and_predictability_take_groups(grouped):
    X, y, groups = grouped
    est = AFLite(target_size=600, random_state=2, **{k: v for k, v in RUN.items() if k != "progress"})
    X_kept, y_kept = est.fit_resample(X, y, groups=groups)
    ref = aflite(X, y, target_size=600, random_state=2, groups=groups, **RUN)
    assert np.array_equal(est.sample_indices_, ref.keep) and np.array_equal(y_kept, y[ref.keep])
    first = predictability(X, y, n_partitions=8, train_size=0.5, random_state=2, groups=groups)
    one = aflite(X, y, target_size=900 - 60, random_state=2, groups=groups, **RUN)
    assert len(one.history) == 1
    assert np.array_equal(first.scores, one.scores, equal_nan=True)


def test_oof_with_groups(grouped):
    X, y, groups = grouped
    codes = encode_groups(groups, X.shape[0])
    run = oof_run(X, y, cv=4, random_state=0, groups=groups, n_jobs=1)
    assert np.all(run.seen == 1)  # every row in exactly one test fold
    P = oof_predict_proba(X, y, cv=GroupKFold(3), groups=groups, n_jobs=1)
    assert P.shape == (900, 3) and np.allclose(P.sum(axis=1), 1.0, atol=1e-5)
    # a fold that splits a group is refused
    train = np.flatnonzero(codes != codes[0])
    test = np.flatnonzero(codes == codes[0])
    with pytest.raises(ValueError, match="group"):
        oof_predict_proba(X, y, cv=[(np.append(train, test[:1]), test)], groups=groups)
    with pytest.raises(ValueError, match="groups"):
        oof_predict_proba(X, y, cv=4, groups=np.arange(900) // 300)  # 3 groups for 4 folds
    # partition mode draws the partitions of predictability
    part = oof_run(X, y, n_partitions=12, train_size=0.5, random_state=2, groups=groups, n_jobs=1)
    first = predictability(X, y, n_partitions=12, train_size=0.5, random_state=2, groups=groups, tol=1e-4)
    assert np.array_equal(part.seen, first.seen) and np.array_equal(part.correct, first.correct)


def test_cli_groups_file(grouped, tmp_path, capsys):
    from aflite_fast.cli import main

    X, y, groups = grouped
    np.save(tmp_path / "emb.npy", X)
    np.save(tmp_path / "labels.npy", y)
    (tmp_path / "groups.txt").write_text("\n".join(f"g{v}" for v in groups) + "\n")
    np.save(tmp_path / "short.npy", groups[:-3])
    args = ["filter", str(tmp_path / "emb.npy"), str(tmp_path / "labels.npy"), "--target-size", "600",
            "--partitions", "8", "--train-size", "0.5", "--slice-size", "60", "--tau", "0.7", "--seed", "3",
            "--threads", "1", "--quiet"]
    assert main(args + ["--out", str(tmp_path / "o"), "--groups", str(tmp_path / "groups.txt"),
                        "--remove", "group"]) == 0
    ref = aflite(X, y, target_size=600, random_state=3, groups=groups, remove="group", **RUN)
    assert np.array_equal(np.load(tmp_path / "o" / "keep.npy"), ref.keep)
    for extra, message in [(["--groups", str(tmp_path / "short.npy")], "--groups has 897 entries"),
                           (["--groups", str(tmp_path / "missing.txt")], "--groups: cannot read"),
                           (["--remove", "group"], "--remove group needs --groups")]:
        assert main(args + ["--out", str(tmp_path / "bad"), *extra]) == 2
        assert message in capsys.readouterr().err
        assert not (tmp_path / "bad").exists()


def test_taken_positions_is_its_definition():
    # the compiled pass (branch-free) against the loop it stands for, on random group layouts;
    # rows of out past each count keep their value; a row shorter than its count is refused
    from aflite_fast.io import _rowscan

    rng = np.random.default_rng(3)
    for n, n_groups, m in [(1, 1, 1), (50, 7, 5), (400, 200, 9), (300, 300, 3)]:
        group_of = rng.integers(0, n_groups, n).astype(np.int64)
        taken = (rng.random((m, n_groups)) < 0.5).astype(np.uint8)
        width = int(max(1, max(np.count_nonzero(taken[j][group_of]) for j in range(m))))
        out = np.full((m, width), -7, dtype=np.int64)
        counts = _rowscan.taken_positions(taken, group_of, out)
        for j in range(m):
            want = np.flatnonzero(taken[j][group_of] != 0)
            assert counts[j] == want.size
            np.testing.assert_array_equal(out[j, :want.size], want)
            assert np.all(out[j, want.size:] == -7)
    taken = np.ones((1, 2), dtype=np.uint8)
    with pytest.raises(IndexError, match="shorter"):
        _rowscan.taken_positions(taken, np.array([0, 1, 0], dtype=np.int64), np.zeros((1, 2), dtype=np.int64))
    with pytest.raises(IndexError, match="group"):
        _rowscan.taken_positions(taken, np.array([0, 2], dtype=np.int64), np.zeros((1, 2), dtype=np.int64))
