"""What the reduction tree costs the local engine: one phase's training with X's rows in 64
reduction groups (the default), 32, and one group (the sums of the super-blocks added in order,
as before the tree), on the same data, alternating, median of the repeats.

The tree adds, per solver round and model, one copy and one addition of the model's sums per
group (``afl_member_eval_tree``); the member pass itself is unchanged.  Seconds are training
without the reads of X and without the preconditioner.

With ``--candidates K`` (K > 1) X is multiple choice, N items x K candidates
(``multiple_choice_speed.make_items``), whose reduction groups are whole items.

Examples (the runs recorded in benchmarks/RESULTS.md, "Data-parallel Dask" and "Multiple
choice on the Dask backend")::

    python benchmarks/studies/reduction_tree_cost.py --n 200000 --d 768 --m 64 --repeats 4
    python benchmarks/studies/reduction_tree_cost.py --n 50000 --candidates 4 --d 768 --m 64 --repeats 4
"""
import argparse
import os
import sys
import time

import numpy as np

# benchmarks/: skewed_data, multiple_choice_speed
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from skewed_data import make_skewed_embeddings  # noqa: E402

from aflite_fast.phase import gather
from aflite_fast.phase import local
from aflite_fast.phase import partitions
from aflite_fast.core import layout
from aflite_fast.io.inputs import encode_labels, scan_rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=200000)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--t-frac", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--candidates", type=int, default=1, help="K > 1: multiple-choice X (N items x K)")
    args = ap.parse_args(argv)
    if args.candidates > 1:
        from multiple_choice_speed import make_items
        X, y = make_items(args.n, args.candidates, args.d, 0)
        codes, n_classes = y.astype(np.int32), args.candidates
    else:
        X, y = make_skewed_embeddings(args.n, args.d, 3, random_state=0)
        codes, n_classes = encode_labels(y).codes, 3
    active = np.arange(args.n, dtype=np.int64)
    center = scan_rows(X.reshape(-1, args.d)).astype(np.float32)
    tp = partitions.partition_train_positions(0, 0, args.n, int(args.t_frac * args.n), args.m)
    ws = gather.Workspace()
    local.score_phase(X, codes, active, center, tp, n_classes=n_classes, n_threads=args.threads, workspace=ws)
    seconds = {}
    print(f"N={args.n}{f' items x K={args.candidates}' if args.candidates > 1 else ''} d={args.d} m={args.m} "
          f"t/N={args.t_frac} threads={args.threads}; "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load {os.getloadavg()[0]:.2f}")
    for _ in range(args.repeats):
        for leaves in (64, 32, 1):
            layout.REDUCE_LEAVES = leaves
            r = local.score_phase(X, codes, active, center, tp, n_classes=n_classes, n_threads=args.threads,
                                   workspace=ws)
            seconds.setdefault(leaves, []).append(
                r.seconds["train"] - r.seconds["preconditioner"] - r.seconds["read_train"])
    print(f"load after {os.getloadavg()[0]:.2f}")
    print("| reduction groups | training (median) | repeats |")
    print("|---:|---:|---|")
    for leaves, v in seconds.items():
        print(f"| {leaves} | {np.median(v):.3f} s | {', '.join(f'{x:.3f}' for x in v)} |")


if __name__ == "__main__":
    main()
