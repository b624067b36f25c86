"""Fixed costs of a new process: ``import aflite_fast`` plus a first ``predictability`` on tiny
data, and ``aflite-fast demo`` end to end.

Each measurement runs in a fresh interpreter, ``--runs`` times; the median is printed (and
every run).  "first call" is timed inside the process, from before ``import aflite_fast`` to
the return of ``predictability`` on 200 x 8 rows (numpy's own import included, since the
package needs it); "process" is the wall time of the whole interpreter, start-up included.
Also printed: which of scikit-learn, SciPy, Numba the first call loaded.

    PYTHONPATH=. python benchmarks/first_call.py [--runs 7]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FIRST_CALL = r"""
import time
t0 = time.perf_counter()
import numpy as np
import aflite_fast
rng = np.random.default_rng(0)
X = rng.standard_normal((200, 8)).astype(np.float32)
y = rng.integers(0, 2, 200)
aflite_fast.predictability(X, y, n_partitions=4, train_size=100, random_state=0)
seconds = time.perf_counter() - t0
import json, sys
print(json.dumps(dict(seconds=seconds, loaded=sorted({m.split(".")[0] for m in sys.modules
                                                      if m.split(".")[0] in ("sklearn", "scipy", "numba")}))))
"""


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def first_call():
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", FIRST_CALL], capture_output=True, text=True, env=_env(), check=True)
    wall = time.perf_counter() - t0
    res = json.loads(out.stdout.strip().splitlines()[-1])
    res["process"] = wall
    return res


def demo():
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "aflite_fast", "demo", "--quiet"], capture_output=True, text=True,
                   env=_env(), check=True, cwd=ROOT)
    return time.perf_counter() - t0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=7)
    a = p.parse_args(argv)
    calls, demos = [], []
    for _ in range(a.runs):  # interleaved
        calls.append(first_call())
        demos.append(demo())
    inside = [c["seconds"] for c in calls]
    process = [c["process"] for c in calls]
    print(f"| measurement (new process, median of {a.runs}) | seconds | all runs |")
    print("|---|---:|---|")
    print(f"| import aflite_fast + first predictability (200 x 8), inside the process | "
          f"{statistics.median(inside):.2f} | {', '.join(f'{v:.2f}' for v in inside)} |")
    print(f"| the same, whole process (interpreter start-up included) | {statistics.median(process):.2f} | "
          f"{', '.join(f'{v:.2f}' for v in process)} |")
    print(f"| `python -m aflite_fast demo --quiet`, whole process | {statistics.median(demos):.2f} | "
          f"{', '.join(f'{v:.2f}' for v in demos)} |")
    print(f"\nloaded by the first call: {calls[-1]['loaded'] or 'none of scikit-learn, SciPy, Numba'}")


if __name__ == "__main__":
    main()
