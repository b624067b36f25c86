"""Resumable runs (issue 12): ``aflite(..., checkpoint=PATH)`` and ``filter --checkpoint``.

a. A run interrupted after any phase and started again with the same checkpoint gives
   bitwise the keep / removed / removed_phase / scores and the history (but for timing) of
   an uninterrupted run: per row and per group, integer and fractional train_size, and a
   finished run given its checkpoint runs no phase.
b. The command line: a run killed with SIGKILL after its second phase and restarted with the
   same ``--checkpoint`` writes the same keep.npy, scores.npy and history; a restart with
   another tau is refused (exit code 2) and the checkpoint is left as it was.
c. Other parameters or data (tau, seed, loss, X (one value of one row), y, groups) are a
   ValueError naming the difference, and the file is not touched; a file that is not a checkpoint is refused.
d. Writing is atomic: a write that fails half-way leaves the previous checkpoint whole and
   no temporary file; the temporary file a killed writer leaves is deleted by the next save
   (one of a live process is not).
"""
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

from aflite_fast import aflite
from aflite_fast.cli import main
from aflite_fast.filtering import checkpoint
from aflite_fast.io.atomic import STATE_DIR
from aflite_fast.phase import local

N = 1200
# the chance check off: these tests count the engine's calls per phase (tests/test_chance.py
# resumes a run with it)
RUN = dict(target_size=600, n_partitions=8, train_size=0.5, slice_size=100, tau=0.6, progress=False,
           n_jobs=1, random_state=3, chance_check=False)


@pytest.fixture
def data(seed, make_problem):
    X, y = make_problem(np.random.default_rng([seed, 130]), N, 12, 3, signal=0.7)
    groups = np.random.default_rng([seed, 131]).integers(0, 500, size=N)
    return X, y, groups


def _timeless(history):
    out = [{k: v for k, v in (h if isinstance(h, dict) else h.as_dict()).items() if k != "seconds"}
           for h in history]
    for h in out:  # the chance check's timing too
        if h.get("chance"):
            h["chance"] = {k: v for k, v in h["chance"].items() if k != "seconds"}
    return out


def _same(a, b):
    assert np.array_equal(a.keep, b.keep)
    assert np.array_equal(a.removed, b.removed)
    assert np.array_equal(a.removed_phase, b.removed_phase)
    assert np.array_equal(a.scores, b.scores, equal_nan=True)
    assert _timeless(a.history) == _timeless(b.history)
    assert a.stop_reason == b.stop_reason


def _interrupt_at(monkeypatch, phase):
    """Make local.score_phase raise KeyboardInterrupt when called for ``phase``."""
    real = local.score_phase
    calls = []

    def score_phase(*args, **kw):
        calls.append(1)
        if len(calls) == phase + 1:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(local, "score_phase", score_phase)
    return calls


def _interrupted_run(monkeypatch, X, y, path, phase, run):
    """``aflite(X, y, checkpoint=path, **run)`` interrupted when it starts ``phase``."""
    with monkeypatch.context() as m:
        _interrupt_at(m, phase)
        with pytest.raises(KeyboardInterrupt):
            aflite(X, y, checkpoint=path, **run)


@pytest.mark.parametrize("case", ["rows", "groups", "int_train_size"])
def test_resume_gives_the_uninterrupted_result(data, tmp_path, monkeypatch, case):
    X, y, groups = data
    run = dict(RUN)
    if case == "groups":
        run.update(groups=groups, remove="group")
    elif case == "int_train_size":
        run.update(train_size=500)
    full = aflite(X, y, **run)
    assert len(full.history) >= 4
    path = tmp_path / "run.ckpt.npz"
    _interrupted_run(monkeypatch, X, y, path, 2, run)
    saved = checkpoint.Checkpoint(path)
    assert saved.exists and saved._header["phase"] == 2
    calls = _interrupt_at(monkeypatch, 10**6)  # count the phases the resumed run scores
    resumed = aflite(X, y, checkpoint=path, **dict(run, n_jobs=2))  # threads may differ
    assert resumed.resumed_from == 2 and len(calls) == len(full.history) - 2
    _same(full, resumed)
    assert np.array_equal(resumed.kept_per_class, full.kept_per_class)
    # the checkpoint of a finished run: nothing is scored again
    calls.clear()
    again = aflite(X, y, checkpoint=path, **run)
    _same(full, again)
    assert calls == []


def test_finished_run_resumes_without_scoring(data, tmp_path, monkeypatch):
    X, y, _ = data
    y = np.random.default_rng(0).permutation(y)  # noise: few rows reach tau, the first phase ends the run
    path = tmp_path / "c.npz"
    first = aflite(X, y, checkpoint=path, **dict(RUN, tau=0.9))
    assert "fewer than" in first.stop_reason
    calls = _interrupt_at(monkeypatch, 10**6)
    again = aflite(X, y, checkpoint=path, **dict(RUN, tau=0.9))
    assert calls == [] and again.resumed_from == len(first.history)
    _same(first, again)


def test_random_state_none_takes_the_checkpoint_seed(data, tmp_path, monkeypatch):
    X, y, _ = data
    full = aflite(X, y, **RUN)
    path = tmp_path / "c.npz"
    _interrupted_run(monkeypatch, X, y, path, 1, RUN)
    _same(full, aflite(X, y, checkpoint=path, **dict(RUN, random_state=None)))


def test_other_parameters_or_data_are_refused(data, tmp_path, monkeypatch):
    X, y, groups = data
    path = tmp_path / "c.npz"
    _interrupted_run(monkeypatch, X, y, path, 1, RUN)
    before = path.read_bytes()
    X2 = X.copy()
    X2[N // 2 + 7, 3] += 1e-3  # one value of one row: the fingerprint covers every row
    y2 = y.copy()
    y2[5] = (y2[5] + 1) % 3
    refused = [
        (dict(RUN, tau=0.7), X, y, {}, "parameters.tau: checkpoint 0.6, this run 0.7"),
        (dict(RUN, random_state=4), X, y, {}, "parameters.seed"),
        (dict(RUN, slice_size=90), X, y, {}, "parameters.slice_size"),
        (dict(RUN, loss="gce"), X, y, {}, "parameters.loss"),
        (dict(RUN, tol=3e-4), X, y, {}, "parameters.tol: checkpoint 'auto', this run 0.0003"),
        (RUN, X2, y, {}, "other data: X (an in-memory array) is not what it was saved with"),
        (RUN, X[:-1], y[:-1], {}, "other data: X (an in-memory array) and y (the labels) are not"),
        (RUN, X, y2, {}, "other data: y (the labels) is not"),
        (RUN, X, y, dict(groups=groups), "other data: groups is not"),
    ]
    for run, Xr, yr, extra, message in refused:
        with pytest.raises(ValueError, match=re.escape(message)):
            aflite(Xr, yr, checkpoint=path, **run, **extra)
        assert path.read_bytes() == before
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable aflite_fast checkpoint"):
        aflite(X, y, checkpoint=garbage, **RUN)
    assert garbage.read_bytes() == b"not a checkpoint"
    with pytest.raises(ValueError, match="does not exist"):
        aflite(X, y, checkpoint=tmp_path / "no" / "c.npz", **RUN)


def test_a_failed_write_keeps_the_previous_checkpoint(data, tmp_path, monkeypatch):
    X, y, _ = data
    path = tmp_path / "c.npz"
    real_savez = np.savez
    calls = []

    def savez(fh, **arrays):  # the second save dies half-way through writing
        calls.append(1)
        if len(calls) == 2:
            fh.write(b"PK\x03\x04 half a file")
            raise OSError("disk full")
        real_savez(fh, **arrays)

    monkeypatch.setattr(checkpoint.np, "savez", savez)
    with pytest.raises(OSError, match="disk full"):
        aflite(X, y, checkpoint=path, **RUN)
    monkeypatch.undo()
    assert sorted(os.listdir(tmp_path)) == ["c.npz"]  # no temporary file left
    saved = checkpoint.Checkpoint(path)
    assert saved._header["phase"] == 1
    _same(aflite(X, y, **RUN), aflite(X, y, checkpoint=path, **RUN))


def test_a_killed_writers_temporary_file_goes_with_the_next_save(data, tmp_path):
    X, y, _ = data
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid that no longer runs (reuse within the test is not a concern)
    stale = tmp_path / f".c.npz.{dead.pid}.0123abcd.tmp"
    live = tmp_path / f".c.npz.{os.getpid()}.0123abcd.tmp"  # e.g. another thread writing now
    other = tmp_path / f".d.npz.{dead.pid}.0123abcd.tmp"  # another file's
    for path in (stale, live, other):
        path.write_bytes(b"PK half a file")
    aflite(X, y, checkpoint=tmp_path / "c.npz", **RUN)
    assert sorted(os.listdir(tmp_path)) == sorted(["c.npz", live.name, other.name])


# A child running the CLI that stops for good once its second phase is saved, so that the
# SIGKILL lands exactly after phase 2 whatever the machine's speed.
_CHILD = """
import sys, time
from aflite_fast import checkpoint
from aflite_fast.cli import main
save = checkpoint.Checkpoint.save
def save_then_wait(self, state):
    save(self, state)
    if state.phase == 2:
        print("saved phase 2", flush=True)
        time.sleep(600)
checkpoint.Checkpoint.save = save_then_wait
sys.exit(main(sys.argv[1:]))
"""


def test_cli_killed_after_phase_two_resumes_to_the_same_outputs(tmp_path, seed, make_problem, output_files,
                                                                child_process):
    X, y = make_problem(np.random.default_rng([seed, 132]), 2000, 12, 3, signal=0.7)
    np.save(tmp_path / "emb.npy", X)
    np.save(tmp_path / "labels.npy", y)
    args = [str(tmp_path / "emb.npy"), str(tmp_path / "labels.npy"), "--target-size", "800",
            "--partitions", "8", "--train-size", "0.5", "--slice-size", "150", "--tau", "0.6",
            "--seed", "2", "--threads", "1", "--quiet"]
    assert main(["filter", *args, "--out", str(tmp_path / "full")]) == 0
    ckpt = tmp_path / "run.npz"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, "filter", *args, "--out", str(tmp_path / "resumed"),
                              "--checkpoint", str(ckpt)], **child_process, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "saved phase 2", child.stderr.read()
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=60) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
        child.stderr.close()
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    # the killed run staged its set inside --out (aflite_fast.io.atomic.OutputSet) and committed nothing
    assert os.listdir(resumed) == [STATE_DIR] and "current" not in os.listdir(resumed / STATE_DIR)
    assert checkpoint.Checkpoint(ckpt)._header["phase"] == 2
    # a restart with another tau is refused: the checkpoint is not touched and --out gets no
    # file (the refused run removes what the killed one staged, then its own bookkeeping)
    before = ckpt.read_bytes()
    assert main(["filter", *args[:-1], "--tau", "0.7", "--quiet", "--out", str(resumed),
                 "--checkpoint", str(ckpt)]) == 2
    assert ckpt.read_bytes() == before and os.listdir(resumed) == []
    # the same command again continues from phase 2
    assert main(["filter", *args, "--out", str(resumed), "--checkpoint", str(ckpt)]) == 0
    assert output_files(resumed) == output_files(full) == ["keep.npy", "report.json", "scores.npy"]
    for name in ("keep.npy", "scores.npy"):
        assert (full / name).read_bytes() == (resumed / name).read_bytes()
    a = json.loads((full / "report.json").read_text())
    b = json.loads((resumed / "report.json").read_text())
    assert len(a["history"]) >= 4 and b["resumed_from_phase"] == 2
    assert _timeless(a["history"]) == _timeless(b["history"])
    assert a["stop_reason"] == b["stop_reason"] and a["class_counts"] == b["class_counts"]


def test_a_checkpoint_of_other_phase_records_is_refused(data, tmp_path, monkeypatch):
    """A checkpoint whose history has fields this version's PhaseRecord lacks (another version)."""
    X, y, _ = data
    path = tmp_path / "c.npz"
    _interrupted_run(monkeypatch, X, y, path, 1, RUN)
    saved = checkpoint.Checkpoint(path)
    state = saved.start(saved._header["parameters"], saved._header["data"])
    state.history[0]["a_field_of_the_future"] = 1
    saved.save(state)
    with pytest.raises(ValueError, match="phase records do not fit"):
        aflite(X, y, checkpoint=path, **RUN)


@pytest.mark.parametrize("version, what", [(1, "by position"), (2, "reference-class form")])
def test_a_checkpoint_of_an_earlier_version_is_refused(data, tmp_path, monkeypatch, version, what):
    """Phases of other arithmetic never continue a run: the header's version is checked first."""
    X, y, _ = data
    path = tmp_path / "c.npz"
    _interrupted_run(monkeypatch, X, y, path, 1, RUN)
    with np.load(path) as npz:
        arrays = {name: npz[name] for name in npz.files}
    header = json.loads(arrays["header"].tobytes().decode("utf-8"))
    assert header["version"] == checkpoint.VERSION
    header["version"] = version
    arrays["header"] = np.frombuffer(json.dumps(header).encode("utf-8"), dtype=np.uint8)
    np.savez(path, **arrays)
    before = path.read_bytes()
    with pytest.raises(ValueError, match=f"version {version}.*{what}"):
        aflite(X, y, checkpoint=path, **RUN)
    assert path.read_bytes() == before
