"""The whole-X phase preconditioner of small X, measured by variant on the small runs
(``benchmarks/small_runs.py``'s shapes): solver evaluations and iterations (which do not depend
on the load), preconditioners built, and seconds, each variant a whole run in this process.

Variants:

- ``active``: the phase preconditioner from the active rows, the L2 weight of t (none once the
  active rows are fewer than the columns): the rule for X larger than the sample;
- ``whole``: from all of X's rows, the L2 weight of the power of two at or below t, kept
  from phase to phase (the package's rule for small X);
- ``whole-none-below-d``: ``whole``, but no preconditioner where the active rows are fewer
  than the columns;
- ``whole-exact-t``: ``whole`` with the L2 weight of t itself (an inverse every phase);
- ``whole-sqrt2``: ``whole`` with buckets of powers of sqrt(2).

    PYTHONPATH=. python benchmarks/studies/small_precond.py --shapes 1580x1024 5000x768 \\
        [--variants active whole ...] [--threads 2]
"""
import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

VARIANTS = ("active", "whole", "whole-none-below-d", "whole-exact-t", "whole-sqrt2")


def run(shape, variant, threads):
    from compare_scale import skewed
    from small_runs import C_REG, M, SHAPES

    import aflite_fast
    from aflite_fast.core import preconditioning, solver
    from aflite_fast.phase import local

    N, d, classes, k, target, pairs = SHAPES[shape]
    X, y = skewed(N, d, classes, 0)
    groups = np.arange(N) // 2 if pairs else None
    saved = (local.whole_x_preconditioner, preconditioning.reference_train_size, solver.train_models,
             preconditioning._from_second_moments, preconditioning.preconditioner)
    counts = dict(evals=0, models=0, built=0)

    def train_models(Xa, *args, **kw):
        if variant == "whole-none-below-d" and Xa.shape[0] < Xa.shape[1]:
            kw["precond"] = None
        coef, info = saved[2](Xa, *args, **kw)
        counts["evals"] += int(np.sum(info["n_eval"]))
        counts["models"] += len(info["n_eval"])
        return coef, info

    def counted(f):
        def inner(*a, **kw):
            counts["built"] += 1
            return f(*a, **kw)
        return inner

    try:
        if variant == "active":
            local.whole_x_preconditioner = lambda *a, **kw: False
        if variant == "whole-exact-t":
            preconditioning.reference_train_size = lambda t: max(1, int(t))
        if variant == "whole-sqrt2":
            preconditioning.reference_train_size = lambda t: int(2 ** (math.floor(2 * math.log2(max(1, t))) / 2))
        solver.train_models = local.solver.train_models = train_models
        preconditioning._from_second_moments = counted(saved[3])
        t0 = time.perf_counter()
        res = aflite_fast.aflite(X, y, target_size=target, n_partitions=M, train_size=0.5, slice_size=k, tau=0.0,
                                 C=C_REG, random_state=0, groups=groups, progress=False, n_jobs=threads,
                                 chance_check=False)
        seconds = time.perf_counter() - t0
    finally:
        (local.whole_x_preconditioner, preconditioning.reference_train_size, solver.train_models,
         preconditioning._from_second_moments, preconditioning.preconditioner) = saved
        local.solver.train_models = saved[2]
    h = res.history
    its = float(np.mean([p.mean_iterations for p in h]))
    per_phase = [(p.n_active, p.train_size, p.mean_iterations, p.seconds) for p in h]
    return dict(seconds=seconds, phases=len(h), evals_per_model=counts["evals"] / counts["models"], per_phase=per_phase,
                iterations=its, built=counts["built"], ms_phase=1e3 * float(np.median([p.seconds for p in h])))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=["1580x1024"])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="per-phase figures (active rows, t, iterations, seconds) of every run")
    args = ap.parse_args()
    out = {}
    print(f"# load average {os.getloadavg()}")
    print("| shape | variant | phases | evaluations a model | iterations a model | inverses built | run (s) | "
          "ms a phase (median) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for shape in args.shapes:
        for v in args.variants:
            r = run(shape, v, args.threads)
            out[f"{shape} {v}"] = r
            print(f"| {shape} | {v} | {r['phases']} | {r['evals_per_model']:.2f} | {r['iterations']:.2f} | "
                  f"{r['built']} | {r['seconds']:.2f} | {r['ms_phase']:.1f} |", flush=True)
    print(f"# load average {os.getloadavg()}")
    if args.json:
        Path(args.json).write_text(json.dumps(out))


if __name__ == "__main__":
    main()
