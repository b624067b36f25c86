"""How rows are laid out for the kernel, and how a phase's sums are added up.

a. Row buffers: float32 rows with a trailing column of ones (the intercept), 64-byte aligned,
   padded to the member pass's stride (:func:`empty_rows`, :func:`augment_rows`).
b. Row blocks of :data:`ROW_BLOCK` positions of the active set, super-blocks of about
   :data:`SUPER_BLOCK_BYTES`, items of K candidate rows for multiple choice.
c. Reduction groups (:func:`reduction_group_rows`) and the fixed binary tree that adds their
   sums (:func:`reduction_layout`, :func:`combine_nodes`), so that processes holding whole
   groups compute partial sums that add up to the local bits.
"""
import numpy as np

from aflite_fast.core.compiled import _kernel
from aflite_fast.runtime.threads import for_row_ranges

#: Rows of the active set summed together before their sum joins the running total.  Row
#: blocks are aligned to positions in the active set (not in the block's training rows), so
#: a model's gradient does not depend on which other models share its block.
ROW_BLOCK = 512


#: Columns summed together in one block of the logits product.
COL_BLOCK = 256


#: A super-block (a run of row blocks whose gradient sums are taken slice by slice, so each
#: model's double sums of a slice stay in a core's cache) holds about this many bytes of rows.
SUPER_BLOCK_BYTES = 4 << 20


#: Leaves of the reduction tree of a phase's sums (a power of two): the rows of X form at most
#: this many groups of consecutive rows (:func:`reduction_group_rows`); a model's sums over each
#: group are added up by a fixed binary tree, so that processes holding whole groups compute
#: partial sums that add up to the same bits (``_kernel.member_eval_tree``).
REDUCE_LEAVES = 64


#: Rows of a reduction group at least (:func:`reduction_group_rows`).  Each group costs every model a
#: set of double sums (C x D each) zeroed, handed to the tree and added there; at t/N = 0.1
#: that was 17% of the member pass at N = 200,000 with 64 groups of 3,125 rows against 25 groups
#: of 8,192 (benchmarks/studies/member_rate.py).
REDUCE_MIN_ROWS = 8192


def super_blocks(positions, row_blocks, n_columns, block=ROW_BLOCK):
    """Super-block boundaries (in row blocks) for rows at ``positions`` with ``n_columns``
    float32 columns (row blocks of ``block`` positions).  A super-block is a fixed range of
    positions (whole row blocks, about :data:`SUPER_BLOCK_BYTES` of rows), so the order in
    which a model's sums are added depends on the positions and the width of the rows alone."""
    size = max(1, SUPER_BLOCK_BYTES // (4 * int(n_columns) * block)) * block
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size == 0:
        return np.array([0], dtype=np.int64)
    key = positions[row_blocks[:-1]] // size
    starts = np.flatnonzero(np.diff(key)) + 1
    return np.concatenate(([0], starts, [row_blocks.size - 1])).astype(np.int64)


def empty_rows(n_rows, n_columns, buffer=None, n_threads=1):
    """An uninitialised (n_rows, n_columns) float32 array for the kernel's rows.

    Rows are 64-byte aligned with a stride of ``_kernel.member_width(n_columns)`` floats (a
    view of a wider buffer whose padding is zero): the training pass reads whole aligned
    vectors, which measured about 1.4x faster than rows of 769 floats packed back to back.
    Values never depend on the layout.  ``buffer`` (a 1-D float32 array from
    :func:`row_buffer`) is used when it is large enough, so successive calls need not
    allocate (and the system need not zero) gigabytes again.  ``n_threads`` threads write
    the padding (and so take a new buffer's page faults) in parallel.
    """
    need = row_buffer_size(n_rows, n_columns)
    buf = buffer if buffer is not None and buffer.size >= need else np.empty(need, dtype=np.float32)
    full = padded_rows(buf, n_rows, n_columns)

    def zero_padding(a, b):
        full[a:b, n_columns:] = 0.0

    for_row_ranges(zero_padding, n_rows, n_threads)
    return full[:, :n_columns]


def padded_rows(buffer, n_rows, n_columns):
    """The (n_rows, member_width(n_columns)) view of ``buffer`` (from :func:`row_buffer`)
    whose first ``n_columns`` columns :func:`empty_rows` returns: the same rows, padding
    included, at the same addresses."""
    stride = _kernel.member_width(n_columns)
    offset = (-buffer.ctypes.data % 64) // 4
    return buffer[offset:offset + n_rows * stride].reshape(n_rows, stride)


def row_buffer_size(n_rows, n_columns):
    """Floats of a flat buffer that :func:`empty_rows` can place ``n_rows`` rows in (their
    padded stride, plus room to align the first row to 64 bytes)."""
    return n_rows * _kernel.member_width(n_columns) + 16


def row_buffer(n_rows, n_columns):
    """A flat float32 buffer that :func:`empty_rows` can place ``n_rows`` rows in."""
    return np.empty(row_buffer_size(n_rows, n_columns), dtype=np.float32)


def augment_rows(X, center=None, out=None):
    """Return float32 rows ``X - center`` with a trailing column of ones (C-contiguous).

    Centering does not move the optimum (the intercept is unpenalized and absorbs the
    shift) but removes the cancellation between a large shared offset and the intercept,
    which otherwise costs float32 logits several digits; see ``uncenter_coef``.
    """
    X = np.asarray(X)
    n, d = X.shape
    if out is None:
        out = empty_rows(n, d + 1)
    if center is None:
        out[:, :d] = X
    else:
        np.subtract(X, center, out=out[:, :d], casting="unsafe")
    out[:, d] = 1.0
    return out


def uncenter_coef(coef, center):
    """Coefficients (..., d + 1, C) for centered rows -> the same model on raw rows."""
    coef = np.array(coef, dtype=np.float64, copy=True)
    if center is not None:
        coef[..., -1, :] -= np.einsum("k,...kc->...c", np.asarray(center, np.float64), coef[..., :-1, :])
    return coef


def block_bounds(n, size):
    """Boundaries 0, size, 2 size, ..., n as int64 (at least [0, n])."""
    b = np.arange(0, n, size, dtype=np.int64)
    return np.append(b, np.int64(n)) if n > 0 else np.array([0, 0], dtype=np.int64)


def row_blocks_from_positions(positions, size=ROW_BLOCK):
    """Row-block boundaries of rows whose positions in the active set are ``positions``.

    A new block starts wherever ``positions // size`` changes, so the grouping of any
    model's rows is fixed by the active set alone.
    """
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size == 0:
        return np.array([0], dtype=np.int64)
    key = positions // size
    starts = np.flatnonzero(np.diff(key)) + 1
    return np.concatenate(([0], starts, [positions.size])).astype(np.int64)


def item_blocks(positions, group):
    """Row blocks and super-blocks (in rows of ``group`` per item) of items at ``positions``:
    blocks of ``ROW_BLOCK // group`` item positions, so every block ends on an item boundary
    and holds about ROW_BLOCK rows; fixed by the positions alone."""
    per = max(1, ROW_BLOCK // group)
    items = row_blocks_from_positions(positions, per)
    return items * group, items


def reduction_group_rows(n_rows):
    """Rows of X per group of the reduction tree: X's rows split into a power of two of runs
    of consecutive rows, at most :data:`REDUCE_LEAVES`, each of at least
    :data:`REDUCE_MIN_ROWS` rows (small X is one group).  A power of two of groups lets a
    power of two of Dask workers hold one whole subtree each (one partial sum per round).  A
    function of the number of rows of X alone."""
    n_rows = int(n_rows)
    groups = 1
    while groups * 2 <= REDUCE_LEAVES and n_rows >= groups * 2 * REDUCE_MIN_ROWS:
        groups *= 2
    return max(1, -(-n_rows // groups))


def reduction_layout(positions, leaves, n_columns, group=1):
    """Row blocks, super-blocks and reduction groups of rows at ``positions`` (sorted, in the
    active set) whose rows of X fall in groups ``leaves`` (non-decreasing, see
    :func:`reduction_group_rows`).

    A row block is the rows of one group and one run of :data:`ROW_BLOCK` positions, a
    super-block those of one group and one run of super-block positions (see
    :func:`super_blocks`), a reduction group the super-blocks of one leaf.  The layout of
    any subset of the rows is the layout of all restricted to it, so a process holding
    some groups sums them exactly as a process holding all of them.

    Multiple choice (``group`` = K > 1): ``positions`` and ``leaves`` are per item, row
    blocks are runs of ``ROW_BLOCK // K`` item positions (as :func:`item_blocks`) and the
    row boundaries count candidate rows (K per item), so a reduction group is whole items.

    Returns
    -------
    row_blocks, super_blocks, group_blocks, group_leaves : int64 arrays
        Boundaries (rows, row blocks, super-blocks) and the leaf of each group.
    """
    positions = np.asarray(positions, dtype=np.int64)
    leaves = np.asarray(leaves, dtype=np.int64)
    if positions.size == 0:
        zero = np.array([0], dtype=np.int64)
        return zero, zero, zero, np.zeros(0, dtype=np.int64)
    group = int(group)
    block = max(1, ROW_BLOCK // group)
    new_leaf = np.flatnonzero(np.diff(leaves)) + 1
    starts = np.union1d(np.flatnonzero(np.diff(positions // block)) + 1, new_leaf)
    row_blocks = np.concatenate(([0], starts, [positions.size])).astype(np.int64)
    size = max(1, SUPER_BLOCK_BYTES // (4 * int(n_columns) * group * block)) * block
    first = row_blocks[:-1]
    cut = (np.diff(positions[first] // size) != 0) | (np.diff(leaves[first]) != 0)
    super_blocks = np.concatenate(([0], np.flatnonzero(cut) + 1, [first.size])).astype(np.int64)
    sb_leaf = leaves[first[super_blocks[:-1]]]
    group_blocks = np.concatenate(([0], np.flatnonzero(np.diff(sb_leaf)) + 1,
                                   [super_blocks.size - 1])).astype(np.int64)
    return row_blocks * group, super_blocks, group_blocks, sb_leaf[group_blocks[:-1]].astype(np.int64)


def combine_nodes(nodes, n_leaves=None):
    """The root of the reduction tree from partial sums, added as ``member_eval_tree`` adds
    them: ``nodes`` are (level, index, sums) of disjoint whole subtrees of the tree over
    ``n_leaves`` leaves (default :data:`REDUCE_LEAVES`), from any processes and in any order;
    a node is its left child plus its right child, and a subtree without rows adds nothing.
    Returns the sums over every row given (None when no node holds rows)."""
    n_leaves = REDUCE_LEAVES if n_leaves is None else int(n_leaves)
    top = n_leaves.bit_length() - 1
    given = {(int(level), int(index)): values for level, index, values in nodes}

    def value(level, index):
        if (level, index) in given:
            return given[(level, index)]
        if level == 0:
            return None
        left, right = value(level - 1, 2 * index), value(level - 1, 2 * index + 1)
        if left is None or right is None:
            return right if left is None else left
        return left + right

    return value(top, 0)


def item_centered(Xa, items, group):
    """The candidate rows of ``items`` (positions among the items of ``Xa``, K = ``group``
    rows each) minus their item's mean row, float32 (len(items) x K, D): the rows whose
    second moment is the Hessian of a multiple-choice scorer at equal scores."""
    rows = (np.asarray(items, dtype=np.int64)[:, None] * group + np.arange(group)).ravel()
    if rows.size != Xa.shape[0]:
        out = np.ascontiguousarray(Xa[rows], dtype=np.float32)  # a new array already
    else:
        out = np.array(Xa, dtype=np.float32, order="C")  # never the caller's rows
    _kernel.center_items(out, int(group))
    return out
