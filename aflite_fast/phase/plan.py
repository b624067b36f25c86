"""The memory plan of a phase, one estimate function per thing, and the phase's shape.

The budget (``max_memory``) first pays for what grows with the rows (:func:`phase_overhead_bytes`:
the membership matrix, per-row counts, the models); what is left sets the blocks of partitions
(:func:`training_bytes`, :func:`plan_blocks`), the prediction chunks
(:func:`prediction_row_bytes`, :func:`prediction_fixed_bytes`) and the gathers' scratch
(:func:`gather_chunk_bytes`).  The preconditioner's bytes are in
:mod:`aflite_fast.core.preconditioning`.  None of these change a result.
"""
import numpy as np

from aflite_fast.core import layout
from aflite_fast.core.compiled import _kernel
from aflite_fast.io.inputs import GATHER_CHUNK_BYTES
from aflite_fast.phase.multiple_choice import n_extra_columns
from aflite_fast.runtime.memory import format_size


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
              + n_models * (n_rows * group // layout.ROW_BLOCK + 2) * 8)
    pack = _kernel.gemm_pack_buffer_bytes(False, 2 * n_models * n_classes, D, layout.COL_BLOCK)
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
                                          layout.COL_BLOCK)


def gather_chunk_bytes(budget):
    """Scratch of one gather (rows in X's dtype): a 64th of the budget, at most
    :data:`aflite_fast.io.inputs.GATHER_CHUNK_BYTES`."""
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
    # Every step of the greedy pass below asks for at most n rows and every membership, with
    # its number of models; when that bound fits for each number of models, no step opens a
    # new block and the pass would return one block of all partitions: say so without its 3 m
    # strided passes over the columns of member (seconds a run at 550,000 x 64).
    n_member_all = int(np.count_nonzero(member))
    if m and all(training_bytes(n, k, n_features, n_classes, history, n_member_all, n_threads, group) <= budget
                 for k in range(1, m + 1)):
        return [list(range(m))]
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
