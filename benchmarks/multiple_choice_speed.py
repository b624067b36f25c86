"""One multiple-choice AFLite phase against the per-partition loop and the arithmetic floor.

N items of K candidates (default N = 50000, K = 4, d = 768), m = 64 partitions, t/N in
{0.5, 0.1}; embedding-like candidates (a context vector shared by an item's candidates plus a
candidate part, power-law feature scales, a shared offset), the right candidate shifted along
a random direction.  Timed in ONE run, interleaved:

a. ours: ``local.score_phase`` on the (N, K, d) array (what ``predictability`` and every
   phase of ``aflite`` call for multiple-choice X), an ``gather.Workspace`` kept between the
   repeats as a run's phases keep it; ``--repeat`` times, median;
b. the public implementations' way: one linear scorer per partition trained after another in
   a Python loop, here with ``scipy.optimize.minimize(method="L-BFGS-B")`` on the same
   objective (softmax cross entropy over each item's candidates + ||w||^2 / (2 C t), the same
   stopping rule: max |gradient| <= 1e-4) in float64 and in float32 (NumPy products on
   float32 copies of the partition's rows; the solver's vectors are float64), then predicting
   the held-out items; BLAS on ``--threads`` threads.  Only ``--loop-sample`` partitions are
   fitted and predicted and the time is scaled by m / sample: an ESTIMATE, said so in the table;
c. the same scorer in float32 fitted by ``--threads`` worker processes started once before
   timing (``peers.PeerPool``: the items in shared memory, one BLAS thread each), every round,
   ``--pool-sample`` partitions (at least two per worker) and the rest estimated at the mean
   seconds per fit (``PeerPhase.estimate``);
d. the floor: per model and evaluation of objective and gradient, two products of
   t*K x (d+1) x 1, plus prediction, one product of N*K x (d+1) x m, at the best GEMM rate
   measured in the same run (NumPy's OpenBLAS sgemm and the package's GEMM, on
   (50000 x 769) @ (769 x 64) and @ (769 x 192), whichever is fastest).  Evaluations are
   those our solver made, so the floor measures the kernel, not the solver;
e. the stream bound, beside the floor: every solver round reads the rows of all models' items
   (at t/N = 0.1 with m = 64, every item: N x K x (d+1) float32), so a round cannot take less
   than that read at the memory bandwidth measured in the same run (OpenBLAS sgemv over the
   rows, ``--threads`` threads); rounds x that time, plus prediction's read.

    PYTHONPATH=. python benchmarks/multiple_choice_speed.py [--n 50000] [--k 4] [--d 768]
        [--shares 0.5 0.1] [--repeat 2] [--loop-sample 2] [--pool-sample 4] [--threads 2] [--json out.json]
    PYTHONPATH=. python benchmarks/multiple_choice_speed.py --n 5000 --repeat 1 --loop-sample 1   # smoke
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_scale import gemm_rate  # noqa: E402
from peers import PeerPool, fit_candidate_scorer, predict_candidates  # noqa: E402

from aflite_fast.io.inputs import scan_rows
from aflite_fast.phase import gather, local, partitions

CACHE = Path(os.environ.get("AFLITE_BENCH_CACHE", Path(__file__).resolve().parent / "_cache"))


def make_items(n, K, d, seed=0, chunk=5000):
    """Embedding-like multiple-choice data (N, K, d) float32 and the right candidates."""
    rng = np.random.default_rng(seed)
    scale = ((1.0 + np.arange(d)) ** -0.5).astype(np.float32)
    offset = rng.uniform(0.5, 1.5, size=d).astype(np.float32)
    u = rng.standard_normal(d).astype(np.float32)
    u *= 0.6 / np.linalg.norm(u * scale)
    X = np.empty((n, K, d), dtype=np.float32)
    y = rng.integers(0, K, size=n)
    for i0 in range(0, n, chunk):
        i1 = min(n, i0 + chunk)
        ctx = rng.standard_normal((i1 - i0, 1, d), dtype=np.float32)
        cand = rng.standard_normal((i1 - i0, K, d), dtype=np.float32) * 0.7
        block = (ctx + cand) * scale + offset
        block[np.arange(i1 - i0), y[i0:i1]] += u * scale
        X[i0:i1] = block
    return X, y


def cached_items(n, K, d, seed=0):
    CACHE.mkdir(exist_ok=True)
    px, py = CACHE / f"mc_{n}_{K}_{d}_{seed}_X.npy", CACHE / f"mc_{n}_{K}_{d}_{seed}_y.npy"
    if not px.exists():
        X, y = make_items(n, K, d, seed)
        np.save(py, y)
        np.save(px, X)
    return np.load(px), np.load(py)


def loop_partition(X, y, train, C, dtype, tol=1e-4, max_iter=1000):
    """One partition the public implementations' way: fit a linear scorer with SciPy's L-BFGS
    on the training items (rows copied in ``dtype``; ``peers.fit_candidate_scorer``), then
    predict every other item (``peers.predict_candidates``)."""
    w, nit = fit_candidate_scorer(X[train], y[train], C, dtype, tol, max_iter)
    held = np.setdiff1d(np.arange(X.shape[0]), train)
    correct, _ = predict_candidates(X, y, held, w)
    return nit, int(correct.sum())


def read_rate(X, threads, repeat=3):
    """Best GB/s of reading X (float32, C-contiguous) once: a matrix-vector product over its rows."""
    A = X.reshape(-1, X.shape[-1])
    v = np.ones(A.shape[1], dtype=np.float32)
    best = 0.0
    with threadpool_limits(threads):
        for _ in range(repeat):
            t0 = time.perf_counter()
            A @ v
            best = max(best, A.nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def stream_seconds(res, n, K, D, bandwidth):
    """Rounds (the most evaluations of any model) x one read of the rows, plus prediction's read."""
    return (float(res.n_eval.max()) + 1) * n * K * D * 4 / (bandwidth * 1e9)


def floor_seconds(res, t, n, K, D, m, rate):
    train = float(res.n_eval.sum()) * 2 * 2 * t * K * D
    predict = 2.0 * n * K * D * m
    return (train + predict) / (rate * 1e9)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=50000)
    p.add_argument("--k", type=int, default=4)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--m", type=int, default=64)
    p.add_argument("--shares", type=float, nargs="+", default=[0.5, 0.1])
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--loop-sample", type=int, default=2, help="partitions the loop fits (scaled to m)")
    p.add_argument("--pool-sample", type=int, default=4,
                   help="partitions the worker processes fit per round (at least 2 per worker)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    n, K, d, m = a.n, a.k, a.d, a.m
    D = d + 1
    X, y = cached_items(n, K, d)
    center = scan_rows(X.reshape(n * K, d)).astype(np.float32)
    rates = [gemm_rate(min(n * K, 50000), D, cols, a.threads) for cols in (m, 3 * m)]
    rate = max(max(r) for r in rates)
    bandwidth = read_rate(X, a.threads)
    print(f"# reading the rows: {bandwidth:.1f} GB/s", flush=True)
    print(f"# GEMM (50000 x {D}) @ ({D} x {m} | {3 * m}): ours {rates[0][0]:.0f} | {rates[1][0]:.0f} GF/s, "
          f"OpenBLAS {rates[0][1]:.0f} | {rates[1][1]:.0f} GF/s; floor at {rate:.0f}", flush=True)
    active = np.arange(n, dtype=np.int64)
    codes = y.astype(np.int32)
    rows = []
    pool = PeerPool(X, y, n_workers=a.threads)  # the two-process loop: started once, not timed
    for share in a.shares:
        t = int(round(share * n))
        train_pos = partitions.partition_train_positions(0, 0, n, t, m)
        workspace = gather.Workspace()
        ours, loop64, loop32, pooled = [], [], [], []
        res = None
        for r in range(a.repeat):
            t0 = time.perf_counter()
            res = local.score_phase(X, codes, active, center, train_pos, n_classes=K, n_threads=a.threads,
                                     workspace=workspace)
            ours.append(time.perf_counter() - t0)
            print(f"# t/N={share}: ours {ours[-1]:.2f} s (train {res.seconds['train']:.2f}, predict "
                  f"{res.seconds['predict']:.2f}, preconditioner {res.seconds['preconditioner']:.2f}; "
                  f"{res.n_eval.mean():.1f} evaluations per model)", flush=True)
            if r == 0:
                with threadpool_limits(a.threads):
                    for dtype, out in ((np.float64, loop64), (np.float32, loop32)):
                        t0 = time.perf_counter()
                        its = [loop_partition(X, y, train_pos[j], 1.0, dtype)[0] for j in range(a.loop_sample)]
                        out.append((time.perf_counter() - t0) * m / a.loop_sample)
                        print(f"# t/N={share}: loop {np.dtype(dtype).name} est. {out[-1]:.1f} s "
                              f"(iterations {its})", flush=True)
            ph = pool.phase(train_pos, sample=a.pool_sample)
            pooled.append(ph.estimate)
            print(f"# t/N={share}: {a.threads} processes, float32, est. {ph.estimate:.1f} s "
                  f"({ph.partitions} partitions in {ph.wall:.1f} s)", flush=True)
        floor = floor_seconds(res, t, n, K, D, m, rate)
        stream = stream_seconds(res, n, K, D, bandwidth)
        row = dict(stream=stream, bandwidth=bandwidth, N=n, K=K, d=d, m=m, share=share, t=t, ours=statistics.median(ours), ours_all=ours,
                   loop64=loop64[0], loop32=loop32[0], loop_sample=a.loop_sample, pooled=statistics.median(pooled),
                   pooled_all=pooled, floor=floor, gemm_rate=rate,
                   evaluations=float(res.n_eval.mean()), iterations=float(res.n_iter.mean()), seconds=res.seconds)
        rows.append(row)
    pool.close()
    print()
    print(f"One multiple-choice phase, N={n} items, K={K}, d={d}, m={m}, {a.threads} threads; ours: median of "
          f"{a.repeat}; loop: {a.loop_sample} of {m} partitions fitted and predicted, scaled to {m} (estimate); "
          f"{a.threads} processes: the float32 scorer in {a.threads} pre-started worker processes, one BLAS thread "
          f"each, at least 2 partitions per worker every round, the rest at the mean seconds per fit (estimate, "
          f"median of {a.repeat}); "
          f"floor at {rate:.0f} GF/s; stream bound at {bandwidth:.1f} GB/s.")
    print()
    print("| t/N | t | ours (s) | evaluations per model | floor (s) | ours / floor | stream bound (s) "
          "| loop float64, est. (s) | loop float32, est. (s) | faster loop / ours "
          f"| {a.threads} processes, est. (s) | {a.threads} processes / ours |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['share']} | {r['t']} | {r['ours']:.2f} | {r['evaluations']:.1f} | {r['floor']:.2f} "
              f"| {r['ours'] / r['floor']:.2f} | {r['stream']:.2f} | {r['loop64']:.0f} | {r['loop32']:.0f} "
              f"| {min(r['loop32'], r['loop64']) / r['ours']:.0f}x | {r['pooled']:.1f} "
              f"| {r['pooled'] / r['ours']:.0f}x |")
    if a.json:
        a.json.write_text(json.dumps(dict(rows=rows, machine=platform.processor() or platform.machine(),
                                          argv=sys.argv[1:]), indent=2))


if __name__ == "__main__":
    main()
