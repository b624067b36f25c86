"""The backend seam: where a phase's models train and its held-out rows are predicted.

Every entry point (``aflite``, ``predictability``, ``oof_predict_proba``, ``evaluate_filter``,
the estimators and the command line) reaches the rows through one of these objects, so that
no caller branches on where the rows live:

=====================  =========================================  ===========================================
backend                rows                                       a phase
=====================  =========================================  ===========================================
:class:`LocalBackend`  this process (arrays, memory maps, files)  :func:`aflite_fast.phase.local.score_phase`
:class:`DaskBackend`   held by the workers of a Dask cluster      :func:`aflite_fast.phase.dask_backend.score_phase_dask`
=====================  =========================================  ===========================================

Both return the same :class:`~aflite_fast.phase.scores.PhaseScores`, bit for bit.  A backend
opens X (:meth:`open`), scans it (:meth:`scan`: finite values, column means, optionally the
content fingerprint), checks its scale where it can read rows (:meth:`check_scale`), scores a
phase (:meth:`score_phase`: trains the partitions' models, then predicts the held-out rows),
reports the bytes a phase sent between processes (:meth:`bytes_moved`), and is closed
(:meth:`close`, or ``with``) when it owns a cluster connection (:meth:`DaskBackend.connect`).
"""
from aflite_fast.phase.failures import ClusterLost
from aflite_fast.runtime.threads import effective_n_threads

#: The values of ``backend=`` that name a backend.
BACKEND_NAMES = ("local", "dask")


class LocalBackend:
    """Rows in this process; a phase on ``n_jobs`` threads (None: every core).

    The backend keeps the buffer of a phase's gathered rows (:class:`~aflite_fast.phase.gather.Workspace`)
    from one phase to the next, so a run gathers its rows once and then compacts them.
    """

    name = "local"
    #: Whether the checks of degenerate inputs may read rows of X here.
    reads_rows = True

    def __init__(self, n_jobs=None):
        self.n_threads = effective_n_threads(n_jobs)
        self._workspace = None

    def open(self, X, column=None, items=True):
        """X opened and checked (:func:`aflite_fast.io.inputs.open_embeddings`: 2-D, or 3-D
        multiple choice with ``items``), and the (rows, d) view scans read (the candidate rows of
        multiple-choice X)."""
        from aflite_fast.io.inputs import open_embeddings
        from aflite_fast.io.sparse import check_sparse, is_sparse

        if is_sparse(X):  # CSR checked (other formats converted once); docs/sparse.md
            if column is not None:
                raise ValueError(f"column={column!r} chooses a column of a table file, but X is a sparse matrix")
            X = check_sparse(X)
            return X, X
        X = open_embeddings(X, column, items=items)
        rows = X.reshape(X.shape[0] * X.shape[1], X.shape[2]) if X.ndim == 3 else X
        return X, rows

    def scan(self, rows, fingerprint=None, progress=None):
        """Column means (float64) of ``rows``; NaN, inf and values beyond float32 refused."""
        from aflite_fast.io.inputs import scan_rows
        from aflite_fast.io.sparse import is_sparse, sparse_scan

        if is_sparse(rows):  # values checked when opened
            return sparse_scan(rows, fingerprint=fingerprint, progress=progress)

        return scan_rows(rows, progress=progress, fingerprint=fingerprint)

    def check_scale(self, rows, center, tol):
        """Refuse rows with no variance or a scale at or below ``tol`` (:mod:`aflite_fast.core.degenerate`)."""
        from aflite_fast.core.degenerate import check_scale

        check_scale(rows, center, tol)  # sparse rows too (column extremes, nothing densified)

    def check_memory(self, n_rows, n_active, n_models, train_size, n_features, n_outputs, budget,
                     with_proba=False):
        """Refuse a phase that ``budget`` cannot hold, before anything is allocated
        (:func:`aflite_fast.phase.plan.check_phase_memory`)."""
        from aflite_fast.phase.plan import check_phase_memory

        check_phase_memory(n_rows, n_active, n_models, train_size, n_features, n_outputs, budget, with_proba)

    def score_phase(self, X, codes, active, center, train_pos, **solver):
        """Train every partition of a phase and predict its held-out rows
        (:func:`aflite_fast.phase.local.score_phase`; ``solver``: its keyword arguments)."""
        from aflite_fast.io.sparse import is_sparse
        from aflite_fast.phase import local
        from aflite_fast.phase.gather import Workspace

        if is_sparse(X):  # CSR rows: the sparse kernel (aflite_fast.phase.sparse_local)
            from aflite_fast.phase.sparse_local import score_phase_sparse

            return score_phase_sparse(X, codes, active, center, train_pos, n_threads=self.n_threads, **solver)

        if self._workspace is None:
            self._workspace = Workspace()
        return local.score_phase(X, codes, active, center, train_pos, n_threads=self.n_threads,
                                 workspace=self._workspace, **solver)

    @staticmethod
    def bytes_moved(scores):
        """Bytes a phase sent between processes: none here."""
        return 0

    def failures(self):
        """Workers lost and rounds repeated so far: none here (see :meth:`DaskBackend.failures`)."""
        return {"workers_lost": 0, "rounds_repeated": 0}

    def close(self):
        self._workspace = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class DaskBackend:
    """Rows held by the workers of a Dask cluster; the solver runs in this process.

    Parameters
    ----------
    client : distributed.Client, optional
        The cluster (default: the current client, ``distributed.default_client()``).
    n_jobs : int, optional
        Kernel threads per task (None: each worker's thread count).

    The run's results equal the local backend's bit for bit (docs/dask.md).  A backend from
    :meth:`connect` owns its client and closes it (and a cluster it started) in :meth:`close`.
    """

    name = "dask"
    reads_rows = False  # the rows are on the workers: only the models' own checks run here

    def __init__(self, client=None, n_jobs=None):
        self.client = client
        self.n_threads = n_jobs
        self._owned = False
        self._failures = {"workers_lost": 0, "rounds_repeated": 0}

    @classmethod
    def connect(cls, scheduler, n_jobs=None, timeout=None):
        """A backend on the cluster at ``scheduler`` (an address, a scheduler file, or ``"local"`` /
        ``"local:N"``), closed by :meth:`close`; a ValueError within ``timeout`` seconds (default
        :data:`aflite_fast.phase.dask_backend.CONNECT_TIMEOUT`) when no dask scheduler answers
        there (:func:`aflite_fast.phase.dask_backend.connect_scheduler`, which says why)."""
        from aflite_fast.phase.dask_backend import connect_scheduler

        backend = cls(connect_scheduler(scheduler, timeout), n_jobs)
        backend._owned = True
        return backend

    def open(self, X, column=None, items=True):
        """X put on (or found on) the cluster as a :class:`~aflite_fast.phase.dask_backend.DaskEmbeddings`;
        the scans read its rows where they are."""
        from aflite_fast.io.sparse import is_sparse

        if is_sparse(X):
            raise ValueError("backend='dask' does not take sparse X; use backend='local' (docs/sparse.md)")
        if column is not None:
            raise ValueError("column= reads a table file, which backend='dask' does not take; convert the "
                             "collection to .npy shards (docs/formats.md)")
        from aflite_fast.phase.dask_backend import DaskEmbeddings

        X = DaskEmbeddings.open(X, self.client)  # multiple choice: X.ndim == 3, items on the workers
        return X, X

    def scan(self, rows, fingerprint=None, progress=None):
        """:func:`~aflite_fast.phase.dask_backend.scan_rows_dask`: the local scan's result, bitwise."""
        from aflite_fast.phase.dask_backend import scan_rows_dask

        return scan_rows_dask(rows, progress=progress, fingerprint=fingerprint)

    def check_scale(self, rows, center, tol):
        """Nothing here: the rows are on the workers.  Models that cannot move are still refused
        (:func:`aflite_fast.core.solver_status.check_trained`)."""

    def check_memory(self, *args, **kwargs):
        """Nothing here: each worker holds its own rows (docs/dask.md)."""

    def score_phase(self, X, codes, active, center, train_pos, **solver):
        """:func:`~aflite_fast.phase.dask_backend.score_phase_dask` on this backend's cluster."""
        from aflite_fast.phase import dask_backend

        scores = dask_backend.score_phase_dask(X, codes, active, center, train_pos, n_threads=self.n_threads,
                                               client=self.client, **solver)
        self._failures["workers_lost"] += len(scores.workers_lost)
        self._failures["rounds_repeated"] += scores.rounds_repeated
        return scores

    @staticmethod
    def bytes_moved(scores):
        """Bytes the phase's arrays sent each way between the client and the workers."""
        return int(getattr(scores, "bytes_moved", {}).get("total", 0))

    def failures(self):
        """Workers lost and rounds repeated by every phase this backend scored so far (null
        passes included): ``{"workers_lost": int, "rounds_repeated": int}``.  A lost worker's
        rows went to other workers and the calls it had not answered were asked again of them
        (:func:`~aflite_fast.phase.dask_backend.score_phase_dask`); the results are those of an
        uninterrupted run."""
        return dict(self._failures)

    def close(self):
        """Close the client (and a cluster it started) when this backend opened it."""
        if self._owned and self.client is not None:
            from aflite_fast.phase.dask_backend import close_client

            close_client(self.client)
            self.client = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def make_backend(backend="local", client=None, n_jobs=None):
    """The backend of ``backend=``: ``"local"``, ``"dask"`` (on ``client``), or a backend object
    (returned as it is).

    Raises
    ------
    ValueError
        For any other value, or ``client`` given with the local backend.
    """
    if isinstance(backend, (LocalBackend, DaskBackend)):
        return backend
    if isinstance(backend, str) and backend == "local":
        if client is not None:
            raise ValueError("client= is the cluster of backend='dask'; with backend='local' leave it out")
        return LocalBackend(n_jobs)
    if isinstance(backend, str) and backend == "dask":
        return DaskBackend(client, n_jobs)
    raise ValueError(f"backend must be 'local', 'dask' or a backend object, got {backend!r}")


__all__ = ["BACKEND_NAMES", "ClusterLost", "DaskBackend", "LocalBackend", "make_backend"]
