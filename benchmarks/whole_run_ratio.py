"""A whole AFLite run against one NumPy product of its rows with all models' weights.

Skewed embedding-like data (``skewed_data.make_skewed_embeddings``), N x d float32, C = 3;
``aflite`` with m = 64, t/N = 0.1, tau = 0 and slice_size = N / 20 down to half, so the run has
10 phases (the chance check off unless ``--chance-check``: its 3 extra phase-0 scorings are
timed on their own line).  The yardstick: ``X1 @ W`` with X1 the rows with a column of ones
(N x (d + 1)) and W (d + 1) x (m C), float32, NumPy's matmul (OpenBLAS sgemm, 2 threads).
Interleaved: product (median of 5), run, for ``--repeat`` rounds; prints each round's ratio
and the median.

    PYTHONPATH=. python benchmarks/whole_run_ratio.py [--n 100000] [--d 768] [--repeat 3]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from skewed_data import make_skewed_embeddings  # noqa: E402

from aflite_fast import aflite  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tol", type=float, default=None, help="the solver's tolerance (default: aflite's)")
    ap.add_argument("--chance-check", action="store_true")
    args = ap.parse_args()
    X, y = make_skewed_embeddings(args.n, args.d, 3, random_state=0)[:2]
    X = np.ascontiguousarray(X, dtype=np.float32)
    X1 = np.hstack([X, np.ones((args.n, 1), dtype=np.float32)])
    W = np.random.default_rng(1).standard_normal((args.d + 1, args.m * 3)).astype(np.float32)
    extra = {} if args.tol is None else {"tol": args.tol}
    ratios = []
    for r in range(args.repeat):
        times = []
        for _ in range(5):
            s = time.perf_counter()
            X1 @ W
            times.append(time.perf_counter() - s)
        product = float(np.median(times))
        s = time.perf_counter()
        res = aflite(X, y, target_size=args.n // 2, n_partitions=args.m, train_size=0.1, slice_size=args.n // 20,
                     tau=0.0, random_state=r, progress=False, n_jobs=2, chance_check=args.chance_check, **extra)
        run = time.perf_counter() - s
        ratios.append(run / product)
        print(f"round {r}: product {product * 1e3:.0f} ms, run {run:.2f} s ({len(res.history)} phases, "
              f"{np.mean([h.mean_iterations for h in res.history]):.1f} iterations per model), ratio {run / product:.1f}",
              flush=True)
    print(f"median ratio {np.median(ratios):.1f}")


if __name__ == "__main__":
    main()
