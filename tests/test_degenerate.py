"""Degenerate inputs are refused, never filtered by class prior (aflite_fast.degenerate): API and CLI."""
import json

import numpy as np
import pytest

from aflite_fast import RobustLogisticRegression, aflite, evaluate_filter, predictability
from aflite_fast.cli import main
from aflite_fast.core import degenerate, layout, solver
from aflite_fast.core.degenerate import check_moved, check_scale, unmoved_weights
from aflite_fast.core.losses import check_transition, resolve_loss
from aflite_fast.phase.backends import LocalBackend

N, D = 400, 6
RUN = dict(target_size=200, n_partitions=8, train_size=0.5, slice_size=50, progress=False, n_jobs=1,
           random_state=0)


@pytest.fixture
def labels(seed):
    return (np.random.default_rng([seed, 181]).random(N) < 0.4).astype(np.int64)


def _gauss(seed):
    return np.random.default_rng([seed, 182]).standard_normal((N, D)).astype(np.float32)


#: name -> (X from a Gaussian X, words the error must contain)
CASES = {
    "constant": (lambda G: np.full_like(G, 0.25), "X has no variance"),
    "identical_rows": (lambda G: np.repeat(G[:1], N, axis=0), "X has no variance"),
    "rows_x_1e-12": (lambda G: G * np.float32(1e-12), "scale leaves the solver unable to move"),
    "subnormal": (lambda G: G * np.float32(1e-40), "scale leaves the solver unable to move"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_degenerate_X_is_refused_by_the_api(case, labels, seed):
    make, words = CASES[case]
    X = make(_gauss(seed))
    if case == "subnormal":
        assert np.all(np.abs(X[X != 0]) < np.finfo(np.float32).tiny)  # really subnormal
    with pytest.raises(ValueError, match=words):
        aflite(X, labels, **RUN)
    with pytest.raises(ValueError, match=words):
        evaluate_filter(X, labels, np.arange(0, N, 2), random_state=0)
    with pytest.raises(ValueError, match=words):
        predictability(X, labels, n_partitions=8, train_size=0.5, random_state=0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_degenerate_X_is_refused_by_the_cli(case, labels, seed, tmp_path, capsys):
    make, words = CASES[case]
    np.save(tmp_path / "X.npy", make(_gauss(seed)))
    np.save(tmp_path / "y.npy", labels)
    code = main(["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "o"),
                 "--target-size", "200", "--train-size", "0.5", "--n-partitions", "8", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("aflite-fast filter: error: ") and words in err
    assert not (tmp_path / "o").exists()


def test_the_first_look_at_a_sample_never_refuses_what_the_full_pass_accepts():
    """A column that varies only on rows the sample skips: the full pass finds it."""
    n = 3 * degenerate.SAMPLE_ROWS
    X = np.zeros((n, 3), dtype=np.float32)
    sample = set(np.linspace(0, n - 1, degenerate.SAMPLE_ROWS).astype(np.int64).tolist())
    hidden = next(i for i in range(n) if i not in sample)
    X[hidden, 1] = 5.0
    center = X.mean(axis=0, dtype=np.float64)
    check_scale(X, center, 1e-4)  # no error
    X[hidden, 1] = 1e-5
    with pytest.raises(ValueError, match=r"largest \|X - column mean\| is 1e-05 \(column 1\)"):
        check_scale(X, X.mean(axis=0, dtype=np.float64), 1e-4)


@pytest.mark.parametrize("T, words", [
    ([[0.5, 0.5], [0.5, 0.5]], "T is singular \\(rank 1 of 2\\)"),
    ([[0.6, 0.4, 0.0], [0.3, 0.7, 0.0], [0.45, 0.55, 0.0]], "column\\(s\\) \\[2\\] of T are all zero"),
    ([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.4, 0.4, 0.2]], "T is singular"),
    ([[0.9, 0.2], [0.1, 0.9]], "row-stochastic.*row sums are 1.1, 1"),
    ([[1.2, -0.2], [0.0, 1.0]], "row-stochastic"),
])
def test_a_singular_or_not_row_stochastic_transition_is_refused(T, words):
    T = np.asarray(T)
    with pytest.raises(ValueError, match=words):
        resolve_loss("forward", {"T": T}, T.shape[0])


def test_an_invertible_row_stochastic_transition_is_accepted():
    check_transition(np.array([[0.8, 0.2], [0.3, 0.7]]))
    check_transition(np.eye(3))


def test_a_singular_transition_is_refused_by_the_api_and_the_cli(tmp_path, capsys, seed):
    X = _gauss(seed)
    y = (X[:, 0] > 0).astype(np.int64)
    T = np.array([[0.5, 0.5], [0.5, 0.5]])
    with pytest.raises(ValueError, match="T is singular"):
        aflite(X, y, loss="forward", loss_params={"T": T}, **RUN)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    for name, matrix, words in (("sing.npy", T, "--transition is singular (rank 1 of 2)"),
                                ("rows.npy", np.array([[0.9, 0.2], [0.1, 0.9]]), "row-stochastic")):
        np.save(tmp_path / name, matrix)
        code = main(["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "o"),
                     "--target-size", "200", "--train-size", "0.5", "--loss", "forward", "--transition",
                     str(tmp_path / name), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and words in err, err
        assert not (tmp_path / "o").exists()


def test_weights_that_never_moved_are_refused_whatever_the_status(labels):
    """Trained on identical rows the solver reports "converged" with every weight at zero."""
    X = np.ones((N, D), dtype=np.float32)
    center = X.mean(axis=0).astype(np.float32)
    Xa = layout.augment_rows(X, center)
    member = np.ones((N, 2), dtype=np.uint8)
    coef, info = solver.train_models(Xa, labels.astype(np.int32), member, 2)
    assert np.all(info["status"] == 0) and unmoved_weights(coef).all()  # status 0: converged
    every_row = lambda j: np.arange(N)  # noqa: E731
    with pytest.raises(ValueError, match=r"2 of 2 partition model\(s\) ended with every weight still at its "
                                         r"starting value of zero \(solver status: converged: 2\), on training "
                                         r"rows whose values vary by at most tol=0.0001"):
        check_moved(coef, info["status"], X=X, center=center, train_rows=every_row, tol=1e-4,
                    what="partition model")
    moved = coef.copy()
    moved[0, 0, 1] = 1e-30
    assert unmoved_weights(moved).tolist() == [False, True]
    moved[1, 3, 0] = -2.0
    check_moved(moved, X=X, train_rows=every_row, tol=1e-4)  # no error


def test_zero_weights_where_the_labels_cancel_are_refused_naming_the_cause():
    """Rows that vary, classes with equal column sums: the gradient at zero is exactly zero, so
    the solver stays there; every held-out row would be a tie, so the model is refused, with
    the cause (labels that cancel), not the flat rows' message."""
    X = np.array([[1.0], [-1.0], [1.0], [-1.0]] * 5, dtype=np.float32)
    y = np.array([0, 0, 1, 1] * 5, dtype=np.int32)
    coef, info = solver.train_models(layout.augment_rows(X, X.mean(axis=0)), y, np.ones((20, 1), np.uint8), 2)
    assert unmoved_weights(coef).all()
    with pytest.raises(ValueError, match=r"1 of 1 model\(s\) ended with every weight still at its starting value "
                                         r"of zero \(solver status: converged: 1\): their training rows vary, but "
                                         r"the gradient at zero weights is exactly zero .* labels cancel exactly"):
        check_moved(coef, info["status"], X=X, train_rows=lambda j: np.arange(20), tol=1e-4)
    with pytest.raises(ValueError, match="labels cancel exactly.*every prediction would be a tie"):
        RobustLogisticRegression().fit(X, y)


def test_a_gradient_at_zero_below_tol_no_longer_stops_a_cold_start():
    """Twins of opposite labels: their terms of the gradient at zero cancel but for the small
    difference between them, below tol; the absolute test alone stopped every model at zero
    ("converged", untrained).  The stop relative to the start trains them."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((200, 8))
    diff = rng.standard_normal((200, 8))
    X = (np.repeat(base, 2, axis=0) + 2e-3 * np.repeat(diff, 2, axis=0) * np.tile([1.0, -1.0], 200)[:, None])
    y = np.tile([0, 1], 200).astype(np.int32)
    Xa = layout.augment_rows(X.astype(np.float32), X.mean(axis=0).astype(np.float32))
    g0 = np.abs((Xa[:, :-1].astype(np.float64).T @ (0.5 - np.eye(2)[y]))).max() / 400
    assert g0 < 1e-4  # the absolute test alone stops at the start
    coef, info = solver.train_models(Xa, y, np.ones((400, 2), np.uint8), 2, options=solver.SolverOptions(tol=1e-4))
    assert np.all(info["n_iter"] > 0) and not unmoved_weights(coef).any()
    assert np.all(info["status"] == 0)
    # the fit is the optimum's: held-in argmax of a tight float64 fit
    from sklearn.linear_model import LogisticRegression

    ref = LogisticRegression(tol=1e-10, max_iter=10000).fit(X, y)
    ours = np.argmax(Xa @ coef[0].astype(np.float32), axis=1)
    assert np.mean(ours == ref.predict(X)) >= 0.99


def test_unmoved_weights_are_refused_in_the_loop_and_the_cli(labels, monkeypatch, tmp_path, capsys):
    """Past the scale check (switched off here), the loop still refuses the intercept-only models."""

    monkeypatch.setattr(LocalBackend, "check_scale", lambda self, *a, **k: None)
    X = np.full((N, D), 3.0, dtype=np.float32)
    with pytest.raises(ValueError, match="solver status: converged: 8.*intercept-only models"):
        aflite(X, labels, **RUN)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", labels)
    code = main(["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "o"),
                 "--target-size", "200", "--train-size", "0.5", "--n-partitions", "8", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "intercept-only models" in err and err.count("\n") == 1


def test_ordinary_data_passes_every_check(labels, seed, tmp_path):
    X = _gauss(seed) * np.float32(1e-3)  # small but above tol: the solver moves
    res = aflite(X, labels, chance_check=False, **RUN)
    assert res.history[0].mean_iterations > 0
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", labels)
    assert main(["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "o"),
                 "--target-size", "200", "--train-size", "0.5", "--n-partitions", "8", "--quiet",
                 "--no-chance-check"]) == 0
    assert json.loads((tmp_path / "o" / "report.json").read_text())["chance_check"] is None
