"""Thread-count resolution and BLAS capping around the kernel's own parallel regions."""
import os
from contextlib import contextmanager

from threadpoolctl import threadpool_limits


def effective_n_threads(n_jobs=None):
    """Resolve ``n_jobs`` (None, -1, positive or negative int) to a positive thread count.

    None uses every core available to this process (like scikit-learn's OpenMP helpers);
    negative values count back from it (-1: all, -2: all but one).
    """
    try:
        n_cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        n_cpus = os.cpu_count() or 1
    if n_jobs is None:
        return n_cpus
    if not isinstance(n_jobs, (int,)) or isinstance(n_jobs, bool) or n_jobs == 0:
        raise ValueError(f"n_jobs must be None or a non-zero integer, got {n_jobs!r}")
    if n_jobs < 0:
        return max(1, n_cpus + 1 + n_jobs)
    return n_jobs


@contextmanager
def limit_blas_threads():
    """Single-threaded BLAS while the kernel's OpenMP threads run, so two pools do not fight.

    threadpoolctl restores the previous limits on exit, also after an error.
    """
    with threadpool_limits(limits=1, user_api="blas"):
        yield
