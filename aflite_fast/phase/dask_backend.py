"""Dask backend: score AFLite phases on embeddings spread over a ``dask.distributed`` cluster,
data-parallel.

a. X's rows are shared out among the workers in whole reduction groups
   (``layout.reduction_group_rows``, :func:`leaf_ranges`).  Each worker reads its rows once
   per run (a ``.npy`` file straight from the file, a piece at a time) and keeps them as the
   kernel reads them (float32, centred, with the ones column); the rows never move.  The
   filtering loop and the solver stay on the client.
b. The centre (column means) and the finite-value check run where the rows are read, with
   the very row blocks ``data.scan_rows`` uses, so the centre is bitwise the local one.
c. Training: the client runs the kernel's L-BFGS (``solver.train_models_with``).  Every
   round it sends the running models' trial weights to every worker; each worker (a dask
   actor, called directly) returns the partial sums of loss and gradient of the whole
   subtrees of the reduction tree it holds (``solver.MemberRows``); the client adds them by
   the tree (``layout.combine_nodes``), which is how the local engine adds its groups' sums,
   so the models are bitwise those of ``_local.score_phase``.
d. Prediction: the phase's weights go to every worker, which predicts its active rows and
   sends back per-row counts (seen, correct, summed probability of the label).
e. Every phase reports the bytes it sent between processes (``DaskPhaseScores.bytes_moved``).
f. Multiple-choice X (N, K, d): the unit the workers hold is an item (a row of the
   algorithm), kept as its K candidate rows (``multiple_choice.gather_items``); the
   reduction groups are whole items (``reduction_group_rows`` of the N items), as in the
   local engine, so the scorers and counts are again bitwise the local ones.  X is read as
   its N x K candidate rows (the centre and the fingerprint are those of the local scan);
   it may be an ndarray, a memmap, one ``.npy``/``.npz`` file, a zarr array or a dask array.

g. A lost worker (killed, preempted, out of memory) costs the calls it had not answered,
   not the run: every call to the workers (the phase's actors, its held rows, the
   preconditioner's sample, a solver round, the prediction) watches the workers it waits on;
   the shares the lost worker held go to the workers left (a worker that joined first), which
   read their rows again from the same source, and the calls are asked again of them.  The
   shares keep their reduction groups, so the sums and the result are bitwise the
   uninterrupted run's.  When no worker is left (none joining within
   :data:`REJOIN_TIMEOUT`), the rows cannot be read on any worker, or one share's workers are
   lost more than ``distributed.scheduler.allowed-failures`` times in a phase, the phase
   stops with :class:`~aflite_fast.phase.backends.ClusterLost`.

Results do not depend on the number of workers or on which worker holds which group.
"""
import functools
import os
import time
from dataclasses import dataclass, field

import numpy as np

from aflite_fast.core import layout, preconditioning, prediction, solver
from aflite_fast.core.losses import resolve_loss
from aflite_fast.core.reference_class import uses_reference
from aflite_fast.io.arrayfile import open_array_file
from aflite_fast.io.fingerprint import block_digests
from aflite_fast.io.inputs import (
    GATHER_CHUNK_BYTES,
    check_dtype,
    gather_rows,
    multiple_choice_order_message,
    scan_block,
    scan_chunk_rows,
)
from aflite_fast.io.rows import membership_matrix
from aflite_fast.io.rowsource import FileRows, RowSource
from aflite_fast.phase import local as local_phase
from aflite_fast.phase import plan, scores
from aflite_fast.phase.failures import ClusterLost
from aflite_fast.phase.multiple_choice import candidate_rows, is_multiple_choice, tail_columns
from aflite_fast.runtime.memory import parse_memory

__all__ = ["DaskEmbeddings", "DaskPhaseScores", "as_dask_array", "connect", "connect_scheduler", "close_client",
           "leaf_ranges", "score_phase_dask", "scan_rows_dask"]


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


def _row_bounds(n, step, bounds=None):
    """Chunk boundaries: ``bounds`` when given, else every ``step`` rows."""
    if bounds is not None:
        return [int(b) for b in bounds]
    return list(range(0, n, step)) + [n]


def _chunked_rows(n, d, dtype, bounds, read, key):
    """Dask array of n x d rows, chunk [s, e) (consecutive ``bounds``) read on a worker by
    ``read(s, e)`` under ``key(s, e)``."""
    import dask
    da, _ = _import_dask()
    parts = []
    for s, e in zip(bounds[:-1], bounds[1:]):
        parts.append(da.from_delayed(dask.delayed(read, pure=True)(s, e, dask_key_name=key(s, e)),
                                     shape=(e - s, d), dtype=dtype))
    return da.concatenate(parts, axis=0)


def _memmap_as_dask(X, chunk_rows, row_bounds=None):
    import dask
    path, offset = _memmap_source(X)
    n, d = X.shape
    st = os.stat(path)
    token = (path, st.st_size, st.st_mtime_ns, offset, X.shape, str(X.dtype))
    return _chunked_rows(
        n, d, X.dtype, _row_bounds(n, chunk_rows or default_chunk_rows(d, X.dtype.itemsize), row_bounds),
        functools.partial(_read_raw_rows, path, offset, X.dtype, X.shape),
        lambda s, e: f"mmap-rows-{dask.base.tokenize(*token, s, e)}")


def _npy_as_dask(path, chunk_rows, row_bounds=None):
    """A ``.npy``/``.npz`` file (or ``FILE.npz:KEY``) read on the workers through a memory map
    of the same file; a compressed ``.npz`` member cannot be mapped and is sent from here."""
    da, _ = _import_dask()
    mm = open_array_file(path, "embeddings")
    if mm.ndim != 2:
        raise ValueError(f"X must be 2-D (rows x features), got {mm.ndim}-D with shape {mm.shape} in {path!r}"
                         + (f"; {MC_SOURCES}" if mm.ndim == 3 else ""))
    if isinstance(mm, np.memmap) and _memmap_source(mm) is not None:
        return _memmap_as_dask(mm, chunk_rows, row_bounds)
    X = da.from_array(mm, chunks=(chunk_rows or default_chunk_rows(mm.shape[1], mm.dtype.itemsize), -1))
    return X if row_bounds is None else X.rechunk({0: tuple(np.diff(row_bounds).tolist())})


def as_dask_array(X, *, chunk_rows=None, row_bounds=None):
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
    row_bounds : sequence of int, optional
        The chunks' row boundaries (0, ..., N), overriding ``chunk_rows``: a ``.npy`` file or a
        memmap is read in these chunks, anything else is rechunked to them.

    Returns
    -------
    dask.array.Array
    """
    da, _ = _import_dask()
    if isinstance(X, FileRows):
        # one .npy file opened for positioned reads (aflite_fast.io.inputs.open_embeddings): the
        # workers map the same bytes
        X = np.memmap(X.file.path, dtype=X.dtype, mode="r", offset=X.offset, shape=X.shape)
    elif isinstance(X, RowSource):
        raise ValueError(f"the dask backend reads .npy files, .zarr arrays and arrays; {X.name} is another "
                         "format: pass a list of .npy shard paths, or convert it to .npy")
    if isinstance(X, (list, tuple)) and X and all(isinstance(p, (str, os.PathLike)) for p in X):
        arrays = [_npy_as_dask(os.fspath(p), chunk_rows) for p in X]
        widths = {a.shape[1] for a in arrays}
        dtypes = {a.dtype for a in arrays}
        if len(widths) != 1 or len(dtypes) != 1:
            raise ValueError(f"shards differ in width or dtype: widths {sorted(widths)}, dtypes {sorted(map(str, dtypes))}")
        X = da.concatenate(arrays, axis=0)
    elif isinstance(X, (str, os.PathLike)):
        path = os.fspath(X)
        if _is_zarr_path(path):
            X = _open_zarr(path)
        else:
            X = _npy_as_dask(path, chunk_rows, row_bounds)
    elif isinstance(X, np.memmap) and X.ndim == 2 and _memmap_source(X) is not None:
        X = _memmap_as_dask(X, chunk_rows, row_bounds)  # the workers read the file, nothing is pickled
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
    if row_bounds is not None and list(np.concatenate(([0], np.cumsum(X.chunks[0])))) != list(row_bounds):
        X = X.rechunk({0: tuple(np.diff(np.asarray(row_bounds)).tolist())})
    return X


#: The multiple-choice inputs the dask backend takes (said when another one is given).
MC_SOURCES = ("the dask backend takes multiple-choice X (items x candidates x features) as an ndarray, a memory "
              "map, one .npy/.npz file, a zarr array or a dask array")


def _is_zarr_path(path):
    return path.rstrip("/").endswith(".zarr") or os.path.isdir(path)


def _open_zarr(path):
    da, _ = _import_dask()
    try:
        return da.from_zarr(path)
    except ImportError as exc:
        raise ImportError("reading zarr needs the zarr package: pip install zarr") from exc
    except Exception as exc:  # zarr raises its own error types
        raise ValueError(f"cannot read a zarr array from {path!r}: {exc}") from exc


def candidate_rows_of(X):
    """(rows, K): multiple-choice X (N, K, d) as its N x K candidate rows (d columns, item
    after item; a view, or a reshaped dask array) and K; any other X as given and 1.

    Takes an ndarray, a memmap, a ``.npy``/``.npz`` path (``FILE.npz:KEY``), a ``.npy``
    opened for positioned reads, a zarr path or a dask array; a 3-D shard list is refused."""
    da, _ = _import_dask()
    if isinstance(X, FileRows) and len(X.shape) == 3:
        X = np.memmap(X.file.path, dtype=X.dtype, mode="r", offset=X.offset, shape=X.shape)
    elif isinstance(X, (str, os.PathLike)):
        path = os.fspath(X)
        if _is_zarr_path(path):
            arr = _open_zarr(path)
            if arr.ndim != 3:
                return X, 1
            X = arr
        else:
            arr = open_array_file(path, "embeddings")
            if arr.ndim != 3:
                return X, 1
            X = arr
    if not is_multiple_choice(X) or isinstance(X, RowSource):
        return X, 1
    n, K, d = (int(v) for v in X.shape)
    if n == 0 or K == 0 or d == 0:
        raise ValueError(f"X is empty: shape {tuple(X.shape)}; multiple-choice X is (items, candidates, features)")
    if K < 2:
        raise ValueError(f"multiple-choice X must have at least 2 candidates per item, got shape {tuple(X.shape)}")
    if isinstance(X, da.Array):
        return X.rechunk({1: -1, 2: -1}).reshape(n * K, d), K
    if isinstance(X, np.ndarray):
        if not X.flags.c_contiguous:
            if isinstance(X, np.memmap):
                raise ValueError(multiple_choice_order_message(X))
            X = np.ascontiguousarray(X)
        return X.reshape(n * K, d), K
    raise ValueError(f"{MC_SOURCES}; got {type(X).__name__}")


def _file_source(X):
    """(path, offset, dtype, shape) of X when it is one file the workers can read (a ``.npy``
    path or a file-backed memmap), else None."""
    if isinstance(X, (str, os.PathLike)) and not os.path.isdir(X) and os.fspath(X).endswith(".npy"):
        X = open_array_file(os.fspath(X), "embeddings")
    if isinstance(X, FileRows) and len(X.shape) == 2:  # a .npy opened for positioned reads (the CLI's EMB)
        X = np.memmap(X.file.path, dtype=X.dtype, mode="r", offset=X.offset, shape=X.shape)
    if isinstance(X, np.memmap) and X.ndim == 2 and _memmap_source(X) is not None:
        path, offset = _memmap_source(X)
        return path, offset, X.dtype, X.shape
    return None


def _read_file_rows(file, start, stop):
    """Rows [start, stop) of X read from its file (no memory map kept; candidate rows of a
    multiple-choice X)."""
    path, offset, dtype, shape = file
    d = shape[1]
    rows = np.fromfile(path, dtype=dtype, count=(stop - start) * d, offset=offset + start * d * dtype.itemsize)
    return rows.reshape(stop - start, d)


def _worker_addresses(client):
    """The cluster's workers (addresses, sorted) and their thread counts."""
    info = _scheduler_workers(client)
    addresses = sorted(info)
    if not addresses:
        raise ValueError("the dask cluster has no workers")
    return addresses, [int(info[a].get("nthreads", 1)) for a in addresses]


#: Seconds a run waits for a worker to join when every worker of the cluster was lost (a
#: nanny restarting its worker, an autoscaler replacing a machine) before it stops with
#: :class:`~aflite_fast.phase.backends.ClusterLost`.
REJOIN_TIMEOUT = 10.0
#: Seconds between two looks at the cluster's workers while tasks are awaited.
_POLL_SECONDS = 0.25


class _WorkerLost(Exception):
    """Workers (addresses) a call waited on left the cluster before it was answered."""

    def __init__(self, addresses):
        super().__init__(", ".join(sorted(addresses)))
        self.addresses = set(addresses)


def _scheduler_workers(client):
    """The scheduler's information on every worker, by address."""
    try:
        return client.scheduler_info(n_workers=-1)["workers"]
    except TypeError:  # a version of distributed before the argument: it lists every worker
        return client.scheduler_info()["workers"]


def _live_workers(client):
    """Addresses of the workers the scheduler knows now."""
    return set(_scheduler_workers(client))


def _comm_error(exc):
    """Whether ``exc`` says a worker could not be reached (rather than being an error its
    code raised): a closed connection, an actor whose worker could not be contacted or was
    lost, a task that killed its workers."""
    from distributed import KilledWorker
    from distributed.comm.core import CommClosedError

    if isinstance(exc, (CommClosedError, KilledWorker)):
        return True
    if type(exc) is OSError and exc.errno is None:  # "Unable to contact Actor's worker"
        return True
    return isinstance(exc, RuntimeError) and "was lost" in str(exc)  # "Worker holding Actor was lost"


def _wait_tasks(client, futures, involved):
    """The results of ``futures``, waited for while the workers ``involved`` (addresses: where
    they run and where their inputs are) are watched.

    Raises
    ------
    _WorkerLost
        When one of ``involved`` leaves the cluster before every future has finished (a task
        pinned to a lost worker would otherwise wait for it for ever), or a future fails on a
        worker that has left.
    Exception
        The error a task raised on a worker that is still there.
    """
    from distributed import wait

    futures = list(futures)
    involved = set(involved)
    while True:
        try:
            wait(futures, timeout=_POLL_SECONDS)
        except TimeoutError:
            gone = involved - _live_workers(client)
            if gone:
                raise _WorkerLost(gone) from None
            continue
        break
    if any(f.status != "finished" for f in futures):
        gone = involved - _live_workers(client)
        for f in futures:
            if f.status != "finished":
                try:
                    f.result()
                except Exception as exc:  # noqa: BLE001 - sorted below
                    if gone or _comm_error(exc):
                        raise _WorkerLost(gone or involved) from None
                    raise
    return [f.result() for f in futures]


def _actor_result(client, future, address):
    """The result of an actor's call on the worker at ``address``, or _WorkerLost when that
    worker leaves the cluster first (a call made after the worker was lost may otherwise wait
    for the actor to be recomputed, which it never is)."""
    while True:
        try:
            return future.result(timeout=_POLL_SECONDS)
        except TimeoutError:
            if future.done():
                # finished between the wait and this check (a loaded machine widens that
                # window): its result, or the method's own error (its own TimeoutError too)
                return future.result()
            if address not in _live_workers(client):
                raise _WorkerLost({address}) from None


def _allowed_failures():
    import dask

    return int(dask.config.get("distributed.scheduler.allowed-failures", 3))


def leaf_ranges(n_rows, n_workers):
    """How the reduction groups of X (``layout.reduction_group_rows``) are shared out:
    a list of (leaf_lo, leaf_hi, row_lo, row_hi), one per worker that holds rows, with
    consecutive groups of about as many rows each (a power of two of workers: exactly as
    many, one whole subtree each); the last range runs to the last leaf of the tree (the
    leaves past X's rows hold none)."""
    G = layout.reduction_group_rows(n_rows)
    n_groups = -(-int(n_rows) // G)
    w = max(1, min(int(n_workers), n_groups))
    # each cut near its even share, within a sixth of a share, where the most leaves line up
    # with a whole subtree: fewer partial sums per round (the rounds' bytes)
    slack = n_groups // (6 * w)
    cuts = [0]
    for i in range(1, w):
        ideal = round(i * n_groups / w)
        near = range(max(cuts[-1] + 1, ideal - slack), min(n_groups - (w - i), ideal + slack) + 1)
        cuts.append(max(near, key=lambda c: ((c & -c), -abs(c - ideal))))
    cuts.append(n_groups)
    out = []
    for i in range(w):
        lo, hi = cuts[i], cuts[i + 1]
        out.append((lo, layout.REDUCE_LEAVES if i == w - 1 else hi, lo * G, min(int(n_rows), hi * G)))
    return out


class DaskEmbeddings:
    """X held in the memory of a dask cluster, for the whole run.

    Rows are shared out among the workers in whole reduction groups (:func:`leaf_ranges`);
    each worker keeps its rows as the kernel reads them (float32, centred, with the ones
    column: :meth:`held_rows`, made once the centre is known) and every phase computes on
    them where they are.  Multiple-choice X (N, K, d) is shared out in whole items (groups
    of items), each held as its K candidate rows (:mod:`aflite_fast.phase.multiple_choice`, b).
    A ``.npy`` file or a file-backed memmap is read by the workers straight from the file
    (the scan, then their rows, a piece at a time): a worker never holds more than its share.
    Other sources are loaded as row chunks (sent once from here, or computed by the workers)
    that are let go once the rows are held.

    Attributes
    ----------
    client : distributed.Client
    futures : list of Future, one per row chunk (ndarray of shape (rows, d)), each on its
        worker; loaded when asked for
    offsets : ndarray of int64, first row of every chunk, then N (multiple choice: rows
        are candidate rows, and every chunk is whole items)
    shape, dtype : of X ((N, d), or (N, K, d) for multiple choice)
    group : int, K for multiple-choice X, else 1
    row_shape : (rows, d) of the rows read: (N, d), or (N x K, d)
    ranges : list of (worker address, leaf_lo, leaf_hi, row_lo, row_hi, chunk indices), one
        per share of X; row_lo and row_hi count rows of the algorithm (items of multiple-choice
        X).  A share keeps its reduction leaves for the whole run; its worker changes when
        that worker is lost (then a worker may hold several shares).
    workers_lost : list of str
        Addresses of the workers found lost so far, in order.
    rounds_repeated : int
        Calls to the workers (solver rounds, predictions, preconditioners) asked again of the
        shares of a lost worker so far.
    """

    def __init__(self, X, client=None, *, chunk_rows=None):
        _, distributed = _import_dask()
        self.client = client if client is not None else distributed.default_client()
        X, K = candidate_rows_of(X)
        probe = as_dask_array(X, chunk_rows=chunk_rows)
        self.row_shape = tuple(int(s) for s in probe.shape)
        self.dtype = np.dtype(probe.dtype)
        self.group = K
        n_rows, d = self.row_shape
        n = n_rows // K
        self.shape = (n, d) if K == 1 else (n, K, d)
        # chunks of whole items: every boundary is a multiple of K
        step = max(1, (chunk_rows or default_chunk_rows(d, self.dtype.itemsize)) // K) * K
        addresses, self.worker_threads = _worker_addresses(self.client)
        shares = leaf_ranges(n, len(addresses))
        bounds = sorted(set(range(0, n_rows, step)) | {r * K for *_, r0, r1 in shares for r in (r0, r1)} | {n_rows})
        self.offsets = np.asarray(bounds, dtype=np.int64)
        self.ranges = []
        for addr, (lo, hi, r0, r1) in zip(addresses, shares):
            self.ranges.append((addr, lo, hi, r0, r1,
                                [i for i in range(len(bounds) - 1) if r0 * K <= bounds[i] < r1 * K]))
        self.file = _file_source(X)  # (path, offset, dtype, shape) when the workers read a file
        in_memory = isinstance(X, np.ndarray) and not isinstance(X, np.memmap)
        self._source = X if in_memory else as_dask_array(X, chunk_rows=chunk_rows, row_bounds=bounds)
        self._futures = None
        self._chunk_home = [None] * len(self.ranges)  # the worker each share's chunks were last loaded on
        self._held = None  # (centre, futures of each worker's held rows, position_bias)
        self._held_spec = None  # (centre, position_bias) of the held rows being made
        self._held_home = [None] * len(self.ranges)  # the worker each share's held rows are on
        self.workers_lost = []  # addresses of the workers found lost, in order
        self.rounds_repeated = 0
        self._gone = {}  # lost address -> whether the scheduler has dropped it since
        self._unreadable = {}  # address -> the error its worker raised reading X
        self.reset_losses()
        if self.file is None:
            self._load()

    def _load(self):
        """Each chunk computed (or sent from here) on the worker whose rows it holds."""
        futures = [None] * self.n_chunks
        for i, futs in self._run_on_shares(range(len(self.ranges)), self._submit_chunks).items():
            for j, f in zip(self.ranges[i][5], futs):
                futures[j] = f
        self._futures = futures

    def _submit_chunks(self, i, address):
        """Share ``i``'s chunks computed (or sent from here) on ``address``: their futures.
        Loaded again (the share moved off a lost worker), a chunk's tasks get new keys: the
        scheduler would otherwise keep its first tasks, pinned to the lost worker."""
        blocks = None if isinstance(self._source, np.ndarray) else self._source.to_delayed().ravel()
        again = self._chunk_home[i] not in (None, address)
        self._chunk_home[i] = address
        futures = []
        for j in self.ranges[i][5]:
            a, b = int(self.offsets[j]), int(self.offsets[j + 1])
            if blocks is None:  # in memory here: sent once, straight to its worker
                [f] = self.client.scatter([np.ascontiguousarray(self._source[a:b])], workers=[address],
                                          direct=True, hash=False)
            elif again:
                # computed there by one task of its own: the chunk's tasks in the scheduler keep
                # their first keys, pinned to the lost worker
                import cloudpickle

                f = self.client.submit(_compute_block, cloudpickle.dumps(blocks[j]), workers=[address],
                                       allow_other_workers=False, pure=False)
            else:
                f = self.client.compute(blocks[j], workers=[address], allow_other_workers=False)
            futures.append(f)
        return futures

    # ------------------------------------------------------------------ lost workers

    def _lose(self, addresses):
        """Note workers found lost (each counted once, in ``workers_lost``)."""
        for a in sorted(addresses):
            if a not in self._gone:
                self.workers_lost.append(a)
                self._gone[a] = False

    def _place(self, i):
        """A worker for share ``i``: a live one that is not lost nor failed to read X, holding no
        share if there is one (a worker that joined), else the one holding the fewest rows.
        Waits up to :data:`REJOIN_TIMEOUT` for a worker when none is left."""
        deadline = time.monotonic() + REJOIN_TIMEOUT
        while True:
            live = _live_workers(self.client)
            for a in list(self._gone):
                if a not in live:
                    self._gone[a] = True  # gone from the scheduler: if the address comes back, it is a new worker
                elif self._gone[a]:
                    del self._gone[a]
            usable = live - set(self._gone) - set(self._unreadable)
            if usable:
                break
            _, _, _, r0, r1, _ = self.ranges[i]
            if live - set(self._gone):  # workers are left, and none could read the rows
                addr, exc = next(iter(self._unreadable.items()))
                raise ClusterLost(f"the rows {r0}..{r1 - 1} of X cannot be read on any worker left of the dask "
                                  f"cluster ({addr}: {type(exc).__name__}: {exc})")
            if time.monotonic() >= deadline:
                raise ClusterLost(f"the dask cluster lost every worker ({len(self.workers_lost)} lost: "
                                  f"{', '.join(self.workers_lost)}) and none joined within {REJOIN_TIMEOUT:g} s")
            time.sleep(_POLL_SECONDS)
        load = dict.fromkeys(usable, 0)
        for j, r in enumerate(self.ranges):
            if j != i and r[0] in load:
                load[r[0]] += r[4] - r[3]
        return min(sorted(usable), key=lambda a: load[a])

    def _reassign(self, addresses, lost=True, shares=None):
        """Every share held on ``addresses`` (or the shares ``shares``) given a new worker
        (:meth:`_place`); returns their indices.  ClusterLost when one share's workers were lost
        more than ``distributed.scheduler.allowed-failures`` times since :meth:`reset_losses`."""
        moved = [i for i, r in enumerate(self.ranges) if r[0] in addresses] if shares is None else list(shares)
        for i in moved:
            _, lo, hi, r0, r1, idx = self.ranges[i]
            if lost:
                self._share_losses[i] += 1
                if self._share_losses[i] > _allowed_failures():
                    raise ClusterLost(f"the workers holding rows {r0}..{r1 - 1} of X were lost "
                                      f"{self._share_losses[i]} times in one phase (more than "
                                      f"distributed.scheduler.allowed-failures = {_allowed_failures()})")
            self.ranges[i] = (self._place(i), lo, hi, r0, r1, idx)
        return moved

    def reset_losses(self):
        """Start counting the losses of each share anew (at the start of a phase)."""
        self._share_losses = [0] * len(self.ranges)

    def _run_on_shares(self, shares, submit, recovering=False):
        """``submit(i, address)`` (a list of futures of tasks on ``address``) for every share
        ``i`` of ``shares``, waited for; the shares of a worker lost meanwhile go to other
        workers and are submitted again there.  ``recovering``: a task's error (the rows could
        not be read there) sends its share to another worker too, instead of being raised.
        Returns {share: futures}."""
        out = {}
        todo = sorted(set(shares))
        while todo:
            futs, involved = {}, set()
            for i in todo:
                address = self.ranges[i][0]
                involved.add(address)
                try:
                    futs[i] = submit(i, address)
                except Exception as exc:  # noqa: BLE001 - a scatter to a worker that has just gone
                    if address in _live_workers(self.client) and not _comm_error(exc):
                        raise
                    futs[i] = None
            dead = {self.ranges[i][0] for i in todo if futs[i] is None}
            try:
                if dead:
                    raise _WorkerLost(dead)
                _wait_tasks(self.client, [f for i in todo for f in futs[i]], involved)
            except _WorkerLost as lost:
                done = [i for i in todo if futs[i] is not None and self.ranges[i][0] not in lost.addresses
                        and all(f.status == "finished" for f in futs[i])]
                out.update((i, futs[i]) for i in done)
                self._lose(lost.addresses)
                self._reassign(lost.addresses)
                todo = [i for i in todo if i not in done]
                continue
            except Exception as exc:  # noqa: BLE001 - a task's own error
                if not recovering:
                    raise
                failed = [i for i in todo if any(f.status == "error" for f in futs[i])]
                for i in failed:  # that worker cannot read these rows: it takes no more shares
                    self._unreadable.setdefault(self.ranges[i][0], exc)
                done = [i for i in todo if i not in failed and all(f.status == "finished" for f in futs[i])]
                out.update((i, futs[i]) for i in done)
                self._reassign((), lost=False, shares=failed)
                todo = [i for i in todo if i not in done]
                continue
            out.update((i, futs[i]) for i in todo)
            todo = []
        return out

    @property
    def futures(self):
        if self._futures is None:
            self._load()
        return self._futures

    @classmethod
    def open(cls, X, client=None, *, chunk_rows=None):
        """``X`` if it is already a DaskEmbeddings, else ``DaskEmbeddings(X, client)``."""
        return X if isinstance(X, cls) else cls(X, client, chunk_rows=chunk_rows)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def nbytes(self):
        return self.row_shape[0] * self.row_shape[1] * self.dtype.itemsize

    @property
    def n_chunks(self):
        return len(self.offsets) - 1

    def held_rows(self, center, position_bias=False):
        """Futures of each worker's rows as the kernel reads them (float32, centred, with the
        ones column, or the position columns of multiple choice: ``_HeldRows``), one per
        entry of ``ranges``; made on the workers from their chunks the first time a centre
        (and ``position_bias``) is asked for, and kept.  Asked again, the rows of workers lost
        since go to other workers, and a worker that joined takes a share from a worker that
        holds several."""
        center = np.asarray(center, dtype=np.float32)
        position_bias = bool(position_bias) and self.group > 1
        if self._held is not None and np.array_equal(self._held[0], center) and self._held[2] == position_bias:
            self._rebalance()
            return self._held[1]
        self._held = None
        self._held_spec = (center.copy(), position_bias)
        held = self._run_on_shares(range(len(self.ranges)), self._submit_held)
        self._held = (center.copy(), [held[i][0] for i in range(len(self.ranges))], position_bias)
        self._futures = None  # the chunks are let go (loaded again if other held rows are asked for)
        return self._held[1]

    def _submit_held(self, i, address):
        """Share ``i``'s held rows made on ``address`` (from the file, or from its chunks loaded
        there); kept as the share's held rows."""
        center, position_bias = self._held_spec
        _, lo, hi, r0, r1, idx = self.ranges[i]
        if self.file is not None:
            source = (self.file, r1 * self.group)
        elif self._futures is not None and self._chunk_home[i] == address:
            source = tuple(self._futures[j] for j in idx)
        else:
            source = tuple(self._submit_chunks(i, address))
        future = self.client.submit(_HeldRows, center, r0, lo, hi, source, self.group, position_bias,
                                    workers=[address], allow_other_workers=False, pure=False)
        if self._held is not None:
            self._held[1][i] = future
        self._held_home[i] = address
        return [future]

    def held_on(self, i, address):
        """Share ``i``'s held rows on ``address``: a list of its future, the rows made there first
        if they are elsewhere (the share was moved off a lost worker)."""
        if self._held_home[i] == address:
            return [self._held[1][i]]
        return self._submit_held(i, address)

    def held_rows_futures(self):
        """The futures of the held rows now (one per share, in ``ranges`` order)."""
        return list(self._held[1])

    def _rebalance(self):
        """Between phases: the shares of workers that have left go to other workers (counted as
        lost), and each worker holding no share (one that joined) takes a share of a worker that
        holds several."""
        live = _live_workers(self.client)
        gone = {r[0] for r in self.ranges} - live
        moved = []
        if gone:
            self._lose(gone)
            moved = self._reassign(gone)
        holders = [r[0] for r in self.ranges]
        idle = sorted(live - set(holders) - set(self._gone) - set(self._unreadable))
        for address in idle:
            crowded = [i for i, a in enumerate(holders) if holders.count(a) > 1]
            if not crowded:
                break
            i = max(crowded, key=lambda j: (self.ranges[j][4] - self.ranges[j][3], -j))
            self.ranges[i] = (address,) + tuple(self.ranges[i][1:])
            holders[i] = address
            moved.append(i)
        if moved:
            self._run_on_shares(moved, self._submit_held, recovering=True)

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
                f"workers={len(self.ranges)}, {self.nbytes / 1e6:.1f} MB on the cluster)")


def _compute_block(payload):
    """A chunk of X computed here from its pickled graph (dask's own scheduler, in this task)."""
    import cloudpickle

    return np.asarray(cloudpickle.loads(payload).compute(scheduler="sync"))


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


def _scan_file_block(file, start, stop, n_rows, hash_rows):
    return _scan_block(start, n_rows, hash_rows, _read_file_rows(file, start, stop))


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
    n, d = X.row_shape  # multiple choice: the candidate rows, as the local scan reads them
    step = scan_chunk_rows(d, X.dtype.itemsize)
    while True:
        futs = []
        for start in range(0, n, step):
            stop = min(n, start + step)
            if X.file is not None:  # read where the rows will be held, from the file (or, that
                # worker lost, by another: the scheduler moves the task)
                owner = next(r[0] for r in X.ranges if r[3] * X.group <= start < r[4] * X.group)
                futs.append(X.client.submit(_scan_file_block, X.file, start, stop, n, fingerprint is not None,
                                            workers=[owner], allow_other_workers=True, pure=False))
                continue
            rows = np.arange(start, stop, dtype=np.int64)
            futs.append(X.client.submit(_scan_block, start, n, fingerprint is not None,
                                        *[f for f, _, _ in X.pieces(rows)], pure=False))
        try:
            # the chunks are pinned to their workers: a lost one is loaded again elsewhere
            results = _wait_tasks(X.client, futs, set() if X.file is not None else {r[0] for r in X.ranges})
            break
        except _WorkerLost as lost:
            X._lose(lost.addresses)
            X._reassign(lost.addresses)
            X._futures = None
    total = np.zeros(d, dtype=np.float64)
    for (problem, block_sum, digests), start in zip(results, range(0, n, step)):
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


class _HeldRows:
    """A worker's rows of X as the kernel reads them, for the whole run: float32, centred,
    with the ones column, 64-byte aligned with the kernel's padded stride (``layout.empty_rows``),
    the same values ``data.gather_rows`` writes locally.  Rows ``first`` ... of X, reduction
    leaves [leaf_lo, leaf_hi); ``source`` is (file, last row + 1), read a piece at a time, or
    the tuple of the rows' chunks.  Multiple choice (``group`` = K > 1): ``first`` is an item,
    the rows read are candidate rows, and each is followed by its position columns, the
    values ``multiple_choice.gather_items`` writes locally."""

    def __init__(self, center, first, leaf_lo, leaf_hi, source, group=1, position_bias=False):
        d = center.size
        tail = tail_columns(group, position_bias) if group > 1 else None
        D = d + (1 if tail is None else tail.shape[1])
        start = int(first) * group
        if isinstance(source, tuple) and len(source) == 2 and not isinstance(source[0], np.ndarray):
            file, stop = source
            self.rows = layout.empty_rows(stop - start, D)
            piece = max(group, GATHER_CHUNK_BYTES // (d * file[2].itemsize) // group * group)
            for a in range(start, stop, piece):
                b = min(stop, a + piece)
                raw = _read_file_rows(file, a, b)
                gather_rows(raw, np.arange(b - a), center, self.rows[a - start:b - start, :d + 1])
        else:
            chunks = source
            n = sum(c.shape[0] for c in chunks)
            self.rows = layout.empty_rows(n, D)
            at = 0
            for c in chunks:
                gather_rows(c, np.arange(c.shape[0]), center, self.rows[at:at + c.shape[0], :d + 1])
                at += c.shape[0]
        if tail is not None and self.rows.shape[0]:
            self.rows[:, d:] = np.tile(tail, (self.rows.shape[0] // group, 1))
        self.first, self.leaf_lo, self.leaf_hi = int(first), int(leaf_lo), int(leaf_hi)
        self.group = int(group)

    def __sizeof__(self):  # what dask counts as this worker's data
        return int(self.rows.base.nbytes if self.rows.base is not None else self.rows.nbytes)


class _PhaseRows:
    """One phase on a worker's held rows (a dask actor: the client calls it directly, without
    the scheduler): the active rows' labels and member lists and the reduction layout
    (inactive rows stay where they are and train no model).  Rows of the algorithm: items of
    K candidate rows for multiple choice."""

    def __init__(self, held, active_bits, member_bits, n_models, codes, first_position, group_rows, n_threads):
        n = held.rows.shape[0] // held.group
        act = np.unpackbits(active_bits, count=n).view(bool)
        idx = np.flatnonzero(act)
        member = np.zeros((n, n_models), dtype=np.uint8)
        if idx.size:
            member[idx] = np.unpackbits(member_bits, axis=1, count=n_models)
        y = np.zeros(n, dtype=np.int32)
        y[idx] = codes
        # an inactive row takes the position of the next active row: every row block keeps
        # its active rows (the local engine's blocks), inactive rows add nothing
        positions = first_position + np.cumsum(act) - act
        leaves = (held.first + np.arange(n, dtype=np.int64)) // group_rows
        self.held, self.active_rows, self.member = held, idx, member
        self.sums = solver.MemberRows(held.rows, y, member, positions, leaves, held.group)
        self.n_threads = _worker_threads(n_threads)

    def evaluate(self, models, W, scale, loss, reference=False):
        """(partial sums of the worker's subtrees, seconds of the member pass); W and the sums
        without the class rows' padding; ``reference``: W's outputs are those of the
        reference-class form (``solver.train_models_with``)."""
        t0 = time.perf_counter()
        nA, C, D = W.shape
        Wp = np.zeros((nA, C, solver._kernel.member_width(D)), dtype=np.float32)
        Wp[:, :, :D] = W
        nodes = self.sums.sums(models, Wp, scale, loss, (self.held.leaf_lo, self.held.leaf_hi), self.n_threads,
                               reference)
        nodes = [(level, index, _unpad_sums(values, C, D)) for level, index, values in nodes]
        return nodes, time.perf_counter() - t0

    def predict(self, W, n_classes, want_proba):
        """Per active row: held-out predictions seen and correct, summed probability of the label
        (``n_classes``: the models' outputs, 1 for multiple choice, whose K candidates are the classes)."""
        idx = self.active_rows
        n = idx.size
        G = self.held.group
        seen = np.zeros(n, dtype=np.int32)
        correct = np.zeros(n, dtype=np.int32)
        prob_label = np.zeros(n, dtype=np.float64)
        proba = np.zeros((n, n_classes * G), dtype=np.float64) if want_proba else None
        if n:
            lo, hi = int(idx[0]), int(idx[-1]) + 1
            if hi - lo == n:  # the active rows are one run: a view, no copy
                Xa = self.held.rows[lo * G:hi * G]
            else:
                Xa = layout.empty_rows(n * G, self.held.rows.shape[1])
                np.take(self.held.rows, idx if G == 1 else candidate_rows(idx, G), axis=0, out=Xa)
            heldout = np.subtract(1, self.member[idx], dtype=np.uint8)
            prediction.predict_accumulate(Xa, self.sums.y[idx], heldout, W, n_classes, seen, correct, prob_label,
                                      proba, self.n_threads, G)
        small = np.uint8 if self.member.shape[1] < 256 else np.int32
        return seen.astype(small), correct.astype(small), prob_label, proba


def _unpad_sums(sums, n_classes, D, inverse=False):
    """Sums (models, C * member_width(D) + 1) without the class rows' padding (zero), as
    (models, C * D + 1); ``inverse``: back to the padded layout."""
    Dp = solver._kernel.member_width(D)
    nA = sums.shape[0]
    if inverse:
        out = np.zeros((nA, n_classes * Dp + 1))
        out[:, :-1].reshape(nA, n_classes, Dp)[:, :, :D] = sums[:, :-1].reshape(nA, n_classes, D)
    else:
        out = np.empty((nA, n_classes * D + 1))
        out[:, :-1].reshape(nA, n_classes, D)[:] = sums[:, :-1].reshape(nA, n_classes, Dp)[:, :, :D]
    out[:, -1] = sums[:, -1]
    return out


def _build_preconditioner(n_classes, l2, form, curvature, *parts):
    rows = parts[0] if len(parts) == 1 else np.concatenate(parts)
    return preconditioning.preconditioner(rows, n_classes, l2, 1, form=form, curvature=curvature)


def _sample_rows(held, local):
    """The preconditioner's sample rows ``local`` of a worker (items: their candidate rows
    centred within each item, as ``_local.score_phase`` reads them)."""
    if held.group > 1:
        return layout.item_centered(held.rows, local, held.group)
    return np.ascontiguousarray(held.rows[local])


def _nodes_nbytes(nodes):
    return sum(values.nbytes + 16 for _, _, values in nodes)


def _small_codes(codes, n_classes):
    return codes.astype(np.uint8 if n_classes <= 256 else np.int32)


@dataclass
class DaskPhaseScores(scores.PhaseScores):
    """:class:`scores.PhaseScores` plus the bytes the phase moved between processes.

    ``bytes_moved`` keys (measured: the ``nbytes`` of the arrays sent): ``phase_inputs``
    (each worker's active-row mask, member bits and labels, once per phase),
    ``precond_rows`` (the preconditioner's sample rows, to the client), ``weights_out``
    (every round: the running models' trial weights, to every worker), ``sums_back`` (every
    round: each worker's partial sums of loss and gradient), ``predict_weights`` (the phase's
    weights, to every worker), ``counts_back`` (per active row: seen, correct, summed
    probability of the label; the summed probabilities when asked for) and ``total``.
    ``rounds`` counts the solver rounds (evaluations of the running models); ``seconds``
    adds to the engine's ``rounds`` (wall time of the rounds, as the client sees them) and
    ``rounds_compute`` (the slowest worker's member pass, summed over the rounds): their
    difference is the rounds' communication and scheduling.

    ``workers_lost`` lists the workers (addresses) found lost during the phase, whose shares
    of X went to other workers; ``rounds_repeated`` counts the calls to the workers (solver
    rounds, the prediction, the preconditioner) asked again of those shares.  Neither changes
    the results.
    """

    bytes_moved: dict = field(default_factory=dict)
    rounds: int = 0
    workers_lost: list = field(default_factory=list)
    rounds_repeated: int = 0


def phase_arguments(X, client, options, loss, loss_params, n_classes, max_memory, active, codes, center):
    """A phase's arguments checked and converted: (DaskEmbeddings, SolverOptions, resolved
    loss, budget in bytes, active, codes, center).  A compiled user loss is refused: its
    address is only valid in this process."""
    X = DaskEmbeddings.open(X, client)
    spec = resolve_loss(loss, loss_params, n_classes)
    if spec.address:
        raise ValueError(f"loss {spec.name!r} is a compiled user function; its address is only valid in this "
                         "process, so the dask backend cannot use it (use a built-in loss)")
    return (X, options or solver.SolverOptions(), spec, parse_memory(max_memory), np.asarray(active, dtype=np.int64),
            np.asarray(codes, dtype=np.int32), np.asarray(center, dtype=np.float32))


def score_phase_dask(X, codes, active, center, train_pos, *, n_classes, C=1.0, loss="ce",
                     loss_params=None, options=None, max_memory=None, n_threads=None,
                     warm_coef=None, proba_sum=None, on_block=None, client=None, position_bias=False):
    """``_local.score_phase`` on a dask cluster, data-parallel: the same PhaseScores, bitwise.

    X's rows stay on the workers that hold them (:class:`DaskEmbeddings`).  The solver runs
    here (``solver.train_models_with``); in every round each worker computes, for the models
    still running, the partial sums of loss and gradient over its own rows (whole reduction
    groups, ``solver.MemberRows``), and they are added here by the reduction tree
    (``layout.combine_nodes``) into the bits the local engine's pass adds up.  Prediction
    sends the weights to every worker and takes back per-row counts.

    Parameters
    ----------
    X : DaskEmbeddings, or anything :func:`as_dask_array` or (multiple-choice X)
        :func:`candidate_rows_of` takes: then put on the cluster for this call only (pass a
        DaskEmbeddings to keep the chunks between phases)
    codes, active, center, train_pos, n_classes, C, loss, loss_params, options, warm_coef,
    position_bias :
        as in :func:`aflite_fast.phase.local.score_phase`
    max_memory : int or str, optional
        Budget that chooses the preconditioner's form (as in the local engine).
    n_threads : int, optional
        Kernel threads inside each task; None uses each worker's thread count.
    proba_sum : ndarray (n_active, C) float64, optional; receives summed held-out probabilities
    on_block : callable, optional; called after training and after prediction
    client : distributed.Client, optional
        Default: the client ``X`` was opened with.

    Returns
    -------
    DaskPhaseScores
    """
    X, options, spec, budget, active, codes, center = phase_arguments(
        X, client, options, loss, loss_params, n_classes, max_memory, active, codes, center)
    client = X.client
    n_active = active.size
    m, t = train_pos.shape
    # G candidate rows per item (1: classification), D columns of the kernel rows, outputs per row
    G, D, n_out = plan.phase_shape(X, n_classes, position_bias)
    n_free = 1 if G == 1 else D - X.shape[-1]
    Ck = plan.kernel_C(C, n_classes) if G == 1 else C
    if G == 1 and local_phase.row_space_sizes(X.shape[0], t, D, n_out, loss, loss_params):
        # small X whose models train in the row space: that solver runs on all of X's rows at
        # once (the Gram matrix of every pair), so X comes here and the local engine scores
        # the phase: its bits
        return _score_phase_here(X, codes, active, center, train_pos, n_classes=n_classes, C=C, loss=loss,
                                 loss_params=loss_params, options=options, max_memory=max_memory,
                                 n_threads=n_threads, warm_coef=warm_coef, proba_sum=proba_sum, on_block=on_block)
    moved = dict.fromkeys(["phase_inputs", "precond_rows", "weights_out", "sums_back", "predict_weights",
                           "counts_back"], 0)
    t0 = time.perf_counter()
    X.reset_losses()
    lost_before, repeated_before = len(X.workers_lost), X.rounds_repeated
    X.held_rows(center, position_bias)
    member = membership_matrix(train_pos, n_active, np.empty((n_active, m), dtype=np.uint8))
    phases = _PhaseActors(X, _phase_inputs(X, active, member, codes, n_classes), n_threads, moved)
    seconds = {}
    precond = None
    if options.precondition:
        p0 = time.perf_counter()
        precond = phases.repeat_if_lost(
            lambda: _phase_preconditioner(client, X, active, G, D, n_out, Ck, t, budget, moved))
        seconds["preconditioner"] = time.perf_counter() - p0
    coef = (np.zeros((m, D, n_out)) if warm_coef is None else np.array(warm_coef, dtype=np.float64))
    coef, info, rounds = _train(phases, member, coef, precond, D, n_out, Ck, spec, options, n_threads, n_free, moved,
                                seconds)
    if on_block is not None:
        on_block()
    t1 = time.perf_counter()
    seen, correct, prob_label = _predict(phases, coef, n_active, n_out, proba_sum, moved)
    n_chunks = len(phases.cuts)
    del phases
    if on_block is not None:
        on_block()
    t2 = time.perf_counter()
    moved["total"] = sum(moved.values())
    seconds.update(train=t1 - t0, predict=t2 - t1)
    return DaskPhaseScores(seen=seen, correct=correct, prob_label=prob_label, coef=coef, n_iter=info["n_iter"],
                           status=info["status"], n_blocks=1, seconds=seconds, n_chunks=n_chunks,
                           n_eval=info["n_eval"], bytes_moved=moved, rounds=rounds,
                           workers_lost=list(X.workers_lost[lost_before:]),
                           rounds_repeated=X.rounds_repeated - repeated_before)


def _score_phase_here(X, codes, active, center, train_pos, *, n_threads, **solver_args):
    """The local engine's phase on X's rows brought here (``X`` small: at most
    :data:`aflite_fast.core.row_space.MAX_GRAM_ROWS` rows), with a workspace kept on ``X``
    for its later phases."""
    from aflite_fast.phase.gather import Workspace  # noqa: PLC0415 - only on this path

    t0 = time.perf_counter()
    rows = getattr(X, "_rows_here", None)
    sent = 0
    if rows is None:
        pieces = X.pieces(np.arange(X.shape[0], dtype=np.int64))
        rows = _stack(X.client.gather([f for f, _, _ in pieces]))
        sent = int(rows.nbytes)
        X._rows_here, X._workspace_here = rows, Workspace()
    res = local_phase.score_phase(rows, codes, active, center, train_pos, n_threads=n_threads or os.cpu_count() or 1,
                                  workspace=X._workspace_here, **solver_args)
    seconds = dict(res.seconds, rows_here=time.perf_counter() - t0 - res.seconds["train"] - res.seconds["predict"])
    return DaskPhaseScores(seen=res.seen, correct=res.correct, prob_label=res.prob_label, coef=res.coef,
                           mean_coef=res.mean_coef, n_iter=res.n_iter, status=res.status, n_blocks=res.n_blocks,
                           seconds=seconds, n_chunks=res.n_chunks, n_eval=res.n_eval,
                           bytes_moved={"rows_here": sent, "total": sent}, rounds=0)


def _phase_inputs(X, active, member, codes, n_classes):
    """Per share of X: the arguments of its :class:`_PhaseRows` (the mask of its active rows,
    their member bits and labels, its first active position, the reduction group's rows) and
    its range of active positions ``(a, b)``."""
    m = member.shape[1]
    group_rows = layout.reduction_group_rows(X.shape[0])
    out = []
    for _, lo, hi, r0, r1, _ in X.ranges:
        a, b = (int(v) for v in np.searchsorted(active, [r0, r1]))
        mask = np.zeros(r1 - r0, dtype=bool)
        mask[active[a:b] - r0] = True
        out.append(((np.packbits(mask), np.packbits(member[a:b], axis=1), m,
                     _small_codes(codes[active[a:b]], n_classes), a, group_rows), (a, b)))
    return out


class _PhaseActors:
    """A phase's :class:`_PhaseRows` actor for each share of X, over the share's held rows,
    and the calls to them (:meth:`call`).  A worker lost meanwhile: its shares go to other
    workers (:meth:`DaskEmbeddings._reassign`), their rows are read there and their actors made
    again with the same inputs, and the calls it had not answered are asked again of them."""

    def __init__(self, X, inputs, n_threads, moved):
        self.X, self.client = X, X.client
        self.inputs = [args for args, _ in inputs]
        self.cuts = [cut for _, cut in inputs]
        self.n_threads, self.moved = n_threads, moved
        self.futures = [None] * len(inputs)  # the actors live as long as their futures
        self.actors = [None] * len(inputs)
        self._start(range(len(inputs)), recovering=False)

    def _start(self, shares, recovering=True):
        X = self.X

        def submit(i, address):
            [held] = X.held_on(i, address)
            self.moved["phase_inputs"] += sum(v.nbytes for v in self.inputs[i] if isinstance(v, np.ndarray))
            return [self.client.submit(_PhaseRows, held, *self.inputs[i], self.n_threads, workers=[address],
                                       allow_other_workers=False, pure=False, actor=True)]

        for i, [future] in X._run_on_shares(shares, submit, recovering).items():
            self.futures[i], self.actors[i] = future, future.result()

    def recover(self, addresses):
        """The shares of the workers ``addresses`` (lost) moved to other workers, with their actors."""
        self.X._lose(addresses)
        self._start(self.X._reassign(addresses))

    def call(self, method, args, sent=None):
        """``method(*args)`` of every share's actor: the results in share order.  A share whose
        worker is lost is moved (:meth:`recover`) and asked again; ``sent``: (key of
        ``moved``, bytes of the arguments) counted per call made."""
        results = [None] * len(self.actors)
        todo = list(range(len(self.actors)))
        repeated = False
        while todo:
            calls = []
            for i in todo:
                calls.append((i, self.X.ranges[i][0], getattr(self.actors[i], method)(*args)))
                if sent is not None:
                    self.moved[sent[0]] += sent[1]
            failed, gone = [], set()
            for i, address, future in calls:
                try:
                    results[i] = _actor_result(self.client, future, address)
                except _WorkerLost:
                    failed.append(i)
                    gone.add(address)
                except Exception as exc:  # noqa: BLE001 - sorted below
                    if not _comm_error(exc) and address in _live_workers(self.client):
                        raise  # the method's own error
                    failed.append(i)
                    gone.add(address)
            if gone:
                self.recover(gone)
                repeated = True
            todo = failed
        if repeated:
            self.X.rounds_repeated += 1
        return results

    def repeat_if_lost(self, work):
        """``work()``, run again after moving the shares of a worker lost meanwhile."""
        while True:
            try:
                return work()
            except _WorkerLost as lost:
                self.recover(lost.addresses)
                self.X.rounds_repeated += 1


def _phase_preconditioner(client, X, active, G, D, n_out, Ck, t, budget, moved):
    """The phase's preconditioner (:func:`aflite_fast.core.preconditioning.phase_preconditioner`'s),
    built on the worker holding most of the sample's rows: the others send it theirs, and the
    preconditioner (D x D at most) comes here; multiple choice samples items, sent as their
    item-centred candidate rows; small X is sampled over all of its rows, as the local engine
    samples it (``preconditioning.whole_x_preconditioner``).  _WorkerLost when a worker it
    waits on is lost."""
    whole_x = preconditioning.whole_x_preconditioner(X.shape[0], D - 1, G)
    sampled = np.arange(X.shape[0], dtype=np.int64) if whole_x else active
    l2 = preconditioning.phase_preconditioner_l2(Ck, t, whole_x)
    curvature = None if G == 1 else 1.0
    form = preconditioning.phase_preconditioner_form(sampled.size * G, D - 1, budget)
    sample = sampled[preconditioning.preconditioner_sample(sampled.size, -(-D // G), form)]
    futs, counts = [], []
    for (addr, lo, hi, r0, r1, _), h in zip(X.ranges, X.held_rows_futures()):
        a, b = (int(v) for v in np.searchsorted(sample, [r0, r1]))
        if b > a:
            futs.append(client.submit(_sample_rows, h, sample[a:b] - r0, workers=[addr], pure=False))
            counts.append((b - a, addr))
    if futs:
        per_worker = {}
        for c, addr in counts:
            per_worker[addr] = per_worker.get(addr, 0) + c
        home = max(per_worker, key=lambda a: (per_worker[a], a))
        moved["precond_rows"] += sum(c for c, addr in counts if addr != home) * G * D * 4
        build = client.submit(_build_preconditioner, n_out, l2, form, curvature, *futs,
                              workers=[home], pure=False)
        [precond] = _wait_tasks(client, [build], set(per_worker))
    else:
        precond = preconditioning.preconditioner(np.zeros((0, D), np.float32), n_out, l2, form=form,
                                                 curvature=curvature)
    moved["precond_rows"] += precond.nbytes
    return precond


def _train(phases, member, coef, precond, D, n_out, Ck, spec, options, n_threads, n_free, moved, seconds):
    """The solver here, the sums of every round from the workers' actors, added by the
    reduction tree (the local pass's bits); returns (coef, info, rounds)."""
    rounds = 0
    round_seconds, compute_seconds = [], []
    reference = uses_reference(n_out)  # classifiers: the reference-class form, as the local phase

    def evaluate(models, W, scale, loss_spec):
        nonlocal rounds
        r0_ = time.perf_counter()
        W = np.ascontiguousarray(W[:, :, :D])  # the class rows' padding is zero: not sent
        parts = phases.call("evaluate", (models, W, scale, loss_spec, reference),
                            sent=("weights_out", models.nbytes + W.nbytes + scale.nbytes))
        nodes, slowest = [], 0.0
        for part, busy in parts:
            moved["sums_back"] += _nodes_nbytes(part)
            nodes.extend(part)
            slowest = max(slowest, busy)
        compute_seconds.append(slowest)
        rounds += 1
        round_seconds.append(time.perf_counter() - r0_)
        return _unpad_sums(layout.combine_nodes(nodes), W.shape[1], D, inverse=True)

    n_rows = member.sum(axis=0, dtype=np.int64)
    coef, info = solver.train_models_with(evaluate, n_rows, D, n_out, C=Ck, loss=spec, coef=coef,
                                          precond=precond, options=options,
                                          n_threads=1 if n_threads is None else int(n_threads), n_free=n_free,
                                          reference=reference)
    seconds.update(rounds=float(np.sum(round_seconds)), rounds_compute=float(np.sum(compute_seconds)))
    return coef, info, rounds


def _predict(phases, coef, n_active, n_out, proba_sum, moved):
    """The weights sent to every worker, each worker's held-out counts back: (seen, correct, prob_label)."""
    W = prediction.stack_weights(coef)
    moved["predict_weights"] = 0
    parts = phases.call("predict", (W, n_out, proba_sum is not None), sent=("predict_weights", W.nbytes))
    seen = np.zeros(n_active, dtype=np.int32)
    correct = np.zeros(n_active, dtype=np.int32)
    prob_label = np.zeros(n_active, dtype=np.float64)
    for (a, b), (s_, c_, p_, proba) in zip(phases.cuts, parts):
        seen[a:b], correct[a:b], prob_label[a:b] = s_, c_, p_
        moved["counts_back"] += s_.nbytes + c_.nbytes + p_.nbytes
        if proba is not None:
            proba_sum[a:b] += proba
            moved["counts_back"] += proba.nbytes
    return seen, correct, prob_label


# ----------------------------------------------------------------------------- CLI helpers

#: Seconds a scheduler has to answer (:func:`connect_scheduler`'s default timeout, and
#: ``aflite-fast filter --scheduler-timeout``'s): dask's own default (30 s, with retries) makes a
#: typo in the address look like a hang, and something that accepts the connection but is not a
#: dask scheduler (an HTTP server) would hold it for ever; a live scheduler answers in
#: milliseconds.
CONNECT_TIMEOUT = 10
#: Schemes of scheduler addresses, all over TCP (``ws``/``wss``: dask's websocket comms).
SCHEMES = ("tcp", "tls", "ws", "wss")
_ADDRESS_FORMS = "give tcp://HOST:PORT (or HOST:PORT), a scheduler file (*.json) or local[:N]"


def connect(scheduler, timeout=None):
    """A ``distributed.Client`` for ``scheduler``: :func:`connect_scheduler` under its older
    name (``scheduler`` as there)."""
    return connect_scheduler(scheduler, timeout)


def connect_scheduler(address, timeout=None):
    """A ``distributed.Client`` connected to the dask scheduler at ``address``, or a ValueError
    saying why not, within ``timeout`` seconds.

    Parameters
    ----------
    address : str or os.PathLike
        ``tcp://HOST:PORT`` (also ``tls://``, ``ws://``, ``wss://``; ``HOST:PORT`` means tcp;
        dask's ``inproc://`` and ``ucx://`` addresses are passed on as they are), a
        scheduler file (``*.json``, as ``dask scheduler --scheduler-file`` writes), or
        ``"local"`` / ``"local:N"`` for a LocalCluster of N worker processes (one thread each;
        default: one per core), closed with the client by :func:`close_client`.
    timeout : float, optional
        Seconds the scheduler has to answer (default :data:`CONNECT_TIMEOUT`).  The TCP
        connection, dask's handshake and the scheduler's identity must all come within it.

    Returns
    -------
    distributed.Client
        Close it with :func:`close_client`.

    Raises
    ------
    ValueError
        Each case with its own message: ``address`` is no address (no port, an unknown scheme,
        a word); its host name does not resolve; the connection is refused (nothing listens at
        the port); no connection within ``timeout`` (unreachable); something accepted the
        connection but did not answer as a dask scheduler within ``timeout`` (another service,
        or a dask worker's address); a scheduler file that is missing or holds no address;
        ``local:N`` with a bad N; a ``timeout`` that is not a positive number.
    ImportError
        Without dask and distributed.
    """
    _, distributed = _import_dask()
    timeout = CONNECT_TIMEOUT if timeout is None else timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    address = os.fspath(address)
    if address == "local" or address.startswith("local:"):
        count = address.split(":", 1)[1] if ":" in address else str(os.cpu_count() or 1)
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"scheduler {address!r}: local:N needs a positive number of workers N")
        cluster = distributed.LocalCluster(n_workers=int(count), threads_per_worker=1, processes=True)
        client = distributed.Client(cluster)
        client._aflite_cluster = cluster  # closed with the client (see close_client)
        return client
    shown = address
    if address.endswith(".json"):
        address = _scheduler_file_address(address)
    scheme, host, port = _split_address(address, shown)
    deadline = time.monotonic() + timeout
    if host is None:
        target = address
    else:
        _reach(host, port, timeout, shown)
        target = f"{scheme}://{_host_text(host)}:{port}"
    kind = _identity(target, max(0.1, deadline - time.monotonic()), distributed)
    if kind != "Scheduler":
        if kind is None:
            raise ValueError(f"scheduler {shown!r}: something listens there but did not answer as a dask scheduler "
                             f"within {timeout:g} s; give the address the scheduler printed (tcp://HOST:8786)")
        raise ValueError(f"scheduler {shown!r}: a dask {kind} answered there, not the scheduler; give the "
                         "scheduler's address (tcp://HOST:8786)")
    try:
        return distributed.Client(target, timeout=max(1.0, deadline - time.monotonic()))
    except Exception as exc:  # noqa: BLE001 - answered as a scheduler a moment ago
        raise ValueError(f"scheduler {shown!r}: answered as a dask scheduler, then refused the client "
                         f"({type(exc).__name__}: {exc})") from None


def _scheduler_file_address(path):
    """The address in a scheduler file (``dask scheduler --scheduler-file``)."""
    if not os.path.isfile(path):
        # dask would wait for the file to appear, without end
        raise ValueError(f"scheduler {path!r}: no such scheduler file")
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            info = json.load(fh)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        info = None
    if not isinstance(info, dict) or not isinstance(info.get("address"), str):
        raise ValueError(f"scheduler {path!r} is not a dask scheduler file (JSON with the scheduler's "
                         "\"address\"); give the file the scheduler wrote, or its address")
    return info["address"]


def _split_address(address, shown):
    """``(scheme, host, port)`` of ``[SCHEME://]HOST:PORT`` (host and port None for dask's
    ``inproc://`` and ``ucx://`` addresses); ValueError for anything else."""
    from urllib.parse import urlsplit

    text = address if "://" in address else f"tcp://{address}"
    scheme = text.split("://", 1)[0]
    if scheme in ("inproc", "ucx"):  # not TCP: dask alone can tell
        return scheme, None, None
    try:
        parts = urlsplit(text)
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number in 0..65535
        host = port = None
    if (not host or not port or parts.scheme not in SCHEMES or parts.path or parts.query or parts.fragment
            or parts.username or parts.password):
        raise ValueError(f"scheduler {shown!r} is not a scheduler address: {_ADDRESS_FORMS}")
    return parts.scheme, host, port


def _host_text(host):
    return f"[{host}]" if ":" in host else host


def _reach(host, port, timeout, shown):
    """Open and close a TCP connection to ``host:port``, or raise the ValueError saying why not."""
    import socket

    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except socket.gaierror:
        raise ValueError(f"scheduler {shown!r}: the host name {host!r} does not resolve; check the address") from None
    except ConnectionRefusedError:
        raise ValueError(f"scheduler {shown!r}: connection refused, nothing listens at port {port} of {host}; "
                         f"start the scheduler (dask scheduler --port {port}) or check the port") from None
    except (socket.timeout, TimeoutError):
        raise ValueError(f"scheduler {shown!r}: unreachable, no connection within {timeout:g} s; check the host "
                         "and that a firewall lets the port through") from None
    except OSError as exc:
        raise ValueError(f"scheduler {shown!r}: unreachable ({exc.strerror or exc}); check the host") from None


def _identity(address, timeout, distributed):
    """The ``type`` a dask server at ``address`` gives for itself ("Scheduler", "Worker", ...),
    or None when what answers does not speak dask's protocol within ``timeout`` seconds.

    Runs in a thread of its own (with its own event loop, so a caller inside one works too);
    the wait is cancelled at the timeout, whatever the other side does."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from distributed.comm import connect as comm_connect
    from distributed.security import Security

    async def ask():
        comm = await comm_connect(address, timeout=timeout,
                                  **Security().get_connection_args("client"))
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    def run():
        try:
            reply = asyncio.run(asyncio.wait_for(ask(), timeout))
        except Exception:  # noqa: BLE001 - no dask server: bytes it cannot decode, a timeout, a reset
            return None
        return reply.get("type") if isinstance(reply, dict) and isinstance(reply.get("type"), str) else None

    with ThreadPoolExecutor(1, thread_name_prefix="aflite-scheduler-probe") as pool:
        return pool.submit(run).result()


def close_client(client):
    """Close a client from :func:`connect` (and its LocalCluster, if it started one)."""
    cluster = getattr(client, "_aflite_cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()
