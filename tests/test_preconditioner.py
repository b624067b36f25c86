"""Tests of the solver's preconditioner in its forms (preconditioning.preconditioner, engine's choice).

a. The low-rank form (Woodbury identity) is the dense form's matrix; the diagonal form is the
   inverse of that matrix's diagonal; the dense and diagonal forms do not depend on how the
   sample is chunked or on the thread count.
b. The kernel's product with each form (``_kernel.precond_apply``) is H0 V, bitwise the same
   with 1 and 2 threads and whichever columns share the call.
c. Training with each form: a block of models gives bitwise each model's result alone, with
   1 and 2 threads.
d. Wide rows (fewer rows than columns): the estimator builds no preconditioner (measured
   fastest there) and reaches scikit-learn's optimum.
e. The choice of form: none where the sample has fewer rows than columns, dense up to
   preconditioning.DENSE_MAX_COLUMNS, else diagonal; a budget too small for one falls back to the next
   (down to none), never to a MemoryError.
f. Small X (its sample would be every row): a phase's preconditioner is estimated from all of
   X's rows with the L2 weight of the power of two at or below t, a function of X and that
   bucket alone: a run builds it once per bucket, and a kept one, a fresh one (a resumed run)
   and one on another thread count are the same bits.  Larger X: the phase's preconditioner is
   still the one of the sample of its active rows with the L2 weight of t; its sample comes
   from the rows the workspace holds after the first phase (X is not read for it), and the
   same active rows scored again (the chance check) reuse it, in an AFLite run with the bits
   of a fresh build.
"""
import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from aflite_fast import RobustLogisticRegression
from aflite_fast.core import _kernel, layout, preconditioning, solver


def _rows(make_problem, seed, n, d, n_classes=3):
    rng = np.random.default_rng([seed, n, d])
    X, y = make_problem(rng, n, d, n_classes, signal=0.5)
    Xa = np.ascontiguousarray(layout.augment_rows(X, X.mean(axis=0).astype(np.float32)))
    return Xa, y.astype(np.int32)


def test_forms_are_the_matrix_they_claim(seed, make_problem):
    Xa, _ = _rows(make_problem, seed, 300, 40)
    n, D = Xa.shape
    l2 = 1e-3
    # the matrix of H0 = (I + 1 1') x M^-1 of the reference-class form (C = 3): s = 1 / C
    M = (1 / 3) * (Xa.T.astype(np.float64) @ Xa) / n + l2 * np.eye(D)
    dense = preconditioning.preconditioner(Xa, 3, l2, form="dense")
    low = preconditioning.preconditioner(Xa, 3, l2, form="lowrank")
    diag = preconditioning.preconditioner(Xa, 3, l2, form="diagonal")
    assert low.factor.shape == (n, D) and low.core.shape == (n, n) and low.form == "lowrank"
    np.testing.assert_allclose(dense.matrix() @ M, np.eye(D), atol=2e-3)
    np.testing.assert_allclose(low.matrix() @ M, np.eye(D), atol=2e-3)
    np.testing.assert_allclose(diag.diag, 1.0 / np.diag(M), rtol=1e-5)
    assert preconditioning.preconditioner(Xa, 3, l2, form="none").matrix() is None
    with pytest.raises(ValueError, match="form must be one of"):
        preconditioning.preconditioner(Xa, 3, l2, form="sparse")


@pytest.mark.parametrize("form", ["dense", "diagonal"])
def test_chunked_sample_and_threads_give_the_same_bits(seed, make_problem, form):
    Xa, _ = _rows(make_problem, seed, 3000, 40)
    whole = preconditioning.preconditioner(Xa, 3, 1e-4, n_threads=1, form=form)
    chunks = preconditioning.preconditioner((Xa[i:i + 512] for i in range(0, 3000, 512)), 3, 1e-4, n_threads=2,
                                   form=form)
    assert np.array_equal(whole.matrix(), chunks.matrix())


@pytest.mark.parametrize("form", ["dense", "lowrank", "diagonal"])
def test_kernel_product_is_h0_v_whatever_the_threads_and_columns(seed, make_problem, form):
    Xa, _ = _rows(make_problem, seed, 200, 300)
    D = Xa.shape[1]
    pre = preconditioning.preconditioner(Xa, 3, 1e-3, form=form)
    V = np.random.default_rng(seed).standard_normal((D, 12)).astype(np.float32)
    cb = layout.block_bounds(D, layout.COL_BLOCK)

    def apply(V, threads):
        O = np.empty(V.shape, dtype=np.float64)
        _kernel.precond_apply(np.ascontiguousarray(V), O, cb, n_threads=threads, **pre.kernel_arguments(D))
        return O

    O = apply(V, 1)
    ref = pre.matrix() @ V.astype(np.float64)
    np.testing.assert_allclose(O, ref, atol=1e-4 * np.abs(ref).max())
    assert np.array_equal(O, apply(V, 2))
    # a column's result does not depend on which other columns share the call
    assert np.array_equal(O[:, 3:5], apply(V[:, 3:5], 2))


@pytest.mark.parametrize("form", ["lowrank", "diagonal"])
def test_block_of_models_bitwise_as_each_alone(seed, make_problem, form):
    Xa, y = _rows(make_problem, seed, 600, 80)
    n = Xa.shape[0]
    rng = np.random.default_rng([seed, 1])
    member = (rng.random((n, 3)) < 0.5).astype(np.uint8)
    pre = preconditioning.preconditioner(Xa, 3, 1.0 / (n / 2), form=form)
    opts = solver.SolverOptions(tol=1e-5)
    block, info = solver.train_models(Xa, y, member, 3, precond=pre, options=opts, n_threads=2)
    assert np.all(info["status"] == _kernel.STATUS_CONVERGED)
    for j in range(3):
        alone, _ = solver.train_models(Xa, y, np.ascontiguousarray(member[:, [j]]), 3, precond=pre,
                                       options=opts, n_threads=1)
        assert np.array_equal(block[j], alone[0])


@pytest.mark.parametrize("n,d,n_classes", [(240, 1500, 2), (300, 900, 3)])
def test_wide_rows_build_no_preconditioner_and_reach_sklearns_optimum(seed, make_problem, monkeypatch,
                                                                       n, d, n_classes):
    rng = np.random.default_rng([seed, n, d])
    X, y = make_problem(rng, n + 500, d, n_classes, signal=0.5)
    forms = []
    real = preconditioning.preconditioner

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        forms.append(out.form)
        return out

    monkeypatch.setattr(preconditioning, "preconditioner", spy)
    ours = RobustLogisticRegression(tol=1e-7, max_iter=5000).fit(X[:n], y[:n])
    assert forms == ["none"]  # no d x d matrix, no n x n system
    mu = X[:n].mean(axis=0, dtype=np.float64)
    with threadpool_limits(1):
        ref = LogisticRegression(tol=1e-10, max_iter=20000).fit(X[:n].astype(np.float64) - mu, y[:n])
    p_ours = ours.predict_proba(X[n:])
    p_ref = ref.predict_proba(X[n:].astype(np.float64) - mu)
    assert np.mean(p_ours.argmax(axis=1) == p_ref.argmax(axis=1)) >= 0.995
    assert np.abs(p_ours - p_ref).max() <= 2e-3


def test_choice_of_form_from_sizes_and_budget():
    big = 1 << 40
    assert preconditioning.preconditioner_forms(400, 20001) == ["none"]  # wide: plain L-BFGS in the rows' span
    assert preconditioning.preconditioner_forms(3000, 4001) == ["none"]
    assert preconditioning.preconditioner_forms(50000, 769)[0] == "dense"
    assert preconditioning.preconditioner_forms(50000, preconditioning.DENSE_MAX_COLUMNS + 1)[0] == "diagonal"
    assert preconditioning.preconditioner_forms(9000, 8001)[0] == "diagonal"
    assert preconditioning.phase_preconditioner_form(200000, 768, big) == "dense"
    assert preconditioning.phase_preconditioner_form(400, 20000, big) == "none"
    with pytest.warns(RuntimeWarning, match="using the diagonal form"):
        assert preconditioning.phase_preconditioner_form(200000, 768, 10_000_000) == "diagonal"
    with pytest.warns(RuntimeWarning, match="using no preconditioner"):
        assert preconditioning.phase_preconditioner_form(200000, 768, 1000) == "none"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        preconditioning.phase_preconditioner_form(200000, 768, 10 * preconditioning.phase_preconditioner_bytes(200000, 768, big))
        preconditioning.phase_preconditioner_form(400, 20000, 1000)  # nothing to fall back from


@pytest.mark.parametrize("n_columns,expected", [(101, 2048), (769, 8 * 769), (2047, 8 * 2047),
                                                (2049, 16384), (3001, 16384), (4097, 4 * 4097)])
def test_dense_sample_rows_capped_but_at_least_four_per_column(n_columns, expected):
    """Eight rows per column, at most 16,384 rows unless that leaves fewer than four per
    column, at least 2,048; never more rows than there are; evenly spaced and sorted."""
    sample = preconditioning.preconditioner_sample(10**6, n_columns)
    assert sample.size == expected
    assert np.all(np.diff(sample) > 0)
    assert preconditioning.preconditioner_sample(1000, n_columns).size == 1000
    assert preconditioning.preconditioner_sample(10**6, n_columns, "diagonal").size == 2048


def _spy_on_built(monkeypatch):
    """Record the form of every preconditioner finished from its sums (kept ones are not)."""
    built = []
    real = preconditioning._from_second_moments

    def spy(*args, **kwargs):
        out = real(*args, **kwargs)
        built.append(out.form)
        return out

    monkeypatch.setattr(preconditioning, "_from_second_moments", spy)
    return built


def test_whole_x_rule_from_the_sizes():
    # every row of X in the sample: 8 per column of D = d + 1, at least 2048 (items: D / K columns)
    assert preconditioning.whole_x_preconditioner(1580, 1024)
    assert preconditioning.whole_x_preconditioner(8 * 769, 768)
    assert not preconditioning.whole_x_preconditioner(8 * 769 + 1, 768)
    assert preconditioning.whole_x_preconditioner(2048, 20)
    assert not preconditioning.whole_x_preconditioner(2049, 20)
    assert not preconditioning.whole_x_preconditioner(200_000, 768)
    assert preconditioning.whole_x_preconditioner(2048, 3 * 1000, group=3)
    assert [preconditioning.reference_train_size(t) for t in (1, 2, 3, 255, 256, 257, 790, 0)] == [
        1, 2, 2, 128, 256, 256, 512, 1]
    assert preconditioning.phase_preconditioner_l2(0.5, 790) == 1 / (0.5 * 790)
    assert preconditioning.phase_preconditioner_l2(0.5, 790, whole_x=True) == 1 / (0.5 * 512)


def test_small_x_run_builds_its_preconditioner_once_per_bucket(seed, make_problem, monkeypatch):
    # f. t falls from 300 to below 128 over the run: while t >= D the feature-space solver runs
    # with the whole-X preconditioner, one inverse per bucket (256, 128); below D the models
    # train in the row space (aflite_fast.core.row_space), which builds none
    import aflite_fast
    from aflite_fast.core import row_space
    from aflite_fast.core import solver as solver_module

    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 600, 200, 2, signal=0.5)  # 600 rows, D = 201: whole-X
    assert preconditioning.whole_x_preconditioner(600, 200)
    built = _spy_on_built(monkeypatch)
    forms, row_sizes = [], []
    real_train = solver_module.train_models
    real_rows = row_space.phase_models_row_space

    def train_models(*args, **kwargs):
        forms.append(None if kwargs["precond"] is None else kwargs["precond"].form)
        return real_train(*args, **kwargs)

    def train_rows(Xa, y, member, *args, **kwargs):
        row_sizes.append(int(member.sum(axis=0).max()))
        return real_rows(Xa, y, member, *args, **kwargs)

    monkeypatch.setattr(solver_module, "train_models", train_models)
    monkeypatch.setattr(row_space, "phase_models_row_space", train_rows)
    res = aflite_fast.aflite(X, y, target_size=200, n_partitions=8, train_size=0.5, slice_size=25, tau=0.0,
                             random_state=seed, progress=False, chance_check=False, n_jobs=2)
    sizes = [h.train_size for h in res.history]
    assert len(sizes) == 16 and sizes[0] == 300 and sizes[-1] < 128
    n_feature_space = sum(t >= 201 for t in sizes)
    assert 0 < n_feature_space < 16
    assert built == ["dense"] * 2  # 256, 128
    assert forms == ["dense"] * n_feature_space
    assert row_sizes == [t for t in sizes if t < 201]
    # on one thread: the same bits (a resumed run's are tests/test_checkpoint.py's, small X too)
    one = aflite_fast.aflite(X, y, target_size=200, n_partitions=8, train_size=0.5, slice_size=25, tau=0.0,
                             random_state=seed, progress=False, chance_check=False, n_jobs=1)
    np.testing.assert_array_equal(one.keep, res.keep)
    np.testing.assert_array_equal(one.scores, res.scores)
    assert [h.mean_iterations for h in one.history] == [h.mean_iterations for h in res.history]


def test_small_x_preconditioner_is_a_function_of_x_and_the_bucket(seed, make_problem, monkeypatch):
    # f. the kept preconditioner (a run's later phase) gives the bits of one built afresh (a
    # resumed run's first phase, a new backend) and of one on another thread count
    from aflite_fast.phase import gather, local, partitions

    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 900, 24, 3, signal=0.5)
    assert preconditioning.whole_x_preconditioner(900, 24)
    center = X.mean(axis=0).astype(np.float32)
    codes = y.astype(np.int32)
    ws = gather.Workspace()
    local.score_phase(X, codes, np.arange(900, dtype=np.int64), center,
                      partitions.partition_train_positions(1, 0, 900, 300, 6), n_classes=3, workspace=ws, n_threads=2)
    active = np.sort(rng.choice(900, 600, replace=False)).astype(np.int64)
    train_pos = partitions.partition_train_positions(1, 1, 600, 270, 6)  # 300 and 270: bucket 256 both
    built = _spy_on_built(monkeypatch)
    kept = local.score_phase(X, codes, active, center, train_pos, n_classes=3, workspace=ws, n_threads=2)
    assert built == []  # the first phase's, kept
    fresh = local.score_phase(X, codes, active, center, train_pos, n_classes=3, n_threads=1)
    assert built == ["dense"]
    for name in ("coef", "n_iter", "n_eval", "seen", "correct", "prob_label"):
        np.testing.assert_array_equal(getattr(kept, name), getattr(fresh, name))
    # a new bucket (t = 120: 64) with the kept Gram matrix's sums: the bits of a fresh build
    train_pos = partitions.partition_train_positions(1, 2, 600, 120, 6)
    kept = local.score_phase(X, codes, active, center, train_pos, n_classes=3, workspace=ws, n_threads=2)
    fresh = local.score_phase(X, codes, active, center, train_pos, n_classes=3, n_threads=1)
    assert built == ["dense"] * 3
    np.testing.assert_array_equal(kept.coef, fresh.coef)
    # and a kept preconditioner is not taken for other rows of X
    X2 = X.copy()
    X2[0] += 1
    local.score_phase(X2, codes, active, center, train_pos, n_classes=3, workspace=ws, n_threads=2)
    assert built == ["dense"] * 4


def test_larger_x_phase_preconditioner_is_the_active_rows_sample(seed, make_problem, monkeypatch):
    # f. X with more rows than the sample: the phase's H0 is the one of the sample of its active
    # rows with the L2 weight of t, built every phase, exactly as before small X had its rule
    from aflite_fast.core import solver as solver_module
    from aflite_fast.phase import gather, local, partitions, plan

    rng = np.random.default_rng(seed)
    N, d = 3000, 20
    X, y = make_problem(rng, N, d, 3, signal=0.5)
    assert not preconditioning.whole_x_preconditioner(N, d)
    center = X.mean(axis=0).astype(np.float32)
    codes = y.astype(np.int32)
    used = []
    real_train = solver_module.train_models

    def train_models(*args, **kwargs):
        used.append(kwargs["precond"])
        return real_train(*args, **kwargs)

    monkeypatch.setattr(solver_module, "train_models", train_models)
    ws = gather.Workspace()
    for phase, n_active in enumerate((N, 2500)):
        active = np.sort(rng.choice(N, n_active, replace=False)).astype(np.int64)
        t = n_active // 2
        local.score_phase(X, codes, active, center, partitions.partition_train_positions(1, phase, n_active, t, 6),
                          n_classes=3, C=2.0, workspace=ws, n_threads=2)
        sample = active[preconditioning.preconditioner_sample(n_active, d + 1)]
        assert sample.size < n_active
        rows = np.ascontiguousarray(layout.augment_rows(X[sample], center))
        expected = preconditioning.preconditioner(rows, 3, 1.0 / (plan.kernel_C(2.0, 3) * t))
        np.testing.assert_array_equal(used[-1].dense, expected.dense)
    assert used[0] is not used[1]


def test_larger_x_sample_from_the_workspace_and_reused_for_the_same_rows(seed, make_problem, monkeypatch):
    # f. after the first phase the sample's rows are copied from the workspace, not read from X
    # (the rows a gather from X writes); scoring the same active rows again (other labels, as
    # the chance check does) builds nothing; other rows or another centre build again
    from aflite_fast.io.inputs import gather_rows
    from aflite_fast.phase import gather, local, partitions

    rng = np.random.default_rng([seed, 3])
    N, d = 3000, 20
    X, y = make_problem(rng, N, d, 3, signal=0.5)
    center = X.mean(axis=0).astype(np.float32)
    codes = y.astype(np.int32)
    built = _spy_on_built(monkeypatch)
    ws = gather.Workspace()
    active = np.arange(N, dtype=np.int64)
    local.score_phase(X, codes, active, center, partitions.partition_train_positions(1, 0, N, 1000, 6),
                      n_classes=3, workspace=ws, n_threads=2)
    assert built == ["dense"]
    active = np.sort(rng.choice(N, 2500, replace=False)).astype(np.int64)
    sample = active[preconditioning.preconditioner_sample(active.size, d + 1)]
    np.testing.assert_array_equal(ws.take(X, sample, center),
                                  gather_rows(X, sample, center, np.empty((sample.size, d + 1), np.float32)))
    assert ws.take(X, sample, center + 1) is None and ws.take(X.copy(), sample, center) is None
    train_pos = partitions.partition_train_positions(1, 1, active.size, 800, 6)
    expected = local.score_phase(X, codes, active, center, train_pos, n_classes=3, n_threads=2)
    reads = []
    real_gather = local.gather

    def spy_gather(X, rows, *args, **kwargs):
        reads.append(rows.size)
        return real_gather(X, rows, *args, **kwargs)

    monkeypatch.setattr(local, "gather", spy_gather)
    got = local.score_phase(X, codes, active, center, train_pos, n_classes=3, workspace=ws, n_threads=2)
    assert reads == []  # the sample taken from the workspace
    for name in ("coef", "n_iter", "seen", "correct", "prob_label"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name))
    assert built == ["dense"] * 3
    # the same rows again under permuted labels: the kept preconditioner, the bits of a fresh one
    permuted = rng.permutation(codes).astype(np.int32)
    again = local.score_phase(X, permuted, active, center, train_pos, n_classes=3, workspace=ws, n_threads=2)
    assert built == ["dense"] * 3
    fresh = local.score_phase(X, permuted, active, center, train_pos, n_classes=3, n_threads=2)
    assert built == ["dense"] * 4
    for name in ("coef", "n_iter", "seen", "correct", "prob_label"):
        np.testing.assert_array_equal(getattr(again, name), getattr(fresh, name))
    # other active rows, another centre: built again
    fewer = active[:-1]
    train_pos = partitions.partition_train_positions(1, 2, fewer.size, 800, 6)
    local.score_phase(X, codes, fewer, center, train_pos, n_classes=3, workspace=ws, n_threads=2)
    assert built == ["dense"] * 5
    local.score_phase(X, codes, fewer, center + 1, train_pos, n_classes=3, workspace=ws, n_threads=2)
    assert built == ["dense"] * 6


def test_chance_check_builds_no_preconditioner_of_its_own(seed, make_problem, monkeypatch):
    # f. an AFLite run on X larger than the sample: one preconditioner per phase, none for the
    # chance check's three scorings of phase 0's rows, and the bits of runs without the reuse
    import aflite_fast
    from aflite_fast.phase import gather

    rng = np.random.default_rng([seed, 4])
    X, y = make_problem(rng, 2400, 16, 3, signal=0.5)
    assert not preconditioning.whole_x_preconditioner(2400, 16)
    run = dict(target_size=2000, n_partitions=8, train_size=600, slice_size=100, tau=0.5, random_state=seed,
               progress=False, n_jobs=2)
    built = _spy_on_built(monkeypatch)
    res = aflite_fast.aflite(X, y, **run)
    assert res.chance is not None and len(res.history) == 4
    assert len(built) == len(res.history)

    def always_build(self, key, active, build):
        return build()

    monkeypatch.setattr(gather.Workspace, "sampled_preconditioner", always_build)
    monkeypatch.setattr(gather.Workspace, "take", lambda self, *args, **kwargs: None)
    del built[:]
    base = aflite_fast.aflite(X, y, **run)
    assert len(built) == len(res.history) + 3
    np.testing.assert_array_equal(base.keep, res.keep)
    np.testing.assert_array_equal(base.scores, res.scores)
    timeless = [{k: v for k, v in r.chance.as_dict().items() if k != "seconds"} for r in (base, res)]
    assert timeless[0] == timeless[1]
    assert [h.mean_iterations for h in base.history] == [h.mean_iterations for h in res.history]
