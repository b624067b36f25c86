"""Sparse X in ``scipy.sparse.save_npz`` files larger than ``max_memory`` (docs/sparse.md, "On disk").

a. An uncompressed file is memory-mapped, never copied whole (its integer counts too); a
   compressed one is read into memory, or refused naming ``compressed=False`` when it is too
   large to decompress; a corrupt or unsupported file is one clear error.
b. A mapped file gives the bits of the in-memory matrix: rows read in memory when they fit the
   budget, and read per group of models when they do not (phase.sparse_rows), through the API
   and the command line.
c. A phase on a mapped file larger than its budget allocates about the budget, not the file.
"""
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from aflite_fast import aflite, predictability
from aflite_fast.io import sparse as sparse_io
from aflite_fast.io.inputs import open_embeddings
from aflite_fast.phase import sparse_rows


def planted(n=20_000, d=256, nnz=20, seed=0, dtype=np.float32):
    """Binary n-gram-like rows; a third of the rows carry a column that names their label."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    cols = rng.integers(3, d, size=(n, nnz))
    cue = rng.random(n) < 0.35
    cols[cue, 0] = y[cue]
    X = sp.csr_matrix((np.ones(n * nnz, dtype), cols.ravel(), np.arange(0, n * nnz + 1, nnz)), shape=(n, d))
    X.sum_duplicates()
    X.sort_indices()
    return X.astype(dtype), y


KW = dict(target_size=17_000, n_partitions=8, train_size=0.2, slice_size=1000, random_state=0, progress=False)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("npz")
    X, y = planted()
    sp.save_npz(folder / "stored.npz", X, compressed=False)
    sp.save_npz(folder / "compressed.npz", X)
    return folder, X, y


@pytest.fixture(scope="module")
def reference(files):
    _, X, y = files
    return aflite(X, y, **KW)


def spy_mapped(monkeypatch):
    calls = []
    real = sparse_rows.fit_predict_mapped

    def spy(*a, **kw):
        calls.append(kw["budget"])
        return real(*a, **kw)

    monkeypatch.setattr(sparse_rows, "fit_predict_mapped", spy)
    monkeypatch.setattr("aflite_fast.phase.sparse_local.fit_predict_mapped", spy)
    return calls


# a. ------------------------------------------------------------------------------------------

def test_stored_file_is_mapped_compressed_is_read(files):
    folder, X, _ = files
    mapped = open_embeddings(folder / "stored.npz")
    assert sparse_io.is_mapped(mapped) and mapped.data.flags.owndata is False
    read = open_embeddings(folder / "compressed.npz")
    assert not sparse_io.is_mapped(read)
    for Y in (mapped, read):
        assert Y.shape == X.shape and (Y != X).nnz == 0


def test_mapped_int64_counts_stay_in_the_file(tmp_path):
    X, y = planted(n=600, d=500, nnz=6)
    counts = X.astype(np.int64)
    counts.indices, counts.indptr = counts.indices.astype(np.int64), counts.indptr.astype(np.int64)
    sp.save_npz(tmp_path / "counts.npz", counts, compressed=False)
    mapped = open_embeddings(tmp_path / "counts.npz")
    # scipy would narrow the indices to int32 (a copy) and check_sparse convert the counts: neither happens
    assert mapped.dtype == np.int64 and mapped.indices.dtype == np.int64 and sparse_io.is_mapped(mapped)
    kw = dict(n_partitions=4, train_size=0.3, random_state=0)
    np.testing.assert_array_equal(predictability(tmp_path / "counts.npz", y, **kw).prob_label,
                                  predictability(X, y, **kw).prob_label)


def test_large_compressed_file_is_refused_naming_compressed_false(files, monkeypatch):
    folder, X, y = files
    monkeypatch.setattr(sparse_io, "compressed_limit", lambda: X.nnz * 8 - 1)
    with pytest.raises(ValueError, match=r"compressed \.npz whose arrays take .*save_npz\(path, X, compressed=False\)"):
        aflite(folder / "compressed.npz", y, **KW)
    assert sparse_io.is_mapped(open_embeddings(folder / "stored.npz"))  # the stored file is not affected


@pytest.mark.parametrize("case, message", [
    ("truncated", "File is not a zip file"),
    ("no_indices", "cannot read a sparse matrix .*indices is not a file"),
    ("bad_indptr", r"indptr has 198 entries, not rows \+ 1 = 201"),
    ("unknown_format", "cannot read a sparse matrix .* Unknown format"),
    ("data_2d", "its data, indices and indptr must be 1-D"),
    ("float_indices", r"its indices \(float64\) and indptr \(int32\) must be integers"),
    ("nan", r"has a NaN or infinite value \(row 0"),
])
def test_corrupt_or_unsupported_file_is_one_clear_error(tmp_path, case, message):
    X, y = planted(n=200, d=64, nnz=4)
    path = tmp_path / "X.npz"
    parts = dict(format=np.array("csr"), shape=np.array(X.shape), data=X.data, indices=X.indices, indptr=X.indptr)
    if case == "truncated":
        sp.save_npz(path, X, compressed=False)
        path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])
    else:
        if case == "no_indices":
            del parts["indices"]
        elif case == "bad_indptr":
            parts["indptr"] = X.indptr[:-3]
        elif case == "unknown_format":
            parts["format"] = np.array("xyz")
        elif case == "data_2d":
            parts["data"] = X.data.reshape(-1, 1)
        elif case == "float_indices":
            parts["indices"] = X.indices.astype(np.float64)
        elif case == "nan":
            parts["data"] = X.data.copy()
            parts["data"][0] = np.nan
        np.savez(path, **parts)
    with pytest.raises(ValueError, match=message):
        aflite(path, y, **dict(KW, target_size=150, slice_size=20))


# b. ------------------------------------------------------------------------------------------

def test_mapped_file_gives_the_in_memory_bits(files, reference, monkeypatch):
    folder, _, y = files
    calls = spy_mapped(monkeypatch)
    for name in ("stored.npz", "compressed.npz"):
        res = aflite(folder / name, y, **KW)
        np.testing.assert_array_equal(res.keep, reference.keep)
        np.testing.assert_array_equal(res.scores, reference.scores)
    assert calls == []  # the rows fit the default budget: read into memory


@pytest.mark.parametrize("max_memory", ["4MB", "5MB"])  # 4-8 and 2 models a group
def test_mapped_file_larger_than_the_budget_gives_the_same_bits(files, reference, monkeypatch, max_memory):
    folder, _, y = files
    calls = spy_mapped(monkeypatch)
    res = aflite(folder / "stored.npz", y, max_memory=max_memory, n_jobs=2, **KW)
    assert len(calls) >= len(res.history)  # every phase (and the chance check's) read the file per group
    assert all(h.n_blocks > 1 for h in res.history)
    np.testing.assert_array_equal(res.keep, reference.keep)
    np.testing.assert_array_equal(res.scores, reference.scores)


def test_budget_too_small_for_one_model_on_a_mapped_file(files):
    folder, _, y = files
    with pytest.raises(MemoryError, match=r"max_memory=.* is too small to train one model of a sparse phase"):
        aflite(folder / "stored.npz", y, max_memory="1.6MB", **KW)


def test_cli_on_a_mapped_file_larger_than_max_memory(files, reference, tmp_path):
    from aflite_fast.cli import main

    folder, _, y = files
    np.save(tmp_path / "y.npy", y)
    assert main(["filter", str(folder / "stored.npz"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "out"),
                 "--target-size", "17000", "--n-partitions", "8", "--train-size", "0.2", "--slice-size", "1000",
                 "--seed", "0", "--max-memory", "4MB", "--quiet"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "keep.npy"), reference.keep)


# c. ------------------------------------------------------------------------------------------

def test_phase_on_a_mapped_file_allocates_about_the_budget(tmp_path):
    from aflite_fast.io.sparse import open_npz
    from aflite_fast.phase.partitions import partition_train_positions, seed_entropy
    from aflite_fast.phase.sparse_local import score_phase_sparse

    X, y = planted(n=40_000, d=256, nnz=40, seed=1)
    sp.save_npz(tmp_path / "big.npz", X, compressed=False)
    file_bytes = (tmp_path / "big.npz").stat().st_size  # about 12.8 MB
    mapped = open_npz(tmp_path / "big.npz")
    active = np.arange(X.shape[0], dtype=np.int64)
    train_pos = partition_train_positions(seed_entropy(0), 0, X.shape[0], 2000, 4)
    budget = 4_000_000
    tracemalloc.start()
    try:
        score_phase_sparse(mapped, y.astype(np.int32), active, None, train_pos, n_classes=3, max_memory=budget)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1.25 * budget < file_bytes / 2, (peak, budget, file_bytes)


def test_mapped_phase_counts_the_solvers_thread_scratch(files, monkeypatch):
    """The groups of a mapped phase leave room for the per-thread scratch of the solver that trains
    them (Newton-CG's grows with a model's rows and columns), as the in-memory phase does."""
    folder, _, y = files
    seen = []
    real = sparse_rows.sparse_solver.newton_thread_bytes

    def huge(*a, **kw):
        seen.append(real(*a, **kw))
        return 10**12

    monkeypatch.setattr(sparse_rows.sparse_solver, "newton_thread_bytes", huge)
    with pytest.raises(MemoryError, match="max_memory"):
        aflite(folder / "stored.npz", y, max_memory="4MB", **KW)
    assert seen and all(b > 0 for b in seen)


def test_mapped_file_with_an_lbfgs_loss_gives_the_in_memory_bits(files, monkeypatch):
    """A loss Newton-CG does not solve (L-BFGS, another memory formula) on a mapped file read per
    group: the in-memory bits."""
    folder, X, y = files
    kw = dict(KW, loss="gce", target_size=18_000)
    ref = aflite(X, y, **kw)
    calls = spy_mapped(monkeypatch)
    res = aflite(folder / "stored.npz", y, max_memory="3MB", n_jobs=2, **kw)
    assert len(calls) >= len(res.history)
    np.testing.assert_array_equal(res.keep, ref.keep)
    np.testing.assert_array_equal(res.scores, ref.scores)
