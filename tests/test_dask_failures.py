"""Dask backend: a lost worker costs the calls it had not answered, not the run.

On a LocalCluster of 3 worker processes, a worker plugin makes one worker exit (``os._exit``,
as SIGKILL or the out-of-memory killer would) at a given call of its phase actors:

a. in the middle of a phase's solver rounds, and separately during prediction: the run goes
   on, and keep, removed, removed_phase and scores are bitwise those of a local run; the
   history records the worker lost and the rounds repeated (report.json too, through the CLI,
   which exits 0 with the local keep.npy).
b. every worker lost (their nannies told not to restart them): the CLI exits with its own
   code (75) and one line, --out keeps the previous run's files, and the checkpoint of the
   last finished phase resumes to the uninterrupted result.
c. a worker lost when no worker left can read X's file: ClusterLost says so.
"""
import json
import os

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from aflite_fast import aflite  # noqa: E402
from aflite_fast.cli import EXIT_CLUSTER_LOST, main  # noqa: E402
from aflite_fast.phase import dask_backend  # noqa: E402
from aflite_fast.phase.backends import DaskBackend  # noqa: E402

# several reduction groups on the small X of these tests: 3 shares, one per worker
pytestmark = pytest.mark.usefixtures("small_reduction_groups")


class ExitAt(distributed.WorkerPlugin):
    """Makes the worker at ``target`` (every worker: None) exit at its ``call``-th call of the
    phase actors' ``method`` (``evaluate``: a solver round; ``predict``), counted over the run."""

    def __init__(self, method, call, target=None):
        self.method, self.call, self.target = method, call, target

    def setup(self, worker):
        if self.target is not None and worker.address != self.target:
            return
        from aflite_fast.phase.dask_backend import _PhaseRows

        original = getattr(_PhaseRows, self.method)
        calls = [0]

        def exiting(actor, *args, **kwargs):
            calls[0] += 1
            if calls[0] == self.call:
                os._exit(1)
            return original(actor, *args, **kwargs)

        self.original = original
        setattr(_PhaseRows, self.method, exiting)

    def teardown(self, worker):
        if getattr(self, "original", None) is not None:
            from aflite_fast.phase.dask_backend import _PhaseRows

            setattr(_PhaseRows, self.method, self.original)


@pytest.fixture(scope="module")
def cluster3():
    """3 worker processes; a worker that exits is restarted by its nanny (with a new address)."""
    with distributed.LocalCluster(n_workers=3, processes=True, threads_per_worker=1,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        yield cluster, client


def make_problem(seed, n=3000, d=16, n_classes=3):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, n_classes, size=n)
    scale = (1.0 + np.arange(d)) ** -1.0
    X = (0.6 * rng.standard_normal((n_classes, d))[y] + rng.standard_normal((n, d))) * scale
    X += 2.0 * rng.uniform(0.5, 1.5, size=d)
    return X.astype(np.float32), y


KW = dict(target_size=2300, n_partitions=6, train_size=0.4, slice_size=150, tau=0.6, chance_check=False,
          progress=False)


def assert_same_run(remote, local):
    assert len(local.history) >= 3
    np.testing.assert_array_equal(remote.keep, local.keep)
    np.testing.assert_array_equal(remote.removed, local.removed)
    np.testing.assert_array_equal(remote.removed_phase, local.removed_phase)
    np.testing.assert_array_equal(remote.scores, local.scores)
    assert [h.n_removed for h in remote.history] == [h.n_removed for h in local.history]
    assert [h.mean_iterations for h in remote.history] == [h.mean_iterations for h in local.history]


def middle_worker(client, X):
    """X on the cluster, and the worker that holds its middle share."""
    client.wait_for_workers(3, timeout=60)  # a worker lost by an earlier test is back
    Xd = dask_backend.DaskEmbeddings(X, client)
    assert len(Xd.ranges) == 3
    return Xd, Xd.ranges[1][0]


@pytest.mark.parametrize("method, call, source", [("evaluate", 10, "npy"), ("predict", 2, "npy"),
                                                  ("evaluate", 10, "dask"), ("predict", 2, "ndarray")])
def test_a_lost_worker_gives_the_local_result(cluster3, seed, tmp_path, method, call, source):
    """One of 3 workers exits in phase 1, in its solver rounds or during its prediction; X a
    .npy file the workers read, a dask array (its chunks computed again elsewhere) or an
    ndarray here (its rows sent again)."""
    import dask.array as da

    _, client = cluster3
    X, y = make_problem(seed + 37)
    np.save(tmp_path / "emb.npy", X)
    local = aflite(X, y, random_state=seed, **KW)
    given = {"npy": str(tmp_path / "emb.npy"), "dask": da.from_array(X, chunks=(700, 16)), "ndarray": X}[source]
    Xd, victim = middle_worker(client, given)
    client.register_plugin(ExitAt(method, call, victim), name="exit-at")
    try:
        remote = aflite(Xd, y, backend="dask", client=client, random_state=seed, **KW)
    finally:
        client.unregister_worker_plugin("exit-at")
    assert_same_run(remote, local)
    lost = [h.workers_lost for h in remote.history]
    assert sum(lost) == 1, lost
    phase = lost.index(1)
    assert remote.history[phase].rounds_repeated >= 1
    assert sum(h.rounds_repeated for h in remote.history) == remote.history[phase].rounds_repeated
    assert all(h.workers_lost == h.rounds_repeated == 0 for h in local.history)
    assert victim in Xd.workers_lost and victim not in [r[0] for r in Xd.ranges]
    assert phase == 1  # the 10th round comes after phase 0's 7 rounds; the 2nd prediction is phase 1's


def test_cli_survives_a_lost_worker(cluster3, seed, tmp_path):
    """``aflite-fast filter --scheduler``: a worker lost in the rounds of phase 0; exit 0, the
    local keep.npy and scores.npy, report.json's history records the loss."""
    _, client = cluster3
    X, y = make_problem(seed + 38)
    np.save(tmp_path / "emb.npy", X)
    np.save(tmp_path / "labels.npy", y)
    args = ["--target-size", "2300", "--n-partitions", "6", "--train-size", "0.4", "--slice-size", "150",
            "--tau", "0.6", "--seed", str(seed), "--no-chance-check", "--quiet"]
    emb, labels = str(tmp_path / "emb.npy"), str(tmp_path / "labels.npy")
    assert main(["filter", emb, labels, "--out", str(tmp_path / "local"), *args]) == 0
    _, victim = middle_worker(client, emb)
    client.register_plugin(ExitAt("evaluate", 3, victim), name="exit-at")
    try:
        assert main(["filter", emb, labels, "--out", str(tmp_path / "dask"), *args,
                     "--scheduler", client.scheduler.address]) == 0
    finally:
        client.unregister_worker_plugin("exit-at")
    for name in ("keep.npy", "scores.npy"):
        np.testing.assert_array_equal(np.load(tmp_path / "dask" / name), np.load(tmp_path / "local" / name))
    history = json.loads((tmp_path / "dask" / "report.json").read_text())["history"]
    assert [h["workers_lost"] for h in history][0] == 1
    assert sum(h["workers_lost"] for h in history) == 1
    assert history[0]["rounds_repeated"] >= 1


def test_every_worker_lost_stops_with_its_exit_code(seed, tmp_path, monkeypatch, capsys):
    """Every worker exits in phase 1 and none comes back: exit 75, one line, --out as it was,
    and the checkpoint (phase 0) resumes to the uninterrupted run's keep.npy."""
    monkeypatch.setattr(dask_backend, "REJOIN_TIMEOUT", 1.0)
    X, y = make_problem(seed + 39)
    np.save(tmp_path / "emb.npy", X)
    np.save(tmp_path / "labels.npy", y)
    emb, labels, out, ckpt = (str(tmp_path / name) for name in ("emb.npy", "labels.npy", "out", "run.npz"))
    args = ["--target-size", "2300", "--n-partitions", "6", "--train-size", "0.4", "--slice-size", "150",
            "--tau", "0.6", "--seed", str(seed), "--no-chance-check", "--quiet"]
    assert main(["filter", emb, labels, "--out", str(tmp_path / "whole"), *args]) == 0
    # --out holds an earlier run's files, which a failed run must leave as they are
    assert main(["filter", emb, labels, "--out", out, *args, "--slice-size", "100"]) == 0
    before = {name: (tmp_path / "out" / name).read_bytes() for name in ("keep.npy", "scores.npy", "report.json")}
    capsys.readouterr()
    with distributed.LocalCluster(n_workers=3, processes=True, threads_per_worker=1,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as client:
        for nanny in cluster.workers.values():
            nanny.close_gracefully()  # a worker that exits is not restarted
        client.register_plugin(ExitAt("predict", 2), name="exit-at")  # phase 1's prediction, on every worker
        code = main(["filter", emb, labels, "--out", out, *args, "--checkpoint", ckpt,
                     "--scheduler", client.scheduler.address])
    err = capsys.readouterr().err
    assert code == EXIT_CLUSTER_LOST == 75
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "lost every worker" in lines[0] and "in phase 1" in lines[0]
    assert f"--checkpoint {ckpt!r} holds phases 0..0" in lines[0] and "no output written" in lines[0]
    assert {name: (tmp_path / "out" / name).read_bytes() for name in before} == before
    # the checkpoint resumes (here locally) to the uninterrupted result
    assert main(["filter", emb, labels, "--out", out, *args, "--checkpoint", ckpt]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["resumed_from_phase"] == 1
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "keep.npy"), np.load(tmp_path / "whole" / "keep.npy"))


class ExitAndHide(ExitAt):
    """:class:`ExitAt`, which first moves X's file away: no worker left can read the rows."""

    def __init__(self, method, call, target, path):
        super().__init__(method, call, target)
        self.path = path

    def setup(self, worker):
        if worker.address != self.target:
            return
        from aflite_fast.phase.dask_backend import _PhaseRows

        original, calls, path = _PhaseRows.evaluate, [0], self.path

        def exiting(actor, *args):
            calls[0] += 1
            if calls[0] == self.call:
                os.rename(path, path + ".moved")
                os._exit(1)
            return original(actor, *args)

        _PhaseRows.evaluate = exiting


def test_rows_unreadable_on_every_worker_left(cluster3, seed, tmp_path):
    """A worker lost while X's file is gone: no worker left can read its share, ClusterLost
    says so (and that no checkpoint was given)."""
    from aflite_fast import ClusterLost

    _, client = cluster3
    X, y = make_problem(seed + 40)
    path = str(tmp_path / "emb.npy")
    np.save(path, X)
    Xd, victim = middle_worker(client, path)
    r0, r1 = Xd.ranges[1][3:5]  # the rows of the lost worker's share
    client.register_plugin(ExitAndHide("evaluate", 3, victim, path), name="exit-at")
    try:
        with pytest.raises(ClusterLost, match=rf"the rows {r0}\.\.{r1 - 1} of X cannot be read on any worker left of the "
                                              r"dask cluster \(tcp://[^ ]+: FileNotFoundError.*, in phase 0; no "
                                              r"checkpoint was given"):
            aflite(Xd, y, backend="dask", client=client, random_state=seed, **KW)
    finally:
        client.unregister_worker_plugin("exit-at")


def test_failures_of_the_local_backend_are_none():
    from aflite_fast.phase.backends import LocalBackend

    assert LocalBackend().failures() == {"workers_lost": 0, "rounds_repeated": 0}
    assert DaskBackend(client=object()).failures() == {"workers_lost": 0, "rounds_repeated": 0}


class _FutureDoneAfterTheWait:
    """A future whose wait times out and which has finished by the time it is checked."""

    def __init__(self, outcome):
        self.outcome, self.calls = outcome, 0

    def result(self, timeout=None):
        self.calls += 1
        if self.calls == 1:
            raise TimeoutError("not within the poll")
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome

    def done(self):
        return True


def test_an_actor_call_finished_just_after_the_poll_gives_its_result():
    # the poll's timeout and the call's completion can cross on a loaded machine: the call's
    # result, not the poll's TimeoutError; the method's own error still propagates
    assert dask_backend._actor_result(None, _FutureDoneAfterTheWait(42), "tcp://w") == 42
    with pytest.raises(TimeoutError, match="the method's own"):
        dask_backend._actor_result(None, _FutureDoneAfterTheWait(TimeoutError("the method's own")), "tcp://w")
