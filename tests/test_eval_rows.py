"""Evaluation rows: ``aflite(..., eval_rows=)``, ``predictability(..., eval_rows=)``, ``--eval-rows``.

a. Evaluation rows are never in any partition's training positions, in any phase (read from
   the positions the loop hands the engine), and every active one is predicted by all m models
   of every phase (``seen``), per row and with groups.
b. ``train_size`` counts the training-eligible active rows; an empty ``eval_rows`` gives the
   result of a run without it; ``eval_only_score`` never removes evaluation rows.
c. A resumed run equals the uninterrupted one; a checkpoint of other evaluation rows is refused.
d. Bad arguments are a ValueError naming the problem; the CLI reads ``--eval-rows FILE``.
"""
import json

import numpy as np
import pytest

from aflite_fast import aflite, predictability
from aflite_fast.cli import main
from aflite_fast.filtering.chance import N_PERMUTATIONS
from aflite_fast.phase.partitions import TRAIN_PAD

N = 900
M = 6
RUN = dict(target_size=450, n_partitions=M, train_size=0.5, slice_size=80, tau=0.6, progress=False,
           n_jobs=1, random_state=5)


@pytest.fixture
def data(seed, make_problem):
    X, y = make_problem(np.random.default_rng([seed, 220]), N, 10, 3, signal=0.8)
    groups = np.random.default_rng([seed, 221]).integers(0, 300, size=N)
    is_eval = np.zeros(N, dtype=bool)
    is_eval[np.random.default_rng([seed, 222]).choice(N, size=200, replace=False)] = True
    return X, y, groups, is_eval


def _check_calls(calls, is_eval, n_models):
    assert calls
    for active, train_pos, seen in calls:
        pos = train_pos[train_pos != TRAIN_PAD]
        assert not is_eval[active[pos]].any()
        assert np.all(seen[is_eval[active]] == n_models)


@pytest.mark.parametrize("case", ["rows", "groups", "mask_vs_indices"])
def test_eval_rows_never_train_and_are_seen_by_every_model(data, record_phases, case):
    X, y, groups, is_eval = data
    run = dict(RUN)
    if case == "groups":
        run.update(groups=groups, remove="group")
    calls = record_phases
    res = aflite(X, y, eval_rows=is_eval, **run)
    assert len(res.history) >= 2
    _check_calls(calls, is_eval, M)
    # train_size counts training-eligible active rows; phase 0's scoring is followed by the
    # chance check's permuted scorings (checked above too), then one scoring per phase
    observed = [calls[0]] + calls[1 + N_PERMUTATIONS:]
    assert len(observed) == len(res.history)
    for h, (active, train_pos, _) in zip(res.history, observed):
        eligible = int(np.count_nonzero(~is_eval[active]))
        assert h.train_size == int(round(0.5 * eligible))
        if case != "groups":
            assert train_pos.shape[1] == h.train_size
    if case == "mask_vs_indices":
        again = aflite(X, y, eval_rows=np.flatnonzero(is_eval), **run)
        assert np.array_equal(res.keep, again.keep)
        assert np.array_equal(res.scores, again.scores, equal_nan=True)
    # evaluation rows are removed by the same rule as the others
    assert is_eval[res.removed].any()


def test_eval_only_score_keeps_every_eval_row(data, record_phases):
    X, y, _, is_eval = data
    calls = record_phases
    res = aflite(X, y, eval_rows=is_eval, eval_only_score=True, **RUN)
    _check_calls(calls, is_eval, M)
    assert not is_eval[res.removed].any()
    assert is_eval[res.keep].sum() == is_eval.sum()
    assert np.all(np.isfinite(res.scores[is_eval]))
    # target_size counts the other rows
    assert (~is_eval[res.keep]).sum() >= RUN["target_size"]


def test_empty_eval_rows_give_the_plain_run(data):
    X, y, _, _ = data
    a = aflite(X, y, **RUN)
    b = aflite(X, y, eval_rows=np.zeros(N, dtype=bool), **RUN)
    assert np.array_equal(a.keep, b.keep)
    assert np.array_equal(a.scores, b.scores, equal_nan=True)


def test_predictability_eval_rows(data, record_phases):
    X, y, groups, is_eval = data
    for g in (None, groups):
        calls = record_phases
        calls.clear()
        res = predictability(X, y, n_partitions=M, train_size=300, random_state=1, n_jobs=1, groups=g,
                             eval_rows=np.flatnonzero(is_eval))
        _check_calls(calls, is_eval, M)
        assert np.all(res.seen[is_eval] == M)
        assert res.seen[~is_eval].mean() < M - 1  # the others train some models


def test_resume_with_eval_rows(data, tmp_path, interrupted_run):
    X, y, _, is_eval = data
    run = dict(RUN, eval_rows=is_eval)
    full = aflite(X, y, **run)
    assert len(full.history) >= 3
    path = tmp_path / "ck.npz"
    interrupted_run(X, y, path, 1, **run)
    resumed = aflite(X, y, checkpoint=path, **run)
    assert resumed.resumed_from == 1
    assert np.array_equal(full.keep, resumed.keep)
    assert np.array_equal(full.removed, resumed.removed)
    assert np.array_equal(full.scores, resumed.scores, equal_nan=True)
    other = is_eval.copy()
    other[np.flatnonzero(~other)[0]] = True
    with pytest.raises(ValueError, match="eval_rows"):
        aflite(X, y, checkpoint=path, **dict(run, eval_rows=other))
    with pytest.raises(ValueError, match="eval_rows"):
        aflite(X, y, checkpoint=path, **dict(RUN))


@pytest.mark.parametrize("bad, message", [
    (np.zeros(5, dtype=bool), "boolean mask of 5"),
    (np.array([0, N]), "out of range"),
    (np.array([1, 1]), "more than once"),
    (np.array([0.5]), "integer row indices"),
    (np.arange(N - 1), "fewer than two rows"),
    (np.zeros((2, 2), dtype=int), "1-D"),
])
def test_bad_eval_rows(data, bad, message):
    X, y, _, _ = data
    with pytest.raises(ValueError, match=message):
        aflite(X, y, eval_rows=bad, **RUN)


def test_eval_only_score_needs_eval_rows(data):
    X, y, _, _ = data
    with pytest.raises(ValueError, match="needs eval_rows"):
        aflite(X, y, eval_only_score=True, **RUN)


def test_cli_eval_rows(data, tmp_path, capsys):
    X, y, _, is_eval = data
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    np.savetxt(tmp_path / "eval.txt", np.flatnonzero(is_eval), fmt="%d")
    args = [str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--target-size", "450", "--n-partitions", str(M),
            "--train-size", "0.5", "--slice-size", "80", "--tau", "0.6", "--seed", "5", "--n-jobs", "1", "--quiet"]
    assert main(["filter", *args, "--out", str(tmp_path / "a"), "--eval-rows", str(tmp_path / "eval.txt"),
                 "--eval-only-score"]) == 0
    keep = np.load(tmp_path / "a" / "keep.npy")
    expected = aflite(X, y, eval_rows=is_eval, eval_only_score=True, **RUN)
    assert np.array_equal(keep, expected.keep)
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["eval_rows"]["n_eval"] == int(is_eval.sum())
    np.save(tmp_path / "mask.npy", is_eval)
    assert main(["filter", *args, "--out", str(tmp_path / "b"), "--eval-rows", str(tmp_path / "mask.npy")]) == 0
    assert np.array_equal(np.load(tmp_path / "b" / "keep.npy"), aflite(X, y, eval_rows=is_eval, **RUN).keep)
    (tmp_path / "bad.txt").write_text("1\nx\n")
    assert main(["filter", *args, "--out", str(tmp_path / "c"), "--eval-rows", str(tmp_path / "bad.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("aflite-fast filter: error: --eval-rows")
    assert main(["filter", *args, "--out", str(tmp_path / "d"), "--eval-only-score"]) == 2
    assert "--eval-only-score needs --eval-rows" in capsys.readouterr().err


def test_eval_rows_on_dask_equal_local(data):
    """The Dask backend takes the same training positions: the same result as locally."""
    distributed = pytest.importorskip("distributed")
    X, y, _, is_eval = data
    with distributed.LocalCluster(n_workers=1, processes=False, threads_per_worker=1,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        remote = aflite(X, y, eval_rows=is_eval, eval_only_score=True, backend="dask", client=client,
                        **dict(RUN, n_jobs=None))
    local = aflite(X, y, eval_rows=is_eval, eval_only_score=True, **RUN)
    assert np.array_equal(remote.keep, local.keep)
    assert np.array_equal(remote.scores, local.scores, equal_nan=True)


def test_eval_only_score_with_the_random_tie_rule_and_the_chance_check(data):
    """The evaluation rows are scored but never removed, also when the tie rule is random and
    the chance check scores phase 0 again; the chance check counts only removable rows."""
    X, y, _, is_eval = data
    run = dict(RUN, eval_rows=is_eval, eval_only_score=True, tie_break="random", random_state=3)
    res = aflite(X, y, **run)
    assert res.removed.size > 0 and not is_eval[res.removed].any()
    assert is_eval[res.keep].sum() == is_eval.sum()
    assert res.chance is not None and res.chance.n_above_tau == res.history[0].n_above_tau
    assert res.history[0].n_above_tau <= int(np.count_nonzero(~is_eval))
    again = aflite(X, y, **run)
    np.testing.assert_array_equal(res.removed, again.removed)
