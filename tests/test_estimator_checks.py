"""RobustLogisticRegression follows scikit-learn's estimator contract (issue 14, item 5).

a. Every check of ``sklearn.utils.estimator_checks.parametrize_with_checks`` runs on the
   default estimator and on a noise-robust loss with explicit parameters.  Checks that cannot
   apply are listed in ``EXPECTED_FAILED`` with the reason beside them (none today); a check
   sklearn itself skips (array API input without SCIPY_ARRAY_API) shows as skipped.
b. The loss parameters are explicit constructor parameters, exactly the registry's
   (``aflite_fast.losses.PARAMETER_NAMES``), so get_params / set_params / clone are
   scikit-learn's own: unknown names are rejected, clone keeps a transition matrix, a
   parameter the loss does not take is an error at fit, and one given twice too.
c. NotFittedError before fit; NaN or inf, or another width, at predict raise ValueError.
"""
import inspect

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from aflite_fast import RobustLogisticRegression
from aflite_fast.losses import LOSS_PARAMETERS, PARAMETER_NAMES
from aflite_fast.user_loss import user_loss

#: Checks expected to fail, by estimator: {check name: reason}.  Empty: every check applies
#: and passes.
EXPECTED_FAILED = {}


def expected_failed(estimator):
    return EXPECTED_FAILED


@parametrize_with_checks([RobustLogisticRegression(n_jobs=1),
                          RobustLogisticRegression(loss="sce", alpha=0.5, beta=0.5, n_jobs=1)],
                         expected_failed_checks=expected_failed)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


def test_loss_parameters_are_the_registry_s(seed, make_problem):
    signature = inspect.signature(RobustLogisticRegression)
    keyword_only = [n for n, p in signature.parameters.items() if p.kind is p.KEYWORD_ONLY]
    assert keyword_only == [*PARAMETER_NAMES, "loss_params"]
    assert not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    assert set(PARAMETER_NAMES) == {name for params in LOSS_PARAMETERS.values() for name in params}
    est = RobustLogisticRegression(loss="gce", q=0.5)
    assert est.get_params()["q"] == 0.5 and est.get_params()["k"] is None
    with pytest.raises(ValueError, match="Invalid parameter 'gamma'"):
        est.set_params(gamma=2.0)
    T = np.array([[0.8, 0.2], [0.3, 0.7]])
    forward = clone(RobustLogisticRegression(loss="forward", T=T))
    assert forward.T is not T and np.array_equal(forward.T, T)
    X, y = make_problem(np.random.default_rng([seed, 5]), 120, 4, 2)
    assert forward.set_params(n_jobs=1).fit(X, y).predict(X).shape == (120,)


def test_loss_parameter_errors(seed, make_problem):
    X, y = make_problem(np.random.default_rng([seed, 6]), 60, 3, 2)
    with pytest.raises(ValueError, match=r"loss 'ce' does not take parameter\(s\) q"):
        RobustLogisticRegression(q=0.5).fit(X, y)
    with pytest.raises(ValueError, match=r"gce: q must be in \(0, 1\]"):
        RobustLogisticRegression(loss="gce", q=1.5).fit(X, y)
    with pytest.raises(TypeError, match="gce: q must be a real number, got 'high'"):
        RobustLogisticRegression(loss="gce", q="high").fit(X, y)
    with pytest.raises(ValueError, match="given twice"):
        RobustLogisticRegression(loss="gce", q=0.5, loss_params={"q": 0.6}).fit(X, y)
    with pytest.raises(TypeError, match="loss_params must be a dict"):
        RobustLogisticRegression(loss="gce", loss_params=[("q", 0.5)]).fit(X, y)
    with pytest.raises(ValueError, match="forward: pass the noise transition matrix T"):
        RobustLogisticRegression(loss="forward").fit(X, y)


def test_user_loss_parameters(seed, make_problem):
    X, y = make_problem(np.random.default_rng([seed, 7]), 80, 3, 2)
    a = RobustLogisticRegression(loss=_scaled_mae, loss_params={"scale": 3.0}, n_jobs=1).fit(X, y)
    b = clone(a).set_params(loss_params={"scale": 1.0}).fit(X, y)
    assert not np.array_equal(a.coef_, b.coef_)
    with pytest.raises(ValueError, match="does not take parameter 'q'"):
        RobustLogisticRegression(loss=_scaled_mae, q=0.5).fit(X, y)


@user_loss(params={"scale": 2.0})
def _scaled_mae(p_y, params, w_out):
    w_out[0] = params[0] * p_y
    return params[0] * (1.0 - p_y)


def test_unfitted_and_bad_predict_input(seed, make_problem):
    X, y = make_problem(np.random.default_rng([seed, 8]), 80, 3, 2)
    est = RobustLogisticRegression(n_jobs=1)
    for method in ("predict", "predict_proba", "decision_function"):
        with pytest.raises(NotFittedError):
            getattr(est, method)(X)
    est.fit(X, y)
    bad = X.copy()
    bad[41, 2] = np.nan
    for method in ("predict", "predict_proba", "decision_function"):
        with pytest.raises(ValueError, match=r"NaN or inf \(first at row 41\)"):
            getattr(est, method)(bad)
        with pytest.raises(ValueError, match="X has 2 features, but RobustLogisticRegression is expecting 3"):
            getattr(est, method)(X[:, :2])
