"""L-BFGS iterations per model with and without the solver's preconditioner, at the same optimum.

Solver iterations with and without the preconditioner: one AFLite phase (``local.score_phase``, the package's own
partitions) on each data set, once with ``SolverOptions(precondition=False)`` (H0 = identity,
the solver before the preconditioner) and once with the default preconditioner.  Printed per
data set: mean / max iterations of the partitions' models, the largest relative difference of
their final objectives, of their coefficients, and the share of rows whose predictability
score is the same.  Iteration counts do not depend on the machine's load, so this can run
anywhere; the wall times printed beside them do.

Data sets: ``benchmarks/skewed_data.py`` (embedding-like: power-law variances, shared offset)
at t/N = 0.5 and 0.1; scikit-learn's digits (1797 x 64, 10 classes); Fashion-MNIST (a
10000-row stratified subsample, 784 pixels / 255, 10 classes) when the Debian package
``dataset-fashion-mnist`` is installed (``apt-get install dataset-fashion-mnist``).

``--diagonal`` adds a third run with the preconditioner's diagonal form (the form used above
``preconditioning.DENSE_MAX_COLUMNS``), to show where the dense form earns its cost; ``--d 4096`` runs
the skewed data at that width (``--only-skewed`` skips the other data sets).

    PYTHONPATH=. python benchmarks/studies/iterations.py [--quick] [--threads 2] [--json out.json]
    PYTHONPATH=. python benchmarks/studies/iterations.py --diagonal --only-skewed --d 4096   # the dense form's limit
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # benchmarks/: skewed_data

from skewed_data import make_skewed_embeddings  # noqa: E402

from aflite_fast.phase import local
from aflite_fast.phase import partitions
from aflite_fast.phase import plan
from aflite_fast.core import preconditioning
from aflite_fast.io.inputs import encode_labels, scan_rows
from aflite_fast.core.solver import SolverOptions


def datasets(quick, d=None, only_skewed=False):
    n_skew = 8000 if quick else 20000
    X, y = make_skewed_embeddings(n_skew, d or (256 if quick else 768), 3, random_state=0)
    yield "skewed, t/N=0.5", X, y, n_skew // 2
    yield "skewed, t/N=0.1", X, y, n_skew // 10
    if only_skewed:
        return
    from aflite_fast.experiments.noise_robust import load_dataset
    Xd, yd, _, _ = load_dataset("digits", seed=0)  # pixels / 16, 70% of the 1797 rows
    yield "digits", Xd, yd, len(yd) // 2
    try:
        Xf, yf, _, _ = load_dataset("fashion-mnist", seed=0, max_train=4000 if quick else 10000)
    except (ImportError, ValueError, OSError, TypeError) as exc:
        print(f"# Fashion-MNIST skipped: {exc}", file=sys.stderr)
        return
    yield "fashion-mnist", np.asarray(Xf, np.float32), np.asarray(yf), len(yf) // 2


def one_phase(X, y, t, m, precondition, threads, form=None):
    """One phase; ``form`` forces the preconditioner's form (default: the engine's choice)."""
    if form is not None:
        real = preconditioning.preconditioner_forms
        preconditioning.preconditioner_forms = lambda *a, **k: [form, "none"]
        try:
            return one_phase(X, y, t, m, precondition, threads)
        finally:
            preconditioning.preconditioner_forms = real
    labels = encode_labels(y, X.shape[0])
    center = scan_rows(X).astype(np.float32)
    active = np.arange(X.shape[0], dtype=np.int64)
    train_pos = partitions.partition_train_positions(0, 0, X.shape[0], t, m)
    start = time.perf_counter()
    res = local.score_phase(X, labels.codes, active, center, train_pos, n_classes=labels.n_classes,
                             options=SolverOptions(precondition=precondition), n_threads=threads)
    return res, time.perf_counter() - start


def objectives(X, y, res, t, m):
    """Each model's objective (mean CE over its rows + L2), in float64, from its coefficients."""
    labels = encode_labels(y, X.shape[0])
    C = labels.n_classes
    Ck = plan.kernel_C(1.0, C)
    Xc = np.asarray(X, np.float64) - scan_rows(X)
    train_pos = partitions.partition_train_positions(0, 0, X.shape[0], t, m)
    out = []
    for j in range(m):
        rows = train_pos[j]
        W = res.coef[j]
        Z = Xc[rows] @ W[:-1] + W[-1]
        Z -= Z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(Z).sum(axis=1))
        ce = np.mean(lse - Z[np.arange(rows.size), labels.codes[rows]])
        out.append(ce + 0.5 / (Ck * rows.size) * np.sum(W[:-1] ** 2))
    return np.array(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller data (a smoke run)")
    p.add_argument("--partitions", type=int, default=16)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    p.add_argument("--diagonal", action="store_true", help="also run the diagonal form")
    p.add_argument("--d", type=int, default=None, help="width of the skewed data")
    p.add_argument("--only-skewed", action="store_true")
    args = p.parse_args(argv)
    rows = []
    diag_head = " diagonal form: iterations (mean / max), seconds |" if args.diagonal else ""
    print("| data | N x d | t | iterations before (mean / max) | after (mean / max) | reduction "
          "| max rel. objective diff | max rel. coef diff | same scores | seconds before / after |" + diag_head)
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if args.diagonal else ""))
    for name, X, y, t in datasets(args.quick, args.d, args.only_skewed):
        m = args.partitions
        before, s_before = one_phase(X, y, t, m, False, args.threads)
        after, s_after = one_phase(X, y, t, m, True, args.threads)
        f_b, f_a = objectives(X, y, before, t, m), objectives(X, y, after, t, m)
        obj = float(np.max(np.abs(f_a - f_b) / np.abs(f_b)))
        coef = float(np.max(np.abs(after.coef - before.coef)) / np.abs(before.coef).max())
        same = float(np.mean(np.isclose(after.scores, before.scores, equal_nan=True)))
        red = 1.0 - after.n_iter.mean() / before.n_iter.mean()
        row = dict(data=name, shape=list(X.shape), t=int(t), m=m,
                   before_mean=float(before.n_iter.mean()), before_max=int(before.n_iter.max()),
                   after_mean=float(after.n_iter.mean()), after_max=int(after.n_iter.max()),
                   reduction=red, objective_rel_diff=obj, coef_rel_diff=coef, same_scores=same,
                   seconds_before=s_before, seconds_after=s_after)
        diag_cell = ""
        if args.diagonal:
            diag, s_diag = one_phase(X, y, t, m, True, args.threads, form="diagonal")
            row.update(diagonal_mean=float(diag.n_iter.mean()), diagonal_max=int(diag.n_iter.max()),
                       seconds_diagonal=s_diag)
            diag_cell = f" {row['diagonal_mean']:.1f} / {row['diagonal_max']}, {s_diag:.2f} |"
        rows.append(row)
        print(f"| {name} | {X.shape[0]} x {X.shape[1]} | {t} | {row['before_mean']:.1f} / {row['before_max']} "
              f"| {row['after_mean']:.1f} / {row['after_max']} | {100 * red:.0f}% | {obj:.1e} | {coef:.1e} "
              f"| {100 * same:.1f}% | {s_before:.2f} / {s_after:.2f} |" + diag_cell, flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
