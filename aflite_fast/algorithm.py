"""The AFLite filtering loop (Le Bras et al., ICML 2020, Algorithm 1).

While more than ``target_size`` rows remain, each phase trains ``n_partitions`` linear
models on random training sets of ``train_size`` active rows and predicts every other
active row.  A row's predictability score is (correct held-out predictions) / (held-out
predictions).  Up to ``slice_size`` rows with the highest scores among those scoring at
least ``tau`` are removed; if fewer than ``slice_size`` rows reach ``tau``, those are removed
and filtering stops (Algorithm 1).  It never removes below ``target_size``.
"""
import numbers
import time
from dataclasses import dataclass, field
from typing import List

import numpy as np
from tqdm.auto import tqdm

from . import engine
from ._solver_status import DataScale, check_trained, status_counts, warn_not_converged
from ._threads import effective_n_threads
from .data import encode_labels, open_embeddings, scan_rows
from .kernel import SolverOptions
from .losses import resolve_loss


@dataclass
class PhaseRecord:
    """What one phase did."""

    phase: int
    n_active: int
    train_size: int
    n_scored: int
    n_above_tau: int
    n_removed: int
    n_blocks: int
    mean_iterations: float
    seconds: float
    #: Models of the phase by solver status (``kernel.STATUS_NAMES``), every name present.
    solver_status: dict = field(default_factory=dict)

    def as_dict(self):
        return dict(self.__dict__)


@dataclass
class AFLiteResult:
    """Result of :func:`aflite`.

    Attributes
    ----------
    keep : ndarray of int64
        Sorted indices of the rows kept.
    removed : ndarray of int64
        Indices of the removed rows, in removal order (most predictable first in each phase).
    removed_phase : ndarray of int64
        Phase (0-based) in which each entry of ``removed`` was removed.
    scores : ndarray of float64
        Each row's predictability in the last phase it took part in; NaN where never scored.
    history : list of PhaseRecord
        One record per phase.
    classes : ndarray
        The distinct labels, in the order of the label codes.
    stop_reason : str
        Why filtering stopped.
    """

    keep: np.ndarray
    removed: np.ndarray
    removed_phase: np.ndarray
    scores: np.ndarray
    history: List[PhaseRecord] = field(default_factory=list)
    classes: np.ndarray = None
    stop_reason: str = ""

    @property
    def keep_mask(self):
        """Boolean mask over all rows, True where kept."""
        mask = np.zeros(self.scores.shape[0], dtype=bool)
        mask[self.keep] = True
        return mask


@dataclass
class _Settings:
    n_rows: int
    target_size: int
    n_partitions: int
    train_size: float
    slice_size: int
    tau: float
    C: float

    def train_rows(self, n_active):
        if isinstance(self.train_size, numbers.Integral):
            return int(self.train_size)
        return max(1, int(round(self.train_size * n_active)))


def _check_int(name, value, low, high=None):
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


def validate_settings(n_rows, *, target_size, n_partitions, train_size, slice_size, tau, C):
    """Check the hyperparameters against the data size; raise ValueError naming the problem."""
    target_size = _check_int("target_size", target_size, 0)
    n_partitions = _check_int("n_partitions", n_partitions, 1)
    slice_size = _check_int("slice_size", slice_size, 1)
    if isinstance(tau, bool) or not isinstance(tau, numbers.Real) or not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau!r}")
    if isinstance(C, bool) or not isinstance(C, numbers.Real) or not C > 0 or not np.isfinite(C):
        raise ValueError(f"C must be a positive number, got {C!r}")
    if isinstance(train_size, bool) or not isinstance(train_size, numbers.Real):
        raise ValueError(f"train_size must be an int or a fraction in (0, 1), got {train_size!r}")
    if isinstance(train_size, numbers.Integral):
        if train_size < 1:
            raise ValueError(f"train_size must be >= 1, got {train_size}")
        if train_size >= n_rows:
            raise ValueError(f"train_size ({train_size}) must be smaller than the number of rows ({n_rows}): "
                             "every partition needs held-out rows")
        train_size = int(train_size)
    elif not 0.0 < train_size < 1.0:
        raise ValueError(f"a fractional train_size must be in (0, 1), got {train_size}")
    elif int(round(train_size * n_rows)) >= n_rows:
        raise ValueError(f"train_size={train_size} of {n_rows} rows leaves no held-out rows")
    return _Settings(n_rows, target_size, n_partitions, train_size, slice_size, float(tau), float(C))


def _select(scores, prob_label, seen, tau, budget):
    """Positions to remove: highest score first, ties by mean probability of the label, then
    by position; only rows scored this phase with score >= tau.  Returns (selected, n_eligible)."""
    eligible = np.flatnonzero((seen > 0) & (scores >= tau))
    if eligible.size == 0 or budget <= 0:
        return np.empty(0, dtype=np.int64), eligible.size
    mean_prob = prob_label[eligible] / seen[eligible]
    order = np.lexsort((eligible, -mean_prob, -scores[eligible]))
    return eligible[order[:budget]], eligible.size


def aflite(X, y, *, target_size, n_partitions=64, train_size, slice_size=500, tau=0.75, C=1.0,
           loss="ce", loss_params=None, max_memory=None, random_state=None, n_jobs=None,
           progress=True, tol=1e-4, max_iter=1000, backend="local", client=None):
    """Filter the most predictable rows of (X, y) with AFLite.

    Parameters
    ----------
    X : ndarray, numpy.memmap or path to a ``.npy`` file, shape (N, d)
        Embeddings, float16/float32/float64.  Memory maps are read in chunks, never copied whole.
    y : array-like of shape (N,)
        Labels of any sortable type; mapped to codes 0..C-1.
    target_size : int
        n: filtering never leaves fewer rows than this.
    n_partitions : int, default=64
        m: random partitions (linear models) per phase.
    train_size : int or float
        t: training rows per partition.  A float in (0, 1) is a fraction of the rows
        active in each phase.
    slice_size : int, default=500
        k: rows removed per phase at most.
    tau : float, default=0.75
        Early-stopping threshold on the predictability score, in [0, 1].
    C : float, default=1.0
        Inverse L2 strength of the linear models (scikit-learn's meaning).
    loss : str, default="ce"
        Training loss (see :data:`aflite_fast.losses.LOSS_NAMES`); ``loss_params`` its parameters.
    max_memory : int or str, optional
        Budget for training rows and prediction chunks, e.g. ``"2GB"``; default a quarter of
        physical memory.  It changes speed and memory, never results.
    random_state : None, int or numpy.random.Generator
        Seeds every partition; the result depends on inputs and this only.
    n_jobs : int, optional
        Threads (None: all cores).  Results do not depend on it.
    progress : bool, default=True
        Show a tqdm progress bar.
    tol, max_iter : float, int
        Stopping rules of each model's L-BFGS (max |gradient| and iterations).
    backend : {"local", "dask"}, default="local"
        ``"dask"`` scores each phase on a dask.distributed cluster
        (:func:`aflite_fast.distributed.score_phase_dask`): X (a dask array, a ``.npy``/``.zarr``
        path, a list of ``.npy`` shards, a memmap, or a
        :class:`~aflite_fast.distributed.DaskEmbeddings`) stays on the workers; the loop and
        the result are the same as with ``"local"``.  ``n_jobs`` is then the kernel threads
        per task (None: each worker's thread count).  See docs/dask.md.
    client : distributed.Client, optional
        The cluster of ``backend="dask"`` (default: the current client).

    Returns
    -------
    AFLiteResult

    Raises
    ------
    ValueError
        For inconsistent inputs: X not 2-D, NaN/inf in X, lengths differ, a single class,
        a class with fewer than two rows, ``train_size`` >= rows, ``tau`` outside [0, 1], ...
        Also when a partition's model did not move from its starting point (no solver step
        and not converged), or did not converge on X whose values are too large for the
        float32 solver (e.g. float32 rows scaled by 1e12): the message names the likely
        cause; such models are never reported.

    Warns
    -----
    sklearn.exceptions.ConvergenceWarning
        When any partition's model stopped without converging (max_iter, a failed line
        search, a non-finite value); ``history[i].solver_status`` counts them per phase.
    """
    if backend == "dask":
        from . import distributed
        X = distributed.DaskEmbeddings.open(X, client)
        scan, score_phase = distributed.scan_rows_dask, distributed.score_phase_dask
    elif backend == "local":
        X, scan, score_phase = open_embeddings(X), scan_rows, engine.score_phase
    else:
        raise ValueError(f"backend must be 'local' or 'dask', got {backend!r}")
    n_rows, n_features = X.shape
    labels = encode_labels(y, n_rows)
    settings = validate_settings(n_rows, target_size=target_size, n_partitions=n_partitions,
                                 train_size=train_size, slice_size=slice_size, tau=tau, C=C)
    spec = resolve_loss(loss, loss_params, labels.n_classes)
    n_threads = effective_n_threads(n_jobs) if backend == "local" else n_jobs
    entropy = engine.seed_entropy(random_state)
    options = SolverOptions(tol=tol, max_iter=max_iter)
    engine.parse_memory(max_memory)  # fail early on a bad budget string

    center = scan(X).astype(np.float32)
    scale = DataScale(X if backend == "local" else None, center)  # read only if a model fails
    active = np.arange(n_rows, dtype=np.int64)
    scores = np.full(n_rows, np.nan)
    removed, removed_phase, history = [], [], []
    warm = None
    stop_reason = "target_size reached"
    bar = tqdm(total=max(0, n_rows - settings.target_size), disable=not progress, unit="row",
               desc="AFLite", leave=True)
    phase = 0
    try:
        while active.size > settings.target_size:
            t = settings.train_rows(active.size)
            if t >= active.size:
                stop_reason = f"train_size ({t}) reached the number of active rows ({active.size})"
                break
            start = time.perf_counter()
            train_pos = engine.partition_train_positions(entropy, phase, active.size, t, settings.n_partitions)
            res = score_phase(X, labels.codes, active, center, train_pos, n_classes=labels.n_classes,
                              C=settings.C, loss=spec, options=options, max_memory=max_memory,
                              n_threads=n_threads, warm_coef=warm)
            # an untrained model's votes are noise: never report them (ValueError naming the cause)
            check_trained(res.n_iter, res.status, scale, what="partition model")
            # Next phase's partitions are new random subsets: start every one of them from
            # the mean of this phase's models (close to the full-data optimum), which took
            # about 9% fewer L-BFGS steps than starting partition j from its predecessor.
            warm = np.repeat(res.coef.mean(axis=0, keepdims=True), res.coef.shape[0], axis=0)
            phase_scores = res.scores
            scores[active] = phase_scores
            budget = min(settings.slice_size, active.size - settings.target_size)
            chosen, n_eligible = _select(phase_scores, res.prob_label, res.seen, settings.tau, budget)
            removed.append(active[chosen])
            removed_phase.append(np.full(chosen.size, phase, dtype=np.int64))
            keep_pos = np.ones(active.size, dtype=bool)
            keep_pos[chosen] = False
            history.append(PhaseRecord(
                phase=phase, n_active=int(active.size), train_size=t,
                n_scored=int(np.count_nonzero(res.seen)), n_above_tau=int(n_eligible),
                n_removed=int(chosen.size), n_blocks=res.n_blocks,
                mean_iterations=float(res.n_iter.mean()), seconds=time.perf_counter() - start,
                solver_status=status_counts(res.status)))
            active = active[keep_pos]
            bar.update(int(chosen.size))
            bar.set_postfix(phase=phase, active=int(active.size), above_tau=int(n_eligible))
            phase += 1
            if n_eligible < settings.slice_size:
                stop_reason = f"fewer than slice_size={settings.slice_size} rows reached tau={settings.tau}"
                break
    finally:
        bar.close()
    warn_not_converged({name: sum(h.solver_status[name] for h in history) for name in
                        (history[0].solver_status if history else {})}, what="partition model")
    return AFLiteResult(
        keep=active,
        removed=np.concatenate(removed) if removed else np.empty(0, dtype=np.int64),
        removed_phase=np.concatenate(removed_phase) if removed_phase else np.empty(0, dtype=np.int64),
        scores=scores, history=history, classes=labels.classes, stop_reason=stop_reason)
