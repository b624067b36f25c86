"""One phase at SNLI proportions (N = 200,000, d = 768, C = 3, m = 64), two builds interleaved.

Each build (a source folder with its compiled kernel in place) scores the phase in its own
process, the builds taking turns ``--rounds`` times, so the load of a shared machine falls on
both alike.  In a process: a warm-up phase on 2,000 rows, then ``--repeat`` phases of every
share of ``--shares`` with one ``gather.Workspace`` (the first allocates the row buffer, as a
run's first phase does).  Each build's results are hashed (SHA-256 of the models, the counts
and ``prob_label``), so the table says whether the builds give the same bits.

    PYTHONPATH=. python benchmarks/studies/phase_builds.py --builds /path/to/older/checkout . [--rounds 3]
"""
import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def one(n, shares, repeat, threads):
    sys.path.insert(0, str(HERE.parent))
    from compare_scale import skewed

    from aflite_fast.io.inputs import scan_rows
    from aflite_fast.phase import gather, local, partitions

    X, y = skewed(n, 768, 3)
    codes = y.astype(np.int32)
    center = scan_rows(X).astype(np.float32)
    local.score_phase(X[:2000], codes[:2000], np.arange(2000), center,
                      partitions.partition_train_positions(0, 0, 2000, 500, 2), n_classes=3, n_threads=threads)
    out = {}
    for share in shares:
        t = int(round(share * n))
        train_pos = partitions.partition_train_positions(0, 0, n, t, 64)
        ws = gather.Workspace()
        secs, its = [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            res = local.score_phase(X, codes, np.arange(n, dtype=np.int64), center, train_pos, n_classes=3,
                                    n_threads=threads, workspace=ws)
            secs.append(time.perf_counter() - t0)
            its.append(float(res.n_iter.mean()))
        digest = hashlib.sha256()
        for a in (res.coef, res.seen, res.correct, res.prob_label, res.n_iter):
            digest.update(np.ascontiguousarray(a).tobytes())
        out[str(share)] = dict(seconds=secs, iterations=its, preconditioner=res.seconds["preconditioner"],
                               sha256=digest.hexdigest())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", nargs="+", required=True)
    ap.add_argument("--n", type=int, default=200000)
    ap.add_argument("--shares", type=float, nargs="+", default=[0.1, 0.5])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.n, a.shares, a.repeat, a.threads)))
        return
    res = {b: {str(s): [] for s in a.shares} for b in a.builds}
    its = {b: {str(s): [] for s in a.shares} for b in a.builds}
    digests = {str(s): set() for s in a.shares}
    print(f"# load average {os.getloadavg()}", flush=True)
    for r in range(a.rounds):
        for b in a.builds:
            cmd = [sys.executable, __file__, "--one", "--builds", b, "--n", str(a.n), "--repeat", str(a.repeat),
                   "--threads", str(a.threads), "--shares", *map(str, a.shares)]
            env = dict(os.environ, PYTHONPATH=str(Path(b).resolve()))
            out = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
                             .strip().splitlines()[-1])
            for s, v in out.items():
                res[b][s] += v["seconds"][1:]  # the first allocates the workspace's buffer
                its[b][s] += v["iterations"]
                digests[s].add(v["sha256"])
                print(f"round {r} {b} t/N={s}: {', '.join(f'{x:.2f}' for x in v['seconds'])} s, "
                      f"iterations {v['iterations'][-1]:.2f}, preconditioner {v['preconditioner']:.3f} s, "
                      f"sha256 {v['sha256'][:16]}", flush=True)
    print(f"# load average {os.getloadavg()}")
    print("| t/N | " + " | ".join(f"{b}: median s (repeats after the first)" for b in a.builds)
          + " | ratio | the same bits |")
    print("|---|" + "---|" * len(a.builds) + "---:|---|")
    for s in map(str, a.shares):
        meds = [statistics.median(res[b][s]) for b in a.builds]
        cells = [f"{m:.3f} ({', '.join(f'{x:.2f}' for x in res[b][s])}), iterations {np.mean(its[b][s]):.2f}"
                 for m, b in zip(meds, a.builds)]
        same = "yes" if len(digests[s]) == 1 else "no"
        print(f"| {s} | " + " | ".join(cells) + f" | {meds[-1] / meds[0]:.3f} | {same} |")


if __name__ == "__main__":
    main()
