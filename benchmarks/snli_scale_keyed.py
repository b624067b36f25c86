"""The SNLI-scale run's kept set against a tight-tolerance run and another seed.

Runs ``snli_scale.py`` (N = 550,000 x 1,024, m = 64, t = 50,000, k = 10,000, target 180,000,
tau = 0.75, 2 threads, memory-mapped X written once to ``--path``) three times, each in its own
process: the default (seed 0, the default tolerance: its time and peak memory are the run's
figures), ``--tol 1e-6`` (seed 0) and ``--seed 1`` (the default tolerance).  Prints each run's
wall time, phases, kept rows and peak anonymous memory, then D = 1 - Jaccard of the kept rows
of the default run against the tight run and against the other seed (D_seed), and their ratio.

    PYTHONPATH=. python benchmarks/snli_scale_keyed.py --path /some/dir/snli.npy [--json out.json]

Extra arguments are passed to every ``snli_scale.py`` run (e.g. ``--rows 60000 --dim 256
--train-size 5000 --slice-size 1000 --target-size 30000`` for a smoke run).
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--path", type=Path, required=True, help="the .npy of snli_scale.py (written if missing)")
    ap.add_argument("--json", type=Path, default=None)
    a, extra = ap.parse_known_args()
    runs = {"default": [], "tol=1e-6": ["--tol", "1e-6"], "seed=1": ["--seed", "1"]}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in runs.items():
            keep, js = Path(tmp) / f"{name}.npy", Path(tmp) / f"{name}.json"
            subprocess.run([sys.executable, str(HERE / "snli_scale.py"), "--path", str(a.path), "--keep", str(keep),
                            "--json", str(js), *args, *extra], check=True, stderr=subprocess.DEVNULL)
            r = json.loads(js.read_text())
            out[name] = dict(seconds=r["total_seconds"], phases=r["n_phases"], kept=r["kept"],
                             peak_anon_gb=r["peak_anon_gb"], stop_reason=r["stop_reason"], keep=set(np.load(keep).tolist()))
            print(f"{name:>9}: {r['total_seconds']:.1f} s, {r['n_phases']} phases, {r['kept']} kept, "
                  f"peak {r['peak_anon_gb']:.2f} GB", flush=True)
    base = out["default"]["keep"]

    def dist(other):
        return 1 - len(base & other) / len(base | other)

    d_tol, d_seed = dist(out["tol=1e-6"]["keep"]), dist(out["seed=1"]["keep"])
    print(f"D(default, tol=1e-6) {d_tol:.3f}; D_seed {d_seed:.3f}; D_seed / D {d_seed / d_tol if d_tol else float('inf'):.1f}")
    if a.json:
        for r in out.values():
            del r["keep"]
        a.json.write_text(json.dumps(dict(runs=out, D_tol=d_tol, D_seed=d_seed), indent=1))


if __name__ == "__main__":
    main()
