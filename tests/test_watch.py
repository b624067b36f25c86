"""Inputs that change under a run, and the content fingerprint of X.

a. The fingerprint is a function of the rows alone: an array, a read-only memmap, a big-endian
   copy, any scan chunk size, one or two hashing threads, rows handed in chunks off the block
   grid, and the Dask scan over any chunking give the same digest; one changed value changes it.
b. A resume after one value of one row of X changed is refused, naming X's file, and the
   checkpoint is left as it was (API and command line).
c. An input rewritten in place during a run is found at the next phase boundary: the API
   raises a ValueError naming the file and saves no checkpoint for that phase; the command line
   exits with code 2, one line naming the file, and commits nothing in --out (EMB, LABELS and
   --groups alike).
d. :func:`source_files` knows paths, ``FILE.npz:KEY``, memmaps and their views; the watch
   reports a removed or replaced file.
"""
import os
import re
import time

import numpy as np
import pytest

from aflite_fast import aflite
from aflite_fast.cli import main
from aflite_fast.io import inputs
from aflite_fast.io.atomic import STATE_DIR
from aflite_fast.io.fingerprint import ContentHash, block_rows
from aflite_fast.io.watch import InputWatch, source_files
from aflite_fast.phase import local

N = 900
RUN = dict(target_size=450, n_partitions=6, train_size=0.5, slice_size=60, tau=0.6, progress=False,
           n_jobs=1, random_state=5)
CLI_RUN = ["--target-size", "450", "--partitions", "6", "--train-size", "0.5", "--slice-size", "60",
           "--tau", "0.6", "--seed", "5", "--quiet"]


@pytest.fixture
def problem(seed, make_problem):
    return make_problem(np.random.default_rng([seed, 190]), N, 10, 3, signal=0.7)


def fingerprint(X, n_threads=None, scan=inputs.scan_rows):
    with ContentHash(X.shape, X.dtype, n_threads) as content:
        scan(X, fingerprint=content)
    return content.hexdigest()


# --------------------------------------------------------------------------- a. fingerprint

def test_fingerprint_depends_on_the_rows_only(tmp_path, monkeypatch, seed):
    rng = np.random.default_rng([seed, 191])
    X = rng.standard_normal((3001, 37)).astype(np.float32)  # 148-byte rows: blocks of 1771 rows
    reference = fingerprint(X)
    np.save(tmp_path / "x.npy", X)
    assert fingerprint(np.load(tmp_path / "x.npy", mmap_mode="r")) == reference
    assert fingerprint(X.astype(">f4")) == reference
    assert fingerprint(X, n_threads=1) == reference
    assert fingerprint(np.asfortranarray(X)) == reference
    for chunk_bytes in (1, 150_000, 1 << 30):  # one block per chunk ... everything at once
        monkeypatch.setattr(inputs, "SCAN_CHUNK_BYTES", chunk_bytes)
        assert fingerprint(X) == reference
    with ContentHash(X.shape, X.dtype) as streamed:  # chunks off the block grid
        for a, b in ((0, 1), (1, 1771), (1771, 1772), (1772, 3001)):
            streamed.update(X[a:b])
    assert streamed.hexdigest() == reference
    changed = X.copy()
    changed[2999, 36] = np.nextafter(changed[2999, 36], np.float32(np.inf))  # one ulp of one value
    assert fingerprint(changed) != reference
    assert fingerprint(X[:-1]) != reference
    assert fingerprint(X.astype(np.float16)) != fingerprint(X.astype(np.float64))
    assert block_rows(37, 4) == 1771


def test_fingerprint_counts_every_row(seed):
    X = np.ones((10, 4), dtype=np.float32)
    with ContentHash(X.shape, X.dtype) as content:
        content.update(X[:9])
        with pytest.raises(RuntimeError, match="saw 9 of 10 rows"):
            content.hexdigest()


def test_fingerprint_on_dask_equals_local(seed):
    distributed = pytest.importorskip("distributed", reason="the dask backend needs dask.distributed")
    from aflite_fast.phase.dask_backend import DaskEmbeddings, scan_rows_dask

    X = np.random.default_rng([seed, 192]).standard_normal((5000, 37)).astype(np.float32)
    reference = fingerprint(X)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                            dashboard_address=None) as client:
        for chunk_rows in (700, 5000):  # chunks off the block grid, and one chunk
            Xd = DaskEmbeddings(X, client, chunk_rows=chunk_rows)
            assert fingerprint(Xd, scan=scan_rows_dask) == reference


# --------------------------------------------------------------------------- b. resume on changed data

def _stop_at_phase(monkeypatch, phase, action=None):
    """Make local.score_phase call ``action`` (or raise KeyboardInterrupt) when it scores ``phase``."""
    real = local.score_phase
    calls = []

    def score_phase(*args, **kw):
        if calls and kw.get("warm_coef") is None:  # phase 0's chance check (cold), not a phase
            return real(*args, **kw)
        calls.append(1)
        if len(calls) == phase + 1:
            if action is None:
                raise KeyboardInterrupt
            action()
        return real(*args, **kw)

    monkeypatch.setattr(local, "score_phase", score_phase)


def test_resume_on_one_changed_row_is_refused(problem, tmp_path, monkeypatch, capsys):
    X, y = problem
    emb, ckpt = tmp_path / "emb.npy", tmp_path / "run.npz"
    np.save(emb, X)
    with monkeypatch.context() as m:
        _stop_at_phase(m, 2)
        with pytest.raises(KeyboardInterrupt):
            aflite(str(emb), y, checkpoint=ckpt, **RUN)
    before = ckpt.read_bytes()
    X[N - 3, 4] += 1e-4  # one value of one row, none of the first or last rows
    np.save(emb, X)
    with pytest.raises(ValueError, match=re.escape(f"other data: X ('{emb}') is not what it was saved with")):
        aflite(str(emb), y, checkpoint=ckpt, **RUN)
    assert ckpt.read_bytes() == before
    labels = tmp_path / "labels.npy"
    np.save(labels, y)
    capsys.readouterr()
    assert main(["filter", str(emb), str(labels), "--out", str(tmp_path / "out"), "--checkpoint", str(ckpt),
                 *CLI_RUN]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"other data: X ('{emb}') is not what it was saved with" in err[0], err
    assert ckpt.read_bytes() == before and not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- c. changed during a run

def _rewrite_in_place(path, array):
    """Overwrite the data of a .npy file in place (same size, same inode)."""
    time.sleep(0.02)  # past the file system's coarse clock tick, as any real rewrite is
    with open(path, "r+b") as fh:
        fh.seek(os.path.getsize(path) - array.nbytes)
        fh.write(np.ascontiguousarray(array).tobytes())


def test_rewrite_during_a_run_is_found_at_the_next_phase(problem, tmp_path, monkeypatch):
    X, y = problem
    emb, ckpt = tmp_path / "emb.npy", tmp_path / "run.npz"
    np.save(emb, X)
    inode = os.stat(emb).st_ino
    _stop_at_phase(monkeypatch, 2, lambda: _rewrite_in_place(emb, X[::-1]))
    with pytest.raises(ValueError, match=re.escape(f"X file '{emb}' changed while this run was using it "
                                                   "(it was modified)")):
        aflite(str(emb), y, checkpoint=ckpt, **RUN)
    assert os.stat(emb).st_ino == inode
    from aflite_fast.filtering.checkpoint import Checkpoint
    assert Checkpoint(ckpt)._header["phase"] == 2  # phases 0 and 1 saved, not the mixed phase 2


@pytest.mark.parametrize("which", ["EMB", "LABELS", "--groups"])
def test_cli_exits_2_and_commits_nothing(problem, tmp_path, monkeypatch, capsys, which):
    X, y = problem
    emb, labels, groups = tmp_path / "emb.npy", tmp_path / "labels.txt", tmp_path / "groups.npy"
    np.save(emb, X)
    labels.write_text("".join(f"{v}\n" for v in y))
    np.save(groups, np.arange(N) // 3)
    out = tmp_path / "out"
    args = ["filter", str(emb), str(labels), "--out", str(out), "--groups", str(groups), *CLI_RUN]
    assert main(args) == 0  # a committed set that a failed run must leave as it is
    committed = {name: (out / name).read_bytes() for name in ("keep.npy", "scores.npy", "report.json")}
    capsys.readouterr()
    path = {"EMB": emb, "LABELS": labels, "--groups": groups}[which]
    if which == "LABELS":
        action = lambda: (time.sleep(0.02), labels.write_text("".join(f"{v}\n" for v in y[::-1])))  # noqa: E731
    else:
        action = lambda: _rewrite_in_place(path, np.load(path)[::-1].copy())  # noqa: E731
    _stop_at_phase(monkeypatch, 1, action)
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    label = "X" if which == "EMB" else which  # the loop finds EMB at the phase boundary, as X
    assert len(err) == 1 and f"{label} file '{path}' changed while this run was using it" in err[0], err
    assert {name: (out / name).read_bytes() for name in committed} == committed
    assert sorted(os.listdir(out / STATE_DIR)) == sorted(["lock", "current", os.readlink(out / STATE_DIR / "current")])


# --------------------------------------------------------------------------- d. what is watched

def test_source_files(tmp_path):
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.save(tmp_path / "x.npy", X)
    np.savez(tmp_path / "a.npz", emb=X, other=X)
    mm = np.load(tmp_path / "x.npy", mmap_mode="r")
    path = str(tmp_path / "x.npy")
    assert source_files(path) == [path]
    assert source_files(f"{tmp_path / 'a.npz'}:emb") == [str(tmp_path / "a.npz")]
    assert source_files(mm) == [path]
    assert source_files(mm[1:3]) == [path]
    assert source_files(np.asarray(mm)) == [path]
    assert source_files([path, path]) == [path, path]
    assert source_files(X) == [] and source_files(str(tmp_path / "no-such-dir")) == []
    assert source_files(str(tmp_path)) == [path]  # a directory of .npy shards: its shards

    class Rows:  # a reader of stored rows, as the data layer's row sources are
        files = (path, "b.npy")

        def read_rows(self, start, stop):
            raise NotImplementedError

    assert source_files(Rows()) == [path, os.path.abspath("b.npy")]


def test_watch_reports_removed_and_replaced_files(tmp_path):
    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    for p in (a, b):
        np.save(p, np.zeros((3, 2), dtype=np.float32))
    watch = InputWatch([("EMB", str(a)), ("LABELS", None)])
    watch.check()
    os.replace(b, a)
    with pytest.raises(ValueError, match="its name now points at another file"):
        watch.check()
    watch = InputWatch([("EMB", str(a))])
    os.unlink(a)
    with pytest.raises(ValueError, match=f"EMB file '{a}' changed .*it was removed"):
        watch.check()
    np.save(a, np.zeros((4, 2), dtype=np.float32))
    watch = InputWatch([("EMB", str(a))])
    with open(a, "ab") as fh:
        fh.write(b"\0" * 8)
    with pytest.raises(ValueError, match="its size went from"):
        watch.check()
