"""Held-out argmax agreement with tightly converged float64 fits, by shape and tolerance.

What ``tol="auto"`` (:func:`aflite_fast.core.solver.phase_tol`) rests on: for each shape, one
phase of ``--m`` partitions of t = half the rows, started from zero, scored by the package at
each ``--tols``; every partition fitted again by scikit-learn's ``LogisticRegression(C=2,
tol=1e-10)`` in float64 (one BLAS thread) on the same rows (dense: centred, as the package
centres them; sparse: as they are).  Printed per shape and tolerance: the share of (model,
held-out row) pairs whose predicted class agrees, and the mean L-BFGS (dense) or Newton
(sparse) steps a model.

Shapes: ``NxDxC`` dense skewed rows (``compare_scale.skewed``), ``sNxLxZxC`` sparse hashed
n-gram counts (``sparse_phase.hashed_ngrams``: N rows, 2^L columns, about Z non-zeros a row).

    PYTHONPATH=. python benchmarks/studies/tolerance_by_shape.py \
        --shapes 1580x1024x2 2400x1024x2 4000x1024x2 600x384x2 1000x384x2 2000x384x2 5000x768x2 \
                 s4000x16x40x2 s4000x16x40x4 s20000x18x40x2 [--m 8] [--tols 3e-4 1e-4]
"""
import argparse
import os
import sys
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compare_scale import skewed  # noqa: E402
from sparse_phase import hashed_ngrams  # noqa: E402

from aflite_fast.core import layout, solver, sparse_solver  # noqa: E402
from aflite_fast.io.inputs import scan_rows  # noqa: E402
from aflite_fast.io.sparse import check_sparse  # noqa: E402
from aflite_fast.phase import local, partitions, sparse_local  # noqa: E402

C_REG = 2.0


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def shape_data(spec):
    """(X, y, n_classes, sparse) of a ``--shapes`` entry."""
    if spec.startswith("s"):
        n, log2d, nnz, c = map(int, spec[1:].split("x"))
        X, y = hashed_ngrams(n, log2d, nnz, c, seed=0)
        return check_sparse(X), y, c, True
    n, d, c = map(int, spec.split("x"))
    X, y = skewed(n, d, c, 0)
    return X, y, c, False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", required=True)
    ap.add_argument("--m", type=int, default=8)
    ap.add_argument("--tols", type=float, nargs="+", default=[3e-4, 1e-4])
    a = ap.parse_args()
    print(f"# load average {os.getloadavg()}")
    print("| shape | t / columns | " + " | ".join(f"tol {t:g}: agreement (steps)" for t in a.tols)
          + ' | tol="auto" |')
    print("|---|---:|" + "---:|" * len(a.tols) + "---|")
    for spec in a.shapes:
        X, y, n_classes, sparse = shape_data(spec)
        n = X.shape[0]
        codes = y.astype(np.int32)
        active = np.arange(n, dtype=np.int64)
        t = n // 2
        train_pos = partitions.partition_train_positions(7, n, n, t, a.m)
        center = None if sparse else scan_rows(X).astype(np.float32)
        refs = []
        for j in range(a.m):
            tr = train_pos[j][train_pos[j] >= 0]
            held = np.setdiff1d(np.arange(n), tr)
            Xtr, Xheld = X[tr].astype(np.float64), X[held].astype(np.float64)
            if not sparse:
                Xtr, Xheld = Xtr - center, Xheld - center
            with threadpool_limits(1):
                ref = LogisticRegression(C=C_REG, tol=1e-10, max_iter=100000).fit(Xtr, y[tr])
            refs.append((held, ref.predict_proba(Xheld).argmax(1)))
        cells = []
        for tol in a.tols:
            options = solver.SolverOptions(tol=tol)
            if sparse:
                res = sparse_local.score_phase_sparse(X, codes, active, None, train_pos, n_classes=n_classes,
                                                      C=C_REG, n_threads=2, options=options)
                rows = sparse_solver.CSRRows(X)
                proba = [sparse_solver.predict_proba_sparse(rows, res.coef[j]) for j in range(a.m)]
            else:
                res = local.score_phase(X, codes, active, center, train_pos, n_classes=n_classes, C=C_REG,
                                        n_threads=2, options=options)
                Xa = layout.augment_rows(X, center).astype(np.float64)
                proba = [softmax(Xa @ res.coef[j]) for j in range(a.m)]
            agree = sum(int(np.sum(proba[j][held].argmax(1) == ref)) for j, (held, ref) in enumerate(refs))
            total = sum(held.size for held, _ in refs)
            cells.append(f"{100.0 * agree / total:.2f}% ({res.n_iter.mean():.1f})")
        print(f"| {spec} | {t / (X.shape[1] + 1):.2f} | " + " | ".join(cells)
              + f" | {solver.phase_tol('auto', t, X.shape[1] + 1):g} |", flush=True)
    print(f"# load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
