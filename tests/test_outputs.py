"""Output directories (aflite_fast.io.atomic.OutputSet and the commands that use it).

a. --out on another device than the temp folder and its own parent (a tmpfs mount point).
b. An unwritable --out fails before the first phase.
c. A failure between the writes of the output set, or a SIGKILL at any step of the commit,
   leaves a set a reader sees whole: the old one before the switch, the new one after.
d. A second run on the same --out refuses while the first runs; SIGTERM exits 143 and removes
   the staged set; a SIGKILL'd run's staging folder is removed by the next run.
"""
import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from aflite_fast.cli import main
from aflite_fast.io import atomic as _atomic
from aflite_fast.io.atomic import STATE_DIR, OutputSet
from aflite_fast.phase import local

ARGS = ["--target-size", "150", "--partitions", "4", "--train-size", "100", "--slice-size", "50",
        "--quiet"]


@pytest.fixture
def inputs(tmp_path):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((300, 5)).astype(np.float32)
    y = (X[:, 0] + 0.5 * rng.standard_normal(300) > 0).astype(np.int64)
    np.save(tmp_path / "emb.npy", X)
    np.save(tmp_path / "y.npy", y)
    return [str(tmp_path / "emb.npy"), str(tmp_path / "y.npy")]


def _filter(inputs, out, *extra):
    return main(["filter", *inputs, "--out", str(out), *ARGS, *extra])


def _read_set(out, names=("keep.npy", "scores.npy", "report.json")):
    """What a reader sees: the bytes of each name (None where absent)."""
    view = {}
    for name in names:
        try:
            view[name] = (Path(out) / name).read_bytes()
        except FileNotFoundError:
            view[name] = None
    return view


def _mount_tmpfs(path, *options):
    """Mount a small tmpfs at ``path`` (root only); True on success."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    opts = ",".join(("size=16m",) + options)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "aflite-test", str(path)],
                          capture_output=True).returncode == 0


@pytest.fixture
def other_device_dir(tmp_path):
    """A directory on another device than tmp_path and the temp folder.

    Best case, a tmpfs mounted right there (needs root): --out is then a mount point whose
    parent is another device, the case that lost finished runs (the staging folder was made in
    the parent).  Otherwise a folder in /dev/shm if that is another device; else skip.
    """
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if _mount_tmpfs(mnt):
        try:
            yield mnt
        finally:
            subprocess.run(["umount", str(mnt)], capture_output=True)
        return
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK) and os.stat(shm).st_dev != os.stat(tmp_path).st_dev:
        d = tempfile.mkdtemp(prefix="aflite-test-", dir=shm)
        try:
            yield Path(d) / "out"
        finally:
            shutil.rmtree(d, ignore_errors=True)
        return
    pytest.skip("no other device to write to: cannot mount a tmpfs (not root) and /dev/shm is "
                "missing, read-only or on the same device as the temp folder")


def test_out_on_another_device(inputs, tmp_path, other_device_dir, output_files, monkeypatch):
    out = other_device_dir
    assert os.stat(out if out.exists() else out.parent).st_dev != os.stat(tempfile.gettempdir()).st_dev
    renames = []
    real_replace = os.replace

    def replace(src, dst, **kw):  # every rename of the writer stays on one device
        renames.append((os.stat(os.path.dirname(src)).st_dev, os.stat(os.path.dirname(dst)).st_dev))
        return real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "replace", replace)
    assert _filter(inputs, out) == 0
    assert _filter(inputs, out, "--seed", "5") == 0  # and replacing a set there
    assert output_files(out) == ["keep.npy", "report.json", "scores.npy"]
    assert renames and all(a == b for a, b in renames)
    assert np.load(out / "keep.npy").size >= 150


@pytest.fixture
def readonly_dir(tmp_path):
    """A directory nobody may write: a read-only tmpfs as root, else mode 0555."""
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() == 0:
        if not _mount_tmpfs(ro, "ro"):
            pytest.skip("root cannot be denied writing by permissions, and mounting a read-only "
                        "tmpfs failed")
        try:
            yield ro
        finally:
            subprocess.run(["umount", str(ro)], capture_output=True)
        return
    ro.chmod(0o555)
    try:
        yield ro
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize("where", ["dir", "below"])
def test_unwritable_out_fails_before_the_first_phase(inputs, readonly_dir, where, monkeypatch, capsys):
    pass

    phases = []
    monkeypatch.setattr(local, "score_phase", lambda *a, **k: phases.append(1))
    out = readonly_dir if where == "dir" else readonly_dir / "sub" / "out"
    assert main(["filter", *inputs, "--out", str(out), *ARGS[:-1]]) == 2  # not --quiet
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "cannot write" in err
    assert "AFLite" not in err  # no progress bar: no phase began
    assert not phases
    assert os.listdir(readonly_dir) == []


def test_failure_between_the_writes_keeps_the_old_set(inputs, tmp_path, monkeypatch, capsys, output_files):
    out = tmp_path / "out"
    assert _filter(inputs, out) == 0
    old = _read_set(out)
    real = OutputSet.save_npy

    def save_npy(self, name, array):  # keep.npy and scores.npy are written, then the disk fills
        real(self, name, array)
        if name == "scores.npy":
            raise OSError(errno.ENOSPC, "No space left on device (injected)")

    monkeypatch.setattr(OutputSet, "save_npy", save_npy)
    assert _filter(inputs, out, "--seed", "7") == 2
    assert "No space left on device (injected)" in capsys.readouterr().err
    assert _read_set(out) == old
    assert output_files(out) == ["keep.npy", "report.json", "scores.npy"]  # the staged set is gone


_KILLER = textwrap.dedent("""
    import os, signal, sys
    from aflite_fast.io.atomic import OutputSet

    path, kill_at = sys.argv[1], int(sys.argv[2])
    calls = [0]

    def arm(name):
        real = getattr(os, name)

        def wrapper(*args, **kwargs):
            calls[0] += 1
            if calls[0] == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)

        setattr(os, name, wrapper)

    with OutputSet(path, ["a.txt", "b.txt", "d.txt"]) as out:
        out.save_text("a.txt", "new a")
        if kill_at == 0:
            os.kill(os.getpid(), signal.SIGKILL)  # killed while writing the set
        out.save_text("b.txt", "new b")
        out.save_text("d.txt", "new d")
        # from here on, every file-system call of the commit is a place to die
        for name in ("open", "fsync", "mkdir", "symlink", "replace", "rename", "unlink", "rmdir"):
            arm(name)
""")


def test_sigkill_at_any_step_leaves_a_whole_set(tmp_path, output_files, child_process):
    """Kill the writer at its k-th file-system call, for every k: a reader sees the old set or
    the new one, whole; the next run removes what the killed one left."""
    names = ("a.txt", "b.txt", "c.txt", "d.txt")
    old_view = {"a.txt": b"old a", "b.txt": b"old b", "c.txt": b"old c", "d.txt": None}
    new_view = {"a.txt": b"new a", "b.txt": b"new b", "c.txt": None, "d.txt": b"new d"}
    seen = []
    for kill_at in range(0, 200):
        out = tmp_path / f"k{kill_at}"
        with OutputSet(out, ["a.txt", "b.txt", "c.txt"]) as first:
            for name in ("a", "b", "c"):
                first.save_text(f"{name}.txt", f"old {name}")
        proc = subprocess.run([sys.executable, "-c", _KILLER, str(out), str(kill_at)], **child_process,
                              capture_output=True, text=True)
        view = _read_set(out, names)
        if proc.returncode == 0:  # kill_at was past the last call: the commit completed
            assert view == new_view
            break
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        assert view in (old_view, new_view), (kill_at, view)
        seen.append("old" if view == old_view else "new")
        with OutputSet(out, ["e.txt"]) as nxt:  # the next run cleans up and commits
            nxt.save_text("e.txt", "e")
        assert output_files(out) == ["e.txt"]
    else:
        pytest.fail("the commit never completed")
    assert seen[0] == "old" and seen[-1] == "new" and seen == sorted(seen, key=["old", "new"].index)


def test_plain_files_become_links_and_other_names_go(tmp_path, output_files):
    (tmp_path / "a.txt").write_text("a file of the user's")
    with OutputSet(tmp_path, ["a.txt", "b.txt"]) as out:
        out.save_text("a.txt", "1")
        out.save_text("b.txt", "2")
    assert output_files(tmp_path) == ["a.txt", "b.txt"] and (tmp_path / "a.txt").read_text() == "1"
    with OutputSet(tmp_path, ["b.txt"]) as out:
        out.save_text("b.txt", "3")
    assert output_files(tmp_path) == ["b.txt"] and (tmp_path / "b.txt").read_text() == "3"


def test_failed_commit_before_the_switch_leaves_nothing(tmp_path, monkeypatch):
    real = os.replace
    calls = []

    def replace(src, dst, **kw):  # the links for the names are placed, then the switch fails
        calls.append(dst)
        if os.path.basename(dst) == "current":
            raise OSError(errno.EIO, "Input/output error (injected)")
        return real(src, dst, **kw)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(OSError, match="injected"):
        with OutputSet(tmp_path / "new" / "out", ["a.txt", "b.txt"]) as out:
            out.save_text("a.txt", "1")
            out.save_text("b.txt", "2")
    assert [os.path.basename(c) for c in calls] == ["a.txt", "b.txt", "current"]
    assert os.listdir(tmp_path) == []  # nor the parent it created


def test_incomplete_set_is_not_committed(tmp_path):
    with pytest.raises(RuntimeError, match="b.txt"):
        with OutputSet(tmp_path / "o", ["a.txt", "b.txt"]) as out:
            out.save_text("a.txt", "1")
    assert not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match="not one of"):
        with OutputSet(tmp_path / "o", ["a.txt"]) as out:
            out.save_text("z.txt", "1")


def test_without_symbolic_links_files_are_renamed_one_by_one(tmp_path, monkeypatch):
    def no_symlink(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "symlink", no_symlink)
    for text in ("1", "2"):
        with OutputSet(tmp_path, ["a.txt"]) as out:
            out.save_text("a.txt", text)
    assert (tmp_path / "a.txt").read_text() == "2" and not (tmp_path / "a.txt").is_symlink()
    assert sorted(os.listdir(tmp_path / STATE_DIR)) == ["lock"]  # nothing staged is left


_SLOW_RUN = textwrap.dedent("""
    import sys, time
    import aflite_fast.filtering.loop as algorithm

    def slow_aflite(*args, **kwargs):  # stands for a long first phase
        print("started", flush=True)
        time.sleep(120)

    algorithm.aflite = slow_aflite
    from aflite_fast.cli import main

    sys.exit(main(sys.argv[1:]))
""")


def _start_slow_run(inputs, out, child_process):
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_RUN, "filter", *inputs, "--out", str(out), *ARGS],
                            **child_process, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # blocks until the run holds --out (or dies)
    if line.strip() != "started":
        proc.kill()
        pytest.fail(f"the slow run did not start: {proc.communicate()[1]}")
    return proc


def _staged_sets(out):
    state = Path(out) / STATE_DIR
    current = os.readlink(state / "current")
    return [p for p in os.listdir(state) if p.startswith("set-") and p != current]


def test_second_run_refuses_and_sigterm_cleans_up(inputs, tmp_path, capsys, output_files, child_process):
    out = tmp_path / "out"
    assert _filter(inputs, out) == 0
    old = _read_set(out)
    proc = _start_slow_run(inputs, out, child_process)
    try:
        assert _staged_sets(out)  # the slow run is staging its set
        assert _filter(inputs, out, "--seed", "9") == 2
        err = capsys.readouterr().err
        assert f"in use by another aflite-fast run (pid {proc.pid})" in err and "--out" in err
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.splitlines() == ["aflite-fast filter: terminated (SIGTERM); no output written"]
    assert _read_set(out) == old and not _staged_sets(out)
    assert _filter(inputs, out, "--seed", "9") == 0  # the lock went with the process
    assert output_files(out) == ["keep.npy", "report.json", "scores.npy"]


def test_sigkilled_run_leaves_staging_the_next_run_removes(inputs, tmp_path, output_files, child_process):
    out = tmp_path / "out"
    assert _filter(inputs, out) == 0
    proc = _start_slow_run(inputs, out, child_process)
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert len(_staged_sets(out)) == 1  # what issue 13 found left behind
    assert _filter(inputs, out, "--seed", "2") == 0
    assert output_files(out) == ["keep.npy", "report.json", "scores.npy"] and not _staged_sets(out)


def test_lock_is_per_directory_and_released(tmp_path):
    with OutputSet(tmp_path / "a", ["x"]) as a:
        with pytest.raises(ValueError, match=f"in use by another aflite-fast run \\(pid {os.getpid()}\\)"):
            with OutputSet(tmp_path / "a", ["x"]):
                pass
        with OutputSet(tmp_path / "b", ["x"]) as b:  # another directory: no conflict
            b.save_text("x", "b")
        a.save_text("x", "a")
    with OutputSet(tmp_path / "a", ["x"]) as again:
        again.save_text("x", "again")
    assert (tmp_path / "a" / "x").read_text() == "again"


def test_experiment_checks_its_directory_before_the_work(tmp_path, monkeypatch):
    import aflite_fast
    from aflite_fast.experiments import run_synthetic_experiment

    calls = []
    monkeypatch.setattr(aflite_fast, "aflite", lambda *a, **k: calls.append(1))
    with OutputSet(tmp_path / "busy", ["x"]) as held:
        with pytest.raises(ValueError, match="in use"):
            run_synthetic_experiment(tmp_path / "busy", plot=False, n_samples=200, progress=False)
        held.save_text("x", "x")
    assert not calls
    assert _atomic.STATE_DIR == ".aflite"
