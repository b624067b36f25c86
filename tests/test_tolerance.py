"""The default tolerance ``tol="auto"``: each phase's from its sizes.

a. ``phase_tol``: 1e-4 where a phase's models train on fewer rows (items) than they have
   columns, 3e-4 where on as many or more; a number is used as given; anything else is refused
   with a message naming ``tol``, by every entry point.
b. ``aflite`` with ``tol="auto"`` trains each phase at the tolerance ``phase_tol`` names: a run
   whose training sets fall below the columns is the run of ``tol=3e-4`` up to that phase, and
   every phase from there on is trained at 1e-4; ``predictability`` (one phase) is the run of
   1e-4 on fewer rows than columns and of 3e-4 on more.
c. ``AFLite`` and ``predictability`` take ``"auto"`` as their default; ``oof_predict_proba``
   (folds too) and ``RobustLogisticRegression`` accept it, with the same rule.
"""
import numpy as np
import pytest

from aflite_fast import AFLite, RobustLogisticRegression, aflite, oof_predict_proba, predictability
from aflite_fast.core import solver
from aflite_fast.filtering.problem import Problem


def test_phase_tol_follows_the_sizes():
    assert solver.phase_tol("auto", 100, 101) == solver.TOL_FEW_ROWS == 1e-4
    assert solver.phase_tol("auto", 101, 101) == solver.TOL_MANY_ROWS == 3e-4
    assert solver.phase_tol("auto", 5000, 769) == 3e-4
    for tol in (0.0, 1e-6, 1e-3, 2):
        assert solver.phase_tol(tol, 10, 1000) == tol and solver.phase_tol(tol, 1000, 10) == tol


@pytest.mark.parametrize("tol", ["fast", "AUTO", -1e-4, float("nan"), float("inf"), True, None])
def test_a_bad_tol_is_refused_by_name(make_problem, tol):
    X, y = make_problem(np.random.default_rng(1), 120, 8, 2)
    with pytest.raises(ValueError, match="tol must be 'auto' or a non-negative number"):
        solver.check_tol(tol)
    with pytest.raises(ValueError, match="tol must be"):
        predictability(X, y, n_partitions=4, train_size=0.5, tol=tol)
    with pytest.raises(ValueError, match="tol must be"):
        aflite(X, y, target_size=100, n_partitions=4, train_size=0.5, slice_size=10, tol=tol, progress=False)


def test_the_defaults_are_auto():
    assert AFLite(target_size=10).get_params()["tol"] == "auto"
    assert predictability.__kwdefaults__["tol"] == "auto"
    assert aflite.__kwdefaults__["tol"] == "auto"


def _spy_tols(monkeypatch):
    """Record the tolerance every phase is trained at (what reaches the backend)."""
    seen = []
    score = Problem.score

    def spy(self, codes, active, train_pos, **kw):
        seen.append((train_pos.shape[1], self.phase_tol(train_pos.shape[1])))
        return score(self, codes, active, train_pos, **kw)

    monkeypatch.setattr(Problem, "score", spy)
    return seen


def _same_phase(a, b):
    return (a.n_active == b.n_active and a.n_removed == b.n_removed and a.mean_iterations == b.mean_iterations
            and a.score_hist == b.score_hist)


def test_a_run_switches_where_its_training_sets_fall_below_the_columns(make_problem, monkeypatch):
    # 60 features and the ones column: t = 120, 110, ..., 60 rows; the last phase has t < 61
    X, y = make_problem(np.random.default_rng(7), 240, 60, 2, signal=0.6)
    run = dict(target_size=100, n_partitions=8, train_size=0.5, slice_size=20, tau=0.0, random_state=3,
               n_jobs=1, progress=False, chance_check=False)
    seen = _spy_tols(monkeypatch)
    auto = aflite(X, y, **run)
    assert [t for t, _ in seen] == [120, 110, 100, 90, 80, 70, 60]
    assert [tol for _, tol in seen] == [3e-4] * 6 + [1e-4]
    loose = aflite(X, y, tol=3e-4, **run)
    tight = aflite(X, y, tol=1e-4, **run)
    assert all(_same_phase(a, b) for a, b in zip(auto.history[:6], loose.history[:6]))
    # the last phase, trained at 1e-4 from the same start, takes more steps than at 3e-4
    assert auto.history[6].mean_iterations > loose.history[6].mean_iterations
    assert not all(_same_phase(a, b) for a, b in zip(auto.history[:6], tight.history[:6]))


@pytest.mark.parametrize("d,tol", [(300, 1e-4), (40, 3e-4)])
def test_predictability_is_the_run_of_the_tolerance_of_its_sizes(make_problem, d, tol):
    X, y = make_problem(np.random.default_rng(d), 400, d, 3, signal=0.5)
    kw = dict(n_partitions=8, train_size=0.5, random_state=2, n_jobs=1)
    auto, fixed = predictability(X, y, **kw), predictability(X, y, tol=tol, **kw)
    other = predictability(X, y, tol=4e-4 - tol, **kw)  # 3e-4 where 1e-4 applies and the reverse
    for name in ("scores", "prob_label", "n_iter"):
        np.testing.assert_array_equal(getattr(auto, name), getattr(fixed, name))
    assert not np.array_equal(auto.n_iter, other.n_iter)


@pytest.mark.parametrize("d,tol", [(450, 1e-4), (20, 3e-4)])  # 400 rows, folds of 300: fewer / more than d + 1
def test_folds_and_the_estimator_follow_the_same_rule(make_problem, d, tol):
    X, y = make_problem(np.random.default_rng(d + 1), 400, d, 3, signal=0.5)
    other = 4e-4 - tol
    oof = {t: oof_predict_proba(X, y, cv=4, random_state=0, n_jobs=1, tol=t) for t in ("auto", tol, other)}
    np.testing.assert_array_equal(oof["auto"], oof[tol])
    assert not np.array_equal(oof["auto"], oof[other])
    est = {t: RobustLogisticRegression(tol=t, n_jobs=1).fit(X, y).coef_ for t in ("auto", tol, other)}
    np.testing.assert_array_equal(est["auto"], est[tol])
    assert not np.array_equal(est["auto"], est[other])
