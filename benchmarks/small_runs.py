"""Whole AFLite runs of the sizes people publish: a few thousand rows, hundreds of dimensions,
a hundred short phases; against scikit-learn tuned and the arithmetic floor.

Shapes (``--shapes``; skewed, embedding-like data from ``skewed_data.py``, m = 64 partitions,
t = half the active rows, tau = 0 so that every run takes its full number of phases):

- ``1580x1024``: 1,580 answers x 1,024-d, C = 2, k = 10 down to 300 (128 phases), the two
  answers of a pair kept together (``groups=`` pairs), the answer-selection baseline's shape;
- ``5000x768``: C = 2, k = 50, down to 300 (94 phases);
- ``30000x384``: C = 4, k = 300, down to 1,500 (95 phases).

In ONE run, interleaved round by round so that the load of a shared machine falls on all alike:

a. each build given by ``--builds`` (source folders with the compiled kernel in place; default
   this one): the whole run (``aflite_fast.aflite``, ``n_jobs`` = ``--threads``, no chance
   check) in a fresh process, its seconds, per-phase seconds and L-BFGS iterations;
b. scikit-learn tuned: float32 rows, ``--threads`` joblib (loky) worker processes started
   before the timing (a warm-up call), one BLAS thread each (threadpoolctl inside the
   worker), 64 ``LogisticRegression(C)`` fits of a phase's training-set size and the
   prediction of the held-out rows; every ``--peer-every``-th phase of the run is timed (the
   same active and training-set sizes as ours) and the whole run estimated as their mean
   times the number of phases ("est." in the table);
c. the floor: per phase, 64 models x evaluations x two products of t x (d + 1) x (C - 1), and
   the prediction (n x (d + 1) x 64 (C - 1)), at the best GEMM rate measured in the same run
   (``compare_scale.gemm_rate``: NumPy's sgemm or the package's GEMM, ``--threads``
   threads).  C - 1 weight vectors a model are the least arithmetic of these models (the
   binomial model for C = 2, which scikit-learn fits; the reference-class form the package
   trains); the floor with C vectors (the symmetric softmax) is given too.  Floors with the
   evaluations our solver made (iterations + 1 a model), and with a fixed 28 evaluations a
   model (27 iterations + 1, what a profile of the first shape measured a model to take with
   the positional partitions and `tol=1e-4`).

    PYTHONPATH=. python benchmarks/small_runs.py [--shapes 1580x1024 5000x768 30000x384]
        [--rounds 3] [--peer-every 16] [--builds . /path/to/older/checkout] [--json out.json]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: name -> (N, d, classes, k, target, pairs)
SHAPES = {
    "1580x1024": (1580, 1024, 2, 10, 300, True),
    "5000x768": (5000, 768, 2, 50, 300, False),
    "30000x384": (30000, 384, 4, 300, 1500, False),
}

C_REG = 2.0
M = 64


def one_run(shape, threads, seed=0):
    """Our whole run of ``shape`` in this process: a dict of its figures."""
    from compare_scale import skewed

    # the function itself imported before the timing, as the peer's LogisticRegression is (the
    # package imports its filtering modules on first use of the name)
    from aflite_fast import aflite

    N, d, classes, k, target, pairs = SHAPES[shape]
    X, y = skewed(N, d, classes, seed)
    groups = np.arange(N) // 2 if pairs else None
    t0 = time.perf_counter()
    res = aflite(X, y, target_size=target, n_partitions=M, train_size=0.5, slice_size=k, tau=0.0, C=C_REG,
                 random_state=seed, groups=groups, progress=False, n_jobs=threads, chance_check=False)
    seconds = time.perf_counter() - t0
    h = res.history
    return dict(seconds=seconds, phases=len(h), phase_seconds=[p.seconds for p in h],
                iterations=[p.mean_iterations for p in h], n_active=[p.n_active for p in h],
                train_size=[p.train_size for p in h])


def run_build(build, shape, threads):
    """:func:`one_run` in a fresh process on the source folder ``build``."""
    env = dict(os.environ, PYTHONPATH=str(Path(build).resolve()))
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one", shape, "--threads", str(threads)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fit_predict(X, y, tr, n_classes, C):
    """One partition in a worker: fit on rows ``tr`` with one BLAS thread, predict the rest."""
    from sklearn.linear_model import LogisticRegression
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        held = np.ones(X.shape[0], dtype=bool)
        held[tr] = False
        clf = LogisticRegression(C=C, max_iter=1000, tol=1e-4).fit(X[tr], y[tr])
        proba = clf.predict_proba(X[held])
    return proba.shape[0], int(clf.n_iter_[0])


def peer_phase(X, y, n_active, t, threads, seed):
    """Seconds of 64 tuned scikit-learn fits (t rows of ``n_active``) and their predictions,
    and the fits' mean iterations."""
    from joblib import Parallel, delayed

    rng = np.random.default_rng(seed)
    active = np.sort(rng.choice(X.shape[0], n_active, replace=False))
    Xa, ya = np.ascontiguousarray(X[active]), y[active]
    trains = [np.sort(rng.choice(n_active, t, replace=False)) for _ in range(M)]
    n_classes = int(y.max()) + 1
    t0 = time.perf_counter()
    out = Parallel(n_jobs=threads, backend="loky")(delayed(_fit_predict)(Xa, ya, tr, n_classes, C_REG)
                                                   for tr in trains)
    return time.perf_counter() - t0, float(np.mean([it for _, it in out]))


def floors(run, d, outputs, rate, evals=None):
    """Seconds of the run's arithmetic at ``rate`` GFLOP/s with ``outputs`` weight vectors a
    model (C - 1: the binomial / reference-class model, the least any implementation needs; C:
    the symmetric softmax): ``evals`` evaluations a model, or the run's iterations + 1."""
    D = d + 1
    flops = 0.0
    for it, n, t in zip(run["iterations"], run["n_active"], run["train_size"]):
        e = it + 1 if evals is None else evals
        flops += M * e * 2 * (2.0 * t * D * outputs) + 2.0 * n * D * M * outputs
    return flops / (rate * 1e9)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peer-every", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--builds", nargs="+", default=[str(HERE.parent)])
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one, args.threads)))
        return
    from compare_scale import gemm_rate, skewed
    from joblib import Parallel, delayed

    Parallel(n_jobs=args.threads, backend="loky")(delayed(np.sqrt)(i) for i in range(4))  # start the pool
    print(f"# {platform.processor() or platform.machine()}, load average {os.getloadavg()}", flush=True)
    report = {}
    for shape in args.shapes:
        N, d, classes, k, target, pairs = SHAPES[shape]
        X, y = skewed(N, d, classes, 0)
        X = np.ascontiguousarray(X, dtype=np.float32)
        runs = {b: [] for b in args.builds}
        peers, peer_iters, rates = [], [], []
        for r in range(args.rounds):
            for b in args.builds:
                run = run_build(b, shape, args.threads)
                runs[b].append(run)
                print(f"{shape} round {r} {b}: {run['seconds']:.2f} s, {run['phases']} phases, "
                      f"median phase {1e3 * statistics.median(run['phase_seconds']):.1f} ms, "
                      f"iterations {np.mean(run['iterations']):.2f}", flush=True)
            rates.append(max(gemm_rate(2048, d + 1, M * classes, args.threads)))
            if not args.no_peer:
                ref = runs[args.builds[0]][-1]
                sampled = list(range(0, ref["phases"], args.peer_every))
                secs, its = [], []
                for i in sampled:
                    s, it = peer_phase(X, y, ref["n_active"][i], ref["train_size"][i], args.threads, 1000 * r + i)
                    secs.append(s)
                    its.append(it)
                peers.append(float(np.mean(secs)) * ref["phases"])
                peer_iters.append(float(np.mean(its)))
                print(f"{shape} round {r} scikit-learn tuned: {peers[-1]:.1f} s est. "
                      f"({len(sampled)} phases timed, {1e3 * np.mean(secs) / M:.1f} ms a fit, "
                      f"{peer_iters[-1]:.1f} iterations)", flush=True)
        rate = max(rates)
        rep = dict(rate=rate, peer_seconds=peers, peer_iterations=peer_iters, builds={})
        for b in args.builds:
            ref = min(runs[b], key=lambda x: abs(x["seconds"] - statistics.median([y["seconds"] for y in runs[b]])))
            total = statistics.median([x["seconds"] for x in runs[b]])
            rep["builds"][b] = dict(
                seconds=[x["seconds"] for x in runs[b]], median=total, phases=ref["phases"],
                median_phase_ms=1e3 * statistics.median([statistics.median(x["phase_seconds"]) for x in runs[b]]),
                iterations=float(np.mean(ref["iterations"])),
                floor_taken=floors(ref, d, classes - 1, rate), floor_28=floors(ref, d, classes - 1, rate, 28),
                floor_28_classes=floors(ref, d, classes, rate, 28))
        report[shape] = rep
        print(f"\n{shape}: GEMM rate {rate:.0f} GF/s; scikit-learn tuned est. median "
              f"{statistics.median(peers) if peers else float('nan'):.1f} s")
        print("| build | run (s), median (rounds) | phases | ms a phase (median) | iterations a model | "
              "floor, C - 1 outputs: at its evaluations / at 28 (s) | floor, C outputs, at 28 (s) | "
              "ours / floor (each) | tuned / ours |")
        print("|---|---|---:|---:|---:|---|---|---|---:|")
        for b, v in rep["builds"].items():
            ratio = statistics.median(peers) / v["median"] if peers else float("nan")
            print(f"| {b} | {v['median']:.2f} ({', '.join(f'{s:.2f}' for s in v['seconds'])}) | {v['phases']} | "
                  f"{v['median_phase_ms']:.1f} | {v['iterations']:.2f} | {v['floor_taken']:.2f} / "
                  f"{v['floor_28']:.2f} | {v['floor_28_classes']:.2f} | "
                  f"{v['median'] / v['floor_taken']:.2f}, {v['median'] / v['floor_28']:.2f}, "
                  f"{v['median'] / v['floor_28_classes']:.2f} | {ratio:.1f}x |")
        print(f"# load average {os.getloadavg()}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
