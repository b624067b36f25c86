"""Cost of the permutation null: a phase's seconds with and without ``null="permutation"``.

On skewed, embedding-like data (``skewed_data.py``) at the one-phase comparison's size (N=20000, d=768, C=3,
m=64, t=10000), run AFLite for ``--phases`` phases without the null and with one
permutation per phase (``n_null=1``), interleaved for ``--repeat`` rounds, and print per
phase the median seconds of both, their ratio, and the L-BFGS iterations of the observed
models (warm-started from the second phase on) and of the null's (always cold-started).
Every ``local.score_phase`` call is timed by wrapping it, so the split between the observed
and the null models is exact.  The observed results of both runs are checked to be equal.

Rerun it after a kernel or solver change; the numbers of RESULTS.md came from::

    PYTHONPATH=. python benchmarks/null_overhead.py --repeat 3 --phases 3

    PYTHONPATH=. python benchmarks/null_overhead.py --n 4000 --d 128 --m 16 --t 2000   # a quick run
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from skewed_data import make_skewed_embeddings  # noqa: E402

import aflite_fast  # noqa: E402
from aflite_fast.phase import local


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--classes", type=int, default=3)
    p.add_argument("--m", type=int, default=64, help="partitions")
    p.add_argument("--t", type=int, default=10000, help="training-set size")
    p.add_argument("--slice-size", type=int, default=1000)
    p.add_argument("--phases", type=int, default=3, help="phases per run")
    p.add_argument("--repeat", type=int, default=3, help="interleaved rounds (medians reported)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _timed_run(X, y, a, null):
    """One AFLite run; per ``score_phase`` call: (phase, is_null, seconds, mean iterations)."""
    calls, real = [], local.score_phase
    per_phase = 1 + (1 if null else 0)

    def timed(*args, **kw):
        t0 = time.perf_counter()
        res = real(*args, **kw)
        calls.append((len(calls) // per_phase, len(calls) % per_phase == 1, time.perf_counter() - t0,
                      float(res.n_iter.mean())))
        return res

    local.score_phase = timed
    try:
        result = aflite_fast.aflite(
            X, y, target_size=a.n - a.phases * a.slice_size, n_partitions=a.m, train_size=a.t,
            slice_size=a.slice_size, tau=0.0, random_state=a.seed, n_jobs=a.threads, progress=False,
            null="permutation" if null else None, n_null=1)
    finally:
        local.score_phase = real
    return result, calls


def main(argv=None):
    a = _parse(argv)
    X, y = make_skewed_embeddings(a.n, a.d, a.classes, random_state=a.seed)
    rounds = []
    for r in range(a.repeat):
        plain, plain_calls = _timed_run(X, y, a, null=False)
        with_null, null_calls = _timed_run(X, y, a, null=True)
        assert np.array_equal(plain.removed, with_null.removed), "the null changed the observed run"
        assert np.array_equal(plain.scores, with_null.scores, equal_nan=True)
        rounds.append((plain_calls, null_calls, with_null.history))
        print(f"round {r}: " + ", ".join(
            f"phase {p}: {sum(s for q, _, s, _ in plain_calls if q == p):.2f} s / "
            f"{sum(s for q, _, s, _ in null_calls if q == p):.2f} s" for p in range(a.phases)), file=sys.stderr)
    print(f"\nN={a.n}, d={a.d}, C={a.classes}, m={a.m}, t={a.t}, k={a.slice_size}, {a.threads} threads, "
          f"median of {a.repeat} interleaved rounds\n")
    print("| phase | without null (s) | with one null (s) | ratio | observed iterations | null iterations |")
    print("|---:|---:|---:|---:|---:|---:|")
    for p in range(a.phases):
        without = statistics.median(sum(s for q, _, s, _ in pc if q == p) for pc, _, _ in rounds)
        with_ = statistics.median(sum(s for q, _, s, _ in nc if q == p) for _, nc, _ in rounds)
        obs_it = [it for q, is_null, _, it in rounds[0][1] if q == p and not is_null][0]
        null_it = [it for q, is_null, _, it in rounds[0][1] if q == p and is_null][0]
        print(f"| {p} | {without:.2f} | {with_:.2f} | {with_ / without:.2f} | {obs_it:.0f} | {null_it:.0f} |")


if __name__ == "__main__":
    main()
