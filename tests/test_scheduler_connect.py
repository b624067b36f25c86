"""``--scheduler``: what does not answer as a dask scheduler is refused within the timeout.

a. A TCP service that is not a dask scheduler (one that says nothing, as an HTTP server waiting
   for a request line does, and one that answers HTTP) is exit 2 within ``--scheduler-timeout``
   seconds, one line naming ``--scheduler``.
b. A refused connection, an address whose host does not resolve and a word that is no address
   each get their own message; a missing or malformed scheduler file too.
c. :func:`aflite_fast.phase.dask_backend.connect_scheduler` is the one place that connects; it raises
   ValueError with the same messages, and connects to a live scheduler.

The fake services listen on 127.0.0.1, on a port the system picks, and are closed after the test.
"""
import contextlib
import socket
import threading
import time

import numpy as np
import pytest

from aflite_fast.cli import main

pytest.importorskip("distributed")
from aflite_fast.phase import dask_backend  # noqa: E402


@contextlib.contextmanager
def fake_service(reply):
    """A TCP server on 127.0.0.1 that accepts connections and answers ``reply`` to whatever
    arrives (None: reads and says nothing, keeping the connection open); yields its address."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()
    held = []

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (socket.timeout, OSError):
                continue
            held.append(conn)
            if reply is not None:
                try:
                    conn.settimeout(2)
                    conn.recv(4096)
                    conn.sendall(reply)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        server.close()


def free_port():
    """A port of 127.0.0.1 on which nothing listens (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def files(tmp_path, seed):
    rng = np.random.default_rng([seed, 8786])
    X = rng.standard_normal((100, 3)).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", (X[:, 0] > 0).astype(np.int64))
    return tmp_path


def _refused(files, capsys, address, *extra):
    argv = ["filter", str(files / "X.npy"), str(files / "y.npy"), "--out", str(files / "o"), "--target-size",
            "50", "--train-size", "0.5", "--n-partitions", "2", "--quiet", "--scheduler", address, *extra]
    start = time.monotonic()
    assert main(argv) == 2
    seconds = time.monotonic() - start
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"aflite-fast filter: error: --scheduler {address!r}"), lines[0]
    assert "Traceback" not in lines[0]
    assert not (files / "o").exists()
    return lines[0], seconds


@pytest.mark.parametrize("reply", [None, b"HTTP/1.0 400 Bad request\r\nContent-Length: 0\r\n\r\n"])
def test_a_service_that_is_not_a_scheduler_is_refused_within_the_timeout(files, capsys, reply):
    with fake_service(reply) as address:
        line, seconds = _refused(files, capsys, address, "--scheduler-timeout", "1.5")
    assert "did not answer as a dask scheduler" in line
    assert seconds < 1.5 + 5  # the timeout, plus the start of the command; not dask's 30 s or a hang


def test_the_default_timeout_applies_without_the_flag(files, capsys, monkeypatch):
    monkeypatch.setattr(dask_backend, "CONNECT_TIMEOUT", 1)
    with fake_service(None) as address:
        line, seconds = _refused(files, capsys, address)
    assert "within 1 s" in line
    assert seconds < 1 + 5


def test_refused_unresolvable_and_malformed_addresses_each_have_their_message(files, capsys):
    port = free_port()
    line, _ = _refused(files, capsys, f"tcp://127.0.0.1:{port}")
    assert "connection refused" in line and f"port {port}" in line
    line, _ = _refused(files, capsys, "tcp://no-such-host.invalid:8786")
    assert "'no-such-host.invalid'" in line and "resolve" in line
    for word in ("banana", "tcp://:8786", "tcp://127.0.0.1:port", "tcp://127.0.0.1:99999", "http://127.0.0.1:80",
                 "tcp://127.0.0.1:8786/path"):
        line, _ = _refused(files, capsys, word)
        assert "is not a scheduler address" in line and "tcp://HOST:PORT" in line, line
    addresses = (f"tcp://127.0.0.1:{port}", "tcp://no-such-host.invalid:8786", "banana")
    messages = {_refused(files, capsys, a)[0].replace(repr(a), "ADDRESS") for a in addresses}
    assert len(messages) == 3


def test_scheduler_files(files, capsys):
    line, _ = _refused(files, capsys, str(files / "nope.json"))
    assert "no such scheduler file" in line
    (files / "bad.json").write_text("[1, 2]")
    line, _ = _refused(files, capsys, str(files / "bad.json"))
    assert "not a dask scheduler file" in line
    (files / "refused.json").write_text(f'{{"address": "tcp://127.0.0.1:{free_port()}"}}')
    line, _ = _refused(files, capsys, str(files / "refused.json"))
    assert "connection refused" in line


def test_scheduler_timeout_flag_must_be_positive(files, capsys):
    for value in ("0", "-1", "nan", "soon"):
        argv = ["filter", str(files / "X.npy"), str(files / "y.npy"), "--out", str(files / "o"), "--target-size",
                "50", "--train-size", "0.5", "--scheduler", "local", "--scheduler-timeout", value]
        assert main(argv) == 2
        line = capsys.readouterr().err.strip()
        assert "--scheduler-timeout" in line and "\n" not in line


def test_connect_scheduler_is_the_api(monkeypatch):
    with fake_service(None) as address:
        start = time.monotonic()
        with pytest.raises(ValueError, match="did not answer as a dask scheduler within 1 s"):
            dask_backend.connect_scheduler(address, timeout=1)
        assert time.monotonic() - start < 6
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        dask_backend.connect_scheduler("tcp://127.0.0.1:8786", timeout=0)


def test_connect_scheduler_reaches_a_live_scheduler():
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster:
        client = dask_backend.connect_scheduler(cluster.scheduler_address, timeout=10)
        try:
            assert client.scheduler_info()["type"] == "Scheduler"
        finally:
            dask_backend.close_client(client)
        worker = next(iter(cluster.scheduler.workers))
        with pytest.raises(ValueError, match="a dask Worker answered there, not the scheduler"):
            dask_backend.connect_scheduler(worker, timeout=5)
