"""One AFLite phase at the proportions large benchmarks use, against scikit-learn and the arithmetic floor.

For N in {100000, 200000} rows of skewed, embedding-like data (``skewed_data.py``, d=768, C=3 or
``--classes``)
and training shares t/N in {0.5, 0.1} (SNLI runs at about 0.09), one phase of m=64 partitions
is timed in ONE run:

a. ours: ``local.score_phase`` (what ``aflite_fast.predictability`` and every phase of
   ``aflite`` call) with an ``gather.Workspace`` kept between the repeats, as the phases of an
   ``aflite`` run keep it (the first repeat allocates the row buffer, like a run's first
   phase); ``--repeat`` times, median;
b. scikit-learn tuned (``peers.PeerPool``): what a skilled user sets up: ``--threads`` worker
   processes started once per N before anything is timed, the float32 rows in shared memory,
   one BLAS thread each; every repeat fits and predicts the first ``--sklearn-sample``
   partitions (at least two per worker) and estimates the phase from them
   (``PeerPhase.estimate``: the sample's wall time + the remaining fits at the mean seconds per
   fit; what a phase pays once is not scaled), an estimate, said so in the table;
c. scikit-learn naive (``baseline.baseline_phase``, only with ``--naive-sample`` > 0): one
   ``LogisticRegression`` per partition in a serial Python loop, BLAS limited to
   ``--threads``; the call with no partition (copying the rows) is timed too, and only the
   fits' part is scaled by m / sample;
d. the floor: the flops the algorithm needs (per model and evaluation of objective and
   gradient, two products of t x (d+1) x (C - 1); prediction, one product of N x (d+1) x
   (m (C - 1)): C - 1 weight vectors a model, the reference-class form's), at
   the best GEMM rate measured in the same run (NumPy's float32 matmul, i.e. OpenBLAS
   sgemm, and the package's deterministic GEMM on an (N x 769) @ (769 x 192) product, on
   ``--threads`` threads, whichever is faster).  Evaluations are the ones our solver made
   (``PhaseScores.n_eval``), so the floor measures the kernel, not the solver.

The contenders are interleaved (ours, tuned, naive, ours, ...), so the load of this shared
machine falls on all alike.  The table gives ours / floor, tuned / ours (and naive / ours),
and the cost of the t/N = 0.1 phase relative to the t/N = 0.5 phase at the same N.

    PYTHONPATH=. python benchmarks/compare_scale.py [--sizes 100000 200000] [--repeat 3]
        [--sklearn-sample 4] [--naive-sample 0] [--threads 2] [--d 768] [--m 64] [--classes 3] [--json out.json]
    PYTHONPATH=. python benchmarks/compare_scale.py --sizes 20000 --repeat 1   # smoke
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

from baseline import baseline_phase, package_partition_sampler  # noqa: E402
from peers import PeerPool  # noqa: E402
from skewed_data import make_skewed_embeddings  # noqa: E402

from aflite_fast.core import _kernel, layout
from aflite_fast.io.inputs import scan_rows
from aflite_fast.phase import gather, local, partitions

#: Where the generated data is kept between runs (git-ignored beside this script unless the
#: environment variable AFLITE_BENCH_CACHE names another folder).
CACHE = Path(os.environ.get("AFLITE_BENCH_CACHE", Path(__file__).resolve().parent / "_cache"))


def skewed(n, d, classes=3, seed=0):
    """The benchmark data, cached as .npy beside this script (git-ignored)."""
    CACHE.mkdir(exist_ok=True)
    stem = f"skewed_{n}_{d}_{seed}" + (f"_C{classes}" if classes != 3 else "")
    px, py = CACHE / f"{stem}_X.npy", CACHE / f"{stem}_y.npy"
    if not px.exists():
        X, y = make_skewed_embeddings(n, d, classes, random_state=seed)
        np.save(py, y)
        np.save(px, X)
    return np.load(px), np.load(py)


def gemm_rate(n, D, N, threads, repeat=3):
    """Best GFLOP/s of (n x D) @ (D x N): ours (deterministic) and NumPy's OpenBLAS."""
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, D), dtype=np.float32)
    B = rng.standard_normal((D, N), dtype=np.float32)
    C = np.empty((n, N), np.float32)
    kb = layout.block_bounds(D, layout.COL_BLOCK)
    flops = 2.0 * n * D * N
    ours = blas = 0.0
    with threadpool_limits(threads):
        for _ in range(repeat):
            t0 = time.perf_counter()
            _kernel.sgemm(False, A, B, C, kb, False, threads)
            ours = max(ours, flops / (time.perf_counter() - t0) / 1e9)
            t0 = time.perf_counter()
            np.matmul(A, B, out=C)
            blas = max(blas, flops / (time.perf_counter() - t0) / 1e9)
    return ours, blas


def ours_phase(X, y, center, train_pos, threads, workspace=None, n_classes=3):
    n = X.shape[0]
    t0 = time.perf_counter()
    res = local.score_phase(X, y.astype(np.int32), np.arange(n, dtype=np.int64), center, train_pos,
                             n_classes=n_classes, n_threads=threads, workspace=workspace)
    return time.perf_counter() - t0, res


def floor_seconds(res, t, n, D, C, m, rate):
    """The phase's flops at ``rate`` GF/s with C - 1 weight vectors a model (the reference-class
    form the package trains: the least arithmetic of these models): (seconds, training flops,
    prediction flops)."""
    outputs = C - 1
    train = float(res.n_eval.sum()) * 2 * 2 * t * D * outputs
    predict = 2.0 * n * D * m * outputs
    return (train + predict) / (rate * 1e9), train, predict


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100000, 200000])
    p.add_argument("--shares", type=float, nargs="+", default=[0.5, 0.1])
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--m", type=int, default=64)
    p.add_argument("--classes", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--sklearn-sample", type=int, default=4,
                   help="partitions tuned scikit-learn fits per repeat (at least 2 per worker; estimated to m)")
    p.add_argument("--naive-sample", type=int, default=0,
                   help="partitions the naive scikit-learn loop fits (scaled to m; 0: not run)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    D, C, m = a.d + 1, a.classes, a.m
    rows = []
    for n in a.sizes:
        X, y = skewed(n, a.d, C)
        center = scan_rows(X).astype(np.float32)
        rate_ours, rate_blas = gemm_rate(min(n, 50000), D, m * C, a.threads)
        rate = max(rate_ours, rate_blas)
        print(f"# N={n}: GEMM (N x {D}) @ ({D} x {m * C}): ours {rate_ours:.0f} GF/s, "
              f"OpenBLAS {rate_blas:.0f} GF/s", flush=True)
        ours_phase(X[:2000], y[:2000], center, partitions.partition_train_positions(0, 0, 2000, 500, 2),
                   a.threads, n_classes=C)  # warm up lazily compiled helpers
        pool = PeerPool(X, y, n_workers=a.threads)  # started once, X in shared memory, not timed
        for share in a.shares:
            t = int(round(share * n))
            train_pos = partitions.partition_train_positions(0, 0, n, t, m)
            ours, skl, naive = [], [], []
            res = None
            workspace = gather.Workspace()
            for r in range(a.repeat):
                s, res = ours_phase(X, y, center, train_pos, a.threads, workspace, C)
                ours.append(s)
                ph = pool.phase(train_pos, sample=a.sklearn_sample)
                skl.append(ph.estimate)
                sample = ph.partitions
                if r == 0 and a.naive_sample > 0:
                    with threadpool_limits(a.threads):
                        t0 = time.perf_counter()
                        baseline_phase(X, y, np.arange(n), package_partition_sampler(0, m),
                                       n_partitions=0, train_size=t, n_classes=C)
                        fixed = time.perf_counter() - t0
                        t0 = time.perf_counter()
                        baseline_phase(X, y, np.arange(n), package_partition_sampler(0, m),
                                       n_partitions=a.naive_sample, train_size=t, n_classes=C)
                        naive.append(fixed + (time.perf_counter() - t0 - fixed) * m / a.naive_sample)
            floor, f_train, f_pred = floor_seconds(res, t, n, D, C, m, rate)
            row = dict(N=n, share=share, t=t, m=m, d=a.d, ours=statistics.median(ours), ours_all=ours,
                       tuned_est=statistics.median(skl), tuned_all=skl, sklearn_sample=sample,
                       naive_est=statistics.median(naive) if naive else None, naive_sample=a.naive_sample,
                       floor=floor, floor_train_flops=f_train, floor_predict_flops=f_pred,
                       gemm_rate=rate, gemm_ours=rate_ours, gemm_blas=rate_blas,
                       iterations=float(res.n_iter.mean()), evaluations=float(res.n_eval.mean()),
                       seconds=res.seconds, n_blocks=res.n_blocks)
            rows.append(row)
            print(f"# N={n} t/N={share}: ours {row['ours']:.2f} s ({', '.join(f'{v:.2f}' for v in ours)}), "
                  f"sklearn tuned est. {row['tuned_est']:.1f} s ({', '.join(f'{v:.1f}' for v in skl)})"
                  + (f", naive est. {row['naive_est']:.1f} s" if naive else "")
                  + f", floor {floor:.2f} s", flush=True)
        pool.close()
    print()
    naive_on = a.naive_sample > 0
    print(f"One phase, m={m}, d={a.d}, C={C}, skewed data, {a.threads} threads; ours: median of {a.repeat}; "
          f"scikit-learn tuned (float32, {a.threads} pre-started worker processes, one BLAS thread each): "
          f"{rows[0]['sklearn_sample'] if rows else a.sklearn_sample} of {m} partitions fitted and predicted per "
          f"repeat, the rest at the mean seconds per fit (estimate), median of {a.repeat}"
          + (f"; naive loop: {a.naive_sample} of {m}, scaled likewise" if naive_on else "") + ".")
    print(f"Floor at {rows[0]['gemm_rate']:.0f} GF/s (best of NumPy sgemm {rows[0]['gemm_blas']:.0f} and "
          f"ours {rows[0]['gemm_ours']:.0f}, measured in this run)." if rows else "")
    print()
    print("| N | t/N | t | ours (s) | iterations / evaluations per model | floor (s) | ours / floor "
          "| sklearn tuned, est. (s) | tuned / ours |" + (" naive loop, est. (s) | naive / ours |" if naive_on else "")
          + " this phase / t/N=0.5 phase |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if naive_on else "") + "---:|")
    for r in rows:
        base = next((b for b in rows if b["N"] == r["N"] and b["share"] == 0.5), None)
        rel = f"{r['ours'] / base['ours']:.2f}" if base is not None and base is not r else "-"
        naive_cells = (f" {r['naive_est']:.0f} | {r['naive_est'] / r['ours']:.0f}x |" if naive_on else "")
        print(f"| {r['N']} | {r['share']} | {r['t']} | {r['ours']:.2f} | {r['iterations']:.1f} / {r['evaluations']:.1f} "
              f"| {r['floor']:.2f} | {r['ours'] / r['floor']:.2f} | {r['tuned_est']:.0f} "
              f"| {r['tuned_est'] / r['ours']:.0f}x |{naive_cells} {rel} |")
    if a.json:
        a.json.write_text(json.dumps(dict(rows=rows, machine=platform.processor() or platform.machine(),
                                          argv=sys.argv[1:]), indent=2))


if __name__ == "__main__":
    main()
