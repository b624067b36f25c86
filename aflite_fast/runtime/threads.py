"""Thread-count resolution and BLAS capping around the kernel's own parallel regions."""
import os
import sys
from contextlib import contextmanager

from threadpoolctl import ThreadpoolController


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


_controller = None
_controller_modules = -1


def _thread_pools():
    """A threadpoolctl controller of the thread pools loaded in this process.

    Finding the pools walks every loaded shared library (milliseconds in a process that has
    imported the scientific stack, and a phase limits its pools several times), so the
    controller is kept, and found again only when modules were imported since: an import is
    how another BLAS would be loaded.
    """
    global _controller, _controller_modules
    n_modules = len(sys.modules)
    if _controller is None or n_modules != _controller_modules:
        _controller = ThreadpoolController()
        _controller_modules = n_modules
    return _controller


@contextmanager
def limit_threads(user_api="blas"):
    """One thread in the pools of ``user_api`` ("blas", "openmp", or None: every pool) while
    the block runs; the previous limits come back on exit, also after an error."""
    with _thread_pools().limit(limits=1, user_api=user_api):
        yield


def limit_blas_threads():
    """Single-threaded BLAS while the kernel's OpenMP threads run, so two pools do not fight."""
    return limit_threads("blas")


#: Rows below which a row-wise copy runs on one thread (threads would cost more than they save).
MIN_ROWS_PER_THREAD = 4096


def for_row_ranges(fn, n_rows, n_threads):
    """Call ``fn(start, stop)`` on contiguous ranges that cover ``range(n_rows)``, one range a
    thread, and wait for all of them (the first error is raised).

    For NumPy copies and element-wise operations, which release the GIL: each range writes
    its own rows, so the result is the same bits whatever the number of threads.
    """
    n_rows = int(n_rows)
    k = max(1, min(int(n_threads), n_rows // MIN_ROWS_PER_THREAD))
    if k == 1:
        fn(0, n_rows)
        return
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415 - only on this path

    bounds = [n_rows * i // k for i in range(k + 1)]
    with ThreadPoolExecutor(max_workers=k) as pool:
        futures = [pool.submit(fn, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        for f in futures:
            f.result()
