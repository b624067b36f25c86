"""The peer a phase is compared with: one model per partition, fitted by a pre-started process pool.

This is "scikit-learn tuned" as a skilled user sets it up, and the one place the benchmarks time it:

a. a pool of ``n_workers`` processes (2 on a 2-core machine) is started ONCE, before anything is
   timed, each with one BLAS thread (``OPENBLAS_NUM_THREADS=1`` and the like in its environment,
   and ``threadpoolctl`` inside it), so the two processes do not fight over the cores;
b. X (float32 dense, or float32 CSR) and y are copied once into shared memory, which every
   worker maps: a phase sends a worker nothing but a partition's training positions, so no
   per-call cost of shipping X is paid (or counted) per partition;
c. a partition is one ``sklearn.linear_model.LogisticRegression(C, tol, max_iter, solver)``
   fitted on its training rows, then the held-out rows predicted in blocks of 20,000 (the
   worker returns, per held-out row, whether the argmax is the label and the label's
   probability, which the parent adds up as a phase does); multiple-choice X (N, K, d) is fitted
   instead with one linear scorer of the candidates (softmax over an item's candidates,
   SciPy's L-BFGS-B, the package's objective and stopping rule; :func:`fit_candidate_scorer`);
d. ``solver="fastest"`` times lbfgs and liblinear on the same first partitions (untimed
   pilot) and keeps the faster; scikit-learn's liblinear fits two classes only (it refuses
   three or more), so with more classes it is lbfgs.

Timing (:meth:`PeerPool.phase`): ``sample`` partitions (at least two per worker, so every worker
fits while the others do, as in a whole phase) are submitted at once; the phase's wall time is
measured from the first submission to the last result added up, and each fit's seconds inside its
worker.  The estimate for all m partitions is

    wall time of the sample + (m - sample) / n_workers x mean seconds per fit,

so what a phase pays once (submitting, adding up, waiting for the last worker) is counted once,
never multiplied by m / sample; with ``sample = m`` it is the measured wall time.  ``check``
compares the two on one shape (``peer_ratios.py --check-full``).

Used by ``peer_ratios.py`` (the ratio table), ``compare_scale.py`` and
``multiple_choice_speed.py``; other benchmarks call :func:`sklearn_tuned_phase_seconds`:

    from peers import PeerPool, sklearn_tuned_phase_seconds
    with PeerPool(X, y, n_workers=2) as pool:           # started once, not timed
        seconds, phase = sklearn_tuned_phase_seconds(X, y, train_pos, C=1.0, pool=pool)

This module imports only NumPy, SciPy, scikit-learn and threadpoolctl (the workers import it).
"""
import os
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from multiprocessing import get_context, shared_memory

import numpy as np

__all__ = ["PeerPool", "PeerPhase", "sklearn_tuned_phase_seconds", "fit_candidate_scorer",
           "predict_candidates", "BLAS_ENV"]

#: Environment each worker starts with: one thread in every BLAS and OpenMP runtime.
BLAS_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "BLIS_NUM_THREADS": "1", "VECLIB_MAXIMUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1"}

#: Held-out rows predicted per block (bounds a worker's copy of held-out rows).
PREDICT_BLOCK = 20000

# ---------------------------------------------------------------------------------------------
# the worker side


_W = {}  # the worker's arrays (views of the shared memory) and its thread limit


def _attach(spec):
    """A view of one shared array described by ``(name, shape, dtype)``; keeps the mapping open."""
    name, shape, dtype = spec
    shm = shared_memory.SharedMemory(name=name)
    _W.setdefault("shm", []).append(shm)
    return np.ndarray(shape, dtype=dtype, buffer=shm.buf)


def _init_worker(specs, csr_shape):
    from threadpoolctl import threadpool_limits

    _W["limits"] = threadpool_limits(limits=1)  # kept alive: the limit holds for the worker's life
    import scipy.optimize  # noqa: F401  (imported here, so the first timed fit does not pay for it)
    import sklearn.linear_model  # noqa: F401
    arrays = {key: _attach(spec) for key, spec in specs.items()}
    if csr_shape is not None:
        import scipy.sparse as sp

        X = sp.csr_matrix((arrays["data"], arrays["indices"], arrays["indptr"]), shape=csr_shape, copy=False)
    else:
        X = arrays["X"]
    _W["X"], _W["y"] = X, arrays["y"]


def _ready(pause):
    """The worker's process id after ``pause`` seconds (so that each worker takes one of the first calls)."""
    time.sleep(pause)
    return os.getpid()


def _held(n, tr):
    keep = np.ones(n, dtype=bool)
    keep[tr] = False
    return np.flatnonzero(keep)


def _fit_logistic(X, y, tr, n_classes, C, tol, max_iter, solver):
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=C, tol=tol, max_iter=max_iter, solver=solver)
    clf.fit(X[tr], y[tr])
    te = _held(X.shape[0], tr)
    correct = np.empty(te.size, dtype=bool)
    prob = np.empty(te.size, dtype=np.float32)
    col = np.full(n_classes, -1)
    col[clf.classes_] = np.arange(clf.classes_.size)
    for i0 in range(0, te.size, PREDICT_BLOCK):
        part = te[i0:i0 + PREDICT_BLOCK]
        p = clf.predict_proba(X[part])
        yp = y[part]
        correct[i0:i0 + part.size] = clf.classes_[np.argmax(p, axis=1)] == yp
        c = col[yp]
        prob[i0:i0 + part.size] = np.where(c >= 0, p[np.arange(part.size), np.maximum(c, 0)], 0.0)
    return te, correct, prob, int(np.max(clf.n_iter_))


def fit_candidate_scorer(Xt, yt, C, dtype=np.float32, tol=1e-4, max_iter=1000):
    """One linear scorer of multiple-choice items: softmax over each item's candidates.

    Minimises mean cross entropy + ||w||^2 / (2 C t) (no penalty on the bias) with SciPy's
    L-BFGS-B, stopping at max |gradient| <= ``tol``: the package's objective and stopping rule.
    The rows are copied in ``dtype`` once; the solver's vectors are float64.

    Parameters
    ----------
    Xt : ndarray of shape (t, K, d)
        The training items' candidate rows.
    yt : ndarray of shape (t,), int
        The right candidate of each item.
    C : float
        Inverse regularisation strength.
    dtype : dtype
        Precision of the products (float32 or float64).
    tol, max_iter : float, int
        L-BFGS-B's ``gtol`` and ``maxiter``.

    Returns
    -------
    w : ndarray of shape (d + 1,), dtype
        The weights, the bias last.
    n_iter : int
        L-BFGS-B iterations.
    """
    import scipy.optimize

    t, K, d = Xt.shape
    Xf = np.concatenate([np.asarray(Xt, dtype=dtype).reshape(-1, d), np.ones((t * K, 1), dtype)], axis=1)
    rows = np.arange(t)

    def f(p):
        w = p.astype(dtype)
        s = (Xf @ w).reshape(t, K).astype(np.float64)
        mx = s.max(axis=1, keepdims=True)
        e = np.exp(s - mx)
        z = e.sum(axis=1)
        loss = float(np.mean(np.log(z) + mx[:, 0] - s[rows, yt])) + float(p[:d] @ p[:d]) / (2 * C * t)
        G = e / z[:, None]
        G[rows, yt] -= 1.0
        G /= t
        g = (Xf.T @ G.astype(dtype).ravel()).astype(np.float64)
        g[:d] += p[:d] / (C * t)
        return loss, g

    res = scipy.optimize.minimize(f, np.zeros(d + 1), jac=True, method="L-BFGS-B",
                                  options=dict(gtol=tol, maxiter=max_iter))
    return res.x.astype(dtype), int(res.nit)


def predict_candidates(X, y, rows, w):
    """Whether each item's best-scored candidate is the right one, and the right one's probability.

    ``X`` (N, K, d), ``rows`` the items to predict (in blocks of :data:`PREDICT_BLOCK`), ``w``
    from :func:`fit_candidate_scorer`.  Returns (correct bool, probability float32) per item.
    """
    d = X.shape[2]
    correct = np.empty(rows.size, dtype=bool)
    prob = np.empty(rows.size, dtype=np.float32)
    for i0 in range(0, rows.size, PREDICT_BLOCK):
        part = rows[i0:i0 + PREDICT_BLOCK]
        s = np.asarray(X[part], dtype=w.dtype) @ w[:d] + w[d]
        s = s.astype(np.float64)
        s -= s.max(axis=1, keepdims=True)
        e = np.exp(s)
        yp = y[part]
        correct[i0:i0 + part.size] = np.argmax(s, axis=1) == yp
        prob[i0:i0 + part.size] = e[np.arange(part.size), yp] / e.sum(axis=1)
    return correct, prob


def _fit_one(j, tr, params):
    """One partition in a worker: fit on positions ``tr``, predict the rest; timed inside."""
    t0 = time.perf_counter()
    X, y = _W["X"], _W["y"]
    if params["model"] == "candidates":
        w, n_iter = fit_candidate_scorer(X[tr], y[tr], params["C"], np.float32, params["tol"], params["max_iter"])
        te = _held(X.shape[0], tr)
        correct, prob = predict_candidates(X, y, te, w)
    else:
        te, correct, prob, n_iter = _fit_logistic(X, y, tr, params["n_classes"], params["C"], params["tol"],
                                                  params["max_iter"], params["solver"])
    return j, time.perf_counter() - t0, n_iter, correct, prob


# ---------------------------------------------------------------------------------------------
# the parent side


@dataclass
class PeerPhase:
    """One timed batch of partitions of a phase fitted by a :class:`PeerPool`.

    Attributes
    ----------
    wall : float
        Seconds from the first submission to the last result added up.
    fit_seconds : ndarray
        Seconds of each fit (fit + prediction of its held-out rows) inside its worker, in
        partition order.
    n_iter : ndarray of int
        Solver iterations of each fit.
    partitions, n_partitions, n_workers : int
        Partitions fitted, partitions of the whole phase (m), worker processes.
    solver : str
        The solver used (``"candidates"``: the multiple-choice scorer).
    correct, seen : ndarray of int64 (N,)
        Held-out predictions that were right, and held-out predictions made, per row.
    prob_label : ndarray of float64 (N,)
        Summed held-out probability of each row's label.
    """

    wall: float
    fit_seconds: np.ndarray
    n_iter: np.ndarray
    partitions: int
    n_partitions: int
    n_workers: int
    solver: str
    correct: np.ndarray = field(repr=False)
    seen: np.ndarray = field(repr=False)
    prob_label: np.ndarray = field(repr=False)

    @property
    def measured(self):
        """Whether all m partitions were fitted (the estimate is then the measured wall time)."""
        return self.partitions >= self.n_partitions

    @property
    def estimate(self):
        """Seconds of the whole phase: the sample's wall time + the remaining fits at the mean rate."""
        rest = self.n_partitions - self.partitions
        return self.wall + rest / self.n_workers * float(np.mean(self.fit_seconds))


class PeerPool:
    """Pre-started worker processes that fit one model per partition on shared X.

    Parameters
    ----------
    X : ndarray (N, d) or (N, K, d), or scipy.sparse CSR matrix (N, d)
        The rows; copied once into shared memory as float32 (CSR: data float32, its indices and
        pointers as they are).  (N, K, d) is multiple choice: y is the right candidate.
    y : ndarray (N,), int
        Labels 0..C-1 (or the right candidate).
    n_workers : int
        Worker processes, each with one BLAS thread.

    Attributes
    ----------
    setup_seconds : float
        Starting the workers and copying X once (paid once per run, never per phase).

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, X, y, n_workers=2):
        import scipy.sparse as sp

        t0 = time.perf_counter()
        self.n_workers = int(n_workers)
        self._shm = []
        specs = {}
        csr_shape = None
        if sp.issparse(X):
            X = sp.csr_matrix(X)
            csr_shape = X.shape
            parts = {"data": X.data.astype(np.float32, copy=False), "indices": X.indices, "indptr": X.indptr}
        else:
            parts = {"X": np.asarray(X)}
        parts["y"] = np.asarray(y, dtype=np.int64)
        for key, a in parts.items():
            dtype = np.float32 if key in ("X", "data") else a.dtype
            shm = shared_memory.SharedMemory(create=True, size=max(1, a.size * np.dtype(dtype).itemsize))
            self._shm.append(shm)
            view = np.ndarray(a.shape, dtype=dtype, buffer=shm.buf)
            view[...] = a  # float32, C order
            specs[key] = (shm.name, a.shape, np.dtype(dtype).str)
        self.shape = tuple(X.shape)
        self.multiple_choice = len(self.shape) == 3
        self.sparse = csr_shape is not None
        self.n_classes = int(parts["y"].max()) + 1 if not self.multiple_choice else self.shape[1]
        saved = {k: os.environ.get(k) for k in BLAS_ENV}
        os.environ.update(BLAS_ENV)  # spawned workers start with it: BLAS reads it at import
        self._ex = None
        try:
            # spawn, not fork: the parent may hold OpenMP threads (the package's kernel), which a
            # forked child cannot use; a spawned child imports the main script again, so a script
            # that starts a pool keeps its work under ``if __name__ == "__main__":``
            self._ex = ProcessPoolExecutor(self.n_workers, mp_context=get_context("spawn"),
                                           initializer=_init_worker, initargs=(specs, csr_shape))
            pids = set()
            for _ in range(20):  # until every worker has answered (each is started and ready)
                pids |= set(f.result() for f in [self._ex.submit(_ready, 0.2) for _ in range(2 * self.n_workers)])
                if len(pids) >= self.n_workers:
                    break
        except BaseException:
            self.close()
            raise
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.pids = sorted(pids)
        self._solver = {}
        self.setup_seconds = time.perf_counter() - t0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Stop the workers and free the shared memory."""
        if getattr(self, "_ex", None) is not None:
            self._ex.shutdown(wait=True)
            self._ex = None
        for shm in self._shm:
            shm.close()
            shm.unlink()
        self._shm = []

    def _run(self, train_pos, js, params):
        n = self.shape[0]
        correct = np.zeros(n, dtype=np.int64)
        seen = np.zeros(n, dtype=np.int64)
        prob_label = np.zeros(n, dtype=np.float64)
        fit_seconds = np.zeros(len(js))
        n_iter = np.zeros(len(js), dtype=np.int64)
        slot = {j: i for i, j in enumerate(js)}
        t0 = time.perf_counter()
        pending = set()
        for j in js:
            tr = train_pos[j]
            pending.add(self._ex.submit(_fit_one, j, tr[tr >= 0], params))
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                j, sec, it, ok, prob = fut.result()
                tr = train_pos[j]
                te = _held(n, tr[tr >= 0])
                seen[te] += 1
                correct[te] += ok
                prob_label[te] += prob
                fit_seconds[slot[j]], n_iter[slot[j]] = sec, it
        wall = time.perf_counter() - t0
        return wall, fit_seconds, n_iter, correct, seen, prob_label

    def _pick_solver(self, train_pos, params, js):
        """lbfgs or liblinear, whichever fits the same partitions faster (untimed pilot, cached)."""
        key = (train_pos.shape, params["C"], params["tol"])
        if self._solver.get(key) is None:
            if self.n_classes > 2:
                self._solver[key] = "lbfgs"  # liblinear refuses three or more classes
            else:
                walls = {s: self._run(train_pos, js, dict(params, solver=s))[0] for s in ("lbfgs", "liblinear")}
                self._solver[key] = min(walls, key=walls.get)
        return self._solver[key]

    def phase(self, train_pos, *, sample=None, C=1.0, tol=1e-4, max_iter=1000, solver="lbfgs"):
        """Fit and predict the first ``sample`` partitions of a phase; see the module's docstring.

        Parameters
        ----------
        train_pos : ndarray (m, t_max) of int64
            Partition j's training positions in row j (as the package draws them,
            ``phase.partitions.partition_train_positions``; negative entries are padding).
            The held-out rows are all the others.
        sample : int, optional
            Partitions fitted (the first ones); default all m.  Fewer than two per worker is
            raised to two per worker, so that the workers fit side by side as in a phase.
        C, tol, max_iter : float, float, int
            ``LogisticRegression``'s (or the candidate scorer's) settings.
        solver : {"lbfgs", "liblinear", "fastest"}
            ``"fastest"``: the faster of the two on these partitions (lbfgs with 3+ classes).
            Ignored for multiple choice.

        Returns
        -------
        PeerPhase
        """
        train_pos = np.asarray(train_pos, dtype=np.int64)
        m = train_pos.shape[0]
        s = m if sample is None else min(m, max(int(sample), 2 * self.n_workers))
        js = list(range(s))
        params = dict(C=float(C), tol=float(tol), max_iter=int(max_iter), n_classes=self.n_classes,
                      model="candidates" if self.multiple_choice else "logistic", solver=solver)
        if self.multiple_choice:
            params["solver"] = "candidates"
        elif solver == "fastest":
            params["solver"] = self._pick_solver(train_pos, params, js[:2 * self.n_workers])
        wall, fit_seconds, n_iter, correct, seen, prob_label = self._run(train_pos, js, params)
        return PeerPhase(wall=wall, fit_seconds=fit_seconds, n_iter=n_iter, partitions=s, n_partitions=m,
                         n_workers=self.n_workers, solver=params["solver"], correct=correct, seen=seen,
                         prob_label=prob_label)


def sklearn_tuned_phase_seconds(X, y, train_pos, *, C=1.0, tol=1e-4, max_iter=1000, solver="lbfgs",
                                sample=None, n_workers=2, pool=None):
    """Seconds of one phase fitted by scikit-learn tuned: a pre-started pool, one BLAS thread each.

    Parameters
    ----------
    X : ndarray (N, d) or (N, K, d), or scipy.sparse CSR (N, d)
        The active rows (float32 is used; CSR stays sparse).
    y : ndarray (N,), int
        Labels (or the right candidate for (N, K, d)).
    train_pos : ndarray (m, t_max) of int64
        Training positions of each partition (negative: padding); the rest are held out.
    C, tol, max_iter, solver, sample
        As in :meth:`PeerPool.phase`.
    n_workers : int
        Worker processes when ``pool`` is not given.
    pool : PeerPool, optional
        A pool already holding X and y (start it once per run, before timing); without it one
        is started and closed here, outside the timed part.

    Returns
    -------
    seconds : float
        The phase's seconds: measured when ``sample`` is m (or None), else the estimate of
        :attr:`PeerPhase.estimate`.
    phase : PeerPhase
        The timings, iterations and per-row held-out counts.
    """
    own = pool is None
    if own:
        pool = PeerPool(X, y, n_workers=n_workers)
    try:
        ph = pool.phase(train_pos, sample=sample, C=C, tol=tol, max_iter=max_iter, solver=solver)
    finally:
        if own:
            pool.close()
    return ph.estimate, ph
