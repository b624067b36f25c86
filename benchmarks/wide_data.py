"""RobustLogisticRegression against scikit-learn's LogisticRegression on wide data (n < d).

For each size (default 400 x 10000 and 400 x 20000, two and three classes), each contender
fits in a fresh process (so that one's memory does not hide the other's), interleaved
(ours, sklearn, ours, ...) over ``--rounds`` rounds:

- ours: ``aflite_fast.RobustLogisticRegression(n_jobs=--threads)`` (no preconditioner here:
  with fewer rows than columns plain L-BFGS was measured fastest, ``--forms``);
- sklearn: ``LogisticRegression()`` (lbfgs), BLAS limited to ``--threads``.

Both get the same float32 X: ``--data skewed`` (column scales exp(N(0, 1)), a shared offset,
labels from a noisy linear model) or ``--data isotropic`` (N(0, 1) features, random labels,
which lbfgs fits in a few steps).  Time: the median of ``--repeat`` fits in the process (after
one fit that is not timed: imports, thread pools).  Memory: the process's peak resident set
during the timed fits above what it held before them (VmHWM after resetting it through
/proc/self/clear_refs), in copies of X.  Also printed: the agreement of the two models'
predictions on held-out rows.

    PYTHONPATH=. python benchmarks/wide_data.py [--sizes 400x10000 400x20000] [--classes 2 3]
        [--rounds 3] [--repeat 3] [--threads 2] [--data skewed|isotropic]
    PYTHONPATH=. python benchmarks/wide_data.py --forms --sizes 400x20000   # each preconditioner form
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
import numpy as np
from threadpoolctl import threadpool_limits

n, d, n_classes, who, repeat, threads, data = sys.argv[1:8]
n, d, n_classes, repeat, threads = int(n), int(d), int(n_classes), int(repeat), int(threads)
sys.path.insert(0, sys.argv[8])
from wide_data import make_wide
X, y = make_wide(n + 1000, d, n_classes, data, seed=[n, d, n_classes])
Xtr, ytr, Xte = X[:n], y[:n], X[n:]

if who == "ours":
    from aflite_fast import RobustLogisticRegression
    make = lambda: RobustLogisticRegression(n_jobs=threads)
else:
    from sklearn.linear_model import LogisticRegression
    make = lambda: LogisticRegression()


def status(key):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


with threadpool_limits(threads):
    make().fit(Xtr, ytr)  # not timed: imports, thread pools
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to the current resident set
    before = status("VmRSS")
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        model = make().fit(Xtr, ytr)
        times.append(time.perf_counter() - t0)
    peak = status("VmHWM") - before
    proba = model.predict_proba(Xte)
print(json.dumps(dict(times=times, peak=peak, x_bytes=Xtr.nbytes, n_iter=int(np.ravel(model.n_iter_)[0]),
                      pred=proba.argmax(axis=1).tolist(), proba=proba.tolist())))
"""


def make_wide(n, d, n_classes, data, seed):
    """float32 X (n, d) and labels: ``"isotropic"`` (N(0, 1) features, random labels) or
    ``"skewed"`` (column scales exp(N(0, 1)), offset 3, labels from a noisy linear model)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    if data == "isotropic":
        return rng.standard_normal((n, d), dtype=np.float32), rng.integers(0, n_classes, n)
    scale = np.exp(rng.standard_normal(d)).astype(np.float32)
    X = (rng.standard_normal((n, d), dtype=np.float32) * scale + 3.0).astype(np.float32)
    W = rng.standard_normal((d, n_classes)) / scale[:, None] / np.sqrt(d)
    y = np.argmax((X - 3.0) @ W * 3.0 + rng.gumbel(size=(n, n_classes)), axis=1)
    return X, y


def forms(sizes, classes, threads, repeat):
    """Seconds and iterations of ``RobustLogisticRegression`` with each preconditioner form
    forced, both kinds of data (in this process: the fastest of ``repeat`` fits)."""
    import time

    from aflite_fast import RobustLogisticRegression
    from aflite_fast.core import preconditioning

    real = preconditioning.preconditioner_forms
    print("| data | n x d | classes | form | seconds (best of %d) | iterations |" % repeat)
    print("|---|---|---:|---|---:|---:|")
    try:
        for size in sizes:
            n, d = (int(v) for v in size.split("x"))
            for data in ("isotropic", "skewed"):
                for k in classes:
                    X, y = make_wide(n, d, k, data, seed=[n, d, k])
                    for form in ("lowrank", "diagonal", "none"):
                        preconditioning.preconditioner_forms = lambda *a, form=form: [form, "none"]
                        RobustLogisticRegression(n_jobs=threads).fit(X, y)
                        best = float("inf")
                        for _ in range(repeat):
                            t0 = time.perf_counter()
                            model = RobustLogisticRegression(n_jobs=threads).fit(X, y)
                            best = min(best, time.perf_counter() - t0)
                        print(f"| {data} | {n} x {d} | {k} | {form} | {best:.3f} | {model.n_iter_[0]} |", flush=True)
    finally:
        preconditioning.preconditioner_forms = real


def run(n, d, n_classes, who, repeat, threads, data):
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), str(d), str(n_classes), who, str(repeat),
                          str(threads), data, str(Path(__file__).resolve().parent)], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", nargs="+", default=["400x10000", "400x20000"])
    p.add_argument("--classes", type=int, nargs="+", default=[2, 3])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--data", choices=["skewed", "isotropic"], default="skewed",
                   help="skewed: column scales exp(N(0, 1)), offset 3, labels from a noisy linear model; "
                        "isotropic: N(0, 1) features, random labels")
    p.add_argument("--json", type=Path)
    p.add_argument("--forms", action="store_true",
                   help="instead: ours with each preconditioner form forced, both kinds of data")
    a = p.parse_args(argv)
    import numpy as np

    if a.forms:
        return forms(a.sizes, a.classes, a.threads, a.repeat)

    rows = []
    for size in a.sizes:
        n, d = (int(v) for v in size.split("x"))
        for n_classes in a.classes:
            res = {"ours": [], "sklearn": []}
            for _ in range(a.rounds):
                for who in ("ours", "sklearn"):
                    res[who].append(run(n, d, n_classes, who, a.repeat, a.threads, a.data))
            med = {w: statistics.median(t for r in res[w] for t in r["times"]) for w in res}
            peak = {w: max(r["peak"] for r in res[w]) for w in res}
            x_bytes = res["ours"][0]["x_bytes"]
            po, ps = np.array(res["ours"][-1]["proba"]), np.array(res["sklearn"][-1]["proba"])
            row = dict(n=n, d=d, classes=n_classes, ours=med["ours"], sklearn=med["sklearn"],
                       ours_peak=peak["ours"], sklearn_peak=peak["sklearn"], x_bytes=x_bytes,
                       ours_iter=res["ours"][-1]["n_iter"], sklearn_iter=res["sklearn"][-1]["n_iter"],
                       agree=float(np.mean(po.argmax(1) == ps.argmax(1))), max_proba_diff=float(np.abs(po - ps).max()))
            rows.append(row)
            print(f"# {n} x {d}, {n_classes} classes: ours {row['ours']:.3f} s, sklearn {row['sklearn']:.3f} s; "
                  f"peak {row['ours_peak'] / 1e6:.0f} / {row['sklearn_peak'] / 1e6:.0f} MB", flush=True)
    print()
    print(f"Fits on float32 X ({a.data} data), {a.threads} threads; median of {a.rounds} processes x {a.repeat} fits each, "
          "contenders interleaved; peak: resident set above the process's before the timed fits.")
    print()
    print("| n x d | classes | ours (s) | sklearn (s) | ours / sklearn | ours peak (MB, copies of X) "
          "| sklearn peak (MB, copies of X) | iterations ours / sklearn | held-out agreement, max |dp| |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['n']} x {r['d']} | {r['classes']} | {r['ours']:.3f} | {r['sklearn']:.3f} "
              f"| {r['ours'] / r['sklearn']:.2f} | {r['ours_peak'] / 1e6:.0f} ({r['ours_peak'] / r['x_bytes']:.1f}) "
              f"| {r['sklearn_peak'] / 1e6:.0f} ({r['sklearn_peak'] / r['x_bytes']:.1f}) "
              f"| {r['ours_iter']} / {r['sklearn_iter']} | {100 * r['agree']:.1f}%, {r['max_proba_diff']:.1e} |")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
