"""Out-of-core filtering: a read-only .npy memmap under a memory budget far below its size.

a. The same ``keep``, ``removed`` and ``scores`` as the in-memory run with a large budget,
   for float32 and float16 files, while the small budget forces many blocks of partitions
   and many prediction chunks.
b. A budget too small for the per-row arrays or for one partition is a clear MemoryError; one
   too small for the solver's preconditioner only takes a cheaper form of it (with a warning).
c. A ``.npy`` path is accepted and gives the same result.
d. ``gather_rows`` on sorted rows equals ``X[rows] - center`` whatever its scratch size.
"""
import numpy as np
import pytest

from aflite_fast import aflite
from aflite_fast.io.inputs import gather_rows
from aflite_fast.phase import local

N, D_FEAT = 8000, 128
KW = dict(target_size=7550, n_partitions=6, train_size=400, slice_size=150, tau=0.6,
          progress=False, n_jobs=1)
# bytes: the float32 file is 4.1 MB, the float16 file 2 MB; about 0.68 MB of the budget goes
# to the per-row arrays, one partition's training needs about 0.35 MB more (rows, solver
# state, the preconditioner product's packing buffer) and two about 0.73 MB; the solver's
# preconditioner needs about 0.53 MB for a moment before training (preconditioner.phase_preconditioner_bytes),
# its diagonal form about 0.4 MB.
SMALL = 1_300_000


@pytest.fixture
def problem(seed, make_problem):
    rng = np.random.default_rng(seed)
    return make_problem(rng, N, D_FEAT, 3, signal=0.5)


@pytest.fixture
def phase_log(monkeypatch):
    """Records (n_blocks, n_chunks) of every phase scored through the engine."""
    log = []
    real = local.score_phase

    def spy(*args, **kwargs):
        res = real(*args, **kwargs)
        log.append((res.n_blocks, res.n_chunks))
        return res

    monkeypatch.setattr(local, "score_phase", spy)
    return log


def _same(a, b):
    np.testing.assert_array_equal(a.keep, b.keep)
    np.testing.assert_array_equal(a.removed, b.removed)
    np.testing.assert_array_equal(a.removed_phase, b.removed_phase)
    np.testing.assert_array_equal(a.scores, b.scores)  # bitwise, NaN where never scored


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_memmap_small_budget_matches_in_memory(problem, readonly_memmap, phase_log, seed, dtype):
    X, y = problem
    X = X.astype(dtype)
    mm = readonly_memmap(X)
    assert mm.nbytes > 1.5 * SMALL
    ref = aflite(np.array(X), y, max_memory="4GB", random_state=seed, **KW)
    ref_log = list(phase_log)
    phase_log.clear()
    out = aflite(mm, y, max_memory=SMALL, random_state=seed, **KW)
    assert len(out.history) >= 2 and out.removed.size > 0
    # one block; prediction in one chunk of the block's gathered rows plus one of the others
    assert all(b == 1 and c <= 2 for b, c in ref_log)
    # the small budget really splits the work
    assert all(b == 6 and c >= 5 for b, c in phase_log), phase_log
    _same(ref, out)


def test_npy_path_matches_ndarray(problem, tmp_path, seed):
    X, y = problem
    path = tmp_path / "emb.npy"
    np.save(path, X)
    _same(aflite(X, y, random_state=seed, **KW),
          aflite(str(path), y, max_memory="2MB", random_state=seed, **KW))


def test_budget_below_one_partition_is_memory_error(problem, readonly_memmap, seed):
    X, y = problem
    mm = readonly_memmap(X)
    # covers the per-row arrays (about 0.68 MB here) but not one partition's 400 rows + solver
    with pytest.raises(MemoryError, match="too small to train one partition"):
        aflite(mm, y, max_memory=900_000, random_state=seed, **KW)
    with pytest.raises(MemoryError, match="per-row arrays"):
        aflite(mm, y, max_memory=300_000, random_state=seed, **KW)


def test_budget_below_the_preconditioner_falls_back_to_a_cheaper_form(problem, readonly_memmap, seed):
    X, y = problem
    # covers one partition but not the dense preconditioner's moment (about 1.2 MB with the
    # arrays): the run goes on with the diagonal form, never a MemoryError for it alone
    with pytest.warns(RuntimeWarning, match="using the diagonal form"):
        small = aflite(readonly_memmap(X), y, max_memory=1_100_000, random_state=seed, **KW)
    full = aflite(X, y, random_state=seed, **KW)
    # the same optimum by another path: the same rows kept but for a handful near a tie
    assert small.keep.size == full.keep.size
    assert np.intersect1d(small.keep, full.keep).size >= full.keep.size - 5
    assert all(h.solver_status["converged"] == KW["n_partitions"] for h in small.history)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("chunk_bytes", [None, 1, 1000])
def test_gather_rows_bounded_pieces(readonly_memmap, seed, dtype, chunk_bytes):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((900, 13)).astype(dtype)
    mm = readonly_memmap(X)
    center = rng.standard_normal(13).astype(np.float32)
    cases = [np.arange(50, 700), np.sort(rng.choice(900, 311, replace=False)),
             np.r_[np.arange(0, 40), np.arange(41, 900)], np.empty(0, dtype=np.int64)]
    for rows in cases:
        got = gather_rows(mm, rows, center, np.empty((rows.size, 14), np.float32), chunk_bytes)
        want = np.empty((rows.size, 14), np.float32)
        np.subtract(X[rows], center, out=want[:, :13], casting="unsafe")
        want[:, 13] = 1.0
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("n_threads", [2, 3])
def test_gather_rows_threads_write_the_same_rows(readonly_memmap, seed, dtype, n_threads):
    """Threads read contiguous ranges of the rows (with their share of the pieces' buffer):
    the same values as one thread, for arrays and memory maps, contiguous runs and picked
    rows, in rows padded as the kernel's."""
    from aflite_fast.core import layout
    from aflite_fast.runtime.threads import MIN_ROWS_PER_THREAD

    rng = np.random.default_rng(seed)
    n = 3 * MIN_ROWS_PER_THREAD + 17
    X = rng.standard_normal((n, 21)).astype(dtype)
    center = rng.standard_normal(21).astype(np.float32)
    cases = [np.arange(n), np.sort(rng.choice(n, n - 900, replace=False)), np.arange(5, 4000)]
    for source in (X, readonly_memmap(X)):
        for rows in cases:
            want = gather_rows(source, rows, center, layout.empty_rows(rows.size, 22), 4096)
            buf = layout.row_buffer(rows.size, 22)
            buf[:] = np.nan
            out = layout.empty_rows(rows.size, 22, buf, n_threads=n_threads)
            got = gather_rows(source, rows, center, out, 4096, n_threads=n_threads)
            np.testing.assert_array_equal(got, want)
            assert np.all(layout.padded_rows(buf, rows.size, 22)[:, 22:] == 0)
