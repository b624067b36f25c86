"""Shared fixtures and data helpers for the aflite_fast tests.

a. ``seed``: one integer behind every random draw of a test (override with the environment
   variable AFLITE_FAST_TEST_SEED to rerun the suite on other data).
b. ``make_problem`` (the function ``skewed_problem``): random classification problems whose feature variances are skewed like
   real embeddings (power-law spread plus a shared offset), not isotropic Gaussians, which
   converge in a few solver steps and hide solver bugs; labels overlap, so the L2 optimum is
   well defined and not separable.
c. ``readonly_memmap``: writes an array to ``tmp_path`` and reopens it as a read-only
   ``np.memmap``, the first-class out-of-core input.
d. ``small_reduction_groups``: reduction groups of 512 rows (``layout.REDUCE_MIN_ROWS``)
   instead of the default 8192, so that the small X of a test still forms several groups and
   the tests of sums split among processes (Dask, the reduction tree) split them for real.
   Workers take the group size from the client, so the setting reaches them.
e. OpenMP threads wait passively between parallel regions during the tests (unless the
   environment says otherwise).  On this shared 2-core machine under load, libgomp's default
   spin-waiting made every 2-thread kernel call 10-60x slower than the 1-thread one (the
   kernel opens several short parallel regions per L-BFGS round), which would make the
   thread-count tests dominate the suite.  Results do not depend on this setting.
"""
import os

# must be set before libgomp is loaded, i.e. before aflite_fast or scikit-learn is imported
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from aflite_fast.core import layout
from aflite_fast.phase import local


@pytest.fixture
def small_reduction_groups(monkeypatch):
    """Reduction groups of 512 rows for this test (see the module docstring, d)."""
    monkeypatch.setattr(layout, "REDUCE_MIN_ROWS", 512)


@pytest.fixture
def seed():
    """Seed for every random draw in a test; override with AFLITE_FAST_TEST_SEED."""
    return int(os.environ.get("AFLITE_FAST_TEST_SEED", "0"))


def skewed_problem(rng, n, d, n_classes, *, weights=None, signal=1.0, offset=2.0, spread=2.0,
                 dtype=np.float32):
    """Random classification problem with skewed feature variances.

    Parameters
    ----------
    rng : numpy.random.Generator
    n, d, n_classes : int
        Rows, features and classes.
    weights : sequence of float, optional
        Class proportions (balanced when omitted).  Every class gets at least 3 rows.
    signal : float
        Scale of the class means relative to the noise; small values overlap classes more.
    offset : float
        Shared offset added to every feature (embeddings are rarely centered).
    spread : float
        Feature k (from 1) has standard deviation k ** (-spread / 2): with spread=2 the
        variances fall like 1 / k, a ratio of d between the largest and the smallest.
    dtype : numpy dtype of X

    Returns
    -------
    X : ndarray (n, d) of ``dtype``
    y : ndarray (n,) int64 labels in [0, n_classes)
    """
    if weights is None:
        weights = np.full(n_classes, 1.0 / n_classes)
    weights = np.asarray(weights, dtype=np.float64)
    weights = weights / weights.sum()
    counts = np.maximum(3, np.floor(weights * n).astype(np.int64))
    counts[np.argmax(counts)] += n - counts.sum()
    y = rng.permutation(np.repeat(np.arange(n_classes), counts))
    scale = (1.0 + np.arange(d)) ** (-spread / 2.0)
    means = signal * rng.standard_normal((n_classes, d))
    X = (means[y] + rng.standard_normal((n, d))) * scale + offset * rng.uniform(0.5, 1.5, size=d)
    return X.astype(dtype), y.astype(np.int64)


@pytest.fixture
def child_process():
    """``subprocess`` keyword arguments (``env``, ``cwd``) for a Python child that imports the
    same aflite_fast as the tests: the installed package in CI (``pip install .``, source tree
    unbuilt), the source tree after an in-place build.  The child gets this process's import
    path and starts in the tests folder, never in the repository root, whose unbuilt package
    ``python -c`` would otherwise import first."""
    import sys

    return dict(env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                cwd=os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def make_problem():
    """The :func:`skewed_problem` helper, as a fixture (a plain ``from conftest import`` could
    pick up the repository root's conftest.py instead)."""
    return skewed_problem


@pytest.fixture
def readonly_memmap(tmp_path):
    """Factory: ``readonly_memmap(array)`` -> the same data as a read-only ``np.memmap``."""
    counter = [0]

    def _make(array):
        counter[0] += 1
        path = tmp_path / f"array{counter[0]}.npy"
        np.save(path, np.ascontiguousarray(array))
        mm = np.load(path, mmap_mode="r")
        assert isinstance(mm, np.memmap) and not mm.flags.writeable
        return mm

    return _make


@pytest.fixture
def output_files():
    """Factory: ``output_files(dir)`` -> sorted names a command wrote into ``dir``.

    Also checks the output-set bookkeeping (``aflite_fast.io.atomic``): the hidden state folder
    holds only the lock, the ``current`` link and the one set it points to (no staging left),
    and every name is a link to that set.
    """
    from aflite_fast.io.atomic import STATE_DIR

    def _list(path):
        path = os.fspath(path)
        names = sorted(p for p in os.listdir(path) if p != STATE_DIR)
        state = os.path.join(path, STATE_DIR)
        current = os.readlink(os.path.join(state, "current"))
        assert sorted(os.listdir(state)) == sorted(["lock", "current", current])
        assert sorted(os.listdir(os.path.join(state, current))) == names
        for name in names:
            assert os.readlink(os.path.join(path, name)) == os.path.join(STATE_DIR, "current", name)
        return names

    return _list


@pytest.fixture
def record_phases(monkeypatch):
    """Wrap ``local.score_phase`` (for this test): returns the list that receives
    ``(active, train_pos, seen)`` of every call."""

    real = local.score_phase
    calls = []

    def score_phase(X, codes, active, center, train_pos, **kw):
        res = real(X, codes, active, center, train_pos, **kw)
        calls.append((active.copy(), train_pos.copy(), res.seen.copy()))
        return res

    monkeypatch.setattr(local, "score_phase", score_phase)
    return calls


@pytest.fixture
def interrupted_run(monkeypatch):
    """``interrupted_run(X, y, path, phase, **run)``: ``aflite(X, y, checkpoint=path, **run)``
    stopped by a KeyboardInterrupt as it starts ``phase`` (the checkpoint holds the phases
    before): the first scoring after the checkpoint saved ``phase`` phases is interrupted
    (counting saves, not scorings: phase 0 also scores the chance check's permutations)."""
    from aflite_fast import aflite
    from aflite_fast.filtering import checkpoint

    def run_until(X, y, path, phase, **run):
        real_score, real_save = local.score_phase, checkpoint.Checkpoint.save
        saved = []

        def interrupt(*args, **kw):
            if len(saved) == phase:
                raise KeyboardInterrupt
            return real_score(*args, **kw)

        def save(self, state):
            real_save(self, state)
            saved.append(1)

        with monkeypatch.context() as m:
            m.setattr(local, "score_phase", interrupt)
            m.setattr(checkpoint.Checkpoint, "save", save)
            with pytest.raises(KeyboardInterrupt):
                aflite(X, y, checkpoint=path, **run)

    return run_until
