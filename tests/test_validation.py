"""Bad input gets a ValueError naming the problem; the estimators follow scikit-learn's API.

a. ``aflite`` / ``predictability``: X and y lengths differ, NaN or inf in X (also in a
   float16 memmap), train_size >= rows, tau outside [0, 1], a single class, a class with one
   row, X not 2-D, an unreadable max_memory.  Each message names the offending input.
b. ``AFLite``: get_params / set_params / clone, fit_resample returns the kept rows and sets
   sample_indices_, predictability_ and history_.
c. ``RobustLogisticRegression``: works inside cross_val_score and clone, and predicts what
   scikit-learn's LogisticRegression predicts.
"""
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import cross_val_score
from threadpoolctl import threadpool_limits

from aflite_fast import AFLite, RobustLogisticRegression, aflite, predictability

N = 300


@pytest.fixture
def data(seed, make_problem):
    return make_problem(np.random.default_rng([seed, 30]), N, 6, 3, signal=1.0)


def _run(X, y, **kw):
    args = dict(target_size=100, n_partitions=4, train_size=100, slice_size=50, tau=0.75,
                random_state=0, n_jobs=1, progress=False)
    args.update(kw)
    return aflite(X, y, **args)


def test_valid_call_runs(data):
    # the reference call of this file works, so every failure below is due to the one change
    X, y = data
    res = _run(X, y)
    assert res.keep.size >= 100


@pytest.mark.parametrize("n_labels", [N - 1, N + 1])
def test_lengths_differ(data, n_labels):
    X, y = data
    y = np.resize(y, n_labels)
    with pytest.raises(ValueError, match=rf"X and y have different lengths: {N} rows in X, {n_labels} labels"):
        _run(X, y)
    with pytest.raises(ValueError, match="different lengths"):
        predictability(X, y, n_partitions=4, train_size=100)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_nonfinite_in_X(data, bad, dtype):
    X, y = data
    X = X.astype(dtype)
    X[137, 4] = bad
    with pytest.raises(ValueError, match=r"NaN or inf \(first at row 137\)"):
        _run(X, y)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nonfinite_in_float16_memmap(data, readonly_memmap, bad):
    X, y = data
    X16 = X.astype(np.float16)
    X16[N - 1, 0] = bad  # the last row: the whole file is checked, not a prefix
    with pytest.raises(ValueError, match=rf"NaN or inf \(first at row {N - 1}\)"):
        _run(readonly_memmap(X16), y)
    # float16 overflow is an inf too: 70000 does not fit in float16
    big = X.astype(np.float64)
    big[5, 2] = 7e4
    with np.errstate(over="ignore"):
        big16 = big.astype(np.float16)
    with pytest.raises(ValueError, match=r"NaN or inf \(first at row 5\)"):
        _run(readonly_memmap(big16), y)


@pytest.mark.parametrize("train_size", [N, N + 5])
def test_train_size_not_below_rows(data, train_size):
    X, y = data
    with pytest.raises(ValueError, match=rf"train_size \({train_size}\) must be smaller than the number of rows \({N}\)"):
        _run(X, y, train_size=train_size)


@pytest.mark.parametrize("train_size", [0, -3, 0.0, 1.0, 1.5, "half", True])
def test_train_size_invalid(data, train_size):
    X, y = data
    with pytest.raises(ValueError, match="train_size"):
        _run(X, y, train_size=train_size)


@pytest.mark.parametrize("tau", [-0.01, 1.01, np.nan, "0.5", None])
def test_tau_outside_unit_interval(data, tau):
    X, y = data
    with pytest.raises(ValueError, match=r"tau must be in \[0, 1\]"):
        _run(X, y, tau=tau)


@pytest.mark.parametrize("tau", [0.0, 1.0])
def test_tau_bounds_are_allowed(data, tau):
    X, y = data
    res = _run(X, y, tau=tau, target_size=250)
    assert res.keep.size >= 250


def test_single_class(data):
    X, _ = data
    with pytest.raises(ValueError, match="only one class"):
        _run(X, np.full(N, "only"))


def test_class_with_one_row(data):
    X, y = data
    y = y.copy()
    y[17] = 9
    with pytest.raises(ValueError, match=r"class 9 has 1 row\(s\)"):
        _run(X, y)


@pytest.mark.parametrize("shape", [(N,), (N, 3, 2, 1), ()])
def test_X_not_2d(shape):
    # (a 3-D X is multiple choice: tests/test_multiple_choice.py)
    X = np.ones(shape, dtype=np.float32)
    y = np.arange(N) % 2
    with pytest.raises(ValueError, match=r"X must be 2-D"):
        _run(X, y)


def test_X_of_wrong_dtype(data):
    X, y = data
    with pytest.raises(ValueError, match="Complex data not supported"):
        _run(X.astype(np.complex64), y)
    with pytest.raises(ValueError, match="X must be float16, float32 or float64"):
        _run(X.astype("datetime64[s]"), y)


@pytest.mark.parametrize("max_memory", ["lots", "2 XB", "-1GB", "0", 0, -5, "GB"])
def test_bad_max_memory(data, max_memory):
    X, y = data
    with pytest.raises(ValueError, match="max_memory|memory size"):
        _run(X, y, max_memory=max_memory)


def test_good_max_memory_strings(data):
    X, y = data
    a = _run(X, y, max_memory="64MB")
    b = _run(X, y, max_memory="1.5GiB")
    assert np.array_equal(a.keep, b.keep)


@pytest.mark.parametrize("name,value", [("n_partitions", 0), ("slice_size", 0), ("target_size", -1),
                                        ("C", 0.0), ("C", -1.0), ("random_state", -1), ("n_jobs", 0)])
def test_other_parameters(data, name, value):
    X, y = data
    with pytest.raises(ValueError, match=name):
        _run(X, y, **{name: value})


# --------------------------------------------------------------------------- estimators

def test_aflite_estimator_params():
    est = AFLite(target_size=100, train_size=0.4, tau=0.8, random_state=3)
    params = est.get_params()
    assert params["target_size"] == 100 and params["train_size"] == 0.4 and params["tau"] == 0.8
    assert params["n_partitions"] == 64 and params["random_state"] == 3
    assert est.set_params(slice_size=20, tau=0.9) is est
    assert est.slice_size == 20 and est.get_params()["tau"] == 0.9
    copy = clone(est)
    assert copy is not est and copy.get_params() == est.get_params()
    with pytest.raises(ValueError):
        est.set_params(no_such_parameter=1)


def test_aflite_fit_resample(data):
    X, y = data
    names = np.array(["a", "b", "c"])[y]
    est = AFLite(target_size=200, n_partitions=4, train_size=100, slice_size=50, random_state=1, n_jobs=1)
    X_kept, y_kept = est.fit_resample(X, names)
    idx = est.sample_indices_
    assert np.all(np.diff(idx) > 0) and idx.size >= 200
    assert np.array_equal(X_kept, X[idx]) and np.array_equal(y_kept, names[idx])
    assert est.predictability_.shape == (N,) and len(est.history_) >= 1
    # the estimator is the function underneath
    ref = _run(X, y, target_size=200, train_size=100, random_state=1)
    assert np.array_equal(idx, ref.keep)
    assert np.array_equal(est.predictability_, ref.scores, equal_nan=True)


def test_aflite_fit_resample_memmap(data, readonly_memmap):
    X, y = data
    est = AFLite(target_size=200, n_partitions=4, train_size=100, slice_size=50, random_state=1, n_jobs=1)
    X_kept, y_kept = est.fit_resample(readonly_memmap(X), y)
    assert isinstance(X_kept, np.ndarray) and np.array_equal(X_kept, X[est.sample_indices_])


def test_robust_lr_in_cross_val_score_and_clone(data):
    X, y = data
    est = RobustLogisticRegression(C=0.5, tol=1e-6, n_jobs=1)
    twin = clone(est)
    assert twin.get_params() == est.get_params() and twin.C == 0.5
    ours = cross_val_score(est, X, y, cv=3)
    with threadpool_limits(1):  # scipy's lbfgs with threaded BLAS crawls on this loaded machine
        ref = cross_val_score(LogisticRegression(C=0.5, tol=1e-8, max_iter=5000), X.astype(np.float64), y, cv=3)
    assert ours.shape == (3,) and np.all(ours > 1.0 / 3)
    np.testing.assert_allclose(ours, ref, atol=2.0 / N)  # at most a row per fold may differ
    fitted = clone(est).fit(X, np.array(["x", "y", "z"])[y])
    assert list(fitted.classes_) == ["x", "y", "z"]
    assert fitted.coef_.shape == (3, X.shape[1]) and fitted.intercept_.shape == (3,)
    assert set(fitted.predict(X)) <= {"x", "y", "z"}


def test_robust_lr_loss_params_survive_clone(data):
    X, y = data
    est = RobustLogisticRegression(loss="gce", q=0.7, n_jobs=1)
    twin = clone(est)
    assert twin.get_params()["q"] == 0.7 and twin.loss == "gce"
    twin.set_params(q=0.5)
    assert twin.get_params()["q"] == 0.5 and est.get_params()["q"] == 0.7
    proba = twin.fit(X, y).predict_proba(X)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, atol=1e-6)


def test_robust_lr_rejects_bad_input(data):
    X, y = data
    with pytest.raises(ValueError, match="C must be a positive number"):
        RobustLogisticRegression(C=0).fit(X, y)
    with pytest.raises(ValueError, match="different lengths"):
        RobustLogisticRegression().fit(X, y[:-1])
    fitted = RobustLogisticRegression(n_jobs=1).fit(X, y)
    with pytest.raises(ValueError, match="features"):
        fitted.predict(X[:, :-1])
    with pytest.raises(ValueError, match="unknown loss"):
        RobustLogisticRegression(loss="hinge").fit(X, y)


@pytest.mark.parametrize("text,nbytes", [
    ("1G", 10**9), ("2GB", 2 * 10**9), ("500M", 500 * 10**6), ("500mb", 500 * 10**6), ("64K", 64000),
    ("1GiB", 2**30), ("1Gi", 2**30), ("1gib", 2**30), ("512KiB", 512 * 2**10), ("2TiB", 2 * 2**40),
    ("1.5G", 1_500_000_000), ("1073741824", 2**30), ("100B", 100), (" 3 MiB ", 3 * 2**20), ("1e9", 10**9)])
def test_memory_units(text, nbytes):
    """Bare letters and xB are powers of 1000, xi and xiB powers of 1024 (aflite_fast.runtime.memory)."""
    from aflite_fast.runtime.memory import parse_memory

    assert parse_memory(text) == nbytes


@pytest.mark.parametrize("text", ["1iB", "1GiBB", "G", "1 XB", "nan", "inf", "1e400", "-2G", "0.1B", ""])
def test_memory_units_rejected(text):
    from aflite_fast.runtime.memory import parse_memory

    with pytest.raises(ValueError, match="max_memory|memory size"):
        parse_memory(text)
