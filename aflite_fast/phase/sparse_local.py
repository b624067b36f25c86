"""The local backend's phase on sparse (CSR) X: models trained in groups, then every row predicted.

:func:`score_phase_sparse` takes the arguments of :func:`aflite_fast.phase.local.score_phase`
and returns the same :class:`~aflite_fast.phase.scores.PhaseScores`:

1. the active rows are taken from X once, as CSR in the kernel's types
   (:class:`~aflite_fast.core.sparse_solver.CSRRows`; X memory-mapped from a file larger than
   the budget is read per group of models instead: :mod:`aflite_fast.phase.sparse_rows`);
2. the partitions' models train in groups of models that ``max_memory`` holds
   (:func:`model_group_size`), each over the columns its own training rows use (Newton-CG for
   the cross-entropy loss, else L-BFGS: :func:`~aflite_fast.core.sparse_solver.phase_solver`);
   each model's bits are the same whatever its group: a model's sums never depend on the other
   models of the call, a Newton-CG model is solved alone and L-BFGS's width is the phase's (the
   most columns any model uses);
3. every active row is predicted by the models that hold it out, group by group (a row's counts
   added in model order, so the grouping changes no bit).

``center`` is not subtracted (it would fill every row): the unpenalised intercept takes the
columns' means, and the models are those of the uncentred rows (docs/sparse.md).
"""
import time
from types import SimpleNamespace

import numpy as np

from aflite_fast.core import sparse_solver
from aflite_fast.core.solver import SolverOptions
from aflite_fast.io.rows import membership_matrix
from aflite_fast.phase.plan import kernel_C
from aflite_fast.phase.scores import PhaseScores
from aflite_fast.phase.sparse_rows import active_lengths, fit_predict_mapped, held_rows, is_mapped, rows_bytes
from aflite_fast.runtime.memory import format_size, parse_memory


def phase_fixed_bytes(rows, n_models, n_features, n_classes, n_threads, with_proba=False, width=None,
                      solver="newton", max_rows=0, n_column_entries=0, max_nonzeros=0, warm=False):
    """Bytes of a sparse phase that do not depend on how its models are grouped: the CSR rows,
    the membership and per-row arrays, every model's coefficients and column list
    (``n_column_entries`` columns in all) and the threads' scratch (``width``: the solver's
    local rows, default ``n_features + 1``; ``max_rows``, ``max_nonzeros``: the most training
    rows and non-zeros of a model; ``warm``: the caller's warm start is held beside the phase's
    copy of it, so the coefficients count twice)."""
    n = rows.n_rows
    width = n_features + 1 if width is None else int(width)
    per_row = n_models + 8 + 8 + 4 + 4 + 8 + (8 * n_classes if with_proba else 0)
    if solver == "lbfgs":
        scratch = sparse_solver.thread_bytes(width - 1, n_classes)
    else:
        scratch = sparse_solver.newton_thread_bytes(n_features, n_classes, width - 1, max_rows, max_nonzeros)
    return (rows.nbytes + n * per_row + (2 if warm else 1) * 8 * n_models * (n_features + 1) * n_classes
            + 8 * int(n_column_entries) + n_threads * scratch)


def in_memory_bytes(lengths, lists, n_features, n_classes, n_threads, with_proba, solver, history, warm=False):
    """A bound on the bytes of the in-memory phase (:func:`fit_predict`) with one model a group,
    from the active rows' stored values (``lengths``) and each model's training rows (``lists``)
    alone, before the rows are read: each model's columns at most its stored values and d."""
    d = int(n_features)
    nnz = [int(lengths[lst].sum()) for lst in lists]
    k = min(d, max(nnz, default=0))

    # the CSR rows' size in the kernel's types, as CSRRows.nbytes will be once they are read
    rows = SimpleNamespace(n_rows=int(lengths.size), nbytes=rows_bytes(int(lengths.sum()), int(lengths.size)))
    fixed = phase_fixed_bytes(rows, len(lists), d, n_classes, n_threads, with_proba, k + 1, solver,
                              max((lst.size for lst in lists), default=0), sum(min(d, z) for z in nnz),
                              max(nnz, default=0), warm)
    return fixed + sparse_solver.model_bytes(d, n_classes, history, k, solver)


def model_group_size(budget, fixed, n_models, n_features, n_classes, history, n_columns=None, solver="newton"):
    """Models trained (and predicted) together under ``budget`` bytes; MemoryError naming
    ``max_memory`` when not even one fits."""
    per_model = sparse_solver.model_bytes(n_features, n_classes, history, n_columns, solver)
    size = (budget - fixed) // per_model
    if size < 1:
        raise MemoryError(
            f"max_memory={format_size(budget)} is too small for one model of a sparse phase: "
            f"{format_size(per_model)} per model ({n_features} features x {n_classes} classes, "
            f"with the solver's state) on top of {format_size(fixed)} of rows, per-row arrays, "
            "coefficients and the solver's scratch; raise max_memory")
    return int(min(n_models, size))


def score_phase_sparse(X, codes, active, center, train_pos, *, n_classes, C=1.0, loss="ce", loss_params=None,
                       options=None, max_memory=None, n_threads=1, warm_coef=None, proba_sum=None,
                       on_block=None, workspace=None, position_bias=False):
    """Train every partition of a phase on sparse X and score the active rows.

    Parameters are those of :func:`aflite_fast.phase.local.score_phase`; X is a CSR matrix
    checked by :func:`aflite_fast.io.sparse.check_sparse`, ``center`` is not used (see the
    module docstring) and ``workspace`` is ignored.  ``position_bias`` must be False (sparse X
    is 2-D: no multiple choice).

    Returns
    -------
    PhaseScores
        ``n_blocks`` counts the groups of models.
    """
    if position_bias:
        raise ValueError("position_bias applies to multiple-choice X, which cannot be sparse")
    options = options or SolverOptions()
    budget = parse_memory(max_memory)
    t0 = time.perf_counter()
    m, t = train_pos.shape
    lists = [np.ascontiguousarray(tp[tp >= 0], dtype=np.int64) for tp in train_pos]
    # the active rows in memory, or None: X mapped from a file larger than the budget (phase.sparse_rows)
    need = None
    if is_mapped(X):
        need = in_memory_bytes(active_lengths(X, active), lists, X.shape[1], n_classes, n_threads,
                               proba_sum is not None, sparse_solver.phase_solver(loss, loss_params, n_classes),
                               options.history, warm_coef is not None)
    rows = held_rows(X, active, budget, need)
    read_seconds = time.perf_counter() - t0
    y = np.ascontiguousarray(codes[active], dtype=np.int32)
    member = membership_matrix(train_pos, active.size, np.empty((active.size, m), dtype=np.uint8))
    heldout = np.subtract(1, member, out=member)
    solver = dict(n_classes=n_classes, C=kernel_C(C, n_classes), loss=loss, loss_params=loss_params, options=options,
                  budget=budget, n_threads=n_threads, warm_coef=warm_coef, proba_sum=proba_sum, on_block=on_block)
    fit = (fit_predict(rows, y, lists, heldout, **solver) if rows is not None
           else fit_predict_mapped(X, active, y, lists, heldout, **solver))
    seconds = {"read_train": 0.0, "read_predict": 0.0, **fit["seconds"]}
    seconds["read_train"] += read_seconds
    seconds["train"] += read_seconds
    return PhaseScores(seen=fit["seen"], correct=fit["correct"], prob_label=fit["prob_label"], coef=fit["coef"],
                       n_iter=fit["n_iter"], status=fit["status"], n_blocks=fit["n_groups"], seconds=seconds,
                       n_chunks=fit["n_groups"], n_eval=fit["n_eval"])


def fit_predict(rows, y, lists, heldout, *, n_classes, C, loss="ce", loss_params=None, options=None,
                budget, n_threads=1, warm_coef=None, proba_sum=None, on_block=None):
    """Train one model per entry of ``lists`` on CSR ``rows`` and add its predictions of the rows
    it holds out (``heldout`` (n, B) uint8) to per-row counts, the models in groups that
    ``budget`` bytes hold.

    ``C`` is the kernel's (:func:`aflite_fast.phase.plan.kernel_C`).  Each model is solved over
    its own columns (:func:`aflite_fast.core.sparse_solver.train_sparse_models`): by Newton-CG
    for the cross-entropy loss, else by L-BFGS from the identity (docs/sparse.md).  Returns a
    dict: ``coef``, ``n_iter``, ``status``, ``n_eval``, ``seen``, ``correct``, ``prob_label``,
    ``n_groups``, ``seconds``.
    """
    options = options or SolverOptions()
    n, m, d = rows.n_rows, len(lists), rows.n_features
    t0 = time.perf_counter()
    # each model solved over its own columns; the width is the phase's, so no bit depends on the groups
    columns = sparse_solver.model_column_sets(rows, lists)
    width = sparse_solver.local_width(columns)
    solver = sparse_solver.phase_solver(loss, loss_params, n_classes)
    row_nnz = np.diff(rows.indptr)
    fixed = phase_fixed_bytes(rows, m, d, n_classes, n_threads, proba_sum is not None, width, solver,
                              max((lst.size for lst in lists), default=0), sum(c.size for c in columns),
                              max((int(row_nnz[lst].sum()) for lst in lists), default=0), warm_coef is not None)
    size = model_group_size(budget, fixed, m, d, n_classes, options.history, width - 1, solver)
    groups = [np.arange(s, min(m, s + size)) for s in range(0, m, size)]
    coef = np.zeros((m, d + 1, n_classes)) if warm_coef is None else np.array(warm_coef, dtype=np.float64)
    n_iter = np.zeros(m, dtype=np.int32)
    status = np.zeros(m, dtype=np.int32)
    n_eval = np.zeros(m, dtype=np.int32)
    for g in groups:
        coef_g, info = sparse_solver.train_sparse_models(
            rows, y, [lists[j] for j in g], n_classes, C=C, loss=loss, loss_params=loss_params,
            coef=np.ascontiguousarray(coef[g]), options=options, n_threads=n_threads,
            columns=[columns[j] for j in g], width=width, solver=solver)
        coef[g] = coef_g
        n_iter[g], status[g], n_eval[g] = info["n_iter"], info["status"], info["n_eval"]
        del coef_g
        if on_block is not None:
            on_block()
    t1 = time.perf_counter()
    seen = np.zeros(n, dtype=np.int32)
    correct = np.zeros(n, dtype=np.int32)
    prob_label = np.zeros(n, dtype=np.float64)
    for g in groups:
        W = sparse_solver.stack_weights_sparse(coef[g])
        sparse_solver.predict_sparse_accumulate(rows, y, heldout[:, g[0]:g[-1] + 1], W, seen, correct, prob_label,
                                                proba_sum, n_threads)
        del W
        if on_block is not None:
            on_block()
    t2 = time.perf_counter()
    return dict(coef=coef, n_iter=n_iter, status=status, n_eval=n_eval, seen=seen, correct=correct,
                prob_label=prob_label, n_groups=len(groups),
                seconds={"train": t1 - t0, "predict": t2 - t1, "preconditioner": 0.0})
