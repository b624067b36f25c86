"""Every entry point goes through one problem step (aflite_fast/filtering/problem.py).

a. Inputs that ``aflite`` refuses (X with no variance, X scaled by 1e-12, NaN in X, a single
   class) are refused by ``predictability``, ``oof_predict_proba`` (folds and partitions),
   ``evaluate_filter`` and ``RobustLogisticRegression.fit`` with the same message.
b. The backend seam: ``backend=`` takes "local", "dask" or a backend object; anything else is a
   ValueError naming the argument, and a backend object gives the string's result.
"""
import numpy as np
import pytest

from aflite_fast import RobustLogisticRegression, aflite, evaluate_filter, oof_predict_proba, predictability
from aflite_fast.phase.backends import LocalBackend, make_backend

N, D = 400, 6


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, D)).astype(np.float32)
    y = (X[:, 0] + 0.5 * rng.standard_normal(N) > 0).astype(np.int64)
    return X, y


def _entry_points():
    # tol=1e-4: the others' default (aflite's is looser), which the refusal of a small scale names
    return {
        "aflite": lambda X, y: aflite(X, y, target_size=N // 2, train_size=0.5, n_partitions=4, progress=False,
                                      random_state=0, tol=1e-4),
        "predictability": lambda X, y: predictability(X, y, train_size=0.5, n_partitions=4, random_state=0,
                                                      tol=1e-4),
        "oof folds": lambda X, y: oof_predict_proba(X, y, cv=3, random_state=0),
        "oof partitions": lambda X, y: oof_predict_proba(X, y, n_partitions=4, random_state=0),
        "evaluate_filter": lambda X, y: evaluate_filter(X, y, np.arange(N // 2), random_state=0),
        "RobustLogisticRegression": lambda X, y: RobustLogisticRegression().fit(X, y),
    }


def _message(call, X, y):
    with pytest.raises(ValueError) as info:
        call(X, y)
    return str(info.value)


def _constant(X):
    return np.full_like(X, 3.0)


def _tiny(X):
    return X * np.float32(1e-12)


def _nan(X):
    X = X.copy()
    X[17, 2] = np.nan
    return X


@pytest.mark.parametrize("change", [_constant, _tiny, _nan], ids=["constant", "scaled by 1e-12", "NaN"])
def test_every_entry_point_refuses_what_aflite_refuses_with_its_message(change):
    X, y = _data()
    bad = change(X)
    calls = _entry_points()
    expected = _message(calls.pop("aflite"), bad, y)
    for name, call in calls.items():
        assert _message(call, bad, y) == expected, name
    for name, call in _entry_points().items():  # and each of them takes the unchanged X
        call(X, y)


def test_the_scale_refusal_names_its_cause():
    X, y = _data()
    assert "no variance" in _message(_entry_points()["oof folds"], _constant(X), y)
    assert "tol" in _message(_entry_points()["oof partitions"], _tiny(X), y)


def test_backend_argument():
    X, y = _data()
    with pytest.raises(ValueError, match="backend must be 'local', 'dask' or a backend object, got 'gpu'"):
        aflite(X, y, target_size=N // 2, train_size=0.5, backend="gpu", progress=False)
    assert isinstance(make_backend("local", n_jobs=1), LocalBackend)
    run = dict(target_size=N // 2, train_size=0.5, n_partitions=4, progress=False, random_state=0,
               chance_check=False)
    by_name = aflite(X, y, **run)
    with LocalBackend(n_jobs=1) as backend:
        by_object = aflite(X, y, backend=backend, **run)
    np.testing.assert_array_equal(by_name.keep, by_object.keep)
    np.testing.assert_array_equal(by_name.scores, by_object.scores)
