"""The sparse solvers on the same models: Newton-CG (the cross-entropy default) against L-BFGS.

Data: ``benchmarks/sparse_phase.py``'s hashed 1-2-gram counts (N rows, 2^``--log2d`` columns,
about 30 non-zeros a row, C = 3); ``--m`` partitions of ``t/N * N`` rows drawn by the package's
sampler, trained by :func:`aflite_fast.core.sparse_solver.train_sparse_models` with each
solver in turn (interleaved, ``--repeat`` rounds), ``C=1``, ``tol=3e-4`` (``SolverOptions``'
default; ``aflite``'s default ``tol="auto"`` gives these models 1e-4), ``--threads`` threads.  Prints, per solver, the mean solver steps, evaluations of
objective and gradient and Hessian-vector products of a model, the median seconds, and the
largest difference of the models' objectives (the same optimum within the tolerance).

Example::

    python benchmarks/sparse_solvers.py --n 200000 --log2d 18 --m 4 --frac 0.1 --repeat 1
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sparse_phase import hashed_ngrams, partitions  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--log2d", type=int, default=18)
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--frac", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    from aflite_fast.core import sparse_solver
    from aflite_fast.core.solver import SolverOptions
    from aflite_fast.phase.plan import kernel_C

    X, y = hashed_ngrams(args.n, args.log2d, 30, 3)
    rows = sparse_solver.CSRRows(X)
    lists = partitions(X, y, args.m, args.frac, 0)
    columns = sparse_solver.model_column_sets(rows, lists)
    y = y.astype(np.int32)
    print(f"# {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at start; N={args.n}, "
          f"d=2^{args.log2d}, {X.nnz / args.n:.1f} non-zeros a row, m={args.m}, t={lists[0].size}, "
          f"most columns a model uses {max(c.size for c in columns)}", flush=True)
    secs = {"newton": [], "lbfgs": []}
    info = {}
    for r in range(args.repeat):
        for solver in secs:
            t0 = time.perf_counter()
            _, info[solver] = sparse_solver.train_sparse_models(
                rows, y, lists, 3, C=kernel_C(1.0, 3), options=SolverOptions(), n_threads=args.threads,
                columns=columns, solver=solver)
            secs[solver].append(time.perf_counter() - t0)
            print(f"  round {r} {solver}: {secs[solver][-1]:.2f} s (load {os.getloadavg()[0]:.2f})", flush=True)
    print("\n| solver | steps a model | evaluations a model | Hessian products a model | seconds (median) |")
    print("|---|---|---|---|---|")
    for solver, inf in info.items():
        hvp = f"{inf['n_hvp'].mean():.1f}" if "n_hvp" in inf else "-"
        print(f"| {solver} | {inf['n_iter'].mean():.1f} | {inf['n_eval'].mean():.1f} | {hvp} "
              f"| {statistics.median(secs[solver]):.2f} |")
    diff = np.max(np.abs(info["newton"]["objective"] - info["lbfgs"]["objective"]))
    lower = np.mean(info["newton"]["objective"] <= info["lbfgs"]["objective"])
    print(f"\nlargest objective difference {diff:.2e}; Newton-CG at or below L-BFGS for {lower:.0%} of the models; "
          f"load average {os.getloadavg()[0]:.2f} at the end")
    print("command: python " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
