"""Dask backend: same results as the local engine, on LocalClusters of 2 and 3 processes.

a. ``aflite(..., backend="dask")`` gives the local keep/removed/removed_phase/scores exactly,
   whatever the chunking of X (uneven chunks, several chunks per scan block), on 2 and on 3
   workers, with and without groups and the permutation null.
b. ``score_phase_dask`` gives ``_local.score_phase``'s coefficients and counts bitwise, also
   with float16 shards read from .npy files on the workers and summed probabilities; it
   reports the bytes it moved, and the bytes of a solver round do not grow with N.
c. Partitions drawn as whole groups (padded training positions) give the local result; a
   checkpoint written with the dask backend is accepted by a local run; the permutation null's
   counts are the local ones.
d. Bad input gets a clear error (NaN in X names the row, unknown backend, wrong dtype).
e. Big-endian, integer and .npz inputs give the local result; float64 beyond float32's range
   names the row, as locally.
"""
import os

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

from aflite_fast import aflite
from aflite_fast.core.solver import SolverOptions
from aflite_fast.io.inputs import encode_labels, scan_rows
from aflite_fast.phase import local as _local
from aflite_fast.phase import partitions
from aflite_fast.phase.dask_backend import (
    DaskEmbeddings,
    as_dask_array,
    close_client,
    connect,
    scan_rows_dask,
    score_phase_dask,
)

# several reduction groups even on the small X of these tests
pytestmark = pytest.mark.usefixtures("small_reduction_groups")


@pytest.fixture
def seed():
    """Seed of every random draw here (AFLITE_FAST_TEST_SEED overrides, as in the other tests)."""
    return int(os.environ.get("AFLITE_FAST_TEST_SEED", "0"))


def make_problem(rng, n, d, n_classes, *, signal=1.0, dtype=np.float32):
    """Overlapping classes, skewed feature variances, a shared offset (embedding-like)."""
    y = rng.integers(0, n_classes, size=n)
    scale = (1.0 + np.arange(d)) ** -1.0
    X = (signal * rng.standard_normal((n_classes, d))[y] + rng.standard_normal((n, d))) * scale
    X += 2.0 * rng.uniform(0.5, 1.5, size=d)
    return X.astype(dtype), y


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def assert_same_run(remote, local):
    """keep, removed (in order), removed_phase and scores bitwise; the history's phases."""
    assert len(local.history) >= 2
    np.testing.assert_array_equal(remote.keep, local.keep)
    np.testing.assert_array_equal(remote.removed, local.removed)
    np.testing.assert_array_equal(remote.removed_phase, local.removed_phase)
    np.testing.assert_array_equal(remote.scores, local.scores)  # NaNs in the same places
    assert remote.stop_reason == local.stop_reason
    assert [h.n_removed for h in remote.history] == [h.n_removed for h in local.history]
    assert all(h.bytes_moved > 0 for h in remote.history)
    assert all(h.bytes_moved == 0 for h in local.history)


@pytest.mark.parametrize("chunk_rows", [700, 5000])
def test_aflite_dask_matches_local(client, seed, chunk_rows):
    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 2400, 24, 3, signal=0.6)
    kw = dict(target_size=1200, n_partitions=8, train_size=800, slice_size=150, tau=0.6,
              random_state=seed + 1, progress=False)
    local = aflite(X, y, **kw)
    dask_X = da.from_array(X, chunks=(chunk_rows, 12))  # column chunks are merged
    remote = aflite(dask_X, y, backend="dask", **kw)
    assert_same_run(remote, local)


def test_groups_dask_matches_local(client, seed, tmp_path):
    """Partitions of whole groups (training sets of unequal size, padded) on the cluster, and a
    checkpoint written there."""
    rng = np.random.default_rng(seed + 11)
    X, y = make_problem(rng, 1200, 16, 3, signal=0.6)
    groups = rng.integers(0, 400, size=1200)
    kw = dict(target_size=800, n_partitions=6, train_size=0.5, slice_size=100, tau=0.6,
              random_state=seed + 2, progress=False, groups=groups)
    local = aflite(X, y, **kw)
    ckpt = tmp_path / "run.npz"
    remote = aflite(da.from_array(X, chunks=(500, 16)), y, backend="dask", checkpoint=ckpt, **kw)
    assert len(local.history) >= 2
    np.testing.assert_array_equal(remote.removed, local.removed)
    np.testing.assert_array_equal(remote.scores, local.scores)
    # the checkpoint's fingerprint of X (rows cut on the workers) is the local one: a local
    # run accepts it and returns the finished result
    again = aflite(X, y, checkpoint=ckpt, **kw)
    assert again.resumed_from == len(local.history)
    np.testing.assert_array_equal(again.removed, local.removed)


def test_null_dask_matches_local(client, seed):
    """The permutation null (issue 15) scores on the cluster: the same counts as locally."""
    rng = np.random.default_rng(seed + 15)
    X, y = make_problem(rng, 1000, 12, 2, signal=0.5)
    kw = dict(target_size=700, n_partitions=6, train_size=0.5, slice_size=100, tau=0.6,
              random_state=seed + 3, progress=False, null="permutation", n_null=2, stop="both")
    local = aflite(X, y, **kw)
    remote = aflite(da.from_array(X, chunks=(400, 12)), y, backend="dask", **kw)
    assert [h.null_above_tau for h in remote.history] == [h.null_above_tau for h in local.history]
    np.testing.assert_array_equal(remote.removed, local.removed)
    assert remote.stop_reason == local.stop_reason


def test_score_phase_bitwise_shards_float16_blocks(client, seed, tmp_path):
    rng = np.random.default_rng(seed + 7)
    X, y = make_problem(rng, 1500, 20, 2, dtype=np.float16)
    bounds = [0, 400, 1100, 1500]
    paths = []
    for i in range(3):
        paths.append(tmp_path / f"shard{i}.npy")
        np.save(paths[-1], X[bounds[i]:bounds[i + 1]])
    Xd = DaskEmbeddings(paths, client, chunk_rows=300)
    # two groups of 750 rows, one to each worker; chunks of at most 300 rows within each worker's rows
    assert Xd.shape == X.shape and Xd.dtype == np.float16 and Xd.n_chunks == 6
    assert [r[1:5] for r in Xd.ranges] == [(0, 1, 0, 750), (1, 64, 750, 1500)]
    center = scan_rows(X).astype(np.float32)
    np.testing.assert_array_equal(scan_rows_dask(Xd).astype(np.float32), center)

    codes = encode_labels(y).codes
    active = np.sort(rng.choice(X.shape[0], size=1300, replace=False)).astype(np.int64)
    train_pos = partitions.partition_train_positions(5, 0, active.size, 500, 6)
    warm = rng.standard_normal((6, X.shape[1] + 1, 2)) * 0.01
    common = dict(n_classes=2, C=0.5, loss="gce", loss_params={"q": 0.7},
                  options=SolverOptions(tol=1e-4, max_iter=200), warm_coef=warm)
    proba_local = np.zeros((active.size, 2))
    proba_dask = np.zeros((active.size, 2))
    local = _local.score_phase(X, codes, active, center, train_pos, proba_sum=proba_local, **common)
    remote = score_phase_dask(Xd, codes, active, center, train_pos, proba_sum=proba_dask, **common)
    np.testing.assert_array_equal(remote.coef, local.coef)
    np.testing.assert_array_equal(remote.n_iter, local.n_iter)
    np.testing.assert_array_equal(remote.seen, local.seen)
    np.testing.assert_array_equal(remote.correct, local.correct)
    np.testing.assert_array_equal(remote.prob_label, local.prob_label)
    np.testing.assert_array_equal(proba_dask, proba_local)

    np.testing.assert_array_equal(remote.n_eval, local.n_eval)

    moved = remote.bytes_moved
    assert moved["counts_back"] == active.size * (1 + 1 + 8 + 2 * 8)  # seen, correct in uint8 (6 models)
    # two workers, each sent (d + 1) x 6 models x (C - 1) outputs (the reference-class form)
    assert moved["predict_weights"] == 2 * (X.shape[1] + 1) * 6 * (2 - 1) * 4
    # the preconditioner's sample (X is small: every row of X, active or not, 750 on each
    # worker; preconditioning.whole_x_preconditioner) is sent to the worker holding most of it
    # (the first of a tie), and the (D x D) preconditioner comes back
    assert moved["precond_rows"] == (X.shape[0] - 750) * 21 * 4 + 21 * 21 * 4
    assert remote.rounds == local.n_eval.max()  # every round evaluates the models still running
    assert moved["weights_out"] > 0 and moved["sums_back"] > 0
    assert moved["total"] == sum(v for k, v in moved.items() if k != "total")


def test_round_bytes_do_not_grow_with_rows(client, seed):
    """A solver round sends the running models' weights to each worker and takes back one
    partial sum per whole subtree of the reduction tree a worker holds: the same number of
    subtrees at N and 2N (groups 0-1 | 2-3 and 0-3 | 4-7 of 750 rows: one whole subtree per
    worker), so the bytes per evaluated model do not grow with N."""
    for n in (3000, 6000):
        rng = np.random.default_rng(seed + 5)
        X, y = make_problem(rng, n, 16, 3, signal=0.6)
        Xd = DaskEmbeddings(X, client)
        center = scan_rows_dask(Xd).astype(np.float32)
        active = np.arange(n, dtype=np.int64)
        train_pos = partitions.partition_train_positions(3, 0, n, n // 10, 8)
        res = score_phase_dask(Xd, encode_labels(y).codes, active, center, train_pos, n_classes=3)
        moved = res.bytes_moved
        width = (3 - 1) * 17  # C - 1 outputs (the reference-class form); the class rows' padding is not sent
        evaluated = int(res.n_eval.sum())
        assert moved["weights_out"] == 2 * evaluated * (8 + 8 + width * 4)  # indices, scales, weights
        assert moved["sums_back"] == 2 * res.rounds * 16 + 2 * evaluated * (width + 1) * 8
        assert moved["counts_back"] == n * (1 + 1 + 8)


def test_npy_path_and_memmap_input(client, seed, tmp_path):
    rng = np.random.default_rng(seed + 3)
    X, y = make_problem(rng, 1200, 16, 2, signal=0.8)
    path = tmp_path / "X.npy"
    np.save(path, X)
    kw = dict(target_size=900, n_partitions=4, train_size=400, slice_size=100, tau=0.6,
              random_state=seed, progress=False)
    local = aflite(str(path), y, **kw)
    remote = aflite(str(path), y, backend="dask", **kw)
    np.testing.assert_array_equal(remote.keep, local.keep)
    np.testing.assert_array_equal(remote.scores, local.scores)
    # what the CLI passes: a read-only memmap (read on the workers, not pickled) and a client
    mm = np.load(path, mmap_mode="r")
    remote = aflite(mm, y, backend="dask", client=client, **kw)
    np.testing.assert_array_equal(remote.keep, local.keep)
    np.testing.assert_array_equal(remote.removed, local.removed)


def test_errors(client, seed):
    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 400, 8, 2)
    X[123, 4] = np.nan
    with pytest.raises(ValueError, match="row 123"):
        aflite(da.from_array(X, chunks=(100, 8)), y, target_size=300, train_size=100,
               backend="dask", progress=False)
    with pytest.raises(ValueError, match="backend"):
        aflite(X, y, target_size=300, train_size=100, backend="ray", progress=False)
    with pytest.raises(ValueError, match="Complex data not supported"):
        as_dask_array(da.zeros((10, 3), dtype=np.complex64, chunks=5))
    with pytest.raises(ValueError, match="float16, float32 or float64"):
        as_dask_array(da.zeros((10, 3), dtype="datetime64[s]", chunks=5))


def test_byte_order_integers_and_npz_on_the_cluster(client, seed, tmp_path):
    """Big-endian and integer files, and an .npz member, are read on the workers chunk by
    chunk and give the local float32 result; float64 beyond float32's range names the row."""
    rng = np.random.default_rng(seed)
    X, y = make_problem(rng, 400, 8, 2)
    kw = dict(target_size=250, n_partitions=4, train_size=150, slice_size=50, tau=0.6,
              random_state=1, progress=False)
    local = aflite(X, y, **kw)
    np.save(tmp_path / "big.npy", X.astype(">f4"))
    np.savez(tmp_path / "many.npz", emb=X, other=X[:3])
    for source in (str(tmp_path / "big.npy"), f"{tmp_path / 'many.npz'}:emb"):
        remote = aflite(source, y, backend="dask", **kw)
        np.testing.assert_array_equal(remote.keep, local.keep)
        np.testing.assert_array_equal(remote.scores, local.scores)
    ints = np.round(X * 100).astype(np.int16)
    np.save(tmp_path / "int.npy", ints)
    np.testing.assert_array_equal(aflite(str(tmp_path / "int.npy"), y, backend="dask", **kw).scores,
                                  aflite(ints.astype(np.float32), y, **kw).scores)
    huge = X.astype(np.float64)
    huge[77, 1] = 1e39
    with pytest.raises(ValueError, match=r"beyond the float32 range .*first at row 77"):
        aflite(da.from_array(huge, chunks=(100, 8)), y, backend="dask", **kw)


@pytest.fixture(scope="module")
def client3():
    with distributed.LocalCluster(n_workers=3, processes=True, threads_per_worker=1,
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as c:
        yield c


@pytest.mark.parametrize("with_groups", [False, True])
def test_three_workers_match_local(client3, seed, with_groups):
    """Rows shared out among 3 workers (groups 0, 1-2, 3 of the reduction tree: subtrees
    that do not line up with the workers), with the permutation null, and with partitions of
    whole groups."""
    rng = np.random.default_rng(seed + 33)
    X, y = make_problem(rng, 3000, 16, 3, signal=0.6)
    groups = rng.integers(0, 1000, size=3000) if with_groups else None
    kw = dict(target_size=2400, n_partitions=6, train_size=0.4, slice_size=120, tau=0.6, random_state=seed + 4,
              progress=False, groups=groups, null="permutation", n_null=1, stop="paper")
    local = aflite(X, y, **kw)
    Xd = DaskEmbeddings(X, client3, chunk_rows=700)
    assert [r[1:3] for r in Xd.ranges] == [(0, 1), (1, 3), (3, 64)]
    remote = aflite(Xd, y, backend="dask", **kw)
    assert_same_run(remote, local)
    assert [h.null_above_tau for h in remote.history] == [h.null_above_tau for h in local.history]


def test_connect_by_address(client):
    """What ``aflite-fast filter --scheduler ADDRESS`` does to reach the cluster."""
    other = connect(client.scheduler.address)
    try:
        assert len(other.nthreads()) == 2
    finally:
        close_client(other)


def test_cli_report_counts_the_bytes(client, seed, tmp_path):
    """``aflite-fast filter --scheduler ADDRESS``: report.json's history records each phase's
    bytes_moved (and the rows kept are the local run's)."""
    import json

    from aflite_fast.cli import main
    rng = np.random.default_rng(seed + 9)
    X, y = make_problem(rng, 1200, 16, 2, signal=0.8)
    np.save(tmp_path / "emb.npy", X)
    np.save(tmp_path / "labels.npy", y)
    args = ["--target-size", "900", "--n-partitions", "6", "--train-size", "400", "--slice-size", "100",
            "--seed", "1", "--quiet"]
    for name, extra in (("local", []), ("dask", ["--scheduler", client.scheduler.address])):
        assert main(["filter", str(tmp_path / "emb.npy"), str(tmp_path / "labels.npy"),
                     "--out", str(tmp_path / name), *args, *extra]) == 0
    reports = {name: json.loads((tmp_path / name / "report.json").read_text()) for name in ("local", "dask")}
    assert all(h["bytes_moved"] == 0 for h in reports["local"]["history"])
    assert all(h["bytes_moved"] > 0 for h in reports["dask"]["history"])
    np.testing.assert_array_equal(np.load(tmp_path / "dask" / "keep.npy"), np.load(tmp_path / "local" / "keep.npy"))


def test_a_row_source_of_another_format_is_refused(tmp_path):
    """The backend maps a .npy opened for positioned reads; a directory of shards opened by
    open_embeddings is refused with a message naming what to pass instead."""
    from aflite_fast import open_embeddings
    from aflite_fast.phase.dask_backend import as_dask_array

    X = np.arange(60, dtype=np.float32).reshape(20, 3)
    np.save(tmp_path / "one.npy", X)
    (tmp_path / "shards").mkdir()
    np.save(tmp_path / "shards" / "part_0.npy", X[:10])
    np.save(tmp_path / "shards" / "part_1.npy", X[10:])
    np.testing.assert_array_equal(as_dask_array(open_embeddings(tmp_path / "one.npy")).compute(), X)
    with pytest.raises(ValueError, match="list of .npy shard paths"):
        as_dask_array(open_embeddings(tmp_path / "shards"))


def test_row_space_phases_dask_match_local(client, seed):
    """Small X whose models train on fewer rows than columns (the row-space solver): the phases
    are scored by the local engine on X's rows brought to the client, with its bits."""
    rng = np.random.default_rng(seed + 21)
    X, y = make_problem(rng, 300, 200, 2, signal=0.6)  # t = 150 < D = 201
    kw = dict(target_size=200, n_partitions=6, train_size=0.5, slice_size=25, tau=0.0,
              random_state=seed + 4, progress=False, chance_check=False)
    local = aflite(X, y, **kw)
    remote = aflite(da.from_array(X, chunks=(100, 200)), y, backend="dask", **kw)
    assert len(local.history) >= 2
    np.testing.assert_array_equal(remote.keep, local.keep)
    np.testing.assert_array_equal(remote.removed, local.removed)
    np.testing.assert_array_equal(remote.scores, local.scores)
    # X's rows came here once, for the first phase
    assert remote.history[0].bytes_moved == X.nbytes and all(h.bytes_moved == 0 for h in remote.history[1:])
