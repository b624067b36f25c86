"""How far each solver stops from the optimum: out-of-fold probabilities at tol=1e-4.

``oof_predict_proba`` (preconditioned L-BFGS, float32 logits) and scikit-learn's
``cross_val_predict(LogisticRegression())`` (lbfgs, float64), both at their default tol=1e-4,
against scikit-learn converged to tol=1e-9, on the same 5 stratified folds of skewed,
embedding-like data (``skewed_data.py``; N=10000, d=256, 5 classes by default).  Prints the
largest and the mean absolute difference of the probabilities for each.

    PYTHONPATH=. python benchmarks/studies/oof_accuracy.py [--n 10000 --d 256 --classes 5]
"""
import argparse
import sys
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: skewed_data

from skewed_data import make_skewed_embeddings  # noqa: E402

from aflite_fast import oof_predict_proba  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=10000)
    p.add_argument("--d", type=int, default=256)
    p.add_argument("--classes", type=int, default=5)
    a = p.parse_args(argv)
    X, y = make_skewed_embeddings(a.n, a.d, a.classes, random_state=0)
    folds = list(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
    centred = X - X.mean(axis=0)  # does not move the optimum; spares lbfgs its offset

    def sklearn(tol):
        model = LogisticRegression(C=1.0, tol=tol, max_iter=100000)
        return cross_val_predict(model, centred, y, cv=folds, method="predict_proba")

    exact = sklearn(1e-9)
    rows = [("aflite_fast oof_predict_proba, tol=1e-4", oof_predict_proba(X, y, cv=folds)),
            ("sklearn cross_val_predict, tol=1e-4", sklearn(1e-4))]
    print(f"N={a.n} d={a.d} classes={a.classes}, 5 folds; reference: sklearn at tol=1e-9")
    for name, P in rows:
        diff = np.abs(P - exact)
        print(f"{name}: max |P - P_ref| {diff.max():.2e}, mean {diff.mean():.2e}")


if __name__ == "__main__":
    main()
