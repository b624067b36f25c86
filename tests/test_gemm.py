"""Tests of the deterministic GEMM ``aflite_fast.core._kernel.sgemm`` (csrc/afl_gemm.h).

a. Values: C = op(A) @ B agrees with a float64 NumPy product within the float32 error bound
   of a blocked sum, for both transposes, odd shapes (1, primes, wider than a micro-tile,
   more rows than one thread tile) and irregular or empty K-blocks.
b. Determinism: bitwise identical with 1 and 2 threads; bitwise identical when the K-rows
   whose row of B is zero are removed, as long as the block boundaries are kept (the kernel
   relies on this so a model's gradient does not depend on the models sharing its block).
c. Accumulate mode: C += op(A) @ B, where C's old value is summed first; splitting the
   K-blocks over successive accumulating calls is bitwise the same as one call.
"""
import numpy as np
import pytest

from aflite_fast.core import _kernel

EPS32 = np.finfo(np.float32).eps


def _sgemm(A, B, kb, *, trans_a=False, n_threads=1, C=None):
    M = A.shape[1] if trans_a else A.shape[0]
    accumulate = C is not None
    out = np.array(C, dtype=np.float32, copy=True) if accumulate else np.full((M, B.shape[1]), np.nan, np.float32)
    _kernel.sgemm(trans_a, A, B, out, np.asarray(kb, dtype=np.int64), accumulate, n_threads)
    return out


def _bound(A, B, kb, trans_a, C0=None):
    """Error bound of a sum computed block by block in float32 (Higham, eq. 3.5, with a margin).

    Within a block of length kc the error is at most kc * eps * sum |a||b|; the block sums are
    then added in float32 once more per block.
    """
    op = A.T if trans_a else A
    absprod = np.abs(op.astype(np.float64)) @ np.abs(B.astype(np.float64))
    if C0 is not None:
        absprod = absprod + np.abs(C0)
    kb = np.asarray(kb)
    steps = np.diff(kb).max(initial=0) + len(kb) + 1
    return 2 * steps * EPS32 * absprod + 1e-30


def _rand(rng, *shape):
    # varied magnitudes, so relative errors of different rows are not all alike
    return (rng.standard_normal(shape) * rng.uniform(0.1, 10, size=shape[-1])).astype(np.float32)


SHAPES = [(1, 1, 1), (1, 7, 3), (5, 1, 9), (7, 13, 5), (37, 53, 19), (13, 70, 129), (401, 33, 300)]


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("M,N,K", SHAPES)
def test_matches_float64_reference(seed, trans_a, M, N, K):
    rng = np.random.default_rng([seed, M, N, K, trans_a])
    A = _rand(rng, K, M) if trans_a else _rand(rng, M, K)
    B = _rand(rng, K, N)
    ref = (A.T if trans_a else A).astype(np.float64) @ B.astype(np.float64)
    # one block, regular blocks, and irregular blocks with an empty one in the middle
    cuts = sorted(set(rng.integers(0, K + 1, size=3).tolist()))
    for kb in ([0, K], list(range(0, K, 16)) + [K], [0] + cuts + cuts[-1:] + [K]):
        kb = sorted(kb)  # cuts may repeat 0 or K: an empty first or last block
        got = _sgemm(A, B, kb, trans_a=trans_a)
        assert got.shape == ref.shape
        assert np.all(np.isfinite(got))
        err = np.abs(got - ref)
        assert np.all(err <= _bound(A, B, kb, trans_a)), f"kb={kb}: max error {err.max():.3g}"
        # the bound is not vacuous: float32 rounding is far smaller than the values
        assert err.max() <= 1e-5 * np.abs(ref).max() + 1e-30


def test_shape_mismatch_raises():
    A = np.ones((4, 5), np.float32)
    B = np.ones((6, 3), np.float32)
    with pytest.raises(ValueError, match="shapes"):
        _sgemm(A, B, [0, 5])
    with pytest.raises(ValueError, match="shapes"):
        _sgemm(A, np.ones((5, 3), np.float32), [0, 4])  # blocks do not end at K


@pytest.mark.parametrize("trans_a", [False, True])
def test_bitwise_same_with_one_and_two_threads(seed, trans_a):
    rng = np.random.default_rng([seed, 1, trans_a])
    M, N, K = 517, 45, 700  # several row tiles, so both threads get work
    A = _rand(rng, K, M) if trans_a else _rand(rng, M, K)
    B = _rand(rng, K, N)
    kb = np.append(np.arange(0, K, 256), K)
    one = _sgemm(A, B, kb, trans_a=trans_a, n_threads=1)
    two = _sgemm(A, B, kb, trans_a=trans_a, n_threads=2)
    many = _sgemm(A, B, kb, trans_a=trans_a, n_threads=7)
    assert np.array_equal(one.view(np.uint32), two.view(np.uint32))
    assert np.array_equal(one.view(np.uint32), many.view(np.uint32))


@pytest.mark.parametrize("trans_a", [False, True])
def test_k_spanning_several_packing_chunks(seed, trans_a):
    """B is packed a chunk of K-blocks at a time (``gemm_pack_bytes``); a K long enough for
    several chunks, with a block that straddles where a chunk would end, gives the float64
    product within the bound and the same bits with 1 and 2 threads.  N = 30 columns: wider
    than the narrow gradient path (which packs nothing), padded to 32 on every ISA."""
    rng = np.random.default_rng([seed, 5, trans_a])
    M, N = 29, 30
    assert _kernel.gemm_pack_buffer_bytes(trans_a, N, 10**6, 256) == _kernel.gemm_pack_bytes()
    K = 3 * _kernel.gemm_pack_bytes() // (4 * 32) + 1000  # more than 3 chunks
    A = _rand(rng, K, M) if trans_a else _rand(rng, M, K)
    B = _rand(rng, K, N)
    kb = np.unique(np.concatenate((np.arange(0, K, 256), [K], [K // 3 + 7, K // 3 + 9000])))
    one = _sgemm(A, B, kb, trans_a=trans_a, n_threads=1)
    two = _sgemm(A, B, kb, trans_a=trans_a, n_threads=2)
    assert np.array_equal(one.view(np.uint32), two.view(np.uint32))
    ref = (A.T if trans_a else A).astype(np.float64) @ B.astype(np.float64)
    assert np.all(np.abs(one - ref) <= _bound(A, B, kb, trans_a))


@pytest.mark.parametrize("trans_a", [False, True])
def test_columns_do_not_depend_on_the_other_columns(seed, trans_a):
    """Products of up to 28 columns with op(A) = A^T take the GEMM's narrow path (registers
    hold a strip of every column), wider ones the general path; a column is the same bits
    whichever path computes it and whatever sits beside it, also when accumulating."""
    rng = np.random.default_rng([seed, 6, trans_a])
    M, K = 203, 700
    A = _rand(rng, K, M) if trans_a else _rand(rng, M, K)
    B = _rand(rng, K, 64)
    C0 = _rand(rng, M, 64)
    kb = np.append(np.arange(0, K, 256), K)
    wide = _sgemm(A, B, kb, trans_a=trans_a, n_threads=2)
    wide_acc = _sgemm(A, B, kb, trans_a=trans_a, n_threads=2, C=C0)
    for cols in (slice(0, 1), slice(3, 16), slice(10, 35), slice(30, 58)):
        Bc = np.ascontiguousarray(B[:, cols])
        narrow = _sgemm(A, Bc, kb, trans_a=trans_a, n_threads=2)
        assert np.array_equal(narrow.view(np.uint32), wide[:, cols].view(np.uint32))
        narrow_acc = _sgemm(A, Bc, kb, trans_a=trans_a, n_threads=1, C=C0[:, cols])
        assert np.array_equal(narrow_acc.view(np.uint32), wide_acc[:, cols].view(np.uint32))


def _kept_blocks(kb, keep):
    """Block boundaries after removing K-rows: each old block keeps its own rows (maybe none)."""
    pos = np.concatenate(([0], np.cumsum(keep)))
    return pos[np.asarray(kb)]


@pytest.mark.parametrize("trans_a", [True, False])
@pytest.mark.parametrize("zero_share", [0.3, 0.9])
def test_bitwise_same_without_zero_rows_of_b(seed, trans_a, zero_share):
    """Rows of the K dimension whose B-row is zero add exact zeros, so removing them (with the
    same grouping into blocks) changes no bit.  ``trans_a=True`` is the gradient product
    X^T G of the training kernel, where non-member rows of G are zero."""
    rng = np.random.default_rng([seed, 2, trans_a, int(zero_share * 10)])
    M, N, K = 61, 37, 1100
    A = _rand(rng, K, M) if trans_a else _rand(rng, M, K)
    B = _rand(rng, K, N)
    zero = rng.random(K) < zero_share
    zero[256:512] = True  # one whole block empties, the case an empty block must handle
    B[zero] = 0.0
    kb = np.append(np.arange(0, K, 256), K)
    full = _sgemm(A, B, kb, trans_a=trans_a)
    keep = ~zero
    A_small = np.ascontiguousarray(A[keep] if trans_a else A[:, keep])
    small = _sgemm(A_small, np.ascontiguousarray(B[keep]), _kept_blocks(kb, keep), trans_a=trans_a)
    assert np.array_equal(full.view(np.uint32), small.view(np.uint32))
    # and the grouping matters: without it the result is generally different, so the test
    # above would catch a kernel that ignored the caller's blocks
    regrouped = _sgemm(A_small, np.ascontiguousarray(B[keep]), np.append(np.arange(0, keep.sum(), 256), keep.sum()),
                       trans_a=trans_a)
    assert not np.array_equal(full.view(np.uint32), regrouped.view(np.uint32))


@pytest.mark.parametrize("trans_a", [False, True])
def test_accumulate(seed, trans_a):
    rng = np.random.default_rng([seed, 3, trans_a])
    M, N, K = 45, 29, 300
    A = _rand(rng, K, M) if trans_a else _rand(rng, M, K)
    B = _rand(rng, K, N)
    C0 = rng.standard_normal((M, N)).astype(np.float32) * 50
    kb = [0, 100, 256, K]
    got = _sgemm(A, B, kb, trans_a=trans_a, C=C0)
    ref = C0.astype(np.float64) + (A.T if trans_a else A).astype(np.float64) @ B.astype(np.float64)
    assert np.all(np.abs(got - ref) <= _bound(A, B, kb, trans_a, C0))
    # C's old value is "block -1": the same as adding the blocks one accumulating call at a time
    step = C0.copy()
    for k0, k1 in zip(kb[:-1], kb[1:]):
        A_part = np.ascontiguousarray(A[k0:k1] if trans_a else A[:, k0:k1])
        step = _sgemm(A_part, np.ascontiguousarray(B[k0:k1]), [0, k1 - k0], trans_a=trans_a, C=step)
    assert np.array_equal(got.view(np.uint32), step.view(np.uint32))
    # accumulating onto zeros is the plain product, bit for bit
    plain = _sgemm(A, B, kb, trans_a=trans_a)
    onto_zero = _sgemm(A, B, kb, trans_a=trans_a, C=np.zeros((M, N), np.float32))
    assert np.array_equal(plain, onto_zero)
    # with K = 0 the product is empty: plain mode writes zeros, accumulate leaves C alone
    empty = np.empty((0, M) if trans_a else (M, 0), np.float32)
    assert np.array_equal(_sgemm(empty, np.empty((0, N), np.float32), [0], trans_a=trans_a, C=C0), C0)
    assert np.array_equal(_sgemm(empty, np.empty((0, N), np.float32), [0], trans_a=trans_a), np.zeros((M, N)))


@pytest.mark.parametrize("M", [1, 7, 31, 255, 256, 257, 600])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_gram_is_bitwise_the_full_product(M, n_threads):
    """``gram`` computes the panels on and below the diagonal and mirrors them: bitwise the
    full ``sgemm(True, A, A)``, symmetric, for widths around the panel width, with several
    K-blocks, and accumulating over successive calls as the full product does."""
    rng = np.random.default_rng(M)
    A = (rng.standard_normal((700, M)) * rng.uniform(0.1, 3.0, M)).astype(np.float32)
    kb = np.array([0, 256, 512, 700], dtype=np.int64)
    full = np.zeros((M, M))
    _kernel.sgemm(True, A, A, full, kb, False, 1)
    half = np.full((M, M), np.nan)
    _kernel.gram(A, half, kb, False, n_threads)
    assert np.array_equal(half, full)
    assert np.array_equal(half, half.T)
    # a second chunk of rows added to both
    B = rng.standard_normal((300, M)).astype(np.float32)
    kb2 = np.array([0, 256, 300], dtype=np.int64)
    _kernel.sgemm(True, B, B, full, kb2, True, 1)
    _kernel.gram(B, half, kb2, True, n_threads)
    assert np.array_equal(half, full)
    np.testing.assert_allclose(half, A.astype(np.float64).T @ A + B.astype(np.float64).T @ B,
                               rtol=1e-4, atol=1e-3)


def test_gram_shape_mismatch_raises():
    A = np.zeros((10, 4), np.float32)
    with pytest.raises(ValueError, match="gram"):
        _kernel.gram(A, np.zeros((4, 5)), np.array([0, 10], dtype=np.int64), False, 1)
    with pytest.raises(ValueError, match="gram"):
        _kernel.gram(A, np.zeros((4, 4)), np.array([0, 9], dtype=np.int64), False, 1)
