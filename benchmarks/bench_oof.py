"""Time oof_predict_proba against scikit-learn's cross_val_predict on skewed-variance data.

    python benchmarks/bench_oof.py                      # N=50000, d=768, 5 classes, 5 folds, C=1
    python benchmarks/bench_oof.py --n 20000 --repeat 1 # smaller, ours once

All sides get the same stratified folds, the same C, tol=1e-4, max_iter=1000 and the same
number of threads, and run in one process, interleaved over ``--repeat`` rounds (ours,
tuned, ours, tuned, ...; medians are used, the machine is shared and noisy):

- ours: ``oof_run`` with the kernel's OpenMP threads;
- scikit-learn tuned: what a skilled user sets up: ``cross_val_predict(..., n_jobs=threads)``
  on float32 X, the folds fitted in parallel by joblib (loky) worker processes with one BLAS
  thread each (``parallel_config(inner_max_num_threads=1)``), once per round;
- scikit-learn naive (once, unless ``--skip-naive``): ``cross_val_predict`` with the folds
  fitted one after the other, BLAS on ``threads`` threads.

Prints the times, the ratios, L-BFGS iterations per fold and the largest difference between
our and scikit-learn's probability matrices.

Data: ``benchmarks/skewed_data.make_skewed_embeddings`` (power-law variances, rotation, shared
offset) when importable, else features scaled by exp(N(0, 1)) plus an offset.  Isotropic
Gaussian data would need a handful of L-BFGS steps and hide the solver's cost.
"""
import argparse
import os
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits


def make_data(n, d, n_classes, seed):
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from skewed_data import make_skewed_embeddings

        return make_skewed_embeddings(n, d, n_classes, random_state=seed), "skewed_data.make_skewed_embeddings"
    except ImportError:
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((n, d)) * np.exp(rng.standard_normal(d)) + 3.0
        W = rng.standard_normal((d, n_classes)) / np.exp(rng.standard_normal(d))[:, None]
        y = np.argmax((X - 3.0) @ W + rng.gumbel(size=(n, n_classes)), axis=1)
        return (X.astype(np.float32), y), "exp(N(0,1)) scales + offset"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--classes", type=int, default=5)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--C", type=float, default=1.0, help="inverse L2 strength")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--max-iter", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3, help="runs of ours; the median is reported")
    ap.add_argument("--skip-sklearn", action="store_true")
    ap.add_argument("--skip-naive", action="store_true", help="no serial scikit-learn run")
    args = ap.parse_args(argv)

    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    from aflite_fast.filtering.oof import oof_run

    (X, y), source = make_data(args.n, args.d, args.classes, args.seed)
    folds = list(StratifiedKFold(args.folds, shuffle=True, random_state=args.seed).split(X, y))
    print(f"data: {source}; N={args.n} d={args.d} classes={args.classes} folds={args.folds} "
          f"C={args.C} tol={args.tol} threads={args.threads}; loadavg {os.getloadavg()[0]:.1f}")

    from joblib import parallel_config

    def tuned():
        with parallel_config(backend="loky", inner_max_num_threads=1):
            return cross_val_predict(LogisticRegression(C=args.C, tol=args.tol, max_iter=args.max_iter),
                                     X.astype(np.float32), y, cv=folds, method="predict_proba", n_jobs=args.threads)

    if not args.skip_sklearn:
        with parallel_config(backend="loky", inner_max_num_threads=1):  # start the worker processes
            cross_val_predict(LogisticRegression(), X[:500].astype(np.float32), y[:500], cv=2, n_jobs=args.threads)
    times, t_tuned = [], []
    for _ in range(max(1, args.repeat)):
        t0 = time.perf_counter()
        run = oof_run(X, y, cv=folds, C=args.C, tol=args.tol, max_iter=args.max_iter, n_jobs=args.threads)
        times.append(time.perf_counter() - t0)
        if not args.skip_sklearn:
            t0 = time.perf_counter()
            ref = tuned()
            t_tuned.append(time.perf_counter() - t0)
    t_ours = float(np.median(times))
    print(f"aflite_fast oof_predict_proba: {t_ours:8.2f} s (median of {[round(t, 2) for t in times]})  "
          f"iterations per fold {run.n_iter.tolist()}")
    if args.skip_sklearn:
        return
    t_tu = float(np.median(t_tuned))
    print(f"sklearn tuned (float32, {args.threads} loky workers x 1 BLAS thread): {t_tu:8.2f} s "
          f"(median of {[round(t, 2) for t in t_tuned]})")
    print(f"tuned / ours: {t_tu / t_ours:.1f}x   max |P_ours - P_sklearn| = {np.abs(run.proba - ref).max():.2e}   "
          f"argmax agreement {np.mean(run.proba.argmax(1) == ref.argmax(1)):.4f}")
    if not args.skip_naive:
        clf = LogisticRegression(C=args.C, tol=args.tol, max_iter=args.max_iter)
        t0 = time.perf_counter()
        with threadpool_limits(limits=args.threads):
            cross_val_predict(clf, X, y, cv=folds, method="predict_proba")
        t_sk = time.perf_counter() - t0
        # sklearn's own iteration counts on the same folds are not exposed by cross_val_predict
        print(f"sklearn naive (serial folds, {args.threads} BLAS threads): {t_sk:8.2f} s   naive / ours: "
              f"{t_sk / t_ours:.1f}x")
    print(f"loadavg after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
