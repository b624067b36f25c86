"""Sparse rows of a phase held within ``max_memory``: in memory when they fit, else read from the
file per group of models.

X memory-mapped from an uncompressed ``save_npz`` file (:func:`aflite_fast.io.sparse.open_npz`)
is never copied whole into memory:

a. :func:`held_rows`: when the active rows, in the kernel's types (8 bytes a stored value, 8 a
   row), fit the budget with the phase's per-row arrays, the solver's scratch and one model
   (:func:`aflite_fast.phase.sparse_local.in_memory_bytes`), they are read into memory
   a piece at a time (:func:`aflite_fast.io.sparse.gather_csr_rows`) and the phase runs as on
   in-memory X (:func:`aflite_fast.phase.sparse_local.fit_predict`).  X held in memory is taken
   as it was before (:class:`~aflite_fast.core.sparse_solver.CSRRows`).
b. Otherwise :func:`fit_predict_mapped`, the out-of-core phase: one pass over the active rows, a
   piece at a time, finds each model's columns; the models are grouped in partition order so
   that each group's training rows (the union of its models' rows) and its models' solver state
   fit the budget; each group's rows are read (only those rows), its models trained, then
   dropped; then one pass over the active rows, a piece at a time, predicts every held-out row
   (models grouped by their prediction weights).  The file is read about ``groups + 2`` times.

Both give the bits of the in-memory phase: a model's sums run over its own rows in row order
whatever else is held, every model is solved at the phase's width (the most columns any model
uses, from the same rows), and a row's prediction counts are added in model order, one row at
a time.
"""
import time

import numpy as np

from aflite_fast.core import sparse_solver
from aflite_fast.core.solver import SolverOptions
from aflite_fast.io.sparse import CHUNK_VALUES, gather_csr_rows, is_mapped, row_pieces
from aflite_fast.runtime.memory import format_size


class GatheredRows:
    """CSR rows read from X in the kernel's types, with the attributes of
    :class:`~aflite_fast.core.sparse_solver.CSRRows` (``n_rows``, ``n_features``, ``indptr``
    int64, ``indices`` int32, ``data`` float32, ``nbytes``)."""

    def __init__(self, X, rows, max_values=CHUNK_VALUES):
        self.indptr, self.indices, self.data = gather_csr_rows(X, rows, max_values)
        self.n_rows, self.n_features = int(self.indptr.size - 1), int(X.shape[1])

    @property
    def nbytes(self):
        return self.indptr.nbytes + self.indices.nbytes + self.data.nbytes


def active_lengths(X, active):
    """Stored values of each active row (int64)."""
    return (np.asarray(X.indptr[active + 1], dtype=np.int64) - np.asarray(X.indptr[active], dtype=np.int64))


def rows_bytes(n_values, n_rows):
    """Bytes of CSR rows in the kernel's types: 8 a stored value (int32 index, float32 value), 8 a row."""
    return 8 * int(n_values) + 8 * (int(n_rows) + 1)


def fixed_bytes(n_rows, n_models, n_features, n_classes, n_threads, with_proba=False, scratch=None, warm=False):
    """Bytes of a phase on mapped rows that do not depend on its groups: the per-row arrays (those
    of :func:`aflite_fast.phase.sparse_local.phase_fixed_bytes`, plus each row's length and the
    groups' row mask), every model's coefficients and column marks, and the threads' scratch
    (``scratch`` bytes a thread; default the member pass's at full width); ``warm``: the
    caller's warm start is held beside the phase's copy, so the coefficients count twice."""
    per_row = n_models + 8 + 8 + 4 + 4 + 8 + 8 + 1 + (8 * n_classes if with_proba else 0)
    if scratch is None:
        scratch = sparse_solver.thread_bytes(n_features, n_classes)
    return (n_rows * per_row + (2 if warm else 1) * 8 * n_models * (n_features + 1) * n_classes
            + n_models * n_features + n_threads * int(scratch))


def held_rows(X, active, budget, need):
    """The active rows of CSR X for the in-memory phase, or None when X is memory-mapped and the
    in-memory phase would need more than ``budget`` (``need`` bytes, the caller's bound: then
    :func:`fit_predict_mapped`); see the module docstring, a."""
    if not is_mapped(X):
        return sparse_solver.CSRRows(X, active)
    if need > budget:
        return None
    return GatheredRows(X, active, piece_values(budget))


def piece_values(budget):
    """Stored values read at a time: a 64th of the budget, at most :data:`CHUNK_VALUES`."""
    return int(min(CHUNK_VALUES, max(1024, budget // 64 // 16)))


def _group_models(lists, lengths, per_model, room, budget):
    """Models grouped in order so that each group's union of training rows (in the kernel's
    types) and its models' solver state fit ``room`` bytes; MemoryError when one model does not."""
    n = lengths.size
    groups, mask = [], np.zeros(n, dtype=bool)
    current, values, count = [], 0, 0
    for j, rows in enumerate(lists):
        new = rows[~mask[rows]]
        more_values, more_rows = int(lengths[new].sum()), new.size
        if current and rows_bytes(values + more_values, count + more_rows) + per_model * (len(current) + 1) > room:
            groups.append(np.asarray(current))
            mask[:] = False
            current, values, count = [], 0, 0
            new = rows
            more_values, more_rows = int(lengths[rows].sum()), rows.size
        if not current and rows_bytes(more_values, more_rows) + per_model > room:
            raise MemoryError(
                f"max_memory={format_size(budget)} is too small to train one model of a sparse phase on a mapped "
                f"file: its "
                f"{rows.size} training rows ({format_size(rows_bytes(more_values, more_rows))}) and its solver "
                f"state ({format_size(per_model)}) need more than the {format_size(max(room, 0))} left after the "
                "per-row arrays and coefficients; raise max_memory or lower train_size")
        mask[new] = True
        values, count = values + more_values, count + more_rows
        current.append(j)
    if current:
        groups.append(np.asarray(current))
    return groups


def fit_predict_mapped(X, active, y, lists, heldout, *, n_classes, C, loss="ce", loss_params=None, options=None,
                       budget, n_threads=1, warm_coef=None, proba_sum=None, on_block=None):
    """:func:`aflite_fast.phase.sparse_local.fit_predict` on the active rows of memory-mapped CSR
    X, read from the file a group of models at a time (module docstring, b); the same
    arguments (``lists`` and ``heldout`` by position in ``active``), the same dict, and
    ``seconds`` adds ``read_train`` and ``read_predict`` (the reads of the file)."""
    options = options or SolverOptions()
    n, m, d = active.size, len(lists), X.shape[1]
    piece = piece_values(budget)
    t0 = time.perf_counter()
    lengths = active_lengths(X, active)
    solver = sparse_solver.phase_solver(loss, loss_params, n_classes)
    read = {"train": 0.0, "predict": 0.0}

    def gather(positions, what):
        t = time.perf_counter()
        rows = GatheredRows(X, active[positions], piece)
        read[what] += time.perf_counter() - t
        return rows

    # each model's columns, from one pass over the active rows (the same sets as from all of them at once)
    marks = np.zeros((m, d), dtype=bool)
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    for a, b in row_pieces(bounds, piece):
        part = gather(np.arange(a, b), "train")
        for j, rows in enumerate(lists):
            lo, hi = np.searchsorted(rows, [a, b])
            if hi > lo:
                marks[j, sparse_solver.model_column_sets(part, [rows[lo:hi] - a])[0]] = True
        del part
    columns = [np.flatnonzero(mark) for mark in marks]
    del marks
    width = sparse_solver.local_width(columns)
    per_model = sparse_solver.model_bytes(d, n_classes, options.history, width - 1, solver)
    # the threads' scratch of the solver that trains the models (Newton-CG: one model's rows and
    # vectors a thread, sized by the largest model), as the in-memory phase counts it
    scratch = (sparse_solver.newton_thread_bytes(d, n_classes, width - 1, max((r.size for r in lists), default=0),
                                                 max((int(lengths[r].sum()) for r in lists), default=0))
               if solver == "newton" else None)
    fixed = fixed_bytes(n, m, d, n_classes, n_threads, proba_sum is not None, scratch, warm_coef is not None)
    groups = _group_models(lists, lengths, per_model, budget - fixed, budget)
    coef = np.zeros((m, d + 1, n_classes)) if warm_coef is None else np.array(warm_coef, dtype=np.float64)
    n_iter = np.zeros(m, dtype=np.int32)
    status = np.zeros(m, dtype=np.int32)
    n_eval = np.zeros(m, dtype=np.int32)
    for g in groups:
        union = np.unique(np.concatenate([lists[j] for j in g]))
        rows = gather(union, "train")
        local = [np.searchsorted(union, lists[j]).astype(np.int64) for j in g]
        coef_g, info = sparse_solver.train_sparse_models(
            rows, y[union], local, n_classes, C=C, loss=loss, loss_params=loss_params,
            coef=np.ascontiguousarray(coef[g]), options=options, n_threads=n_threads,
            columns=[columns[j] for j in g], width=width, solver=solver)
        coef[g] = coef_g
        n_iter[g], status[g], n_eval[g] = info["n_iter"], info["status"], info["n_eval"]
        del coef_g, rows, local
        if on_block is not None:
            on_block()
    t1 = time.perf_counter()
    # prediction: the models' float32 weights in groups that fit beside one piece of rows
    weights = 4 * (d + 1) * n_classes
    size = max(1, min(m, (budget - fixed - rows_bytes(piece, piece)) // weights))
    seen = np.zeros(n, dtype=np.int32)
    correct = np.zeros(n, dtype=np.int32)
    prob_label = np.zeros(n, dtype=np.float64)
    for s in range(0, m, size):
        W = sparse_solver.stack_weights_sparse(coef[s:s + size])
        for a, b in row_pieces(bounds, piece):
            part = gather(np.arange(a, b), "predict")
            sparse_solver.predict_sparse_accumulate(part, y[a:b], heldout[a:b, s:s + size], W, seen[a:b],
                                                    correct[a:b], prob_label[a:b],
                                                    None if proba_sum is None else proba_sum[a:b], n_threads)
        del W
        if on_block is not None:
            on_block()
    t2 = time.perf_counter()
    return dict(coef=coef, n_iter=n_iter, status=status, n_eval=n_eval, seen=seen, correct=correct,
                prob_label=prob_label, n_groups=len(groups),
                seconds={"train": t1 - t0, "predict": t2 - t1, "preconditioner": 0.0,
                         "read_train": read["train"], "read_predict": read["predict"]})
