"""Scores one AFLite phase: partition sampling, blocks of partitions, chunks of rows.

For a phase on the active rows S (sorted row indices) the engine

1. draws each partition's training positions from its own seed (``partition_train_positions``),
   so nothing depends on how partitions are grouped;
2. groups partitions into blocks whose training rows (the union of their training sets)
   fit the memory budget, gathers those rows once (sorted reads), and trains the block
   with one kernel call;
3. streams the active rows once in chunks and predicts them with all partitions' models
   together, accumulating per row: held-out predictions seen, correct, and the summed
   probability of the label.

So each phase reads X (number of blocks + 1) times at most; with the default budget and
data that fits in memory there is a single block.
"""
import time
from dataclasses import dataclass, field

import numpy as np

from . import kernel
from ._memory import parse_memory
from ._rows import membership_matrix
from .data import gather_rows


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


def partition_train_positions(entropy, phase, n_active, train_size, n_partitions):
    """Training positions (in the active set) of every partition of a phase.

    Partition j of phase p draws ``train_size`` positions uniformly without replacement
    from ``SeedSequence(entropy, spawn_key=(p, j))``: a seed per partition, not per thread
    or block.

    Returns
    -------
    ndarray of shape (n_partitions, train_size), int64, each row sorted
    """
    out = np.empty((n_partitions, train_size), dtype=np.int64)
    for j in range(n_partitions):
        rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(phase, j)))
        out[j] = np.sort(rng.choice(n_active, size=train_size, replace=False))
    return out


def kernel_C(C, n_classes):
    """C for the softmax kernel so that the optimum is scikit-learn's LogisticRegression(C).

    For two classes scikit-learn fits the binomial model; the two-class softmax with the same
    L2 penalty on both weight vectors is that model with C doubled, so it gets C / 2.
    """
    return C / 2.0 if n_classes == 2 else C


def training_bytes(n_rows, n_models, n_features, n_classes, history):
    """Scratch bytes of one kernel call training ``n_models`` models on ``n_rows`` rows."""
    D = n_features + 1
    P = D * n_classes
    rows = n_rows * (D * 4 + n_models * n_classes * 4 + n_models + 8)
    solver = n_models * P * 8 * (2 * history + 6) + D * n_models * n_classes * 12
    return rows + solver


def plan_blocks(member, budget, n_features, n_classes, history):
    """Group partitions (columns of ``member``) into blocks whose training rows fit ``budget``.

    Greedy in partition order; the grouping changes speed and memory, never results.
    """
    n, m = member.shape
    blocks, current = [], []
    in_union = np.zeros(n, dtype=bool)
    count = 0
    for j in range(m):
        col = member[:, j].astype(bool)
        new_count = count + int(np.count_nonzero(col & ~in_union))
        need = training_bytes(new_count, len(current) + 1, n_features, n_classes, history)
        if current and need > budget:
            blocks.append(current)
            current, in_union, count = [], np.zeros(n, dtype=bool), 0
            new_count = int(np.count_nonzero(col))
            need = training_bytes(new_count, 1, n_features, n_classes, history)
        if need > budget:
            raise MemoryError(
                f"max_memory={budget / 1e9:.3g} GB is too small to train one partition "
                f"({new_count} rows x {n_features} features needs {need / 1e9:.3g} GB); "
                "raise max_memory or lower train_size")
        current.append(j)
        in_union |= col
        count = new_count
    if current:
        blocks.append(current)
    return blocks


@dataclass
class PhaseScores:
    """Per-row results of one phase, indexed by position in the active set."""

    seen: np.ndarray
    correct: np.ndarray
    prob_label: np.ndarray
    coef: np.ndarray
    n_iter: np.ndarray
    status: np.ndarray
    n_blocks: int
    seconds: dict = field(default_factory=dict)

    @property
    def scores(self):
        """correct / seen, NaN where a row was never held out."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.seen > 0, self.correct / np.maximum(self.seen, 1), np.nan)


def score_phase(X, codes, active, center, train_pos, *, n_classes, C=1.0, loss="ce",
                loss_params=None, options=None, max_memory=None, n_threads=1, warm_coef=None,
                proba_sum=None, on_block=None):
    """Train every partition of a phase and score the active rows.

    Parameters
    ----------
    X : ndarray or memmap (N, d), float16/32/64
    codes : ndarray (N,), int32 label codes
    active : ndarray (n_active,), int64 sorted row indices of the active set S
    center : ndarray (d,), float32 value subtracted from every row (see kernel.augment_rows)
    train_pos : ndarray (m, t), int64 sorted training positions in S of each partition
    n_classes : int
    C, loss, loss_params, options : solver settings (see :mod:`aflite_fast.kernel`)
    max_memory : int or str, budget of the training scratch and prediction chunks
    n_threads : int
    warm_coef : ndarray (m, d + 1, C) float64, optional starting point of each partition
    proba_sum : ndarray (n_active, C) float64, optional; receives summed held-out probabilities
    on_block : callable, optional; called after each trained block and predicted chunk

    Returns
    -------
    PhaseScores
    """
    options = options or kernel.SolverOptions()
    budget = parse_memory(max_memory)
    n_active = active.size
    m = train_pos.shape[0]
    d = X.shape[1]
    D = d + 1
    member = membership_matrix(train_pos, n_active, np.empty((n_active, m), dtype=np.uint8))
    blocks = plan_blocks(member, budget, d, n_classes, options.history)
    coef = (np.zeros((m, D, n_classes)) if warm_coef is None else np.array(warm_coef, dtype=np.float64))
    n_iter = np.zeros(m, dtype=np.int32)
    status = np.zeros(m, dtype=np.int32)
    Ck = kernel_C(C, n_classes)
    t0 = time.perf_counter()
    for block in blocks:
        bm = member[:, block]
        union = np.flatnonzero(bm.any(axis=1))
        Xa = gather_rows(X, active[union], center, np.empty((union.size, D), dtype=np.float32))
        coef_b = np.ascontiguousarray(coef[block])
        coef_b, info = kernel.train_models(
            Xa, codes[active[union]], np.ascontiguousarray(bm[union]), n_classes, C=Ck, loss=loss,
            loss_params=loss_params, coef=coef_b, positions=union, options=options, n_threads=n_threads)
        coef[block] = coef_b
        n_iter[block] = info["n_iter"]
        status[block] = info["status"]
        del Xa
        if on_block is not None:
            on_block()
    t1 = time.perf_counter()
    seen = np.zeros(n_active, dtype=np.int32)
    correct = np.zeros(n_active, dtype=np.int32)
    prob_label = np.zeros(n_active, dtype=np.float64)
    W = kernel.stack_weights(coef)
    per_row = D * 4 + m * n_classes * 4 + m + 64
    chunk = int(max(1024, min(n_active, (budget // 2) // per_row)))
    for s0 in range(0, n_active, chunk):
        s1 = min(n_active, s0 + chunk)
        Xa = gather_rows(X, active[s0:s1], center, np.empty((s1 - s0, D), dtype=np.float32))
        heldout = np.ascontiguousarray(1 - member[s0:s1])
        kernel.predict_accumulate(
            Xa, codes[active[s0:s1]], heldout, W, n_classes, seen[s0:s1], correct[s0:s1],
            prob_label[s0:s1], None if proba_sum is None else proba_sum[s0:s1], n_threads)
    t2 = time.perf_counter()
    return PhaseScores(seen=seen, correct=correct, prob_label=prob_label, coef=coef, n_iter=n_iter,
                       status=status, n_blocks=len(blocks),
                       seconds={"train": t1 - t0, "predict": t2 - t1})
