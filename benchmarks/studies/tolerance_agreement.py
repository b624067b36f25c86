"""Held-out argmax agreement of models fitted at a looser tolerance with the same models fitted
tightly (tol 1e-6), and their solver iterations.

The data of ``kept_set_stability.py`` (same arguments); ``--models`` training sets of t = train x N
rows drawn as a phase-0 partition draws them; each fitted by ``RobustLogisticRegression`` at
every tolerance (``--tols``) and at 1e-6, the held-out rows' argmax compared (multiple
choice: the argmax over each item's candidates of the candidate scores).

    PYTHONPATH=. python benchmarks/studies/tolerance_agreement.py --n 200000 --d 768 --train 0.1 \\
        --tols 1e-5 1e-4 3e-4 1e-3 --models 3
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kept_set_stability import make_data  # noqa: E402

from aflite_fast import RobustLogisticRegression  # noqa: E402
from aflite_fast.phase import partitions  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30000)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--signal", type=float, default=0.7)
    ap.add_argument("--train", type=float, default=0.2)
    ap.add_argument("--tols", type=float, nargs="+", default=[1e-5, 1e-4, 3e-4, 1e-3])
    ap.add_argument("--models", type=int, default=3)
    ap.add_argument("--n-jobs", type=int, default=2)
    args = ap.parse_args()
    X, y = make_data(args.n, args.d, args.classes, 0, args.signal, 0)
    t = int(args.train * args.n)
    pos = partitions.partition_train_positions(0, 0, args.n, t, args.models)
    agree = {tol: [] for tol in args.tols}
    iters = {tol: [] for tol in [1e-6, *args.tols]}
    for j in range(args.models):
        train = pos[j]
        held = np.setdiff1d(np.arange(args.n), train)
        fits = {}
        for tol in [1e-6, *args.tols]:
            est = RobustLogisticRegression(tol=tol, n_jobs=args.n_jobs).fit(X[train], y[train])
            fits[tol] = est.decision_function(X[held]).reshape(held.size, -1)
            fits[tol] = np.argmax(fits[tol], axis=1) if fits[tol].shape[1] > 1 else (fits[tol][:, 0] > 0)
            iters[tol].append(int(np.max(est.n_iter_)))
        for tol in args.tols:
            agree[tol].append(float(np.mean(fits[tol] == fits[1e-6])))
    print(f"tol 1e-06: {np.mean(iters[1e-6]):.1f} iterations")
    for tol in args.tols:
        print(f"tol {tol:g}: {np.mean(iters[tol]):.1f} iterations, held-out argmax agreement with 1e-6 "
              f"{100 * np.mean(agree[tol]):.2f}% (min {100 * np.min(agree[tol]):.2f}%)")


if __name__ == "__main__":
    main()
