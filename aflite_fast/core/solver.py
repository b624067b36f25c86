"""Python side of the compiled kernel: validate, allocate and call ``_kernel``.

The kernel trains a *block* of multinomial logistic regressions at once, each on a subset of
the same rows, and predicts held-out rows with all of them in one pass (see ``_kernel.pyx``).
Rows handed to the kernel are float32 with a trailing column of ones (the intercept);
``augment_rows`` and :mod:`aflite_fast.io.inputs` produce them.  ``preconditioner`` builds the
shared initial inverse Hessian of the solver from a sample of the rows, in the form that
``preconditioner_forms`` picks from the sizes.

Multiple choice (``group=K`` in :func:`train_models` and :func:`predict_accumulate`): an item's
K candidate rows are K consecutive rows and each model is one linear scorer (one output,
``n_classes=1``) trained with the softmax over each item's K scores; the same member pass
serves both shapes (``csrc/afl_member.h``, E).
"""
import numbers
from dataclasses import dataclass

import numpy as np

from aflite_fast.core import preconditioning
from aflite_fast.core.compiled import _kernel
from aflite_fast.core.layout import (
    COL_BLOCK,
    REDUCE_LEAVES,
    ROW_BLOCK,
    block_bounds,
    item_blocks,
    item_centered,
    reduction_layout,
    row_blocks_from_positions,
    super_blocks,
)
from aflite_fast.core.losses import _LOSS_FORWARD, MC_FORWARD_MESSAGE, resolve_loss
from aflite_fast.core.preconditioning import _NO_MATRIX, Preconditioner, preconditioner_forms, preconditioner_sample
from aflite_fast.core.reference_class import from_reference, to_reference, uses_reference
from aflite_fast.runtime.threads import limit_blas_threads

#: Share of a cold-started model's largest gradient entry at zero that its gradient must reach
#: (besides ``tol``) to stop as converged (:class:`SolverOptions`).
START_RTOL = _kernel.START_RTOL

#: The tolerances of ``tol="auto"`` (:func:`phase_tol`): a model on fewer training rows than
#: columns separates its rows, so its optimum is set by the L2 term alone and is flat, and the
#: same gradient leaves its held-out predictions further from the optimum's.
TOL_FEW_ROWS = 1e-4
TOL_MANY_ROWS = 3e-4

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
    tol : float, default=3e-4
        The default is what ``aflite``'s ``tol="auto"`` gives a phase whose models train on
        at least as many rows as they have columns (:func:`phase_tol`; 1e-4 on fewer).  Stop
        when the largest absolute gradient entry is at most ``tol`` (scikit-learn's
        ``tol`` for ``solver="lbfgs"``; the objective is the mean loss plus the L2 term) and,
        for a model started from zero, also at most ``START_RTOL`` (1e-2) times its value at
        zero.  The second test is scale-free: where the gradient at zero is already below
        ``tol`` (rows of a small scale, or twins of opposite labels whose terms cancel) the
        first alone would report the start as converged, an untrained model; elsewhere (a
        gradient at zero above ``tol / START_RTOL``) the first decides, as before.  Warm starts
        (a trained model) use ``tol`` alone.
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
        Start L-BFGS from the preconditioner of :func:`~aflite_fast.core.preconditioning.preconditioner` instead of the
        identity (callers that build one: the engine, oof, the estimators).  It changes the
        path of the solver, not its optimum.
    """

    tol: float = 3e-4
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


def check_tol(tol):
    """``tol`` checked: ``"auto"`` or a non-negative finite number (returned as a float)."""
    if isinstance(tol, str) and tol == "auto":
        return tol
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0 <= tol < np.inf:
        raise ValueError(f"tol must be 'auto' or a non-negative number, got {tol!r}")
    return float(tol)


def phase_tol(tol, train_size, n_columns):
    """The tolerance of a phase's models: ``tol`` itself, or for ``tol="auto"``
    :data:`TOL_FEW_ROWS` (1e-4) when the models train on fewer rows than they have columns
    (``n_columns``: the features and the ones column; multiple choice: items against the
    columns of a candidate's row) and :data:`TOL_MANY_ROWS` (3e-4) otherwise.

    A function of the sizes alone, so of the inputs: not of the solver that trains the phase,
    the threads or the memory budget.  Held-out argmax agreement of a phase's models with
    tightly converged float64 fits (benchmarks/RESULTS.md, "Agreement with tight fits"): on
    fewer rows than columns 99.56-99.96% at 1e-4 against 98.83-99.62% at 3e-4; on more rows
    than columns 99.47-99.69% at 3e-4.
    """
    tol = check_tol(tol)
    if tol != "auto":
        return tol
    return TOL_FEW_ROWS if train_size < n_columns else TOL_MANY_ROWS


def starting_point(coef, n_models, n_columns, n_classes):
    """``coef`` checked as a starting point of ``n_models`` models (C-contiguous float64, shape
    (n_models, n_columns, n_classes)), or zeros when None."""
    shape = (n_models, n_columns, n_classes)
    if coef is None:
        return np.zeros(shape, dtype=np.float64)
    if coef.shape != shape or coef.dtype != np.float64 or not coef.flags.c_contiguous:
        raise ValueError(f"coef must be a C-contiguous float64 array of shape {shape}")
    return coef


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
        Loss name from :mod:`aflite_fast.core.losses` or a resolved loss.
    loss_params : dict, optional
        Parameters of the loss (e.g. ``{"q": 0.7}``).
    coef : ndarray of shape (B, d + 1, n_classes), float64, optional
        Starting point (warm start); updated in place and returned.  Zeros when omitted.
        Classifiers (``group`` 1, two or more classes) are trained in the reference-class form
        (:mod:`aflite_fast.core.reference_class`) and come back with the last class's weights
        zero: the same probabilities as the zero-mean weights of the symmetric optimum
        (``reference_class.centered`` gives those).
    positions : ndarray of shape (n,), int64, optional
        Positions of the rows in the active set (sorted); they fix the summation blocks.
        Defaults to ``arange(n)``.
    precond : None, "auto", Preconditioner or ndarray of shape (d + 1, d + 1), float32
        Initial inverse Hessian of the solver (see :func:`~aflite_fast.core.preconditioning.preconditioner`; an array is the
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
    info : dict with arrays ``n_iter`` (accepted steps), ``status``, ``objective`` (the
        symmetric objective at the zero-mean weights of ``coef``) and ``n_eval`` (evaluations
        of objective and gradient), one entry per model
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
    coef = starting_point(coef, B, D, n_classes)
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
            precond = preconditioning.preconditioner(item_centered(Xa, sample, group), 1, float(np.mean(l2)), n_threads,
                                     form=form, curvature=1.0)
        else:
            sample = preconditioner_sample(n, D, form)
            rows = Xa if sample.size == n else Xa[sample]  # no copy when the sample is every row
            precond = preconditioning.preconditioner(rows, n_classes, float(np.mean(l2)), n_threads, form=form)
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
    # classifiers train in the reference-class form (C - 1 outputs, the same optimum)
    reference = uses_reference(n_classes, group)
    n_out = n_classes - reference
    work = to_reference(coef) if reference else coef
    with limit_blas_threads():
        _kernel.train_block(
            Xa, y, member, n_rows, row_blocks, sblocks,
            block_bounds(D, COL_BLOCK), pre.get("dense", _NO_MATRIX), work.reshape(B, D * n_out),
            l2, inv_n, n_out, spec.code, spec.params, spec.address,
            options.tol, options.ftol, options.max_iter, options.history,
            options.max_line_search, n_iter, status, fval, n_eval, n_threads,
            pre_diag=pre.get("diag"), pre_factor=pre.get("factor"), pre_core=pre.get("core"),
            pre_blocks=pre.get("factor_blocks"), group=group, n_free=n_free, reference=int(reference), **groups,
        )
    if reference:
        from_reference(work, out=coef)
    return coef, {"n_iter": n_iter, "status": status, "objective": fval, "n_eval": n_eval}


def train_models_with(evaluate, n_rows, n_columns, n_classes, *, C=1.0, loss="ce", loss_params=None,
                      coef=None, precond=None, options=None, n_threads=1, n_free=1, reference=None):
    """:func:`train_models` with the evaluation of loss and gradient done by ``evaluate``.

    The solver (``_kernel.LBFGSBlock``, the arithmetic of ``train_block``) runs here; every
    round it calls ``evaluate(models, W, scale, loss)`` with the models still running
    (int64 indices into the block), their class-major float32 trial weights
    (len(models), C, member_width(D); C - 1 outputs with ``reference``, to be evaluated in the
    reference-class form), their gradient scales and the resolved loss, and takes
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
    reference : bool, optional
        Train in the reference-class form (:mod:`aflite_fast.core.reference_class`; ``coef``
        keeps C columns, the last class's zero).  Default: as :func:`train_models` does, for
        two or more classes.

    Returns
    -------
    coef, info : as :func:`train_models` returns them
    """
    options = options or SolverOptions()
    D = int(n_columns)
    n_rows = np.asarray(n_rows, dtype=np.int64)
    B = n_rows.size
    spec = resolve_loss(loss, loss_params, n_classes)
    coef = starting_point(coef, B, D, n_classes)
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
                                         options=options, n_threads=n_threads, n_free=n_free,
                                         reference=reference)
            coef[cold] = start
    if reference is None:
        reference = uses_reference(n_classes)
    if reference and n_classes < 2:
        raise ValueError(f"reference=True needs two or more classes, got n_classes={n_classes}")
    l2 = 1.0 / (float(C) * n_rows)
    inv_n = 1.0 / n_rows.astype(np.float64)
    pre = precond.kernel_arguments(D)
    n_out = n_classes - bool(reference)
    work = to_reference(coef) if reference else coef
    solver = _kernel.LBFGSBlock(
        work.reshape(B, D * n_out), l2, inv_n, n_out, block_bounds(D, COL_BLOCK),
        pre.get("dense", _NO_MATRIX), options.tol, options.ftol, options.max_iter, options.history,
        options.max_line_search, n_threads, pre_diag=pre.get("diag"), pre_factor=pre.get("factor"),
        pre_core=pre.get("core"), pre_blocks=pre.get("factor_blocks"), n_free=n_free,
        reference=int(bool(reference)))
    with limit_blas_threads():
        while True:
            models, W = solver.trial()
            if models.size == 0:
                break
            sums = evaluate(models, W, solver.scales(), spec)
            solver.advance(np.ascontiguousarray(sums, dtype=np.float64))
    n_iter, status, fval, n_eval = solver.results()
    if reference:
        from_reference(work, out=coef)
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

    def sums(self, models, W, scale, loss, leaf_range=None, n_threads=1, reference=False):
        """(level, index, sums) of the reduction tree's whole subtrees of ``leaf_range``
        (default all leaves) that hold rows (``_kernel.member_eval_tree``), for ``models``,
        ``W``, ``scale`` as :func:`train_models_with` passes them, ``loss`` resolved (a
        built-in loss) and ``reference`` as given to it."""
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
                                            n_threads, self.group, int(bool(reference)))
