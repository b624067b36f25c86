"""Dask backend on multiple-choice X (N items, K candidates, d features), on a LocalCluster of 2
processes: the local engine's results, bitwise.

a. ``score_phase_dask`` gives ``_local.score_phase``'s scorers (coefficients, iterations,
   evaluations) and counts bitwise, with and without position biases, on a 3-D ``.npy`` read
   by the workers in uneven chunks, on an active subset, with summed candidate probabilities;
   the workers hold whole items in whole reduction groups of items, and the centre is the
   local scan's.
b. ``aflite(..., backend="dask")`` keeps, removes and scores exactly the local items (an
   ndarray, a memmap and a dask array chunked along every axis; with and without position
   biases); with groups and the permutation null too, and a checkpoint it writes is accepted
   by a local run.
c. ``aflite-fast filter --scheduler`` on a 3-D ``.npy`` keeps the local run's items.
d. A list of 3-D shards is refused naming what the backend takes.
"""
import json
import os

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

from aflite_fast import aflite
from aflite_fast.cli import main  # noqa: E402
from aflite_fast.core.layout import reduction_group_rows
from aflite_fast.core.solver import SolverOptions
from aflite_fast.io.inputs import scan_rows
from aflite_fast.phase import local as _local
from aflite_fast.phase import partitions
from aflite_fast.phase.dask_backend import DaskEmbeddings, scan_rows_dask, score_phase_dask

# several reduction groups even on the small X of these tests
pytestmark = pytest.mark.usefixtures("small_reduction_groups")


@pytest.fixture
def seed():
    return int(os.environ.get("AFLITE_FAST_TEST_SEED", "0"))


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def make_items(rng, n, K, d):
    """Items whose right candidate scores higher along a random direction (skewed feature
    scales, a shared offset); a third of them carry an artifact on feature 0, and the right
    answer sits at position 0 more often than chance (something position biases learn)."""
    scale = (1.0 + np.arange(d)) ** -0.5
    X = (rng.standard_normal((n, K, d)) * scale + 1.5).astype(np.float32)
    logits = X.astype(np.float64) @ (rng.standard_normal(d) / scale) * 0.3 + 2.0 * rng.gumbel(size=(n, K))
    logits[:, 0] += 0.5
    y = logits.argmax(axis=1)
    marked = np.flatnonzero(rng.random(n) < 0.35)
    X[marked, y[marked], 0] += 2.0
    return X, y


N_ITEMS = 1300  # two reduction groups of 650 items: the workers hold leaves 0 and 1
RUN = dict(target_size=900, n_partitions=6, train_size=0.5, slice_size=100, tau=0.5, progress=False)


def assert_same(remote, local, phases=2):
    assert len(local.history) >= phases
    for name in ("keep", "removed", "removed_phase"):
        np.testing.assert_array_equal(getattr(remote, name), getattr(local, name))
    np.testing.assert_array_equal(remote.scores, local.scores)  # NaN where never held out, alike
    assert remote.stop_reason == local.stop_reason
    assert all(h.bytes_moved > 0 for h in remote.history)


@pytest.mark.parametrize("position_bias", [False, True])
def test_score_phase_bitwise(client, seed, tmp_path, position_bias):
    rng = np.random.default_rng([seed, 22, position_bias])
    X, y = make_items(rng, N_ITEMS, 4, 10)
    np.save(tmp_path / "X.npy", X)
    Xd = DaskEmbeddings(str(tmp_path / "X.npy"), client, chunk_rows=1001)  # 250 items a chunk
    assert Xd.shape == X.shape and Xd.ndim == 3 and Xd.group == 4 and Xd.file is not None
    assert reduction_group_rows(N_ITEMS) == 650
    assert [r[1:5] for r in Xd.ranges] == [(0, 1, 0, 650), (1, 64, 650, N_ITEMS)]  # whole items
    assert all(o % 4 == 0 for o in Xd.offsets)
    center = scan_rows(X.reshape(-1, X.shape[2])).astype(np.float32)
    np.testing.assert_array_equal(scan_rows_dask(Xd).astype(np.float32), center)

    codes = y.astype(np.int32)
    active = np.sort(rng.choice(N_ITEMS, size=1150, replace=False)).astype(np.int64)
    train_pos = partitions.partition_train_positions(5, 0, active.size, 400, 6)
    D = X.shape[2] + (3 if position_bias else 1)
    warm = rng.standard_normal((6, D, 1)) * 0.01
    common = dict(n_classes=4, C=0.5, options=SolverOptions(tol=1e-4, max_iter=200), warm_coef=warm,
                  position_bias=position_bias, loss="gce" if position_bias else "ce")
    proba_local = np.zeros((active.size, 4))
    proba_dask = np.zeros((active.size, 4))
    local = _local.score_phase(X, codes, active, center, train_pos, proba_sum=proba_local, **common)
    remote = score_phase_dask(Xd, codes, active, center, train_pos, proba_sum=proba_dask, **common)
    assert remote.coef.shape == (6, D, 1)
    np.testing.assert_array_equal(remote.coef, local.coef)
    np.testing.assert_array_equal(remote.n_iter, local.n_iter)
    np.testing.assert_array_equal(remote.n_eval, local.n_eval)
    for name in ("seen", "correct", "prob_label"):
        np.testing.assert_array_equal(getattr(remote, name), getattr(local, name))
    np.testing.assert_array_equal(proba_dask, proba_local)
    assert remote.seen.sum() > 0 and 0 < remote.correct.sum() < remote.seen.sum()
    assert np.all(remote.coef[:, X.shape[2]:] != warm[:, X.shape[2]:]) == position_bias  # biases learned
    moved = remote.bytes_moved
    assert moved["predict_weights"] == 2 * D * 6 * 4
    assert moved["counts_back"] == active.size * (1 + 1 + 8 + 4 * 8)


@pytest.mark.parametrize("position_bias", [False, True])
def test_aflite_dask_matches_local(client, seed, tmp_path, position_bias):
    rng = np.random.default_rng([seed, 23])
    X, y = make_items(rng, N_ITEMS, 4, 8)
    kw = dict(RUN, random_state=seed + 1, position_bias=position_bias)
    local = aflite(X, y, **kw)
    assert_same(aflite(X, y, backend="dask", client=client, **kw), local)
    np.save(tmp_path / "X.npy", X)
    assert_same(aflite(np.load(tmp_path / "X.npy", mmap_mode="r"), y, backend="dask", client=client, **kw), local)
    if not position_bias:
        da = pytest.importorskip("dask.array")
        assert_same(aflite(da.from_array(X, chunks=(333, 3, 5)), y, backend="dask", client=client, **kw), local)


def test_groups_null_and_checkpoint(client, seed, tmp_path):
    rng = np.random.default_rng([seed, 24])
    X, y = make_items(rng, N_ITEMS, 3, 8)
    groups = rng.integers(0, 450, size=N_ITEMS)
    np.save(tmp_path / "X.npy", X)
    kw = dict(RUN, random_state=seed + 2, groups=groups, null="permutation", n_null=1, position_bias=True)
    local = aflite(X, y, **kw)
    ckpt = tmp_path / "run.npz"
    remote = aflite(str(tmp_path / "X.npy"), y, backend="dask", client=client, checkpoint=ckpt, **kw)
    assert_same(remote, local)
    assert [h.null_above_tau for h in remote.history] == [h.null_above_tau for h in local.history]
    # the fingerprint of X taken on the workers (its candidate rows) is the local one
    again = aflite(X, y, checkpoint=ckpt, **kw)
    assert again.resumed_from == len(local.history)
    np.testing.assert_array_equal(again.removed, local.removed)


def test_cli_filter_on_the_cluster(client, seed, tmp_path):
    rng = np.random.default_rng([seed, 25])
    X, y = make_items(rng, N_ITEMS, 4, 8)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    args = ["--target-size", "900", "--n-partitions", "6", "--train-size", "0.5", "--slice-size", "100",
            "--tau", "0.5", "--seed", "3", "--quiet", "--position-bias"]
    for name, extra in (("local", []), ("dask", ["--scheduler", client.scheduler.address])):
        assert main(["filter", str(tmp_path / "X.npy"), str(tmp_path / "y.npy"), "--out", str(tmp_path / name),
                     *args, *extra]) == 0
    keep = {name: np.load(tmp_path / name / "keep.npy") for name in ("local", "dask")}
    assert keep["local"].size < N_ITEMS
    np.testing.assert_array_equal(keep["dask"], keep["local"])
    report = json.loads((tmp_path / "dask" / "report.json").read_text())
    assert report["n_candidates"] == 4 and all(h["bytes_moved"] > 0 for h in report["history"])


def test_three_d_shards_are_refused(client, tmp_path):
    X = np.zeros((10, 3, 4), dtype=np.float32)
    paths = [tmp_path / "a.npy", tmp_path / "b.npy"]
    for p in paths:
        np.save(p, X)
    with pytest.raises(ValueError, match="multiple-choice X .* as an ndarray, a memory map, one .npy/.npz file"):
        aflite(paths, np.zeros(20, int), backend="dask", client=client, **dict(RUN, target_size=10))
