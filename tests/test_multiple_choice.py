"""Multiple choice: X of shape (N, K, d), y the right candidate of each item.

a. The kernel's optimum (one scorer, softmax over each item's K candidates, L2 with
   scikit-learn's C) equals a float64 scipy.optimize reference of the same objective, with
   and without position biases, to 1e-6 relative objective at a tight tolerance; held-out
   predictions (arg max over the candidates) and probabilities agree.
b. aflite / predictability on 3-D X: bitwise the same over thread counts, memmap vs array,
   and memory budgets that split the partitions into several blocks; a resumed run equals the
   uninterrupted one; groups, the null, eval rows and the noise-robust losses work; the
   forward loss and bad labels are refused with a clear message (the Dask backend:
   tests/test_dask_multiple_choice.py).
c. The filter command reads a 3-D .npy.
"""
import json

import numpy as np
import pytest
import scipy.optimize

from aflite_fast import aflite, predictability
from aflite_fast.cli import main
from aflite_fast.core import layout, prediction, solver
from aflite_fast.phase import local, partitions
from aflite_fast.phase import multiple_choice as mc


def make_items(rng, n, K, d, artifact=0.4, noise=2.0):
    """Items whose right candidate scores higher along a random direction, with skewed feature
    scales and a shared offset; ``artifact`` of them also carry +2 on feature 0."""
    scale = (1.0 + np.arange(d)) ** -0.5
    X = (rng.standard_normal((n, K, d)) * scale + 1.5).astype(np.float32)
    w = rng.standard_normal(d) / scale
    y = (X.astype(np.float64) @ w * 0.3 + noise * rng.gumbel(size=(n, K))).argmax(axis=1)
    marked = rng.random(n) < artifact
    X[np.flatnonzero(marked), y[marked], 0] += 2.0
    return X, y


def reference_objective(X, y, C, position_bias):
    """Float64 objective and gradient over (w, b_1..b_{K-1}) of the scorer, as a function."""
    X = X.astype(np.float64)
    n, K, d = X.shape

    def f(p):
        w = p[:d]
        b = np.concatenate(([0.0], p[d:])) if position_bias else np.zeros(K)
        s = X @ w + b
        mx = s.max(axis=1, keepdims=True)
        lse = mx[:, 0] + np.log(np.exp(s - mx).sum(axis=1))
        P = np.exp(s - lse[:, None])
        loss = (lse - s[np.arange(n), y]).mean() + w @ w / (2 * C * n)
        G = P
        G[np.arange(n), y] -= 1.0
        G /= n
        gw = np.einsum("ik,ikd->d", G, X) + w / (C * n)
        return loss, np.concatenate((gw, G.sum(axis=0)[1:])) if position_bias else gw

    return f


@pytest.mark.parametrize("position_bias", [False, True])
@pytest.mark.parametrize("K", [2, 4])
def test_kernel_optimum_equals_scipy_reference(seed, position_bias, K):
    rng = np.random.default_rng([seed, 300, K])
    n, d, C = 500, 14, 0.3
    X, y = make_items(rng, n + 200, K, d)
    if position_bias:  # a position artifact the biases can learn
        y = np.where(rng.random(n + 200) < 0.3, 1, y)
    train, test = np.arange(n), np.arange(n, n + 200)
    center = X[train].reshape(-1, d).mean(axis=0).astype(np.float32)
    Xa = mc.augment_items(X[train], center, position_bias)
    coef, info = solver.train_models(Xa, y[train].astype(np.int32), np.ones((n, 1), np.uint8), 1, C=C, group=K,
                                     n_free=Xa.shape[1] - d, precond="auto",
                                     options=solver.SolverOptions(tol=1e-9, max_iter=5000))
    assert info["status"][0] == 0
    f = reference_objective(X[train], y[train], C, position_bias)
    n_params = d + (K - 1 if position_bias else 0)
    ref = scipy.optimize.minimize(f, np.zeros(n_params), jac=True, method="L-BFGS-B",
                                  options=dict(gtol=1e-12, ftol=1e-16, maxiter=20000))
    w, b = mc.scorer(coef[0], K, d, position_bias)
    ours = np.concatenate((w, b[1:])) if position_bias else w
    assert abs(f(ours)[0] - ref.fun) <= 1e-6 * abs(ref.fun)
    # held-out items: the same predictions and probabilities
    Xt = mc.augment_items(X[test], center, position_bias)
    proba = prediction.predict_proba(Xt, coef[0], group=K)
    s = X[test].astype(np.float64) @ ref.x[:d] + (np.concatenate(([0.0], ref.x[d:])) if position_bias else 0.0)
    p_ref = np.exp(s - s.max(axis=1, keepdims=True))
    p_ref /= p_ref.sum(axis=1, keepdims=True)
    assert np.array_equal(proba.argmax(axis=1), p_ref.argmax(axis=1))
    np.testing.assert_allclose(proba, p_ref, atol=1e-4)
    # the kernel's objective is the same function
    assert abs(info["objective"][0] - f(ours)[0]) <= 1e-6 * abs(ref.fun)


def test_member_pass_gradient_matches_reference(seed):
    """One member-pass evaluation of several models on subsets of items equals the float64
    reference gradient (to float32 precision)."""
    rng = np.random.default_rng([seed, 301])
    n, K, d, B = 300, 3, 9, 4
    X, y = make_items(rng, n, K, d)
    Xa = mc.augment_items(X, None, True)
    member = (rng.random((n, B)) < 0.5).astype(np.uint8)
    coef = rng.standard_normal((B, Xa.shape[1], 1)) * 0.3
    _, info = solver.train_models(Xa, y.astype(np.int32), member, 1, C=1.0, group=K, n_free=K - 1,
                                  coef=coef.copy(), options=solver.SolverOptions(max_iter=0))
    for j in range(B):
        rows = np.flatnonzero(member[:, j])
        f = reference_objective(X[rows], y[rows], 1.0, True)
        w, b = mc.scorer(coef[j], K, d, True)
        value, _ = f(np.concatenate((w, b[1:])))
        assert abs(info["objective"][j] - value) <= 1e-5 * abs(value)


RUN = dict(target_size=700, n_partitions=8, train_size=0.4, slice_size=120, tau=0.6, progress=False,
           random_state=7)


@pytest.fixture
def items(seed):
    return make_items(np.random.default_rng([seed, 302]), 1400, 4, 12)


def _same(a, b):
    assert np.array_equal(a.keep, b.keep)
    assert np.array_equal(a.removed, b.removed)
    assert np.array_equal(a.scores, b.scores, equal_nan=True)


@pytest.mark.parametrize("position_bias", [False, True])
def test_bitwise_over_threads_memmap_and_budget(items, readonly_memmap, position_bias, monkeypatch):
    X, y = items
    run = dict(RUN, position_bias=position_bias)
    base = aflite(X, y, n_jobs=1, **run)
    assert len(base.history) >= 2 and base.removed.size > 0
    _same(base, aflite(X, y, n_jobs=2, **run))
    _same(base, aflite(readonly_memmap(X), y, n_jobs=2, **run))
    # a budget that splits every phase's partitions into several blocks (no workspace reuse)
    blocks = []
    real = local.score_phase

    def record(*args, **kw):
        res = real(*args, **kw)
        blocks.append(res.n_blocks)
        return res

    monkeypatch.setattr(local, "score_phase", record)
    _same(base, aflite(X, y, n_jobs=1, max_memory="500KB", **run))
    assert max(blocks) > 1
    # predictability: the same first phase
    p1 = predictability(X, y, n_partitions=8, train_size=0.4, random_state=7, n_jobs=1, position_bias=position_bias)
    p2 = predictability(readonly_memmap(X), y, n_partitions=8, train_size=0.4, random_state=7, n_jobs=2,
                        position_bias=position_bias)
    assert np.array_equal(p1.prob_label, p2.prob_label, equal_nan=True)
    first = base.removed[base.removed_phase == 0]
    assert np.array_equal(p1.scores[first], base.scores[first])


def test_resume_equals_uninterrupted(items, tmp_path, interrupted_run):
    X, y = items
    run = dict(RUN, position_bias=True, n_jobs=1)
    full = aflite(X, y, **run)
    assert len(full.history) >= 3
    path = tmp_path / "mc.npz"
    interrupted_run(X, y, path, 2, **run)
    resumed = aflite(X, y, checkpoint=path, **dict(run, n_jobs=2))
    assert resumed.resumed_from == 2
    _same(full, resumed)
    with pytest.raises(ValueError, match="position_bias"):
        aflite(X, y, checkpoint=path, **dict(run, position_bias=False))


def test_groups_null_and_eval_rows(items, record_phases):
    X, y = items
    rng = np.random.default_rng(5)
    groups = rng.integers(0, 400, size=len(y))
    is_eval = rng.random(len(y)) < 0.15
    calls = record_phases
    plain = aflite(X, y, n_jobs=1, groups=groups, eval_rows=is_eval, **RUN)
    with_null = aflite(X, y, n_jobs=1, groups=groups, eval_rows=is_eval, null="permutation", **RUN)
    _same(plain, with_null)
    assert all(h.null_mean is not None for h in with_null.history)
    g = np.asarray(groups)
    for active, train_pos, seen in calls:
        for row in train_pos:
            taken = active[row[row >= 0]]
            assert not is_eval[taken].any()
            # whole groups (among the training-eligible rows)
            eligible = active[~is_eval[active]]
            in_taken = np.isin(g[eligible], g[taken])
            assert np.array_equal(np.sort(eligible[in_taken]), np.sort(taken))
        assert np.all(seen[is_eval[active]] == RUN["n_partitions"])


@pytest.mark.parametrize("loss", ["gce", "mae", "sce", "gce_trunc"])
def test_noise_robust_losses_run(items, loss):
    X, y = items
    res = predictability(X, y, n_partitions=4, train_size=0.5, random_state=1, n_jobs=1, loss=loss)
    assert np.nanmean(res.scores) > 0.25 + 0.1  # better than chance among 4 candidates
    assert np.all(res.status == 0)


def test_refusals(items):
    X, y = items
    with pytest.raises(ValueError, match="forward.*multiple choice"):
        aflite(X, y, loss="forward", loss_params={"T": np.eye(4)}, **RUN)
    with pytest.raises(ValueError, match="candidate position"):
        aflite(X, np.where(y == 3, 4, y), **RUN)
    with pytest.raises(ValueError, match="integer candidate"):
        aflite(X, y + 0.5, **RUN)
    with pytest.raises(ValueError, match="at least 2 candidates"):
        aflite(X[:, :1], np.zeros(len(y), int), **RUN)
    with pytest.raises(ValueError, match="multiple-choice X .* only"):
        aflite(X[:, 0], y, position_bias=True, **RUN)
    # the kernel refuses classes with group > 1
    with pytest.raises(ValueError, match="n_classes must be 1"):
        solver.train_models(mc.augment_items(X[:10]), y[:10].astype(np.int32), np.ones((10, 1), np.uint8), 2,
                            group=4)


def test_labels_need_not_use_every_position(items):
    """y in 0..K-1 is positional: a position no item has as its answer is still a class."""
    X, y = items
    y = np.where(y == 3, 0, y)
    res = aflite(X, y, n_jobs=1, **RUN)
    assert res.classes.tolist() == [0, 1, 2, 3]
    assert res.kept_per_class[3] == 0


def test_cli_filter_reads_3d_npy(items, tmp_path):
    X, y = items
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    code = main(["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "out"),
                 "--target-size", "700", "--n-partitions", "8", "--train-size", "0.4", "--slice-size", "120",
                 "--tau", "0.6", "--seed", "7", "--n-jobs", "1", "--quiet", "--position-bias"])
    assert code == 0
    keep = np.load(tmp_path / "out" / "keep.npy")
    assert np.array_equal(keep, aflite(X, y, n_jobs=1, position_bias=True, **RUN).keep)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["n_candidates"] == 4 and report["parameters"]["position_bias"] is True


# --------------------------------------------------------------------------- synthetic experiment


def test_synthetic_generator(seed):
    from aflite_fast.experiments.synthetic_data import make_multiple_choice

    data = make_multiple_choice(800, n_candidates=3, artifact_share=0.25, random_state=seed)
    assert data.X.shape == (800, 3, 6) and data.X.dtype == np.float32
    assert data.has_artifact.sum() == 200
    radius = np.hypot(data.X[..., 0], data.X[..., 1])
    # the right candidate is the one nearest the origin (rings 0.6 and 1, noise 0.1)
    assert np.mean(radius.argmin(axis=1) == data.y) > 0.95
    again = make_multiple_choice(800, n_candidates=3, artifact_share=0.25, random_state=seed)
    assert np.array_equal(data.X, again.X) and np.array_equal(data.y, again.y)
    with pytest.raises(ValueError, match="artifact_share"):
        make_multiple_choice(100, artifact_share=1.5)


def test_synthetic_experiment_removes_the_artifact(seed, tmp_path):
    """The artifact share among kept items falls below half its start, the linear scorer's
    accuracy falls toward 1/K, the non-linear scorer's stays far above it."""
    from aflite_fast.experiments.multiple_choice import run_multiple_choice

    res = run_multiple_choice(n_items=2000, n_partitions=32, random_state=seed, n_jobs=1, progress=False)
    before, after = res.rows
    assert after["artifact_share"] < 0.5 * before["artifact_share"]
    assert before["linear_accuracy"] > 0.5
    assert after["linear_accuracy"] < 0.25 + 0.1
    assert after["nonlinear_accuracy"] > 0.8
    assert res.trajectory[0]["n_items"] == 2000 and res.trajectory[-1]["n_items"] == res.keep.size
    code = main(["synthetic", "--multiple-choice", "--out", str(tmp_path / "mc"), "--n-samples", "600",
                 "--n-partitions", "8", "--seed", "1", "--n-jobs", "1", "--quiet"])
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "mc").iterdir() if not p.name.startswith(".")) == [
        "figure.png", "table.csv", "table.md"]
    assert main(["synthetic", "--multiple-choice", "--out", str(tmp_path / "x"), "--flip-rate", "0.2"]) == 2


@pytest.mark.parametrize("K, d, position_bias", [(2, 9, False), (3, 100, True), (4, 37, False),
                                                 (4, 1300, True)])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_one_pass_per_row_block_is_bitwise_the_two_passes(seed, K, d, position_bias, n_threads):
    """With the cross-entropy loss the kernel takes an item's scores, loss step and gradient
    in one pass; a whole phase (every solver round) gives the bits of scores first, gradient
    after, for 2-4 candidates, one and two logit slices, with and without position bias."""
    from aflite_fast.core import _kernel

    rng = np.random.default_rng([seed, 303, K, d])
    n = 1500 if d < 1000 else 400
    X, y = make_items(rng, n, K, d)
    center = np.zeros(d, dtype=np.float32)
    train_pos = partitions.partition_train_positions(seed, 0, n, n // 4, 8)
    active = np.arange(n, dtype=np.int64)
    results = []
    try:
        for fused in (True, False):
            _kernel._fuse_items(fused)
            results.append(local.score_phase(X, y.astype(np.int32), active, center, train_pos,
                                              n_classes=K, n_threads=n_threads,
                                              position_bias=position_bias))
    finally:
        _kernel._fuse_items(True)
    one, two = results
    for field in ("coef", "correct", "prob_label", "seen", "n_eval", "n_iter"):
        assert np.array_equal(getattr(one, field), getattr(two, field)), field


@pytest.mark.parametrize("loss", ["ce", "gce"])
def test_threads_over_reduction_groups_are_bitwise_one_thread(loss):
    """Multiple choice with several reduction groups per thread: the threads take groups of
    rows (each streams its own items) and hand their sums to the tree in group order, so a
    phase gives the bits of one thread, for the one-pass (ce) and two-pass (gce) row blocks."""
    rng = np.random.default_rng([11, 4])
    n, K, d = 9000, 4, 24
    X, y = make_items(rng, n, K, d)
    # four reduction groups of at least REDUCE_MIN_ROWS candidate rows: two per thread at 2
    assert layout.reduction_group_rows(n * K) * 4 >= n * K >= 4 * layout.REDUCE_MIN_ROWS
    center = X.reshape(n * K, d).mean(axis=0, dtype=np.float64).astype(np.float32)
    train_pos = partitions.partition_train_positions(5, 0, n, n // 10, 16)
    active = np.arange(n, dtype=np.int64)
    runs = [local.score_phase(X, y.astype(np.int32), active, center, train_pos, n_classes=K,
                               n_threads=t, loss=loss, position_bias=True) for t in (1, 2, 3)]
    for other in runs[1:]:
        for field in ("coef", "correct", "prob_label", "seen", "n_eval", "n_iter"):
            assert np.array_equal(getattr(runs[0], field), getattr(other, field)), field


@pytest.mark.parametrize("K", [2, 3, 4, 5])
def test_item_centered_is_numpys_mean_formula_bitwise(K):
    """The preconditioner's item-centred rows (one compiled pass) are bitwise NumPy's
    ``rows - mean(axis=1, dtype=float64).astype(float32)``, signed zeros and values whose
    float32 sum would overflow included, and the caller's rows are left as they were."""
    rng = np.random.default_rng([K, 17])
    rows = (rng.standard_normal((300 * K, 37)) * 10.0 ** rng.integers(-30, 30, (300 * K, 37))).astype(np.float32)
    rows[::7] = -0.0
    rows[1::11, :5] = 0.0
    rows[:3 * K] = np.float32(3e38)
    before = rows.copy()
    items = rows.reshape(-1, K, rows.shape[1])
    want = (items - items.mean(axis=1, keepdims=True, dtype=np.float64).astype(np.float32)).reshape(rows.shape)
    got = layout.item_centered(rows, np.arange(300), K)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.array_equal(rows.view(np.uint32), before.view(np.uint32))
    some = np.array([4, 0, 299, 17])
    sub = layout.item_centered(rows, some, K)
    assert np.array_equal(sub.view(np.uint32), want.reshape(-1, K, 37)[some].reshape(-1, 37).view(np.uint32))
