"""The gather path of the Dask backend, kept for measurement (``bench_dask.py --gather``).

Each block of partitions trains on one worker after the union of its training rows is cut from
the chunks where they live and sent there; prediction sends the weights out and the counts
back.  The package's Dask backend (``aflite_fast.phase.dask_backend.score_phase_dask``) instead keeps
every row where it is and adds per-worker partial sums each solver round; this module is the
design it replaced, so that the benchmark can measure both on the same cluster.  Results are
bitwise the local engine's.
"""
import time
from dataclasses import dataclass, field

import numpy as np

from aflite_fast.core import preconditioning
from aflite_fast.phase import plan
from aflite_fast.phase import scores
from aflite_fast.core import layout
from aflite_fast.core import prediction
from aflite_fast.core import solver
from aflite_fast.io.rows import membership_matrix
from aflite_fast.io.inputs import gather_rows
from aflite_fast.phase.dask_backend import _stack, _worker_threads, phase_arguments


@dataclass
class GatherPhaseScores(scores.PhaseScores):
    """:class:`aflite_fast.phase.scores.PhaseScores` plus ``bytes_moved`` (``train_rows``,
    ``train_rows_remote``, ``precond_rows``, ``train_inputs``, ``coef_back``,
    ``weights_broadcast``, ``predict_inputs``, ``counts_back``, ``center_broadcast``,
    ``total``)."""

    bytes_moved: dict = field(default_factory=dict)


def _train_task(center, positions, leaves, codes, member, coef, n_classes, C, loss, options, n_threads, precond,
                *pieces):
    raw = _stack(pieces)
    Xa = gather_rows(raw, np.arange(raw.shape[0]), center,
                     layout.empty_rows(raw.shape[0], raw.shape[1] + 1))
    coef, info = solver.train_models(Xa, codes, member, n_classes, C=C, loss=loss, coef=coef,
                                     positions=positions, precond=precond, options=options,
                                     n_threads=_worker_threads(n_threads), leaves=leaves)
    return coef, info["n_iter"], info["status"]


def _predict_task(chunk, W, local, codes, heldout, center, n_classes, want_proba, n_threads):
    n = local.size
    Xa = gather_rows(chunk, local, center, layout.empty_rows(n, chunk.shape[1] + 1))
    seen = np.zeros(n, dtype=np.int32)
    correct = np.zeros(n, dtype=np.int32)
    prob_label = np.zeros(n, dtype=np.float64)
    proba = np.zeros((n, n_classes), dtype=np.float64) if want_proba else None
    prediction.predict_accumulate(Xa, codes, heldout, W, n_classes, seen, correct, prob_label, proba,
                              _worker_threads(n_threads))
    return seen, correct, prob_label, proba


def _split_blocks(blocks, min_blocks):
    """Split blocks (largest first) until there are ``min_blocks`` of them; never changes results."""
    blocks = [list(b) for b in blocks]
    while len(blocks) < min_blocks:
        i = max(range(len(blocks)), key=lambda j: len(blocks[j]))
        if len(blocks[i]) < 2:
            break
        b = blocks.pop(i)
        half = (len(b) + 1) // 2
        blocks[i:i] = [b[:half], b[half:]]
    return blocks


def score_phase_gather(X, codes, active, center, train_pos, *, n_classes, C=1.0, loss="ce",
                     loss_params=None, options=None, max_memory=None, n_threads=None,
                     warm_coef=None, proba_sum=None, on_block=None, client=None, min_blocks=None):
    """``_local.score_phase`` on a dask cluster: the same PhaseScores, bitwise.

    Parameters
    ----------
    X : DaskEmbeddings, or anything :func:`as_dask_array` takes (then put on the cluster for
        this call only; pass a DaskEmbeddings to keep the chunks between phases)
    codes, active, center, train_pos, n_classes, C, loss, loss_params, options, warm_coef :
        as in :func:`aflite_fast.phase.local.score_phase`
    max_memory : int or str, optional
        Budget of one worker's training scratch (blocks of partitions are planned with it as
        in the local engine).
    n_threads : int, optional
        Kernel threads inside each task; None uses each worker's thread count.
    proba_sum : ndarray (n_active, C) float64, optional; receives summed held-out probabilities
    on_block : callable, optional; called after each trained block
    client : distributed.Client, optional
        Default: the client ``X`` was opened with.
    min_blocks : int, optional
        Split the partitions into at least this many blocks so that several workers train at
        once (default: the number of workers).  More blocks gather more rows in total.

    Returns
    -------
    GatherPhaseScores
    """
    X, options, spec, budget, active, codes, center = phase_arguments(
        X, client, options, loss, loss_params, n_classes, max_memory, active, codes, center)
    client = X.client
    n_active = active.size
    m = train_pos.shape[0]
    d = X.shape[1]
    D = d + 1
    item = X.dtype.itemsize
    if min_blocks is None:
        min_blocks = max(1, len(client.nthreads()))
    member = membership_matrix(train_pos, n_active, np.empty((n_active, m), dtype=np.uint8))
    blocks = _split_blocks(plan.plan_blocks(member, budget, d, n_classes, options.history), min_blocks)
    coef = (np.zeros((m, D, n_classes)) if warm_coef is None else np.array(warm_coef, dtype=np.float64))
    n_iter = np.zeros(m, dtype=np.int32)
    status = np.zeros(m, dtype=np.int32)
    Ck = plan.kernel_C(C, n_classes)
    group_rows = layout.reduction_group_rows(X.shape[0])
    moved = dict.fromkeys(["train_rows", "train_rows_remote", "precond_rows", "train_inputs", "coef_back",
                           "weights_broadcast", "predict_inputs", "counts_back"], 0)
    t0 = time.perf_counter()
    # where each chunk lives before this phase copies any of it (for train_rows_remote)
    holders = client.who_has(X.futures)
    chunk_home = [set(holders.get(f.key, ())) for f in X.futures]
    center_f = client.scatter(center, broadcast=True, hash=False)
    precond = None
    if options.precondition:
        def read_rows(rows):
            raw = _stack(client.gather([f for f, _, _ in X.pieces(rows)]))
            return gather_rows(raw, np.arange(rows.size), center,
                               np.empty((rows.size, D), dtype=np.float32))

        form = preconditioning.preconditioner_forms(n_active, D)[0]
        precond = preconditioning.phase_preconditioner(read_rows, active, d, n_classes, Ck,
                                              train_pos.shape[1], _worker_threads(n_threads), form=form)
        moved["precond_rows"] = int(preconditioning.preconditioner_sample(n_active, D, form).size) * d * item
    precond_f = None if precond is None else client.scatter(precond, broadcast=True, hash=False)
    jobs = []
    for block in blocks:
        bm = member[:, block]
        union = np.flatnonzero(bm.any(axis=1))
        rows = active[union]
        pieces = X.pieces(rows)
        member_b = np.ascontiguousarray(bm[union])
        codes_b = codes[rows]
        coef_b = np.ascontiguousarray(coef[block])
        leaves = rows // group_rows
        fut = client.submit(_train_task, center_f, union, leaves, codes_b, member_b, coef_b, n_classes, Ck, spec,
                            options, n_threads, precond_f, *[f for f, _, _ in pieces], pure=False)
        moved["train_rows"] += union.size * d * item
        moved["train_inputs"] += union.nbytes + leaves.nbytes + codes_b.nbytes + member_b.nbytes + coef_b.nbytes
        moved["coef_back"] += coef_b.nbytes + 8 * len(block)
        jobs.append((block, fut, pieces))
    for block, fut, pieces in jobs:
        coef_b, it, st = fut.result()
        coef[block] = coef_b
        n_iter[block] = it
        status[block] = st
        home = set(client.who_has([fut]).get(fut.key, ()))  # the worker that trained the block
        for f, n_rows, i in pieces:
            if not home & chunk_home[i]:
                moved["train_rows_remote"] += n_rows * d * item
        if on_block is not None:
            on_block()
    del jobs
    t1 = time.perf_counter()
    W = prediction.stack_weights(coef)
    n_workers = max(1, len(client.nthreads()))
    W_f = client.scatter(W, broadcast=True, hash=False)
    moved["weights_broadcast"] = W.nbytes * n_workers
    cut = np.searchsorted(active, X.offsets)
    futs = []
    for i in range(X.n_chunks):
        a, b = int(cut[i]), int(cut[i + 1])
        if b == a:
            continue
        local = active[a:b] - X.offsets[i]
        heldout = np.ascontiguousarray(1 - member[a:b])
        codes_c = codes[active[a:b]]
        futs.append((a, b, client.submit(_predict_task, X.futures[i], W_f, local, codes_c, heldout, center_f,
                                         n_classes, proba_sum is not None, n_threads, pure=False)))
        moved["predict_inputs"] += local.nbytes + codes_c.nbytes + heldout.nbytes
    seen = np.zeros(n_active, dtype=np.int32)
    correct = np.zeros(n_active, dtype=np.int32)
    prob_label = np.zeros(n_active, dtype=np.float64)
    for a, b, f in futs:
        s, c, p, proba = f.result()
        seen[a:b], correct[a:b], prob_label[a:b] = s, c, p
        moved["counts_back"] += s.nbytes + c.nbytes + p.nbytes
        if proba is not None:
            proba_sum[a:b] += proba
            moved["counts_back"] += proba.nbytes
    t2 = time.perf_counter()
    moved["center_broadcast"] = center.nbytes * n_workers
    moved["total"] = sum(v for k, v in moved.items() if k != "train_rows_remote")
    extra = {"n_chunks": len(futs)}
    return GatherPhaseScores(seen=seen, correct=correct, prob_label=prob_label, coef=coef, n_iter=n_iter,
                           status=status, n_blocks=len(blocks),
                           seconds={"train": t1 - t0, "predict": t2 - t1}, bytes_moved=moved, **extra)
