"""One AFLite phase on a dask LocalCluster against the local engine: seconds, bytes moved, rounds.

The Dask backend's benchmark.  Skewed, embedding-like data (``skewed_data.py``) of N x d float32 is
written once to a ``.npy`` file; then, in one run:

a. local: ``_local.score_phase`` on the memory-mapped file (page cache warm), ``--threads``
   kernel threads;
b. dask, data-parallel (the backend): a ``LocalCluster`` of ``--workers`` processes with one
   thread each loads its rows from the file (``DaskEmbeddings``: whole reduction groups per
   worker, kept for the run), computes the centre there (``scan_rows_dask``) and scores the
   same phase (``score_phase_dask``): per solver round, weights out and partial sums back;
c. dask, gather path (``--gather``; ``studies/_gather_path.py``, the design the backend replaced): each
   block of partitions trains on one worker after its training rows are sent there.

It checks that the phases agree bitwise (coefficients and counts) and prints markdown tables:
seconds of each step, the solver's rounds and their cost (wall as the client sees it, and the
slowest worker's member pass), the bytes each dask phase moved against the size of X, and the
projection of a data-parallel phase to ``--project-n`` rows x ``--project-d`` features on
``--project-workers`` workers from the measured per-round cost.

With ``--candidates K`` (K > 1) X is multiple choice, N items x K candidates x d
(``multiple_choice_speed.make_items``), ``--position-bias`` optional; there is no gather path
and no projection then.

Examples (the runs recorded in benchmarks/RESULTS.md, "Data-parallel Dask" and "Multiple
choice on the Dask backend")::

    python benchmarks/bench_dask.py --n 200000 --d 768 --m 64 --t-frac 0.1 --gather
    python benchmarks/bench_dask.py --n 50000 --candidates 4 --d 256 --m 64 --t-frac 0.1
"""
import argparse
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
STUDIES = os.path.join(HERE, "studies")  # _gather_path.py, the design the backend replaced
sys.path[:0] = [HERE, STUDIES]
# the workers import _gather_path too
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, STUDIES, os.environ.get("PYTHONPATH")) if p)
from skewed_data import make_skewed_embeddings  # noqa: E402

from aflite_fast.phase import local as _local
from aflite_fast.phase import partitions
from aflite_fast.core import layout
from aflite_fast.core import preconditioning
from aflite_fast.core import solver
from aflite_fast.io.inputs import encode_labels, scan_rows
from aflite_fast.phase.dask_backend import DaskEmbeddings, scan_rows_dask, score_phase_dask
from aflite_fast.core.solver import SolverOptions


def _cpu_seconds():
    """user + system CPU seconds of this process (all its threads)."""
    t = os.times()
    return t.user + t.system


def _mb(nbytes):
    return f"{nbytes / 1e6:,.1f}"


def _same(a, b):
    return (np.array_equal(a.coef, b.coef) and np.array_equal(a.seen, b.seen)
            and np.array_equal(a.correct, b.correct) and np.array_equal(a.prob_label, b.prob_label))


def projection(res, t_measured, d_measured, workers_measured, n_classes, m, *, n, d, workers, itemsize,
               bandwidth, t_frac):
    """Bytes and seconds of a data-parallel phase at n x d on ``workers`` workers, from the
    measured phase ``res`` (t_measured rows per partition, d_measured features,
    workers_measured workers): the same rounds and evaluations per model, one partial sum
    per worker and round, the member pass at the measured rate, the measured per-round
    overhead, and the rounds' bytes at ``bandwidth`` bytes/s."""
    Dp = solver._kernel.member_width(d + 1)
    evaluated = int(res.n_eval.sum())
    rounds = res.rounds
    nodes = workers if layout.REDUCE_LEAVES % workers == 0 else 2 * workers  # whole subtrees per worker
    round_bytes = (workers * evaluated * (8 + 8 + n_classes * Dp * 4)      # indices, scales, weights out
                   + nodes * evaluated * (n_classes * Dp + 1) * 8 + rounds * nodes * 16)  # sums back
    precond = preconditioning.preconditioner_sample(n, d + 1).size * (d + 1) * 4
    other = (n * (m / 8 + 1 + 1 / 8)                  # member bits, labels, active mask
             + workers * (d + 1) * m * n_classes * 4  # prediction weights
             + n * (1 + 1 + 8) + precond)             # counts back, the preconditioner's sample
    # the member pass: (memberships x features) per second of the slowest worker's thread
    rate = t_measured * evaluated * (d_measured + 1) / workers_measured / max(res.seconds["rounds_compute"], 1e-9)
    compute = t_frac * n * evaluated * (d + 1) / workers / rate
    overhead = res.seconds["rounds"] - res.seconds["rounds_compute"]
    transfer = round_bytes / bandwidth
    return dict(round_bytes=round_bytes, other_bytes=int(other), total=int(round_bytes + other),
                x_bytes=n * d * itemsize, rounds=rounds, compute=compute, overhead=overhead, transfer=transfer,
                seconds=compute + overhead + transfer)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--candidates", type=int, default=1,
                    help="K > 1: multiple-choice X of N items x K candidates (y the right candidate)")
    ap.add_argument("--position-bias", action="store_true", help="multiple choice: a bias per position")
    ap.add_argument("--m", type=int, default=64, help="partitions")
    ap.add_argument("--t-frac", type=float, default=0.1, help="training rows per partition / N")
    ap.add_argument("--C", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2, help="kernel threads of the local run")
    ap.add_argument("--gather", action="store_true", help="also run the gather path")
    ap.add_argument("--memory-limit", default=None,
                    help="each worker's memory_limit (e.g. 500MB): the run must finish without spilling "
                         "to disk or restarting a worker")
    ap.add_argument("--skip-local", action="store_true")
    ap.add_argument("--project-n", type=float, default=1e8)
    ap.add_argument("--project-d", type=int, default=1024)
    ap.add_argument("--project-workers", type=int, default=32)
    ap.add_argument("--project-itemsize", type=int, default=2, help="bytes per value of the projected X")
    ap.add_argument("--bandwidth", type=float, default=1.25e9, help="bytes/s of the projected network")
    ap.add_argument("--data", default="/tmp/aflite_bench_dask_X.npy")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    from distributed import Client, LocalCluster

    K = args.candidates
    if K > 1 and args.gather:
        ap.error("--gather is for classification (--candidates 1)")
    t0 = time.perf_counter()
    shape = (args.n, args.d) if K == 1 else (args.n, K, args.d)
    data = args.data.replace(".npy", f"_{'x'.join(map(str, shape))}.npy")
    ypath = data.replace(".npy", "_y.npy")
    if os.path.exists(data) and os.path.exists(ypath) and np.load(data, mmap_mode="r").shape == shape:
        y = np.load(ypath)
    else:
        if K == 1:
            X, y = make_skewed_embeddings(args.n, args.d, args.classes, random_state=args.seed)
        else:
            from multiple_choice_speed import make_items
            X, y = make_items(args.n, K, args.d, args.seed)
        np.save(data, X)
        np.save(ypath, y)
        del X
    print(f"data ready in {time.perf_counter() - t0:.1f} s: {data}", flush=True)
    X = np.load(data, mmap_mode="r")
    codes = encode_labels(y).codes if K == 1 else y.astype(np.int32)
    n_classes = int(codes.max()) + 1 if K == 1 else K
    active = np.arange(args.n, dtype=np.int64)
    t = int(round(args.t_frac * args.n))
    train_pos = partitions.partition_train_positions(args.seed, 0, args.n, t, args.m)
    options = SolverOptions()
    common = dict(n_classes=n_classes, C=args.C, options=options)
    if K > 1:
        common["position_bias"] = args.position_bias

    local = None
    if not args.skip_local:
        # warm-up (thread pools) so that the timed local phase is compute only
        small = np.arange(min(args.n, 4000), dtype=np.int64)
        _local.score_phase(X, codes, small, np.zeros(args.d, np.float32),
                           partitions.partition_train_positions(args.seed, 1, small.size, small.size // 2, 2),
                           n_classes=n_classes, options=SolverOptions(max_iter=5), n_threads=args.threads,
                           **({} if K == 1 else dict(position_bias=args.position_bias)))
        center = scan_rows(X.reshape(-1, args.d)).astype(np.float32)
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        local = _local.score_phase(X, codes, active, center, train_pos, n_threads=args.threads, **common)
        t_local = time.perf_counter() - t0
        load_local = (load_before, os.getloadavg()[0])
        print(f"local phase {t_local:.2f} s ({local.seconds}); evaluations per model "
              f"{local.n_eval.mean():.1f}", flush=True)

    cluster_kw = dict(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None)
    if args.memory_limit:
        cluster_kw["memory_limit"] = args.memory_limit
    with LocalCluster(**cluster_kw) as cluster, Client(cluster) as client:
        pids = client.run(os.getpid)
        t0 = time.perf_counter()
        Xd = DaskEmbeddings(data, client)
        t_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        center_d = scan_rows_dask(Xd).astype(np.float32)
        t_scan = time.perf_counter() - t0
        t0 = time.perf_counter()
        Xd.held_rows(center_d, args.position_bias)
        t_hold = time.perf_counter() - t0
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        remote = score_phase_dask(Xd, codes, active, center_d, train_pos, **common)
        t_dask = time.perf_counter() - t0
        load_dask = (load_before, os.getloadavg()[0])
        print(f"dask phase {t_dask:.2f} s ({remote.seconds}); rounds {remote.rounds}", flush=True)
        memory = client.run(lambda dask_worker: (dask_worker.data.fast.total_weight if hasattr(
            dask_worker.data, "fast") else 0, len(getattr(dask_worker.data, "slow", {}) or {}),
            __import__("psutil").Process().memory_info().rss))
        gather = None
        if args.gather:
            from _gather_path import score_phase_gather
            t0 = time.perf_counter()
            gather = score_phase_gather(Xd, codes, active, center_d, train_pos, **common)
            t_gather = time.perf_counter() - t0
            print(f"gather phase {t_gather:.2f} s ({gather.seconds})", flush=True)
        restarted = client.run(os.getpid) != pids

    Xbytes = X.nbytes
    mv = remote.bytes_moved
    print()
    print(f"N={args.n}{f' items x K={K}' if K > 1 else ''} d={args.d} C={n_classes} m={args.m} t={t}"
          f"{'; position bias' if K > 1 and args.position_bias else ''}; X = {_mb(Xbytes)} MB float32; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores")
    if local is not None:
        print(f"bitwise identical to local (coefficients, counts): data-parallel {_same(local, remote)}"
              + (f", gather {_same(local, gather)}" if gather is not None else "")
              + f"; evaluations per model {local.n_eval.mean():.1f} (max {local.n_eval.max()})")
    print(f"workers: {len(Xd.ranges)}, leaves {[r[1:3] for r in Xd.ranges]}; restarted: {restarted}; "
          f"per worker (managed bytes in memory, keys spilled to disk, RSS): {list(memory.values())}")
    print()
    print("| step | local (1 process, %d threads) | data-parallel (%d workers x 1 thread) |%s"
          % (args.threads, args.workers, " gather path |" if gather is not None else ""))
    print("|---|---|---|" + ("---|" if gather is not None else ""))
    g = (lambda s: f" {s} |") if gather is not None else (lambda s: "")
    lt = (lambda s: s) if local is not None else (lambda s: "-")
    print(f"| load X into worker memory (once per run) | - | {t_load:.1f} s |" + g("(same)"))
    print(f"| centre + finite check (once per run) | - | {t_scan:.1f} s |" + g("(same)"))
    print(f"| float32 rows held on the workers (once per run) | - | {t_hold:.1f} s |" + g("-"))
    if local is not None:
        print(f"| phase: train | {local.seconds['train']:.2f} s | {remote.seconds['train']:.2f} s |"
              + g(f"{gather.seconds['train']:.2f} s" if gather is not None else ""))
        print(f"| phase: predict | {local.seconds['predict']:.2f} s | {remote.seconds['predict']:.2f} s |"
              + g(f"{gather.seconds['predict']:.2f} s" if gather is not None else ""))
        print(f"| **phase total (wall)** | {t_local:.2f} s | {t_dask:.2f} s ({t_dask / t_local:.2f}x local) |"
              + g(f"{t_gather:.2f} s ({t_gather / t_local:.2f}x local)" if gather is not None else ""))
        print(f"| 1-min load average before / after | {load_local[0]:.1f} / {load_local[1]:.1f} | "
              f"{load_dask[0]:.1f} / {load_dask[1]:.1f} |" + g(""))
    print(f"| solver rounds | {lt(str(local.n_eval.max()) if local is not None else '')} | {remote.rounds} |"
          + g("-"))
    print(f"| rounds: wall / slowest worker's pass / rest (per round) | - | {remote.seconds['rounds']:.2f} / "
          f"{remote.seconds['rounds_compute']:.2f} / "
          f"{(remote.seconds['rounds'] - remote.seconds['rounds_compute']) / remote.rounds * 1e3:.0f} ms |" + g("-"))
    pre_local = f"{local.seconds['preconditioner']:.2f} s" if local is not None else "-"
    print(f"| preconditioner (reads included) | {pre_local} | {remote.seconds.get('preconditioner', 0):.2f} s |"
          + g(""))
    print()
    print("| moved per phase | MB | share of X |")
    print("|---|---|---|")
    for key, value in mv.items():
        print(f"| {key} | {_mb(value)} | {value / Xbytes:.4f} |")
    if gather is not None:
        print(f"| gather path: total | {_mb(gather.bytes_moved['total'])} | "
              f"{gather.bytes_moved['total'] / Xbytes:.4f} |")
        print(f"| gather path: rows crossing between workers | {_mb(gather.bytes_moved['train_rows_remote'])} | "
              f"{gather.bytes_moved['train_rows_remote'] / Xbytes:.4f} |")
    ok = local is None or (_same(local, remote) and (gather is None or _same(local, gather)))
    if K > 1:
        return 0 if ok and not restarted else 1
    p = projection(remote, t, args.d, len(Xd.ranges), n_classes, args.m, n=int(args.project_n), d=args.project_d,
                   workers=args.project_workers, itemsize=args.project_itemsize, bandwidth=args.bandwidth,
                   t_frac=args.t_frac)
    print()
    print(f"Projection: N={args.project_n:.0e}, d={args.project_d}, {args.project_workers} workers x 1 thread, "
          f"X = {p['x_bytes'] / 1e9:.0f} GB ({args.project_itemsize} bytes/value), "
          f"network {args.bandwidth / 1e9:.2f} GB/s, {p['rounds']} rounds as measured")
    print()
    print("| per phase | value |")
    print("|---|---|")
    print(f"| bytes of the rounds (weights out, sums back) | {p['round_bytes'] / 1e9:.3f} GB |")
    print(f"| bytes per row (phase inputs, counts back) + prediction weights + preconditioner sample | "
          f"{p['other_bytes'] / 1e9:.3f} GB |")
    print(f"| total | {p['total'] / 1e9:.3f} GB ({p['total'] / p['x_bytes']:.4f} of X) |")
    print(f"| member pass (measured rate, the slowest worker's rows) | {p['compute']:.1f} s |")
    print(f"| transfer of the rounds at the network's rate | {p['transfer']:.2f} s |")
    print(f"| per-round overhead as measured here (scheduling, local transfers) | {p['overhead']:.2f} s |")
    print(f"| phase training, projected | {p['seconds']:.1f} s |")
    return 0 if ok and not restarted else 1


if __name__ == "__main__":
    sys.exit(main())
