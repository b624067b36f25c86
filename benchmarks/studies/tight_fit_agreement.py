"""The models of a phase against tightly converged float64 fits: held-out argmax agreement.

On the answer-selection shape of ``small_runs.py`` (1,580 x 1,024 skewed rows, C = 2, C_reg = 2),
for active sets of every row and of ``--active`` rows drawn at random (a run's later phases),
one phase of ``--m`` partitions of t = half the active rows is scored by the package
(``local.score_phase`` with a workspace, ``--tol``: default the tolerance ``aflite``'s default
``tol="auto"`` gives each phase: :func:`aflite_fast.core.solver.phase_tol`), started from zero and, as a run's
later phases are, from the mean model of a phase on every row; each partition is fitted again
by scikit-learn's ``LogisticRegression`` on the same centred rows in float64 with
``tol=1e-10`` (one BLAS thread).  Ours are the predictions the phase counts: its models' logits
(in the row space from the rows' Gram matrix, ``row_space.phase_models_row_space``, which the
study wraps to keep them).  Printed: the share of (model, held-out row) pairs whose predicted
class agrees, and the largest difference of a predicted probability.

    PYTHONPATH=. python benchmarks/studies/tight_fit_agreement.py [--m 16] [--active 1580 1000 600] [--tol 1e-4]
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

from aflite_fast.core import layout, row_space, solver  # noqa: E402
from aflite_fast.io.inputs import scan_rows  # noqa: E402
from aflite_fast.phase import gather, local, partitions  # noqa: E402


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _keep_row_space_outputs(kept):
    """Wrap the phase's row-space solver so that each call's models and logits land in ``kept``."""
    real = row_space.phase_models_row_space

    def wrapped(*args, **kwargs):
        out = real(*args, **kwargs)
        kept["coef"], kept["logits"] = out[0], out[2]
        return out

    row_space.phase_models_row_space = wrapped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--active", type=int, nargs="+", default=[1580, 1000, 600])
    ap.add_argument("--tol", default="auto", help='a number, or "auto" (the default: each phase\'s from its sizes)')
    a = ap.parse_args()
    X, y = skewed(1580, 1024, 2, 0)
    codes = y.astype(np.int32)
    center = scan_rows(X).astype(np.float32)
    ws = gather.Workspace()
    rng = np.random.default_rng(5)
    warm = None
    tol = solver.check_tol(a.tol if a.tol == "auto" else float(a.tol))
    kept = {}
    _keep_row_space_outputs(kept)
    print(f"# load average {os.getloadavg()}, tol {tol}")
    print("| active rows | t | tol | start | models | agreement of held-out argmax | max abs diff of p | iterations |")
    print("|---:|---:|---:|---|---:|---:|---:|---:|")
    for n_active in a.active:
        active = (np.arange(1580, dtype=np.int64) if n_active == 1580
                  else np.sort(rng.choice(1580, n_active, replace=False)).astype(np.int64))
        t = n_active // 2
        options = solver.SolverOptions(tol=solver.phase_tol(tol, t, X.shape[1] + 1))
        train_pos = partitions.partition_train_positions(7, n_active, n_active, t, a.m)
        for start in (("zero", "mean model") if warm is not None else ("zero",)):
            kept.clear()
            res = local.score_phase(X, codes, active, center, train_pos, n_classes=2, C=2.0, n_threads=2,
                                    options=options, workspace=ws, warm_coef=None if start == "zero" else warm)
            Xa = layout.augment_rows(X[active], center).astype(np.float64)
            logits = kept.get("logits")  # (rows, models): output 0, the reference class's logit 0
            agree = total = 0
            worst = 0.0
            for j in range(a.m):
                tr = train_pos[j][train_pos[j] >= 0]
                held = np.setdiff1d(np.arange(n_active), tr)
                with threadpool_limits(1):
                    ref = LogisticRegression(C=2.0, tol=1e-10, max_iter=100000).fit(
                        X[active[tr]].astype(np.float64) - center, y[active[tr]])
                p_ref = ref.predict_proba(X[active[held]].astype(np.float64) - center)
                if logits is not None:
                    z = logits[held, j].astype(np.float64)
                    p_ours = softmax(np.stack([z, np.zeros_like(z)], axis=1))
                else:  # the feature-space solver's phase: from its models' weights
                    p_ours = softmax(Xa[held] @ res.coef[j])
                agree += int(np.sum(p_ours.argmax(1) == p_ref.argmax(1)))
                total += held.size
                worst = max(worst, float(np.abs(p_ours - p_ref).max()))
            print(f"| {n_active} | {t} | {options.tol:g} | {start} | {a.m} | {100.0 * agree / total:.2f}% | "
                  f"{worst:.2g} | {res.n_iter.mean():.2f} |", flush=True)
            if n_active == 1580 and start == "zero":
                warm = np.repeat(res.mean_model()[None], a.m, axis=0)
    print(f"# load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
