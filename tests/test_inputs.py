"""Embeddings as a new user has them (issue 13): each case through the API and the command line.

a. A 0-byte file: a ValueError saying the file is empty; the CLI exits 2 with one line.
b. ``.npz``: an archive of one array is read (memory-mapped when stored uncompressed, read
   into memory when compressed) and gives the ``.npy`` result; ``FILE.npz:KEY`` picks one of
   several; several without a key, or a missing key, is an error listing the keys.
c. float64 values beyond float32's range: a ValueError naming the first bad row, raised by
   the validation scan (no RuntimeWarning on the way, which the tests turn into errors), by
   every entry point and by ``RobustLogisticRegression.predict``.
d. Big-endian floats and integer embeddings give the result of the same values as native
   float32 (bitwise: the same keep and scores), also from files; NaN in a big-endian file is
   still found and named.
e. They are converted chunk by chunk: the scan and the gathers of a file allocate a bounded
   amount (traced with tracemalloc), not a converted copy of the file.
f. Other shapes of X: Fortran-ordered files, sparse matrices, object arrays, ragged lists.
"""
import itertools
import tracemalloc
import warnings

import numpy as np
import pytest
import scipy.sparse

from aflite_fast import AFLite, RobustLogisticRegression, aflite, oof_predict_proba, predictability
from aflite_fast.cli import main
from aflite_fast.io import inputs
from aflite_fast.io.rowsource import FileRows

N, D = 240, 6
_RUNS = itertools.count()
KW = dict(target_size=120, n_partitions=4, train_size=100, slice_size=40, tau=0.6, random_state=0,
          n_jobs=1, progress=False)
CLI_ARGS = ["--target-size", "120", "--partitions", "4", "--train-size", "100", "--slice-size", "40",
            "--tau", "0.6", "--seed", "0", "--threads", "1", "--quiet"]


@pytest.fixture
def problem(seed, make_problem):
    X, y = make_problem(np.random.default_rng([seed, 13]), N, D, 3, signal=1.0)
    return X, y


def run_cli(tmp_path, emb, labels, capsys, *extra):
    """(exit code, stderr lines, output dir) of ``filter`` writing to a fresh directory."""
    out = tmp_path / f"out{next(_RUNS)}"
    code = main(["filter", str(emb), str(labels), "--out", str(out), *CLI_ARGS, *extra])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    return code, err, out


def assert_cli_error(tmp_path, emb, labels, capsys, match, *extra):
    code, err, out = run_cli(tmp_path, emb, labels, capsys, *extra)
    assert code == 2 and len(err) == 1, err
    assert match in err[0]
    assert not out.exists()


def assert_same_run(a, b):
    np.testing.assert_array_equal(a.keep, b.keep)
    np.testing.assert_array_equal(a.scores, b.scores)


# --------------------------------------------------------------------------- a. 0-byte file

def test_empty_file(tmp_path, problem, capsys):
    X, y = problem
    empty = tmp_path / "emb.npy"
    empty.write_bytes(b"")
    np.save(tmp_path / "y.npy", y)
    with pytest.raises(ValueError, match=r"cannot read embeddings from .*emb\.npy'?: the file is empty \(0 bytes\)"):
        aflite(str(empty), y, **KW)
    assert_cli_error(tmp_path, empty, tmp_path / "y.npy", capsys, "the file is empty (0 bytes)")


def test_not_a_numpy_file(tmp_path, problem, capsys):
    X, y = problem
    text = tmp_path / "emb.csv"
    text.write_text("1.0,2.0\n3.0,4.0\n")
    with pytest.raises(ValueError, match=r"not a \.npy or \.npz file"):
        predictability(str(text), y, n_partitions=4, train_size=100)
    np.save(tmp_path / "y.npy", y)
    assert_cli_error(tmp_path, text, tmp_path / "y.npy", capsys, "not a .npy or .npz file")


# --------------------------------------------------------------------------- b. .npz

def test_npz_single_array_matches_npy(tmp_path, problem, capsys):
    X, y = problem
    np.save(tmp_path / "emb.npy", X)
    np.savez(tmp_path / "one.npz", embeddings=X)
    np.savez_compressed(tmp_path / "packed.npz", embeddings=X)
    mapped = inputs.open_embeddings(tmp_path / "one.npz")
    assert isinstance(mapped, FileRows) and mapped.offset > 0  # stored: read in place, not loaded
    np.testing.assert_array_equal(mapped, X)
    ref = aflite(str(tmp_path / "emb.npy"), y, **KW)
    for name in ("one.npz", "packed.npz"):
        assert_same_run(aflite(str(tmp_path / name), y, **KW), ref)
    np.save(tmp_path / "y.npy", y)
    code, err, out = run_cli(tmp_path, tmp_path / "one.npz", tmp_path / "y.npy", capsys)
    assert code == 0 and err == []
    np.testing.assert_array_equal(np.load(out / "keep.npy"), ref.keep)


def test_npz_key_chooses_among_several(tmp_path, problem, capsys):
    X, y = problem
    archive = tmp_path / "many.npz"
    np.savez(archive, train=X, other=X[:10] * 2)
    ref = aflite(X, y, **KW)
    assert_same_run(aflite(f"{archive}:train", y, **KW), ref)
    oof = oof_predict_proba(f"{archive}:train", y, cv=3, random_state=0, n_jobs=1)
    np.testing.assert_array_equal(oof, oof_predict_proba(X, y, cv=3, random_state=0, n_jobs=1))
    with pytest.raises(ValueError, match=r"holds 2 arrays \(other, train\); choose one as .*many\.npz:KEY"):
        aflite(str(archive), y, **KW)
    with pytest.raises(ValueError, match=r"has no array 'test'; it holds other, train"):
        aflite(f"{archive}:test", y, **KW)
    np.save(tmp_path / "y.npy", y)
    code, err, out = run_cli(tmp_path, f"{archive}:train", tmp_path / "y.npy", capsys)
    assert code == 0 and err == []
    np.testing.assert_array_equal(np.load(out / "keep.npy"), ref.keep)
    assert_cli_error(tmp_path, archive, tmp_path / "y.npy", capsys, "holds 2 arrays (other, train)")
    assert_cli_error(tmp_path, f"{archive}:test", tmp_path / "y.npy", capsys, "has no array 'test'")


def test_npz_bad_members(tmp_path):
    np.savez(tmp_path / "obj.npz", a=np.array([{"x": 1}, 2], dtype=object))
    with pytest.raises(ValueError, match="Python objects"):
        inputs.open_embeddings(tmp_path / "obj.npz")
    np.savez(tmp_path / "cut.npz", a=np.ones((50, 4)))
    raw = (tmp_path / "cut.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(raw[:300])  # the zip directory is gone
    with pytest.raises(ValueError, match="cannot read embeddings"):
        inputs.open_embeddings(tmp_path / "cut.npz")
    np.save(tmp_path / "plain.npy", np.ones((3, 2)))
    with pytest.raises(ValueError, match="not one"):
        inputs.open_embeddings(f"{tmp_path / 'plain.npy'}:a")


# --------------------------------------------------------------------------- c. beyond float32

@pytest.fixture
def huge(problem):
    X, y = problem
    X = X.astype(np.float64)
    X[17, 2] = 4e38
    X[90, 0] = -1e300
    return X, y


BEYOND = r"X holds values beyond the float32 range \(\|x\| > 3\.4e38\), first at row 17"


def test_beyond_float32_is_an_error_naming_the_row(huge, tmp_path, capsys):
    X, y = huge
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the scan must not warn its way through an overflow
        with pytest.raises(ValueError, match=BEYOND):
            aflite(X, y, **KW)
        with pytest.raises(ValueError, match=BEYOND):
            predictability(X, y, n_partitions=4, train_size=100)
        with pytest.raises(ValueError, match=BEYOND):
            oof_predict_proba(X, y, cv=3)
        with pytest.raises(ValueError, match=BEYOND):
            AFLite(**KW).fit_resample(X, y)
        with pytest.raises(ValueError, match=BEYOND):
            RobustLogisticRegression(n_jobs=1).fit(X, y)
        fitted = RobustLogisticRegression(n_jobs=1).fit(X[20:80], y[20:80])
        with pytest.raises(ValueError, match=BEYOND):
            fitted.predict(X)
    ok = X.copy()
    ok[17, 2] = np.finfo(np.float32).max  # the largest float32 is still accepted
    ok[90, 0] = -ok[17, 2]
    inputs.scan_rows(ok)
    np.save(tmp_path / "huge.npy", X)
    np.save(tmp_path / "y.npy", y)
    assert_cli_error(tmp_path, tmp_path / "huge.npy", tmp_path / "y.npy", capsys,
                     "beyond the float32 range (|x| > 3.4e38), first at row 17")


def test_nan_before_a_huge_value_is_named_as_nan(huge):
    X, y = huge
    X[5, 1] = np.nan
    with pytest.raises(ValueError, match=r"X contains NaN or inf \(first at row 5\)"):
        aflite(X, y, **KW)


# --------------------------------------------------------------------------- d. byte order, integers

@pytest.mark.parametrize("dtype", [">f4", ">f2", ">f8"])
def test_big_endian_gives_the_native_result(problem, readonly_memmap, dtype):
    X, y = problem
    native = X.astype(np.dtype(dtype).newbyteorder("="))
    swapped = readonly_memmap(native.astype(dtype))
    assert swapped.dtype.byteorder == ">"
    assert_same_run(aflite(swapped, y, **KW), aflite(native, y, **KW))


@pytest.mark.parametrize("dtype", [np.int16, np.uint8, np.int64, ">i4", np.bool_])
def test_integer_embeddings_give_the_float32_result(problem, readonly_memmap, dtype):
    X, y = problem
    ints = np.round((X - X.min()) * 40).astype(dtype)  # non-negative, so uint8 holds it too
    assert_same_run(aflite(readonly_memmap(ints), y, **KW), aflite(ints.astype(np.float32), y, **KW))


def test_big_endian_and_integer_files_on_the_command_line(problem, tmp_path, capsys):
    X, y = problem
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "native.npy", X)
    np.save(tmp_path / "big.npy", X.astype(">f4"))
    ints = np.round(X * 100).astype(np.int32)
    np.save(tmp_path / "int.npy", ints)
    np.save(tmp_path / "int_as_float.npy", ints.astype(np.float32))
    keeps = {}
    for name in ("native", "big", "int", "int_as_float"):
        code, err, out = run_cli(tmp_path, tmp_path / f"{name}.npy", tmp_path / "y.npy", capsys)
        assert code == 0 and err == []
        keeps[name] = np.load(out / "keep.npy"), np.load(out / "scores.npy")
    for a, b in (("big", "native"), ("int", "int_as_float")):
        np.testing.assert_array_equal(keeps[a][0], keeps[b][0])
        np.testing.assert_array_equal(keeps[a][1], keeps[b][1])


def test_nan_in_big_endian_file_is_found(problem, readonly_memmap, tmp_path, capsys):
    X, y = problem
    bad = X.astype(">f4")
    bad[201, 3] = np.inf
    with pytest.raises(ValueError, match=r"NaN or inf \(first at row 201\)"):
        aflite(readonly_memmap(bad), y, **KW)
    np.save(tmp_path / "bad.npy", bad)
    np.save(tmp_path / "y.npy", y)
    assert_cli_error(tmp_path, tmp_path / "bad.npy", tmp_path / "y.npy", capsys, "first at row 201")


def test_robust_lr_on_big_endian_and_integers(problem):
    X, y = problem
    ref = RobustLogisticRegression(n_jobs=1).fit(X, y)
    for Xo in (X.astype(">f4"), np.round(X * 100).astype(np.int16)):
        Xf = np.asarray(Xo, dtype=np.float32)
        np.testing.assert_array_equal(RobustLogisticRegression(n_jobs=1).fit(Xo, y).predict_proba(Xo),
                                      RobustLogisticRegression(n_jobs=1).fit(Xf, y).predict_proba(Xf))
    np.testing.assert_array_equal(ref.predict_proba(X.astype(">f4")), ref.predict_proba(X))


# --------------------------------------------------------------------------- e. chunk by chunk

@pytest.mark.parametrize("dtype", [">f4", np.int16, ">f8"])
def test_conversion_is_chunked(tmp_path, monkeypatch, dtype):
    """Scanning and gathering a big-endian or integer file allocate a chunk, not the file."""
    n, d = 32768, 64
    rng = np.random.default_rng(1)
    np.save(tmp_path / "x.npy", (rng.standard_normal((n, d)) * 100).astype(dtype))
    X = inputs.open_embeddings(tmp_path / "x.npy")
    chunk = 64 << 10
    monkeypatch.setattr(inputs, "SCAN_CHUNK_BYTES", chunk)
    rows = np.sort(rng.choice(n, size=n // 16, replace=False))  # scattered: the buffered path
    out = np.empty((rows.size, d + 1), dtype=np.float32)
    center = np.zeros(d, dtype=np.float32)
    inputs.scan_rows(X[:64])  # compile the Numba helpers outside the trace
    tracemalloc.start()
    try:
        inputs.scan_rows(X)
        scan_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        inputs.gather_rows(X, rows, center, out, chunk_bytes=chunk)
        inputs.gather_rows(X, np.arange(n // 16, dtype=np.int64), center, out, chunk_bytes=chunk)
        gather_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # a chunk plus numpy's casting buffers (a few of 8192 elements), far below a converted copy
    bound = chunk + (512 << 10)
    assert X.nbytes >= 4 * bound
    assert scan_peak < bound
    assert gather_peak < bound
    np.testing.assert_array_equal(out[:, :d], np.asarray(X[:n // 16], dtype=np.float32))


# --------------------------------------------------------------------------- f. other shapes of X

def test_fortran_ordered_file(problem, tmp_path):
    X, y = problem
    np.save(tmp_path / "f.npy", np.asfortranarray(X))
    assert inputs.open_embeddings(tmp_path / "f.npy").flags.f_contiguous
    assert_same_run(aflite(str(tmp_path / "f.npy"), y, **KW), aflite(X, y, **KW))


def test_sparse_object_and_ragged_X(problem):
    X, y = problem
    for sparse in (scipy.sparse.csr_matrix(X), scipy.sparse.csr_array(X)):  # taken (tests/test_sparse.py)
        assert aflite(sparse, y, **KW).keep.size == KW["target_size"]
        assert RobustLogisticRegression().fit(sparse, y).predict_proba(sparse).shape == (len(y), 3)
    assert_same_run(aflite(X.astype(object), y, **KW), aflite(X.astype(np.float64), y, **KW))
    bad = X.astype(object)
    bad[3, 1] = "three"
    with pytest.raises(ValueError, match="X of dtype object must hold numbers"):
        aflite(bad, y, **KW)
    with pytest.raises(ValueError, match="X cannot be read as a 2-D array"):
        aflite([[1.0, 2.0], [3.0]], [0, 1], **KW)
    with pytest.raises(ValueError, match=r"X must be 2-D .* Reshape your data"):
        aflite(X[:, 0], y, **KW)
    with pytest.raises(ValueError, match=r"0 feature\(s\)"):
        aflite(X[:, :0], y, **KW)


def test_compact_rows_moves_the_kept_rows_down_in_order():
    # the workspace's in-place compaction (compiled for float32 rows, NumPy slices otherwise):
    # row keep[i] to row i, runs of consecutive rows and isolated ones, empty and full keeps
    from aflite_fast.phase.gather import compact_rows

    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        for _ in range(100):
            n, w = int(rng.integers(1, 60)), int(rng.integers(1, 40))
            full = rng.standard_normal((n, w)).astype(dtype)
            keep = np.sort(rng.choice(n, int(rng.integers(0, n + 1)), replace=False))
            want = full[keep].copy()
            out = compact_rows(full, keep)
            assert out is full
            np.testing.assert_array_equal(full[:keep.size], want)


def test_member_rows_and_their_scatter_follow_the_membership_matrix():
    from aflite_fast.io import _rowscan

    rng = np.random.default_rng(1)
    for n, m in ((1, 1), (37, 5), (300, 64)):
        member = (rng.random((n, m)) < 0.5).astype(np.uint8)
        mptr = np.empty(m + 1, dtype=np.int64)
        mrows = np.empty(int(member.sum()), dtype=np.int32)
        _rowscan.member_rows(member, mptr, mrows)
        for j in range(m):
            np.testing.assert_array_equal(mrows[mptr[j]:mptr[j + 1]], np.flatnonzero(member[:, j]))
        values = rng.standard_normal((mrows.size, 2))
        out = np.full((n, 2 * m), 7.0, dtype=np.float32)
        _rowscan.scatter_member_values(values, mptr, mrows, out)
        want = np.full((n, 2 * m), 7.0, dtype=np.float32)
        for j in range(m):
            want[mrows[mptr[j]:mptr[j + 1]], 2 * j:2 * j + 2] = values[mptr[j]:mptr[j + 1]]
        np.testing.assert_array_equal(out, want)
    with pytest.raises(ValueError, match="mrows holds"):
        _rowscan.member_rows(np.ones((3, 2), dtype=np.uint8), np.empty(3, dtype=np.int64), np.empty(5, dtype=np.int32))
