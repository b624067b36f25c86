"""How far a run's kept set moves under changes of the last bits, against another seed.

D = 1 - Jaccard(kept rows of a run, kept rows of the base run).  The yardstick D_seed is the
distance of the same run with another ``random_state``; every other change keeps the seed:

- ``ulp``: one value of one row moved by one float32 ulp;
- ``flip``: one row's label changed to the next class;
- ``tol=<v>``: the solver's tolerance (the base run's is ``--tol``);
- ``bf16``: every value of X rounded to bfloat16 (what rows stored in bf16 hold);
- ``isa=<name>``: another code path of the kernel (``AFLITE_FAST_ISA``, in a child process);
- ``tie=<rule>``: the other tie rule (only as a base of its own table, ``--tie``).

Data: X standard normal (N, d) float32 (or (N, K, d) with ``--candidates K``: multiple choice),
labels drawn from a softmax of X times random weights of scale ``--signal``, so rows range
from easy to hard and a run removes the easy ones first.  Every run: ``aflite`` with the given
m, t/N, slice, tau, down to ``--target`` of N.

Usage::

    python benchmarks/studies/kept_set_stability.py --n 30000 --d 64 --classes 3 --m 32 \\
        --train 0.2 --slice 1500 --tau 0.6 --target 0.5 --tol 3e-4 --tie label_prob \\
        --variants seed=1 seed=2 ulp flip tol=1e-6 isa=avx2

Each of ``--bases`` base seeds b is compared with its variants (``seed=s``: random_state b + s).
Prints one line per variant: D (mean over the bases, then each), D_seed / D (D_seed the mean
of the ``seed=`` variants), the median run time and the mean solver iterations per model.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def make_data(n, d, classes, candidates, signal, seed):
    rng = np.random.default_rng([seed, 33])
    if candidates:
        X = rng.standard_normal((n, candidates, d), dtype=np.float32)
        w = rng.standard_normal(d) * signal / np.sqrt(d)
        logits = X @ w
    else:
        X = rng.standard_normal((n, d), dtype=np.float32)
        w = rng.standard_normal((d, classes)) * signal / np.sqrt(d)
        logits = X @ w
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    u = rng.random((n, 1))
    y = np.minimum((p.cumsum(axis=1) < u).sum(axis=1), p.shape[1] - 1)
    return X, y.astype(np.int64)


def run_one(args, variant):
    from aflite_fast import aflite

    X, y = make_data(args.n, args.d, args.classes, args.candidates, args.signal, args.data_seed)
    kw = dict(target_size=int(args.target * args.n), n_partitions=args.m, train_size=args.train,
              slice_size=args.slice, tau=args.tau, random_state=args.base, tol=args.tol, progress=False,
              chance_check=False, tie_break=args.tie)
    name, _, value = variant.partition("=")
    if name == "seed":
        kw["random_state"] = args.base + int(value)
    elif name == "ulp":  # row 0, feature 0 (row 0 of item 0's first candidate)
        flat = X.reshape(-1)
        flat[0] = np.nextafter(flat[0], np.float32(np.inf))
    elif name == "bf16":  # every value rounded to bfloat16 (nearest, ties to even): what bf16 rows hold
        bits = X.view(np.uint32)
        bits += np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
        bits &= np.uint32(0xFFFF0000)
    elif name == "flip":
        y[0] = (y[0] + 1) % (args.candidates or args.classes)
    elif name == "tol":
        kw["tol"] = float(value)
    elif name == "tie":
        kw["tie_break"] = value
    elif name not in ("base", "isa"):
        raise SystemExit(f"unknown variant {variant!r}")
    start = time.perf_counter()
    res = aflite(X, y, **kw)
    seconds = time.perf_counter() - start
    return dict(variant=variant, keep=res.keep.tolist(), seconds=seconds, phases=len(res.history),
                iterations=float(np.mean([h.mean_iterations for h in res.history])))


def child(args, variant):
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    name, _, value = variant.partition("=")
    if name == "isa":
        env["AFLITE_FAST_ISA"] = value
    cmd = [sys.executable, __file__, *sys.argv[1:], "--one", variant, "--base", str(args.base)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30000)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--candidates", type=int, default=0)
    ap.add_argument("--signal", type=float, default=3.0)
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--m", type=int, default=32)
    ap.add_argument("--train", type=float, default=0.2)
    ap.add_argument("--slice", type=int, default=1500)
    ap.add_argument("--tau", type=float, default=0.6)
    ap.add_argument("--target", type=float, default=0.5)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--tie", default="label_prob")
    ap.add_argument("--variants", nargs="+", default=["seed=1", "ulp", "flip", "tol=1e-6"])
    ap.add_argument("--bases", type=int, default=3, help="base seeds 0..B-1, each compared with its variants")
    ap.add_argument("--base", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--one")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args, args.one)))
        return
    per_variant = {v: [] for v in args.variants}
    bases = []
    for b in range(args.bases):
        args.base = b
        base = child(args, "base")
        bases.append(base)
        keep0 = set(base["keep"])
        print(f"base {b}: {len(keep0)} kept, {base['phases']} phases, {base['seconds']:.1f} s, "
              f"{base['iterations']:.1f} iterations per model", flush=True)
        for v in args.variants:
            r = child(args, v)
            k = set(r["keep"])
            r["D"] = 1 - len(k & keep0) / len(k | keep0)
            per_variant[v].append(r)
    seeds = [r["D"] for v, rs in per_variant.items() if v.startswith("seed=") for r in rs]
    d_seed = float(np.mean(seeds)) if seeds else float("nan")
    rows = []
    for v, rs in per_variant.items():
        D = float(np.mean([r["D"] for r in rs]))
        row = dict(variant=v, D=D, D_each=[round(r["D"], 4) for r in rs], ratio=d_seed / D if D else None,
                   seconds=float(np.median([r["seconds"] for r in rs])),
                   iterations=float(np.mean([r["iterations"] for r in rs])),
                   phases=[r["phases"] for r in rs])
        rows.append(row)
        print(f"{v:>12}: D {D:.3f} ({', '.join(f'{x:.3f}' for x in row['D_each'])})  D_seed/D "
              f"{row['ratio'] if row['ratio'] else float('inf'):6.1f}  median {row['seconds']:6.1f} s  "
              f"{row['iterations']:.1f} iterations", flush=True)
    print(json.dumps(dict(args=vars(args), D_seed=d_seed,
                          base=[{k: v for k, v in b.items() if k != "keep"} for b in bases], rows=rows)))


if __name__ == "__main__":
    main()
