"""The permutation null (issue 15): ``aflite(..., null="permutation", n_null=, stop=)``.

a. Permutations: class counts kept; with groups, groups of one size exchange their labels
   whole and the rows of groups of a unique size are permuted among themselves; seeds from
   ``(phase, NULL_TAG, i)`` never equal a partition's ``(phase, j)``.
b. The margin of the stop rule, by hand.
c. The null never changes the observed run: with ``stop="paper"`` keep, removed, scores and
   the observed fields of the history are bitwise those of a run without it; with
   ``stop="null"`` the phases before its stop are those of the paper's run.
d. Null counts are reproducible for a given random_state, independent of the thread count,
   and equal to counting ``predictability(..., null=)``'s null scores (per row and, with
   ``remove="group"``, as rows of the groups whose mean score reaches tau).
e. Must show: on permuted labels ``stop="null"`` removes at most k rows (none for 4 or more
   seeds of 5); on the synthetic biased circles it still removes the planted bias (share of
   biased rows among the kept well below 0.75).
f. Checkpoints carry the null: a run interrupted and resumed gives the uninterrupted history,
   null fields included; another n_null is refused.  Bad arguments are ValueErrors naming them.
g. The command line: ``filter --null --n-null --stop`` writes the null's parameters and fields
   in report.json, the filtering curve draws the null's mean and margin; bad flags exit 2.
"""
import json
import os

import numpy as np
import pytest

from aflite_fast import aflite, predictability
from aflite_fast.cli import _figure, main
from aflite_fast.experiments.synthetic_data import make_biased_circles
from aflite_fast.filtering.null import NULL_TAG, null_seed, permuted_labels, summarize
from aflite_fast.phase import local
from aflite_fast.phase.groups import select_groups

N = 1000
RUN = dict(target_size=250, n_partitions=16, train_size=0.2, slice_size=20, tau=0.75, progress=False,
           n_jobs=1)
NULL_FIELDS = ("null_above_tau", "null_mean", "null_std", "null_share", "null_excess", "null_margin",
               "null_seconds")


@pytest.fixture
def circles(seed):
    return make_biased_circles(N, random_state=seed)


def _observed(history):
    """The history without the null's fields and timings (the chance check's included)."""
    out = [{k: v for k, v in h.as_dict().items() if k not in NULL_FIELDS and k != "seconds"} for h in history]
    for h in out:
        if h.get("chance"):
            h["chance"] = {k: v for k, v in h["chance"].items() if k != "seconds"}
    return out


def _same_observed(a, b):
    for name in ("keep", "removed", "removed_phase", "scores"):
        assert np.array_equal(getattr(a, name), getattr(b, name), equal_nan=True), name
    assert _observed(a.history) == _observed(b.history)


def test_permutations_keep_class_counts_and_the_group_design(seed):
    rng = np.random.default_rng([seed, 150])
    labels = rng.integers(0, 3, size=400)
    plain = permuted_labels(labels, np.random.default_rng(1))
    assert np.array_equal(np.bincount(plain, minlength=3), np.bincount(labels, minlength=3))
    assert not np.array_equal(plain, labels)
    assert np.array_equal(plain, permuted_labels(labels, np.random.default_rng(1)))  # from the rng alone
    # groups of sizes 1, 2 and 3, plus one group of size 7 and one of size 5: the lone sizes
    sizes = [1] * 60 + [2] * 70 + [3] * 60 + [7, 5]
    groups = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    labels = rng.integers(0, 3, size=groups.size)
    out = permuted_labels(labels, np.random.default_rng(2), groups)
    assert np.array_equal(np.bincount(out, minlength=3), np.bincount(labels, minlength=3))

    def mixes(lab, size):  # the label mix of every group of this size
        return sorted(tuple(sorted(lab[groups == g])) for g in np.unique(groups) if (groups == g).sum() == size)

    for size in (1, 2, 3):
        assert mixes(out, size) == mixes(labels, size)
    moved = [g for g in np.unique(groups) if not np.array_equal(out[groups == g], labels[groups == g])]
    assert len(moved) > 50  # groups do exchange labels
    lone = np.isin(groups, [g for g in np.unique(groups) if (groups == g).sum() in (5, 7)])
    assert np.array_equal(np.sort(out[lone]), np.sort(labels[lone]))  # permuted among themselves


def test_null_seeds_never_equal_partition_seeds():
    partition = {tuple(np.random.SeedSequence(5, spawn_key=(p, j)).generate_state(4)) for p in range(4)
                 for j in range(64)}
    null = {tuple(null_seed(5, p, i).generate_state(4)) for p in range(4) for i in range(64)}
    assert len(partition) == len(null) == 4 * 64 and not partition & null
    assert null_seed(5, 2, 3).spawn_key == (2, NULL_TAG, 3)


def test_margin_by_hand():
    two = summarize([10, 14])
    assert two.mean == 12 and two.std == pytest.approx(np.sqrt(8))
    # the std (2.83) is below the Poisson floor sqrt(12) = 3.46, so the floor counts
    assert two.margin == pytest.approx(3 * np.sqrt(12) * np.sqrt(1.5))
    spread = summarize([100, 200, 300])
    assert spread.std == pytest.approx(100) and spread.margin == pytest.approx(3 * 100 * np.sqrt(4 / 3))
    one = summarize([100])
    assert one.std is None and one.margin == pytest.approx(3 * 10 * np.sqrt(2))
    assert one.within(100 + 42) and not one.within(100 + 43)  # margin 42.43
    with pytest.raises(ValueError):
        summarize([])


def test_the_null_does_not_change_the_observed_run(circles):
    X, y = circles.X, circles.y
    run = dict(RUN, random_state=4)
    plain = aflite(X, y, **run)
    with_null = aflite(X, y, null="permutation", n_null=2, **run)
    _same_observed(plain, with_null)
    assert plain.stop_reason == with_null.stop_reason
    for h in plain.history:
        assert h.null_above_tau == [] and h.null_mean is None
    for h in with_null.history:
        assert len(h.null_above_tau) == 2 and h.null_mean == np.mean(h.null_above_tau)
        assert h.null_std == pytest.approx(np.std(h.null_above_tau, ddof=1))
        assert h.null_share == h.null_mean / h.n_active
        assert h.null_excess == h.n_above_tau - h.null_mean
        assert 0 < h.null_seconds < h.seconds
    # the bias is far above chance at first
    first = with_null.history[0]
    assert first.null_excess > first.null_margin > 0
    # stop="null": the same phases up to its stop, and there it removes nothing
    by_null = aflite(X, y, null="permutation", n_null=2, stop="null", **run)
    last = by_null.history[-1]
    assert "permutation null" in by_null.stop_reason and last.n_removed == 0
    assert last.n_above_tau <= last.null_mean + last.null_margin
    shared = min(len(plain.history), len(by_null.history) - 1)
    assert shared >= 3
    assert _observed(by_null.history)[:shared] == _observed(plain.history)[:shared]
    n_shared = sum(h.n_removed for h in plain.history[:shared])
    assert np.array_equal(by_null.removed[:n_shared], plain.removed[:n_shared])


def test_null_counts_reproducible_and_independent_of_threads(circles):
    X, y = circles.X, circles.y
    run = dict(RUN, target_size=900, null="permutation", n_null=2)
    one = aflite(X, y, **dict(run, random_state=11, n_jobs=1))
    two = aflite(X, y, **dict(run, random_state=11, n_jobs=2))
    again = aflite(X, y, **dict(run, random_state=11, n_jobs=1))
    counts = [h.null_above_tau for h in one.history]
    assert len(counts) >= 3
    assert counts == [h.null_above_tau for h in two.history] == [h.null_above_tau for h in again.history]
    assert len({c for phase in counts for c in phase}) > 1  # permutations differ
    other = aflite(X, y, **dict(run, random_state=12, n_jobs=1))
    assert [h.null_above_tau for h in other.history] != counts
    # predictability draws the same permutations as phase 0
    pred = predictability(X, y, n_partitions=16, train_size=0.2, random_state=11, n_jobs=2,
                          null="permutation", n_null=2)
    assert pred.null_scores.shape == (2, N)
    assert [int(np.count_nonzero(s >= 0.75)) for s in pred.null_scores] == counts[0]


def test_group_counts_are_rows_of_groups_reaching_tau(circles):
    X, y = circles.X, circles.y
    groups = np.random.default_rng(3).integers(0, 400, size=N)
    run = dict(RUN, target_size=N - 20, random_state=6, groups=groups, null="permutation", n_null=2)
    res = aflite(X, y, remove="group", **run)
    pred = predictability(X, y, n_partitions=16, train_size=0.2, random_state=6, groups=groups,
                          null="permutation", n_null=2)
    expected = []
    for s in pred.null_scores:
        seen = (~np.isnan(s)).astype(np.int32)
        expected.append(select_groups(np.nan_to_num(s), seen.astype(float), seen, groups, 0.75, 0)[1])
    assert res.history[0].null_above_tau == expected
    # per row, the same permutations counted as rows
    rows = aflite(X, y, **run)
    assert rows.history[0].null_above_tau == [int(np.count_nonzero(s >= 0.75)) for s in pred.null_scores]


def test_stop_null_on_permuted_labels_removes_at_most_k():
    """Must show: the circles with their labels permuted carry no signal; the paper's rule
    removes rows there, stop="null" at most one slice (k rows), for every seed of 5."""
    removed = []
    for seed in range(5):
        data = make_biased_circles(N, random_state=seed)
        y = np.random.default_rng([seed, 151]).permutation(data.y)
        res = aflite(data.X, y, null="permutation", n_null=3, stop="null", random_state=seed, **RUN)
        assert res.removed.size <= RUN["slice_size"], (seed, [h.as_dict() for h in res.history])
        removed.append(res.removed.size)
    assert removed.count(0) >= 4, removed
    paper = aflite(data.X, y, random_state=4, **RUN)
    assert paper.removed.size > RUN["slice_size"]  # the paper's rule is fooled by chance


def test_stop_null_still_removes_the_planted_bias():
    """Must show: on the synthetic biased circles (75% of rows biased) stop="null" keeps a set
    where the biased rows' share is well below 0.75."""
    for seed in range(2):
        data = make_biased_circles(2000, random_state=seed)
        run = dict(RUN, target_size=500, n_partitions=24, slice_size=40)
        res = aflite(data.X, data.y, null="permutation", n_null=3, stop="null", random_state=seed, **run)
        share = data.is_biased[res.keep].mean()
        assert share < 0.55, (seed, share, res.stop_reason)
        assert "permutation null" in res.stop_reason or res.keep.size == 500


def test_resume_carries_the_null(circles, tmp_path, monkeypatch):
    X, y = circles.X, circles.y
    run = dict(RUN, random_state=2, null="permutation", n_null=2, stop="both", chance_check=False)
    full = aflite(X, y, **run)
    assert len(full.history) >= 3
    path = tmp_path / "null.ckpt.npz"
    real, calls = local.score_phase, []

    def interrupted(*args, **kw):  # 1 + n_null calls per phase: stop as phase 2 starts
        calls.append(1)
        if len(calls) == 2 * 3 + 1:
            raise KeyboardInterrupt
        return real(*args, **kw)

    with monkeypatch.context() as m:
        m.setattr(local, "score_phase", interrupted)
        with pytest.raises(KeyboardInterrupt):
            aflite(X, y, checkpoint=path, **run)
    resumed = aflite(X, y, checkpoint=path, **dict(run, n_jobs=2))
    assert resumed.resumed_from == 2
    _same_observed(full, resumed)
    assert ([h.null_above_tau for h in full.history] == [h.null_above_tau for h in resumed.history])
    assert resumed.stop_reason == full.stop_reason
    with pytest.raises(ValueError, match="n_null"):
        aflite(X, y, checkpoint=path, **dict(run, n_null=3))


@pytest.mark.parametrize("kwargs, match", [
    (dict(stop="null"), "stop='null' needs null"),
    (dict(stop="both"), "stop='both' needs null"),
    (dict(null="shuffle"), "null must be"),
    (dict(null="permutation", n_null=0), "n_null"),
    (dict(null="permutation", n_null=True), "n_null"),
    (dict(null="permutation", n_null=1.5), "n_null"),
    (dict(null="permutation", stop="never"), "stop must be"),
])
def test_bad_null_arguments(circles, kwargs, match):
    with pytest.raises(ValueError, match=match):
        aflite(circles.X, circles.y, random_state=0, **dict(RUN, **kwargs))


def test_cli_null_in_report_json_and_figure(tmp_path, circles, capsys):
    np.save(tmp_path / "emb.npy", circles.X)
    np.save(tmp_path / "labels.npy", circles.y)
    args = ["filter", str(tmp_path / "emb.npy"), str(tmp_path / "labels.npy"), "--target-size", "250",
            "--partitions", "16", "--train-size", "0.2", "--slice-size", "20", "--seed", "4", "--threads", "1",
            "--quiet"]
    out = tmp_path / "out"
    assert main(args + ["--out", str(out), "--null", "permutation", "--n-null", "2", "--stop", "both"]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["parameters"]["null"] == "permutation" and rep["parameters"]["n_null"] == 2
    assert rep["parameters"]["stop"] == "both"
    api = aflite(circles.X, circles.y, null="permutation", n_null=2, stop="both", random_state=4, **RUN)
    assert [h["null_above_tau"] for h in rep["history"]] == [h.null_above_tau for h in api.history]
    assert all(set(NULL_FIELDS) <= set(h) for h in rep["history"])
    assert rep["stop_reason"] == api.stop_reason
    # the filtering curve draws the null's mean and margin
    plt = _figure.require_matplotlib()
    fig, ax = plt.subplots()
    _figure.filtering_curve(ax, rep)
    labels = [line.get_label() for line in ax.get_lines()] + [c.get_label() for c in ax.collections]
    plt.close(fig)
    assert ">= tau, labels permuted (mean of 2)" in labels and "+ margin of stop='null'" in labels
    _figure.draw_report(rep, str(tmp_path / "r.png"))
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a run without the null draws neither
    plain = dict(rep, history=[{k: v for k, v in h.items() if k not in NULL_FIELDS} for h in rep["history"]])
    fig, ax = plt.subplots()
    _figure.filtering_curve(ax, plain)
    assert len(ax.get_lines()) == 3 and not ax.collections
    plt.close(fig)
    # bad flags: exit code 2, one line naming the flag, nothing written
    capsys.readouterr()
    assert main(args + ["--out", str(tmp_path / "bad"), "--stop", "null"]) == 2
    assert "--stop null needs --null permutation" in capsys.readouterr().err
    assert main(args + ["--out", str(tmp_path / "bad"), "--null", "permutation", "--n-null", "0"]) == 2
    assert "--n-null" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_docs_describe_the_null():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = open(os.path.join(root, "docs", "null.md"), encoding="utf-8").read()
    assert "figure_null.png" in text and os.path.getsize(os.path.join(root, "docs", "figure_null.png")) > 0
    assert "docs/null.md" in open(os.path.join(root, "README.md"), encoding="utf-8").read()
