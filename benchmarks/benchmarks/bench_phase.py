"""asv benchmarks: one AFLite phase, a full multi-phase run, and the scikit-learn baseline.

All data are skewed, embedding-like (``skewed_data.make_skewed_embeddings``): isotropic
Gaussians converge in a few solver steps and would hide the solver's cost. Data are built in
``setup_cache``/``setup``; each ``time_*`` contains only the measured call. ``track_*`` record
result quality (agreement with the one-LogisticRegression-per-partition baseline on the same
partitions) and ``peakmem_*`` the peak resident memory of the call.

Sizes: "small" runs in seconds and is the one compared with the baseline inside asv;
"reference" is the size of the one-phase comparison (``compare_phase.py``) (N=20000, d=768, C=3, m=64, t=10000), timed for
the package only (the baseline takes minutes per phase there: use ``compare_phase.py``).
"""
import inspect
import os
import tempfile

import numpy as np
from threadpoolctl import threadpool_limits

import aflite_fast

from baseline import baseline_phase, package_partition_sampler
from skewed_data import make_skewed_embeddings

SEED = 0
N_THREADS = 2
# name: (N, d, C, m, t)
SIZES = {
    "small": (4000, 128, 3, 16, 2000),
    "reference": (20000, 768, 3, 64, 10000),
}


def _call(fn, *args, **kwargs):
    """Call fn, dropping keyword arguments it does not take (e.g. ``progress``)."""
    params = inspect.signature(fn).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **kwargs)


def _data(size):
    n, d, c, _, _ = SIZES[size]
    return make_skewed_embeddings(n, d, c, random_state=SEED)


def _predictability(X, y, size):
    _, _, _, m, t = SIZES[size]
    return _call(aflite_fast.predictability, X, y, n_partitions=m, train_size=t,
                 random_state=SEED, n_jobs=N_THREADS, progress=False)


class Phase:
    """One filtering phase (``aflite_fast.predictability``) on all rows."""

    params = [list(SIZES)]
    param_names = ["size"]
    number = 1
    repeat = (1, 3, 600.0)
    timeout = 900

    def setup_cache(self):
        return {size: _data(size) for size in SIZES}

    def setup(self, cache, size):
        self.X, self.y = cache[size]
        # compile/warm any lazily built code (Numba helpers) outside the measurement
        small_n = 600
        _call(aflite_fast.predictability, self.X[:small_n], self.y[:small_n], n_partitions=2,
              train_size=300, random_state=SEED, n_jobs=N_THREADS, progress=False)

    def time_predictability(self, cache, size):
        _predictability(self.X, self.y, size)

    def peakmem_predictability(self, cache, size):
        _predictability(self.X, self.y, size)


class PhaseMemmap:
    """The same phase on a read-only ``np.memmap`` of a .npy file (float32 and float16)."""

    params = [["small"], ["float32", "float16"]]
    param_names = ["size", "dtype"]
    number = 1
    repeat = (1, 3, 600.0)
    timeout = 900

    def setup(self, size, dtype):
        X, self.y = _data(size)
        self.tmp = tempfile.TemporaryDirectory()
        path = os.path.join(self.tmp.name, "X.npy")
        np.save(path, X.astype(dtype))
        self.X = np.load(path, mmap_mode="r")

    def teardown(self, size, dtype):
        del self.X
        self.tmp.cleanup()

    def time_predictability_memmap(self, size, dtype):
        _predictability(self.X, self.y, size)

    def peakmem_predictability_memmap(self, size, dtype):
        _predictability(self.X, self.y, size)


class BaselinePhase:
    """The plain implementation: one sklearn LogisticRegression per partition, Python loop."""

    params = [["small"]]
    param_names = ["size"]
    number = 1
    repeat = (1, 3, 600.0)
    timeout = 900

    def setup(self, size):
        self.X, self.y = _data(size)
        _, _, _, self.m, self.t = SIZES[size]
        self.sampler = package_partition_sampler(SEED, self.m)
        self.active = np.arange(self.X.shape[0])

    def time_baseline_phase(self, size):
        with threadpool_limits(limits=N_THREADS):
            baseline_phase(self.X, self.y, self.active, self.sampler, n_partitions=self.m,
                           train_size=self.t)


class PhaseAgreement:
    """Result quality of one phase against the baseline on the same partitions."""

    params = [["small"]]
    param_names = ["size"]
    timeout = 900

    def setup_cache(self):
        out = {}
        for size in self.params[0]:
            X, y = _data(size)
            _, _, _, m, t = SIZES[size]
            ours = _predictability(X, y, size)
            with threadpool_limits(limits=N_THREADS):
                correct, seen, _ = baseline_phase(
                    X, y, np.arange(X.shape[0]), package_partition_sampler(SEED, m),
                    n_partitions=m, train_size=t,
                )
            ours_correct = np.asarray(ours.correct)
            ours_seen = np.asarray(ours.seen)
            s_ours = np.where(ours_seen > 0, ours_correct / np.maximum(ours_seen, 1), 0.0)
            s_base = np.where(seen > 0, correct / np.maximum(seen, 1), 0.0)
            out[size] = dict(
                seen_equal=float(np.mean(ours_seen == seen)),
                correct_agree=float(np.mean(ours_correct == correct)),
                max_score_diff=float(np.max(np.abs(s_ours - s_base))),
            )
        return out

    def track_seen_equal_share(self, cache, size):
        """Share of rows held out equally often (1.0 when the partitions are the same)."""
        return cache[size]["seen_equal"]

    def track_correct_count_agreement(self, cache, size):
        """Share of rows whose held-out correct-count equals the baseline's."""
        return cache[size]["correct_agree"]

    def track_max_score_difference(self, cache, size):
        """max |score - baseline score| over rows."""
        return cache[size]["max_score_diff"]


class FullRun:
    """A full multi-phase ``aflite_fast.aflite`` run (warm starts between phases)."""

    params = [["small"]]
    param_names = ["size"]
    number = 1
    repeat = (1, 3, 600.0)
    timeout = 900

    def setup_cache(self):
        return {size: _data(size) for size in self.params[0]}

    def _run(self, cache, size):
        X, y = cache[size]
        _, _, _, m, t = SIZES[size]
        n = X.shape[0]
        return _call(aflite_fast.aflite, X, y, target_size=(6 * n) // 10, n_partitions=m,
                     train_size=t, slice_size=n // 20, tau=0.75, random_state=SEED,
                     n_jobs=N_THREADS, progress=False)

    def time_aflite(self, cache, size):
        self._run(cache, size)

    def peakmem_aflite(self, cache, size):
        self._run(cache, size)

    def track_phases(self, cache, size):
        """Number of phases the run took."""
        return len(self._run(cache, size).history)

    def track_rows_kept(self, cache, size):
        return len(self._run(cache, size).keep)


class PhaseScale:
    """One phase at large-benchmark proportions: t/N = 0.5 and 0.1 at N=100000,
    d=768, m=64 (``benchmarks/compare_scale.py`` adds N=200000, the sklearn loop and the
    floor).  ``track_*`` give the solver's mean iterations per model."""

    params = [[0.5, 0.1]]
    param_names = ["share"]
    number = 1
    repeat = (1, 3, 900.0)
    timeout = 1800

    def setup_cache(self):
        return make_skewed_embeddings(100000, 768, 3, random_state=SEED)

    def setup(self, cache, share):
        self.X, self.y = cache
        self.t = int(share * self.X.shape[0])
        _call(aflite_fast.predictability, self.X[:600], self.y[:600], n_partitions=2,
              train_size=300, random_state=SEED, n_jobs=N_THREADS, progress=False)

    def _phase(self):
        return _call(aflite_fast.predictability, self.X, self.y, n_partitions=64, train_size=self.t,
                     random_state=SEED, n_jobs=N_THREADS, progress=False)

    def time_phase(self, cache, share):
        self._phase()

    def track_mean_iterations(self, cache, share):
        return float(np.mean(self._phase().n_iter))
