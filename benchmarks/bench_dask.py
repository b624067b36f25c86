"""One AFLite phase on a dask LocalCluster against the local engine; bytes moved per phase.

The Dask backend's benchmark.  Skewed, embedding-like data (``skewed_data.py``) of N x d float32 is
written once to a ``.npy`` file; then, in one run:

a. local: ``engine.score_phase`` on the memory-mapped file (page cache warm), ``--threads``
   kernel threads;
b. dask: a ``LocalCluster`` of ``--workers`` processes with one thread each reads the file
   chunk-wise on the workers (``DaskEmbeddings``), checks it and computes the centre there
   (``scan_rows_dask``), and scores the same phase (``score_phase_dask``).

It checks that the two phases agree bitwise (coefficients and counts), and prints a markdown
table: seconds of each step, and the bytes the dask phase moved against the size of X.
Loading X into the workers' memory happens once per run, not per phase, and is timed apart.

Example (the run recorded in docs/dask.md)::

    python benchmarks/bench_dask.py --n 200000 --d 768 --m 16 --t 20000
"""
import argparse
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from skewed_data import make_skewed_embeddings  # noqa: E402

from aflite_fast import engine  # noqa: E402
from aflite_fast.data import encode_labels, scan_rows  # noqa: E402
from aflite_fast.distributed import DaskEmbeddings, scan_rows_dask, score_phase_dask  # noqa: E402
from aflite_fast.kernel import SolverOptions  # noqa: E402


def _cpu_seconds():
    """user + system CPU seconds of this process (all its threads)."""
    t = os.times()
    return t.user + t.system


def _mb(nbytes):
    return f"{nbytes / 1e6:,.1f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--m", type=int, default=16, help="partitions")
    ap.add_argument("--t", type=int, default=20000, help="training rows per partition")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="kernel threads of the local run")
    ap.add_argument("--min-blocks", type=int, default=None,
                    help="blocks of partitions on the cluster (default: one per worker)")
    ap.add_argument("--data", default="/tmp/aflite_bench_dask_X.npy")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    ypath = args.data.replace(".npy", "_y.npy")
    if os.path.exists(args.data) and np.load(args.data, mmap_mode="r").shape == (args.n, args.d):
        y = np.load(ypath)
    else:
        X, y = make_skewed_embeddings(args.n, args.d, args.classes, random_state=args.seed)
        np.save(args.data, X)
        np.save(ypath, y)
        del X
    print(f"data ready in {time.perf_counter() - t0:.1f} s: {args.data}", flush=True)
    X = np.load(args.data, mmap_mode="r")
    codes = encode_labels(y).codes
    n_classes = int(codes.max()) + 1
    active = np.arange(args.n, dtype=np.int64)
    train_pos = engine.partition_train_positions(args.seed, 0, args.n, args.t, args.m)
    options = SolverOptions()

    # warm-up (thread pools, Numba caches) so that the timed local phase is compute only
    small = np.arange(min(args.n, 4000), dtype=np.int64)
    engine.score_phase(X, codes, small, np.zeros(args.d, np.float32),
                       engine.partition_train_positions(args.seed, 1, small.size, small.size // 2, 2),
                       n_classes=n_classes, options=SolverOptions(max_iter=5), n_threads=args.threads)
    t0 = time.perf_counter()
    center = scan_rows(X).astype(np.float32)
    t_scan_local = time.perf_counter() - t0
    load_before = os.getloadavg()[0]
    c0 = _cpu_seconds()
    t0 = time.perf_counter()
    local = engine.score_phase(X, codes, active, center, train_pos, n_classes=n_classes, C=args.C,
                               options=options, n_threads=args.threads)
    t_local = time.perf_counter() - t0
    cpu_local = _cpu_seconds() - c0
    load_local = (load_before, os.getloadavg()[0])
    print(f"local phase {t_local:.1f} s ({local.seconds})", flush=True)

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        t0 = time.perf_counter()
        Xd = DaskEmbeddings(args.data, client)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        center_d = scan_rows_dask(Xd).astype(np.float32)
        t_scan_dask = time.perf_counter() - t0
        load_before = os.getloadavg()[0]
        c0 = sum(client.run(_cpu_seconds).values())
        t0 = time.perf_counter()
        remote = score_phase_dask(Xd, codes, active, center_d, train_pos, n_classes=n_classes, C=args.C,
                                  options=options, min_blocks=args.min_blocks)
        t_dask = time.perf_counter() - t0
        cpu_dask = sum(client.run(_cpu_seconds).values()) - c0
        load_dask = (load_before, os.getloadavg()[0])
        print(f"dask phase {t_dask:.1f} s ({remote.seconds})", flush=True)

    same = (np.array_equal(center, center_d) and np.array_equal(local.coef, remote.coef)
            and np.array_equal(local.seen, remote.seen) and np.array_equal(local.correct, remote.correct)
            and np.array_equal(local.prob_label, remote.prob_label))
    Xbytes = X.nbytes
    mv = remote.bytes_moved
    print()
    print(f"N={args.n} d={args.d} C={n_classes} m={args.m} t={args.t}; X = {_mb(Xbytes)} MB float32; "
          f"{time.strftime('%Y-%m-%d')}; {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"bitwise identical (centre, coefficients, counts): {same}; mean L-BFGS iterations "
          f"{local.n_iter.mean():.0f}; blocks: local {local.n_blocks}, dask {remote.n_blocks}")
    print()
    print("| step | local (1 process, %d threads) | dask LocalCluster (%d workers x 1 thread) |"
          % (args.threads, args.workers))
    print("|---|---|---|")
    print(f"| load X into worker memory (once per run) | - (memory map) | {t_load:.1f} s |")
    print(f"| centre + finite check (once per run) | {t_scan_local:.1f} s | {t_scan_dask:.1f} s |")
    print(f"| phase: train | {local.seconds['train']:.1f} s | {remote.seconds['train']:.1f} s |")
    print(f"| phase: predict | {local.seconds['predict']:.1f} s | {remote.seconds['predict']:.1f} s |")
    print(f"| phase total (wall) | {t_local:.1f} s | {t_dask:.1f} s |")
    print(f"| phase CPU seconds (client / all workers) | {cpu_local:.0f} s | {cpu_dask:.0f} s |")
    print(f"| 1-min load average before / after the phase | {load_local[0]:.1f} / {load_local[1]:.1f} | "
          f"{load_dask[0]:.1f} / {load_dask[1]:.1f} |")
    print()
    print("| moved per phase | MB | share of X |")
    print("|---|---|---|")
    for key in ("train_rows", "train_rows_remote", "train_inputs", "coef_back", "center_broadcast",
                "weights_broadcast", "predict_inputs", "counts_back", "total"):
        print(f"| {key} | {_mb(mv[key])} | {mv[key] / Xbytes:.3f} |")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
