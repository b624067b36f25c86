"""What a new process loads for the filtering path (its fixed cost; timed in benchmarks/first_call.py).

a. ``import aflite_fast`` and a first ``predictability`` (and ``aflite``) on tiny data load
   neither scikit-learn, nor SciPy, nor Numba: the row helpers are compiled at build time, the
   small preconditioner inverts with NumPy, sparse input is recognised without importing SciPy.
b. The demo's table (AFLite, then cross-validated accuracy on the package's kernel) loads no
   scikit-learn either.
c. ``ConvergenceWarning`` stays scikit-learn's class: ``solver_status.ConvergenceWarning`` is
   it, and a model that did not converge warns with it.
"""
import json
import subprocess
import sys
import warnings

import numpy as np
import pytest

HEAVY = ("sklearn", "scipy", "numba")


def _loaded_after(code, child_process):
    script = code + (
        "\nimport sys, json\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules if m.split('.')[0] in {HEAVY!r}}})))\n")
    # the child imports the same aflite_fast as the tests (installed, or the source tree built in place)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, **child_process)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_first_predictability_and_aflite_load_no_sklearn_scipy_or_numba(child_process):
    loaded = _loaded_after(
        "import numpy as np\n"
        "import aflite_fast\n"
        "rng = np.random.default_rng(0)\n"
        "X = rng.standard_normal((300, 8)).astype(np.float32)\n"
        "y = rng.integers(0, 3, 300)\n"
        "r = aflite_fast.predictability(X, y, n_partitions=4, train_size=100, random_state=0)\n"
        "assert np.isfinite(r.scores).sum() > 250\n"
        "aflite_fast.aflite(X, y, target_size=200, n_partitions=4, train_size=100, slice_size=20,\n"
        "                   tau=0.5, random_state=0, progress=False)\n", child_process)
    assert loaded == []


def test_demo_table_loads_no_sklearn(child_process):
    loaded = _loaded_after("from aflite_fast.cli._demo import demo_table\n"
                           "demo_table(n_samples=400, seed=0, progress=False)\n", child_process)
    assert "sklearn" not in loaded and "numba" not in loaded


def test_convergence_warning_is_sklearns_class():
    from sklearn.exceptions import ConvergenceWarning

    from aflite_fast.core import solver_status

    assert solver_status.ConvergenceWarning is ConvergenceWarning
    with pytest.raises(AttributeError):
        solver_status.NoSuchName  # noqa: B018
    with pytest.warns(ConvergenceWarning, match=solver_status.NOT_CONVERGED_MESSAGE):
        solver_status.warn_not_converged({"converged": 1, "max_iter": 2})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message=solver_status.NOT_CONVERGED_MESSAGE)
        solver_status.warn_not_converged({"converged": 1, "max_iter": 2})  # what the CLI silences


def test_sparse_input_is_recognised():
    scipy_sparse = pytest.importorskip("scipy.sparse")
    from aflite_fast.io.inputs import open_embeddings

    X = open_embeddings(scipy_sparse.csr_matrix(np.eye(3, dtype=np.float32)))
    assert scipy_sparse.issparse(X) and X.format == "csr"
