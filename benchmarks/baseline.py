"""Plain reference implementation of AFLite: one scikit-learn LogisticRegression per partition.

This is the "obvious" implementation the package is measured against (``compare_phase.py``):

a. for each of m partitions, take a uniform random training set of size t from the active
   rows, fit ``sklearn.linear_model.LogisticRegression(C=C, max_iter=..., tol=...)`` on it in a
   Python loop, predict every held-out active row;
b. accumulate per active row: held-out predictions seen, correct, and the summed predicted
   probability of the given label;
c. the multi-phase loop follows DESIGN.md and the paper's Algorithm 1 as the package reads it:
   score = correct / seen; remove up to min(k, |S| - n) rows with the highest scores among
   those >= tau (ties: higher mean probability of the label, then lower position); if fewer
   than k rows reached tau, those are removed and filtering stops; it also stops when n or
   fewer rows remain; rows never held out in a phase are not removable in it.

The training sets are not drawn here: the caller passes ``train_positions(phase, j, n_active,
t)`` returning the positions (into the active rows) of partition j's training set in phase
``phase``, so that the baseline sees exactly the partitions the package sees and agreement can
be measured row by row. ``package_partition_sampler`` wraps the package's own sampler.

``tuned_phase`` is the same phase as a skilled user would set it up: float32 rows, partitions
fitted in parallel by a pool of worker processes started once (``peers.PeerPool``: X in shared
memory, one BLAS thread in each worker).  A serial loop whose fits use two BLAS threads each
(``baseline_phase``) is several times slower per fit on two cores, because NumPy's and
SciPy's OpenBLAS pools wait for work against each other.
"""

import time

import numpy as np
from sklearn.linear_model import LogisticRegression

__all__ = [
    "baseline_phase",
    "tuned_phase",
    "baseline_aflite",
    "numpy_partition_sampler",
    "package_partition_sampler",
]


def numpy_partition_sampler(random_state=0):
    """A stand-alone sampler: partition j of phase p from ``SeedSequence([seed, p, j])``.

    Used only when the package's sampler is not available; agreement with the package is
    meaningful only with ``package_partition_sampler``.
    """

    def train_positions(phase, j, n_active, train_size):
        rng = np.random.default_rng(np.random.SeedSequence([random_state, phase, j]))
        return np.sort(rng.choice(n_active, train_size, replace=False))

    return train_positions


def package_partition_sampler(random_state, n_partitions):
    """The package's own partition sampling, as ``train_positions(phase, j, n_active, t)``.

    Wraps ``aflite_fast.phase.partitions.partition_train_positions`` (partition j of phase p drawn from
    ``SeedSequence(entropy, spawn_key=(p, j))``) so that the baseline trains on exactly the rows
    the package trains on. One phase's partitions are drawn once and cached.
    """
    from aflite_fast.phase import partitions

    entropy = partitions.seed_entropy(random_state)
    cache = {}

    def train_positions(phase, j, n_active, train_size):
        key = (phase, n_active, train_size)
        if key not in cache:
            cache.clear()
            cache[key] = partitions.partition_train_positions(
                entropy, phase, n_active, train_size, n_partitions)
        return cache[key][j]

    return train_positions


def _phase_inputs(X, y, active, n_classes):
    """The active rows as float32, their labels, the number of classes and zeroed counts."""
    active = np.asarray(active, dtype=np.int64)
    Xa = np.ascontiguousarray(X[active], dtype=np.float32)
    ya = np.asarray(y[active], dtype=np.int64)
    n = active.shape[0]
    n_classes = int(y.max()) + 1 if n_classes is None else n_classes
    return (Xa, ya, n_classes, np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
            np.zeros(n, dtype=np.float64))


def _accumulate(te, proba, ya, seen, correct, prob_label):
    """Add one partition's held-out predictions (rows ``te``, probabilities ``proba``)."""
    yt = ya[te]
    seen[te] += 1
    correct[te] += np.argmax(proba, axis=1) == yt
    prob_label[te] += proba[np.arange(te.shape[0]), yt]


def baseline_phase(
    X,
    y,
    active,
    train_positions,
    *,
    n_partitions=64,
    train_size,
    C=1.0,
    max_iter=1000,
    tol=1e-4,
    n_classes=None,
    phase=0,
    return_n_iter=False,
):
    """Score one AFLite phase with one sklearn LogisticRegression per partition.

    Parameters
    ----------
    X : array of shape (N, d)
        Embeddings (ndarray or memmap; float32 or float16).
    y : ndarray of shape (N,), int
        Labels in 0..n_classes-1.
    active : ndarray of int
        Sorted indices of the active rows S.
    train_positions : callable
        ``train_positions(phase, j, len(active), train_size)`` -> positions into ``active``
        of partition j's training rows.
    n_partitions, train_size, C, max_iter, tol : see AFLite; ``C``, ``max_iter`` and ``tol``
        are passed to ``LogisticRegression`` unchanged (lbfgs, multinomial).
    n_classes : int, optional
        Number of classes; defaults to ``y.max() + 1``.
    phase : int
        Phase number passed to ``train_positions``.
    return_n_iter : bool
        Also return the list of ``n_iter_`` of the m fits.

    Returns
    -------
    correct, seen : ndarray of shape (len(active),), int64
        Held-out predictions that were correct, and held-out predictions made, per active row.
    prob_label : ndarray of shape (len(active),), float64
        Summed held-out predicted probability of the row's given label.
    n_iter : list of int
        Only when ``return_n_iter``.
    """
    Xa, ya, n_classes, correct, seen, prob_label = _phase_inputs(X, y, active, n_classes)
    n_active = ya.shape[0]
    n_iter = []
    for j in range(n_partitions):
        tr = np.asarray(train_positions(phase, j, n_active, train_size), dtype=np.int64)
        held = np.ones(n_active, dtype=bool)
        held[tr] = False
        te = np.flatnonzero(held)
        clf = LogisticRegression(C=C, max_iter=max_iter, tol=tol)
        clf.fit(Xa[tr], ya[tr])
        n_iter.append(int(clf.n_iter_[0]))
        proba = np.zeros((te.shape[0], n_classes))
        proba[:, clf.classes_] = clf.predict_proba(Xa[te])
        _accumulate(te, proba, ya, seen, correct, prob_label)
    if return_n_iter:
        return correct, seen, prob_label, n_iter
    return correct, seen, prob_label


def select_removal(correct, seen, prob_label, *, slice_size, tau, budget):
    """Positions (in the active set) to remove in one phase, most predictable first.

    Eligible: rows held out at least once with score = correct / seen >= tau. Order: score
    descending, ties by mean held-out probability of the label descending, then by position
    (the package's rule). At most ``budget`` = min(k, |S| - n) rows are taken.

    Returns
    -------
    selected : ndarray of int64, positions in removal order
    n_eligible : int, rows with score >= tau
    scores : ndarray of float64, NaN where never held out
    """
    seen = np.asarray(seen)
    scores = np.full(seen.shape[0], np.nan)
    np.divide(correct, seen, out=scores, where=seen > 0)
    eligible = np.flatnonzero((seen > 0) & (scores >= tau))
    if eligible.size == 0 or budget <= 0:
        return np.empty(0, dtype=np.int64), int(eligible.size), scores
    mean_prob = prob_label[eligible] / seen[eligible]
    order = np.lexsort((eligible, -mean_prob, -scores[eligible]))
    return eligible[order[:budget]].astype(np.int64), int(eligible.size), scores


def tuned_phase(X, y, active, train_positions, *, n_partitions=64, train_size, C=1.0, max_iter=1000,
                tol=1e-4, n_classes=None, phase=0, n_jobs=2, return_n_iter=False, pool=None):
    """Score one phase as :func:`baseline_phase` does, set up as a skilled user would.

    All ``n_partitions`` partitions fitted by ``peers.PeerPool``: ``n_jobs`` worker processes
    started once, one BLAS thread in each, the float32 active rows in shared memory.  Same
    arguments and results as :func:`baseline_phase`.

    Parameters
    ----------
    pool : peers.PeerPool, optional
        A pool already holding ``X[active]`` and ``y[active]`` (start it once, before timing);
        without it one is started and closed inside this call (and its start is then timed
        with the phase).
    """
    from peers import PeerPool

    active = np.asarray(active, dtype=np.int64)
    n_active = active.shape[0]
    train_pos = np.stack([np.asarray(train_positions(phase, j, n_active, train_size), dtype=np.int64)
                          for j in range(n_partitions)])
    own = pool is None
    if own:
        pool = PeerPool(np.asarray(X[active], dtype=np.float32), np.asarray(y[active], dtype=np.int64),
                        n_workers=n_jobs)
    try:
        ph = pool.phase(train_pos, C=C, tol=tol, max_iter=max_iter)
    finally:
        if own:
            pool.close()
    if return_n_iter:
        return ph.correct, ph.seen, ph.prob_label, [int(v) for v in ph.n_iter]
    return ph.correct, ph.seen, ph.prob_label


def baseline_aflite(
    X,
    y,
    train_positions,
    *,
    target_size,
    n_partitions=64,
    train_size,
    slice_size=500,
    tau=0.75,
    C=1.0,
    max_iter=1000,
    tol=1e-4,
    max_phases=None,
    first_phase=None,
    verbose=False,
):
    """Plain multi-phase AFLite: ``baseline_phase`` in a loop with the DESIGN.md stopping rule.

    Parameters
    ----------
    X, y, train_positions, n_partitions, train_size, C, max_iter, tol
        As in ``baseline_phase``.
    target_size : int
        Stop when this many rows or fewer remain; never go below it.
    slice_size : int
        k, the most rows removed per phase.
    tau : float
        Removal threshold on the predictability score.
    max_phases : int, optional
        Stop after this many phases even if the stopping rule has not fired (to bound the
        baseline's run time in benchmarks).
    first_phase : tuple, optional
        ``(correct, seen, prob_label, n_iter, seconds)`` of phase 0 on all rows, already
        computed by ``baseline_phase`` with the same sampler and settings (it is the same
        computation); used instead of recomputing it, its measured seconds are recorded.
    verbose : bool
        Print one line per phase.

    Returns
    -------
    dict with keys ``keep`` (sorted int64), ``removed`` (int64, removal order),
    ``removed_phase`` (int64, phase of each removed row), ``scores`` (float64 per row, the
    last score, NaN where never scored), ``history`` (list of dicts: phase, active, passing,
    removed, seconds, mean_n_iter), ``stopped`` (why the loop ended).
    """
    n = X.shape[0]
    n_classes = int(y.max()) + 1
    active = np.arange(n, dtype=np.int64)
    scores_all = np.full(n, np.nan)
    removed, removed_phase, history = [], [], []
    phase = 0
    stopped = "target_size"
    while active.shape[0] > target_size:
        if max_phases is not None and phase >= max_phases:
            stopped = "max_phases"
            break
        t0 = time.perf_counter()
        if phase == 0 and first_phase is not None:
            correct, seen, prob_label, n_iter, reused_seconds = first_phase
            t0 -= reused_seconds
        else:
            correct, seen, prob_label, n_iter = baseline_phase(
                X, y, active, train_positions, n_partitions=n_partitions,
                train_size=train_size, C=C, max_iter=max_iter, tol=tol, n_classes=n_classes,
                phase=phase, return_n_iter=True,
            )
        budget = min(slice_size, active.shape[0] - target_size)
        chosen, n_eligible, scores = select_removal(
            correct, seen, prob_label, slice_size=slice_size, tau=tau, budget=budget
        )
        scores_all[active] = scores
        seconds = time.perf_counter() - t0
        history.append(dict(phase=phase, active=int(active.shape[0]), passing=n_eligible,
                            removed=int(chosen.size), seconds=seconds,
                            mean_n_iter=float(np.mean(n_iter))))
        if verbose:
            print(f"  baseline phase {phase}: active {active.shape[0]} passing {n_eligible} "
                  f"removed {chosen.size} {seconds:.1f} s mean n_iter {np.mean(n_iter):.0f}",
                  flush=True)
        removed.append(active[chosen])
        removed_phase.append(np.full(chosen.size, phase, dtype=np.int64))
        keep_pos = np.ones(active.shape[0], dtype=bool)
        keep_pos[chosen] = False
        active = active[keep_pos]
        phase += 1
        if n_eligible < slice_size:
            # Algorithm 1: the (fewer than k) eligible rows are removed, then filtering stops
            stopped = "fewer_than_k_pass_tau"
            break
    return dict(
        keep=active,
        removed=np.concatenate(removed) if removed else np.empty(0, np.int64),
        removed_phase=np.concatenate(removed_phase) if removed_phase else np.empty(0, np.int64),
        scores=scores_all,
        history=history,
        stopped=stopped,
    )
