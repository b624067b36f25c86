"""Refusals read as the user's own problem, in the command line's words.

a. Every refusal of ``aflite-fast filter`` is exit 2 and one line on stderr naming the flag, with
   nothing written: no traceback, no NumPy internals (``allow_pickle`` advice, an ``ast``
   node's repr, "Unable to allocate"), no dask timeout of 30 s.
b. ``--checkpoint`` is checked before phase 0: a foreign file (a ``.npy`` array, text) or a
   directory that takes no new file is refused before any phase is scored.
c. Missing labels (``nan``, ``NA``, empty) in a text label file are refused naming the line.
d. A memory need over the budget (e.g. a billion partitions) is refused with the number before
   anything of that size is allocated.
"""
import os

import numpy as np
import pytest

from aflite_fast.cli import main
from aflite_fast.phase import dask_backend, local, partitions

INTERNALS = ("Traceback", "allow_pickle", "object at 0x", "Unable to allocate", "ast.")


@pytest.fixture
def files(tmp_path, seed):
    rng = np.random.default_rng([seed, 190])
    X = rng.standard_normal((400, 5)).astype(np.float32)
    y = (X[:, 0] + 0.5 * rng.standard_normal(400) > 0).astype(np.int64)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    return tmp_path


def _refused(files, capsys, *extra, out="o"):
    """Run filter with ``extra``; assert exit 2, one clean line, nothing written; return it."""
    argv = ["filter", str(files / "X.npy"), str(files / "y.npy"), "--out", str(files / out),
            "--target-size", "200", "--train-size", "0.5", "--n-partitions", "4", "--slice-size", "50",
            "--n-jobs", "1", "--quiet", *extra]
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("aflite-fast filter: error: ")
    assert not any(word in lines[0] for word in INTERNALS), lines[0]
    assert not (files / out).exists()
    return lines[0]


def _corrupt_npy(path, old, new):
    np.save(path, np.zeros((3, 2), dtype=np.float32))
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new))


def test_foreign_checkpoint_files_are_refused_naming_the_flag(files, capsys):
    np.save(files / "array.npy", np.arange(5))
    (files / "notes.txt").write_text("0.9 0.1\n0.2 0.8\n")
    (files / "empty.npz").write_bytes(b"")
    (files / "broken.npz").write_bytes(b"PK\x03\x04 not really a zip archive")
    for name, what in (("array.npy", "a .npy array"), ("notes.txt", "not an .npz archive"),
                       ("empty.npz", "empty"), ("broken.npz", "not a readable aflite_fast checkpoint")):
        line = _refused(files, capsys, "--checkpoint", str(files / name))
        assert f"--checkpoint {str(files / name)!r}" in line and what in line
        assert (files / name).exists()  # never overwritten
    line = _refused(files, capsys, "--checkpoint", str(files))
    assert "--checkpoint" in line and "is a directory" in line
    line = _refused(files, capsys, "--checkpoint", str(files / "missing" / "c.npz"))
    assert "--checkpoint" in line and "does not exist" in line


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc, a directory no one can write")
def test_unwritable_checkpoint_is_refused_before_phase_0(files, capsys, monkeypatch):
    from aflite_fast import aflite

    line = _refused(files, capsys, "--checkpoint", "/proc/self/run.ckpt.npz")
    assert "--checkpoint '/proc/self/run.ckpt.npz' cannot be written" in line

    def no_phase(*args, **kwargs):
        raise AssertionError("a phase was scored before the checkpoint was checked")

    monkeypatch.setattr(local, "score_phase", no_phase)
    X, y = np.load(files / "X.npy"), np.load(files / "y.npy")
    with pytest.raises(ValueError, match="checkpoint '/proc/self/run.ckpt.npz' cannot be written"):
        aflite(X, y, target_size=200, train_size=0.5, n_partitions=4, checkpoint="/proc/self/run.ckpt.npz")


def test_text_transition_file_gets_no_unpickling_advice(files, capsys):
    (files / "T.txt").write_text("0.9 0.1\n0.2 0.8\n")
    line = _refused(files, capsys, "--loss", "forward", "--transition", str(files / "T.txt"))
    assert "--transition" in line and "not a .npy or .npz file" in line


@pytest.mark.parametrize("old,new", [(b"'descr': '<f4'", b"'descr': abc_"), (b"(3, 2)", b"(3, x)"),
                                     (b"{'descr'", b"['descr'"), (b"'fortran_order': False", b"'fortran': 0")])
def test_corrupt_npy_header_is_described_in_plain_words(files, capsys, old, new):
    from aflite_fast.io.inputs import open_embeddings

    _corrupt_npy(files / "bad.npy", old, new)
    with pytest.raises(ValueError, match=r"has a corrupt \.npy header") as exc:
        open_embeddings(str(files / "bad.npy"))
    assert "object at 0x" not in str(exc.value) and "\\x00" not in str(exc.value)
    argv = ["filter", str(files / "bad.npy"), str(files / "y.npy"), "--out", str(files / "o"),
            "--target-size", "1", "--train-size", "1"]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert "corrupt .npy header" in line and not any(word in line for word in INTERNALS)


@pytest.mark.parametrize("missing", ["nan", "NaN", "-nan", "NA", "N/A", "<NA>", "NULL", "null", "None", ""])
def test_missing_labels_are_refused_naming_the_line(tmp_path, missing):
    from aflite_fast.io.labelfile import read_labels_file

    path = tmp_path / "labels.txt"
    path.write_text("\n".join(["pos", "neg", "pos", missing, "neg"]) + "\n")
    with pytest.raises(ValueError, match=r"line 4 of the labels file .* (has a missing label|is blank)"):
        read_labels_file(path)
    csv_path = tmp_path / "labels.csv"
    csv_path.write_text("id,label\n1,3\n2,5\n3," + missing + "\n")
    with pytest.raises(ValueError, match=r"line 4 of the labels file .* has (a missing|an empty) label"):
        read_labels_file(csv_path, column="label", header=True)


def test_words_that_only_look_missing_are_labels(tmp_path):
    from aflite_fast.io.labelfile import read_labels_file

    path = tmp_path / "labels.txt"
    path.write_text("none\nnan-free\nNAN2\nna\n")  # lowercase 'none' and 'na' are words here
    assert read_labels_file(path).tolist() == ["none", "nan-free", "NAN2", "na"]


def test_missing_labels_on_the_command_line(files, capsys):
    y = np.load(files / "y.npy")
    lines = ["pos" if v else "neg" for v in y]
    lines[17] = "nan"
    (files / "y.txt").write_text("\n".join(lines) + "\n")
    argv = ["filter", str(files / "X.npy"), str(files / "y.txt"), "--out", str(files / "o"),
            "--target-size", "200", "--train-size", "0.5"]
    assert main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert "line 18 of the labels file" in line and "missing label ('nan')" in line
    assert not (files / "o").exists()


def test_memory_need_over_the_budget_is_refused_before_allocating(files, capsys, monkeypatch):
    from aflite_fast import aflite, oof_predict_proba

    line = _refused(files, capsys, "--n-partitions", "1000000000")
    assert "--n-partitions" in line and "1000000000 partitions" in line and " TB " in line
    line = _refused(files, capsys, "--n-partitions", "64", "--max-memory", "50K")
    assert "--max-memory=50 kB does not cover" in line

    def no_draw(*args, **kwargs):
        raise AssertionError("partitions were drawn before the budget was checked")

    monkeypatch.setattr(partitions, "partition_train_positions", no_draw)
    X, y = np.load(files / "X.npy"), np.load(files / "y.npy")
    with pytest.raises(MemoryError, match=r"max_memory=.* does not cover .* \(\d+(\.\d+)? TB for 400 active rows "
                                          r"and 1000000000 partitions\)"):
        aflite(X, y, target_size=200, train_size=0.5, n_partitions=10**9)
    with pytest.raises(MemoryError, match="1000000000 partitions"):
        oof_predict_proba(X, y, n_partitions=10**9, train_size=0.5)


def test_unreachable_scheduler_fails_within_the_connect_timeout(files, capsys, monkeypatch):
    pytest.importorskip("distributed")

    monkeypatch.setattr(dask_backend, "CONNECT_TIMEOUT", 1)
    line = _refused(files, capsys, "--scheduler", "tcp://127.0.0.1:1")
    assert "--scheduler 'tcp://127.0.0.1:1': connection refused, nothing listens at port 1" in line
    line = _refused(files, capsys, "--scheduler", str(files / "nope.json"))
    assert "no such scheduler file" in line
    line = _refused(files, capsys, "--scheduler", "local:many")
    assert "--scheduler 'local:many'" in line
