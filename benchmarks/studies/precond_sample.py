"""How many sample rows should the dense preconditioner be estimated from?

The dense H0 costs a Gram matrix of the sample (2 x rows x D^2 flops) and a D^3 inverse; a
larger sample whitens the features better, so the solver needs fewer evaluations.  This runs
one phase (``local.score_phase``) per choice of rows per column (and the diagonal form), on
the same skewed embedding-like data and partitions, and prints the preconditioner's seconds,
the evaluations per model and the phase's seconds.

    PYTHONPATH=. python benchmarks/studies/precond_sample.py [--n 50000] [--d 4096] [--share 0.5]
        [--per-column 8 4 2 1] [--threads 2]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: skewed_data
from skewed_data import make_skewed_embeddings  # noqa: E402

from aflite_fast.core import preconditioning
from aflite_fast.phase import local
from aflite_fast.phase import partitions


def one_phase(X, codes, center, train_pos, threads, per_column, form=None):
    saved = preconditioning.PRECOND_ROWS_PER_COLUMN, preconditioning.PRECOND_FLOOR_PER_COLUMN, preconditioning.phase_preconditioner_form
    preconditioning.PRECOND_ROWS_PER_COLUMN = preconditioning.PRECOND_FLOOR_PER_COLUMN = per_column  # exactly this many
    if form is not None:
        preconditioning.phase_preconditioner_form = lambda *a, **k: form
    try:
        active = np.arange(X.shape[0], dtype=np.int64)
        t0 = time.perf_counter()
        res = local.score_phase(X, codes, active, center, train_pos, n_classes=int(codes.max()) + 1,
                                 n_threads=threads)
        return time.perf_counter() - t0, res
    finally:
        preconditioning.PRECOND_ROWS_PER_COLUMN, preconditioning.PRECOND_FLOOR_PER_COLUMN, preconditioning.phase_preconditioner_form = saved


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument("--d", type=int, default=4096)
    p.add_argument("--classes", type=int, default=3)
    p.add_argument("--m", type=int, default=64)
    p.add_argument("--share", type=float, default=0.5)
    p.add_argument("--per-column", type=int, nargs="+", default=[8, 4, 2, 1])
    p.add_argument("--diagonal", action="store_true", help="also the diagonal form")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    X, y = make_skewed_embeddings(a.n, a.d, a.classes, random_state=0)
    X = X.astype(np.float32)
    codes = y.astype(np.int32)
    center = X.mean(axis=0).astype(np.float32)
    train_pos = partitions.partition_train_positions(0, 0, a.n, int(round(a.share * a.n)), a.m)
    print(f"N={a.n} d={a.d} C={a.classes} m={a.m} t/N={a.share} threads={a.threads}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| form | sample rows | preconditioner (s) | evaluations per model (mean) | training (s) | phase (s) |")
    print("|---|---:|---:|---:|---:|---:|")
    cases = [("dense", k) for k in a.per_column] + ([("diagonal", 8)] if a.diagonal else [])
    for form, k in cases:
        seconds, res = one_phase(X, codes, center, train_pos, a.threads, k, None if form == "dense" else form)
        rows = min(a.n, max(preconditioning.PRECOND_MIN_ROWS, k * (a.d + 1))) if form == "dense" else "-"
        print(f"| {form} | {rows} | {res.seconds.get('preconditioner', 0.0):.2f} | {res.n_eval.mean():.1f} "
              f"| {res.seconds['train']:.2f} | {seconds:.2f} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
