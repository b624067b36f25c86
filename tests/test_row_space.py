"""The row-space solver (aflite_fast.core.row_space, csrc/afl_dual.c): models on fewer rows than
columns trained from the rows' Gram matrix.

a. Its optimum is the feature-space solver's (same objective, same weights to the solvers'
   tolerance; scikit-learn's at a tight tolerance), for two and three classes, CE and GCE,
   cold and warm starts.
b. No bit depends on the thread count, on the Gram matrix holding more rows than the call
   (the call's block is copied out of it), or on warm starts being shared by the models.
c. The phase takes it where a model has fewer rows than columns, and a run's results do not
   depend on the input being a memmap, on the thread count, or on a resumed checkpoint.
d. Misuse is refused with the argument named.
"""
import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from aflite_fast import aflite
from aflite_fast.core import layout, prediction, row_space, solver
from aflite_fast.core.reference_class import to_reference
from aflite_fast.io.inputs import scan_rows
from aflite_fast.io.rows import membership_matrix
from aflite_fast.phase import local, partitions
from aflite_fast.phase.plan import kernel_C


def _problem(seed, n=240, d=300, n_classes=2, signal=0.5):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    means = rng.standard_normal((n_classes, d)) * signal
    scale = np.exp(-np.arange(d) / 40.0)  # skewed, embedding-like spectrum
    X = ((rng.standard_normal((n, d)) + means[y]) * scale).astype(np.float32)
    return X, y.astype(np.int32)


def _setup(seed, n=240, d=300, n_classes=2, m=6, n_active=None):
    X, y = _problem(seed, n, d, n_classes)
    center = scan_rows(X).astype(np.float32)
    Xa_all = layout.augment_rows(X, center)
    gram = row_space.RowGram(np.arange(n), Xa_all[:, :-1], n_threads=2)
    pre = gram.preconditioner(Xa_all[:, :-1], n_threads=2)
    n_active = n if n_active is None else n_active
    active = np.sort(np.random.default_rng(seed + 1).choice(n, n_active, replace=False)).astype(np.int64)
    train_pos = partitions.partition_train_positions(seed, n_active, n_active, n_active // 2, m)
    member = membership_matrix(train_pos, n_active, np.empty((n_active, m), dtype=np.uint8))
    return X, y, center, gram, pre, active, member, np.ascontiguousarray(Xa_all[active])


def _softmax(Z):
    Z = np.asarray(Z, dtype=np.float64)
    E = np.exp(Z - Z.max(axis=1, keepdims=True))
    return E / E.sum(axis=1, keepdims=True)


def _objective(Xa, y, coef, member, C):
    """The symmetric softmax objective (mean CE + L2 of the zero-mean weights) of each model."""
    out = []
    for j in range(member.shape[1]):
        rows = member[:, j] == 1
        Z = Xa[rows].astype(np.float64) @ coef[j]
        Z -= Z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(Z).sum(axis=1))
        loss = np.mean(lse - Z[np.arange(Z.shape[0]), y[rows]])
        W = coef[j][:-1] - coef[j][:-1].mean(axis=1, keepdims=True)
        out.append(loss + 0.5 / (C * rows.sum()) * np.sum(W * W))
    return np.array(out)


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("loss", ["ce", "gce"])
def test_same_optimum_as_the_feature_space_solver(n_classes, loss):
    X, y, center, gram, pre, active, member, Xa = _setup(3, n_classes=n_classes, n_active=200)
    tight = solver.SolverOptions(tol=1e-7)
    yy = y[active]
    rows, info = row_space.train_models_row_space(Xa, yy, member, n_classes, gram, gram.lookup(active), C=2.0,
                                                  loss=loss, options=tight, n_threads=2, precond=pre)
    feat, info_f = solver.train_models(Xa, yy, member, n_classes, C=2.0, loss=loss, options=tight, n_threads=2)
    assert np.all(info["status"] == 0) and np.all(info_f["status"] == 0)
    assert np.max(info["n_iter"]) > 2  # it trained
    np.testing.assert_allclose(info["objective"], info_f["objective"], rtol=1e-6, atol=1e-7)
    # the same probabilities, to the reach of float32 logits: a gradient exact to about 1e-6
    # leaves the weights within about 1e-6 sqrt(D) / l2 = 3.5e-3 of the optimum here
    for j in range(member.shape[1]):
        np.testing.assert_allclose(_softmax(Xa @ rows[j]), _softmax(Xa @ feat[j]), atol=1e-3)
    if loss == "ce":
        np.testing.assert_allclose(_objective(Xa, yy, rows, member, 2.0), info["objective"], rtol=1e-6)


def test_matches_scikit_learn_at_a_tight_tolerance():
    X, y, center, gram, pre, active, member, Xa = _setup(5, m=3)
    # C = 2 of scikit-learn's binomial model is the two-class softmax's C = 1 (plan.kernel_C)
    rows, info = row_space.train_models_row_space(Xa, y[active], member, 2, gram, gram.lookup(active),
                                                  C=kernel_C(2.0, 2), options=solver.SolverOptions(tol=1e-8),
                                                  n_threads=1, precond=pre)
    for j in range(member.shape[1]):
        tr = member[:, j] == 1
        ref = LogisticRegression(C=2.0, tol=1e-10, max_iter=100000).fit(
            X[active[tr]].astype(np.float64) - center, y[active[tr]])
        held = ~tr
        p = 1.0 / (1.0 + np.exp(-(Xa[held].astype(np.float64) @ (rows[j][:, 1] - rows[j][:, 0]))))
        # to the reach of float32 logits (see test_same_optimum_as_the_feature_space_solver)
        np.testing.assert_allclose(p, ref.predict_proba(X[active[held]].astype(np.float64) - center)[:, 1],
                                   atol=1e-3)


def test_warm_start_reaches_the_same_optimum():
    X, y, center, gram, pre, active, member, Xa = _setup(7, n_active=180)
    tight = solver.SolverOptions(tol=1e-7)
    yy, krow = y[active], gram.lookup(active)
    cold, _ = row_space.train_models_row_space(Xa, yy, member, 2, gram, krow, C=2.0, options=tight, precond=pre)
    start = np.repeat(cold.mean(axis=0)[None], member.shape[1], axis=0) * 0.5
    warm, info = row_space.train_models_row_space(Xa, yy, member, 2, gram, krow, C=2.0, options=tight,
                                                  precond=pre, coef=start.copy())
    for j in range(member.shape[1]):  # to the reach of float32 logits, as above
        np.testing.assert_allclose(_softmax(Xa @ warm[j]), _softmax(Xa @ cold[j]), atol=1e-3)
    assert info["n_iter"].max() > 0
    # a warm start every model shares (its products computed once) and the same start given to
    # each model as its own (the per-model products) give the same bits
    start[0] += 0.0  # still shared
    own = start.copy()
    own[1, 0, 0] += 1e-3  # no longer shared: every model's products computed for it
    a, _ = row_space.train_models_row_space(Xa, yy, member[:, :1], 2, gram, krow, C=2.0, precond=pre,
                                            coef=np.ascontiguousarray(start[:1]))
    b, _ = row_space.train_models_row_space(Xa, yy, member[:, :2], 2, gram, krow, C=2.0, precond=pre,
                                            coef=np.ascontiguousarray(own[:2]))
    np.testing.assert_array_equal(a[0], b[0])


def test_bits_do_not_depend_on_threads_or_the_grams_rows():
    X, y, center, gram, pre, active, member, Xa = _setup(9, n_active=170)
    yy = y[active]
    one, i1 = row_space.train_models_row_space(Xa, yy, member, 2, gram, gram.lookup(active), C=2.0, n_threads=1,
                                               precond=pre)
    two, i2 = row_space.train_models_row_space(Xa, yy, member, 2, gram, gram.lookup(active), C=2.0, n_threads=2,
                                               precond=pre)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(i1["n_eval"], i2["n_eval"])
    # a Gram matrix of the active rows only (no block copied out): the same bits
    own = row_space.RowGram(active, Xa[:, :-1], n_threads=2)
    V, XV, sig, rest = pre
    own_pre = (V, np.ascontiguousarray(XV[active]), sig, rest)
    np.testing.assert_array_equal(own.K, gram.K[np.ix_(active, active)])
    three, _ = row_space.train_models_row_space(Xa, yy, member, 2, own, own.lookup(active), C=2.0, n_threads=2,
                                                precond=own_pre)
    np.testing.assert_array_equal(one, three)
    # one model alone: its bits do not depend on the others of the call
    alone, _ = row_space.train_models_row_space(Xa, yy, np.ascontiguousarray(member[:, 2:3]), 2, gram,
                                                gram.lookup(active), C=2.0, precond=pre)
    np.testing.assert_array_equal(alone[0], one[2])


@pytest.mark.parametrize("n_classes", [2, 3])
def test_watched_features_change_no_bit(n_classes):
    # the features every model watches from its start only spare exact gradients: warm-started
    # models at the default tolerance (where the watch decides most first checks) are the same
    # with the gram's features of largest second moment, with none and with the least telling
    X, y, center, gram, pre, active, member, Xa = _setup(13, n_classes=n_classes, n_active=200)
    yy, krow = y[active], gram.lookup(active)
    cold, _ = row_space.train_models_row_space(Xa, yy, member, n_classes, gram, krow, C=2.0, precond=pre)
    start = np.repeat(cold.mean(axis=0)[None], member.shape[1], axis=0)
    moment = (layout.augment_rows(X, center)[:, :-1].astype(np.float64) ** 2).sum(axis=0)  # the gram's rows
    assert moment[gram.watch].min() >= np.delete(moment, gram.watch).max()
    runs = []
    for watch in (gram.watch, None, np.argsort(moment, kind="stable")[:32].astype(np.int64)):
        gram.watch = watch
        runs.append(row_space.train_models_row_space(Xa, yy, member, n_classes, gram, krow, C=2.0, precond=pre,
                                                     coef=start.copy()))
    assert runs[0][1]["n_iter"].max() > 1
    for coef, info in runs[1:]:
        np.testing.assert_array_equal(coef, runs[0][0])
        np.testing.assert_array_equal(info["n_eval"], runs[0][1]["n_eval"])
    gram.watch = np.array([Xa.shape[1] - 1], dtype=np.int64)  # the ones column is no feature
    with pytest.raises(ValueError, match="watch"):
        row_space.train_models_row_space(Xa, yy, member, n_classes, gram, krow, C=2.0, precond=pre,
                                         coef=start.copy())


@pytest.mark.parametrize("n_classes", [2, 3])
def test_phase_logits_from_k_are_the_models_logits(n_classes):
    # a phase's logits come from K (no model's weights formed): they are those of the models'
    # weights, so are the counts; the mean model without the models is their mean
    X, y, center, gram, pre, active, member, Xa = _setup(15, n_classes=n_classes, n_active=200)
    yy, krow = y[active], gram.lookup(active)
    B = member.shape[1]
    cold, _ = row_space.train_models_row_space(Xa, yy, member, n_classes, gram, krow, C=2.0, precond=pre)
    for start in (None, np.repeat(cold.mean(axis=0)[None], B, axis=0)):
        kw = dict(C=2.0, precond=pre)
        coef, mean, Z, info = row_space.phase_models_row_space(
            Xa, yy, member, n_classes, gram, krow, coef=None if start is None else start.copy(), **kw)
        assert Z.shape == (Xa.shape[0], B * (n_classes - 1)) and Z.dtype == np.float32
        ref = to_reference(coef)  # (B, D, C - 1)
        Zw = np.einsum("nd,bdk->nkb", Xa.astype(np.float64), ref).reshape(Xa.shape[0], -1)
        np.testing.assert_allclose(Z, Zw, rtol=0, atol=2e-5 * np.abs(Zw).max())
        np.testing.assert_array_equal(mean, coef.mean(axis=0))
        none, mean2, Z2, info2 = row_space.phase_models_row_space(
            Xa, yy, member, n_classes, gram, krow, coef=None if start is None else start.copy(), models=False, **kw)
        assert none is None
        np.testing.assert_array_equal(Z2, Z)
        _, mean3, Z3, _ = row_space.phase_models_row_space(  # two threads: the same bits
            Xa, yy, member, n_classes, gram, krow, coef=None if start is None else start.copy(), models=False,
            n_threads=2, **kw)
        np.testing.assert_array_equal(mean3, mean2)
        np.testing.assert_array_equal(Z3, Z)
        np.testing.assert_array_equal(info2["n_eval"], info["n_eval"])
        # float32 products either way (each model's coefficients, or their mean, times X's rows)
        np.testing.assert_allclose(mean2, mean, rtol=1e-5, atol=1e-6 * np.abs(mean).max())
        # the counts from the logits are those from the weights
        heldout = np.subtract(1, member, dtype=np.uint8)
        n = Xa.shape[0]
        a = [np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n)]
        b = [np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n)]
        prediction.predict_from_logits(Z, yy, heldout, n_classes, *a)
        prediction.predict_accumulate(Xa, yy, heldout, prediction.stack_weights(coef), n_classes, *b)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_allclose(a[2], b[2], rtol=1e-5)
    # starts that differ: no logits from K, the models instead
    own = np.repeat(cold.mean(axis=0)[None], B, axis=0)
    own[1] *= 2.0
    coef, mean, Z, _ = row_space.phase_models_row_space(Xa, yy, member, n_classes, gram, krow, C=2.0, precond=pre,
                                                        coef=own, models=False)
    assert Z is None and coef.shape == (B, Xa.shape[1], n_classes)


@pytest.fixture
def row_space_calls(monkeypatch):
    """A list that gets an entry for every call of the row-space solver."""
    calls = []
    real = row_space.phase_models_row_space

    def spy(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(row_space, "phase_models_row_space", spy)
    return calls


def test_phase_takes_the_row_space_below_d_and_runs_do_not_depend_on_threads_or_memmap(tmp_path, monkeypatch,
                                                                                       row_space_calls):
    X, y = _problem(11, n=300, d=200)
    calls = row_space_calls
    kw = dict(target_size=200, n_partitions=8, train_size=0.5, slice_size=25, tau=0.0, random_state=2,
              progress=False, chance_check=False)
    a = aflite(X, y, n_jobs=2, **kw)
    assert len(calls) == len(a.history)  # t = 150 down to 100 < D = 201: every phase
    np.save(tmp_path / "X.npy", X)
    b = aflite(np.load(tmp_path / "X.npy", mmap_mode="r"), y, n_jobs=1, **kw)
    np.testing.assert_array_equal(a.keep, b.keep)
    np.testing.assert_array_equal(a.scores, b.scores)
    # a run resumed from a checkpoint (a new workspace, the Gram matrix built again): the same
    ckpt = tmp_path / "run.npz"
    real_phase, count = local.score_phase, []

    def interrupted(*args, **kwargs):
        count.append(1)
        if len(count) == 3:
            raise KeyboardInterrupt
        return real_phase(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(local, "score_phase", interrupted)
        with pytest.raises(KeyboardInterrupt):
            aflite(X, y, checkpoint=ckpt, **kw)
    c = aflite(X, y, checkpoint=ckpt, **kw)
    assert c.resumed_from == 2
    np.testing.assert_array_equal(a.keep, c.keep)
    np.testing.assert_array_equal(a.scores, c.scores)
    # t >= D: the feature-space solver
    calls.clear()
    X2, y2 = _problem(12, n=300, d=100)
    aflite(X2, y2, **kw)
    assert calls == []


def test_sizes_choose_the_solver():
    assert local.row_space_sizes(1580, 790, 1025, 2)
    assert not local.row_space_sizes(1580, 790, 769, 2)  # t >= D
    assert not local.row_space_sizes(row_space.MAX_GRAM_ROWS + 1, 100, 1025, 2)  # X too large
    assert not local.row_space_sizes(1580, 790, 1025, 2, loss="forward", loss_params={"T": np.eye(2)})


def test_refuses_misuse():
    X, y, center, gram, pre, active, member, Xa = _setup(13, n_active=100, m=3)
    with pytest.raises(ValueError, match="coef must be"):
        row_space.train_models_row_space(Xa, y[active], member, 2, gram, gram.lookup(active),
                                         coef=np.zeros((3, 5, 2)))
    bad = member.copy()
    bad[:, 1] = 0
    with pytest.raises(ValueError, match="at least one training row"):
        row_space.train_models_row_space(Xa, y[active], bad, 2, gram, gram.lookup(active))
    with pytest.raises(ValueError, match="not computed yet"):
        row_space.RowGram(active, Xa[:, :-1]).preconditioner(None)
    assert gram.lookup(np.array([0, 10**6])) is None


def test_a_budget_too_small_for_the_gram_matrix_trains_in_the_feature_space(row_space_calls):
    X, y = _problem(11, n=300, d=200)
    calls = row_space_calls
    with pytest.warns(RuntimeWarning, match="max_memory leaves .* row-space solver"), warnings.catch_warnings():
        # the feature-space solver's own fallback at this budget (its diagonal preconditioner)
        warnings.filterwarnings("ignore", message=".*solver's preconditioner")
        res = aflite(X, y, target_size=250, n_partitions=8, train_size=0.5, slice_size=25, tau=0.0, random_state=2,
                     progress=False, chance_check=False, max_memory="1MB")
    assert calls == [] and len(res.history) == 2


@pytest.mark.parametrize("n_classes", [2, 3])
def test_out_of_fold_probabilities_from_row_space_logits(monkeypatch, row_space_calls, n_classes):
    # oof_predict_proba by partitions sums every class's probability from the row space's logits
    # (three classes: two outputs a model); the same optimum in the feature space gives the same
    # probabilities to the reach of float32 logits
    from aflite_fast import oof_predict_proba

    X, y = _problem(17, n=240, d=300, n_classes=n_classes)
    kw = dict(n_partitions=16, train_size=0.5, C=2.0, tol=1e-8, random_state=3, n_jobs=2)
    rows = oof_predict_proba(X, y, **kw)
    assert len(row_space_calls) == 1
    monkeypatch.setattr(row_space, "row_space_worthwhile", lambda *a, **k: False)
    feat = oof_predict_proba(X, y, **kw)
    assert len(row_space_calls) == 1  # the feature-space solver this time
    ok = ~np.isnan(rows).any(axis=1)
    assert ok.all()
    np.testing.assert_array_equal(ok, ~np.isnan(feat).any(axis=1))
    np.testing.assert_allclose(rows[ok].sum(axis=1), 1.0, atol=1e-9)
    np.testing.assert_allclose(rows[ok], feat[ok], atol=2e-4)  # measured: 1.6e-5 and 4.0e-5


def test_views_in_the_row_space_take_each_views_mean_model(row_space_calls):
    # two views of fewer rows than columns: every phase of each trains in the row space, the next
    # phase of each starting from that view's own mean model (PhaseScores.mean_coef, no models
    # formed); the run's bits do not depend on the threads
    X, y = _problem(19, n=260, d=300)
    A, B = X[:, :150].copy(), X[:, 150:].copy()
    kw = dict(target_size=200, n_partitions=8, train_size=0.5, slice_size=20, tau=0.0, random_state=4,
              progress=False, chance_check=False, n_jobs=2)
    both = aflite(None, y, views={"a": A, "b": B}, **kw)
    assert len(row_space_calls) == 2 * len(both.history) and len(both.history) > 1
    one = aflite(None, y, views={"a": A, "b": B}, **dict(kw, n_jobs=1))
    np.testing.assert_array_equal(one.keep, both.keep)
    np.testing.assert_array_equal(one.view_scores["a"], both.view_scores["a"])
