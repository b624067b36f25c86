"""One phase of aflite_fast against scikit-learn tuned, on every shape the documentation quotes.

One command prints the table of ratios that README.md, docs/ and RESULTS.md quote against
scikit-learn:

| shape | data | m | t/N |
|---|---|---:|---:|
| `200k-0.1`, `200k-0.5` | N = 200,000 skewed rows, d = 768, C = 3 | 64 | 0.1, 0.5 |
| `C10`, `C100` | N = 50,000, d = 512, C = 10 and 100 | 32 | 0.5 |
| `d4096` | N = 50,000, d = 4096, C = 3 | 64 | 0.5 |
| `mc` | multiple choice: N = 50,000 items of K = 4 candidates, d = 768 | 64 | 0.1 |

For each shape, in ONE process, interleaved round after round (ours, peer, ours, peer, ...):

a. ours: ``local.score_phase`` (what ``predictability`` and every phase of ``aflite`` call) with a
   ``gather.Workspace`` kept between rounds, as a run's phases keep it;
b. scikit-learn tuned (``peers.PeerPool``): a pool of ``--workers`` processes started once per
   shape before anything is timed, X in shared memory, one BLAS thread per worker; the first
   ``--sample`` partitions (at least two per worker) fitted and predicted, the rest estimated
   from the mean seconds per fit (``PeerPhase.estimate``: the per-fit part is scaled, what the
   phase pays once is not).  Multiple choice: the same pool fitting one linear scorer per
   partition (SciPy L-BFGS-B, float32 rows, the package's objective and stopping rule); also,
   once, the same scorer in a serial loop in this process (BLAS on one thread and on
   ``--threads`` threads; the faster is quoted).

Both sides train on the same partitions (the package's draws), with the same C = 1 and
tol = 1e-4 (scikit-learn's default; the package at its own default tolerance).
``--check-full SHAPE`` fits all m partitions of that shape once more, after the rounds, and prints
the measured seconds beside the estimate: how far the estimate is from a measurement.

    PYTHONPATH=. python benchmarks/peer_ratios.py                     # every shape, 3 rounds
    PYTHONPATH=. python benchmarks/peer_ratios.py --shapes 200k-0.1 --check-full 200k-0.1
    PYTHONPATH=. python benchmarks/peer_ratios.py --scale 0.1 --repeat 1   # smoke (N / 10)
    PYTHONPATH=. python benchmarks/peer_ratios.py --table a.json b.json     # the table of earlier runs
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peers import PeerPool  # noqa: E402

#: name -> (data, N, d, classes or candidates, m, t/N)
SHAPES = {
    "200k-0.1": ("skewed", 200000, 768, 3, 64, 0.1),
    "200k-0.5": ("skewed", 200000, 768, 3, 64, 0.5),
    "C10": ("skewed", 50000, 512, 10, 32, 0.5),
    "C100": ("skewed", 50000, 512, 100, 32, 0.5),
    "d4096": ("skewed", 50000, 4096, 3, 64, 0.5),
    "mc": ("items", 50000, 768, 4, 64, 0.1),
}


def cpu_name():
    """The CPU's model name as the kernel reports it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _load(kind, n, d, c):
    if kind == "items":
        from multiple_choice_speed import cached_items

        return cached_items(n, c, d)
    from compare_scale import skewed

    return skewed(n, d, c)


def _ours(X, y, center, train_pos, n_classes, threads, workspace):
    from aflite_fast.phase import local

    t0 = time.perf_counter()
    res = local.score_phase(X, y.astype(np.int32), np.arange(X.shape[0], dtype=np.int64), center, train_pos,
                            n_classes=n_classes, n_threads=threads, workspace=workspace)
    return time.perf_counter() - t0, res


def _serial_loop(X, y, train_pos, sample, threads):
    """Seconds of the multiple-choice scorer fitted partition after partition in this process,
    BLAS on one thread and on ``threads`` threads: {threads: estimated seconds of m partitions}.

    Each call is one fit and one prediction (no per-phase part), so the sample's time is scaled."""
    from multiple_choice_speed import loop_partition
    from threadpoolctl import threadpool_limits

    out = {}
    for n_threads in sorted({1, threads}):
        with threadpool_limits(n_threads):
            t0 = time.perf_counter()
            for j in range(sample):
                loop_partition(X, y, train_pos[j], 1.0, np.float32)
            out[n_threads] = (time.perf_counter() - t0) * train_pos.shape[0] / sample
    return out


def run_shape(name, a):
    from aflite_fast.io.inputs import scan_rows
    from aflite_fast.phase import gather, partitions

    kind, n, d, c, m, share = SHAPES[name]
    n = int(round(n * a.scale))
    X, y = _load(kind, n, d, c)
    t = int(round(share * n))
    center = scan_rows(X.reshape(-1, d)).astype(np.float32)
    train_pos = partitions.partition_train_positions(0, 0, n, t, m)
    _ours(X[:2000], y[:2000], center, partitions.partition_train_positions(0, 0, 2000, 500, 2), c, a.threads,
          None)  # warm up lazily compiled helpers
    row = dict(shape=name, data=kind, N=n, d=d, classes=c, m=m, share=share, t=t, ours=[], peer=[], peer_wall=[],
               peer_fit_mean=[], peer_iter=[], loads=[os.getloadavg()[0]])
    with PeerPool(X, y, n_workers=a.workers) as pool:
        row["peer_setup"] = pool.setup_seconds
        workspace = gather.Workspace()
        for r in range(a.repeat):
            s, res = _ours(X, y, center, train_pos, c, a.threads, workspace)
            row["ours"].append(s)
            ph = pool.phase(train_pos, sample=a.sample, C=1.0, tol=1e-4, solver=a.solver)
            row["peer"].append(ph.estimate)
            row["peer_wall"].append(ph.wall)
            row["peer_fit_mean"].append(float(np.mean(ph.fit_seconds)))
            row["peer_iter"].append(float(np.mean(ph.n_iter)))
            row.update(sample=ph.partitions, solver=ph.solver, evaluations=float(res.n_eval.mean()))
            row["loads"].append(os.getloadavg()[0])
            print(f"# {name} round {r}: ours {s:.2f} s; scikit-learn tuned {ph.estimate:.1f} s "
                  f"({'measured' if ph.measured else 'est.'}: {ph.partitions} of {m} partitions in {ph.wall:.1f} s, "
                  f"{np.mean(ph.fit_seconds):.2f} s per fit, {np.mean(ph.n_iter):.0f} iterations); "
                  f"ratio {ph.estimate / s:.0f}x; load {os.getloadavg()[0]:.2f}", flush=True)
        if a.check_full == name:
            ph = pool.phase(train_pos, sample=m, C=1.0, tol=1e-4, solver=row["solver"])
            row["peer_full"] = ph.wall
            row["loads"].append(os.getloadavg()[0])
            print(f"# {name} all {m} partitions: {ph.wall:.1f} s measured against {statistics.median(row['peer']):.1f} s "
                  f"estimated ({ph.wall / statistics.median(row['peer']):.2f}); load {os.getloadavg()[0]:.2f}",
                  flush=True)
    if kind == "items":
        loops = _serial_loop(X, y, train_pos, a.loop_sample, a.threads)
        row["serial_threads"] = min(loops, key=loops.get)
        row["serial"] = loops[row["serial_threads"]]
        row["serial_all"] = {str(k): v for k, v in loops.items()}
        row["loop_sample"] = a.loop_sample
        print(f"# {name}: serial float32 loop est. "
              + ", ".join(f"{v:.1f} s with {k} BLAS thread(s)" for k, v in loops.items())
              + f" ({a.loop_sample} of {m} partitions)", flush=True)
    return row


def table(rows, a):
    lines = ["| phase | ours (s), median (rounds) | scikit-learn tuned (s), median (rounds) | fitted of m "
             "| seconds per fit | iterations per fit | tuned / ours (per round) |",
             "|---|---|---|---|---:|---:|---|"]
    for r in rows:
        kind = "multiple choice, K = 4" if r["data"] == "items" else f"C = {r['classes']}"
        shape = f"N = {r['N']:,}, d = {r['d']}, {kind}, m = {r['m']}, t/N = {r['share']}"
        ours, peer = statistics.median(r["ours"]), statistics.median(r["peer"])
        fitted = f"{r['sample']} of {r['m']}" + (" (est.)" if r["sample"] < r["m"] else "")
        who = " (scorer, SciPy L-BFGS-B)" if r["data"] == "items" else f" ({r['solver']})"
        lines.append(f"| {shape} | {ours:.2f} ({', '.join(f'{v:.2f}' for v in r['ours'])}) "
                     f"| {peer:.1f} ({', '.join(f'{v:.1f}' for v in r['peer'])}) | {fitted}{who} "
                     f"| {statistics.median(r['peer_fit_mean']):.2f} | {statistics.median(r['peer_iter']):.0f} "
                     f"| **{peer / ours:.0f}x** ({', '.join(f'{p / o:.0f}' for o, p in zip(r['ours'], r['peer']))}) |")
        if "peer_full" in r:
            lines.append(f"| the same, all {r['m']} partitions fitted once | | {r['peer_full']:.1f} (measured; "
                         f"estimate / measured {peer / r['peer_full']:.2f}) | {r['m']} of {r['m']} | | "
                         f"| {r['peer_full'] / ours:.0f}x |")
        if "serial" in r:
            lines.append(f"| the same, the scorer in a serial loop, float32, {r['serial_threads']} BLAS thread(s) "
                         f"(the faster of 1 and {a.threads}) | "
                         f"| {r['serial']:.1f} | {r['loop_sample']} of {r['m']} (est.) | | "
                         f"| {r['serial'] / ours:.0f}x |")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    p.add_argument("--repeat", type=int, default=3, help="rounds (ours, then the peer); medians reported")
    p.add_argument("--sample", type=int, default=4, help="partitions the peer fits per round (>= 2 per worker)")
    p.add_argument("--workers", type=int, default=2, help="the peer's worker processes (one BLAS thread each)")
    p.add_argument("--threads", type=int, default=2, help="ours: OpenMP threads; the serial loop: BLAS threads")
    p.add_argument("--solver", default="fastest", choices=["lbfgs", "liblinear", "fastest"],
                   help="the peer's solver; fastest: the faster of lbfgs and liblinear (liblinear: 2 classes only)")
    p.add_argument("--loop-sample", type=int, default=2, help="partitions of the serial multiple-choice loop")
    p.add_argument("--check-full", choices=list(SHAPES), help="also fit all m partitions of this shape once")
    p.add_argument("--scale", type=float, default=1.0, help="N times this (a smoke run: 0.1)")
    p.add_argument("--json", type=Path, help="write the rows here (after every shape, so a cut run keeps them)")
    p.add_argument("--table", type=Path, nargs="+", metavar="JSON",
                   help="print the table of the rows of these --json files (runs nothing)")
    a = p.parse_args(argv)
    if a.table:
        rows = [r for path in a.table for r in json.loads(path.read_text())["rows"]]
        print(table(rows, a))
        return
    rows = []
    t0 = time.time()
    for name in a.shapes:
        rows.append(run_shape(name, a))
        if a.json:
            a.json.write_text(json.dumps(dict(rows=rows, cpu=cpu_name(), argv=sys.argv[1:]), indent=2))
    print()
    print(f"One phase, {a.threads} threads for ours; scikit-learn tuned: {a.workers} pre-started worker processes, one "
          f"BLAS thread each, X in shared memory, C = 1, tol = 1e-4; {a.repeat} rounds interleaved, medians. "
          f"{cpu_name()}, {os.cpu_count()} CPUs, load average "
          f"{min(min(r['loads']) for r in rows):.2f}-{max(max(r['loads']) for r in rows):.2f}, "
          f"{(time.time() - t0) / 60:.0f} minutes.")
    print()
    print(table(rows, a))


if __name__ == "__main__":
    main()
