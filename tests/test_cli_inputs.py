"""Inputs and messages of the command line and the API entry points.

a. A table EMB holding the labels needs no LABELS argument: ``--labels-column NAME`` alone
   reads them from EMB (``filter``, ``oof``, ``label-issues``, ``evaluate``), with the results
   of naming the table twice.  Without either, one line says what to give.
b. ``predictability(progress=True)`` shows a progress bar, as ``aflite`` does; the scores do
   not depend on it.
c. Messages say what to do, in the flags the user typed: a 0/1 integer ``--eval-rows`` mask
   (use a boolean mask), negative ``--eval-rows`` indices (refused: indices count from 0), a
   multiple-choice label out of range (the number, not its NumPy repr), ``--threshold`` with
   ``--n-issues``, ``--n-issues 0``, ``--train-size 1e3``, the train-size bound with
   ``--eval-rows`` (the rows left to train on, said so), a Fortran-ordered 3-D ``.npy`` (how
   to save it), the progress bar's row counts (whole numbers, not ``1e+4``), ``demo --help``
   (plain text) and ``aflite-fast --help`` (filter reads every format).
"""
import numpy as np
import pytest

from aflite_fast import aflite, predictability
from aflite_fast.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture
def data(tmp_path, seed):
    rng = np.random.default_rng([seed, 3608])
    X = rng.standard_normal((300, 4)).astype(np.float32)
    y = (X[:, 0] + 0.5 * rng.standard_normal(300) > 0).astype(np.int64)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    table = pa.table({"emb": pa.array(list(X), type=pa.list_(pa.float32())), "label": y})
    pq.write_table(table, tmp_path / "t.parquet")
    return tmp_path, X, y


def _one_line(capsys, prog="filter"):
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"aflite-fast {prog}: error: ") and "Traceback" not in lines[0], lines[0]
    return lines[0]


FILTER = ["--target-size", "250", "--train-size", "0.5", "--n-partitions", "4", "--slice-size", "20",
          "--n-jobs", "1", "--no-chance-check", "--quiet"]


# ----------------------------------------------------------------------------- a. LABELS from EMB

def test_labels_column_alone_reads_the_labels_from_the_table(data, capsys):
    tmp_path, X, y = data
    table = str(tmp_path / "t.parquet")
    assert main(["filter", table, table, "--column", "emb", "--labels-column", "label", "--out",
                 str(tmp_path / "twice"), *FILTER]) == 0
    assert main(["filter", table, "--column", "emb", "--labels-column", "label", "--out",
                 str(tmp_path / "once"), *FILTER]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "once" / "keep.npy"), np.load(tmp_path / "twice" / "keep.npy"))
    for command, out in (("oof", "p1.npy"), ("label-issues", "issues.npy")):
        assert main([command, table, table, "--column", "emb", "--labels-column", "label", "--out",
                     str(tmp_path / f"twice-{out}"), "--quiet"]) == 0
        assert main([command, table, "--column", "emb", "--labels-column", "label", "--out",
                     str(tmp_path / out), "--quiet"]) == 0
        np.testing.assert_array_equal(np.load(tmp_path / out), np.load(tmp_path / f"twice-{out}"))
    assert main(["evaluate", str(tmp_path / "once"), table, "--column", "emb", "--labels-column", "label",
                 "--cv", "2", "--n-random", "1", "--quiet"]) == 0


def test_missing_labels_is_one_line_saying_what_to_give(data, capsys):
    tmp_path, X, y = data
    assert main(["filter", str(tmp_path / "t.parquet"), "--column", "emb", "--out", str(tmp_path / "o"),
                 *FILTER]) == 2
    line = _one_line(capsys)
    assert "LABELS" in line and "--labels-column" in line
    assert main(["filter", str(tmp_path / "X.npy"), "--labels-column", "label", "--out", str(tmp_path / "o"),
                 *FILTER]) == 2
    line = _one_line(capsys)
    assert "LABELS" in line and "not a table" in line
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- b. predictability's bar

def test_predictability_has_a_progress_bar(data, capsys):
    tmp_path, X, y = data
    quiet = predictability(X, y, n_partitions=4, train_size=0.5, random_state=0, n_jobs=1)
    capsys.readouterr()
    shown = predictability(X, y, n_partitions=4, train_size=0.5, random_state=0, n_jobs=1, progress=True)
    err = capsys.readouterr().err
    assert "predictability" in err and "300" in err
    np.testing.assert_array_equal(shown.scores, quiet.scores)
    np.testing.assert_array_equal(shown.prob_label, quiet.prob_label)


# ----------------------------------------------------------------------------- c. messages

def test_a_zero_one_eval_rows_array_is_called_a_mask(data, capsys):
    tmp_path, X, y = data
    np.save(tmp_path / "mask01.npy", (np.arange(300) % 3 == 0).astype(np.int64))
    assert main(["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "o"),
                 "--eval-rows", str(tmp_path / "mask01.npy"), *FILTER]) == 2
    line = _one_line(capsys)
    assert "--eval-rows" in line and "mask" in line and "astype(bool)" in line, line


def test_negative_eval_rows_are_refused(data, capsys):
    tmp_path, X, y = data
    (tmp_path / "rows.txt").write_text("5\n-1\n7\n")
    assert main(["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "o"),
                 "--eval-rows", str(tmp_path / "rows.txt"), *FILTER]) == 2
    line = _one_line(capsys)
    assert "--eval-rows" in line and "-1" in line and "from 0" in line, line
    with pytest.raises(ValueError, match="negative index -1"):
        aflite(X, y, target_size=250, train_size=0.5, n_partitions=4, eval_rows=[5, -1], progress=False)


def test_multiple_choice_label_out_of_range_is_a_plain_number(tmp_path, capsys):
    rng = np.random.default_rng(3)
    np.save(tmp_path / "mc.npy", rng.standard_normal((60, 4, 3)).astype(np.float32))
    np.save(tmp_path / "y.npy", np.r_[np.zeros(59, dtype=np.int64), 4])
    assert main(["filter", str(tmp_path / "mc.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "o"),
                 "--target-size", "40", "--train-size", "0.5", "--quiet"]) == 2
    line = _one_line(capsys)
    assert "holds 4," in line and "np.int64" not in line, line


def test_label_issues_threshold_and_n_issues(data, capsys):
    tmp_path, X, y = data
    base = ["label-issues", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "i.npy"),
            "--quiet"]
    assert main([*base, "--threshold", "0.3", "--n-issues", "5"]) == 2
    line = _one_line(capsys, "label-issues")
    assert "--threshold" in line and "--n-issues" in line, line
    assert main([*base, "--n-issues", "0"]) == 0  # the range the messages give, [0, N], is the flag's
    assert np.load(tmp_path / "i.npy").size == 0
    assert main([*base, "--n-issues", "301"]) == 2
    assert "[0, 300]" in _one_line(capsys, "label-issues")


@pytest.mark.parametrize("value, words", [("1e3", "1000"), ("2.0", "2"), ("1.5", "(0, 1)"), ("ten", "(0, 1)")])
def test_train_size_that_is_neither_rows_nor_fraction(data, capsys, value, words):
    tmp_path, X, y = data
    argv = ["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "o"),
            "--target-size", "250", "--train-size", value, "--quiet"]
    assert main(argv) == 2
    line = _one_line(capsys)
    assert "--train-size" in line and repr(value) in line and words in line, line
    assert "train_size_arg" not in line


def test_train_size_bound_with_eval_rows_says_which_rows(data, capsys):
    tmp_path, X, y = data
    np.save(tmp_path / "ev.npy", np.arange(200))
    argv = ["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "o"),
            "--target-size", "250", "--train-size", "150", "--eval-rows", str(tmp_path / "ev.npy"), "--quiet"]
    assert main(argv) == 2
    line = _one_line(capsys)
    assert "100" in line and "300 rows less the 200" in line and "--eval-rows" in line, line


def test_fortran_ordered_multiple_choice_npy(tmp_path, capsys):
    rng = np.random.default_rng(4)
    X = rng.standard_normal((60, 3, 4)).astype(np.float32)
    np.save(tmp_path / "f.npy", np.asfortranarray(X))
    np.save(tmp_path / "y.npy", rng.integers(0, 3, 60))
    assert main(["filter", str(tmp_path / "f.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "o"),
                 "--target-size", "40", "--train-size", "0.5", "--quiet"]) == 2
    line = _one_line(capsys)
    assert "f.npy" in line and "Fortran" in line and "np.ascontiguousarray" in line and "--C" not in line, line


def test_progress_bar_counts_are_whole_numbers(tmp_path, capsys):
    rng = np.random.default_rng(5)
    X = rng.standard_normal((10_001, 2)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    aflite(X, y, target_size=10_000, train_size=0.5, n_partitions=2, slice_size=1, n_jobs=1, chance_check=False,
           progress=True)
    err = capsys.readouterr().err
    assert "active=10000" in err and "e+" not in err, err[-400:]


def test_help_texts(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = capsys.readouterr().out
    assert "``" not in text and ":mod:" not in text and "before/after" in text
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    line = next(line for line in text.splitlines() if line.strip().startswith("filter"))
    assert "(.npy)" not in line and "AFLite" in line
