"""Tests of the AFLite loop (``aflite_fast.aflite``) and of ``aflite_fast.predictability``.

a. Determinism: the same ``random_state`` gives the same result (keep, removal order, scores)
   with 1 and 2 threads, with an ndarray and a read-only memmap (float32 and float16), and
   with a memory budget small enough to split every phase into several blocks of partitions.
b. Stopping rules (Algorithm 1 of the paper): filtering stops after the first phase in which
   fewer than ``slice_size`` rows reach ``tau``, and never leaves fewer than ``target_size``.
c. The result is self-consistent: keep and removed partition the rows, removed_phase and
   history agree, removed rows scored at least tau, most predictable first.
d. ``train_size`` as a fraction, labels of any sortable type, and ``predictability`` scoring
   exactly the first phase of ``aflite`` with the same seed.
"""
import numpy as np
import pytest

from aflite_fast import aflite, predictability

N, D, K = 1500, 16, 3
COMMON = dict(n_partitions=10, train_size=0.5, slice_size=100, tau=0.75, progress=False)


@pytest.fixture
def data(seed, make_problem):
    return make_problem(np.random.default_rng([seed, 20]), N, D, K, signal=0.6)


def _same(a, b):
    assert np.array_equal(a.keep, b.keep)
    assert np.array_equal(a.removed, b.removed)
    assert np.array_equal(a.removed_phase, b.removed_phase)
    assert np.array_equal(a.scores, b.scores, equal_nan=True)
    assert [h.n_removed for h in a.history] == [h.n_removed for h in b.history]


def test_result_depends_only_on_inputs_and_seed(seed, data, readonly_memmap):
    X, y = data
    run = dict(COMMON, target_size=1100, random_state=seed + 7)
    base = aflite(X, y, n_jobs=1, **run)
    assert len(base.history) >= 3 and base.removed.size == N - 1100
    assert all(h.n_blocks == 1 for h in base.history)
    _same(base, aflite(X, y, n_jobs=2, **run))
    _same(base, aflite(readonly_memmap(X), y, n_jobs=1, **run))
    # a budget that forces several blocks of partitions per phase (and chunked prediction)
    small = aflite(X, y, n_jobs=1, max_memory="400KB", **run)
    assert all(h.n_blocks > 1 for h in small.history), [h.n_blocks for h in small.history]
    _same(base, small)
    # the seed matters: a different one draws other partitions and removes other rows
    other = aflite(X, y, n_jobs=1, **dict(run, random_state=seed + 8))
    assert not np.array_equal(base.removed, other.removed)


def test_float16_memmap_same_as_float16_array(seed, data, readonly_memmap):
    X, y = data
    X16 = X.astype(np.float16)
    run = dict(COMMON, target_size=1300, random_state=seed)
    a = aflite(X16, y, n_jobs=1, **run)
    b = aflite(readonly_memmap(X16), y, n_jobs=2, **run)
    _same(a, b)


def test_stops_when_fewer_than_slice_size_reach_tau(seed, make_problem):
    """Pure-noise labels over 4 balanced classes: held-out accuracy is near chance (0.25), so
    few rows reach tau = 0.9 (a few dozen: the partitions' models share training rows and so
    repeat the same lucky guess) and filtering must stop after the first phase."""
    rng = np.random.default_rng([seed, 21])
    X, _ = make_problem(rng, 1200, 12, 4)
    y = rng.permutation(np.arange(1200) % 4)
    res = aflite(X, y, target_size=100, n_partitions=12, train_size=600, slice_size=150, tau=0.9,
                 random_state=seed, n_jobs=1, progress=False)
    assert len(res.history) == 1
    h = res.history[0]
    assert h.n_above_tau < 150
    assert h.n_removed == h.n_above_tau == res.removed.size  # those that did reach tau go
    assert res.keep.size == 1200 - h.n_removed
    assert "fewer than" in res.stop_reason
    assert np.all(res.scores[res.removed] >= 0.9)
    assert np.count_nonzero(res.scores[res.keep] >= 0.9) == 0
    # noise is not predictable: scores center on chance
    assert abs(np.nanmean(res.scores) - 0.25) < 0.05


def test_removes_planted_easy_rows_then_stops(seed, make_problem):
    """Noise labels plus a few rows whose label is written in extra features: the first phase
    removes those (fewer than slice_size reach tau) and filtering stops."""
    rng = np.random.default_rng([seed, 22])
    n, n_easy = 1500, 80
    X, _ = make_problem(rng, n, 12, 4)
    y = rng.permutation(np.arange(n) % 4)
    easy = rng.choice(n, size=n_easy, replace=False)
    marker = np.zeros((n, 4), np.float32)
    marker[easy, y[easy]] = 4.0
    X = np.hstack([X, marker])
    res = aflite(X, y, target_size=500, n_partitions=12, train_size=0.5, slice_size=300, tau=0.9,
                 random_state=seed, n_jobs=1, progress=False)
    assert len(res.history) == 1 and "fewer than" in res.stop_reason
    removed = set(res.removed.tolist())
    assert len(removed & set(easy.tolist())) >= 0.9 * n_easy
    assert res.removed.size < 300


def test_never_below_target_size(seed, data):
    X, y = data
    target = N - 250  # 100 + 100 + 50: the last phase may remove only what target_size allows
    res = aflite(X, y, target_size=target, random_state=seed, n_jobs=1, **COMMON)
    assert res.keep.size == target
    assert [h.n_removed for h in res.history] == [100, 100, 50]
    assert res.history[-1].n_above_tau > 50  # more were eligible, target_size held them back
    assert res.stop_reason == "target_size reached"
    # a target at or above the data size does nothing
    none = aflite(X, y, target_size=N, random_state=seed, n_jobs=1, **COMMON)
    assert none.keep.size == N and none.removed.size == 0 and none.history == []
    assert np.all(np.isnan(none.scores))


def test_result_is_consistent(seed, data):
    X, y = data
    res = aflite(X, y, target_size=1000, random_state=seed, n_jobs=1, **COMMON)
    keep, removed, phase = res.keep, res.removed, res.removed_phase
    assert keep.dtype == np.int64 and removed.dtype == np.int64 and phase.dtype == np.int64
    assert np.all(np.diff(keep) > 0)
    assert np.array_equal(np.sort(np.concatenate([keep, removed])), np.arange(N))
    assert removed.size == phase.size
    assert np.all(np.diff(phase) >= 0)
    assert np.array_equal(res.keep_mask, np.isin(np.arange(N), keep))
    n_active = N
    for p, h in enumerate(res.history):
        assert h.phase == p and h.n_active == n_active
        in_phase = removed[phase == p]
        assert in_phase.size == h.n_removed <= COMMON["slice_size"]
        assert h.n_removed <= h.n_above_tau <= h.n_scored <= h.n_active
        assert h.train_size == round(0.5 * h.n_active)
        assert h.seconds >= 0 and h.mean_iterations > 0
        # removed rows reached tau, most predictable first
        s = res.scores[in_phase]
        assert np.all(s >= COMMON["tau"]) and np.all(np.diff(s) <= 0)
        n_active -= h.n_removed
    assert n_active == keep.size
    # rows removed in a phase scored at least as high as every row kept through it
    last = res.history[-1].phase
    kept_scores = res.scores[keep]
    assert np.all(res.scores[removed[phase == last]].min() >= kept_scores[~np.isnan(kept_scores)])
    assert np.all((res.scores[~np.isnan(res.scores)] >= 0) & (res.scores[~np.isnan(res.scores)] <= 1))
    assert list(res.classes) == [0, 1, 2]


def test_train_size_fraction_and_integer(seed, data):
    X, y = data
    frac = aflite(X, y, target_size=1200, random_state=seed, n_jobs=1, **dict(COMMON, train_size=0.3))
    assert [h.train_size for h in frac.history] == [round(0.3 * h.n_active) for h in frac.history]
    assert len({h.train_size for h in frac.history}) > 1  # it follows the shrinking active set
    fixed = aflite(X, y, target_size=1200, random_state=seed, n_jobs=1, **dict(COMMON, train_size=450))
    assert all(h.train_size == 450 for h in fixed.history)
    # each of the m models trains on t rows and predicts the other N - t
    first = predictability(X, y, n_partitions=10, train_size=450, random_state=seed, n_jobs=1)
    assert first.seen.sum() == 10 * (N - 450)
    assert first.seen.max() <= 10
    part = predictability(X, y, n_partitions=10, train_size=0.3, random_state=seed, n_jobs=1)
    assert part.seen.sum() == 10 * (N - round(0.3 * N))


def test_labels_of_any_sortable_type(seed, data):
    X, y = data
    names = np.array(["cat", "dog", "emu"])[y]  # sorted like the integer codes
    run = dict(COMMON, target_size=1200, random_state=seed, n_jobs=1)
    as_int = aflite(X, y, **run)
    as_str = aflite(X, names, **run)
    as_list = aflite(X, names.tolist(), **run)
    _same(as_int, as_str)
    _same(as_int, as_list)
    assert list(as_str.classes) == ["cat", "dog", "emu"]
    shifted = aflite(X, (y * 10 - 5).astype(np.float64), **run)
    _same(as_int, shifted)
    assert list(shifted.classes) == [-5.0, 5.0, 15.0]


def test_predictability_equals_first_phase(seed, data):
    X, y = data
    res = aflite(X, y, target_size=N - COMMON["slice_size"], random_state=seed, n_jobs=1, **COMMON)
    assert len(res.history) == 1  # target reached after one phase: every score is phase 0's
    pred = predictability(X, y, n_partitions=10, train_size=0.5, random_state=seed, n_jobs=2)
    assert np.array_equal(pred.scores, res.scores, equal_nan=True)
    assert np.array_equal(pred.scores[pred.seen > 0], pred.correct[pred.seen > 0] / pred.seen[pred.seen > 0])
    assert np.all(np.isnan(pred.scores[pred.seen == 0]))
    assert np.count_nonzero(pred.seen > 0) == res.history[0].n_scored
    ok = pred.seen > 0
    assert np.all((pred.prob_label[ok] > 0) & (pred.prob_label[ok] < 1))
    # the removed rows are the top of this ranking
    assert res.scores[res.removed].min() >= np.nanmax(np.delete(pred.scores, res.removed))
