"""evaluate_filter with sparse ``features=``: N rows, a hashed n-gram matrix of d2 columns.

X: dense N x 64 float32 rows; ``features``: hashed 1-2-gram counts of 2^log2d columns
(``benchmarks/sparse_phase.py``'s generator, about 30 non-zeros a row), the same labels; keep:
a random 70% of the rows.  Times :func:`aflite_fast.evaluate_filter` (cv=5, n_random=5, the
defaults) end to end, ``--repeat`` runs; prints the median, and the same call with the features
densified when ``--dense`` (its float32 matrix: N x d2 x 4 bytes).

Example::

    python benchmarks/sparse_evaluate.py --n 10000 --d2 100000 --repeat 3
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sparse_phase import hashed_ngrams  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--d2", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dense", action="store_true")
    args = ap.parse_args()
    import aflite_fast

    log2d = int(np.ceil(np.log2(args.d2)))
    F, y = hashed_ngrams(args.n, log2d, 30, 3)
    F = F[:, :args.d2].tocsr()  # exactly d2 columns
    rng = np.random.default_rng(1)
    X = (rng.normal(size=(args.n, 64)) + y[:, None] * 0.2).astype(np.float32)
    keep = np.sort(rng.choice(args.n, int(0.7 * args.n), replace=False))
    print(f"# {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} at start; N={args.n}, "
          f"features {F.shape[1]} columns, {F.nnz / args.n:.1f} non-zeros a row", flush=True)
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        ev = aflite_fast.evaluate_filter(X, y, keep, features=F, random_state=0, n_jobs=args.threads)
        times.append(time.perf_counter() - t0)
        print(f"  sparse features: {times[-1]:.2f} s (load {os.getloadavg()[0]:.2f}); features kept/random "
              f"balanced accuracy {ev.features.kept_balanced_accuracy:.3f}/{ev.features.random_balanced_accuracy:.3f}",
              flush=True)
    print(f"median {statistics.median(times):.2f} s over {args.repeat} runs; load average "
          f"{os.getloadavg()[0]:.2f} at the end")
    if args.dense:
        D = F.toarray().astype(np.float32)
        t0 = time.perf_counter()
        aflite_fast.evaluate_filter(X, y, keep, features=D, random_state=0, n_jobs=args.threads)
        print(f"dense features ({D.nbytes / 1e9:.1f} GB): {time.perf_counter() - t0:.2f} s")
    print("command: python " + " ".join(sys.argv))


if __name__ == "__main__":
    main()
