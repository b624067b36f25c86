"""Python side of the compiled kernel: validate, allocate and call ``_kernel``.

The kernel trains a *block* of multinomial logistic regressions at once, each on a subset of
the same rows, and predicts held-out rows with all of them in one pass (see ``_kernel.pyx``).
Rows handed to the kernel are float32 with a trailing column of ones (the intercept);
``augment_rows`` and :mod:`aflite_fast.data` produce them.  ``preconditioner`` builds the
shared initial inverse Hessian of the solver from a sample of the rows, in the form that
``preconditioner_forms`` picks from the sizes.

Multiple choice (``group=K`` in :func:`train_models` and :func:`predict_accumulate`): an item's
K candidate rows are K consecutive rows and each model is one linear scorer (one output,
``n_classes=1``) trained with the softmax over each item's K scores; the same member pass
serves both shapes (``csrc/afl_member.h``, E).
"""
import numbers
from dataclasses import dataclass
from typing import Optional

import numpy as np

try:
    from aflite_fast import _kernel
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    from aflite_fast._build_check import raise_build_error

    raise_build_error(exc)

from aflite_fast._threads import for_row_ranges, limit_blas_threads, limit_threads
from aflite_fast.losses import resolve_loss
from aflite_fast._loss_names import LOSS_CODES as _LOSS_CODES

_LOSS_FORWARD = _LOSS_CODES["forward"]
#: Why multiple choice refuses the forward-corrected loss.
MC_FORWARD_MESSAGE = ("loss='forward' does not apply to multiple choice: a noise transition matrix relates "
                      "classes, and the candidates of an item are positions, not classes; use 'ce', 'gce', "
                      "'gce_trunc', 'mae', 'sce' or a user loss")

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
#: of 8,192 (benchmarks/member_rate.py).
REDUCE_MIN_ROWS = 8192
#: Rows of the sample a preconditioner is estimated from: this many per column, at least
#: :data:`PRECOND_MIN_ROWS` (all rows when there are fewer), at most
#: :data:`PRECOND_MAX_ROWS` unless that leaves fewer than :data:`PRECOND_FLOOR_PER_COLUMN`
#: per column.  The Gram matrix costs 2 x rows x D^2: at D = 4097 eight rows per column cost
#: more than the solver evaluations they save, four were the best or within 7% of it
#: (``benchmarks/precond_sample.py``).
PRECOND_ROWS_PER_COLUMN = 8
PRECOND_MAX_ROWS = 16384
PRECOND_FLOOR_PER_COLUMN = 4
#: Rows summed in float32 before their sum joins the preconditioner's double Gram matrix.
PRECOND_BLOCK = 256
PRECOND_MIN_ROWS = 2048
#: The dense form (D x D) is built up to this many columns (d + 1): O(D^2) memory and
#: O(D^3) time, and a product of D^2 per column each round, worth it while D is at most
#: about the rows a model trains on (``benchmarks/iterations.py``).
DENSE_MAX_COLUMNS = 4097
#: Up to this many columns the dense form inverts with NumPy's LAPACK (which NumPy loads
#: anyway); above, with SciPy's Cholesky routines (a third of the work), imported then.
NUMPY_INVERSE_MAX = 512
#: Forms of the preconditioner, most to least exact (see :func:`preconditioner_forms`).
PRECOND_FORMS = ("dense", "lowrank", "diagonal", "none")
_NO_MATRIX = np.empty((0, 0), dtype=np.float32)
STATUS_NAMES = {
    _kernel.STATUS_CONVERGED: "converged",
    _kernel.STATUS_MAX_ITER: "max_iter",
    _kernel.STATUS_LINE_SEARCH: "line_search",
    _kernel.STATUS_NOT_FINITE: "not_finite",
}


@dataclass
class SolverOptions:
    """Stopping rules of the batched L-BFGS solver.

    Parameters
    ----------
    tol : float
        Stop when the largest absolute gradient entry is at most ``tol`` (scikit-learn's
        ``tol`` for ``solver="lbfgs"``; the objective is the mean loss plus the L2 term).
        Logits are float32, so the gradient is exact to about 1e-6 only: below that, models
        stop through ``ftol`` or the line search (reported as converged, as SciPy reports
        its relative-reduction stop) rather than through ``tol``.
    max_iter : int
        Maximum number of accepted L-BFGS steps per model.
    ftol : float
        Stop when the relative decrease of the objective is at most ``ftol``.
    history : int
        Number of correction pairs kept by L-BFGS.
    max_line_search : int
        Backtracking steps before a model is declared stuck (at float32 precision).
    precondition : bool
        Start L-BFGS from the preconditioner of :func:`preconditioner` instead of the
        identity (callers that build one: the engine, oof, the estimators).  It changes the
        path of the solver, not its optimum.
    """

    tol: float = 1e-4
    max_iter: int = 1000
    ftol: float = 1e-12
    history: int = 10
    max_line_search: int = 30
    precondition: bool = True

    def __post_init__(self):
        # checked here, not in the kernel: a C int or double argument would take a float
        # max_iter or a NaN tol silently, or fail with a message naming no argument
        for name in ("tol", "ftol"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < np.inf:
                raise ValueError(f"{name} must be a non-negative number, got {value!r}")
        for name, low in (("max_iter", 0), ("history", 1), ("max_line_search", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not low <= value < 2**31:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(self.precondition, (bool, np.bool_)):
            raise ValueError(f"precondition must be True or False, got {self.precondition!r}")


def preconditioner_sample(n_rows, n_columns, form="dense"):
    """Positions (sorted, int64) of the rows a preconditioner is estimated from: evenly
    spaced over ``n_rows``, :data:`PRECOND_ROWS_PER_COLUMN` per column of the augmented rows,
    at most :data:`PRECOND_MAX_ROWS` but not fewer than :data:`PRECOND_FLOOR_PER_COLUMN` per
    column, at least :data:`PRECOND_MIN_ROWS` (the diagonal form: :data:`PRECOND_MIN_ROWS`;
    none: no row)."""
    if form == "none":
        return np.zeros(0, dtype=np.int64)
    D = int(n_columns)
    per_column = 0
    if form in ("dense", "lowrank"):
        per_column = min(PRECOND_ROWS_PER_COLUMN * D, max(PRECOND_FLOOR_PER_COLUMN * D, PRECOND_MAX_ROWS))
    n_sample = min(int(n_rows), max(PRECOND_MIN_ROWS, per_column))
    return (np.arange(n_sample, dtype=np.int64) * int(n_rows)) // max(n_sample, 1)


def preconditioner_forms(n_rows, n_columns):
    """Forms of the preconditioner worth building for ``n_rows`` rows of ``n_columns``
    augmented columns, best first; callers take the first that fits their memory.

    - fewer rows in the sample than columns (wide data: the sample is then every row, see
      :func:`preconditioner_sample`): ``"none"``.  The solution lies in the span of the
      rows, where plain L-BFGS already does well; the exact H0 (the ``"lowrank"`` form) costs
      an n x n system and, per direction, about two evaluations of the model, and the
      diagonal form pushes the steps out of that span: both measured slower
      (``benchmarks/wide_data.py --forms``);
    - else ``"dense"`` up to :data:`DENSE_MAX_COLUMNS` columns;
    - else ``"diagonal"`` (per-feature scaling: O(D) memory and time per product);
    - and ``"none"`` last, for a budget too small for the others.
    """
    n_sample = preconditioner_sample(n_rows, n_columns).size
    if n_sample < n_columns:
        return ["none"]
    if n_columns <= DENSE_MAX_COLUMNS:
        return ["dense", "diagonal", "none"]
    return ["diagonal", "none"]


def preconditioner_bytes(form, n_rows, n_columns, chunk_rows=None):
    """Peak bytes of building the preconditioner of ``form`` (``chunk_rows``: rows of the
    sample read at a time, default all); ``preconditioner_bytes(...)`` minus
    ``Preconditioner.nbytes`` is freed before training."""
    D = int(n_columns)
    n_sample = preconditioner_sample(n_rows, D, form).size
    chunk = n_sample if chunk_rows is None else min(n_sample, int(chunk_rows))
    if form == "dense":
        # a chunk of the sample, the double Gram matrix (factorised and inverted in place), a
        # double and two float32 temporaries of its size
        return chunk * D * 4 + D * D * (8 + 8 + 4 + 4)
    if form == "lowrank":
        # the sample (kept as the factor), its transpose, the n x n double system, its inverse
        # and the float32 core
        return 2 * n_sample * D * 4 + n_sample * n_sample * (8 + 8 + 4) + D * 8
    if form == "diagonal":
        return chunk * D * (4 + 8) + D * (8 + 4)
    return 0


@dataclass(frozen=True, eq=False)
class Preconditioner:
    """The solver's initial inverse Hessian H0, shared by the models of a phase.

    ``form`` is one of :data:`PRECOND_FORMS`; H0 is ``dense`` (D x D) for the dense form,
    else ``diag(diag) + factor.T @ core @ factor`` (``factor`` r x D and ``core`` r x r for
    the low-rank form, None for the diagonal form), the identity for ``"none"``.  All arrays
    float32, C-contiguous.
    """

    form: str
    dense: Optional[np.ndarray] = None
    diag: Optional[np.ndarray] = None
    factor: Optional[np.ndarray] = None
    core: Optional[np.ndarray] = None

    @property
    def nbytes(self):
        return sum(a.nbytes for a in (self.dense, self.diag, self.factor, self.core) if a is not None)

    def matrix(self):
        """H0 as a dense float64 (D x D) matrix (for tests; None for the identity)."""
        if self.form == "dense":
            return self.dense.astype(np.float64)
        if self.form == "none":
            return None
        H = np.diag(self.diag.astype(np.float64))
        if self.factor is not None:
            F = self.factor.astype(np.float64)
            H += F.T @ self.core.astype(np.float64) @ F
        return H

    def kernel_arguments(self, n_columns):
        """Keyword arguments of ``_kernel.train_block`` (and ``precond_apply``) for H0."""
        if self.form == "dense":
            return dict(dense=self.dense)
        if self.form == "none":
            return {}
        args = dict(diag=self.diag)
        if self.factor is not None:
            args.update(factor=self.factor, core=self.core,
                        factor_blocks=block_bounds(self.factor.shape[0], PRECOND_BLOCK))
        return args


def _spd_inverse(M):
    """Inverse of the symmetric positive definite double matrix M (overwritten), float64,
    symmetric; on one BLAS thread, so that the result does not depend on the thread count."""
    n = M.shape[0]
    with limit_threads(None):
        if n <= NUMPY_INVERSE_MAX:
            try:
                np.linalg.cholesky(M)  # refuses what is not positive definite, as dpotrf does
            except np.linalg.LinAlgError:
                raise ValueError("preconditioner: the rows' second-moment matrix is not positive definite")
            inv = np.linalg.inv(M)
            inv += inv.T
            inv *= 0.5
            return inv
        import scipy.linalg.lapack  # noqa: PLC0415 - about 0.3 s, only for wide rows

        factor, info = scipy.linalg.lapack.dpotrf(M, lower=1, overwrite_a=1)
        if info != 0:
            raise ValueError("preconditioner: the rows' second-moment matrix is not positive definite")
        inv, info = scipy.linalg.lapack.dpotri(factor, lower=1, overwrite_c=1)
        if info != 0:
            raise ValueError("preconditioner: could not invert the second-moment matrix")
    # dpotri fills the lower triangle: mirror it
    inv = np.tril(inv)
    inv += np.tril(inv, -1).T
    return inv


def _regularizer(mean_square_trace, D, l2):
    """The diagonal added to s X'X/n: the L2 weight, and a floor relative to the rows' scale
    (mean diagonal ``mean_square_trace / D``) so that H0 stays well defined in float32 where
    a feature is constant."""
    scale = mean_square_trace / D
    return max(float(l2), 1e-7 * scale) if scale > 0 else 1.0


def preconditioner(rows, n_classes, l2, n_threads=1, form="dense", curvature=None):
    """Initial inverse Hessian H0 of the L-BFGS solver from augmented rows.

    ``H0 = (s * X'X / n + l2 * I)^-1`` over the n rows given, with ``s = (C - 1) / C^2`` the
    curvature of the softmax at uniform probabilities: the Hessian of the objective at the
    start, per class, without its coupling across classes.  Embedding features are
    correlated and their variances span orders of magnitude, so plain L-BFGS (H0 = identity)
    takes tens to hundreds of steps; with H0 the solver sees roughly whitened features.  It
    changes the path of the solver, never its optimum (the stopping rule is on the gradient
    of the original problem).

    Forms (:func:`preconditioner_forms` picks one from the sizes):

    - ``"dense"``: the D x D matrix (O(D^2) memory, O(D^3) time);
    - ``"lowrank"``: the same matrix through the Woodbury identity,
      ``H0 = (I - F' (c I + F F')^-1 F) / l2`` with F the n rows and ``c = n l2 / s``: an
      n x n system (O(n D) memory, O(n^2 D) time), for callers that want the exact H0 of a
      sample with fewer rows than columns (never chosen by :func:`preconditioner_forms`:
      measured slower than none there);
    - ``"diagonal"``: ``1 / diag(s X'X / n + l2 I)`` (O(D) memory, O(n D) time);
    - ``"none"``: the identity.

    Parameters
    ----------
    rows : ndarray (n, D) float32, or an iterable of such arrays
        A sample of the augmented rows (see :func:`preconditioner_sample`), whole or in
        chunks; every chunk but the last must hold a multiple of :data:`PRECOND_BLOCK` rows,
        so the sums (float32 within blocks of PRECOND_BLOCK rows, added in double) and the
        result do not depend on the chunking.
    n_classes : int
    l2 : float
        L2 weight of the objective (``1 / (C * n_rows)``), which bounds H0 where the rows have
        little or no variance.
    n_threads : int
    form : str
        One of :data:`PRECOND_FORMS`.
    curvature : float, optional
        s in place of ``(C - 1) / C^2``: a multiple-choice scorer gives rows centred within
        their item and s = 1 (the Hessian at equal scores is the within-item covariance).

    Returns
    -------
    Preconditioner
    """
    if form not in PRECOND_FORMS:
        raise ValueError(f"preconditioner form must be one of {PRECOND_FORMS}, got {form!r}")
    chunks = [rows] if isinstance(rows, np.ndarray) else rows
    if form == "none":
        return Preconditioner("none")
    s = (n_classes - 1) / float(n_classes) ** 2 if curvature is None else float(curvature)
    if form == "lowrank":
        return _lowrank_preconditioner(chunks, s, l2, n_threads)
    acc, n, D = None, 0, None
    for chunk in chunks:
        chunk = np.ascontiguousarray(chunk, dtype=np.float32)
        if n % PRECOND_BLOCK:
            raise ValueError(f"every chunk of rows but the last must hold a multiple of {PRECOND_BLOCK} rows")
        D = chunk.shape[1]
        if acc is None:
            acc = np.zeros((D, D) if form == "dense" else D, dtype=np.float64)
        if chunk.shape[0] and form == "dense":
            with limit_blas_threads():
                # the symmetric product at half the work, bitwise sgemm's
                _kernel.gram(chunk, acc, block_bounds(chunk.shape[0], PRECOND_BLOCK), n > 0, n_threads)
        elif chunk.shape[0]:
            # sums of squares: float32 within blocks of PRECOND_BLOCK rows, added in double, as
            # the Gram matrix's diagonal is
            for b in range(0, chunk.shape[0], PRECOND_BLOCK):
                block = chunk[b:b + PRECOND_BLOCK]
                acc += np.square(block).sum(axis=0)  # row after row: a fixed order per column
        n += chunk.shape[0]
    if acc is None:
        raise ValueError("preconditioner: no rows given")
    if n == 0:
        return (Preconditioner("dense", dense=np.eye(D, dtype=np.float32)) if form == "dense"
                else Preconditioner("diagonal", diag=np.ones(D, dtype=np.float32)))
    acc *= s / n
    if form == "diagonal":
        acc += _regularizer(float(acc.sum()), D, l2)
        return Preconditioner("diagonal", diag=(1.0 / acc).astype(np.float32))
    M = acc
    M[np.diag_indices(D)] += _regularizer(float(np.trace(M)), D, l2)
    return Preconditioner("dense", dense=_spd_inverse(M).astype(np.float32))


def _lowrank_preconditioner(chunks, s, l2, n_threads):
    """The ``"lowrank"`` form of :func:`preconditioner` (Woodbury identity)."""
    parts = [np.ascontiguousarray(c, dtype=np.float32) for c in chunks]
    if not parts:
        raise ValueError("preconditioner: no rows given")
    F = parts[0] if len(parts) == 1 else np.concatenate(parts)
    del parts
    n, D = F.shape
    if n == 0:
        return Preconditioner("diagonal", diag=np.ones(D, dtype=np.float32))
    # K = F F' in double from float32 K-blocks over the columns, as the dense Gram matrix
    K = np.zeros((n, n), dtype=np.float64)
    Ft = np.ascontiguousarray(F.T)
    with limit_blas_threads():
        _kernel.sgemm(False, F, Ft, K, block_bounds(D, PRECOND_BLOCK), False, n_threads)
    del Ft
    # M = s F'F / n + lam I, and trace(F'F) = trace(F F')
    lam = _regularizer(float(np.trace(K)) * s / n, D, l2)
    K[np.diag_indices(n)] += n * lam / s
    core = _spd_inverse(K)
    core *= -1.0 / lam
    return Preconditioner("lowrank", diag=np.full(D, 1.0 / lam, dtype=np.float32), factor=F,
                          core=core.astype(np.float32))


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


def train_models(Xa, y, member, n_classes, *, C=1.0, loss="ce", loss_params=None, coef=None,
                 positions=None, precond=None, options=None, n_threads=1, group=1, n_free=1, leaves=None):
    """Train ``member.shape[1]`` models on subsets of the rows ``Xa``.

    Parameters
    ----------
    Xa : ndarray of shape (n, d + 1), float32, C-contiguous
        Rows with a trailing column of ones.
    y : ndarray of shape (n,), int32
        Label codes in ``[0, n_classes)``.
    member : ndarray of shape (n, B), uint8
        ``member[i, j] == 1`` where row i trains model j.
    n_classes : int
        Number of classes C (>= 2).
    C : float
        Inverse L2 strength, scikit-learn's meaning.
    loss : str or Loss
        Loss name from :mod:`aflite_fast.losses` or a resolved loss.
    loss_params : dict, optional
        Parameters of the loss (e.g. ``{"q": 0.7}``).
    coef : ndarray of shape (B, d + 1, n_classes), float64, optional
        Starting point (warm start); updated in place and returned.  Zeros when omitted.
    positions : ndarray of shape (n,), int64, optional
        Positions of the rows in the active set (sorted); they fix the summation blocks.
        Defaults to ``arange(n)``.
    precond : None, "auto", Preconditioner or ndarray of shape (d + 1, d + 1), float32
        Initial inverse Hessian of the solver (see :func:`preconditioner`; an array is the
        dense form), shared by the models; ``"auto"`` estimates it from a sample of ``Xa`` in
        the first form of :func:`preconditioner_forms`; None (or
        ``options.precondition=False``): the identity.  It changes the solver's path, not
        its optimum.
    options : SolverOptions, optional
    n_threads : int
    group : int, default=1
        Multiple choice with ``group`` = K > 1: ``Xa`` holds K consecutive candidate rows per
        item (n = items x K), ``y`` and ``member`` one entry per item (``y`` the right
        candidate, < K), ``n_classes`` must be 1 (one score per candidate) and the loss is
        over each item's K candidates (resolved for K classes); ``positions`` are the items'.
        ``C`` is then used as given (no two-class halving applies).
    n_free : int, default=1
        The last ``n_free`` rows of each model are not penalised (the intercept; for multiple
        choice the position-bias columns, or 0).
    leaves : ndarray of shape (n,), int64, optional
        Reduction group of every row (its row of X // :func:`reduction_group_rows`,
        non-decreasing; with ``group`` > 1 one per item, its item of X //
        ``reduction_group_rows(items of X)``): each model's sums over the groups are added by
        the reduction tree (:func:`reduction_layout`), so that :func:`train_models_with` fed
        partial sums of whole groups from other processes gives the same bits.  None: one
        group.

    Returns
    -------
    coef : ndarray of shape (B, d + 1, n_classes)
    info : dict with arrays ``n_iter`` (accepted steps), ``status``, ``objective`` and
        ``n_eval`` (evaluations of objective and gradient), one entry per model
    """
    options = options or SolverOptions()
    n, D = Xa.shape
    B = member.shape[1]
    if group > 1 and n_classes != 1:
        raise ValueError(f"multiple choice (group={group}) scores each candidate with one output: n_classes must "
                         f"be 1, got {n_classes}")
    spec = resolve_loss(loss, loss_params, group if group > 1 else n_classes)
    if group > 1 and spec.code == _LOSS_FORWARD:
        raise ValueError(MC_FORWARD_MESSAGE)
    if coef is None:
        coef = np.zeros((B, D, n_classes), dtype=np.float64)
    if coef.shape != (B, D, n_classes) or coef.dtype != np.float64 or not coef.flags.c_contiguous:
        raise ValueError(f"coef must be a C-contiguous float64 array of shape {(B, D, n_classes)}")
    n_rows = member.sum(axis=0, dtype=np.int64)
    if np.any(n_rows == 0):
        raise ValueError("every model needs at least one training row")
    n_items = n // group
    positions = np.arange(n_items, dtype=np.int64) if positions is None else np.asarray(positions, np.int64)
    l2 = 1.0 / (float(C) * n_rows)
    if not options.precondition or precond is None:
        precond = Preconditioner("none")
    elif isinstance(precond, str):
        if precond != "auto":
            raise ValueError(f"precond must be None, 'auto', a Preconditioner or a matrix, got {precond!r}")
        form = preconditioner_forms(n, D)[0]
        if group > 1:
            sample = preconditioner_sample(n_items, -(-D // group), form)
            precond = preconditioner(item_centered(Xa, sample, group), 1, float(np.mean(l2)), n_threads,
                                     form=form, curvature=1.0)
        else:
            sample = preconditioner_sample(n, D, form)
            rows = Xa if sample.size == n else Xa[sample]  # no copy when the sample is every row
            precond = preconditioner(rows, n_classes, float(np.mean(l2)), n_threads, form=form)
    elif isinstance(precond, np.ndarray):
        if precond.shape != (D, D) or precond.dtype != np.float32 or not precond.flags.c_contiguous:
            raise ValueError(f"precond must be a C-contiguous float32 array of shape {(D, D)}")
        precond = Preconditioner("dense", dense=precond)
    elif not isinstance(precond, Preconditioner):
        raise ValueError(f"precond must be None, 'auto', a Preconditioner or a matrix, got {type(precond).__name__}")
    if getattr(spec, "warmup", None) is not None:
        # e.g. truncated GCE: from all-zero weights every p_y = 1/C <= k, the gradient is
        # exactly zero and the solver cannot move; models starting at zero are first
        # trained with the warm-up loss (plain GCE), as Zhang & Sabuncu (2018) do.
        cold = ~coef.reshape(B, -1).any(axis=1)
        if cold.any():
            start, _ = train_models(Xa, y, np.ascontiguousarray(member[:, cold]), n_classes, C=C,
                                    loss=spec.warmup, coef=np.ascontiguousarray(coef[cold]),
                                    positions=positions, precond=precond, options=options,
                                    n_threads=n_threads, group=group, n_free=n_free, leaves=leaves)
            coef[cold] = start
    groups = {}
    if leaves is not None:
        row_blocks, sblocks, group_blocks, group_leaves = reduction_layout(positions, leaves, D, group)
        groups = dict(group_blocks=group_blocks, group_leaves=group_leaves, n_leaves=REDUCE_LEAVES)
    elif group > 1:
        row_blocks, item_rb = item_blocks(positions, group)
        sblocks = super_blocks(positions, item_rb, D * group, max(1, ROW_BLOCK // group))
    else:
        row_blocks = row_blocks_from_positions(positions)
        sblocks = super_blocks(positions, row_blocks, D)
    inv_n = 1.0 / n_rows.astype(np.float64)
    n_iter = np.zeros(B, dtype=np.int32)
    status = np.zeros(B, dtype=np.int32)
    fval = np.zeros(B, dtype=np.float64)
    n_eval = np.zeros(B, dtype=np.int32)
    pre = precond.kernel_arguments(D)
    with limit_blas_threads():
        _kernel.train_block(
            Xa, y, member, n_rows, row_blocks, sblocks,
            block_bounds(D, COL_BLOCK), pre.get("dense", _NO_MATRIX), coef.reshape(B, D * n_classes),
            l2, inv_n, n_classes, spec.code, spec.params, spec.address,
            options.tol, options.ftol, options.max_iter, options.history,
            options.max_line_search, n_iter, status, fval, n_eval, n_threads,
            pre_diag=pre.get("diag"), pre_factor=pre.get("factor"), pre_core=pre.get("core"),
            pre_blocks=pre.get("factor_blocks"), group=group, n_free=n_free, **groups,
        )
    return coef, {"n_iter": n_iter, "status": status, "objective": fval, "n_eval": n_eval}


def train_models_with(evaluate, n_rows, n_columns, n_classes, *, C=1.0, loss="ce", loss_params=None,
                      coef=None, precond=None, options=None, n_threads=1, n_free=1):
    """:func:`train_models` with the evaluation of loss and gradient done by ``evaluate``.

    The solver (``_kernel.LBFGSBlock``, the arithmetic of ``train_block``) runs here; every
    round it calls ``evaluate(models, W, scale, loss)`` with the models still running
    (int64 indices into the block), their class-major float32 trial weights
    (len(models), C, member_width(D)), their gradient scales and the resolved loss, and takes
    back their sums, float64 (len(models), C * member_width(D) + 1): the scaled gradient
    sums, then the summed row loss, as ``_kernel.member_eval_tree`` returns them.  Sums that
    ``combine_nodes`` adds up from the reduction tree's partial sums of every group give
    bitwise the models of ``train_models(..., leaves=...)`` on the same rows.

    Parameters
    ----------
    evaluate : callable
    n_rows : ndarray of shape (B,), int64
        Training rows of each model.
    n_columns : int
        D, the features plus the ones column.
    n_classes, C, loss, loss_params, coef, options, n_threads, n_free : as in :func:`train_models`
        (multiple choice: ``n_classes`` 1, and ``loss`` resolved for the K candidates)
    precond : None or Preconditioner

    Returns
    -------
    coef, info : as :func:`train_models` returns them
    """
    options = options or SolverOptions()
    D = int(n_columns)
    n_rows = np.asarray(n_rows, dtype=np.int64)
    B = n_rows.size
    spec = resolve_loss(loss, loss_params, n_classes)
    if coef is None:
        coef = np.zeros((B, D, n_classes), dtype=np.float64)
    if coef.shape != (B, D, n_classes) or coef.dtype != np.float64 or not coef.flags.c_contiguous:
        raise ValueError(f"coef must be a C-contiguous float64 array of shape {(B, D, n_classes)}")
    if np.any(n_rows == 0):
        raise ValueError("every model needs at least one training row")
    if not options.precondition or precond is None:
        precond = Preconditioner("none")
    if getattr(spec, "warmup", None) is not None:
        cold = np.flatnonzero(~coef.reshape(B, -1).any(axis=1))
        if cold.size:
            def evaluate_cold(models, W, scale, loss_spec):
                return evaluate(cold[models], W, scale, loss_spec)

            start, _ = train_models_with(evaluate_cold, n_rows[cold], D, n_classes, C=C, loss=spec.warmup,
                                         coef=np.ascontiguousarray(coef[cold]), precond=precond,
                                         options=options, n_threads=n_threads, n_free=n_free)
            coef[cold] = start
    l2 = 1.0 / (float(C) * n_rows)
    inv_n = 1.0 / n_rows.astype(np.float64)
    pre = precond.kernel_arguments(D)
    solver = _kernel.LBFGSBlock(
        coef.reshape(B, D * n_classes), l2, inv_n, n_classes, block_bounds(D, COL_BLOCK),
        pre.get("dense", _NO_MATRIX), options.tol, options.ftol, options.max_iter, options.history,
        options.max_line_search, n_threads, pre_diag=pre.get("diag"), pre_factor=pre.get("factor"),
        pre_core=pre.get("core"), pre_blocks=pre.get("factor_blocks"), n_free=n_free)
    with limit_blas_threads():
        while True:
            models, W = solver.trial()
            if models.size == 0:
                break
            sums = evaluate(models, W, solver.scales(), spec)
            solver.advance(np.ascontiguousarray(sums, dtype=np.float64))
    n_iter, status, fval, n_eval = solver.results()
    return coef, {"n_iter": n_iter, "status": status, "objective": fval, "n_eval": n_eval}


class MemberRows:
    """Rows, labels and member lists of some reduction groups, ready for partial sums of the
    member pass (what a process holding those groups computes in each round of
    :func:`train_models_with`).

    ``Xa``, ``y``, ``member`` (n, B), ``positions``, ``leaves`` and ``group`` as in
    :func:`train_models` (with ``group`` = K > 1, ``y``, ``member``, ``positions`` and
    ``leaves`` per item of K rows of ``Xa``).
    """

    def __init__(self, Xa, y, member, positions, leaves, group=1):
        self.Xa, self.y = Xa, np.ascontiguousarray(y, dtype=np.int32)
        self.group = int(group)
        D = Xa.shape[1]
        self.layout = reduction_layout(positions, leaves, D, self.group)
        row_blocks = self.layout[0]
        self.n_models = member.shape[1]
        self.mptr = np.zeros((self.n_models, row_blocks.size), dtype=np.int64)
        self.mrows = np.zeros(int(member.sum(dtype=np.int64)) * self.group, dtype=np.int32)
        if Xa.shape[0]:
            _kernel.member_index(member, row_blocks, self.mptr, self.mrows, self.group)

    def sums(self, models, W, scale, loss, leaf_range=None, n_threads=1):
        """(level, index, sums) of the reduction tree's whole subtrees of ``leaf_range``
        (default all leaves) that hold rows (``_kernel.member_eval_tree``), for ``models``,
        ``W``, ``scale`` as :func:`train_models_with` passes them and ``loss`` resolved (a
        built-in loss)."""
        if loss.address:
            raise ValueError(f"loss {loss.name!r} is a compiled user function: its address is only valid "
                             "in the process that compiled it")
        lo, hi = (0, REDUCE_LEAVES) if leaf_range is None else leaf_range
        row_blocks, sblocks, group_blocks, group_leaves = self.layout
        with limit_blas_threads():
            return _kernel.member_eval_tree(self.Xa, self.y, self.mptr, self.mrows, row_blocks, sblocks,
                                            group_blocks, group_leaves, int(lo), int(hi),
                                            np.asarray(models, dtype=np.int64), W,
                                            np.asarray(scale, dtype=np.float64), loss.code, loss.params,
                                            n_threads, self.group)


def stack_weights(coef):
    """(B, D, C) float64 coefficients -> (D, C * B) float32 operand of the prediction GEMM,
    class-major (column ``c * B + j`` is class c of model j) so that the row pass after it
    runs over the models."""
    B, D, C = coef.shape
    return np.ascontiguousarray(coef.transpose(1, 2, 0).reshape(D, C * B), dtype=np.float32)


def predict_tile_rows(n_models, n_classes):
    """Rows of one prediction tile: ``_kernel.predict_tile_bytes()`` of logits, at least
    ``_kernel.predict_min_tile_rows()`` rows (never more than the rows of the call)."""
    return max(_kernel.predict_min_tile_rows(), _kernel.predict_tile_bytes() // (4 * n_models * n_classes))


def predict_accumulate(Xa, y, heldout, W, n_classes, seen, correct, prob_label,
                       proba_sum=None, n_threads=1, group=1):
    """Accumulate held-out predictions of the models in ``W`` (see ``stack_weights``).

    Logits are computed a tile of :func:`predict_tile_rows` rows at a time, at most the rows
    given, so a call's scratch grows with its rows up to a fixed cap.  With ``group`` = K > 1
    (``n_classes`` 1) ``Xa`` holds K candidate rows per item and the other arrays are per item
    (``proba_sum`` (items, K)): an item's prediction is its highest-scoring candidate."""
    if proba_sum is None:
        proba_sum = np.empty((0, n_classes * group), dtype=np.float64)
    with limit_blas_threads():
        _kernel.predict_accumulate(Xa, y, heldout, W, block_bounds(Xa.shape[1], COL_BLOCK),
                                   n_classes, seen, correct, prob_label, proba_sum, n_threads, 0, group)


def predict_proba(Xa, coef, n_threads=1, group=1):
    """Probabilities of one model (coef of shape (D, C)) on augmented rows, float64 (n, C);
    with ``group`` = K > 1, of each item's K candidates (n / K, K)."""
    n = Xa.shape[0] // group
    C = coef.shape[-1]
    W = stack_weights(coef.reshape(1, *coef.shape))
    out = np.zeros((n, C * group), dtype=np.float64)
    predict_accumulate(Xa, np.full(n, -1, dtype=np.int32), np.ones((n, 1), dtype=np.uint8), W, C,
                       np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n), out, n_threads, group)
    return out


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
