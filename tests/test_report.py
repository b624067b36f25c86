"""The run report (issue 12): report.json's per-class and per-phase records, report.png.

a. report.json holds per-class counts of kept and removed rows (they match the labels of
   keep.npy) and, per phase, the score histogram and the rows per class active and removed
   (consistent from one phase to the next).
b. ``filter --plot`` and ``aflite-fast report DIR`` draw DIR/report.png from a real run: a
   valid PNG that matplotlib reads back; the docs show one such figure.  report.png is part
   of DIR's output set: ``report`` adds it to the set in place (the other files unchanged),
   a later run without ``--plot`` drops it with its set, and ``report`` refuses while a run
   holds DIR.
c. Without matplotlib the error names the extra, with exit code 2 and nothing written; a
   directory without report.json is exit code 2.
"""
import json
import os
import struct
import sys

import numpy as np
import pytest

from aflite_fast.cli import _figure, main

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def files(tmp_path, seed, make_problem):
    X, y = make_problem(np.random.default_rng([seed, 140]), 900, 10, 3, weights=[0.5, 0.3, 0.2], signal=0.7)
    np.save(tmp_path / "emb.npy", X)
    np.save(tmp_path / "labels.npy", y)
    return tmp_path, y


ARGS = ["--target-size", "450", "--partitions", "8", "--train-size", "0.5", "--slice-size", "100",
        "--tau", "0.6", "--seed", "0", "--threads", "1", "--quiet"]


def _png_size(path):
    data = open(path, "rb").read()
    assert data[:8] == PNG_SIGNATURE and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _run(tmp, *extra):
    out = tmp / "out"
    assert main(["filter", str(tmp / "emb.npy"), str(tmp / "labels.npy"), "--out", str(out), *ARGS, *extra]) == 0
    return out, json.loads((out / "report.json").read_text())


def test_report_json_counts_per_class_and_phase(files):
    tmp, y = files
    out, rep = _run(tmp)
    keep = np.load(out / "keep.npy")
    assert rep["classes"] == [0, 1, 2]
    kept = np.bincount(y[keep], minlength=3)
    assert rep["class_counts"]["kept"] == kept.tolist()
    assert rep["class_counts"]["removed"] == (np.bincount(y, minlength=3) - kept).tolist()
    history = rep["history"]
    assert len(history) >= 2
    for h, after in zip(history, history[1:] + [None]):
        assert sum(h["class_active"]) == h["n_active"] and sum(h["class_removed"]) == h["n_removed"]
        assert len(h["score_hist"]) == 20 and sum(h["score_hist"]) == h["n_scored"]
        left = np.subtract(h["class_active"], h["class_removed"]).tolist()
        assert left == (after["class_active"] if after else rep["class_counts"]["kept"])


def test_plot_and_report_command_draw_a_png(files, capsys, output_files):
    tmp, y = files
    out, rep = _run(tmp, "--plot")
    width, height = _png_size(out / "report.png")
    assert width > 800 and height > 200
    import matplotlib.image

    image = matplotlib.image.imread(out / "report.png")
    assert image.shape[:2] == (height, width) and image.std() > 0.05  # not a blank canvas
    assert output_files(out) == ["keep.npy", "report.json", "report.png", "scores.npy"]  # one set
    os.remove(out / "report.png")  # its link: the report command draws it again, into a new set
    before = {name: (out / name).read_bytes() for name in ("keep.npy", "report.json", "scores.npy")}
    assert main(["report", str(out), "--quiet"]) == 0
    assert _png_size(out / "report.png") == (width, height)
    assert output_files(out) == ["keep.npy", "report.json", "report.png", "scores.npy"]
    assert {name: (out / name).read_bytes() for name in before} == before  # the rest of the set carried
    # a later run without --plot switches in its own set: the old run's figure goes with the old set
    _run(tmp)
    assert output_files(out) == ["keep.npy", "report.json", "scores.npy"]
    # a report with no phase still draws (filter refuses a --target-size not below the rows,
    # so such a report comes from elsewhere, e.g. aflite(..., target_size=N) in Python)
    everything = {"kept": np.bincount(y).tolist(), "removed": [0, 0, 0]}
    _figure.draw_report(dict(rep, history=[], n_kept=rep["n_rows"], class_counts=everything), tmp / "none.png")
    _png_size(tmp / "none.png")


def test_report_refuses_while_a_run_holds_dir(files, capsys, output_files):
    from aflite_fast.io.atomic import OutputSet

    tmp, _ = files
    out, _ = _run(tmp)
    with pytest.raises(KeyboardInterrupt):
        with OutputSet(out, ["keep.npy", "scores.npy", "report.json"], label="--out"):  # a filter run
            assert main(["report", str(out)]) == 2
            err = capsys.readouterr().err
            assert "in use by another aflite-fast run" in err and len(err.splitlines()) == 1
            raise KeyboardInterrupt  # the run is interrupted: DIR keeps its set
    assert output_files(out) == ["keep.npy", "report.json", "scores.npy"]


def test_docs_show_a_report_figure():
    path = os.path.join(DOCS, "figure_report.png")
    _png_size(path)
    text = open(os.path.join(DOCS, "curation.md"), encoding="utf-8").read()
    assert "figure_report.png" in text


def test_missing_matplotlib_and_bad_dir(files, monkeypatch, capsys):
    tmp, _ = files
    out, _ = _run(tmp)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with pytest.raises(ImportError, match="pip install matplotlib"):
        _figure.write_report_png(out)
    assert main(["report", str(out)]) == 2
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not (out / "report.png").exists()
    assert main(["filter", str(tmp / "emb.npy"), str(tmp / "labels.npy"), "--out", str(tmp / "o2"), *ARGS,
                 "--plot"]) == 2
    assert not (tmp / "o2").exists()
    monkeypatch.undo()
    assert main(["report", str(tmp)]) == 2  # no report.json there
    assert "report.json" in capsys.readouterr().err
