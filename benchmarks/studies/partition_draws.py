"""One phase's partition draws (``partitions.partition_train_positions``), builds interleaved.

Each build (a source folder with its compiled kernel in place) draws in its own process, the
builds taking turns ``--rounds`` times, so the load of a shared machine falls on all alike.
Shapes: every row of N active with t = ``share`` N, m = 64, 2 threads; ``pairs``: 1,580 rows
of which 940 active, whole pairs of rows as groups, t = 470 (a mid-run phase of the
answer-selection shape of ``small_runs.py``).  Per shape: the median milliseconds of
``--repeat`` draws (after one untimed), and a hash of the draws, so the table says whether
the builds draw the same partitions.

    PYTHONPATH=. python benchmarks/studies/partition_draws.py --builds . /path/to/older/checkout [--rounds 3]
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

SHAPES = {
    "pairs 940 of 1,580, t = 470": ("pairs", 940, 470),
    "N = 5,000, t = 2,500": ("rows", 5000, 2500),
    "N = 30,000, t = 15,000": ("rows", 30000, 15000),
    "N = 200,000, t = 20,000": ("rows", 200000, 20000),
    "N = 550,000, t = 50,000": ("rows", 550000, 50000),
}


def one(repeat):
    from aflite_fast.phase import partitions

    out = {}
    rng = np.random.default_rng(0)
    for name, (kind, n, t) in SHAPES.items():
        if kind == "pairs":
            active = np.sort(rng.choice(1580, n, replace=False))
            groups = active // 2

            def draw():
                return partitions.partition_train_positions(7, 3, n, t, 64, groups=groups, n_threads=2)
        else:
            def draw():
                return partitions.partition_train_positions(7, 3, n, t, 64, n_threads=2)
        first = draw()
        secs = []
        for _ in range(repeat if n < 100_000 else max(3, repeat // 10)):
            t0 = time.perf_counter()
            draw()
            secs.append(time.perf_counter() - t0)
        out[name] = dict(ms=1e3 * statistics.median(secs), sha256=hashlib.sha256(first.tobytes()).hexdigest())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", nargs="+", default=["."])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one(args.repeat)))
        return
    print(f"# load average {os.getloadavg()}")
    runs = {b: [] for b in args.builds}
    for _ in range(args.rounds):
        for b in args.builds:
            env = dict(os.environ, PYTHONPATH=os.path.abspath(b))
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--repeat", str(args.repeat)],
                                  env=env, capture_output=True, text=True, check=True, cwd=os.path.abspath(b))
            runs[b].append(json.loads(proc.stdout))
    print("| draw (m = 64, 2 threads) | " + " | ".join(f"{b}: ms, median (rounds)" for b in args.builds)
          + " | same draws |")
    print("|---|" + "---|" * len(args.builds) + "---|")
    for name in SHAPES:
        cells, hashes = [], set()
        for b in args.builds:
            ms = [r[name]["ms"] for r in runs[b]]
            hashes |= {r[name]["sha256"] for r in runs[b]}
            cells.append(f"{statistics.median(ms):.2f} ({', '.join(f'{v:.2f}' for v in ms)})")
        print(f"| {name} | " + " | ".join(cells) + f" | {'yes' if len(hashes) == 1 else 'NO'} |")
    print(f"# load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
