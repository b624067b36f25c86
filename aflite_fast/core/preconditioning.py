"""The solver's initial inverse Hessian H0, shared by the models of a phase, and every choice about it.

a. Forms, most to least exact (:data:`PRECOND_FORMS`): dense ``(s X'X/n + l2 I)^-1`` up to
   :data:`DENSE_MAX_COLUMNS` columns, low-rank beyond, diagonal, none
   (:func:`preconditioner_forms` picks from the sizes alone).
b. The sample it is estimated from: rows spread evenly over the active set
   (:func:`preconditioner_sample`), so it is a function of the active set alone and no model
   depends on its block or on the backend; or, when the sample would hold every row of X
   (small X, :func:`whole_x_preconditioner`), all of X's rows with the L2 weight of a power of
   two of the training size (:func:`phase_preconditioner_l2`), a function of X that a run keeps
   from phase to phase (:class:`KeptPreconditioner`).
c. Its memory (:func:`preconditioner_bytes`, :func:`phase_preconditioner_bytes`) and the form a
   budget allows (:func:`phase_preconditioner_form`: a cheaper form, with a warning, rather than
   a refusal).
d. A phase's preconditioner from rows read by the caller (:func:`phase_preconditioner`), which
   the local and the Dask backends both use.
"""
import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np

from aflite_fast.core.compiled import _kernel
from aflite_fast.core.layout import block_bounds
from aflite_fast.runtime.threads import limit_blas_threads, limit_threads

#: Rows of the sample a preconditioner is estimated from: this many per column, at least
#: :data:`PRECOND_MIN_ROWS` (all rows when there are fewer), at most
#: :data:`PRECOND_MAX_ROWS` unless that leaves fewer than :data:`PRECOND_FLOOR_PER_COLUMN`
#: per column.  The Gram matrix costs 2 x rows x D^2: at D = 4097 eight rows per column cost
#: more than the solver evaluations they save, four were the best or within 7% of it
#: (``benchmarks/studies/precond_sample.py``).
PRECOND_ROWS_PER_COLUMN = 8


PRECOND_MAX_ROWS = 16384


PRECOND_FLOOR_PER_COLUMN = 4


#: Rows summed in float32 before their sum joins the preconditioner's double Gram matrix.
PRECOND_BLOCK = 256


PRECOND_MIN_ROWS = 2048


#: The dense form (D x D) is built up to this many columns (d + 1): O(D^2) memory and
#: O(D^3) time, and a product of D^2 per column each round, worth it while D is at most
#: about the rows a model trains on (``benchmarks/studies/iterations.py``).
DENSE_MAX_COLUMNS = 4097


#: Up to this many columns the dense form inverts with NumPy's LAPACK (which NumPy loads
#: anyway); above, with SciPy's Cholesky routines (a third of the work), imported then.
NUMPY_INVERSE_MAX = 512


#: Forms of the preconditioner, most to least exact (see :func:`preconditioner_forms`).
PRECOND_FORMS = ("dense", "lowrank", "diagonal", "none")


_NO_MATRIX = np.empty((0, 0), dtype=np.float32)


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

    ``M^-1 = (s * X'X / n + l2 * I)^-1`` over the n rows given, with ``s = 1 / C``: the
    classifiers' solver trains the C - 1 outputs of the reference-class form
    (:mod:`aflite_fast.core.reference_class`) and starts from ``H0 = (I + 1 1') x M^-1`` over
    (outputs x columns), the exact inverse of the objective's Hessian at uniform
    probabilities (the start).  Embedding features are
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
        s in place of ``1 / C``: a multiple-choice scorer gives rows centred within
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
    s = _curvature(n_classes, curvature)
    if form == "lowrank":
        return _lowrank_preconditioner(chunks, s, l2, n_threads)
    acc, n, D = _second_moments(chunks, form, n_threads)
    return _from_second_moments(acc, n, D, s, l2, form)


def _curvature(n_classes, curvature):
    """s of the matrix ``(s X'X / n + l2 I)^-1`` the preconditioner holds.

    Classifiers (``curvature`` None) train in the reference-class form
    (:mod:`aflite_fast.core.reference_class`), whose Hessian at uniform probabilities is
    ``(I - 1 1' / C) x (X'X / (C n) + l2 I)`` over (outputs x columns): the matrix with
    ``s = 1 / C`` and the solver's mixing of the outputs by ``I + 1 1'`` are its exact inverse.
    Multiple choice: ``curvature`` as given."""
    return 1.0 / n_classes if curvature is None else float(curvature)


def _second_moments(chunks, form, n_threads):
    """The sums the dense (X'X, double) or diagonal (the squares' column sums) form is built
    from, over the rows of ``chunks``: (sums, rows, columns); see :func:`preconditioner`."""
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
    return acc, n, D


def _from_second_moments(acc, n, D, s, l2, form):
    """The dense or diagonal :class:`Preconditioner` from :func:`_second_moments`' sums
    (``acc``, overwritten), the curvature ``s`` and the L2 weight ``l2``."""
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


def preconditioner_chunk_rows(budget, n_features):
    """Rows of the preconditioner's sample read at a time: a multiple of the kernel's row
    block that fits an eighth of ``budget`` (at least one block).  Changes no result."""
    rows = budget // (8 * 4 * (n_features + 1))
    return int(max(1, rows // PRECOND_BLOCK) * PRECOND_BLOCK)


def phase_preconditioner_bytes(n_active, n_features, budget, form="dense"):
    """Bytes of building the phase's preconditioner in ``form`` (``preconditioner.PRECOND_FORMS``)
    from the sample's chunks of :func:`preconditioner_chunk_rows` rows (the low-rank form
    keeps its whole sample): see :func:`preconditioner_bytes`."""
    D = n_features + 1
    chunk = None if form == "lowrank" else preconditioner_chunk_rows(budget, n_features)
    return preconditioner_bytes(form, n_active, D, chunk)


def phase_preconditioner_form(n_active, n_features, budget):
    """The form of the phase's preconditioner: the first of ``preconditioner_forms``
    (chosen from the sizes alone) whose building fits ``budget``.

    A budget too small for it falls back to a cheaper form and, below every form, to none:
    the preconditioner alone never refuses a run.  The solver then takes another path to the
    same optimum, so the results may differ from a run with more memory within the solver's
    tolerance (a warning says so); with the preferred form they never depend on the budget.
    """
    forms = preconditioner_forms(n_active, n_features + 1)
    for form in forms:
        if phase_preconditioner_bytes(n_active, n_features, budget, form) <= budget:
            break
    if form != forms[0]:
        warnings.warn(
            f"max_memory leaves {budget / 1e6:.3g} MB for the solver's preconditioner, too little for its "
            f"{forms[0]} form ({phase_preconditioner_bytes(n_active, n_features, budget, forms[0]) / 1e6:.3g} MB); "
            f"using {'no preconditioner' if form == 'none' else f'the {form} form'}: the same optimum, "
            "possibly more solver steps, and results that can "
            "differ from a run with more memory within the solver's tolerance", RuntimeWarning, stacklevel=2)
    return form


def whole_x_preconditioner(n_items, n_features, group=1):
    """Whether a phase's preconditioner is estimated from all of X's ``n_items`` rows (items of
    ``group`` candidate rows) rather than from its active rows: when the sample of all of
    X (:func:`preconditioner_sample`) would be every row of it.

    The active rows of such an X are all in its sample too, so a phase estimated it from
    them: a new matrix every phase (a Gram matrix and a D x D inverse, 67 ms at 1,580 x 1,025,
    paid a hundred times in a run of short phases), and none at all once the active rows were
    fewer than the columns (L-BFGS then took 16-20 iterations a model instead of 5).  From
    all of X's rows it is a function of X, the centre and the L2 bucket
    (:func:`phase_preconditioner_l2`) alone, the same whichever rows are active, so a run
    builds it once per bucket; a resumed run, a thread count, a memory budget and the Dask
    backend give the same bits.  Larger X (more rows than the sample) keep the sample of their
    active rows and the L2 weight of t.
    """
    D = int(n_features) + 1
    return preconditioner_sample(n_items, -(-D // max(1, int(group)))).size == int(n_items)


def reference_train_size(train_size):
    """The training-set size whose L2 weight a whole-X preconditioner takes
    (:func:`whole_x_preconditioner`): the largest power of two at or below ``train_size``
    (at least 1), so that a run of phases from 790 rows down to 150 needs three."""
    return 1 << (max(1, int(train_size)).bit_length() - 1)


def phase_preconditioner_l2(kernel_C, train_size, whole_x=False):
    """The L2 weight of a phase's preconditioner: a partition's of ``train_size`` rows, or, for
    a whole-X preconditioner, of :func:`reference_train_size` rows (within a factor 2 of the
    models' own: H0 sets the solver's path, never its optimum)."""
    return 1.0 / (kernel_C * (reference_train_size(train_size) if whole_x else train_size))


class KeptPreconditioner:
    """The whole-X preconditioner (:func:`whole_x_preconditioner`) a run keeps from phase to
    phase, held by the backend's workspace (one per run and view, never a module global).

    It keeps the last preconditioner built, by its source (X, the centre and the kernel rows'
    shape, compared by identity and value), form, curvature and L2 weight, and the Gram
    matrix's double sums of X's rows (when they take at most 1/32 of the phase's memory budget:
    memory held between phases beside the budget's plan), so a new L2 bucket redoes only the
    inverse.  A kept preconditioner is the same bits as one built from the rows: it changes the
    work, never a result.
    """

    def __init__(self):
        self._source = None  # (X, centre, shape key)
        self._sums = None  # (form, sums, rows, columns), never modified
        self._built = None  # (form, curvature, l2, Preconditioner)

    def _same_source(self, X, center, key):
        if self._source is None:
            return False
        kX, kcenter, kkey = self._source
        return kX is X and kkey == key and np.array_equal(kcenter, center)

    def get(self, X, center, key, form, s, l2, sums, keep_sums=True):
        """The preconditioner of ``form``, curvature ``s`` and L2 weight ``l2`` for the rows of
        ``X`` and ``center`` (``key``: the kernel rows' shape); ``sums()`` gives
        :func:`_second_moments` of its sample when they are not kept (kept if ``keep_sums``)."""
        if not self._same_source(X, center, key):
            self._source, self._sums, self._built = (X, np.array(center, copy=True), key), None, None
        if self._built is not None and self._built[:3] == (form, s, l2):
            return self._built[3]
        self._built = None
        if self._sums is not None and self._sums[0] == form:
            acc, n, D = self._sums[1:]
        else:
            self._sums = None
            acc, n, D = sums()
            if keep_sums:
                self._sums = (form, acc, n, D)
        precond = _from_second_moments(acc.copy() if keep_sums else acc, n, D, s, l2, form)
        self._built = (form, s, l2, precond)
        return precond


def phase_preconditioner(read_rows, active, n_features, n_classes, kernel_C, train_size, n_threads,
                         chunk_rows=None, form=None, group=1, whole_x=False, kept=None, kept_source=None):
    """The solver's initial inverse Hessian shared by every partition of a phase
    (a ``Preconditioner``).

    Estimated from rows spread evenly over the active set (:func:`preconditioner_sample`),
    so it is a function of the active set alone and no model depends on its block or on the
    backend.  ``read_rows(rows)`` returns the augmented float32 rows ``rows`` (C-contiguous),
    asked for ``chunk_rows`` at a time (a multiple of ``PRECOND_BLOCK``; default all at
    once; the low-rank form reads its sample at once); the L2 weight is the one of a
    partition of ``train_size`` rows.  ``form`` defaults to the first of
    ``preconditioner_forms`` (see :func:`phase_preconditioner_form` under a budget).

    ``whole_x``: ``active`` is every row (item) of X (:func:`whole_x_preconditioner`) and the
    L2 weight that of :func:`reference_train_size` rows; ``kept`` (a :class:`KeptPreconditioner`)
    then gives the one built for an earlier phase when it is the same, for ``kept_source`` =
    (X, centre, the kernel rows' shape, whether to keep the Gram matrix's sums).

    Multiple choice (``group`` = K): the sample is of items (as many as rows of D / K
    columns would take), ``read_rows(items)`` returns their candidate rows centred within
    each item (``layout.item_centered``), and the curvature is 1 (their second moment is the
    Hessian at equal scores); ``chunk_rows`` counts candidate rows.
    """
    D = n_features + 1
    if form is None:
        form = preconditioner_forms(active.size * group, D)[0]
    sample = active[preconditioner_sample(active.size, -(-D // group), form)]
    step = sample.size if chunk_rows is None or form == "lowrank" else max(1, int(chunk_rows))
    if group > 1 and step < sample.size:  # whole blocks of candidate rows per chunk
        step = max(1, step // (group * PRECOND_BLOCK)) * PRECOND_BLOCK

    def chunks():
        return (read_rows(sample[i:i + step]) for i in range(0, sample.size, max(step, 1)))

    l2 = phase_preconditioner_l2(kernel_C, train_size, whole_x)
    curvature = None if group == 1 else 1.0
    if kept is None or form not in ("dense", "diagonal"):
        return preconditioner(chunks(), n_classes, l2, n_threads, form=form, curvature=curvature)
    s = _curvature(n_classes, curvature)
    X, center, key, keep_sums = kept_source
    return kept.get(X, center, (key, group), form, s, l2, lambda: _second_moments(chunks(), form, n_threads),
                    keep_sums)
