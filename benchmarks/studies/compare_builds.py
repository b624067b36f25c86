"""Two builds of the package side by side: the member pass alone and the multiple-choice phase,
each measured in a fresh process, the two builds interleaved round after round (the machine's
load drifts; interleaving spreads it over both).

Each build is a directory holding a built ``aflite_fast`` package (for instance a checkout of
an older commit, built with ``python setup.py build_ext --inplace``).

    python benchmarks/studies/compare_builds.py BEFORE_DIR AFTER_DIR [--rounds 5]
        [--member N,d,t/N,threads[,C,m] ...] [--multiple-choice t/N ...]

``--member``: one member pass (objective and gradient of m models (default 64) of C classes
(default 3), each over its own t rows) summed through the reduction tree as the engine sums it (``member_rate.py``,
``tree_seconds``), mean of 5 passes after a warm-up.  ``--multiple-choice``: one phase of
``engine.score_phase`` on N = 50,000 items of K = 4 candidates, d = 768, m = 64 (the data of
``multiple_choice_speed.py``), the best of the second and third repeat in the process (the
first pays the workspace's allocation).
"""
import argparse
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

MEMBER = r'''
import sys
sys.path.insert(0, sys.argv[1]); sys.path[1:1] = [sys.argv[2], sys.argv[2] + '/..']
import member_rate as mr
n, d, share, threads = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6])
C, m = (int(sys.argv[7]), int(sys.argv[8])) if len(sys.argv) > 8 else (3, 64)
inputs = mr.member_inputs(n, d, C, m, share)
print(mr.tree_seconds(inputs, C, threads, 5))
'''

MULTIPLE_CHOICE = r'''
import sys, time
sys.path.insert(0, sys.argv[1]); sys.path[1:1] = [sys.argv[2], sys.argv[2] + '/..']
import numpy as np
import multiple_choice_speed as ms
from aflite_fast import engine
from aflite_fast.io.inputs import scan_rows
share, (n, K, d) = float(sys.argv[3]), (50000, 4, 768)
X, y = ms.cached_items(n, K, d)
center = scan_rows(X.reshape(n * K, d)).astype(np.float32)
active = np.arange(n, dtype=np.int64)
train_pos = engine.partition_train_positions(0, 0, n, int(round(share * n)), 64)
workspace = engine.Workspace()
seconds = []
for _ in range(3):
    t0 = time.perf_counter()
    engine.score_phase(X, y.astype(np.int32), active, center, train_pos, n_classes=K, n_threads=2,
                       workspace=workspace)
    seconds.append(time.perf_counter() - t0)
print(min(seconds[1:]))
'''


def run(code, build, args):
    out = subprocess.run([sys.executable, "-c", code, str(build), str(HERE), *map(str, args)],
                         capture_output=True, text=True)
    if out.returncode:
        sys.exit(out.stderr[-3000:])
    return float(out.stdout.split()[-1])


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--member", nargs="*", default=["50000,768,0.1,2", "50000,768,0.5,2",
                                                   "200000,768,0.1,2", "200000,1024,0.09,2"])
    p.add_argument("--multiple-choice", nargs="*", type=float, default=[0.1, 0.5])
    a = p.parse_args(argv)
    cases = [("member", tuple(c.split(","))) for c in a.member]
    cases += [("multiple-choice", (share,)) for share in a.multiple_choice]
    times = {}
    for _ in range(a.rounds):
        for kind, args in cases:
            for name, build in (("before", a.before), ("after", a.after)):
                code = MEMBER if kind == "member" else MULTIPLE_CHOICE
                times.setdefault((kind, args, name), []).append(run(code, build, args))
    print("| what | before (s), median [all] | after (s), median [all] | before / after |")
    print("|---|---|---|---:|")
    for kind, args in cases:
        b, f = times[(kind, args, "before")], times[(kind, args, "after")]
        if kind == "member":
            n, d, share, threads = args[:4]
            what = f"member pass, N = {n}, d = {d}, t/N = {share}, {threads} threads"
            if len(args) > 4:
                what += f", C = {args[4]}, m = {args[5]}"
        else:
            what = f"multiple-choice phase, t/N = {args[0]}"
        fmt = ", ".join(f"{v:.3f}" for v in b), ", ".join(f"{v:.3f}" for v in f)
        print(f"| {what} | {statistics.median(b):.3f} [{fmt[0]}] | {statistics.median(f):.3f} [{fmt[1]}] "
              f"| {statistics.median(b) / statistics.median(f):.2f} |")


if __name__ == "__main__":
    main()
