"""The local backend's phase: blocks of partitions trained, then chunks of rows predicted.

For a phase on the active rows S (sorted row indices), given each partition's training
positions (drawn from its own seed, :mod:`aflite_fast.phase.partitions`, so nothing depends on
how partitions are blocked), :func:`score_phase`

1. plans the phase under the memory budget (:class:`_PhasePlan`);
2. (:func:`_train`) groups partitions into blocks whose training rows (the union of their training sets)
   fit the memory budget, gathers those rows once (sorted reads), and trains the block
   with one kernel call;
3. (:func:`_predict`) streams the active rows once in chunks and predicts them with all partitions' models
   together, accumulating per row: held-out predictions seen, correct, and the summed
   probability of the label.

Small X whose models train on fewer rows than columns (a few thousand rows of embeddings of a
thousand dimensions) trains every partition in one call of the row-space solver
(:mod:`aflite_fast.core.row_space`) from the Gram matrix of X's rows, which the workspace keeps
from phase to phase (:func:`row_space_sizes` decides from the sizes).

Multiple-choice X (N, K, d) takes the same path: a row of the phase is an item, gathered as
its K candidate rows (:mod:`aflite_fast.phase.multiple_choice`), trained and predicted by the same
kernel calls with ``group=K`` (one score per candidate, the softmax over an item's K scores).

So each phase reads X (number of blocks + 1) times at most: each block reads only its
training rows (a sorted subset of S), the prediction pass reads every active row once.  With
the default budget and data that fits in memory there is a single block.

Memory (``max_memory``, see :func:`aflite_fast.phase.plan.phase_overhead_bytes`): the budget first pays for the
arrays that grow with the number of rows (the n_active x m membership matrix, per-row
counts, the caller's per-row arrays, the models); what is left sets the blocks of partitions
(:func:`aflite_fast.phase.plan.training_bytes`) and the prediction chunk size.  Gathers never copy rows in the
source dtype beyond :data:`aflite_fast.io.inputs.GATHER_CHUNK_BYTES`.  Anonymous memory therefore
stays within ``max_memory`` plus a constant (interpreter, libraries, thread stacks, small
buffers); docs/out_of_core.md has the measurements.
"""
import time
import warnings
from dataclasses import dataclass

import numpy as np

from aflite_fast.core import layout, prediction, row_space, solver
from aflite_fast.core.losses import _LOSS_FORWARD, resolve_loss
from aflite_fast.core.preconditioning import (
    phase_preconditioner,
    phase_preconditioner_form,
    preconditioner_chunk_rows,
    whole_x_preconditioner,
)
from aflite_fast.io.rows import membership_matrix
from aflite_fast.phase.gather import gather, gather_new
from aflite_fast.phase.plan import (
    check_phase_memory,
    gather_chunk_bytes,
    kernel_C,
    phase_shape,
    plan_blocks,
    prediction_row_bytes,
    training_bytes,
)
from aflite_fast.phase.scores import PhaseScores
from aflite_fast.runtime.memory import parse_memory


def score_phase(X, codes, active, center, train_pos, *, n_classes, C=1.0, loss="ce",
                loss_params=None, options=None, max_memory=None, n_threads=1, warm_coef=None,
                proba_sum=None, on_block=None, workspace=None, position_bias=False):
    """Train every partition of a phase and score the active rows.

    Parameters
    ----------
    X : ndarray or memmap (N, d), float16/32/64, or (N, K, d): multiple choice (items of K
        candidates; see :mod:`aflite_fast.phase.multiple_choice`)
    codes : ndarray (N,), int32 label codes (multiple choice: the right candidate)
    active : ndarray (n_active,), int64 sorted row indices of the active set S
    center : ndarray (d,), float32 value subtracted from every row (see layout.augment_rows)
    train_pos : ndarray (m, t), int64 sorted training positions in S of each partition, rows
        shorter than t padded at the end with :data:`TRAIN_PAD` (partitions drawn as groups)
    n_classes : int (multiple choice: K)
    C, loss, loss_params, options : solver settings (see :mod:`aflite_fast.kernel`)
    max_memory : int or str, budget of the training scratch and prediction chunks
    n_threads : int
    warm_coef : ndarray (m, d + 1, C) float64, optional starting point of each partition
    proba_sum : ndarray (n_active, C) float64, optional; receives summed held-out probabilities
    on_block : callable, optional; called after each trained block and predicted chunk
    workspace : Workspace, optional; buffers reused from the previous phase (one block only)
    position_bias : bool, multiple choice only: a learned bias per candidate position

    Returns
    -------
    PhaseScores
    """
    plan = _PhasePlan.make(X, active, train_pos, n_classes, options or solver.SolverOptions(), max_memory,
                           n_threads, position_bias, proba_sum is not None)
    t0 = time.perf_counter()
    trained = _train(plan, X, codes, active, center, train_pos, C=C, loss=loss, loss_params=loss_params,
                     warm_coef=warm_coef, on_block=on_block, workspace=workspace)
    t1 = time.perf_counter()
    seen, correct, prob_label, n_chunks, read_predict = _predict(plan, X, codes, active, center, trained,
                                                                  proba_sum, on_block)
    t2 = time.perf_counter()
    return PhaseScores(seen=seen, correct=correct, prob_label=prob_label, coef=trained.coef,
                       mean_coef=trained.mean_coef, n_iter=trained.n_iter,
                       status=trained.status, n_blocks=trained.n_blocks,
                       seconds={"train": t1 - t0, "predict": t2 - t1, "read_train": trained.read_seconds,
                                "read_predict": read_predict, "preconditioner": trained.precond_seconds},
                       n_chunks=n_chunks, n_eval=trained.n_eval)


@dataclass
class _PhasePlan:
    """What a phase decides before it reads a row: shapes, the membership matrix, the memory
    budget left after the per-row arrays, the blocks of partitions."""

    n_active: int
    n_rows_x: int  # rows of X
    n_models: int
    G: int  # rows of an item (1, or K candidates)
    D: int  # kernel columns (features + intercept, + position biases)
    n_out: int  # outputs per row (classes, or one score per candidate)
    n_free: int  # unpenalised columns
    options: object
    n_threads: int
    position_bias: bool
    budget: int  # left for the blocks' training and the prediction chunks
    gather_bytes: int
    member: np.ndarray  # (n_active, m) uint8: position i trains partition j
    overhead: int  # bytes of the per-row arrays
    _blocks: list = None

    @property
    def d(self):
        """The kernel rows' columns but one (the features, for classification)."""
        return self.D - 1

    @property
    def blocks(self):
        """The blocks of partitions of the feature-space solver (planned when first asked: a
        phase in the row space trains every partition in one call)."""
        if self._blocks is None:
            self._blocks = plan_blocks(self.member, self.budget, self.D - 1, self.n_out, self.options.history,
                                       self.overhead, self.n_threads, self.G)
        return self._blocks

    @classmethod
    def make(cls, X, active, train_pos, n_classes, options, max_memory, n_threads, position_bias, with_proba):
        budget = parse_memory(max_memory)
        n_active = active.size
        m, t = train_pos.shape
        G, D, n_out = phase_shape(X, n_classes, position_bias)
        n_free = 1 if G == 1 else D - X.shape[2]
        overhead = check_phase_memory(X.shape[0], n_active, m, t, D - 1, n_out, budget, with_proba)
        gather_bytes = gather_chunk_bytes(budget)
        budget -= overhead
        member = membership_matrix(train_pos, n_active, np.empty((n_active, m), dtype=np.uint8))
        return cls(n_active, X.shape[0], m, G, D, n_out, n_free, options, n_threads, position_bias, budget,
                   gather_bytes, member, overhead)


@dataclass
class _Trained:
    """The models of a phase, and the rows the last block gathered (kept for prediction)."""

    coef: np.ndarray
    n_iter: np.ndarray
    status: np.ndarray
    n_eval: np.ndarray
    read_seconds: float
    precond_seconds: float
    n_blocks: int = 1  # calls of the solver (blocks of partitions)
    rows_in_memory: object = None  # the single block's gathered rows
    positions_in_memory: object = None  # their positions in the active set
    logits: object = None  # the models' logits on every active row (row space), or None
    mean_coef: object = None  # the models' mean (row space), or None


def _train(plan, X, codes, active, center, train_pos, *, C, loss, loss_params, warm_coef, on_block, workspace):
    """Train every block of partitions (step 2 of the module docstring)."""
    options, n_threads, G, D, n_out = plan.options, plan.n_threads, plan.G, plan.D, plan.n_out
    m, n_active, member, budget = plan.n_models, plan.n_active, plan.member, plan.budget
    n_classes = n_out if G == 1 else None
    coef = (np.zeros((m, D, n_out)) if warm_coef is None else np.array(warm_coef, dtype=np.float64))
    n_iter = np.zeros(m, dtype=np.int32)
    status = np.zeros(m, dtype=np.int32)
    n_eval = np.zeros(m, dtype=np.int32)
    Ck = kernel_C(C, n_classes) if G == 1 else C
    if _in_row_space(plan, train_pos, loss, loss_params):
        return _train_row_space(plan, X, codes, active, center, coef, Ck, loss, loss_params, on_block, workspace,
                                models=warm_coef is None)
    blocks = plan.blocks
    # each model's sums over groups of X's rows (items of multiple-choice X: a group is whole
    # items) are added by a fixed tree (layout.reduction_layout), so that processes holding
    # whole groups give the same bits (aflite_fast.phase.dask_backend)
    group_rows = layout.reduction_group_rows(X.shape[0])
    read_seconds = precond_seconds = 0.0
    precond = None
    if options.precondition:
        # small X: estimated from all of its rows, kept from phase to phase by the workspace
        # (whole_x_preconditioner); else from a sample of the active rows
        whole_x = whole_x_preconditioner(X.shape[0], plan.d, G)
        sampled = np.arange(X.shape[0], dtype=np.int64) if whole_x else active
        precond_form = phase_preconditioner_form(sampled.size * G, plan.d, budget)
        kept = workspace.preconditioner if whole_x and workspace is not None else None

        def read_sample(rows):
            nonlocal read_seconds
            r0 = time.perf_counter()
            # after the first phase the workspace holds the last phase's rows, of which these
            # are a subset: copied from there instead of read from X one row at a time
            out = None if workspace is None else workspace.take(X, rows, center, plan.position_bias)
            if out is None:
                out = gather(X, rows, center, np.empty((rows.size * G, D), dtype=np.float32), plan.gather_bytes,
                             plan.position_bias, n_threads)
            if G > 1:
                out = layout.item_centered(out, np.arange(rows.size), G)
            read_seconds += time.perf_counter() - r0
            return out

        p0 = time.perf_counter()
        chunk_rows = preconditioner_chunk_rows(budget, plan.d)

        def build():
            return phase_preconditioner(read_sample, sampled, plan.d, n_out, Ck, train_pos.shape[1], n_threads,
                                        chunk_rows, precond_form, G, whole_x=whole_x, kept=kept,
                                        kept_source=(X, center, (D, plan.position_bias), D * D * 8 <= budget // 32))

        if whole_x or workspace is None:  # small X: the workspace's KeptPreconditioner
            precond = build()
        else:  # the same active rows again (the chance check, the null): the same preconditioner
            precond = workspace.sampled_preconditioner(
                (X, center, (D, plan.position_bias, n_out, Ck, train_pos.shape[1], n_threads, chunk_rows,
                             precond_form, G)), active, build)
        precond_seconds = time.perf_counter() - p0
    in_block = np.empty(n_active, dtype=bool)
    trained = _Trained(coef, n_iter, status, n_eval, 0.0, precond_seconds, n_blocks=len(blocks))
    for block in blocks:
        # union of the block's training rows, without an n_active x len(block) copy of member
        if len(block) == m:  # every partition: one pass along member's rows, not m down its columns
            np.any(member, axis=1, out=in_block)
        else:
            in_block[:] = False
            for j in block:
                np.logical_or(in_block, member[:, j], out=in_block)
        union = np.flatnonzero(in_block)
        if (len(blocks) == 1 and union.size >= 0.9 * n_active
                and training_bytes(n_active, m, plan.d, n_out, options.history, int(np.count_nonzero(member)),
                                   n_threads, G) <= budget):
            # (nearly) every active row trains some partition: take them all, so the gather is
            # one sequential pass (no row picking) and prediction finds every row gathered.
            # Rows that train no model change no result: the kernel visits members only.
            union = np.arange(n_active, dtype=np.int64)
            bm = member
        else:
            bm = member[np.ix_(union, block)]
        rows = active[union]
        r0 = time.perf_counter()
        if workspace is not None and len(blocks) == 1:
            Xa = workspace.gather(X, rows, center, plan.gather_bytes, plan.position_bias, n_threads)
        else:
            Xa = gather_new(X, rows, center, plan.gather_bytes, plan.position_bias, n_threads)
        read_seconds += time.perf_counter() - r0
        coef_b = np.ascontiguousarray(coef[block])
        coef_b, info = solver.train_models(
            Xa, codes[rows], bm, n_out, C=Ck, loss=loss, loss_params=loss_params,
            coef=coef_b, positions=union, precond=precond, options=options,
            n_threads=n_threads, group=G, n_free=plan.n_free, leaves=rows // group_rows)
        coef[block] = coef_b
        n_iter[block] = info["n_iter"]
        status[block] = info["status"]
        n_eval[block] = info["n_eval"]
        if len(blocks) == 1:
            # one block (the usual case): its rows are nearly all the active rows (with 64
            # partitions at t/N = 0.1 all but 0.9^64 of them); predict those from the rows
            # already gathered instead of reading X again
            trained.rows_in_memory, trained.positions_in_memory = Xa, union
        del Xa, bm, rows, union, coef_b
        if on_block is not None:
            on_block()
    trained.read_seconds = read_seconds
    return trained


def row_space_sizes(n_rows_x, train_size, n_columns, n_classes, loss="ce", loss_params=None):
    """Whether a phase of classifiers on X of ``n_rows_x`` rows (``train_size`` rows a model,
    ``n_columns`` kernel columns) trains in the row space (:mod:`aflite_fast.core.row_space`),
    from the sizes and the loss alone (the forward-corrected loss stays in the feature space)."""
    if not row_space.row_space_worthwhile(train_size, n_columns, n_rows_x, n_classes):
        return False
    return resolve_loss(loss, loss_params, n_classes).code != _LOSS_FORWARD


def _in_row_space(plan, train_pos, loss, loss_params):
    """Whether the phase trains in the row space: :func:`row_space_sizes`, then kept only if the
    budget holds the Gram matrix and all active rows (else the feature-space solver, with a
    warning: its path, so its bits, differ)."""
    if plan.G != 1 or not row_space_sizes(plan.n_rows_x, train_pos.shape[1], plan.D, plan.n_out, loss, loss_params):
        return False
    need = (row_space.row_space_bytes(plan.n_rows_x, train_pos.shape[1], plan.D, plan.n_out, plan.options.history,
                                      plan.n_threads)
            + layout.row_buffer_size(plan.n_active, plan.D) * 4
            + plan.n_models * plan.D * plan.n_out * 8 * 2
            # the logits from K: the rows' coefficients (float32), their product (double), the logits
            + plan.n_active * plan.n_models * plan.n_out * (4 + 8 + 4))
    if need > plan.budget:
        warnings.warn(f"max_memory leaves {plan.budget / 1e6:.0f} MB for training, less than the "
                      f"{need / 1e6:.0f} MB of the row-space solver of {plan.n_active} rows; training in the feature "
                      "space instead (the same optimum by another path: results differ within the solver's "
                      "tolerance)", RuntimeWarning, stacklevel=4)
        return False
    return True


def _train_row_space(plan, X, codes, active, center, coef, Ck, loss, loss_params, on_block, workspace, models):
    """Every partition in one call of the row-space solver, from the Gram matrix of X's rows
    (kept by the workspace from phase to phase, with X's kernel rows: a phase reads its active
    rows there, nothing is gathered or moved); the models' logits on the active rows from it
    too, and their weights only if ``models`` (a cold phase, whose models are checked) or where
    the logits cannot come from K (starts that differ)."""
    n_threads, D, n_active = plan.n_threads, plan.D, plan.n_active
    read_seconds = 0.0
    p0 = time.perf_counter()

    # the Gram matrix and H0 of all of X's rows: functions of X alone (so of no phase's rows),
    # kept by the workspace for every later phase, with the kernel rows they are of
    every = np.arange(X.shape[0], dtype=np.int64)

    def build():
        nonlocal read_seconds
        r0 = time.perf_counter()
        rows_all = gather_new(X, every, center, plan.gather_bytes, False, n_threads)
        read_seconds = time.perf_counter() - r0
        gram = row_space.RowGram(every, rows_all[:, :D - 1], n_threads)
        gram.preconditioner(rows_all[:, :D - 1], n_threads=n_threads)
        gram.kernel_rows = rows_all
        return gram

    gram = build() if workspace is None else workspace.row_gram(X, every, center, build)
    gram_seconds = time.perf_counter() - p0
    coef, mean, logits, info = row_space.phase_models_row_space(
        gram.kernel_rows, codes[active], plan.member, plan.n_out, gram, gram.lookup(active), C=Ck, loss=loss,
        loss_params=loss_params, coef=coef, options=plan.options, n_threads=n_threads,
        precond=gram.preconditioner(None) if plan.options.precondition else None, rows=active, models=models)
    trained = _Trained(coef, info["n_iter"], info["status"], info["n_eval"], read_seconds, gram_seconds)
    if logits is None:  # predicted from the models' weights: the active rows
        trained.rows_in_memory = gram.kernel_rows[active]
        trained.positions_in_memory = np.arange(n_active, dtype=np.int64)
    trained.logits, trained.mean_coef = logits, mean
    if on_block is not None:
        on_block()
    return trained


def _predict(plan, X, codes, active, center, trained, proba_sum, on_block):
    """Predict every active row with every model, counting the held-out predictions (step 3);
    returns (seen, correct, prob_label, prediction chunks, seconds reading X)."""
    G, n_out, n_threads, n_active, member = plan.G, plan.n_out, plan.n_threads, plan.n_active, plan.member
    read_seconds = 0.0
    seen = np.zeros(n_active, dtype=np.int32)
    correct = np.zeros(n_active, dtype=np.int32)
    prob_label = np.zeros(n_active, dtype=np.float64)
    if trained.logits is not None:
        # the row space's logits of every active row (from K): only the counts are left to do
        heldout = np.subtract(1, member, dtype=np.uint8)
        prediction.predict_from_logits(trained.logits, codes[active], heldout, n_out, seen, correct, prob_label,
                                       proba_sum, n_threads)
        trained.logits = trained.rows_in_memory = trained.positions_in_memory = None
        if on_block is not None:
            on_block()
        return seen, correct, prob_label, 1, read_seconds
    W = prediction.stack_weights(trained.coef)
    per_row = prediction_row_bytes(plan.d, plan.n_models, n_out) * G
    # positions to predict, in runs: rows of the trained block (already gathered) and the rest;
    # a run of consecutive positions is a slice (no copies of the per-row arrays)
    runs = [(slice(0, n_active), None)]
    Xa_all, union_all = trained.rows_in_memory, trained.positions_in_memory
    trained.rows_in_memory = trained.positions_in_memory = None
    if Xa_all is not None:
        if union_all.size == n_active:
            runs = [(slice(0, n_active), Xa_all)]
        else:
            rest = np.ones(n_active, dtype=bool)
            rest[union_all] = False
            runs = [(union_all, Xa_all), (np.flatnonzero(rest), None)]
    chunk = int(max(16, min(n_active, plan.budget // per_row)))
    n_chunks = 0
    for pos, rows_in_memory in runs:
        size = pos.stop - pos.start if isinstance(pos, slice) else pos.size
        for s0 in range(0, size, chunk):
            p = (slice(pos.start + s0, min(pos.stop, pos.start + s0 + chunk)) if isinstance(pos, slice)
                 else pos[s0:s0 + chunk])
            if rows_in_memory is not None:
                Xa = rows_in_memory[s0 * G:(s0 + chunk) * G]
            else:
                r0 = time.perf_counter()
                Xa = gather_new(X, active[p], center, plan.gather_bytes, plan.position_bias, n_threads)
                read_seconds += time.perf_counter() - r0
            heldout = np.subtract(1, member[p], dtype=np.uint8)
            s_, c_, pl_ = seen[p], correct[p], prob_label[p]
            ps_ = None if proba_sum is None else proba_sum[p]
            prediction.predict_accumulate(Xa, codes[active[p]], heldout, W, n_out, s_, c_, pl_, ps_,
                                          n_threads, G)
            if not isinstance(p, slice):  # fancy indexing copied: write back
                seen[p], correct[p], prob_label[p] = s_, c_, pl_
                if proba_sum is not None:
                    proba_sum[p] = ps_
            n_chunks += 1
            del Xa, heldout
            if on_block is not None:
                on_block()
    del Xa_all, runs
    return seen, correct, prob_label, n_chunks, read_seconds
