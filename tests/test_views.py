"""Views (aflite_fast.filtering.views): several representations of the same rows, scored on the
same partitions, a per-view score and a combined one."""
import warnings

import numpy as np
import pytest

from aflite_fast import aflite
from aflite_fast.experiments.synthetic_data import make_multiple_choice

N, N_CUE, D = 2000, 200, 6


def _planted():
    """Labels, and two views: a cue of the label in feature 0 for the rows of SA in view A only,
    and for the rows of SB in view B only; every other value noise."""
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, N)
    perm = rng.permutation(N)
    SA, SB = perm[:N_CUE], perm[N_CUE:2 * N_CUE]

    def view(S):
        X = rng.normal(size=(N, D)).astype(np.float32)
        X[S, 0] += 4.0 * (2 * y[S] - 1)
        return X

    return y, view(SA), view(SB), SA, SB


PLANTED_KW = dict(target_size=N - 2 * N_CUE, train_size=0.5, slice_size=2 * N_CUE, tau=0.9, random_state=1,
                  progress=False, n_jobs=1, chance_check=False)


def _share_removed(result, rows):
    return np.isin(rows, result.removed).mean()


def test_max_removes_the_cues_of_both_views_each_view_alone_one():
    y, A, B, SA, SB = _planted()
    only_a = aflite(None, y, views={"a": A}, **PLANTED_KW)
    only_b = aflite(None, y, views={"b": B}, **PLANTED_KW)
    both = aflite(None, y, views={"a": A, "b": B}, **PLANTED_KW)
    assert _share_removed(only_a, SA) >= 0.9 and _share_removed(only_a, SB) <= 0.25
    assert _share_removed(only_b, SB) >= 0.9 and _share_removed(only_b, SA) <= 0.25
    assert _share_removed(both, SA) >= 0.9 and _share_removed(both, SB) >= 0.9
    assert both.views == ["a", "b"] and both.combine == "max"


def test_combined_score_is_the_max_or_mean_of_the_views_scores():
    y, A, B, _, _ = _planted()
    kw = dict(PLANTED_KW, target_size=N - 10, slice_size=10)  # one phase: every score is phase 0's
    for combine, rule in (("max", np.fmax), ("mean", lambda a, b: (a + b) / 2)):
        res = aflite(None, y, views={"a": A, "b": B}, combine=combine, **kw)
        assert len(res.history) == 1
        np.testing.assert_array_equal(res.scores, rule(res.view_scores["a"], res.view_scores["b"]))


def test_views_train_on_the_same_partitions():
    """Phase 0 starts cold: each view's scores are those of a run on that view alone."""
    y, A, B, _, _ = _planted()
    kw = dict(PLANTED_KW, target_size=N - 10, slice_size=10)
    both = aflite(None, y, views={"a": A, "b": B}, **kw)
    for name, X in (("a", A), ("b", B)):
        alone = aflite(X, y, **kw)
        np.testing.assert_array_equal(both.view_scores[name], alone.scores)
        assert both.history[0].views[name]["n_above_tau"] == alone.history[0].n_above_tau


@pytest.mark.parametrize("null", [None, "permutation"])
def test_one_view_gives_the_bits_of_the_run_without_views(null):
    y, A, _, _, _ = _planted()
    kw = dict(target_size=1200, train_size=0.5, slice_size=150, tau=0.7, random_state=3, progress=False,
              null=null, n_null=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = aflite(A, y, **kw)
        viewed = aflite(None, y, views={"only": A}, **kw)
    assert len(plain.history) > 1  # warm starts from the last phase's models are compared too
    for name in ("keep", "removed", "removed_phase", "scores"):
        assert getattr(plain, name).tobytes() == getattr(viewed, name).tobytes(), name
    assert plain.fingerprint == viewed.fingerprint and plain.stop_reason == viewed.stop_reason
    for p, v in zip(plain.history, viewed.history):
        assert (p.n_above_tau, p.null_above_tau, p.score_hist) == (v.n_above_tau, v.null_above_tau, v.score_hist)
        assert v.views["only"]["n_above_tau"] == p.n_above_tau
        if null:
            assert v.views["only"]["null_above_tau"] == p.null_above_tau
    assert plain.chance.null_above_tau == viewed.chance.null_above_tau == viewed.view_chance["only"].null_above_tau
    np.testing.assert_array_equal(viewed.view_scores["only"], plain.scores)
    assert [h["n_above_tau"] for h in viewed.view_history("only")] == [h.n_above_tau for h in plain.history]


def test_per_view_null_and_chance_check():
    y, A, B, _, _ = _planted()
    kw = dict(PLANTED_KW, null="permutation", n_null=2, chance_check=True)
    res = aflite(None, y, views={"a": A, "b": B}, **kw)
    h0 = res.history[0]
    for name in ("a", "b"):
        assert len(h0.views[name]["null_above_tau"]) == 2
        chance = res.view_chance[name]
        assert chance.null_above_tau[:2] == h0.views[name]["null_above_tau"] and len(chance.null_above_tau) == 3
        assert chance.n_above_tau == h0.views[name]["n_above_tau"]
    assert "views" in h0.as_dict() and "views" not in aflite(A, y, **PLANTED_KW).history[0].as_dict()


def test_x_given_with_views_is_the_view_x():
    y, A, B, _, _ = _planted()
    kw = dict(PLANTED_KW, target_size=N - 10, slice_size=10)
    res = aflite(A, y, views={"b": B}, **kw)
    assert res.views == ["X", "b"]
    np.testing.assert_array_equal(res.view_scores["X"], aflite(A, y, **kw).scores)


def test_multiple_choice_views():
    data = make_multiple_choice(600, n_candidates=3, random_state=0)
    X, y = data.X, data.y
    rng = np.random.default_rng(1)
    other = rng.normal(size=X.shape).astype(np.float32)
    kw = dict(target_size=500, train_size=0.5, slice_size=50, tau=0.9, random_state=0, progress=False,
              chance_check=False)
    res = aflite(None, y, views={"x": X, "noise": other}, **kw)
    alone = aflite(X, y, **dict(kw, target_size=599, slice_size=1))
    both0 = aflite(None, y, views={"x": X, "noise": other}, **dict(kw, target_size=599, slice_size=1))
    np.testing.assert_array_equal(both0.view_scores["x"], alone.scores)
    assert res.history[0].views["x"]["n_above_tau"] >= res.history[0].views["noise"]["n_above_tau"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(views={}), "non-empty dict"),
    (dict(views={"a": "A", "b": "B_short"}), "view 'b': X and y have different lengths"),
    (dict(views={"a": "A", "b": "MC"}), "one kind"),
    (dict(views={"a": "A"}, combine="min"), "combine must be one of 'max', 'mean'"),
    (dict(combine="mean"), "applies to views"),
    (dict(views={"a": "A"}, checkpoint="ck.npz"), "checkpoint cannot be combined with views"),
    (dict(views={"a": "A"}, stop="chance"), "stop='chance' cannot be combined with views"),
    (dict(views={"X": "A"}, X="A"), "named 'X'"),
    (dict(views={"a": "NAN"}), "view 'a': "),
])
def test_bad_views_are_one_clear_error(kwargs, message, tmp_path):
    y, A, B, _, _ = _planted()
    arrays = {"A": A, "B_short": B[:-1], "MC": A.reshape(N, 2, 3), "NAN": np.where(np.eye(N, D) > 0, np.nan, A)}
    kwargs = dict(kwargs)
    X = arrays.get(kwargs.pop("X", None), A if "views" not in kwargs else None)
    if "views" in kwargs:
        kwargs["views"] = {k: arrays[v] for k, v in kwargs["views"].items()}
    if "checkpoint" in kwargs:
        kwargs["checkpoint"] = str(tmp_path / kwargs["checkpoint"])
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        aflite(X, y, **dict(PLANTED_KW, **kwargs))


# --- the command line: --view NAME=PATH[:COLUMN] -----------------------------------------------

CLI_RUN = ["--target-size", str(N - 2 * N_CUE), "--train-size", "0.5", "--slice-size", str(2 * N_CUE), "--tau",
           "0.9", "--seed", "1", "--n-jobs", "1", "--no-chance-check", "--quiet"]


@pytest.fixture
def view_files(tmp_path):
    y, A, B, SA, SB = _planted()
    np.save(tmp_path / "A.npy", A)
    np.save(tmp_path / "B.npy", B)
    np.save(tmp_path / "y.npy", y)
    return tmp_path, y, A, B


def test_cli_views_match_the_api_and_report_each_view(view_files):
    import json

    from aflite_fast.cli import main

    tmp, y, A, B = view_files
    out = tmp / "out"
    pytest.importorskip("matplotlib")
    assert main(["filter", str(tmp / "y.npy"), "--view", f"a={tmp / 'A.npy'}", "--view", f"b={tmp / 'B.npy'}",
                 "--out", str(out), "--plot", *CLI_RUN]) == 0
    assert (out / "report-a.png").stat().st_size > 0 and (out / "report-b.png").stat().st_size > 0
    api = aflite(None, y, views={"a": A, "b": B}, **PLANTED_KW)
    np.testing.assert_array_equal(np.load(out / "keep.npy"), api.keep)
    np.testing.assert_array_equal(np.load(out / "scores.npy"), api.scores)
    report = json.loads((out / "report.json").read_text())
    assert report["combine"] == "max" and report["embeddings"] is None and list(report["views"]) == ["a", "b"]
    for name in ("a", "b"):
        view = json.loads((out / f"report-{name}.json").read_text())
        assert view["view"] == name and report["views"][name]["report"] == f"report-{name}.json"
        assert [h["n_above_tau"] for h in view["history"]] == [h["n_above_tau"] for h in api.view_history(name)]
        assert [h["n_active"] for h in view["history"]] == [h.n_active for h in api.history]


def test_cli_view_of_a_table_column_and_emb_as_view_x(view_files):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from aflite_fast.cli import main

    tmp, y, A, B = view_files
    pq.write_table(pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(B.ravel()), D), "label": y}),
                   tmp / "b.parquet")
    out = tmp / "out"
    assert main(["filter", str(tmp / "A.npy"), str(tmp / "y.npy"), "--view", f"b={tmp / 'b.parquet'}:emb",
                 "--combine", "mean", "--out", str(out), *CLI_RUN]) == 0
    api = aflite(A, y, views={"b": B}, combine="mean", **PLANTED_KW)
    np.testing.assert_array_equal(np.load(out / "keep.npy"), api.keep)
    assert sorted(p.name for p in out.glob("report-*.json")) == ["report-X.json", "report-b.json"]


@pytest.mark.parametrize("extra, message", [
    (["--view", "nameonly"], "--view: expected NAME=PATH[:COLUMN], got 'nameonly'"),
    (["--view", "a=A.npy", "--view", "a=B.npy"], "--view: the view name 'a' is given twice"),
    (["--view", "a=missing.npy"], "--view a: "),
    (["--view", "a=A.npy", "--checkpoint", "ck.npz"], "--checkpoint cannot be combined with views"),
    (["--view", "a=A.npy", "--evaluate"], "--evaluate takes one X"),
])
def test_cli_view_errors_are_one_line(view_files, capsys, monkeypatch, extra, message):
    from aflite_fast.cli import main

    tmp, *_ = view_files
    monkeypatch.chdir(tmp)
    assert main(["filter", "y.npy", "--out", "out", *extra, *CLI_RUN]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_views_given_as_paths_and_table_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    y, A, B, _, _ = _planted()
    np.save(tmp_path / "A.npy", A)
    pq.write_table(pa.table({"emb": pa.FixedSizeListArray.from_arrays(pa.array(B.ravel()), D)}), tmp_path / "b.parquet")
    kw = dict(PLANTED_KW, target_size=N - 10, slice_size=10)
    res = aflite(None, y, views={"a": str(tmp_path / "A.npy"), "b": (str(tmp_path / "b.parquet"), "emb")}, **kw)
    ref = aflite(None, y, views={"a": A, "b": B}, **kw)
    np.testing.assert_array_equal(res.scores, ref.scores)
    assert res.fingerprint == ref.fingerprint


def test_seed_ensembles_with_views():
    y, A, B, _, _ = _planted()
    res = aflite(None, y, views={"a": A, "b": B}, n_seeds=2, **PLANTED_KW)
    second = aflite(None, y, views={"a": A, "b": B}, **dict(PLANTED_KW, random_state=2))
    np.testing.assert_array_equal(res.ensemble.runs[1].keep, second.keep)
    np.testing.assert_array_equal(res.ensemble.runs[1].view_scores["b"], second.view_scores["b"])
