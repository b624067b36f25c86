"""One phase of small X with and without its whole-X preconditioner, by active-set size.

On ``small_runs.py``'s skewed data (N x d, C = 2, C_reg = 2, m = 64, t = half the active rows,
``tol`` the package's), for each active-set size of ``--active`` (rows drawn at random), one
phase (``local.score_phase`` with a workspace, started from zero) is scored with the phase
preconditioner and without it (``precond=None`` handed to the solver), the two taking turns
``--repeat`` times; printed: evaluations a model and the best CPU and wall seconds (the first
turn left out).  At t < d the preconditioner's product costs about d / t evaluations a round,
so this finds where the evaluations it saves stop paying for it.

    PYTHONPATH=. python benchmarks/studies/precond_crossover.py [--shape 1580 1024]
        [--active 1580 1100 700 500 310] [--repeat 4]
"""
import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compare_scale import skewed  # noqa: E402

from aflite_fast.core import solver  # noqa: E402
from aflite_fast.phase import gather, local, partitions  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, nargs=2, default=[1580, 1024])
    ap.add_argument("--active", type=int, nargs="+", default=[1580, 1300, 1100, 900, 700, 500, 310])
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    N, d = a.shape
    X, y = skewed(N, d, 2, 0)
    X = np.ascontiguousarray(X, dtype=np.float32)
    center = X.mean(axis=0).astype(np.float32)
    codes = y.astype(np.int32)
    real = solver.train_models
    state = {"none": False, "evals": 0.0}

    def train_models(Xa, *args, **kwargs):
        if state["none"]:
            kwargs["precond"] = None
        coef, info = real(Xa, *args, **kwargs)
        state["evals"] = float(np.mean(info["n_eval"]))
        return coef, info

    local.solver.train_models = train_models
    rng = np.random.default_rng(0)
    ws = gather.Workspace()
    print(f"# load average {os.getloadavg()}")
    print("| active rows | t | preconditioner | evaluations a model | CPU ms, best | wall ms, best |")
    print("|---:|---:|---|---:|---:|---:|")
    for n_active in a.active:
        active = np.sort(rng.choice(N, n_active, replace=False)).astype(np.int64)
        t = n_active // 2
        train_pos = partitions.partition_train_positions(1, 5, n_active, t, 64)
        runs = {False: [], True: []}
        for _ in range(a.repeat):
            for none in (False, True):
                state["none"] = none
                c0, w0 = time.process_time(), time.perf_counter()
                local.score_phase(X, codes, active, center, train_pos, n_classes=2, C=2.0, n_threads=a.threads,
                                  workspace=ws)
                runs[none].append((time.process_time() - c0, time.perf_counter() - w0, state["evals"]))
        for none in (False, True):
            r = np.array(runs[none][1:])
            print(f"| {n_active} | {t} | {'none' if none else 'whole X'} | {r[0, 2]:.2f} | {1e3 * r[:, 0].min():.1f} | "
                  f"{1e3 * r[:, 1].min():.1f} |", flush=True)
    print(f"# load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
