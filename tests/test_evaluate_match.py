"""``aflite-fast evaluate DIR EMB LABELS`` refuses inputs that are not the run's.

a. ``filter`` records in report.json a fingerprint of X's content (``x_sha256``, the same for
   any file format or byte order holding the same values) and of the labels (``labels_sha256``,
   from the classes and each row's class); :class:`aflite_fast.AFLiteResult` carries X's as
   ``fingerprint``.
b. ``evaluate`` refuses, in one line naming EMB or LABELS and leaving DIR as it was: other
   embeddings of another width or dtype, or of the same shape with other values; labels of
   other classes, or the same classes on other rows.  The same values in another format or
   byte order are accepted.
c. A report.json that is valid JSON but not an object is refused in one line.
"""
import json

import numpy as np
import pytest

from aflite_fast import aflite
from aflite_fast.cli import main
from aflite_fast.io.fingerprint import ContentHash
from aflite_fast.io.inputs import scan_rows


@pytest.fixture
def run(tmp_path, seed):
    rng = np.random.default_rng([seed, 3636])
    X = rng.standard_normal((240, 16)).astype(np.float32)
    y = (X[:, 0] + 0.5 * rng.standard_normal(240) > 0).astype(np.int64)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    out = tmp_path / "o"
    assert main(["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(out), "--target-size",
                 "180", "--train-size", "0.5", "--n-partitions", "4", "--slice-size", "30", "--n-jobs", "1",
                 "--no-chance-check", "--quiet"]) == 0
    return tmp_path, X, y, out


def _evaluate(out, emb, labels, *extra):
    return main(["evaluate", str(out), str(emb), str(labels), "--cv", "2", "--n-random", "1", "--n-jobs", "1",
                 "--quiet", *extra])


def _refused(capsys, out, emb, labels, *words):
    before = (out / "report.json").read_bytes()
    assert _evaluate(out, emb, labels) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("aflite-fast evaluate: error: ") and "Traceback" not in lines[0]
    for word in words:
        assert word in lines[0], lines[0]
    assert (out / "report.json").read_bytes() == before
    return lines[0]


def test_report_records_the_fingerprints(run):
    tmp_path, X, y, out = run
    report = json.loads((out / "report.json").read_text())
    with ContentHash(X.shape, X.dtype, 1) as content:
        scan_rows(X, fingerprint=content)
        expected = content.hexdigest()
    assert report["x_sha256"] == expected
    assert isinstance(report["labels_sha256"], str) and len(report["labels_sha256"]) == 64
    res = aflite(X, y, target_size=180, train_size=0.5, n_partitions=4, slice_size=30, n_jobs=1,
                 chance_check=False, progress=False)
    assert res.fingerprint == expected


def test_embeddings_of_another_width_dtype_or_content_are_refused(run, capsys):
    tmp_path, X, y, out = run
    np.save(tmp_path / "narrow.npy", X[:, :4])
    _refused(capsys, out, tmp_path / "narrow.npy", tmp_path / "y.npy", "EMB", "4 features", "16")
    np.save(tmp_path / "wide64.npy", X.astype(np.float64))
    _refused(capsys, out, tmp_path / "wide64.npy", tmp_path / "y.npy", "EMB", "float64", "float32")
    other = X.copy()
    other[7, 3] += 1.0
    np.save(tmp_path / "other.npy", other)
    _refused(capsys, out, tmp_path / "other.npy", tmp_path / "y.npy", "EMB", "content")


def test_labels_of_another_task_are_refused(run, capsys):
    tmp_path, X, y, out = run
    np.save(tmp_path / "classes.npy", y + 1)
    _refused(capsys, out, tmp_path / "X.npy", tmp_path / "classes.npy", "LABELS", "classes")
    np.save(tmp_path / "shuffled.npy", np.roll(y, 1))
    _refused(capsys, out, tmp_path / "X.npy", tmp_path / "shuffled.npy", "LABELS", "rows")


def test_the_same_values_in_another_format_are_accepted(run, capsys):
    tmp_path, X, y, out = run
    np.save(tmp_path / "big_endian.npy", X.astype(">f4"))
    (tmp_path / "y.csv").write_text("".join(f"{v}\n" for v in y))
    assert _evaluate(out, tmp_path / "big_endian.npy", tmp_path / "y.csv") == 0
    assert "evaluation" in json.loads((out / "report.json").read_text())


def test_report_that_is_not_an_object_is_one_line(run, capsys):
    tmp_path, X, y, out = run
    for text in ("[1, 2, 3]", "42", "null", '"report"'):
        (out / "report.json").unlink()  # a link into DIR/.aflite: replaced, not written through
        (out / "report.json").write_text(text)
        assert _evaluate(out, tmp_path / "X.npy", tmp_path / "y.npy") == 2
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and "not a JSON object" in lines[0], lines
