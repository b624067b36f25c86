"""What a lost worker costs a Dask phase: seconds added against the uninterrupted phase.

Skewed, embedding-like data (``skewed_data.py``) of N x d float32 is written once to a ``.npy``
file, which the workers read.  On a ``LocalCluster`` of ``--workers`` processes (one thread
each; a worker that exits is restarted by its nanny), each repetition puts X on the cluster
afresh (``DaskEmbeddings``, its rows held before the clock starts) and times one phase
(``score_phase_dask``, m partitions at t/N), alternately:

a. uninterrupted;
b. with the worker holding the middle share exiting (``os._exit``, as SIGKILL or the
   out-of-memory killer would) at its ``--round``-th solver round: its share is read again
   from the file by another worker, its actor made again, the round asked again, and the
   phase's other rounds run with that worker holding two shares.

Both phases must agree bitwise (coefficients and counts); the table gives the median and the
range of each over ``--repeat`` repetitions and the seconds the loss added (median against
median).

Example (the run recorded in benchmarks/RESULTS.md, "A lost Dask worker")::

    python benchmarks/dask_worker_loss.py --n 120000 --d 256 --m 16 --t-frac 0.1 --repeat 5
"""
import argparse
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE]
from skewed_data import make_skewed_embeddings  # noqa: E402

import distributed  # noqa: E402

from aflite_fast.io.inputs import encode_labels, scan_rows  # noqa: E402
from aflite_fast.phase import partitions  # noqa: E402
from aflite_fast.phase.dask_backend import DaskEmbeddings, score_phase_dask  # noqa: E402


class ExitAt(distributed.WorkerPlugin):
    """The worker at ``target`` exits at its ``call``-th solver round."""

    def __init__(self, call, target):
        self.call, self.target = call, target

    def setup(self, worker):
        if worker.address != self.target:
            return
        from aflite_fast.phase.dask_backend import _PhaseRows

        original, calls = _PhaseRows.evaluate, [0]

        def exiting(actor, *args):
            calls[0] += 1
            if calls[0] == self.call:
                os._exit(1)
            return original(actor, *args)

        _PhaseRows.evaluate = exiting


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=120000)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--m", type=int, default=16, help="partitions")
    ap.add_argument("--t-frac", type=float, default=0.1, help="training rows per partition / N")
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--round", type=int, default=5, help="the solver round at which the worker exits")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--data", default="/tmp/aflite_bench_worker_loss_X.npy")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    X, y = make_skewed_embeddings(args.n, args.d, args.classes, random_state=args.seed)
    np.save(args.data, X.astype(np.float32))
    del X
    Xm = np.load(args.data, mmap_mode="r")
    codes = encode_labels(y).codes
    center = scan_rows(Xm)
    active = np.arange(args.n, dtype=np.int64)
    t = int(args.t_frac * args.n)
    train_pos = partitions.partition_train_positions(args.seed, 0, args.n, t, args.m)
    kw = dict(n_classes=args.classes)

    times = {"uninterrupted": [], "worker lost": []}
    reference = None
    with distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=50) as cluster, \
            distributed.Client(cluster) as client:
        for rep in range(args.repeat):
            for kind in ("uninterrupted", "worker lost"):
                client.wait_for_workers(args.workers, timeout=120)
                Xd = DaskEmbeddings(args.data, client)
                Xd.held_rows(center)  # read before the clock starts, as in a run's later phases
                if kind == "worker lost":
                    client.register_plugin(ExitAt(args.round, Xd.ranges[len(Xd.ranges) // 2][0]), name="exit-at")
                t0 = time.perf_counter()
                res = score_phase_dask(Xd, codes, active, center, train_pos, **kw)
                times[kind].append(time.perf_counter() - t0)
                if kind == "worker lost":
                    client.unregister_worker_plugin("exit-at")
                    assert len(res.workers_lost) == 1 and res.rounds_repeated >= 1, (res.workers_lost,
                                                                                      res.rounds_repeated)
                got = (res.coef, res.seen, res.correct, res.prob_label)
                if reference is None:
                    reference = got
                assert all(np.array_equal(a, b) for a, b in zip(got, reference)), "the phases differ"
                del Xd, res
                print(f"rep {rep} {kind}: {times[kind][-1]:.2f} s", flush=True)

    load = os.getloadavg()
    print(f"\nN = {args.n:,}, d = {args.d}, m = {args.m}, t/N = {args.t_frac}, {args.workers} workers x 1 "
          f"thread, worker lost at its solver round {args.round}; {platform.processor() or platform.machine()}, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; phases bitwise equal\n")
    print("| phase | median | range |")
    print("|---|---:|---:|")
    for kind, v in times.items():
        print(f"| {kind} | {np.median(v):.2f} s | {min(v):.2f}-{max(v):.2f} s |")
    print(f"\nseconds added by the lost worker (median against median): "
          f"{np.median(times['worker lost']) - np.median(times['uninterrupted']):.2f} s")


if __name__ == "__main__":
    main()
