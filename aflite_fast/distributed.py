"""Dask backend: score AFLite phases on embeddings spread over a ``dask.distributed`` cluster.

Design (issue 7):

a. X is a dask array chunked along rows only.  Its chunks are computed once and kept in the
   workers' memory (``DaskEmbeddings``); the client holds only their futures, the labels,
   the active set and the per-row counts.  The filtering loop stays on the client.
b. The centre (column means) and the finite-value check run where the chunks live, with the
   very row blocks ``data.scan_rows`` uses, so the centre is bitwise the local one.
c. Training: for each block of partitions the block's training rows (the union of its
   partitions' rows) are cut from the chunks where they live (raw dtype), moved to one
   worker, centred there to float32 exactly as ``data.gather_rows`` does, and trained with
   ``kernel.train_models`` with the same ``positions``, the same kernel C and the same warm
   start, so the coefficients are bitwise those of ``engine.score_phase``.
d. Prediction: W (float32, (d + 1) x m C) is broadcast once; one task per chunk predicts the
   chunk's active rows with ``kernel.predict_accumulate`` and sends back only per-row counts
   (seen, correct: int32; prob_label: float64).
e. Every phase reports the bytes it moved (``DaskPhaseScores.bytes_moved``).

Results do not depend on the chunking, the number of workers or the blocking: the kernel's
sums are fixed by positions in the active set (see ``engine`` and ``kernel``).
"""
import functools
import os
import time
from dataclasses import dataclass, field

import numpy as np

from . import engine, kernel
from ._memory import parse_memory
from .io.arrayfile import open_array_file
from ._rows import membership_matrix
from .data import check_dtype, gather_rows, scan_block, scan_chunk_rows
from .io.fingerprint import block_digests
from .losses import resolve_loss

__all__ = ["DaskEmbeddings", "DaskPhaseScores", "as_dask_array", "connect", "score_phase_dask",
           "scan_rows_dask", "filter_on_cluster"]


def _import_dask():
    try:
        import dask.array as da
        import distributed
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("the dask backend needs dask and distributed: pip install 'dask[array,distributed]' "
                          "(or pip install '.[dask]' in a clone of aflite_fast)") from exc
    return da, distributed


# ----------------------------------------------------------------------------- opening X

def default_chunk_rows(n_features, itemsize):
    """Rows per chunk: the row block of ``data.scan_rows`` (64 MiB), so that no scan block
    spans two chunks and computing the centre moves no rows between workers."""
    return scan_chunk_rows(n_features, itemsize)


def _read_raw_rows(path, offset, dtype, shape, start, stop):
    """Rows [start, stop) of a C-ordered array stored at byte ``offset`` of ``path``."""
    return np.array(np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)[start:stop])


def _memmap_source(X):
    """(file name, byte offset) of a C-contiguous np.memmap, or None if it has no file."""
    import mmap
    name = getattr(X, "filename", None)
    buf = getattr(X, "_mmap", None)
    if not name or buf is None or not X.flags.c_contiguous or not os.path.exists(name):
        return None
    try:
        base = np.frombuffer(buf, dtype=np.uint8).ctypes.data
    except (TypeError, ValueError):
        return None
    # the mapping starts at X.offset rounded down to the allocation granularity
    start = X.offset - X.offset % mmap.ALLOCATIONGRANULARITY
    return name, start + (X.ctypes.data - base)


def _chunked_rows(n, d, dtype, step, read, key):
    """Dask array of n x d rows, chunk [s, e) read on a worker by ``read(s, e)`` under ``key(s, e)``."""
    import dask
    da, _ = _import_dask()
    parts = []
    for s in range(0, n, step):
        e = min(n, s + step)
        parts.append(da.from_delayed(dask.delayed(read, pure=True)(s, e, dask_key_name=key(s, e)),
                                     shape=(e - s, d), dtype=dtype))
    return da.concatenate(parts, axis=0)


def _memmap_as_dask(X, chunk_rows):
    import dask
    path, offset = _memmap_source(X)
    n, d = X.shape
    st = os.stat(path)
    token = (path, st.st_size, st.st_mtime_ns, offset, X.shape, str(X.dtype))
    return _chunked_rows(
        n, d, X.dtype, chunk_rows or default_chunk_rows(d, X.dtype.itemsize),
        functools.partial(_read_raw_rows, path, offset, X.dtype, X.shape),
        lambda s, e: f"mmap-rows-{dask.base.tokenize(*token, s, e)}")


def _npy_as_dask(path, chunk_rows):
    """A ``.npy``/``.npz`` file (or ``FILE.npz:KEY``) read on the workers through a memory map
    of the same file; a compressed ``.npz`` member cannot be mapped and is sent from here."""
    da, _ = _import_dask()
    mm = open_array_file(path, "embeddings")
    if mm.ndim != 2:
        raise ValueError(f"X must be 2-D (rows x features), got {mm.ndim}-D with shape {mm.shape} in {path!r}")
    if isinstance(mm, np.memmap) and _memmap_source(mm) is not None:
        return _memmap_as_dask(mm, chunk_rows)
    return da.from_array(mm, chunks=(chunk_rows or default_chunk_rows(mm.shape[1], mm.dtype.itemsize), -1))


def as_dask_array(X, *, chunk_rows=None):
    """A 2-D dask array, chunked along rows only, from any supported source.

    Parameters
    ----------
    X : dask array, ndarray, np.memmap, path to a ``.npy`` file, path to a zarr array
        (``*.zarr``), or a list of ``.npy`` paths (shards concatenated along rows, in order)
        A ``.npy`` path or a file-backed memmap is read on the workers (a memory map per
        chunk), so the workers must see the same file at the same path; an in-memory ndarray
        is sent to the cluster through the scheduler.
    chunk_rows : int, optional
        Rows per chunk for ``.npy`` files and ndarrays (default: 64 MiB of rows).  Shards are
        split into chunks of at most this many rows.

    Returns
    -------
    dask.array.Array
    """
    da, _ = _import_dask()
    if isinstance(X, (list, tuple)) and X and all(isinstance(p, (str, os.PathLike)) for p in X):
        arrays = [_npy_as_dask(os.fspath(p), chunk_rows) for p in X]
        widths = {a.shape[1] for a in arrays}
        dtypes = {a.dtype for a in arrays}
        if len(widths) != 1 or len(dtypes) != 1:
            raise ValueError(f"shards differ in width or dtype: widths {sorted(widths)}, dtypes {sorted(map(str, dtypes))}")
        X = da.concatenate(arrays, axis=0)
    elif isinstance(X, (str, os.PathLike)):
        path = os.fspath(X)
        if path.rstrip("/").endswith(".zarr") or os.path.isdir(path):
            try:
                X = da.from_zarr(path)
            except ImportError as exc:
                raise ImportError("reading zarr needs the zarr package: pip install zarr") from exc
            except Exception as exc:  # zarr raises its own error types
                raise ValueError(f"cannot read a zarr array from {path!r}: {exc}") from exc
        else:
            X = _npy_as_dask(path, chunk_rows)
    elif isinstance(X, np.memmap) and X.ndim == 2 and _memmap_source(X) is not None:
        X = _memmap_as_dask(X, chunk_rows)  # the workers read the file, nothing is pickled
    elif isinstance(X, np.ndarray):
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (rows x features), got {X.ndim}-D with shape {X.shape}")
        X = da.from_array(X, chunks=(chunk_rows or default_chunk_rows(X.shape[1], X.dtype.itemsize), -1))
    elif not isinstance(X, da.Array):
        raise ValueError(f"the dask backend takes a dask array, an ndarray, a .npy/.zarr path or a list of "
                         f".npy paths; got {type(X).__name__}")
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D (rows x features), got {X.ndim}-D with shape {X.shape}")
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"X is empty (shape {X.shape})")
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError("X has chunks of unknown size; call X.compute_chunk_sizes() first")
    check_dtype(X.dtype)
    if len(X.chunks[1]) != 1:
        X = X.rechunk({1: -1})  # rows are the unit of work: one chunk spans all columns
    return X


class DaskEmbeddings:
    """X held in the memory of a dask cluster as row chunks (futures), for the whole run.

    Attributes
    ----------
    client : distributed.Client
    futures : list of Future, one per row chunk (ndarray of shape (rows, d))
    offsets : ndarray of int64, first row of every chunk, then N
    shape, dtype : of X
    """

    def __init__(self, X, client=None, *, chunk_rows=None):
        _, distributed = _import_dask()
        self.client = client if client is not None else distributed.default_client()
        X = as_dask_array(X, chunk_rows=chunk_rows)
        self.shape = tuple(int(s) for s in X.shape)
        self.dtype = np.dtype(X.dtype)
        self.offsets = np.concatenate(([0], np.cumsum(X.chunks[0]))).astype(np.int64)
        self.futures = self.client.compute(list(X.to_delayed().ravel()))
        distributed.wait(self.futures)
        bad = [f for f in self.futures if f.status != "finished"]
        if bad:
            bad[0].result()  # raise the worker's error (e.g. an unreadable shard)

    @classmethod
    def open(cls, X, client=None, *, chunk_rows=None):
        """``X`` if it is already a DaskEmbeddings, else ``DaskEmbeddings(X, client)``."""
        return X if isinstance(X, cls) else cls(X, client, chunk_rows=chunk_rows)

    @property
    def ndim(self):
        return 2

    @property
    def nbytes(self):
        return self.shape[0] * self.shape[1] * self.dtype.itemsize

    @property
    def n_chunks(self):
        return len(self.futures)

    def pieces(self, rows):
        """Futures of ``X[rows]`` (``rows`` sorted global indices), one task per chunk touched,
        each run where its chunk lives.  Returns a list of (future, n_rows, chunk index)."""
        cut = np.searchsorted(rows, self.offsets)
        out = []
        for i in range(self.n_chunks):
            a, b = cut[i], cut[i + 1]
            if b == a:
                continue
            local = rows[a:b] - self.offsets[i]
            n_chunk = self.offsets[i + 1] - self.offsets[i]
            if local.size == n_chunk:
                out.append((self.futures[i], int(b - a), i))  # the whole chunk
            elif local[-1] - local[0] + 1 == local.size:
                out.append((self.client.submit(_slice_rows, self.futures[i], int(local[0]), int(local[-1]) + 1,
                                               pure=False), int(b - a), i))
            else:
                out.append((self.client.submit(_take_rows, self.futures[i], local, pure=False), int(b - a), i))
        return out

    def __repr__(self):
        return (f"DaskEmbeddings(shape={self.shape}, dtype={self.dtype}, chunks={self.n_chunks}, "
                f"{self.nbytes / 1e6:.1f} MB on the cluster)")


def _slice_rows(chunk, start, stop):
    return np.ascontiguousarray(chunk[start:stop])


def _take_rows(chunk, local):
    return chunk[local]


def _stack(pieces):
    return pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=0)


# ----------------------------------------------------------------------------- centre

def _scan_block(start, n_rows, hash_rows, *pieces):
    """``scan_block`` of a chunk, and the fingerprint's digests of its blocks when ``hash_rows``."""
    rows = _stack(pieces)
    problem, sums = scan_block(rows, start)
    return problem, sums, (block_digests(rows, start, n_rows) if hash_rows and problem is None else None)


def scan_rows_dask(X, progress=None, fingerprint=None):
    """``data.scan_rows`` on the cluster: checks every value is finite, returns column means.

    The row blocks are those of ``data.scan_rows`` and their float64 sums are added on the
    client in the same order, so the result is bitwise the local one.  With ``fingerprint``
    (a :class:`aflite_fast.io.fingerprint.ContentHash`) each worker also hashes its block's
    rows where they are and the client takes the digests in order: the fingerprint equals
    the local scan's.

    Raises
    ------
    ValueError
        Naming the first row that holds NaN or inf, or a float64 value beyond float32's range.
    """
    X = DaskEmbeddings.open(X)
    n, d = X.shape
    step = scan_chunk_rows(d, X.dtype.itemsize)
    futs = []
    for start in range(0, n, step):
        rows = np.arange(start, min(n, start + step), dtype=np.int64)
        futs.append(X.client.submit(_scan_block, start, n, fingerprint is not None,
                                    *[f for f, _, _ in X.pieces(rows)], pure=False))
    total = np.zeros(d, dtype=np.float64)
    for (problem, block_sum, digests), start in zip(X.client.gather(futs), range(0, n, step)):
        if problem is not None:
            raise ValueError(problem)
        total += block_sum
        if fingerprint is not None:
            fingerprint.add_digests(start, digests, min(n, start + step) - start)
        if progress is not None:
            progress.update(min(n, start + step) - start)
    return total / n


# ----------------------------------------------------------------------------- one phase

def _worker_threads(n_threads):
    if n_threads is not None:
        return int(n_threads)
    try:
        from distributed import get_worker
        w = get_worker()
        return int(getattr(getattr(w, "state", w), "nthreads", 1))
    except (ImportError, ValueError, AttributeError):
        return 1


def _train_task(center, positions, codes, member, coef, n_classes, C, loss, options, n_threads, precond,
                *pieces):
    raw = _stack(pieces)
    Xa = gather_rows(raw, np.arange(raw.shape[0]), center,
                     kernel.empty_rows(raw.shape[0], raw.shape[1] + 1))
    coef, info = kernel.train_models(Xa, codes, member, n_classes, C=C, loss=loss, coef=coef,
                                     positions=positions, precond=precond, options=options,
                                     n_threads=_worker_threads(n_threads))
    return coef, info["n_iter"], info["status"]


def _predict_task(chunk, W, local, codes, heldout, center, n_classes, want_proba, n_threads):
    n = local.size
    Xa = gather_rows(chunk, local, center, kernel.empty_rows(n, chunk.shape[1] + 1))
    seen = np.zeros(n, dtype=np.int32)
    correct = np.zeros(n, dtype=np.int32)
    prob_label = np.zeros(n, dtype=np.float64)
    proba = np.zeros((n, n_classes), dtype=np.float64) if want_proba else None
    kernel.predict_accumulate(Xa, codes, heldout, W, n_classes, seen, correct, prob_label, proba,
                              _worker_threads(n_threads))
    return seen, correct, prob_label, proba


@dataclass
class DaskPhaseScores(engine.PhaseScores):
    """:class:`engine.PhaseScores` plus the bytes the phase moved (see ``bytes_moved``).

    ``bytes_moved`` keys: ``train_rows`` (training rows cut from the chunks and sent to the
    training workers, raw dtype; an upper bound: pieces already on the training worker are
    not sent), ``train_rows_remote`` (the part cut from chunks that were not on the worker
    that trained the block, so that crossed between workers), ``train_inputs``
    (labels, membership, positions and warm start sent with each block), ``coef_back``,
    ``weights_broadcast`` (W to every worker), ``predict_inputs`` (row indices, labels and the
    held-out mask of every chunk's active rows), ``counts_back`` (seen, correct, prob_label;
    plus the probabilities when requested) and ``total``.
    """

    bytes_moved: dict = field(default_factory=dict)


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


def score_phase_dask(X, codes, active, center, train_pos, *, n_classes, C=1.0, loss="ce",
                     loss_params=None, options=None, max_memory=None, n_threads=None,
                     warm_coef=None, proba_sum=None, on_block=None, client=None, min_blocks=None):
    """``engine.score_phase`` on a dask cluster: the same PhaseScores, bitwise.

    Parameters
    ----------
    X : DaskEmbeddings, or anything :func:`as_dask_array` takes (then put on the cluster for
        this call only; pass a DaskEmbeddings to keep the chunks between phases)
    codes, active, center, train_pos, n_classes, C, loss, loss_params, options, warm_coef :
        as in :func:`aflite_fast.engine.score_phase`
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
    DaskPhaseScores
    """
    X = DaskEmbeddings.open(X, client)
    client = X.client
    options = options or kernel.SolverOptions()
    spec = resolve_loss(loss, loss_params, n_classes)
    if spec.address:
        raise ValueError(f"loss {spec.name!r} is a compiled user function; its address is only valid in this "
                         "process, so the dask backend cannot use it (use a built-in loss)")
    budget = parse_memory(max_memory)
    active = np.asarray(active, dtype=np.int64)
    codes = np.asarray(codes, dtype=np.int32)
    center = np.asarray(center, dtype=np.float32)
    n_active = active.size
    m = train_pos.shape[0]
    d = X.shape[1]
    D = d + 1
    item = X.dtype.itemsize
    if min_blocks is None:
        min_blocks = max(1, len(client.nthreads()))
    member = membership_matrix(train_pos, n_active, np.empty((n_active, m), dtype=np.uint8))
    blocks = _split_blocks(engine.plan_blocks(member, budget, d, n_classes, options.history), min_blocks)
    coef = (np.zeros((m, D, n_classes)) if warm_coef is None else np.array(warm_coef, dtype=np.float64))
    n_iter = np.zeros(m, dtype=np.int32)
    status = np.zeros(m, dtype=np.int32)
    Ck = engine.kernel_C(C, n_classes)
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

        form = kernel.preconditioner_forms(n_active, D)[0]
        precond = engine.phase_preconditioner(read_rows, active, d, n_classes, Ck,
                                              train_pos.shape[1], _worker_threads(n_threads), form=form)
        moved["precond_rows"] = int(kernel.preconditioner_sample(n_active, D, form).size) * d * item
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
        fut = client.submit(_train_task, center_f, union, codes_b, member_b, coef_b, n_classes, Ck, spec,
                            options, n_threads, precond_f, *[f for f, _, _ in pieces], pure=False)
        moved["train_rows"] += union.size * d * item
        moved["train_inputs"] += union.nbytes + codes_b.nbytes + member_b.nbytes + coef_b.nbytes
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
    W = kernel.stack_weights(coef)
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
    extra = {"n_chunks": len(futs)} if "n_chunks" in engine.PhaseScores.__dataclass_fields__ else {}
    return DaskPhaseScores(seen=seen, correct=correct, prob_label=prob_label, coef=coef, n_iter=n_iter,
                           status=status, n_blocks=len(blocks),
                           seconds={"train": t1 - t0, "predict": t2 - t1}, bytes_moved=moved, **extra)


# ----------------------------------------------------------------------------- CLI helpers

#: Seconds to wait for a scheduler to answer: dask's default (30 s, with retries) makes a typo
#: in the address look like a hang; a live scheduler answers in milliseconds.
CONNECT_TIMEOUT = 5


def connect(scheduler):
    """A ``distributed.Client`` for ``scheduler``: an address such as ``tcp://host:8786``, a
    scheduler file (``*.json``), or ``"local"`` / ``"local:N"`` for a LocalCluster of N worker
    processes (one thread each; default: one per core).  Use it as a context manager."""
    _, distributed = _import_dask()
    scheduler = os.fspath(scheduler)
    if scheduler == "local" or scheduler.startswith("local:"):
        count = scheduler.split(":", 1)[1] if ":" in scheduler else str(os.cpu_count() or 1)
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"scheduler {scheduler!r}: local:N needs a positive number of workers N")
        n = int(count)
        cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True)
        client = distributed.Client(cluster)
        client._aflite_cluster = cluster  # closed with the client (see close_client)
        return client
    if scheduler.endswith(".json") and not os.path.isfile(scheduler):
        # dask would wait for the file to appear, without end
        raise ValueError(f"scheduler {scheduler!r}: no such scheduler file")
    try:
        if scheduler.endswith(".json"):
            return distributed.Client(scheduler_file=scheduler, timeout=CONNECT_TIMEOUT)
        return distributed.Client(scheduler, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        raise ValueError(f"scheduler {scheduler!r}: no dask scheduler answered there within {CONNECT_TIMEOUT} s "
                         f"({exc})") from None
    except Exception:  # noqa: BLE001
        # Something that is not a dask scheduler answered; dask can read its bytes as a frame
        # length of exabytes (a MemoryError) or fail to decode them: no internals shown.
        raise ValueError(f"scheduler {scheduler!r}: something answered there, but not a dask scheduler") from None


def close_client(client):
    """Close a client from :func:`connect` (and its LocalCluster, if it started one)."""
    cluster = getattr(client, "_aflite_cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


def filter_on_cluster(scheduler, X, y, *, chunk_rows=None, **aflite_kwargs):
    """What ``aflite-fast filter --scheduler ADDRESS`` runs.

    Connects to ``scheduler`` (see :func:`connect`), puts X on the cluster (a ``.npy`` path,
    a list of ``.npy`` shards, a ``.zarr`` path, an ndarray or a dask array; see
    :func:`as_dask_array`), runs :func:`aflite_fast.aflite` with ``backend="dask"`` and
    returns its AFLiteResult.  The client is closed afterwards, also after an error.
    """
    from .algorithm import aflite
    client = connect(scheduler)
    try:
        Xd = DaskEmbeddings(X, client, chunk_rows=chunk_rows)
        return aflite(Xd, y, backend="dask", **aflite_kwargs)
    finally:
        close_client(client)
