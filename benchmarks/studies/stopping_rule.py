"""The solver's stopping rule: iterations per model and agreement with a tight fit.

One AFLite phase (``local.score_phase``, the package's partitions) on two kinds of data:

a. ``benchmarks/skewed_data.py`` (embedding-like) at N = 20,000, d = 256, C = 3, m = 16,
   t/N = 0.5: the ordinary case, where the rule must not cost iterations;
b. twin data: pairs of near-identical rows (a shared base row plus and minus a small random
   difference) with opposite labels, where the gradient at zero weights is tiny because the
   twins' contributions cancel.

Printed per data set: the gradient at the start (largest entry, mean over models), mean and
maximum iterations per model, models whose weights never left zero, and the share of held-out
rows whose argmax equals that of ``sklearn.linear_model.LogisticRegression(tol=1e-10)`` fitted
in float64 on the same partition (``--check`` partitions of each phase).

    PYTHONPATH=. python benchmarks/studies/stopping_rule.py [--threads 2] [--check 4]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: skewed_data
from skewed_data import make_skewed_embeddings  # noqa: E402

from aflite_fast.phase import local, partitions  # noqa: E402


def twin_data(n_pairs, d, eps, seed):
    """Pairs of rows base +- eps * delta with opposite labels (which twin is 1 is random)."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n_pairs, d))
    delta = rng.standard_normal((n_pairs, d))
    X = np.repeat(base, 2, axis=0) + eps * np.repeat(delta, 2, axis=0) * np.tile([1.0, -1.0], n_pairs)[:, None]
    first = rng.integers(0, 2, n_pairs)
    y = np.stack([first, 1 - first], axis=1).ravel()
    return X.astype(np.float32), y.astype(np.int32), np.repeat(np.arange(n_pairs), 2)


def start_gradient(X, codes, rows, n_classes):
    Xr = X[rows].astype(np.float64)
    Xr -= Xr.mean(axis=0)
    G = Xr.T @ (1.0 / n_classes - np.eye(n_classes)[codes[rows]]) / rows.size
    return float(np.abs(G).max())


def one(name, X, codes, groups, m, share, threads, check):
    from sklearn.linear_model import LogisticRegression

    n = X.shape[0]
    n_classes = int(codes.max()) + 1
    active = np.arange(n, dtype=np.int64)
    center = X.mean(axis=0, dtype=np.float64).astype(np.float32)
    t = int(round(share * n))
    train_pos = partitions.partition_train_positions(12345, 0, n, t, m, groups=groups)
    t0 = time.perf_counter()
    res = local.score_phase(X, codes, active, center, train_pos, n_classes=n_classes, n_threads=threads)
    seconds = time.perf_counter() - t0
    g0 = np.mean([start_gradient(X, codes, r[r >= 0], n_classes) for r in train_pos[:check]])
    unmoved = int(np.all(res.coef[:, :-1, :] == 0, axis=(1, 2)).sum())
    agree = []
    for j in range(check):
        tr = train_pos[j][train_pos[j] >= 0]
        held = np.setdiff1d(active, tr)
        ref = LogisticRegression(C=1.0, tol=1e-10, max_iter=100000).fit(X[tr].astype(np.float64), codes[tr])
        W = res.coef[j]
        ours = np.argmax((X[held] - center) @ W[:-1] + W[-1], axis=1)
        agree.append(np.mean(ours == ref.predict(X[held].astype(np.float64))))
    print(f"{name}: start gradient {g0:.3g}, iterations mean {res.n_iter.mean():.1f} max {res.n_iter.max()}, "
          f"status {np.bincount(res.status, minlength=4).tolist()}, unmoved {unmoved} of {m}, argmax agreement "
          f"with a tight float64 fit {np.mean(agree):.5f} (min {np.min(agree):.5f}), {seconds:.2f} s")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--check", type=int, default=4, help="partitions compared with scikit-learn")
    args = p.parse_args()
    X, y = make_skewed_embeddings(20000, 256, 3, random_state=0)[:2]
    one("skewed N=20000 d=256 C=3 m=16 t/N=0.5", X.astype(np.float32), y.astype(np.int32), None, 16, 0.5,
        args.threads, args.check)
    for eps in (0.002, 0.01):
        X, y, g = twin_data(2000, 32, eps, 0)
        one(f"twins 4000 x 32 eps={eps} m=16 t/N=0.5 (whole pairs)", X, y, g, 16, 0.5, args.threads, args.check)


if __name__ == "__main__":
    main()
