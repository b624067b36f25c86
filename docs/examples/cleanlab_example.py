"""Find label errors with cleanlab, using aflite_fast's out-of-sample probabilities.

Install the optional extra first::

    pip install "aflite-fast[cleanlab]"      # or: pip install cleanlab

cleanlab's ``find_label_issues(labels, pred_probs)`` needs an N x C matrix of *out-of-sample*
predicted probabilities: for every row, the probabilities of a model that did not train on it.
The usual recipe is ``cross_val_predict(LogisticRegression(), X, y, cv=5,
method="predict_proba")``; ``oof_predict_proba`` computes the same matrix (same folds, same
optimum) with all folds trained in one batched kernel call.

Run: ``python docs/examples/cleanlab_example.py``
"""
import numpy as np
from cleanlab.filter import find_label_issues
from sklearn.model_selection import StratifiedKFold

from aflite_fast.oof import oof_predict_proba
from aflite_fast.label_issues import self_confidence_issues


def make_noisy_data(n=5000, d=64, n_classes=4, flip_rate=0.08, seed=0):
    """Gaussian class blobs (skewed feature scales, shared offset) with planted label errors."""
    rng = np.random.default_rng(seed)
    y_true = rng.integers(0, n_classes, n)
    centers = rng.standard_normal((n_classes, d)) * 0.6
    scale = np.exp(0.5 * rng.standard_normal(d))
    X = ((centers[y_true] + rng.standard_normal((n, d))) * scale + 2.0).astype(np.float32)
    flipped = rng.random(n) < flip_rate
    y = y_true.copy()
    y[flipped] = (y_true[flipped] + rng.integers(1, n_classes, flipped.sum())) % n_classes
    return X, y, flipped


def main():
    X, y, flipped = make_noisy_data()
    # 1. out-of-sample probabilities; X may also be a path to a .npy file (memory-mapped).
    #    Columns follow np.unique(y); labels must be 0..C-1 for cleanlab, as here.
    folds = StratifiedKFold(5, shuffle=True, random_state=0)
    pred_probs = oof_predict_proba(X, y, cv=folds, C=1.0, random_state=0)

    # 2. cleanlab's confident-learning filter, ranked by self-confidence
    issues = find_label_issues(labels=y, pred_probs=pred_probs,
                               return_indices_ranked_by="self_confidence")
    found = np.zeros(len(y), dtype=bool)
    found[issues] = True
    print(f"cleanlab flagged {found.sum()} rows; planted errors {flipped.sum()}; "
          f"recall {np.mean(found[flipped]):.3f}, precision {np.mean(flipped[found]):.3f}")

    # 3. the same probabilities feed aflite_fast's own simple filters (no cleanlab needed)
    sc = self_confidence_issues(pred_probs, y)
    print(f"self-confidence < 1/C flagged {sc.n_issues} rows; recall {np.mean(sc.issues[flipped]):.3f}, "
          f"precision {np.mean(flipped[sc.issues]):.3f}")


if __name__ == "__main__":
    main()
