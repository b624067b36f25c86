"""``aflite-fast oof EMB LABELS --out PROBS.npy``.

a. The file holds ``oof_predict_proba(X, y, ...)`` bitwise (N x C float32), with folds, groups,
   another loss, one thread and a small memory budget, and with partitions.
b. cleanlab's batched label-issue search reads it (``pred_probs_file=``) and finds what it
   finds from the array itself.
c. Bad input: exit code 2, one line naming the flag, the previous PROBS.npy left as it was and
   no temporary file; an input rewritten during the run is refused the same way.
"""
import os
import warnings

import numpy as np
import pytest

from aflite_fast import oof_predict_proba
from aflite_fast.cli import main
from aflite_fast.filtering import oof

N = 600


@pytest.fixture
def files(seed, make_problem, tmp_path):
    X, y = make_problem(np.random.default_rng([seed, 210]), N, 10, 3, signal=0.8)
    groups = np.arange(N) // 4
    np.save(tmp_path / "emb.npy", X)
    (tmp_path / "labels.txt").write_text("".join(f"{'abc'[v]}\n" for v in y))  # text labels, sorted classes
    np.save(tmp_path / "groups.npy", groups)
    return X, y, groups, tmp_path


@pytest.mark.parametrize("case", ["folds", "groups_gce", "partitions"])
def test_file_equals_the_api(files, case, capsys):
    X, y, groups, tmp = files
    out = tmp / "probs.npy"
    args = ["oof", str(tmp / "emb.npy"), str(tmp / "labels.txt"), "--out", str(out), "--seed", "3"]
    kwargs = dict(random_state=3)
    if case == "groups_gce":
        args += ["--cv", "4", "--groups", str(tmp / "groups.npy"), "--loss", "gce", "--C", "0.5",
                 "--n-jobs", "1", "--max-memory", "2M"]
        kwargs.update(cv=4, groups=groups, loss="gce", C=0.5)
    elif case == "partitions":
        args += ["--n-partitions", "8", "--train-size", "0.5"]
        kwargs.update(n_partitions=8, train_size=0.5)
    assert main(args) == 0
    written = np.load(out, mmap_mode="r")
    assert written.dtype == np.float32 and written.shape == (N, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected = oof_predict_proba(X, y, **kwargs)
    np.testing.assert_array_equal(written, expected)
    err = capsys.readouterr().err
    assert "wrote" in err
    if caught:  # partitions: rows no model held out are NaN, said once in the summary
        assert case == "partitions" and "never held out are NaN" in err
    assert sorted(os.listdir(tmp)) == ["emb.npy", "groups.npy", "labels.txt", "probs.npy"]


def test_cleanlab_reads_the_file(files):
    pytest.importorskip("cleanlab", reason="cleanlab is not installed")
    from cleanlab.experimental.label_issues_batched import find_label_issues_batched

    X, y, _, tmp = files
    y = y.copy()
    y[:30] = (y[:30] + 1) % 3  # planted label errors
    np.save(tmp / "labels.npy", y)
    assert main(["oof", str(tmp / "emb.npy"), str(tmp / "labels.npy"), "--out", str(tmp / "probs.npy"),
                 "--quiet"]) == 0
    labels = np.load(tmp / "labels.npy", mmap_mode="r")
    from_file = find_label_issues_batched(labels=labels, pred_probs_file=str(tmp / "probs.npy"), batch_size=200,
                                          verbose=False)
    from_array = find_label_issues_batched(labels=y, pred_probs=oof_predict_proba(X, y, random_state=0),
                                           batch_size=200, verbose=False)
    np.testing.assert_array_equal(from_file, from_array)
    assert np.isin(np.arange(30), from_file).mean() > 0.5  # most planted errors are found


@pytest.mark.parametrize("extra, message", [
    (["--cv", "1"], "--cv must be at least 2 folds"),
    (["--C", "-1"], "--C must be a positive number"),
    (["--groups-column", "0"], "--groups-column needs --groups FILE"),
    (["--train-size", "0.5"], "--train-size applies to --n-partitions only"),
    (["--loss", "forward"], "--loss forward needs --transition"),
    (["--max-memory", "lots"], "argument --max-memory"),
])
def test_bad_input_is_one_line_and_keeps_the_file(files, capsys, extra, message):
    _, _, _, tmp = files
    out = tmp / "probs.npy"
    out.write_bytes(b"previous")
    assert main(["oof", str(tmp / "emb.npy"), str(tmp / "labels.txt"), "--out", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert out.read_bytes() == b"previous"
    assert sorted(os.listdir(tmp)) == ["emb.npy", "groups.npy", "labels.txt", "probs.npy"]


@pytest.mark.parametrize("out, message", [
    ("probs.txt", "must name a .npy file"),
    ("missing/probs.npy", "does not exist"),
    (".", "is a directory"),
])
def test_bad_out_is_refused_before_the_run(files, capsys, monkeypatch, out, message):
    _, _, _, tmp = files
    monkeypatch.setattr(oof, "oof_run", None)  # never reached
    path = str(tmp / out) if out != "." else str(tmp) + "/probs.npy"
    if out == ".":
        os.mkdir(path)
    assert main(["oof", str(tmp / "emb.npy"), str(tmp / "labels.txt"), "--out", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0] and message in err[0], err


def test_input_changed_during_the_run_keeps_the_file(files, capsys, monkeypatch):
    X, _, _, tmp = files
    out = tmp / "probs.npy"
    out.write_bytes(b"previous")
    real = oof.oof_run

    def rewriting_run(*args, **kw):
        np.save(tmp / "emb.npy", X[::-1])  # replaced while the models train
        return real(*args, **kw)

    monkeypatch.setattr(oof, "oof_run", rewriting_run)
    assert main(["oof", str(tmp / "emb.npy"), str(tmp / "labels.txt"), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"EMB file '{tmp / 'emb.npy'}' changed while this run was using it" in err[0], err
    assert out.read_bytes() == b"previous"
    assert sorted(os.listdir(tmp)) == ["emb.npy", "groups.npy", "labels.txt", "probs.npy"]
