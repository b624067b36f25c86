"""Tests of the per-row losses (csrc/afl_losses.h, aflite_fast/losses.py) and user losses.

a. Values: the compiled loss of one row, read back as the kernel's objective of an
   intercept-only model (D = 1, so the logits are the coefficients and the L2 term is 0),
   equals hand-computed values at chosen p_y, for every loss.
b. Gradients: central finite differences of those compiled values equal the analytic logit
   gradient (w(p_y) (p - e_y), or p - pi for forward correction); the logits are exact in
   float32 so the differences see no rounding of the inputs.
c. Optimum: on a skewed random problem, the kernel-trained model of every loss is a
   stationary point of the objective evaluated independently in float64 NumPy (gradient by
   finite differences of a NumPy reference loss), far below the gradient at zero.
d. CE in the kernel reaches scikit-learn's LogisticRegression optimum.
e. Inputs: float64, float32 and read-only memmap give the same model, with 1 and 2 threads.
f. User losses: a Numba loss equal to GCE gives the same model; wrong weights are caught;
   user losses run in aflite(); bad specs are refused.
g. aflite(..., loss="gce") runs; gce_trunc needs (and gets from its warmup) a warm start.
h. The noise-robust experiment: noise matrices, label corruption, a small run and the CLI.
"""
import argparse
import dataclasses
import math

import numpy as np
import pytest

from aflite_fast import RobustLogisticRegression, aflite
from aflite_fast.core import layout, prediction, solver
from aflite_fast.core.losses import LOSS_NAMES, LossSpec, needs_warmup, resolve_loss
from aflite_fast.core.reference_class import centered
from aflite_fast.core.user_losses import UserLoss, user_loss


# --- a user loss defined at module level: compiled once, at import --------------------------
@user_loss(params={"q": 0.7})
def numba_gce(p_y, params, w_out):
    q = params[0]
    pq = p_y ** q
    w_out[0] = pq
    return (1.0 - pq) / q


@user_loss
def wrong_weight(p_y, params, w_out):
    w_out[0] = 1.0          # the right weight of 1 - p_y would be p_y
    return 1.0 - p_y


T3 = np.array([[0.7, 0.2, 0.1],
               [0.1, 0.8, 0.1],
               [0.25, 0.25, 0.5]])

LOSS_CASES = {
    "ce": {},
    "gce": {"q": 0.7},
    "gce_trunc": {"q": 0.7, "k": 0.3},
    "mae": {},
    "sce": {"alpha": 0.3, "beta": 0.5, "A": -4.0},
    "forward": {"T": T3},
}


def _softmax(z):
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def reference_loss(name, params, z, y):
    """Per-row losses in float64 NumPy, written from the papers' definitions."""
    p = _softmax(z)
    py = p[np.arange(len(y)), y]
    if name == "ce":
        return -np.log(py)
    if name == "gce":
        q = params["q"]
        return (1 - py ** q) / q
    if name == "gce_trunc":
        q, k = params["q"], params["k"]
        return (1 - np.maximum(py, k) ** q) / q
    if name == "mae":
        return np.abs(np.eye(p.shape[1])[y] - p).sum(axis=1)
    if name == "sce":
        onehot = np.eye(p.shape[1])[y]
        rce = -(p * np.where(onehot > 0, 0.0, params["A"])).sum(axis=1)
        return params["alpha"] * -np.log(py) + params["beta"] * rce
    if name == "forward":
        return -np.log((p @ params["T"])[np.arange(len(y)), y])
    raise AssertionError(name)


def analytic_logit_grad(name, params, z, y):
    """d loss / d z for one row, from the closed forms the kernel documents."""
    p = _softmax(z)
    e = np.eye(len(p))[y]
    py = p[y]
    if name == "forward":
        T = params["T"]
        pi = T[:, y] * p / (T[:, y] @ p)
        return p - pi
    w = {"ce": 1.0, "gce": py ** params.get("q", 0), "mae": 2 * py,
         "sce": params.get("alpha", 0) - params.get("beta", 0) * params.get("A", 0) * py}.get(name)
    if name == "gce_trunc":
        w = py ** params["q"] if py > params["k"] else 0.0
    return w * (p - e)


def kernel_row_loss(loss, params, z, y):
    """The compiled loss of one row with logits ``z``: objective of an intercept-only model
    evaluated at coef = z without a step (max_iter = 0)."""
    z = np.asarray(z, dtype=np.float64)
    C = len(z)
    spec = resolve_loss(loss, params, C)
    Xa = np.ones((1, 1), dtype=np.float32)
    coef = z.reshape(1, 1, C).copy()
    _, info = solver.train_models(Xa, np.array([y], np.int32), np.ones((1, 1), np.uint8), C,
                                  loss=spec, coef=coef,
                                  options=solver.SolverOptions(max_iter=0, tol=0.0))
    return float(info["objective"][0])


# --- a. hand-computed values ------------------------------------------------------------------
HAND_CASES = [
    # (loss, params, logits, label, value); p_y = 1/4 for (0, 0, 0, 0), 1/2 for (0, 0)
    ("ce", {}, [0, 0, 0, 0], 2, math.log(4)),
    ("gce", {"q": 0.7}, [0, 0, 0, 0], 1, (1 - 0.25 ** 0.7) / 0.7),
    ("gce", {"q": 1.0}, [0, 0], 0, 0.5),
    ("gce_trunc", {"q": 0.7, "k": 0.5}, [0, 0, 0, 0], 0, (1 - 0.5 ** 0.7) / 0.7),   # pruned
    ("gce_trunc", {"q": 0.5, "k": 0.2}, [0, 0, 0, 0], 3, (1 - 0.25 ** 0.5) / 0.5),  # kept
    ("mae", {}, [0, 0, 0, 0], 3, 1.5),
    ("mae", {}, [0, 0], 1, 1.0),
    ("sce", {"alpha": 0.1, "beta": 1.0, "A": -4.0}, [0, 0, 0, 0], 0, 0.1 * math.log(4) + 4 * 0.75),
    ("sce", {"alpha": 1.0, "beta": 0.5, "A": -2.0}, [0, 0], 0, math.log(2) + 0.5),
    # forward: p = 1/3 each, (T^T p)_y = column mean of T
    ("forward", {"T": T3}, [0, 0, 0], 2, -math.log((0.1 + 0.1 + 0.5) / 3)),
    ("forward", {"T": np.eye(3)}, [0, 0, 0], 1, math.log(3)),
]


@pytest.mark.parametrize("loss,params,z,y,expected", HAND_CASES)
def test_loss_values_hand_computed(loss, params, z, y, expected):
    assert kernel_row_loss(loss, params, z, y) == pytest.approx(expected, rel=1e-12, abs=1e-14)


def test_loss_value_at_unequal_logits():
    # z = (ln 2 rounded to float32, 0): p_y computed by hand from the rounded logit
    z0 = float(np.float32(math.log(2)))
    py = math.exp(z0) / (math.exp(z0) + 1)
    assert kernel_row_loss("ce", {}, [z0, 0], 0) == pytest.approx(-math.log(py), rel=1e-12)
    assert kernel_row_loss("gce_trunc", {"q": 0.7, "k": 0.5}, [z0, 0], 0) == pytest.approx(
        (1 - py ** 0.7) / 0.7, rel=1e-12)
    # a badly wrong row: CE stays exact (log-sum-exp), no clipping of p_y
    assert kernel_row_loss("ce", {}, [0.0, 120.0], 0) == pytest.approx(120.0, rel=1e-12)


@pytest.mark.parametrize("n_classes", [3, 60])
def test_ce_fast_path_equals_generic_path(seed, n_classes):
    """CE has its own row pass (csrc/afl_member_impl.h: vectorised over a model's rows,
    polynomial exp, one log per several rows);
    SCE with alpha=1, beta=0 is the same loss through the generic libm path.  Objectives at
    random points (max_iter=0) and the models after a few L-BFGS steps must agree, with large
    logits and, at 60 classes with near-uniform models, products of softmax denominators
    beyond 1e280 within a row block, which must be folded into the sum of logs."""
    rng = np.random.default_rng([seed, n_classes])
    n, d, B = 700, 7, 5
    Xa = layout.augment_rows(rng.standard_normal((n, d)).astype(np.float32) * 3)
    y = rng.integers(0, n_classes, n).astype(np.int32)
    member = (rng.random((n, B)) < 0.9).astype(np.uint8)
    start = rng.standard_normal((B, d + 1, n_classes)) * np.array([2, 2, 2, 1e-3, 1e-3])[:, None, None]
    sce = resolve_loss("sce", {"alpha": 1.0, "beta": 0.0, "A": -4.0}, n_classes)
    for max_iter, rtol in ((0, 1e-12), (5, 1e-7)):
        opts = solver.SolverOptions(max_iter=max_iter, tol=0.0)
        c_fast, i_fast = solver.train_models(Xa, y, member, n_classes, loss="ce", coef=start.copy(),
                                             options=opts)
        c_gen, i_gen = solver.train_models(Xa, y, member, n_classes, loss=sce, coef=start.copy(),
                                           options=opts)
        np.testing.assert_allclose(i_fast["objective"], i_gen["objective"], rtol=rtol)
        np.testing.assert_allclose(c_fast, c_gen, rtol=rtol, atol=rtol * np.abs(c_gen).max())


# --- b. finite differences of the compiled values vs the analytic gradient -------------------
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_logit_gradient_matches_finite_differences(loss, seed):
    rng = np.random.default_rng(seed)
    params = LOSS_CASES[loss]
    h = 2.0 ** -10
    for _ in range(3):
        # logits on a grid of 1/64, exact in float32, as are z +- h
        z = np.round(rng.normal(scale=1.0, size=3) * 64) / 64
        y = int(rng.integers(3))
        if loss == "gce_trunc" and abs(_softmax(z)[y] - params["k"]) < 0.05:
            continue  # the truncation point is a kink: no derivative there
        fd = np.empty(3)
        for c in range(3):
            zp, zm = z.copy(), z.copy()
            zp[c] += h
            zm[c] -= h
            fd[c] = (kernel_row_loss(loss, params, zp, y) - kernel_row_loss(loss, params, zm, y)) / (2 * h)
        np.testing.assert_allclose(fd, analytic_logit_grad(loss, params, z, y), rtol=1e-4, atol=1e-6)


# --- c. kernel optimum is a stationary point of the float64 objective -------------------------
def _objective(W, Xc, y, name, params, l2):
    Z = Xc @ W[:-1] + W[-1]
    return reference_loss(name, params, Z, y).mean() + 0.5 * l2 * np.sum(W[:-1] ** 2)


def _fd_gradient(W, Xc, y, name, params, l2, h=1e-6):
    g = np.empty_like(W)
    for idx in np.ndindex(W.shape):
        Wp, Wm = W.copy(), W.copy()
        Wp[idx] += h
        Wm[idx] -= h
        g[idx] = (_objective(Wp, Xc, y, name, params, l2) - _objective(Wm, Xc, y, name, params, l2)) / (2 * h)
    return g


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_kernel_optimum_is_stationary(loss, seed, make_problem):
    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 240, 4, 3, signal=1.5)
    y = y.astype(np.int32)
    params = dict(LOSS_CASES[loss])
    spec = resolve_loss(loss, params, 3)
    center = X.mean(axis=0, dtype=np.float64).astype(np.float32)
    Xa = layout.augment_rows(X, center)
    Xc = Xa[:, :-1].astype(np.float64)
    member = np.ones((len(y), 1), np.uint8)
    C = 1.0
    opts = solver.SolverOptions(tol=1e-7, ftol=0.0, max_iter=2000)
    coef = None
    for stage in ([spec.warmup] if needs_warmup(spec) else []) + [spec]:
        coef, info = solver.train_models(Xa, y, member, 3, C=C, loss=stage, coef=coef, options=opts)
    assert solver.STATUS_NAMES[int(info["status"][0])] in ("converged", "line_search")
    l2 = 1.0 / (C * len(y))
    # the kernel's weights leave the last class at zero (the reference-class form); the
    # symmetric objective's optimum is the same model with zero-mean rows
    assert not coef[0][:, -1].any()
    W = centered(coef[0])
    if loss == "gce_trunc":
        py = _softmax(Xc @ W[:-1] + W[-1])[np.arange(len(y)), y]
        assert np.min(np.abs(py - params["k"])) > 1e-5  # no row on the kink
        assert 0 < np.mean(py <= params["k"]) < 0.5      # some rows pruned, most kept
    g_opt = np.abs(_fd_gradient(W, Xc, y, loss, params, l2)).max()
    g_zero = np.abs(_fd_gradient(np.zeros_like(W), Xc, y, "ce", {}, l2)).max()
    assert g_zero > 0.05
    assert g_opt < 2e-4, f"{loss}: max |gradient| {g_opt:.2e} at the kernel's solution"
    # and the kernel's reported objective is the float64 objective there
    assert info["objective"][0] == pytest.approx(_objective(W, Xc, y, loss, params, l2), rel=1e-5)


# --- d. CE equals scikit-learn ------------------------------------------------------------------
@pytest.mark.parametrize("n_classes", [2, 4])
def test_ce_matches_sklearn(n_classes, seed, make_problem):
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 400, 6, n_classes)
    ours = RobustLogisticRegression(loss="ce", C=0.5, tol=1e-6).fit(X, y)
    ref = LogisticRegression(C=0.5, tol=1e-10, max_iter=10000).fit(X.astype(np.float64), y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-3, atol=2e-4)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-3, atol=2e-3)
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-4)


# --- e. float32 / float64 / read-only memmap, 1 and 2 threads -----------------------------------
@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_dtype_memmap_and_threads_give_the_same_model(loss, seed, make_problem, readonly_memmap):
    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 600, 5, 3)
    params = {k: v for k, v in LOSS_CASES[loss].items()}
    if loss == "gce_trunc":
        params["k"] = 0.2  # below 1/3: trains from zeros without the warm start
    fits = []
    for data, n_jobs in ((X, 1), (X.astype(np.float64), 1), (readonly_memmap(X), 1), (readonly_memmap(X), 2)):
        m = RobustLogisticRegression(loss=loss, n_jobs=n_jobs, **params).fit(data, y)
        fits.append(m)
    assert fits[0].n_iter_[0] > 0
    for m in fits[1:]:
        np.testing.assert_array_equal(m.coef_, fits[0].coef_)
        np.testing.assert_array_equal(m.intercept_, fits[0].intercept_)


# --- f. user losses -----------------------------------------------------------------------------
def test_user_numba_gce_equals_builtin(seed, make_problem):
    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 800, 6, 4, signal=0.8)
    y_noisy = np.where(rng.random(len(y)) < 0.3, rng.integers(0, 4, len(y)), y)
    for q in (0.7, 0.4):
        builtin = RobustLogisticRegression(loss="gce", q=q).fit(X, y_noisy)
        user = RobustLogisticRegression(loss=numba_gce, q=q).fit(X, y_noisy)
        assert builtin.n_iter_[0] > 5
        np.testing.assert_allclose(user.coef_, builtin.coef_, rtol=0, atol=1e-6)
        np.testing.assert_allclose(user.intercept_, builtin.intercept_, rtol=0, atol=1e-6)
    # the default q of the user loss is its own (0.7), as for the built-in
    a = RobustLogisticRegression(loss=numba_gce).fit(X, y_noisy)
    b = RobustLogisticRegression(loss="gce").fit(X, y_noisy)
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=0, atol=1e-6)


def test_user_loss_python_side():
    loss, w = numba_gce(0.25)
    assert loss == pytest.approx((1 - 0.25 ** 0.7) / 0.7, rel=1e-14)
    assert w == pytest.approx(0.25 ** 0.7, rel=1e-14)
    assert numba_gce(0.25, q=0.5)[0] == pytest.approx(1.0, rel=1e-14)
    assert numba_gce.check_weight() < 1e-6
    with pytest.raises(ValueError, match="differs"):
        wrong_weight.check_weight()
    spec = resolve_loss(numba_gce, {"q": 0.3}, 5)
    assert spec.code == 6 and spec.address == numba_gce.address != 0
    assert spec.params.tolist() == [0.3]
    with pytest.raises(ValueError, match="does not take parameter 'k'"):
        resolve_loss(numba_gce, {"k": 0.3}, 5)
    # compiled once: the object keeps its cfunc, copies share it
    import copy

    assert copy.deepcopy(numba_gce) is numba_gce


def test_user_loss_from_existing_cfunc_and_bad_signature():
    import numba

    cf = numba.cfunc("float64(float64, CPointer(float64), CPointer(float64))")(numba_gce.cfunc._pyfunc)
    assert UserLoss(cf, params={"q": 0.7})(0.5) == numba_gce(0.5)
    bad = numba.cfunc("float64(float64)")(lambda p: p)
    with pytest.raises(TypeError, match="signature"):
        UserLoss(bad)


def test_user_loss_in_aflite(seed, make_problem):
    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 400, 5, 2, signal=2.0)
    kw = dict(target_size=300, train_size=200, n_partitions=8, slice_size=20, tau=0.5,
              random_state=seed, progress=False, n_jobs=1)
    a = aflite(X, y, loss="gce", loss_params={"q": 0.5}, **kw)
    b = aflite(X, y, loss=numba_gce, loss_params={"q": 0.5}, **kw)
    assert len(a.removed) > 0
    np.testing.assert_array_equal(a.keep, b.keep)
    np.testing.assert_allclose(a.scores, b.scores, atol=1e-12, equal_nan=True)


def test_bad_loss_specs_are_refused():
    with pytest.raises(ValueError, match="unknown loss"):
        resolve_loss("hinge")
    with pytest.raises(ValueError, match="q must be"):
        resolve_loss("gce", {"q": 0.0})
    with pytest.raises(ValueError, match="does not take"):
        resolve_loss("ce", {"q": 0.5})
    with pytest.raises(ValueError, match="shape"):
        resolve_loss("forward", {"T": np.eye(2)}, 3)
    with pytest.raises(ValueError, match="all zero"):
        resolve_loss("forward", {"T": [[0.0, 1.0], [0.0, 1.0]]}, 2)
    with pytest.raises(ValueError, match="address"):
        resolve_loss(LossSpec("mine", 6, np.zeros(1), 0))
    with pytest.raises(ValueError, match="already resolved"):
        resolve_loss(resolve_loss("gce"), {"q": 0.5})


# --- g. aflite with GCE; truncated GCE's warm start ---------------------------------------------
def test_aflite_runs_with_gce(seed, make_problem):
    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 500, 6, 3, signal=1.5)
    res = aflite(X, y, target_size=350, train_size=250, n_partitions=8, slice_size=25, tau=0.5,
                 loss="gce", random_state=seed, progress=False, n_jobs=1)
    assert 350 <= len(res.keep) < 500
    assert len(res.keep) + len(res.removed) == 500
    assert len(res.history) >= 1


def test_gce_trunc_needs_its_warmup(seed, make_problem):
    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 300, 5, 3, signal=1.5)
    spec = resolve_loss("gce_trunc", {"q": 0.7, "k": 0.5}, 3)
    assert needs_warmup(spec) and spec.warmup.name == "gce" and spec.warmup.params.tolist() == [0.7]
    assert not needs_warmup(resolve_loss("gce"))
    Xa = layout.augment_rows(X, X.mean(axis=0))
    member = np.ones((len(y), 1), np.uint8)
    yy = y.astype(np.int32)
    no_warmup = dataclasses.replace(spec, warmup=None)
    cold, info = solver.train_models(Xa, yy, member, 3, loss=no_warmup)
    # from zeros every p_y = 1/3 <= k: zero gradient, the solver cannot leave the start
    assert info["n_iter"][0] == 0 and not np.any(cold)
    warm, _ = solver.train_models(Xa, yy, member, 3, loss=spec.warmup)
    warm, info = solver.train_models(Xa, yy, member, 3, loss=spec, coef=warm)
    acc = np.mean(np.argmax(prediction.predict_proba(Xa, warm[0]), axis=1) == y)
    assert acc > 0.6
    # train_models applies the warm-up itself to models that start at zero
    auto, _ = solver.train_models(Xa, yy, member, 3, loss=spec)
    np.testing.assert_array_equal(auto, warm)


# --- h. the noise-robust experiment -------------------------------------------------------------
def test_noise_matrices_and_corruption(seed):
    from aflite_fast.experiments.noise_robust import corrupt_labels, noise_matrix

    for kind in ("uniform", "pairflip"):
        T = noise_matrix(kind, 0.4, 5)
        np.testing.assert_allclose(T.sum(axis=1), 1.0)
        np.testing.assert_allclose(np.diag(T), 0.6)
        rng = np.random.default_rng(seed)
        y = np.repeat(np.arange(5), 4000)
        yn = corrupt_labels(y, T, rng)
        emp = np.array([np.bincount(yn[y == c], minlength=5) / 4000 for c in range(5)])
        np.testing.assert_allclose(emp, T, atol=0.03)
    assert noise_matrix("pairflip", 0.4, 3)[2, 0] == pytest.approx(0.4)
    with pytest.raises(ValueError):
        noise_matrix("uniform", 1.0, 3)


def test_noise_robust_cli_writes_outputs(tmp_path, output_files):
    from aflite_fast.cli import _noise_robust

    parser = argparse.ArgumentParser(prog="aflite-fast")
    _noise_robust.add_parser(parser.add_subparsers())
    out = tmp_path / "nr"
    args = parser.parse_args(["noise-robust", "--out", str(out), "--seeds", "2", "--losses", "ce",
                              "gce", "forward", "--noise", "uniform:0.4", "pairflip:0.4", "--quiet",
                              "--n-jobs", "1"])
    assert args.func(args) == 0
    assert output_files(out) == ["figure.png", "table.csv", "table.md"]
    lines = (out / "table.csv").read_text().splitlines()
    assert len(lines) == 1 + 2 * 3
    rows = {(l.split(",")[1], l.split(",")[3]): float(l.split(",")[7]) for l in lines[1:]}
    # pair-flip 40% with the true T: forward correction recovers most of the clean accuracy
    assert rows[("pairflip", "forward")] > rows[("pairflip", "ce")]
    assert "| uniform 40% |" in (out / "table.md").read_text()
    # through the real entry point: a missing dataset is exit code 2 and no output
    from aflite_fast.cli import main

    assert main(["noise-robust", "--out", str(tmp_path / "x"), "--datasets", "fashion-mnist",
                 "--fashion-mnist-dir", str(tmp_path), "--quiet"]) == 2
    assert not (tmp_path / "x").exists()
