"""One filtering phase on sparse hashed n-gram counts: aflite_fast against tuned scikit-learn, one run.

Data (:func:`hashed_ngrams`): N rows of about ``--nnz`` non-zero counts among 2^``--log2d``
columns, as hashed 1-2-gram counts of short texts look: token ids drawn from a Zipf law over a
vocabulary, unigrams and bigrams of consecutive tokens hashed to columns, repeated n-grams
counted; labels from a linear model on the counts plus Gumbel noise (``--classes`` classes).

Ours: :func:`aflite_fast.predictability` (one phase on every row: ``--m`` partitions, each
trained on ``t = t/N * N`` rows, then every row predicted by the partitions that held it out),
``n_jobs=--threads``, the default ``tol="auto"`` (1e-4 here: t is below the 2^L + 1 columns);
with ``--also-tol TOL`` the same phase at that tolerance too, right after ours each round.

The tuned peer: ``sklearn.linear_model.LogisticRegression(C=1, tol=1e-4, max_iter=1000)`` on
CSR float32 rows, the same partitions (the package's sampler), ``--threads`` pre-started
worker processes (liblinear, which fits two classes only, wrapped in ``OneVsRestClassifier`` for
more: a one-vs-rest model, not the multinomial one) with one BLAS thread each, each fit followed by ``predict_proba`` of the
partition's held-out rows.  Both solvers (lbfgs, liblinear) are timed on the first
``--peer-fits`` partitions (at least two per worker); the faster one's mean seconds per
partition (fit + predict) times m / workers is the peer's phase.  Ours and the peer's fits are
interleaved (ours, peer, ours, peer, ...) in the same process run, ``--repeat`` rounds; the
table gives medians.

Peak memory: ours is the growth of the process's peak resident set size during our phase (the
peak reset before it through /proc/self/clear_refs, Linux), against the formula of
:mod:`aflite_fast.core.sparse_solver` and :mod:`aflite_fast.phase.sparse_local` (the phase's
fixed bytes: its copy of the rows, per-row arrays, every model's coefficients and each
thread's solver scratch; then per model of a group: Newton-CG ``8 (k + 1) C + 12 (d + 1) C``
bytes, k the most columns a model uses; models in groups under ``max_memory``).

Examples::

    python benchmarks/sparse_phase.py --n 200000 --log2d 18 --frac 0.1 0.5 --repeat 3
    python benchmarks/sparse_phase.py --n 20000 --log2d 16 --m 16 --frac 0.1 --repeat 1   # smoke
"""
import argparse
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import scipy.sparse as sp


def hashed_ngrams(n, log2d, nnz, n_classes, seed=0, vocab=50_000):
    """(X CSR float32 (n, 2^log2d), y int64 (n,)): hashed 1-2-gram counts and planted labels."""
    rng = np.random.default_rng(seed)
    d = 1 << log2d
    # about nnz n-grams a row: L tokens give L unigrams and L - 1 bigrams
    L = max(2, (nnz + 1) // 2)
    lengths = rng.integers(L // 2, L + L // 2 + 1, size=n)
    total = int(lengths.sum())
    ranks = np.arange(1, vocab + 1, dtype=np.float64)
    p = 1.0 / ranks ** 1.05
    p /= p.sum()
    tokens = rng.choice(vocab, size=total, p=p).astype(np.int64)
    row_of = np.repeat(np.arange(n), lengths)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    same_row = np.ones(total, dtype=bool)
    same_row[starts] = False  # a bigram never spans two rows
    mult = np.uint64(0x9E3779B97F4A7C15)
    uni = (tokens.astype(np.uint64) * mult) >> np.uint64(64 - log2d)
    big_idx = np.flatnonzero(same_row)
    big = ((tokens[big_idx - 1].astype(np.uint64) * np.uint64(1_000_003) + tokens[big_idx].astype(np.uint64) + 7)
           * mult) >> np.uint64(64 - log2d)
    rows = np.concatenate([row_of, row_of[big_idx]])
    cols = np.concatenate([uni, big]).astype(np.int64)
    X = sp.csr_matrix((np.ones(rows.size, dtype=np.float32), (rows, cols)), shape=(n, d))
    X.sum_duplicates()
    X.sort_indices()
    w = np.zeros((d, n_classes), dtype=np.float32)
    cue = rng.choice(d, size=min(d, 20_000), replace=False)
    w[cue] = rng.normal(scale=1.0, size=(cue.size, n_classes))
    logits = np.asarray(X @ w) + rng.gumbel(size=(n, n_classes))
    return X, np.argmax(logits, axis=1)


def partitions(X, y, m, frac, seed):
    """Each partition's training rows, drawn by the package's own sampler (as predictability does)."""
    from aflite_fast.filtering.problem import Problem, validate_settings
    from aflite_fast.phase.backends import LocalBackend
    from aflite_fast.phase.partitions import seed_entropy

    problem = Problem.open(X, y, backend=LocalBackend(1))
    settings = validate_settings(X.shape[0], n_partitions=m, train_size=frac)
    t = settings.train_rows(X.shape[0])
    active = np.arange(X.shape[0], dtype=np.int64)
    train_pos = problem.train_positions(seed_entropy(seed), 0, active, t, m)
    return [tp[tp >= 0] for tp in train_pos]


_X = _y = None


def _init_worker(path_X, path_y):
    from threadpoolctl import threadpool_limits

    global _X, _y
    threadpool_limits(1)
    _X = sp.load_npz(path_X).astype(np.float32)
    _y = np.load(path_y)


def _fit_one(solver, train):
    import warnings

    from sklearn.linear_model import LogisticRegression

    t0 = time.perf_counter()
    held = np.ones(_X.shape[0], dtype=bool)
    held[train] = False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = LogisticRegression(C=1.0, tol=1e-4, max_iter=1000, solver=solver)
        if solver == "liblinear" and np.unique(_y).size > 2:
            # scikit-learn's liblinear fits two classes only: one-vs-rest, as its error message advises
            from sklearn.multiclass import OneVsRestClassifier

            model = OneVsRestClassifier(model)
        model.fit(_X[train], _y[train])
        model.predict_proba(_X[held])
    return time.perf_counter() - t0


def peer_phase(pool, solver, lists, workers):
    """Seconds of the peer's phase from its fits of ``lists`` (spread over the workers): the mean
    per partition times m / workers, and the fits' wall time."""
    t0 = time.perf_counter()
    secs = list(pool.map(_fit_one, [solver] * len(lists), lists))
    wall = time.perf_counter() - t0
    return statistics.mean(secs), wall


def ours(X, y, m, frac, threads, max_memory, tol="auto"):
    import aflite_fast

    t0 = time.perf_counter()
    res = aflite_fast.predictability(X, y, n_partitions=m, train_size=frac, random_state=0, n_jobs=threads,
                                     max_memory=max_memory, tol=tol)
    return time.perf_counter() - t0, res


def formula_bytes(X, lists, n_classes, threads, budget):
    """(fixed, per model, group size): the memory formula of the phase on every row of X."""
    from aflite_fast.core import sparse_solver
    from aflite_fast.phase.sparse_local import model_group_size, phase_fixed_bytes

    rows = sparse_solver.CSRRows(X)
    columns = sparse_solver.model_column_sets(rows, lists)
    width = sparse_solver.local_width(columns)
    solver = sparse_solver.phase_solver("ce", None, n_classes)
    nnz = np.diff(rows.indptr)
    d = X.shape[1]
    fixed = phase_fixed_bytes(rows, len(lists), d, n_classes, threads, False, width, solver,
                              max(lst.size for lst in lists), sum(c.size for c in columns),
                              max(int(nnz[lst].sum()) for lst in lists))
    group = model_group_size(budget, fixed, len(lists), d, n_classes, 10, width - 1, solver)
    return fixed, sparse_solver.model_bytes(d, n_classes, 10, width - 1, solver), group


def _reset_peak():
    """Reset this process's peak resident set size (Linux: /proc/self/clear_refs); the current size."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")
    return _status("VmRSS")


def _status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--log2d", type=int, default=18)
    ap.add_argument("--nnz", type=int, default=30)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--frac", type=float, nargs="+", default=[0.1, 0.5])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--peer-fits", type=int, default=4,
                    help="partitions the peer fits per solver and round (0: ours only, no peer)")
    ap.add_argument("--max-memory", default="4GB")
    ap.add_argument("--tmp", default="/tmp")
    ap.add_argument("--also-tol", type=float, default=None,
                    help="also time our phase at this tolerance each round, after ours at the default")
    args = ap.parse_args()
    from aflite_fast.runtime.memory import parse_memory

    X, y = hashed_ngrams(args.n, args.log2d, args.nnz, args.classes)
    path_X = os.path.join(args.tmp, f"sparse_phase_X_{os.getpid()}.npz")
    path_y = os.path.join(args.tmp, f"sparse_phase_y_{os.getpid()}.npy")
    sp.save_npz(path_X, X, compressed=False)
    np.save(path_y, y)
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores; load average "
          f"{os.getloadavg()[0]:.2f} at start; N={args.n}, d=2^{args.log2d}, "
          f"{X.nnz / args.n:.1f} non-zeros a row, C={args.classes}, m={args.m}", flush=True)
    rows = []
    try:
        with ProcessPoolExecutor(args.threads, initializer=_init_worker, initargs=(path_X, path_y)) as pool:
            pool.map(time.sleep, [0.01] * args.threads)  # pre-started, data loaded
            for frac in args.frac:
                lists = partitions(X, y, args.m, frac, 0)
                fits = lists[:max(args.peer_fits, 2 * args.threads)] if args.peer_fits else []
                ours_s, peer = [], {"lbfgs": [], "liblinear": []}
                peaks, steps, also = [], [], []
                for r in range(args.repeat):
                    base = _reset_peak()
                    s, res = ours(X, y, args.m, frac, args.threads, args.max_memory)
                    peaks.append(_status("VmHWM") - base)
                    ours_s.append(s)
                    steps.append(float(res.n_iter.mean()))
                    for solver in peer:
                        if args.peer_fits == 0:
                            peer[solver].append(float("nan"))
                            continue
                        mean_fit, _ = peer_phase(pool, solver, fits, args.threads)
                        peer[solver].append(mean_fit * args.m / args.threads)
                    print(f"  t/N={frac} round {r}: ours {s:.2f} s, {steps[-1]:.2f} Newton steps a model "
                          f"(peak RSS growth {peaks[-1] / 1e9:.2f} GB); "
                          f"peer phase lbfgs "
                          f"{peer['lbfgs'][-1]:.1f} s, liblinear {peer['liblinear'][-1]:.1f} s; "
                          f"load {os.getloadavg()[0]:.2f}", flush=True)
                    if args.also_tol is not None:
                        s2, res2 = ours(X, y, args.m, frac, args.threads, args.max_memory, args.also_tol)
                        also.append((s2, float(res2.n_iter.mean())))
                        print(f"  t/N={frac} round {r}: ours at tol={args.also_tol:g} {s2:.2f} s, "
                              f"{also[-1][1]:.2f} Newton steps a model", flush=True)
                peak = max(peaks)
                best = min(peer, key=lambda k: statistics.median(peer[k]))
                o, p = statistics.median(ours_s), statistics.median(peer[best])
                budget = parse_memory(args.max_memory)
                fixed, per_model, group = formula_bytes(X, lists, args.classes, args.threads, budget)
                rows.append((frac, o, best, p, p / o, peak, (fixed, per_model, group), budget,
                             statistics.median(peer["lbfgs"]), statistics.median(peer["liblinear"]),
                             float(np.nanmean(res.scores)), statistics.median(steps),
                             (statistics.median(a for a, _ in also), statistics.median(b for _, b in also))
                             if also else None))
    finally:
        for path in (path_X, path_y):
            if os.path.exists(path):
                os.remove(path)
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end\n")
    print("| t/N | ours (s) | peer lbfgs (s) | peer liblinear (s) | peer / ours | our peak RSS growth "
          "| formula: fixed + group x per model | max_memory | mean score |")
    print("|---|---|---|---|---|---|---|---|---|")
    for frac, o, best, p, ratio, peak, (fixed, per_model, group), budget, pl, pll, score, _, _ in rows:
        print(f"| {frac} | {o:.2f} | {pl:.1f} | {pll:.1f} | {ratio:.1f}x ({best}) | {peak / 1e9:.2f} GB "
              f"| {(fixed + group * per_model) / 1e9:.2f} GB = {fixed / 1e6:.0f} MB + {group} x "
              f"{per_model / 1e6:.1f} MB | {budget / 1e9:.1f} GB | {score:.3f} |")
    if args.also_tol is not None:
        print(f"\n| t/N | ours, default tol (s) | Newton steps a model | ours, tol={args.also_tol:g} (s) | "
              "Newton steps a model | default / other |")
        print("|---|---|---|---|---|---|")
        for frac, o, *_, n_steps, (o2, n_steps2) in rows:
            print(f"| {frac} | {o:.2f} | {n_steps:.2f} | {o2:.2f} | {n_steps2:.2f} | {o / o2:.2f} |")
    print("\ncommand: python " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
