"""RobustLogisticRegression and AFLite follow scikit-learn's estimator contract.

a. Every check of ``sklearn.utils.estimator_checks.parametrize_with_checks`` runs on the
   default estimator and on a noise-robust loss with explicit parameters.  Checks that cannot
   apply are listed in ``EXPECTED_FAILED`` with the reason beside them (none today); a check
   sklearn itself skips (array API input without SCIPY_ARRAY_API) shows as skipped.
b. The loss parameters are explicit constructor parameters, exactly the registry's
   (``aflite_fast.core.losses.PARAMETER_NAMES``), so get_params / set_params / clone are
   scikit-learn's own: unknown names are rejected, clone keeps a transition matrix, a
   parameter the loss does not take is an error at fit, and one given twice too.
c. NotFittedError before fit; NaN or inf, or another width, at predict raise ValueError.
d. Feature names: scikit-learn's own ``check_dataframe_column_names_consistency`` (not among
   the checks ``parametrize_with_checks`` yields) passes, and a DataFrame whose columns are
   reordered at predict is refused, as LogisticRegression refuses it.  The checks that
   LogisticRegression passes and this estimator does not run are about parameters it does not
   have (``sample_weight``, ``class_weight``, ``sparsify``, scikit-learn's internal
   ``_parameter_constraints``): ``NOT_APPLICABLE`` lists them.
e. ``AFLite.fit_resample`` gives a DataFrame and a Series back for a DataFrame and a Series,
   so a later step selecting columns by name works; pandas stays optional (never imported by
   the package: DataFrames are recognised by their ``iloc``, as scikit-learn does).
"""
import inspect

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import parametrize_with_checks

from aflite_fast import RobustLogisticRegression
from aflite_fast.core.losses import LOSS_PARAMETERS, PARAMETER_NAMES
from aflite_fast.core.user_losses import user_loss

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


#: scikit-learn checks that LogisticRegression passes and this estimator does not run: each is
#: about a parameter or method it does not have.
NOT_APPLICABLE = {
    "check_sample_weights_*, check_all_zero_sample_weights_error, check_sample_weight_equivalence_*":
        "fit has no sample_weight",
    "check_class_weight_balanced_linear_classifier": "no class_weight parameter",
    "check_sparsify_coefficients": "no sparsify method (coefficients are dense by design)",
    "check_param_validation": "scikit-learn's internal _parameter_constraints; parameters are checked at fit",
}


def test_dataframe_column_names_as_scikit_learn_checks_them():
    pytest.importorskip("pandas")
    from sklearn.utils.estimator_checks import check_dataframe_column_names_consistency

    for estimator in (RobustLogisticRegression(n_jobs=1), RobustLogisticRegression(loss="gce", q=0.7, n_jobs=1)):
        check_dataframe_column_names_consistency(type(estimator).__name__, estimator)


def test_reordered_columns_at_predict_are_refused(seed):
    pd = pytest.importorskip("pandas")
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng([seed, 9])
    X = pd.DataFrame(rng.standard_normal((300, 4)) * [1.0, 3.0, 0.1, 2.0], columns=["w", "x", "y", "z"])
    y = (X["x"] - X["z"] > 0).astype(np.int64)
    reordered = X[["z", "y", "x", "w"]]
    for estimator in (LogisticRegression(), RobustLogisticRegression(n_jobs=1)):
        estimator.fit(X, y)
        assert estimator.feature_names_in_.tolist() == ["w", "x", "y", "z"]
        for method in ("predict", "predict_proba", "decision_function", "score"):
            args = (reordered, y) if method == "score" else (reordered,)
            with pytest.raises(ValueError, match="Feature names must be in the same order as they were in fit"):
                getattr(estimator, method)(*args)
    assert not hasattr(RobustLogisticRegression(n_jobs=1).fit(X.to_numpy(), y), "feature_names_in_")


def test_fit_resample_keeps_dataframes_and_series(seed):
    pd = pytest.importorskip("pandas")
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import StandardScaler

    from aflite_fast import AFLite

    rng = np.random.default_rng([seed, 10])
    values = rng.standard_normal((400, 3)).astype(np.float32)
    X = pd.DataFrame(values, columns=["a", "b", "c"], index=np.arange(1000, 1400))
    y = pd.Series(np.where(values[:, 0] + 0.5 * values[:, 1] > 0, "yes", "no"), index=X.index, name="label")
    sampler = AFLite(target_size=300, train_size=0.5, slice_size=40, n_partitions=16, random_state=0, n_jobs=1)
    X_kept, y_kept = sampler.fit_resample(X, y)
    keep = sampler.sample_indices_
    assert isinstance(X_kept, pd.DataFrame) and isinstance(y_kept, pd.Series)
    assert list(X_kept.columns) == ["a", "b", "c"] and y_kept.name == "label"
    assert X_kept.index.tolist() == (1000 + keep).tolist() and y_kept.index.equals(X_kept.index)
    np.testing.assert_array_equal(X_kept.to_numpy(), values[keep])
    # the same rows as for arrays, and a later step that selects columns by name works
    X_arr, y_arr = AFLite(**sampler.get_params()).fit_resample(values, y.to_numpy())
    np.testing.assert_array_equal(X_arr, values[keep]) and np.testing.assert_array_equal(y_arr, y_kept.to_numpy())
    assert isinstance(X_arr, np.ndarray) and isinstance(y_arr, np.ndarray)
    scaled = ColumnTransformer([("scale", StandardScaler(), ["a", "c"])]).fit_transform(X_kept)
    assert scaled.shape == (X_kept.shape[0], 2)


def test_filtering_path_works_without_pandas(child_process):
    """pandas stays optional: with it made unimportable, the estimators run on arrays (scikit-
    learn itself imports pandas when it is installed, so its absence is what can be tested)."""
    import subprocess
    import sys

    # a finder that refuses pandas, as when it is not installed: not sys.modules['pandas'] = None,
    # which scikit-learn 1.7 (the last for Python 3.10) reads as an imported pandas
    code = ("import sys\n"
            "class NoPandas:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.partition('.')[0] == 'pandas':\n"
            "            raise ImportError(\"No module named 'pandas'\")\n"
            "sys.meta_path.insert(0, NoPandas())\n"
            "import numpy as np\nfrom aflite_fast import AFLite, RobustLogisticRegression\n"
            "rng = np.random.default_rng(0)\nX = rng.standard_normal((200, 3)).astype(np.float32)\n"
            "y = (X[:, 0] > 0).astype(int)\n"
            "Xk, yk = AFLite(target_size=150, train_size=0.5, slice_size=20, n_partitions=8).fit_resample(X, y)\n"
            "pred = RobustLogisticRegression().fit(Xk, yk).predict(X)\n"
            "assert 'pandas' not in sys.modules\n"
            "print('OK', type(Xk).__name__, pred.shape[0])\n")
    proc = subprocess.run([sys.executable, "-c", code], **child_process, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "OK ndarray 200"
