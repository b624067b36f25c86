"""Scores one AFLite phase: partition sampling, blocks of partitions, chunks of rows.

For a phase on the active rows S (sorted row indices) the engine

1. draws each partition's training positions from its own seed (``partition_train_positions``;
   whole groups of rows when given), so nothing depends on how partitions are blocked;
2. groups partitions into blocks whose training rows (the union of their training sets)
   fit the memory budget, gathers those rows once (sorted reads), and trains the block
   with one kernel call;
3. streams the active rows once in chunks and predicts them with all partitions' models
   together, accumulating per row: held-out predictions seen, correct, and the summed
   probability of the label.

Multiple-choice X (N, K, d) takes the same path: a row of the phase is an item, gathered as
its K candidate rows (:mod:`aflite_fast.multiple_choice`), trained and predicted by the same
kernel calls with ``group=K`` (one score per candidate, the softmax over an item's K scores).

So each phase reads X (number of blocks + 1) times at most: each block reads only its
training rows (a sorted subset of S), the prediction pass reads every active row once.  With
the default budget and data that fits in memory there is a single block.

Memory (``max_memory``, see :func:`phase_overhead_bytes`): the budget first pays for the
arrays that grow with the number of rows (the n_active x m membership matrix, per-row
counts, the caller's per-row arrays, the models); what is left sets the blocks of partitions
(:func:`training_bytes`) and the prediction chunk size.  Gathers never copy rows in the
source dtype beyond :data:`aflite_fast.data.GATHER_CHUNK_BYTES`.  Anonymous memory therefore
stays within ``max_memory`` plus a constant (interpreter, libraries, thread stacks, small
buffers); docs/out_of_core.md has the measurements.
"""
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from aflite_fast import _kernel, kernel
from aflite_fast._memory import format_size, parse_memory
from aflite_fast._rows import membership_matrix
from aflite_fast.data import GATHER_CHUNK_BYTES, gather_rows
from aflite_fast.multiple_choice import candidate_rows, gather_items, n_extra_columns


def seed_entropy(random_state):
    """Entropy (an int) for every seed of a run, from None, an int, or a numpy Generator."""
    if random_state is None:
        return np.random.SeedSequence().entropy
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(0, 2**63 - 1))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(0, 2**31 - 1))
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool) and random_state >= 0:
        return int(random_state)
    raise ValueError(f"random_state must be None, a non-negative int or a numpy Generator, got {random_state!r}")


#: Fill value of the training positions of a partition drawn as whole groups: each row of the
#: (m, t_max) array holds its partition's sorted positions, then this value up to t_max.
TRAIN_PAD = -1


def partition_train_positions(entropy, phase, n_active, train_size, n_partitions, groups=None):
    """Training positions (in the active set) of every partition of a phase.

    Partition j of phase p draws from ``SeedSequence(entropy, spawn_key=(p, j))``: a seed per
    partition, not per thread or block.  Without ``groups`` it draws ``train_size`` positions
    uniformly without replacement.  With ``groups`` it shuffles the groups present in the
    active set and takes them whole, in that order, until the training set holds at least
    ``train_size`` rows: so it holds from ``train_size`` to ``train_size + s - 1`` rows, s the
    size of the group that completed it, and no group is split between training and held out.

    Parameters
    ----------
    entropy : int
        Seed of the run (:func:`seed_entropy`).
    phase, n_active, train_size, n_partitions : int
    groups : ndarray (n_active,) of int, optional
        Group code of every active position: the draws depend on which positions share a code
        and on the codes' order (:func:`aflite_fast.groups.encode_groups` numbers groups in
        order of first appearance, so ids that name the same groups give the same draws).  The caller
        ensures ``train_size <= n_active - (largest group)``, so every partition holds out rows
        (:func:`aflite_fast.groups.check_group_train_size`).

    Returns
    -------
    ndarray of shape (n_partitions, t_max), int64
        Row j: partition j's sorted training positions.  Without groups t_max = train_size;
        with groups t_max is the largest training set and shorter rows end in
        :data:`TRAIN_PAD`.
    """
    if groups is not None:
        return _group_train_positions(entropy, phase, train_size, n_partitions, groups)
    out = np.empty((n_partitions, train_size), dtype=np.int64)
    for j in range(n_partitions):
        rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(phase, j)))
        out[j] = np.sort(rng.choice(n_active, size=train_size, replace=False))
    return out


def _group_train_positions(entropy, phase, train_size, n_partitions, groups):
    _, group_of, sizes = np.unique(np.asarray(groups), return_inverse=True, return_counts=True)
    group_of = group_of.ravel()
    n_groups = sizes.size
    picks = []
    for j in range(n_partitions):
        rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(phase, j)))
        order = rng.permutation(n_groups)
        # the shortest prefix of the shuffled groups with at least train_size rows
        n_taken = int(np.searchsorted(np.cumsum(sizes[order]), train_size)) + 1
        if n_taken >= n_groups:
            raise ValueError(f"groups: a training set of {train_size} rows drawn as whole groups takes all "
                             f"{n_groups} groups and leaves no row held out; lower train_size")
        taken = np.zeros(n_groups, dtype=bool)
        taken[order[:n_taken]] = True
        picks.append(np.flatnonzero(taken[group_of]))
    out = np.full((n_partitions, max(p.size for p in picks)), TRAIN_PAD, dtype=np.int64)
    for j, pos in enumerate(picks):
        out[j, :pos.size] = pos
    return out


def kernel_C(C, n_classes):
    """C for the softmax kernel so that the optimum is scikit-learn's LogisticRegression(C).

    For two classes scikit-learn fits the binomial model; the two-class softmax with the same
    L2 penalty on both weight vectors is that model with C doubled, so it gets C / 2.
    """
    return C / 2.0 if n_classes == 2 else C


def phase_shape(X, n_classes, position_bias=False):
    """(G, D, n_out) of the models of a phase on X: rows per item (1, or K candidates of
    multiple-choice X (N, K, d)), columns of the kernel rows, outputs per row (the classes,
    or one score per candidate)."""
    if X.ndim == 3:
        K = X.shape[1]
        return K, X.shape[2] + n_extra_columns(K, position_bias), 1
    return 1, X.shape[1] + 1, n_classes


def gather(X, rows, center, out, chunk_bytes=None, position_bias=False, n_threads=1):
    """The kernel rows of ``rows`` (sorted; items of multiple-choice X: K rows each) into ``out``."""
    if X.ndim == 3:
        return gather_items(X, rows, center, out, position_bias, chunk_bytes, n_threads)
    return gather_rows(X, rows, center, out, chunk_bytes, n_threads)


def gather_new(X, rows, center, chunk_bytes=None, position_bias=False, n_threads=1):
    """:func:`gather` of ``rows`` into new kernel rows (``kernel.empty_rows``), both on
    ``n_threads`` threads."""
    G, D, _ = phase_shape(X, 1, position_bias)
    out = kernel.empty_rows(len(rows) * G, D, n_threads=n_threads)
    return gather(X, rows, center, out, chunk_bytes, position_bias, n_threads)


def training_bytes(n_rows, n_models, n_features, n_classes, history, n_member=None, n_threads=1, group=1):
    """Scratch bytes of one kernel call training ``n_models`` models on ``n_rows`` rows.

    Per row: the float32 rows with their ones column (padded to the kernel's aligned stride),
    the membership mask, and the row indices, positions and label codes gathered for the
    block.  Per membership (``n_member``, at most ``n_rows * n_models``): its row in the
    per-model row lists.  Per model: the L-BFGS state (``2 * history + 4`` vectors), the
    block's coefficients, the class-major float32 weights and double gradient of the member
    pass, one double partial sum per thread, the preconditioner product's operand and result,
    and the row-block offsets.  Per call: the GEMM's packing buffer of that product.  With
    ``group`` = K (multiple choice; ``n_features`` then counts the columns of the kernel rows
    but one) a row is an item of K candidate rows.
    """
    D = n_features + 1
    Dp = _kernel.member_width(D)
    P = D * n_classes
    Pp = Dp * n_classes
    if n_member is None:
        n_member = n_rows * n_models
    rows = n_rows * (group * (Dp * 4 + 24) + n_models) + 4 * n_member * group
    solver = (n_models * P * 8 * (2 * history + 5) + n_models * Pp * (4 + 8)
              + max(1, n_threads) * n_models * (Pp + 1) * 8 + n_models * P * 2 * (4 + 8)
              + n_models * (n_rows * group // kernel.ROW_BLOCK + 2) * 8)
    pack = _kernel.gemm_pack_buffer_bytes(False, 2 * n_models * n_classes, D, kernel.COL_BLOCK)
    return rows + solver + pack


def prediction_row_bytes(n_features, n_models, n_classes, with_proba=False):
    """Bytes per row of a prediction chunk: float32 rows (padded stride), the float32 logits
    of every model (held a tile at a time, never more rows than the chunk), held-out mask
    and label codes (and nothing for ``proba_sum``, which the caller owns)."""
    return _kernel.member_width(n_features + 1) * 4 + n_models * n_classes * 4 + n_models + 16


def prediction_fixed_bytes(n_models, n_classes, n_features):
    """Bytes of one prediction call that do not grow with its rows: the GEMM's packing
    buffer."""
    return _kernel.gemm_pack_buffer_bytes(False, n_models * n_classes, n_features + 1,
                                          kernel.COL_BLOCK)


def preconditioner_chunk_rows(budget, n_features):
    """Rows of the preconditioner's sample read at a time: a multiple of the kernel's row
    block that fits an eighth of ``budget`` (at least one block).  Changes no result."""
    rows = budget // (8 * 4 * (n_features + 1))
    return int(max(1, rows // kernel.PRECOND_BLOCK) * kernel.PRECOND_BLOCK)


def preconditioner_bytes(n_active, n_features, budget, form="dense"):
    """Bytes of building the phase's preconditioner in ``form`` (``kernel.PRECOND_FORMS``)
    from the sample's chunks of :func:`preconditioner_chunk_rows` rows (the low-rank form
    keeps its whole sample): see ``kernel.preconditioner_bytes``."""
    D = n_features + 1
    chunk = None if form == "lowrank" else preconditioner_chunk_rows(budget, n_features)
    return kernel.preconditioner_bytes(form, n_active, D, chunk)


def phase_preconditioner_form(n_active, n_features, budget):
    """The form of the phase's preconditioner: the first of ``kernel.preconditioner_forms``
    (chosen from the sizes alone) whose building fits ``budget``.

    A budget too small for it falls back to a cheaper form and, below every form, to none:
    the preconditioner alone never refuses a run.  The solver then takes another path to the
    same optimum, so the results may differ from a run with more memory within the solver's
    tolerance (a warning says so); with the preferred form they never depend on the budget.
    """
    forms = kernel.preconditioner_forms(n_active, n_features + 1)
    for form in forms:
        if preconditioner_bytes(n_active, n_features, budget, form) <= budget:
            break
    if form != forms[0]:
        warnings.warn(
            f"max_memory leaves {budget / 1e6:.3g} MB for the solver's preconditioner, too little for its "
            f"{forms[0]} form ({preconditioner_bytes(n_active, n_features, budget, forms[0]) / 1e6:.3g} MB); "
            f"using {'no preconditioner' if form == 'none' else f'the {form} form'}: the same optimum, "
            "possibly more solver steps, and results that can "
            "differ from a run with more memory within the solver's tolerance", RuntimeWarning, stacklevel=2)
    return form


def gather_chunk_bytes(budget):
    """Scratch of one gather (rows in X's dtype): a 64th of the budget, at most
    :data:`aflite_fast.data.GATHER_CHUNK_BYTES`."""
    return int(min(GATHER_CHUNK_BYTES, max(4096, budget // 64)))


def phase_overhead_bytes(n_rows, n_active, n_models, train_size, n_features, n_classes,
                         with_proba=False, budget=None):
    """Bytes a phase holds outside its blocks and chunks; they grow with the number of rows.

    Engine, per active row: the uint8 membership matrix (``n_models`` bytes), the counts
    ``seen``/``correct``/``prob_label`` (16 bytes), the union mask and ``plan_blocks``
    temporaries (3 bytes), ``proba_sum`` when asked for (8 bytes per class).  Caller (the
    AFLite loop), per row of X: label codes, active indices, scores and their temporaries
    (about 48 bytes).  Training positions (8 bytes each), the models in float64 (twice: the
    phase's and the warm start) and float32 (the prediction operand), the fixed part of
    prediction (:func:`prediction_fixed_bytes`) and the gather buffer
    (:func:`gather_chunk_bytes` of ``budget``).  The preconditioner
    (:func:`preconditioner_bytes`) is built and its sample freed before any block is trained,
    so it needs the rest of the budget only for that moment.
    """
    D = n_features + 1
    per_active = n_models + 16 + 3 + (8 * n_classes if with_proba else 0)
    per_row = 48
    models = n_models * D * n_classes * (8 * 2 + 4)
    return (n_active * per_active + n_rows * per_row + n_models * train_size * 8 + models
            + prediction_fixed_bytes(n_models, n_classes, n_features)
            + (GATHER_CHUNK_BYTES if budget is None else gather_chunk_bytes(budget)))


def check_phase_memory(n_rows, n_active, n_models, train_size, n_features, n_classes, budget,
                       with_proba=False):
    """:func:`phase_overhead_bytes` of a phase, or a MemoryError with the numbers when the
    budget does not cover it.  Called before anything of that size is allocated (the loop
    calls it before its first phase), so a huge ``n_partitions`` is refused in these words,
    not by NumPy failing to allocate terabytes."""
    overhead = phase_overhead_bytes(n_rows, n_active, n_models, train_size, n_features, n_classes,
                                    with_proba, budget=budget)
    if overhead >= budget:
        raise MemoryError(
            f"max_memory={format_size(budget)} does not cover the per-row arrays of this phase "
            f"({format_size(overhead)} for {n_active} active rows and {n_models} partitions); "
            "raise max_memory or lower n_partitions")
    return overhead


def plan_blocks(member, budget, n_features, n_classes, history, overhead=0, n_threads=1, group=1):
    """Group partitions (columns of ``member``) into blocks whose training rows fit ``budget``.

    Greedy in partition order; the grouping changes speed and memory, never results.
    ``overhead`` (bytes already taken from the budget, see :func:`phase_overhead_bytes`)
    only enters the error message.

    Raises
    ------
    MemoryError
        If one partition's training rows alone do not fit.
    """
    n, m = member.shape
    blocks, current = [], []
    in_union = np.zeros(n, dtype=bool)
    count = n_member = 0
    for j in range(m):
        col = member[:, j].view(bool)
        n_col = int(np.count_nonzero(col))
        new_count = count + int(np.count_nonzero(col & ~in_union))
        need = training_bytes(new_count, len(current) + 1, n_features, n_classes, history,
                              n_member + n_col, n_threads, group)
        if current and need > budget:
            blocks.append(current)
            current, count, n_member = [], 0, 0
            in_union[:] = False
            new_count = n_col
            need = training_bytes(new_count, 1, n_features, n_classes, history, n_col, n_threads, group)
        if need > budget:
            raise MemoryError(
                f"max_memory={(budget + overhead) / 1e9:.3g} GB is too small to train one partition: "
                f"{new_count} rows x {n_features} features need {need / 1e9:.3g} GB on top of "
                f"{overhead / 1e9:.3g} GB of per-row arrays; raise max_memory or lower train_size")
        current.append(j)
        in_union |= col
        count = new_count
        n_member += n_col
    if current:
        blocks.append(current)
    return blocks


class Workspace:
    """Memory that successive phases reuse: the buffer of the block's gathered rows.

    Each phase gathers (nearly) every active row into float32; the active set only shrinks,
    so the first phase's buffer serves all the later ones and the system does not have to
    map and zero gigabytes again every phase (measured: 0.25-6 s for 2.3 GB).  The buffer
    also remembers which rows of which X (and centre) it holds: a later phase whose rows are
    a subset of them (every phase after the first, and every null pass, of an AFLite run)
    moves them to the front in place instead of reading X again (:meth:`gather`), the same
    float32 values a fresh gather would write.  It changes memory reuse and reads, never
    results.
    """

    def __init__(self):
        self.buffer = None
        self._held = None  # (X, center, rows, n_columns) of the rows in the buffer, if any

    def rows(self, n_rows, n_columns, n_threads=1):
        """An (n_rows, n_columns) row array in the workspace's buffer (grown if too small);
        whatever the buffer held is forgotten."""
        self._held = None
        need = kernel.row_buffer_size(n_rows, n_columns)
        if self.buffer is None or self.buffer.size < need:
            self.buffer = None  # let the old one go before the new one is allocated
            self.buffer = kernel.row_buffer(n_rows, n_columns)
        return kernel.empty_rows(n_rows, n_columns, self.buffer, n_threads)

    def gather(self, X, rows, center, chunk_bytes=None, position_bias=False, n_threads=1):
        """:func:`gather` of ``rows`` (items of multiple-choice X) into the workspace's buffer.

        When the buffer holds rows of the same X and centre of which ``rows`` (sorted) is a
        subset, they are moved down in place (:func:`compact_rows`); otherwise X is read.
        """
        rows = np.asarray(rows, dtype=np.int64)
        G, D, _ = phase_shape(X, 1, position_bias)
        key = (D, bool(position_bias))
        kept = self._subset_of_held(X, rows, center, key)
        if kept is None:
            out = self.rows(rows.size * G, D, n_threads)
            gather(X, rows, center, out, chunk_bytes, position_bias, n_threads)
        else:
            compact_rows(kernel.padded_rows(self.buffer, self._held[2].size * G, D),
                         candidate_rows(kept, G) if G > 1 else kept)
            out = kernel.empty_rows(rows.size * G, D, self.buffer, n_threads)  # the same first rows
        self._held = (X, np.array(center, copy=True), rows.copy(), key)
        return out

    def _subset_of_held(self, X, rows, center, key):
        """Positions of ``rows`` among the held rows, or None if they are not all held."""
        if self._held is None:
            return None
        hX, hcenter, hrows, hkey = self._held
        if hX is not X or hkey != key or not np.array_equal(hcenter, center) or rows.size > hrows.size:
            return None
        pos = np.searchsorted(hrows, rows)
        if pos.size and (pos[-1] >= hrows.size or not np.array_equal(hrows[np.minimum(pos, hrows.size - 1)], rows)):
            return None
        return pos


def compact_rows(full, keep):
    """Move row ``keep[i]`` of ``full`` to row i for every i, in place.

    ``keep`` is increasing, so ``keep[i] >= i``: rows are moved in increasing order and a
    row is never overwritten before it has been moved.  Runs of consecutive rows move as one
    slice (an AFLite phase removes scattered rows, so runs are long).
    """
    keep = np.asarray(keep, dtype=np.int64)
    if keep.size == 0:
        return full
    breaks = np.flatnonzero(np.diff(keep) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [keep.size]))
    for a, b in zip(starts.tolist(), ends.tolist()):
        src = int(keep[a])
        if src != a:
            full[a:b] = full[src:src + (b - a)]  # overlapping slices: NumPy copies as if via a temporary
    return full


def phase_preconditioner(read_rows, active, n_features, n_classes, kernel_C, train_size, n_threads,
                         chunk_rows=None, form=None, group=1):
    """The solver's initial inverse Hessian shared by every partition of a phase
    (a ``kernel.Preconditioner``).

    Estimated from rows spread evenly over the active set (:func:`kernel.preconditioner_sample`),
    so it is a function of the active set alone and no model depends on its block or on the
    backend.  ``read_rows(rows)`` returns the augmented float32 rows ``rows`` (C-contiguous),
    asked for ``chunk_rows`` at a time (a multiple of ``kernel.PRECOND_BLOCK``; default all at
    once; the low-rank form reads its sample at once); the L2 weight is the one of a
    partition of ``train_size`` rows.  ``form`` defaults to the first of
    ``kernel.preconditioner_forms`` (see :func:`phase_preconditioner_form` under a budget).

    Multiple choice (``group`` = K): the sample is of items (as many as rows of D / K
    columns would take), ``read_rows(items)`` returns their candidate rows centred within
    each item (``kernel.item_centered``), and the curvature is 1 (their second moment is the
    Hessian at equal scores); ``chunk_rows`` counts candidate rows.
    """
    D = n_features + 1
    if form is None:
        form = kernel.preconditioner_forms(active.size * group, D)[0]
    sample = active[kernel.preconditioner_sample(active.size, -(-D // group), form)]
    step = sample.size if chunk_rows is None or form == "lowrank" else max(1, int(chunk_rows))
    if group > 1 and step < sample.size:  # whole blocks of candidate rows per chunk
        step = max(1, step // (group * kernel.PRECOND_BLOCK)) * kernel.PRECOND_BLOCK
    chunks = (read_rows(sample[i:i + step]) for i in range(0, sample.size, max(step, 1)))
    return kernel.preconditioner(chunks, n_classes, 1.0 / (kernel_C * train_size), n_threads, form=form,
                                 curvature=None if group == 1 else 1.0)


@dataclass
class PhaseScores:
    """Per-row results of one phase, indexed by position in the active set.

    ``seconds`` holds wall time of training (``train``) and prediction (``predict``), of
    the reads of X inside each (``read_train``, ``read_predict``) and of building the
    solver's preconditioner inside training (``preconditioner``, its reads included); ``n_blocks`` and
    ``n_chunks`` count the blocks of partitions and the prediction chunks; ``n_eval`` the
    evaluations of objective and gradient of each partition's model (None where the backend
    does not report them).
    """

    seen: np.ndarray
    correct: np.ndarray
    prob_label: np.ndarray
    coef: np.ndarray
    n_iter: np.ndarray
    status: np.ndarray
    n_blocks: int
    seconds: dict = field(default_factory=dict)
    n_chunks: int = 1
    n_eval: np.ndarray = None

    @property
    def scores(self):
        """correct / seen, NaN where a row was never held out."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.seen > 0, self.correct / np.maximum(self.seen, 1), np.nan)


def score_phase(X, codes, active, center, train_pos, *, n_classes, C=1.0, loss="ce",
                loss_params=None, options=None, max_memory=None, n_threads=1, warm_coef=None,
                proba_sum=None, on_block=None, workspace=None, position_bias=False):
    """Train every partition of a phase and score the active rows.

    Parameters
    ----------
    X : ndarray or memmap (N, d), float16/32/64, or (N, K, d): multiple choice (items of K
        candidates; see :mod:`aflite_fast.multiple_choice`)
    codes : ndarray (N,), int32 label codes (multiple choice: the right candidate)
    active : ndarray (n_active,), int64 sorted row indices of the active set S
    center : ndarray (d,), float32 value subtracted from every row (see kernel.augment_rows)
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
    options = options or kernel.SolverOptions()
    budget = parse_memory(max_memory)
    n_active = active.size
    m, t = train_pos.shape
    G, D, n_out = phase_shape(X, n_classes, position_bias)
    d = D - 1  # the kernel rows' columns but one (the features, for classification)
    n_free = 1 if G == 1 else D - X.shape[2]
    overhead = check_phase_memory(X.shape[0], n_active, m, t, d, n_out, budget, proba_sum is not None)
    gather_bytes = gather_chunk_bytes(budget)
    budget -= overhead
    member = membership_matrix(train_pos, n_active, np.empty((n_active, m), dtype=np.uint8))
    blocks = plan_blocks(member, budget, d, n_out, options.history, overhead, n_threads, G)
    coef = (np.zeros((m, D, n_out)) if warm_coef is None else np.array(warm_coef, dtype=np.float64))
    n_iter = np.zeros(m, dtype=np.int32)
    status = np.zeros(m, dtype=np.int32)
    n_eval = np.zeros(m, dtype=np.int32)
    Ck = kernel_C(C, n_classes) if G == 1 else C
    # each model's sums over groups of X's rows (items of multiple-choice X: a group is whole
    # items) are added by a fixed tree (kernel.reduction_layout), so that processes holding
    # whole groups give the same bits (aflite_fast.distributed)
    group_rows = kernel.reduction_group_rows(X.shape[0])
    read_seconds = precond_seconds = 0.0
    t0 = time.perf_counter()
    precond = None
    precond_form = "none"
    if options.precondition:
        precond_form = phase_preconditioner_form(n_active * G, d, budget)

        def read_sample(rows):
            nonlocal read_seconds
            r0 = time.perf_counter()
            out = gather(X, rows, center, np.empty((rows.size * G, D), dtype=np.float32), gather_bytes,
                         position_bias, n_threads)
            if G > 1:
                out = kernel.item_centered(out, np.arange(rows.size), G)
            read_seconds += time.perf_counter() - r0
            return out

        p0 = time.perf_counter()
        precond = phase_preconditioner(read_sample, active, d, n_out, Ck, t, n_threads,
                                       preconditioner_chunk_rows(budget, d), precond_form, G)
        precond_seconds = time.perf_counter() - p0
    in_block = np.empty(n_active, dtype=bool)
    Xa_all = union_all = None
    for block in blocks:
        # union of the block's training rows, without an n_active x len(block) copy of member
        in_block[:] = False
        for j in block:
            np.logical_or(in_block, member[:, j], out=in_block)
        union = np.flatnonzero(in_block)
        if (len(blocks) == 1 and union.size >= 0.9 * n_active
                and training_bytes(n_active, m, d, n_out, options.history, int(member.sum()),
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
            Xa = workspace.gather(X, rows, center, gather_bytes, position_bias, n_threads)
        else:
            Xa = gather_new(X, rows, center, gather_bytes, position_bias, n_threads)
        read_seconds += time.perf_counter() - r0
        coef_b = np.ascontiguousarray(coef[block])
        coef_b, info = kernel.train_models(
            Xa, codes[rows], bm, n_out, C=Ck, loss=loss, loss_params=loss_params,
            coef=coef_b, positions=union, precond=precond, options=options,
            n_threads=n_threads, group=G, n_free=n_free, leaves=rows // group_rows)
        coef[block] = coef_b
        n_iter[block] = info["n_iter"]
        status[block] = info["status"]
        n_eval[block] = info["n_eval"]
        if len(blocks) == 1:
            # one block (the usual case): its rows are nearly all the active rows (with 64
            # partitions at t/N = 0.1 all but 0.9^64 of them); predict those from the rows
            # already gathered instead of reading X again
            Xa_all, union_all = Xa, union
        del Xa, bm, rows, union, coef_b
        if on_block is not None:
            on_block()
    del in_block
    t1 = time.perf_counter()
    train_read = read_seconds
    seen = np.zeros(n_active, dtype=np.int32)
    correct = np.zeros(n_active, dtype=np.int32)
    prob_label = np.zeros(n_active, dtype=np.float64)
    W = kernel.stack_weights(coef)
    per_row = prediction_row_bytes(d, m, n_out) * G
    # positions to predict, in runs: rows of the trained block (already gathered) and the rest;
    # a run of consecutive positions is a slice (no copies of the per-row arrays)
    runs = [(slice(0, n_active), None)]
    if Xa_all is not None:
        if union_all.size == n_active:
            runs = [(slice(0, n_active), Xa_all)]
        else:
            rest = np.ones(n_active, dtype=bool)
            rest[union_all] = False
            runs = [(union_all, Xa_all), (np.flatnonzero(rest), None)]
    chunk = int(max(16, min(n_active, budget // per_row)))
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
                Xa = gather_new(X, active[p], center, gather_bytes, position_bias, n_threads)
                read_seconds += time.perf_counter() - r0
            heldout = np.subtract(1, member[p], dtype=np.uint8)
            s_, c_, pl_ = seen[p], correct[p], prob_label[p]
            ps_ = None if proba_sum is None else proba_sum[p]
            kernel.predict_accumulate(Xa, codes[active[p]], heldout, W, n_out, s_, c_, pl_, ps_,
                                      n_threads, G)
            if not isinstance(p, slice):  # fancy indexing copied: write back
                seen[p], correct[p], prob_label[p] = s_, c_, pl_
                if proba_sum is not None:
                    proba_sum[p] = ps_
            n_chunks += 1
            del Xa, heldout
            if on_block is not None:
                on_block()
    del Xa_all
    t2 = time.perf_counter()
    return PhaseScores(seen=seen, correct=correct, prob_label=prob_label, coef=coef, n_iter=n_iter,
                       status=status, n_blocks=len(blocks),
                       seconds={"train": t1 - t0, "predict": t2 - t1, "read_train": train_read,
                                "read_predict": read_seconds - train_read,
                                "preconditioner": precond_seconds},
                       n_chunks=n_chunks, n_eval=n_eval)
