"""Tests of the batched logistic-regression kernel (aflite_fast.core._kernel via aflite_fast.kernel).

a. Optimum: on several random problems with skewed feature variances (different N, d, number
   of classes including 2, balanced and imbalanced) a model trained by the kernel predicts
   held-out rows like scikit-learn's LogisticRegression fitted on the same rows: the same
   class on >= 99.5% of rows and probabilities within 1e-3, both converged tightly; without
   a preconditioner and with each of its forms (dense through "auto", low-rank, diagonal).
b. Warm start: restarting from the optimum takes no L-BFGS step (a few at tol=1e-6, where
   float32 logits make the objective flat before the gradient test can pass).
c. Batching: a block of models, each on its own subset of the rows, gives bitwise the same
   coefficients as each model trained alone (on all rows with its mask, or on its own rows
   only with the same active-set positions); the same with 1 and 2 threads.
d. predict_accumulate counts held-out predictions, correct ones and the probability of the
   label as a NumPy reference does, and is bitwise the same with 1 and 2 threads.
Loss values and gradients against finite differences are tested with the losses (issue 4).
"""
import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from aflite_fast.core import layout, preconditioning, prediction, solver
from aflite_fast.core.reference_class import centered
from aflite_fast.phase.plan import kernel_C

TIGHT = solver.SolverOptions(tol=1e-6, max_iter=2000)


def _fit_kernel(X, y, n_classes, C, options=TIGHT, n_threads=1, coef=None, precond=None):
    center = X.mean(axis=0, dtype=np.float64).astype(np.float32)
    Xa = layout.augment_rows(X, center)
    if precond in preconditioning.PRECOND_FORMS:
        # that form of the preconditioner, from every row (the L2 weight of the kernel's C)
        precond = preconditioning.preconditioner(np.ascontiguousarray(Xa), n_classes,
                                        1.0 / (kernel_C(C, n_classes) * X.shape[0]), form=precond)
    coef, info = solver.train_models(Xa, y.astype(np.int32), np.ones((X.shape[0], 1), np.uint8), n_classes,
                                     C=kernel_C(C, n_classes), coef=coef, precond=precond, options=options,
                                     n_threads=n_threads)
    return coef, info, center


def _fit_sklearn(X, y, C):
    # Centering does not move the optimum (the intercept is unpenalized) and spares lbfgs
    # thousands of iterations on data with a large shared offset; predictions are made on
    # rows centered the same way.
    mu = X.mean(axis=0, dtype=np.float64)
    with threadpool_limits(1):
        model = LogisticRegression(C=C, tol=1e-10, max_iter=20000).fit(X.astype(np.float64) - mu, y)
    assert model.n_iter_[0] < 20000, "the reference did not converge"
    return model, mu


PROBLEMS = [
    # n_train, d, classes, class weights, C
    (1500, 20, 3, None, 1.0),
    (800, 10, 2, [0.8, 0.2], 1.0),
    (2000, 40, 5, [0.45, 0.25, 0.15, 0.1, 0.05], 0.5),
    (1200, 30, 2, None, 10.0),
    (600, 12, 4, [0.4, 0.3, 0.2, 0.1], 0.1),
]


@pytest.mark.parametrize("precond", [None, "auto", "lowrank", "diagonal"])
@pytest.mark.parametrize("n,d,n_classes,weights,C", PROBLEMS)
def test_same_optimum_as_sklearn(seed, make_problem, n, d, n_classes, weights, C, precond):
    rng = np.random.default_rng([seed, n, d, n_classes])
    X, y = make_problem(rng, n + 1000, d, n_classes, weights=weights, signal=0.5)
    Xtr, ytr, Xte = X[:n], y[:n], X[n:]
    coef, info, center = _fit_kernel(Xtr, ytr, n_classes, C, precond=precond)
    assert solver.STATUS_NAMES[int(info["status"][0])] == "converged"
    # skewed data: a real optimisation, not a lucky first step (fewer steps with the preconditioner)
    assert info["n_iter"][0] > (5 if precond is None else 2)
    W = layout.uncenter_coef(coef[0], center)
    ours = prediction.predict_proba(layout.augment_rows(Xte), W)
    ref, mu = _fit_sklearn(Xtr, ytr, C)
    theirs = ref.predict_proba(Xte.astype(np.float64) - mu)
    agree = np.mean(ours.argmax(axis=1) == theirs.argmax(axis=1))
    assert agree >= 0.995, f"held-out predictions agree on {agree:.4f} of rows"
    assert np.abs(ours - theirs).max() <= 1e-3
    np.testing.assert_allclose(ours.sum(axis=1), 1.0, atol=1e-6)
    # the problems are not trivial: the classifier is neither perfect nor at chance
    assert 1.0 / n_classes < np.mean(theirs.argmax(axis=1) == y[n:]) < 1.0


def test_two_class_model_matches_sklearn_coefficients(seed, make_problem):
    """For two classes sklearn fits the binomial model; the kernel's softmax with C / 2 is that model."""
    rng = np.random.default_rng([seed, 11])
    X, y = make_problem(rng, 700, 8, 2, signal=0.7, offset=0.0, spread=0.5)
    coef, info, center = _fit_kernel(X, y, 2, 1.0)
    W = layout.uncenter_coef(coef[0], center)
    ref, mu = _fit_sklearn(X, y, 1.0)
    w = W[:-1, 1] - W[:-1, 0]
    # Compared relative to the size of the coefficient vector: the float32 logits put a floor
    # of a few 1e-6 under the reachable gradient, so small coefficients carry ~1e-4 absolute
    # error.  A wrong C mapping (C instead of C / 2) moves them by percents.
    assert np.abs(w - ref.coef_[0]).max() <= 1e-3 * np.abs(ref.coef_[0]).max()
    assert abs((W[-1, 1] - W[-1, 0]) - (ref.intercept_[0] - ref.coef_[0] @ mu)) <= 1e-3 * np.abs(ref.coef_[0]).max()
    # the binomial model in the reference-class form: the second class's weights stay zero,
    # and the zero-mean weights are the symmetric softmax's optimum (opposite columns)
    assert not coef[0][:, 1].any()
    Wc = centered(W)
    np.testing.assert_allclose(Wc[:-1, 0], -Wc[:-1, 1], atol=1e-3 * np.abs(ref.coef_[0]).max())
    # and the mapping matters: the two-class softmax with C itself is a different model
    coef_c, _, _ = _fit_kernel_raw_C(X, y, 2, 1.0)
    w_c = layout.uncenter_coef(coef_c[0], center)
    assert np.abs((w_c[:-1, 1] - w_c[:-1, 0]) - ref.coef_[0]).max() > 1e-2 * np.abs(ref.coef_[0]).max()


def _fit_kernel_raw_C(X, y, n_classes, C):
    center = X.mean(axis=0, dtype=np.float64).astype(np.float32)
    Xa = layout.augment_rows(X, center)
    return solver.train_models(Xa, y.astype(np.int32), np.ones((X.shape[0], 1), np.uint8), n_classes,
                               C=C, options=TIGHT) + (center,)


@pytest.mark.parametrize("tol", [1e-4, 1e-5])
def test_warm_start_from_optimum_takes_no_step(seed, make_problem, tol):
    rng = np.random.default_rng([seed, 12])
    X, y = make_problem(rng, 1500, 20, 3, signal=0.5)
    opts = solver.SolverOptions(tol=tol)
    coef, info, center = _fit_kernel(X, y, 3, 1.0, options=opts)
    cold = int(info["n_iter"][0])
    assert cold >= 20
    start = coef.copy()
    warm, info_w, _ = _fit_kernel(X, y, 3, 1.0, options=opts, coef=coef)
    assert warm is coef  # updated in place, as documented
    assert int(info_w["status"][0]) == solver._kernel.STATUS_CONVERGED
    assert int(info_w["n_iter"][0]) == 0, f"warm start took {info_w['n_iter'][0]} steps (cold: {cold})"
    assert np.array_equal(warm, start) and info_w["objective"][0] == info["objective"][0]


def test_warm_start_at_tight_tolerance(seed, make_problem):
    """At tol=1e-6 the float32 logits put the reachable gradient near tol, so the solver ends
    on its flat-objective rule and a restart may re-walk a few short steps: few compared with
    a cold start, and never to a worse objective."""
    rng = np.random.default_rng([seed, 12])
    X, y = make_problem(rng, 1500, 20, 3, signal=0.5)
    coef, info, center = _fit_kernel(X, y, 3, 1.0)
    cold = int(info["n_iter"][0])
    start = coef.copy()
    warm, info_w, _ = _fit_kernel(X, y, 3, 1.0, coef=coef)
    assert int(info_w["status"][0]) == solver._kernel.STATUS_CONVERGED
    assert int(info_w["n_iter"][0]) <= cold // 5, f"warm start took {info_w['n_iter'][0]} steps (cold: {cold})"
    assert info_w["objective"][0] <= info["objective"][0]
    np.testing.assert_allclose(warm, start, atol=1e-3 * np.abs(start).max())


def _block_problem(make_problem, seed, n=900, d=15, n_classes=3, B=6):
    rng = np.random.default_rng([seed, 13])
    X, y = make_problem(rng, n, d, n_classes, signal=0.6)
    Xa = layout.augment_rows(X, X.mean(axis=0).astype(np.float32))
    member = np.zeros((n, B), np.uint8)
    for j in range(B):
        member[rng.choice(n, size=rng.integers(n // 4, n // 2), replace=False), j] = 1
    return Xa, y.astype(np.int32), member, n_classes


def test_block_equals_each_model_alone(seed, make_problem):
    # 12 models x 3 classes: the block's gradient product starts wider than the GEMM's narrow
    # path (at most 28 columns) and ends in it as models finish; a model alone is narrow
    Xa, y, member, C = _block_problem(make_problem, seed, B=12)
    n, B = member.shape
    opts = solver.SolverOptions(tol=1e-5)
    block, info = solver.train_models(Xa, y, member, C, options=opts)
    assert np.all(info["status"] == solver._kernel.STATUS_CONVERGED)
    assert len(set(info["n_iter"].tolist())) > 1  # models converge on their own schedules
    for j in range(B):
        # alone, on all rows with its own mask
        alone, info_j = solver.train_models(Xa, y, np.ascontiguousarray(member[:, [j]]), C, options=opts)
        assert np.array_equal(alone[0], block[j]), f"model {j} differs when trained alone"
        assert info_j["n_iter"][0] == info["n_iter"][j]
        assert info_j["objective"][0] == info["objective"][j]
        # alone, on its own rows only, with their positions in the full set (what the engine does)
        rows = np.flatnonzero(member[:, j])
        own, _ = solver.train_models(np.ascontiguousarray(Xa[rows]), y[rows], np.ones((rows.size, 1), np.uint8),
                                     C, positions=rows, options=opts)
        assert np.array_equal(own[0], block[j]), f"model {j} differs when trained on its rows only"
    # a block in another order is the same models, permuted
    perm = np.random.default_rng([seed, 14]).permutation(B)
    permuted, _ = solver.train_models(Xa, y, np.ascontiguousarray(member[:, perm]), C, options=opts)
    assert np.array_equal(permuted, block[perm])


def test_training_bitwise_same_with_one_and_two_threads(seed, make_problem):
    Xa, y, member, C = _block_problem(make_problem, seed, n=1500, d=25, B=8)
    one, info1 = solver.train_models(Xa, y, member, C, n_threads=1)
    two, info2 = solver.train_models(Xa, y, member, C, n_threads=2)
    assert np.array_equal(one, two)
    assert np.array_equal(info1["n_iter"], info2["n_iter"])
    assert np.array_equal(info1["objective"], info2["objective"])


def _softmax(Z):
    Z = Z - Z.max(axis=1, keepdims=True)
    E = np.exp(Z)
    return E / E.sum(axis=1, keepdims=True)


def test_predict_accumulate_matches_numpy(seed, make_problem):
    Xa, y, member, C = _block_problem(make_problem, seed, n=1100, d=20, B=7)
    n, B = member.shape
    coef, _ = solver.train_models(Xa, y, member, C)
    W = prediction.stack_weights(coef)
    heldout = np.ascontiguousarray(1 - member)
    results = []
    for n_threads in (1, 2):
        seen = np.full(n, 3, np.int32)          # accumulates onto what is already there
        correct = np.full(n, 1, np.int32)
        prob = np.full(n, 0.5)
        proba = np.zeros((n, C))
        prediction.predict_accumulate(Xa, y, heldout, W, C, seen, correct, prob, proba, n_threads=n_threads)
        results.append((seen, correct, prob, proba))
    for a, b in zip(*results):
        assert np.array_equal(a, b)
    seen, correct, prob, proba = results[0]
    # the models' own probabilities (W holds them in the reference-class form: C - 1 outputs)
    assert W.shape == (Xa.shape[1], (C - 1) * B)
    ref_correct = np.zeros(n)
    ref_prob = np.zeros(n)
    ref_proba = np.zeros((n, C))
    margin = np.full(n, np.inf)
    for j in range(B):
        P = _softmax(Xa.astype(np.float64) @ coef[j])
        h = heldout[:, j].astype(bool)
        ref_correct += h * (P.argmax(axis=1) == y)
        ref_prob += h * P[np.arange(n), y]
        ref_proba += h[:, None] * P
        top2 = np.sort(P, axis=1)[:, -2:]
        margin = np.where(h, np.minimum(margin, top2[:, 1] - top2[:, 0]), margin)
    assert np.array_equal(seen, 3 + heldout.sum(axis=1))
    clear = margin > 1e-4  # rows whose arg max float32 rounding cannot flip
    assert clear.mean() > 0.95
    assert np.array_equal(correct[clear], 1 + ref_correct[clear])
    np.testing.assert_allclose(prob, 0.5 + ref_prob, atol=1e-5)
    np.testing.assert_allclose(proba, ref_proba, atol=1e-5)
    # rows without a label (-1) are counted as seen but never correct
    seen2, correct2, prob2 = np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n)
    prediction.predict_accumulate(Xa, np.full(n, -1, np.int32), heldout, W, C, seen2, correct2, prob2)
    assert np.array_equal(seen2, heldout.sum(axis=1))
    assert not correct2.any() and not prob2.any()


@pytest.mark.parametrize("n_classes, n_models", [(3, 4), (40, 6)])
def test_prediction_tiles_change_no_bit(seed, n_classes, n_models):
    """The logits are computed a tile of rows at a time (by default at least
    ``predict_min_tile_rows`` rows, whatever the number of outputs): the counts and summed
    probabilities are the same bits for any tile height, one thread or two."""
    from aflite_fast.core import _kernel

    rng = np.random.default_rng([seed, n_classes])
    n, d = 2 * _kernel.predict_min_tile_rows() + 300, 20
    Xa = layout.augment_rows(rng.standard_normal((n, d)).astype(np.float32))
    W = (0.3 * rng.standard_normal((d + 1, n_classes * n_models))).astype(np.float32)
    y = rng.integers(0, n_classes, n).astype(np.int32)
    heldout = (rng.random((n, n_models)) < 0.6).astype(np.uint8)
    kb = layout.block_bounds(d + 1, layout.COL_BLOCK)
    out = []
    for tile, n_threads in ((0, 1), (0, 2), (1, 2), (333, 1), (n, 2)):
        seen, correct = np.zeros(n, np.int32), np.zeros(n, np.int32)
        prob, proba = np.zeros(n), np.zeros((n, n_classes))
        _kernel.predict_accumulate(Xa, y, heldout, W, kb, n_classes, seen, correct, prob, proba,
                                   n_threads, tile, 1)
        out.append((seen, correct, prob, proba))
    for other in out[1:]:
        for a, b in zip(out[0], other):
            assert np.array_equal(a, b)
    assert np.array_equal(out[0][0], heldout.sum(axis=1))
