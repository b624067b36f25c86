"""The Newton-CG solver of sparse cross-entropy models (``csrc/afl_sparse.h``, D).

a. It reaches scikit-learn's ``LogisticRegression`` optimum (multinomial, and two classes
   through the kernel's C) and the L-BFGS path's, within the solvers' tolerance, on small
   sparse problems.
b. A model's bits depend neither on the thread count nor on the other models of the call.
c. Warm starts: a model started at its solution stops at once.
d. A loss it cannot solve, or an unknown solver: one clear ValueError.
"""
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression

from aflite_fast.core import sparse_solver
from aflite_fast.core.solver import STATUS_NAMES, SolverOptions
from aflite_fast.phase.plan import kernel_C


def counts(n=600, d=400, n_classes=3, density=0.02, seed=0):
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=rng, format="csr", dtype=np.float64)
    X.data = np.ceil(X.data * 3)
    w = rng.normal(scale=2.0, size=(d, n_classes))
    y = np.argmax(X @ w + rng.gumbel(size=(n, n_classes)), axis=1)
    return X.astype(np.float32), y.astype(np.int32)


def sklearn_coef(X, y, C):
    """scikit-learn's optimum as the kernel's (d + 1, n_classes) weights, intercept last."""
    lr = LogisticRegression(C=C, tol=1e-12, max_iter=100_000).fit(X.astype(np.float64), y)
    if lr.coef_.shape[0] == 1:  # two classes: one weight vector w = w_1 - w_0, split evenly
        w = np.concatenate([lr.coef_[0], lr.intercept_])
        return np.stack([-w / 2, w / 2], axis=1)
    return np.vstack([lr.coef_.T, lr.intercept_[None]])


@pytest.mark.parametrize("n_classes", [2, 3])
def test_newton_reaches_the_sklearn_and_lbfgs_optimum(n_classes):
    X, y = counts(n_classes=n_classes)
    rows = sparse_solver.CSRRows(X)
    lists = [np.arange(400, dtype=np.int64), np.arange(100, 600, dtype=np.int64)]
    C = 0.5
    opts = SolverOptions(tol=1e-8)
    newton, ni = sparse_solver.train_sparse_models(rows, y, lists, n_classes, C=kernel_C(C, n_classes),
                                                   options=opts, solver="newton")
    lbfgs, li = sparse_solver.train_sparse_models(rows, y, lists, n_classes, C=kernel_C(C, n_classes),
                                                  options=opts, solver="lbfgs")
    # conjugate gradients without the diagonal preconditioner: another path, the same optimum
    plain, _ = sparse_solver.train_sparse_models(rows, y, lists, n_classes, C=kernel_C(C, n_classes),
                                                 options=SolverOptions(tol=1e-8, precondition=False), solver="newton")
    assert [STATUS_NAMES[s] for s in ni["status"]] == ["converged", "converged"]
    for j, lst in enumerate(lists):
        ref = sklearn_coef(X[lst], y[lst], C)
        if n_classes == 2:  # the kernel's two outputs are unique up to a shift common to both
            for coef in (newton[j], lbfgs[j], plain[j]):
                coef -= coef.mean(axis=1, keepdims=True)
        np.testing.assert_allclose(newton[j], ref, atol=1e-5)
        np.testing.assert_allclose(plain[j], ref, atol=1e-5)
        # the L-BFGS path evaluates float32 logits (its gradient exact to about 1e-6): it stops
        # farther from the optimum than Newton-CG's double logits
        assert np.abs(newton[j] - ref).max() <= np.abs(lbfgs[j] - ref).max()
    # the same minimum (L-BFGS's value from float32 logits: exact to about 1e-7 relative)
    np.testing.assert_allclose(ni["objective"], li["objective"], rtol=1e-7)


def test_newton_bits_do_not_depend_on_threads_or_other_models():
    X, y = counts(n=900, d=600)
    rows = sparse_solver.CSRRows(X)
    rng = np.random.default_rng(1)
    lists = [np.sort(rng.choice(900, 450, replace=False)).astype(np.int64) for _ in range(5)]
    kw = dict(C=1.0, options=SolverOptions(tol=1e-6), solver="newton")
    one, i1 = sparse_solver.train_sparse_models(rows, y, lists, 3, n_threads=1, **kw)
    two, i2 = sparse_solver.train_sparse_models(rows, y, lists, 3, n_threads=2, **kw)
    alone, ia = sparse_solver.train_sparse_models(rows, y, lists[3:4], 3, n_threads=1, **kw)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one[3], alone[0])
    for key in ("n_iter", "n_eval", "n_hvp", "objective"):
        np.testing.assert_array_equal(i1[key], i2[key])
        assert i1[key][3] == ia[key][0]


def test_warm_start_at_the_solution_stops_at_once():
    X, y = counts()
    rows = sparse_solver.CSRRows(X)
    lists = [np.arange(600, dtype=np.int64)]
    kw = dict(C=1.0, options=SolverOptions(tol=1e-6), solver="newton")
    coef, info = sparse_solver.train_sparse_models(rows, y, lists, 3, **kw)
    assert info["n_iter"][0] > 1
    again, info2 = sparse_solver.train_sparse_models(rows, y, lists, 3, coef=coef.copy(), **kw)
    assert info2["n_iter"][0] == 0 and STATUS_NAMES[info2["status"][0]] == "converged"
    np.testing.assert_array_equal(again, coef)


def test_newton_takes_cross_entropy_only_and_known_solvers():
    X, y = counts(n=50, d=20)
    rows = sparse_solver.CSRRows(X)
    lists = [np.arange(50, dtype=np.int64)]
    with pytest.raises(ValueError, match="solver='newton' takes the cross-entropy loss only, got loss 'gce'"):
        sparse_solver.train_sparse_models(rows, y, lists, 3, loss="gce", solver="newton")
    with pytest.raises(ValueError, match="solver must be one of auto, newton, lbfgs, got 'tron'"):
        sparse_solver.train_sparse_models(rows, y, lists, 3, solver="tron")
    with pytest.raises(ValueError, match="solver='newton' takes at most 64 classes, got 65"):
        sparse_solver.train_sparse_models(rows, np.arange(50, dtype=np.int32) % 65, lists, 65, solver="newton")
    assert sparse_solver.phase_solver("ce", None, 3) == "newton"
    assert sparse_solver.phase_solver("ce", None, 65) == "lbfgs"
    assert sparse_solver.phase_solver("gce", None, 3) == "lbfgs"


def test_columns_that_miss_a_used_column_are_refused():
    X, y = counts(n=50, d=20, density=0.3)
    rows = sparse_solver.CSRRows(X)
    lists = [np.arange(50, dtype=np.int64)]
    used = sparse_solver.model_column_sets(rows, lists)[0]
    with pytest.raises(ValueError, match="a model's rows use a column that is not among its columns"):
        sparse_solver.train_sparse_models(rows, y, lists, 3, solver="newton", columns=[used[1:]])
