"""AFLite at SNLI scale from a memory-mapped .npy: seconds per phase, the full run, peak memory.

The SNLI-scale run: N = 550,000 rows x d = 1024 float32 (2.25 GB; embedding-like, skewed
variances: ``skewed_data.write_skewed_embeddings``), C = 3, m = 64 partitions, t = 50,000
training rows (t/N = 0.09), slice k = 10,000, target 180,000 rows, tau = 0.75.  The file is
written once (chunk by chunk) to ``--path`` and opened by path, i.e. memory-mapped, never
loaded whole.  Per phase the script records the engine's timings (training, prediction,
reads of X, the preconditioner) by wrapping ``local.score_phase`` (results untouched), and
samples the process's anonymous memory (RssAnon) every 10 ms.

``--max-phases P`` stops after P phases (target size = N - P k) and the table then gives a
projection of the full run, labelled as one: the measured phases' seconds per active row
times the active rows of each phase the run would have down to the target (an upper bound
of the phases: the tau rule may end the run earlier).

    PYTHONPATH=. python benchmarks/snli_scale.py [--max-phases P] [--threads 2] [--json out.json]
    PYTHONPATH=. python benchmarks/snli_scale.py --rows 60000 --train-size 5000 --slice-size 1000 \\
        --target-size 50000 --dim 256          # a smoke run
"""
import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from out_of_core import PeakAnonSampler, rss_anon  # noqa: E402
from skewed_data import write_skewed_embeddings  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=550_000)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--partitions", type=int, default=64)
    p.add_argument("--train-size", type=int, default=50_000)
    p.add_argument("--slice-size", type=int, default=10_000)
    p.add_argument("--target-size", type=int, default=180_000)
    p.add_argument("--tau", type=float, default=0.75)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-memory", default=None)
    p.add_argument("--max-phases", type=int, default=None)
    p.add_argument("--path", type=Path, default=None, help="the .npy (written if missing)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--seed", type=int, default=0, help="random_state of the run")
    p.add_argument("--tol", type=float, default=None, help="the solver's tolerance (default: aflite's)")
    p.add_argument("--keep", type=Path, default=None, help="write the kept rows' indices to this .npy")
    p.add_argument("--no-chance-check", dest="chance_check", action="store_false",
                   help="run without the chance check (3 cold scorings of phase 0 under permuted labels)")
    a = p.parse_args(argv)
    path = a.path or HERE / "_cache" / f"snli_{a.rows}_{a.dim}.npy"
    labels_path = path.with_name(path.stem + "_labels.npy")
    if not path.exists() or not labels_path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        y = write_skewed_embeddings(str(path), a.rows, a.dim, 3, random_state=0)
        np.save(labels_path, y)
        print(f"# wrote {path} ({path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s",
              file=sys.stderr)
    y = np.load(labels_path)

    from aflite_fast import aflite
    from aflite_fast.phase import local
    from aflite_fast.phase.backends import LocalBackend

    target = a.target_size
    if a.max_phases is not None:
        target = max(target, a.rows - a.max_phases * a.slice_size)
    sampler = PeakAnonSampler()
    base_anon = rss_anon()
    phases, chance_calls = [], []
    real = local.score_phase

    def spy(*args, **kwargs):
        t0 = time.perf_counter()
        res = real(*args, **kwargs)
        if phases and kwargs.get("warm_coef") is None:  # a cold call after phase 0: the chance check's
            chance_calls.append(dict(seconds=time.perf_counter() - t0, mean_iterations=float(res.n_iter.mean())))
            print(f"chance {json.dumps(chance_calls[-1])}", file=sys.stderr, flush=True)
            return res
        phases.append(dict(phase=len(phases), n_active=int(args[2].size), seconds=time.perf_counter() - t0,
                           mean_iterations=float(res.n_iter.mean()),
                           mean_evaluations=float(res.n_eval.mean()), n_blocks=res.n_blocks,
                           **{k: round(float(v), 3) for k, v in res.seconds.items()}))
        print(f"phase {json.dumps(phases[-1])}", file=sys.stderr, flush=True)
        return res

    local.score_phase = spy
    scan_seconds = []
    real_scan = LocalBackend.scan

    def scan_spy(*args, **kwargs):
        s0 = time.perf_counter()
        out = real_scan(*args, **kwargs)
        scan_seconds.append(time.perf_counter() - s0)
        return out

    LocalBackend.scan = scan_spy
    t0 = time.perf_counter()
    res = aflite(str(path), y, target_size=target, n_partitions=a.partitions, train_size=a.train_size,
                 slice_size=a.slice_size, tau=a.tau, random_state=a.seed, n_jobs=a.threads,
                 max_memory=a.max_memory, progress=False, chance_check=a.chance_check,
                 **({} if a.tol is None else {"tol": a.tol}))
    if a.keep is not None:
        np.save(a.keep, res.keep)
    total = time.perf_counter() - t0
    peak = sampler.stop()
    local.score_phase = real
    LocalBackend.scan = real_scan
    # projection of the full run from the measured phases: seconds per active row
    full_phases = []
    n_active = a.rows
    while n_active > a.target_size:
        full_phases.append(n_active)
        n_active -= min(a.slice_size, n_active - a.target_size)
    per_row = sum(ph["seconds"] for ph in phases) / sum(ph["n_active"] for ph in phases)
    chance_seconds = sum(c["seconds"] for c in chance_calls)
    loop_overhead = total - sum(ph["seconds"] for ph in phases) - chance_seconds
    projected = per_row * sum(full_phases) + loop_overhead
    # without --max-phases the run went to its own end (target size or the tau rule)
    measured_all = target == a.target_size
    out = dict(rows=a.rows, dim=a.dim, partitions=a.partitions, train_size=a.train_size,
               slice_size=a.slice_size, target_size=a.target_size, run_target=target, tau=a.tau,
               seed=a.seed, tol=a.tol,
               threads=a.threads, file_gb=path.stat().st_size / 1e9, total_seconds=total,
               n_phases=len(phases), phases=phases, kept=int(res.keep.size), stop_reason=res.stop_reason,
               peak_anon_gb=peak / 1e9, base_anon_gb=base_anon / 1e9,
               scan_seconds=sum(scan_seconds), phases_seconds=sum(ph["seconds"] for ph in phases),
               full_run_phases=len(full_phases), projected_full_seconds=projected,
               measured_full_run=measured_all, machine=platform.processor() or platform.machine(),
               chance_check=None if res.chance is None else res.chance.as_dict(), chance_calls=chance_calls,
               chance_seconds=chance_seconds)
    print(f"\nN={a.rows} d={a.dim} m={a.partitions} t={a.train_size} k={a.slice_size} "
          f"target={a.target_size}, {a.threads} threads, memory-mapped {out['file_gb']:.2f} GB float32 file\n")
    print("| phase | active rows | seconds | train | predict | reads of X | preconditioner | iterations / evaluations |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for ph in phases:
        print(f"| {ph['phase']} | {ph['n_active']} | {ph['seconds']:.1f} | {ph['train']:.1f} | {ph['predict']:.1f} "
              f"| {ph['read_train'] + ph['read_predict']:.1f} | {ph.get('preconditioner', 0):.1f} "
              f"| {ph['mean_iterations']:.1f} / {ph['mean_evaluations']:.1f} |")
    print()
    if measured_all:
        print(f"Full run measured: {len(phases)} phases, {total:.0f} s ({total / 60:.1f} min), "
              f"kept {res.keep.size} rows (stopped: {res.stop_reason}).")
    else:
        print(f"Measured {len(phases)} of {len(full_phases)} phases in {total:.0f} s; PROJECTED full run "
              f"(measured seconds per active row x the active rows of all {len(full_phases)} phases): "
              f"{projected:.0f} s ({projected / 60:.1f} min).")
    if chance_calls:
        c = res.chance
        print(f"Chance check: {len(chance_calls)} cold scorings of phase 0, {chance_seconds:.1f} s = "
              f"{100 * chance_seconds / total:.1f}% of the run (mean iterations "
              f"{np.mean([x['mean_iterations'] for x in chance_calls]):.1f}); phase 0: {c.n_above_tau} rows >= tau, "
              f"permuted {c.null_above_tau}, by_chance={c.by_chance}.")
    print(f"Outside the phases: {total - out['phases_seconds'] - chance_seconds:.0f} s, of which the validation scan of the "
          f"file (finiteness, column means) {out['scan_seconds']:.0f} s.")
    print(f"Peak anonymous memory {out['peak_anon_gb']:.2f} GB (RssAnon, 10 ms samples; "
          f"{out['base_anon_gb']:.2f} GB before the run).")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
