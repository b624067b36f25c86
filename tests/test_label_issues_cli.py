"""``aflite-fast label-issues``: the library's label-issue filters on files, one output file."""
import csv

import numpy as np
import pytest

from aflite_fast.cli import main
from aflite_fast.filtering.label_issues import filter_label_issues


@pytest.fixture
def noisy_files(tmp_path, seed):
    rng = np.random.default_rng([seed, 19])
    n = 900
    X = rng.standard_normal((n, 6)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int64)
    flipped = rng.random(n) < 0.1
    y[flipped] = 1 - y[flipped]
    np.save(tmp_path / "X.npy", X)
    (tmp_path / "y.txt").write_text("\n".join("pos" if v else "neg" for v in y) + "\n")
    return tmp_path, X, y, flipped


def test_ranked_rows_are_the_library_s(noisy_files, capsys):
    tmp, X, y, flipped = noisy_files
    args = [str(tmp / "X.npy"), str(tmp / "y.txt"), "--seed", "3", "--n-jobs", "1"]
    assert main(["label-issues", *args, "--out", str(tmp / "sc.npy")]) == 0
    assert "aflite-fast label-issues: flagged" in capsys.readouterr().err
    expected = filter_label_issues(X, np.where(y == 1, "pos", "neg"), cv=5, random_state=3, n_jobs=1)
    got = np.load(tmp / "sc.npy")
    np.testing.assert_array_equal(got, expected.ranked_issues)
    assert flipped[got].mean() > 0.5 and flipped[got].sum() > 0.6 * flipped.sum()

    assert main(["label-issues", *args, "--method", "annealing", "--threshold", "0.8",
                 "--out", str(tmp / "an.csv"), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    rows = list(csv.reader((tmp / "an.csv").open()))
    assert rows[0] == ["row", "label", "p_label", "predicted", "p_predicted"]
    annealing = filter_label_issues(X, np.where(y == 1, "pos", "neg"), method="annealing", threshold=0.8,
                                    cv=5, random_state=3, n_jobs=1)
    assert [int(r[0]) for r in rows[1:]] == annealing.ranked_issues.tolist()
    for row, label, p_label, predicted, p_predicted in rows[1:]:
        assert label == ("pos" if y[int(row)] else "neg") and predicted != label
        assert float(p_predicted) > 0.8 and abs(float(p_label) + float(p_predicted) - 1) < 1e-4


@pytest.mark.parametrize("extra,message", [
    (["--method", "annealing", "--n-issues", "3"], "--n-issues applies to --method self-confidence only"),
    (["--threshold", "1.5"], "--threshold must be in"),
    (["--cv", "1"], "--cv must be at least 2 folds"),
])
def test_bad_flags_exit_2_naming_the_flag_and_write_nothing(noisy_files, extra, message, capsys):
    tmp, X, y, flipped = noisy_files
    assert main(["label-issues", str(tmp / "X.npy"), str(tmp / "y.txt"), "--out", str(tmp / "o.npy"),
                 *extra]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("aflite-fast label-issues: error: ") and message in lines[0]
    assert not (tmp / "o.npy").exists()
