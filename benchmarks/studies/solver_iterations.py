"""Solver iterations of one phase started from zero and of the next one warm-started, per build.

Skewed embedding-like rows (``compare_scale.skewed``), N rows, d columns, C classes, m = 32
partitions; for each t/N: a phase from zero on every row (the cold start of phase 0), then the
next phase's partitions warm-started from the mean of its models (what the next phase of a run
does).  Prints the mean L-BFGS iterations and evaluations a model; they do not depend on the
load.  Run it in each build's source folder to compare builds:

    PYTHONPATH=. python benchmarks/studies/solver_iterations.py --n 60000 --d 768 --classes 2 3 10
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    from compare_scale import skewed

    from aflite_fast.io.inputs import scan_rows
    from aflite_fast.phase import local, partitions

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=60000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--classes", type=int, nargs="+", default=[2, 3, 10])
    ap.add_argument("--shares", type=float, nargs="+", default=[0.1, 0.5])
    ap.add_argument("--m", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    print("| C | t/N | cold: iterations / evaluations | warm: iterations / evaluations | seconds (both) |")
    print("|---:|---:|---|---|---:|")
    for C in a.classes:
        X, y = skewed(a.n, a.d, C)
        codes = y.astype(np.int32)
        center = scan_rows(X).astype(np.float32)
        rows = np.arange(a.n)
        for share in a.shares:
            t = int(share * a.n)
            t0 = time.perf_counter()
            cold = local.score_phase(X, codes, rows, center, partitions.partition_train_positions(0, 0, a.n, t, a.m),
                                     n_classes=C, n_threads=a.threads)
            warm_coef = np.repeat(cold.coef.mean(axis=0)[None], a.m, axis=0)
            warm = local.score_phase(X, codes, rows, center, partitions.partition_train_positions(0, 1, a.n, t, a.m),
                                     n_classes=C, n_threads=a.threads, warm_coef=warm_coef)
            print(f"| {C} | {share} | {cold.n_iter.mean():.2f} / {cold.n_eval.mean():.2f} | "
                  f"{warm.n_iter.mean():.2f} / {warm.n_eval.mean():.2f} | {time.perf_counter() - t0:.1f} |", flush=True)


if __name__ == "__main__":
    main()
