"""Solver status: counted per phase (history, report.json), warned about when a model did not
converge, and never reported when a model did not move from its start (float32 X x 1e12);
the permutation null's models are held to the same rule."""
import json
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from aflite_fast import RobustLogisticRegression, aflite, predictability
from aflite_fast.cli import main
from aflite_fast.core.solver import STATUS_NAMES
from aflite_fast.core.solver_status import status_counts, unmoved
from aflite_fast.phase import local

M = 6  # partitions
PARAMS = dict(target_size=150, n_partitions=M, train_size=100, slice_size=50, random_state=0)


@pytest.fixture
def data(make_problem, seed):
    return make_problem(np.random.default_rng(seed), 300, 6, 2)


def test_counts_and_unmoved():
    codes = {name: code for code, name in STATUS_NAMES.items()}
    status = np.array([codes["converged"], codes["max_iter"], codes["line_search"], codes["converged"]])
    assert status_counts(status) == {"converged": 2, "max_iter": 1, "line_search": 1, "not_finite": 0}
    # converged at its start (a warm start at the optimum) is a result; stuck at its start is not
    assert unmoved([0, 0, 0, 5], status).tolist() == [False, True, True, False]


def test_history_counts_every_model_and_converged_runs_do_not_warn(data):
    X, y = data
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        res = aflite(X, y, progress=False, **PARAMS)
    assert res.history
    for record in res.history:
        assert record.solver_status == {"converged": M, "max_iter": 0, "line_search": 0, "not_finite": 0}
        assert record.as_dict()["solver_status"] == record.solver_status


def test_unconverged_models_are_counted_per_phase_and_warned(data):
    X, y = data
    with pytest.warns(ConvergenceWarning, match=rf"{M} of {M} partition model\(s\) did not converge \(max_iter: {M}\)"):
        pred = predictability(X, y, n_partitions=M, train_size=100, max_iter=1, random_state=0)
    assert pred.solver_status["max_iter"] == M and np.all(pred.n_iter == 1)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        res = aflite(X, y, progress=False, max_iter=1, **PARAMS)
    assert all(h.solver_status["max_iter"] == M for h in res.history)


def test_report_json_carries_counts_and_the_cli_notes_them(data, tmp_path, capsys):
    X, y = data
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    base = ["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--target-size", "150",
            "--partitions", str(M), "--train-size", "100", "--slice-size", "50"]
    assert main([*base, "--out", str(tmp_path / "a"), "--max-iter", "1"]) == 0
    err = capsys.readouterr().err
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert [h["solver_status"]["max_iter"] for h in report["history"]] == [M] * len(report["history"])
    assert report["solver_status"]["max_iter"] == M * len(report["history"])
    assert f"note: {M * len(report['history'])} of" in err and "--max-iter" in err
    assert "ConvergenceWarning" not in err  # said once, in the CLI's words
    assert main([*base, "--out", str(tmp_path / "b"), "--max-iter", "1", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    assert main([*base, "--out", str(tmp_path / "c"), "--quiet"]) == 0
    report = json.loads((tmp_path / "c" / "report.json").read_text())
    assert report["solver_status"]["converged"] == M * len(report["history"])


def _scaled(X):
    return (X.astype(np.float64) * 1e12).astype(np.float32)  # finite float32, far from 1


def _agree(a, b):
    """Scores of most rows within 0.1 (one or two votes of M held-out models)."""
    ok = np.isnan(a) == np.isnan(b)
    both = ~np.isnan(a) & ~np.isnan(b)
    ok[both] = np.abs(a[both] - b[both]) <= 0.1
    return ok.mean() >= 0.9


def test_scaled_rows_fail_clearly_or_train_like_unscaled_cli(data, tmp_path, capsys):
    """x 1e12 float32: exit 2 naming the problem, or exit 0 with every model moved and
    converged and the unscaled run's scores; never exit 0 with unmoved models."""
    X, y = data
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "big.npy", _scaled(X))
    np.save(tmp_path / "y.npy", y)
    base = [str(tmp_path / "y.npy"), "--target-size", "150", "--partitions", str(M),
            "--train-size", "100", "--slice-size", "50", "--quiet"]
    code = main(["filter", str(tmp_path / "big.npy"), *base, "--out", str(tmp_path / "big")])
    err = capsys.readouterr().err
    if code == 2:
        assert err.count("\n") == 1
        assert "too large for the float32 solver" in err and "column" in err
        assert not (tmp_path / "big").exists()
        return
    assert code == 0, err
    report = json.loads((tmp_path / "big" / "report.json").read_text())
    for h in report["history"]:
        assert h["solver_status"]["converged"] == M and h["mean_iterations"] > 0
    assert main(["filter", str(tmp_path / "X.npy"), *base, "--out", str(tmp_path / "ref")]) == 0
    assert _agree(np.load(tmp_path / "big" / "scores.npy"), np.load(tmp_path / "ref" / "scores.npy"))


def test_scaled_rows_fail_clearly_or_train_like_unscaled_api(data):
    X, y = data
    try:
        big = predictability(_scaled(X), y, n_partitions=M, train_size=100, random_state=0)
    except ValueError as exc:
        assert "too large for the float32 solver" in str(exc)
    else:
        assert np.all(big.n_iter > 0) and big.solver_status["converged"] == M
        # rows 1e12 times larger under the same C are the unscaled rows' problem with C 1e24
        # times larger (the L2 term shrinks by the square of the scale): compare like with like
        ref = predictability(X, y, n_partitions=M, train_size=100, random_state=0, C=1e24)
        assert _agree(big.scores, ref.scores)
    try:
        clf = RobustLogisticRegression().fit(_scaled(X), y)
    except ValueError as exc:
        assert "too large for the float32 solver" in str(exc)
    else:
        assert clf.n_iter_[0] > 0
        ref = RobustLogisticRegression().fit(X, y)
        assert np.mean(clf.predict(_scaled(X)) == ref.predict(X)) >= 0.95


def test_untrained_models_on_ordinary_data_are_refused(data):
    X, y = data
    with pytest.raises(ValueError, match="did not move.*scale looks ordinary"):
        predictability(X, y, n_partitions=M, train_size=100, max_iter=0, random_state=0)


def test_untrained_null_models_are_refused_too(data, monkeypatch):
    """A permutation null counted from models that never left their start would be as
    meaningless as observed scores from them: aflite and predictability refuse it."""
    from aflite_fast.io.inputs import encode_labels

    X, y = data
    observed = encode_labels(y, len(y)).codes
    real = local.score_phase
    stuck = next(code for code, name in STATUS_NAMES.items() if name == "line_search")

    def score_phase(X, codes, *args, **kwargs):
        res = real(X, codes, *args, **kwargs)
        if not np.array_equal(codes, observed):  # a null pass: its first model fails at step 0
            res.n_iter[0], res.status[0] = 0, stuck
        return res

    monkeypatch.setattr(local, "score_phase", score_phase)
    with pytest.raises(ValueError, match=rf"1 of {M} null model\(s\) did not move from their starting point"):
        aflite(X, y, progress=False, null="permutation", **PARAMS)
    with pytest.raises(ValueError, match=rf"1 of {M} null model\(s\) did not move"):
        predictability(X, y, n_partitions=M, train_size=100, random_state=0, null="permutation")
    monkeypatch.undo()
    assert aflite(X, y, progress=False, null="permutation", **PARAMS).history[0].null_mean is not None
