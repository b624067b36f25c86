"""Ctrl-C and SIGTERM at any moment of ``aflite-fast filter``: exit 130 / 143 and one line.

a. Inside a Numba call (``membership_matrix``, compiled with ``nogil``) and inside the compiled
   kernel (``_kernel.train_block`` with OpenMP): a child process whose call is wrapped so that
   a timer thread signals the process while the real compiled function runs on a problem large
   enough to last longer than the timer; the wrapper records how long the compiled call ran, so
   the test knows the signal landed inside it.
b. At many moments of a whole run (argument parsing, imports of NumPy and the kernel, reading,
   phases, writing): children signalled after delays from 0 to past the end of the run; every
   one exits 0 (finished first), 130 or 143, with nothing or one line on stderr and never a
   traceback, and a signalled run leaves no output.
c. In one process: a signal while a command's outputs are being switched in, or after, lets
   the command finish (no run publishes its outputs and then says it wrote nothing).
The children run at the same time, so the file costs about one run's time.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

#: A child that runs ``main(argv)`` with one compiled function wrapped: the wrapper starts a
#: timer that sends the signal, runs the real function on a large problem (recording the
#: seconds it ran in $SIGNAL_REPORT even when interrupted), then the real call.
_HOOKED_RUN = textwrap.dedent("""
    import os, signal, sys, threading, time
    import numpy as np
    import aflite_fast.cli
    from aflite_fast.core import layout, solver
    from aflite_fast.phase import local

    SIG = getattr(signal, os.environ["SIGNAL_NAME"])
    WHERE = os.environ["SIGNAL_WHERE"]
    DELAY = 0.05

    def signal_soon():
        threading.Timer(DELAY, os.kill, (os.getpid(), SIG)).start()

    def timed(call):
        start = time.perf_counter()
        try:
            return call()
        finally:
            with open(os.environ["SIGNAL_REPORT"], "w") as fh:
                fh.write(str(time.perf_counter() - start))

    if WHERE == "numba":
        real = local.membership_matrix
        rng = np.random.default_rng(0)
        big = rng.integers(0, 1_000_000, size=(32, 1_000_000))
        big_out = np.empty((1_000_000, 32), dtype=np.uint8)
        real(big[:, :10], 1_000_000, big_out)  # compiled (or loaded from cache) before the run

        def hooked(train_positions, n_rows, out):
            signal_soon()
            timed(lambda: real(big, 1_000_000, big_out))
            return real(train_positions, n_rows, out)

        local.membership_matrix = hooked
    else:
        real = solver.train_models
        rng = np.random.default_rng(0)
        X = rng.standard_normal((10000, 128)).astype(np.float32) * (1.0 + np.arange(128)) ** -1.0
        y = rng.integers(0, 3, size=10000).astype(np.int32)
        Xa = layout.augment_rows(X, X.mean(axis=0))
        member = (rng.random((10000, 8)) < 0.5).astype(np.uint8)
        options = solver.SolverOptions(tol=1e-12, max_iter=300)

        def hooked(*args, **kwargs):
            signal_soon()
            timed(lambda: real(Xa, y, member, 3, C=1e6, loss="ce", options=options, n_threads=2))
            return real(*args, **kwargs)

        solver.train_models = hooked
    sys.exit(aflite_fast.cli.main())
""")

#: A child that says "ready" once :func:`aflite_fast.cli.main` builds its parser (its signal
#: handling is in place from main's first line), then runs.
_MARKED_RUN = textwrap.dedent("""
    import sys
    import aflite_fast.cli

    real_build = aflite_fast.cli.build_parser

    def build_parser():
        print("ready", flush=True)
        return real_build()

    aflite_fast.cli.build_parser = build_parser
    sys.exit(aflite_fast.cli.main())  # as the console script calls it
""")

#: A child whose run finishes, then signals itself after main has put its handlers away: the
#: moment between the end of the command and the end of the process (the interpreter's shutdown
#: included, which resets the handlers Python installed).
_LATE_RUN = textwrap.dedent("""
    import os, signal, sys, time
    import aflite_fast.cli

    real_exit = aflite_fast.cli._SignalsRaise.__exit__

    def exit_then_signal(self, *exc):
        real_exit(self, *exc)
        os.kill(os.getpid(), getattr(signal, os.environ["SIGNAL_NAME"]))
        time.sleep(0.2)

    aflite_fast.cli._SignalsRaise.__exit__ = exit_then_signal
    sys.exit(aflite_fast.cli.main())
""")

EXPECTED = {"SIGINT": (130, "aflite-fast filter: interrupted; no output written"),
            "SIGTERM": (143, "aflite-fast filter: terminated (SIGTERM); no output written")}


@pytest.fixture
def inputs(tmp_path, seed):
    rng = np.random.default_rng([seed, 44])
    X = rng.standard_normal((3000, 32)).astype(np.float32)
    y = (X[:, 0] + X[:, 1] + 0.5 * rng.standard_normal(3000) > 0).astype(np.int64)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    return tmp_path


def _argv(tmp, out):
    return ["filter", str(tmp / "X.npy"), str(tmp / "y.npy"), "--out", str(tmp / out), "--target-size", "1500",
            "--train-size", "0.5", "--n-partitions", "16", "--slice-size", "300", "--tau", "0.5", "--quiet"]


@pytest.mark.parametrize("where,name", [("numba", "SIGINT"), ("compiled", "SIGTERM")])
def test_signal_inside_a_compiled_call(inputs, where, name, child_process):
    report = inputs / f"{where}-{name}.seconds"
    env = {**child_process["env"], "SIGNAL_NAME": name, "SIGNAL_WHERE": where, "SIGNAL_REPORT": str(report)}
    proc = subprocess.run([sys.executable, "-c", _HOOKED_RUN, *_argv(inputs, "out")],
                          env=env, cwd=child_process["cwd"], capture_output=True, text=True, timeout=300)
    code, line = EXPECTED[name]
    assert (proc.returncode, proc.stderr.splitlines()) == (code, [line]), proc.stderr
    assert float(report.read_text()) > 0.05  # the compiled call was still running when the signal came
    assert not (inputs / "out").exists()


def test_signal_at_many_moments_of_a_run(inputs, child_process):
    delays = [0.0, 0.002, 0.01, 0.05, 0.2, 0.5, 1.0, 2.0]
    children = []
    for i, delay in enumerate(delays):
        name = ("SIGINT", "SIGTERM")[i % 2]
        proc = subprocess.Popen([sys.executable, "-c", _MARKED_RUN, *_argv(inputs, f"out{i}")], **child_process,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        children.append((proc, delay, name, i))
    try:
        ready = []
        for proc, delay, name, i in children:
            assert proc.stdout.readline().strip() == "ready", proc.communicate()[1]
            ready.append(time.monotonic())
        for (proc, delay, name, i), start in zip(children, ready):
            time.sleep(max(0.0, start + delay - time.monotonic()))
            if proc.poll() is None:
                proc.send_signal(getattr(signal, name))
        finished = 0
        for proc, delay, name, i in children:
            _, err = proc.communicate(timeout=300)
            out = inputs / f"out{i}"
            if proc.returncode == 0:  # the run ended before the signal
                finished += 1
                assert err == "" and (out / "keep.npy").exists()
                continue
            code, line = EXPECTED[name]
            assert (proc.returncode, err.splitlines()) == (code, [line]), (delay, err)
            assert not os.path.exists(out) or not [p for p in os.listdir(out) if not p.startswith(".")]
        assert finished < len(delays) // 2  # most signals landed during the run
    finally:
        for proc, *_ in children:
            proc.kill()


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signal_after_the_run_finished(inputs, name, child_process):
    """A signal after the outputs are committed is ignored: the process ends with the run's code
    0, quietly (no traceback, no message that would claim nothing was written, no death by
    SIGTERM)."""
    env = {**child_process["env"], "SIGNAL_NAME": name}
    proc = subprocess.run([sys.executable, "-c", _LATE_RUN, *_argv(inputs, "out")],
                          env=env, cwd=child_process["cwd"], capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (inputs / "out" / "keep.npy").exists()


#: A child in which the signal surfaces as another error, as when it interrupts the import of an
#: extension module that turns any failure into an ImportError (NumPy does).
_MASKED_RUN = textwrap.dedent("""
    import os, signal, sys
    import aflite_fast.cli

    real_build = aflite_fast.cli.build_parser

    def build_parser():
        failed = False
        try:
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(1000))  # the handler runs here
        except KeyboardInterrupt:
            failed = True  # an extension's init reports only that it failed
        if failed:
            raise ImportError("Importing the numpy C-extensions failed.")
        return real_build()

    aflite_fast.cli.build_parser = build_parser
    sys.exit(aflite_fast.cli.main())
""")


def test_signal_surfacing_as_another_error(inputs, child_process):
    proc = subprocess.run([sys.executable, "-c", _MASKED_RUN, *_argv(inputs, "out")], **child_process,
                          capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stderr.splitlines()) == EXPECTED["SIGINT"][:1] + ([EXPECTED["SIGINT"][1]],)


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM"])
def test_signal_while_outputs_are_published(tmp_path, name):
    """c. A signal that lands while a command's outputs are switched in, or after, raises
    nothing (the outputs stand and the command ends normally); before that it interrupts, and
    a file that is not an output (a checkpoint) counts for nothing."""
    from aflite_fast.cli import _SignalsRaise
    from aflite_fast.io.atomic import OutputSet, write_file_atomically

    signum = getattr(signal, name)
    with _SignalsRaise() as signals:
        with pytest.raises(KeyboardInterrupt):  # Terminated is a KeyboardInterrupt
            os.kill(os.getpid(), signum)
            time.sleep(0.5)  # the handler runs here
        signals.first = None
        write_file_atomically(tmp_path / "checkpoint", lambda tmp: open(tmp, "w").close())
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signum)
            time.sleep(0.5)
        signals.first = None

        def signal_during_commit():
            os.kill(os.getpid(), signum)
            time.sleep(0.5)

        with OutputSet(tmp_path / "out", ["a.txt"], before_commit=signal_during_commit) as out:
            out.save_text("a.txt", "x")
        assert (tmp_path / "out" / "a.txt").read_text() == "x"
        os.kill(os.getpid(), signum)  # after the outputs: nothing
        time.sleep(0.5)
        assert signals.first is None
