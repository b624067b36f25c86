"""Command line: outputs, exit codes, no partial output."""
import json
import os

import numpy as np
import pytest

from aflite_fast.cli import main


@pytest.fixture
def emb_files(tmp_path):
    rng = np.random.default_rng(0)
    n, d = 600, 8
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = (X[:, 0] + 0.3 * rng.standard_normal(n) > 0).astype(np.int64)
    np.save(tmp_path / "emb.npy", X)
    np.save(tmp_path / "labels.npy", y)
    with open(tmp_path / "labels.txt", "w") as fh:
        fh.write("\n".join(["pos" if v else "neg" for v in y]) + "\n")
    return tmp_path, X, y


ARGS = ["--target-size", "300", "--partitions", "8", "--train-size", "200", "--slice-size", "100",
        "--seed", "1", "--quiet"]


def test_filter_writes_outputs(emb_files):
    tmp, X, y = emb_files
    out = tmp / "out"
    assert main(["filter", str(tmp / "emb.npy"), str(tmp / "labels.npy"), "--out", str(out), *ARGS]) == 0
    keep = np.load(out / "keep.npy")
    scores = np.load(out / "scores.npy")
    report = json.loads((out / "report.json").read_text())
    assert keep.dtype == np.int64 and np.all(np.diff(keep) > 0)
    assert keep.size >= 300 and scores.shape == (X.shape[0],)
    assert report["n_kept"] == keep.size and report["parameters"]["n_partitions"] == 8
    assert len(report["history"]) >= 1 and "seconds" in report["history"][0]
    assert sorted(os.listdir(out)) == ["keep.npy", "report.json", "scores.npy"]
    assert not [p for p in os.listdir(tmp) if p.startswith(".aflite-tmp")]


def test_text_labels_give_same_result(emb_files):
    tmp, X, y = emb_files
    main(["filter", str(tmp / "emb.npy"), str(tmp / "labels.npy"), "--out", str(tmp / "a"), *ARGS])
    main(["filter", str(tmp / "emb.npy"), str(tmp / "labels.txt"), "--out", str(tmp / "b"), *ARGS])
    np.testing.assert_array_equal(np.load(tmp / "a" / "keep.npy"), np.load(tmp / "b" / "keep.npy"))


@pytest.mark.parametrize("case", ["missing", "complex_dtype", "nan", "length", "garbage"])
def test_bad_input_exit_2_without_output(emb_files, case, capsys):
    tmp, X, y = emb_files
    emb, labels = tmp / "emb.npy", tmp / "labels.npy"
    if case == "missing":
        emb = tmp / "nope.npy"
    elif case == "complex_dtype":
        emb = tmp / "complex.npy"
        np.save(emb, X.astype(np.complex64))
    elif case == "nan":
        emb = tmp / "nan.npy"
        Xn = X.copy()
        Xn[17, 3] = np.nan
        np.save(emb, Xn)
    elif case == "length":
        labels = tmp / "short.npy"
        np.save(labels, y[:-5])
    elif case == "garbage":
        emb = tmp / "garbage.npy"
        emb.write_bytes(b"not a numpy file at all")
    out = tmp / "out"
    assert main(["filter", str(emb), str(labels), "--out", str(out), *ARGS]) == 2
    err = capsys.readouterr().err
    assert "error" in err
    assert not out.exists()
    assert not [p for p in os.listdir(tmp) if p.startswith(".aflite-tmp")]


def test_bad_parameter_exit_2(emb_files, capsys):
    tmp, X, y = emb_files
    args = ["filter", str(tmp / "emb.npy"), str(tmp / "labels.npy"), "--out", str(tmp / "o"),
            "--target-size", "10", "--train-size", "600", "--quiet"]
    assert main(args) == 2
    assert "train_size" in capsys.readouterr().err
    args[-2] = "0.5"
    assert main(args + ["--tau", "1.5"]) == 2
    assert "tau" in capsys.readouterr().err


def test_demo_runs_and_reports(capsys):
    assert main(["demo", "--n-samples", "1200", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "share with spurious feature" in out and "linear model accuracy" in out
