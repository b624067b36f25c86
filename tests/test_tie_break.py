"""The tie rule between rows of equal score: ``tie_break="label_prob"`` (default) or ``"random"``."""
import json

import numpy as np
import pytest

from aflite_fast import aflite, predictability
from aflite_fast.cli import main
from aflite_fast.filtering.selection import select_rows as _select

RUN = dict(target_size=300, n_partitions=8, train_size=0.5, slice_size=40, tau=0.75, progress=False,
           chance_check=False)


@pytest.fixture
def tied(seed):
    """Well separated classes: most rows score 1.0, far more than one slice."""
    rng = np.random.default_rng([seed, 201])
    y = rng.integers(0, 2, 900)
    X = rng.standard_normal((900, 6)).astype(np.float32)
    X[:, 0] += 2.0 * (2 * y - 1)
    return X, y


def test_select_orders_ties_by_the_key_then_position():
    scores = np.array([1.0, 1.0, 1.0, 0.9, 1.0])
    seen = np.array([2, 2, 2, 2, 0])  # row 4 was never held out: not removable
    prob = np.array([1.2, 1.8, 1.2, 2.0, 2.0])  # mean 0.6, 0.9, 0.6, 1.0
    chosen, n = _select(scores, prob, seen, 0.75, 3)
    assert chosen.tolist() == [1, 0, 2] and n == 4
    key = np.array([0.1, 0.2, 0.9, 0.5, 0.3]) * seen
    assert _select(scores, key, seen, 0.75, 2)[0].tolist() == [2, 1]


def test_select_is_the_full_ordering_cut_at_the_budget(seed):
    """The slice is the first ``budget`` rows of all eligible rows ordered by (score, mean key,
    position), whichever rows share the budget-th row's score or key (the selection orders only
    the rows that can make the slice)."""
    rng = np.random.default_rng([seed, 202])
    for trial in range(2000):
        n, m = int(rng.integers(1, 300)), int(rng.integers(1, 8))
        seen = rng.integers(0, m + 1, n).astype(np.int32)
        correct = np.minimum(seen, rng.integers(0, m + 1, n)).astype(np.int32)
        with np.errstate(invalid="ignore", divide="ignore"):
            scores = np.where(seen > 0, correct / np.maximum(seen, 1), np.nan)
        prob = np.round(rng.random(n) * rng.integers(1, 5), 1) * seen  # few distinct means: ties
        if trial % 7 == 0:
            prob[rng.random(n) < 0.2] = np.nan
        tau, budget = float(rng.choice([0.0, 0.5, 0.75, 1.0])), int(rng.integers(0, n + 3))
        eligible = np.flatnonzero((seen > 0) & (scores >= tau))
        order = np.lexsort((eligible, -(prob[eligible] / seen[eligible]), -scores[eligible]))
        chosen, n_eligible = _select(scores, prob, seen, tau, budget)
        assert n_eligible == eligible.size
        assert chosen.tolist() == (eligible[order[:budget]].tolist() if budget > 0 else []), trial


def test_label_prob_takes_the_rows_the_rule_names(tied, seed):
    """Phase 0 equals predictability() with the same seed: its slice is the top of
    (score, mean probability of the label, -position) there."""
    X, y = tied
    res = aflite(X, y, random_state=seed, tie_break="label_prob", **RUN)
    p = predictability(X, y, n_partitions=8, train_size=0.5, random_state=seed)
    top = np.flatnonzero(p.scores == 1.0)
    assert top.size > 3 * RUN["slice_size"]  # the slice is decided by ties
    order = top[np.lexsort((top, -p.prob_label[top], -p.scores[top]))]
    assert res.removed[res.removed_phase == 0].tolist() == order[:RUN["slice_size"]].tolist()


def test_random_draws_among_the_tied_rows(tied, seed):
    X, y = tied
    base = aflite(X, y, random_state=seed, tie_break="label_prob", **RUN)
    a = aflite(X, y, random_state=seed, tie_break="random", **RUN)
    assert aflite(X, y, random_state=seed, **RUN).removed.tolist() == base.removed.tolist()  # the default
    b = aflite(X, y, random_state=seed, tie_break="random", n_jobs=1, **RUN)
    assert a.removed.tolist() == b.removed.tolist()  # a function of random_state only
    first = a.removed[a.removed_phase == 0]
    assert np.all(a.scores[first] == 1.0) and first.size == RUN["slice_size"]
    assert set(first.tolist()) != set(base.removed[base.removed_phase == 0].tolist())
    other = aflite(X, y, random_state=seed + 1, tie_break="random", **RUN).removed
    assert other.tolist() != a.removed.tolist()
    assert a.history[0].n_above_tau == base.history[0].n_above_tau  # only the order changed


def test_a_checkpoint_refuses_another_tie_rule(tied, tmp_path):
    X, y = tied
    aflite(X, y, random_state=1, checkpoint=tmp_path / "c.npz", tie_break="random", **RUN)
    with pytest.raises(ValueError, match="tie_break"):
        aflite(X, y, random_state=1, checkpoint=tmp_path / "c.npz", **RUN)


def test_bad_tie_break_is_named(tied):
    with pytest.raises(ValueError, match="tie_break must be one of 'label_prob', 'random', got 'first'"):
        aflite(*tied, tie_break="first", **RUN)


def test_cli_tie_break(tied, tmp_path, capsys):
    X, y = tied
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    base = ["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--target-size", "300",
            "--train-size", "0.5", "--n-partitions", "8", "--slice-size", "40", "--quiet", "--seed", "2"]
    assert main([*base, "--out", str(tmp_path / "r"), "--tie-break", "random"]) == 0
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["parameters"]["tie_break"] == "random"
    api = aflite(X, y, random_state=2, tie_break="random", **dict(RUN, chance_check=True))
    assert np.load(tmp_path / "r" / "keep.npy").tolist() == api.keep.tolist()
    assert main([*base, "--out", str(tmp_path / "x"), "--tie-break", "first"]) == 2
    assert "argument --tie-break: invalid choice: 'first'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["filter", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--tie-break {label_prob,random}" in text and "higher mean held-out probability" in text


def test_the_estimator_passes_both_settings_on(tied, seed):
    from aflite_fast import AFLite

    X, y = tied
    est = AFLite(random_state=seed, tie_break="random", **RUN).fit(X, y)
    assert est.result_.chance is None and est.get_params()["tie_break"] == "random"
    assert est.sample_indices_.tolist() == aflite(X, y, random_state=seed, tie_break="random", **RUN).keep.tolist()
