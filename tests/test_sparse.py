"""Sparse (CSR) X everywhere dense X goes (docs/sparse.md).

a. The sparse phase's results do not depend on the thread count or on the groups of models that
   ``max_memory`` makes (bit for bit), and a budget too small for one model is refused.
b. Dense and sparse forms of the same X agree where both fit tightly: kept sets equal, scores
   within 1/m, probabilities close.
c. Every entry point takes sparse X: aflite, predictability, oof_predict_proba, evaluate_filter
   (X and features=), RobustLogisticRegression, AFLite.fit_resample, filter_dataset.
d. One clear error for each defect of a sparse matrix; CSC and COO converted once with a warning.
e. ``FILE.npz`` from ``scipy.sparse.save_npz`` on the command line: keep.npy equal to the API's;
   a bad file is one line and exit 2.
"""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from aflite_fast import (
    AFLite,
    RobustLogisticRegression,
    aflite,
    evaluate_filter,
    oof_predict_proba,
    predictability,
)
from aflite_fast.core.solver import SolverOptions
from aflite_fast.core.sparse_solver import model_bytes
from aflite_fast.io.sparse import SparseFormatWarning, check_sparse
from aflite_fast.phase.partitions import seed_entropy
from aflite_fast.phase.sparse_local import score_phase_sparse


def counts_problem(n=1200, d=300, n_classes=3, density=0.04, seed=0, signal=2.0):
    """Sparse non-negative counts and labels planted by a linear model on them."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=rng, format="csr", dtype=np.float64)
    X.data = np.ceil(X.data * 3).astype(np.float64)
    w = rng.normal(scale=signal, size=(d, n_classes))
    y = np.argmax(X @ w + rng.gumbel(size=(n, n_classes)), axis=1)
    return X.astype(np.float32), y


def draw_partitions(n, m, t, seed=0):
    from aflite_fast.phase.partitions import partition_train_positions

    return partition_train_positions(seed_entropy(seed), 0, n, t, m)


def phase(X, y, train_pos, **kw):
    kw.setdefault("options", SolverOptions(tol=1e-5))
    return score_phase_sparse(X, y.astype(np.int32), np.arange(X.shape[0], dtype=np.int64), None, train_pos,
                              n_classes=int(y.max()) + 1, **kw)


def assert_same_phase(a, b):
    for name in ("coef", "n_iter", "status", "seen", "correct", "prob_label"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


# a. ------------------------------------------------------------------------------------------

def phase_budget(X, train_pos, models, loss="ce", with_proba=False):
    """A max_memory holding the phase's fixed bytes and ``models`` models at a time."""
    from aflite_fast.core.sparse_solver import (
        CSRRows,
        local_width,
        model_column_sets,
        phase_solver,
    )
    from aflite_fast.phase.sparse_local import phase_fixed_bytes

    rows = CSRRows(X)
    lists = [tp[tp >= 0] for tp in train_pos]
    columns = model_column_sets(rows, lists)
    width = local_width(columns)
    solver = phase_solver(loss, None, 3)
    nnz = np.diff(X.indptr)
    fixed = phase_fixed_bytes(rows, len(lists), X.shape[1], 3, 2, with_proba, width, solver,
                              max(lst.size for lst in lists), sum(c.size for c in columns),
                              max(int(nnz[lst].sum()) for lst in lists))
    return fixed + models * model_bytes(X.shape[1], 3, 10, width - 1, solver)


@pytest.mark.parametrize("loss", ["ce", "gce"])
def test_threads_and_memory_groups_change_no_bit(loss):
    # "ce": Newton-CG, "gce": L-BFGS (the sparse solvers of each loss)
    X, y = counts_problem()
    train_pos = draw_partitions(X.shape[0], 8, 600)
    one = phase(X, y, train_pos, n_threads=1, loss=loss)
    two = phase(X, y, train_pos, n_threads=2, loss=loss)
    assert one.n_blocks == 1
    assert_same_phase(one, two)
    # a budget holding the rows and three models at a time: three groups
    grouped = phase(X, y, train_pos, n_threads=2, loss=loss, max_memory=phase_budget(X, train_pos, 3, loss))
    assert grouped.n_blocks == 3
    assert_same_phase(one, grouped)
    proba_one, proba_grouped = np.zeros((X.shape[0], 3)), np.zeros((X.shape[0], 3))
    phase(X, y, train_pos, proba_sum=proba_one, loss=loss)
    phase(X, y, train_pos, proba_sum=proba_grouped, loss=loss, n_threads=2,
          max_memory=phase_budget(X, train_pos, 3, loss, with_proba=True))
    np.testing.assert_array_equal(proba_one, proba_grouped)


def test_a_warm_start_is_paid_for_beside_the_phases_copy():
    # the caller's starting point and the phase's copy of it are both held while the phase
    # trains: a warm-started phase pays 8 (d + 1) C bytes a model more before its groups
    X, y = counts_problem()
    train_pos = draw_partitions(X.shape[0], 8, 600)
    m, D = train_pos.shape[0], X.shape[1] + 1
    budget = phase_budget(X, train_pos, 3) + 8 * m * D * 3
    cold = phase(X, y, train_pos, n_threads=2, max_memory=budget)
    warm = np.ascontiguousarray(cold.coef)
    grouped = phase(X, y, train_pos, n_threads=2, max_memory=budget, warm_coef=warm)
    alone = phase(X, y, train_pos, n_threads=2, warm_coef=warm)
    assert cold.n_blocks < 3 and grouped.n_blocks == 3
    assert_same_phase(alone, grouped)


def test_budget_too_small_for_one_model_is_refused():
    X, y = counts_problem(n=300, d=50)
    train_pos = draw_partitions(300, 4, 150)
    with pytest.raises(MemoryError, match="max_memory=.*too small for one model of a sparse phase"):
        phase(X, y, train_pos, n_threads=2, max_memory=phase_budget(X, train_pos, 1) - 1)
    assert phase(X, y, train_pos, n_threads=2, max_memory=phase_budget(X, train_pos, 1)).n_blocks == 4


@pytest.mark.parametrize("solver", ["newton", "lbfgs"])
def test_groups_follow_the_memory_formula(solver):
    # the budget pays the rows, per-row arrays, coefficients and each thread's solver scratch,
    # then per model of a group: Newton-CG 8 (k + 1) C bytes (its local weights; its solver
    # state is per thread), L-BFGS (88 + 16 h) (k + 1) C (k: the most columns a model uses),
    # and its full-width arrays
    from aflite_fast.core.sparse_solver import (
        CSRRows,
        local_width,
        model_column_sets,
        newton_thread_bytes,
    )
    from aflite_fast.phase.sparse_local import phase_fixed_bytes

    X, y = counts_problem(n=400, d=100, density=0.01)
    train_pos = draw_partitions(400, 8, 200)
    rows = CSRRows(X)
    columns = model_column_sets(rows, [tp for tp in train_pos])
    width = local_width(columns)
    assert width - 1 < 100  # models use fewer columns than X has: their vectors are shorter
    entries = sum(c.size for c in columns)
    z = max(int(np.diff(X.indptr)[tp].sum()) for tp in train_pos)
    fixed = phase_fixed_bytes(rows, 8, 100, 3, 1, width=width, solver=solver, max_rows=200, n_column_entries=entries,
                              max_nonzeros=z)
    per_model = model_bytes(100, 3, 10, width - 1, solver)
    if solver == "newton":
        assert per_model == 8 * width * 3 + 12 * 101 * 3
        assert newton_thread_bytes(100, 3, width - 1, 200, z) == (80 * width * 3 + 24 * 200 * 3 + 8 * z + 8 * width
                                                                  + 4 * 200 + 4 * 100)
        assert fixed == phase_fixed_bytes(rows, 8, 100, 3, 0, solver=solver) + 8 * entries + newton_thread_bytes(
            100, 3, width - 1, 200, z)
    else:
        assert per_model == (88 + 16 * 10) * width * 3 + 12 * 101 * 3 + 4 * 100
    loss = "ce" if solver == "newton" else "gce"
    for k, groups in ((1, 8), (3, 3), (4, 2), (8, 1)):
        res = phase(X, y, train_pos, n_threads=1, loss=loss, max_memory=fixed + k * per_model)
        assert res.n_blocks == groups


# b. ------------------------------------------------------------------------------------------

def test_dense_and_sparse_forms_agree():
    X, y = counts_problem(n=900, d=40, density=0.2, signal=1.5, seed=3)
    m = 16
    kw = dict(target_size=600, n_partitions=m, train_size=0.5, slice_size=100, random_state=0, tol=1e-8,
              max_iter=5000, progress=False, n_jobs=1)
    dense = aflite(X.toarray(), y, **kw)
    sparse = aflite(X, y, **kw)
    np.testing.assert_array_equal(np.sort(dense.keep), np.sort(sparse.keep))
    both = ~np.isnan(dense.scores) & ~np.isnan(sparse.scores)
    assert both.sum() > 500
    assert np.abs(dense.scores[both] - sparse.scores[both]).max() <= 1.0 / m
    pd = predictability(X.toarray(), y, n_partitions=m, train_size=0.5, random_state=0, tol=1e-8, max_iter=5000)
    ps = predictability(X, y, n_partitions=m, train_size=0.5, random_state=0, tol=1e-8, max_iter=5000)
    # the models agree to the solver's precision: summed held-out probabilities within 1e-5 a
    # model; a vote can differ only where a model's two top classes are that close (one row here)
    assert np.abs(pd.prob_label - ps.prob_label).max() <= 1e-5 * m
    assert np.abs(pd.correct - ps.correct).max() <= 1 and np.mean(pd.correct != ps.correct) <= 0.005
    np.testing.assert_allclose(ps.prob_label, pd.prob_label, atol=1e-3)


@pytest.mark.parametrize("loss", ["gce", "gce_trunc", "sce", "mae"])
def test_noise_robust_losses_reach_the_dense_optimum(loss):
    # the sparse member pass computes the dense objective: the dense model (uncentred) is a
    # stationary point of the sparse solver, which stays there; for the convex-like GCE a cold
    # start also lands on it (SCE, MAE and truncated GCE have several stationary points)
    from aflite_fast.core import sparse_solver

    X, y = counts_problem(n=500, d=30, density=0.25, signal=1.5, seed=2)
    dense = RobustLogisticRegression(loss=loss, tol=1e-7, max_iter=5000).fit(X.toarray(), y)
    start = dense._coef_full[None].copy()
    assert np.abs(start.sum(axis=-1)).max() < 1e-9  # the estimator's zero-mean (symmetric) weights
    coef, info = sparse_solver.train_sparse_models(
        sparse_solver.CSRRows(X), y.astype(np.int32), [np.arange(500)], 3, C=1.0, loss=dense._loss_spec(3),
        coef=start.copy(), options=SolverOptions(tol=1e-7, max_iter=5000))
    assert np.abs(coef - start).max() < 1e-3
    if loss == "gce":
        sparse = RobustLogisticRegression(loss=loss, tol=1e-7, max_iter=5000).fit(X, y)
        np.testing.assert_allclose(sparse.predict_proba(X), dense.predict_proba(X.toarray()), atol=2e-3)


# c. ------------------------------------------------------------------------------------------

def test_entry_points_take_sparse_X():
    X, y = counts_problem(n=600, d=60, density=0.15, seed=5)
    Xd = X.toarray()
    oof_d = oof_predict_proba(Xd, y, cv=3, random_state=0, tol=1e-7)
    oof_s = oof_predict_proba(X, y, cv=3, random_state=0, tol=1e-7)
    np.testing.assert_allclose(oof_s, oof_d, atol=2e-3)
    est_d = RobustLogisticRegression(tol=1e-7).fit(Xd, y)
    est_s = RobustLogisticRegression(tol=1e-7).fit(X, y)
    np.testing.assert_allclose(est_s.predict_proba(X), est_d.predict_proba(Xd), atol=2e-3)
    np.testing.assert_allclose(est_s.coef_, est_d.coef_, atol=2e-2)
    np.testing.assert_allclose(est_s.decision_function(X), est_d.decision_function(Xd), atol=2e-2)
    kept, y_kept = AFLite(target_size=400, n_partitions=8, train_size=0.5, slice_size=100,
                          random_state=0).fit_resample(X, y)
    assert sp.issparse(kept) and kept.shape == (400, 60) and y_kept.shape == (400,)
    keep = np.arange(450)
    ev_s = evaluate_filter(Xd, y, keep, features=X, random_state=0, n_random=2, cv=3)
    ev_d = evaluate_filter(Xd, y, keep, features=Xd, random_state=0, n_random=2, cv=3)
    assert ev_s.features.kept_balanced_accuracy == pytest.approx(ev_d.features.kept_balanced_accuracy, abs=0.02)
    ev_x = evaluate_filter(X, y, keep, random_state=0, n_random=2, cv=3)
    assert ev_x.kept_balanced_accuracy == pytest.approx(ev_d.kept_balanced_accuracy, abs=0.02)


def test_filter_dataset_takes_sparse_features():
    datasets = pytest.importorskip("datasets")
    from aflite_fast.filtering.hf_datasets import filter_dataset

    X, y = counts_problem(n=500, d=40, density=0.2, seed=7)
    ds = datasets.Dataset.from_dict({"label": y.tolist()})
    kw = dict(target_size=300, n_partitions=8, train_size=0.5, slice_size=100, random_state=0, progress=False)
    kept, res, card = filter_dataset(ds, X, "label", card=True, **kw)
    assert len(kept) == 300
    np.testing.assert_array_equal(res.keep, aflite(X, y, **kw).keep)
    assert "sparse matrix 500 x 40" in card
    with pytest.raises(ValueError, match="sparse features have 499 rows, the dataset 500"):
        filter_dataset(ds, X[:-1], "label", **kw)


def test_dask_backend_refuses_sparse_X():
    from aflite_fast.phase.backends import DaskBackend

    X, _ = counts_problem(n=50, d=10)
    with pytest.raises(ValueError, match="backend='dask' does not take sparse X"):
        DaskBackend(client=None).open(X)


# d. ------------------------------------------------------------------------------------------

def _csr(data, indices, indptr, shape, dtype=np.float32):
    # built without scipy's own checks, as a malformed matrix arrives
    X = sp.csr_matrix(shape, dtype=dtype)
    X.data, X.indices, X.indptr = (np.asarray(data, dtype), np.asarray(indices, np.int32),
                                   np.asarray(indptr, np.int32))
    return X


@pytest.mark.parametrize("case, message", [
    ("nan", r"X has a NaN or infinite value \(row 1, column 2\)"),
    ("inf", r"X has a NaN or infinite value \(row 0, column 0\)"),
    ("negative", r"X has a negative column index \(-1\)"),
    ("out_of_range", r"X has a column index 7 out of range for 4 columns"),
    ("unsorted", r"X's column indices are not sorted within row 1"),
    ("duplicate", r"X repeats a column index within row 2"),
    ("indptr_length", r"X's indptr has 3 entries, not rows \+ 1 = 4"),
    ("indptr_order", r"X's indptr must start at 0, never decrease"),
    ("beyond_float32", r"X has values beyond float32's range"),
    ("empty", r"X is empty: shape \(0, 4\)"),
    ("complex", r"X must hold real numbers"),
])
def test_defects_give_one_clear_error(case, message):
    good = dict(data=[1.0, 2.0, 3.0, 4.0], indices=[0, 1, 2, 3], indptr=[0, 1, 3, 4], shape=(3, 4))
    args = dict(good)
    dtype = np.float32
    if case == "nan":
        args["data"] = [1.0, 2.0, np.nan, 4.0]
    elif case == "inf":
        args["data"] = [np.inf, 2.0, 3.0, 4.0]
    elif case == "negative":
        args["indices"] = [0, 1, -1, 3]
    elif case == "out_of_range":
        args["indices"] = [0, 1, 2, 7]
    elif case == "unsorted":
        args["indices"] = [0, 2, 1, 3]
    elif case == "duplicate":
        args = dict(data=[1.0, 2.0, 3.0, 4.0, 5.0], indices=[0, 1, 2, 3, 3], indptr=[0, 1, 3, 5], shape=(3, 4))
    elif case == "indptr_length":
        args["indptr"] = [0, 1, 4]
    elif case == "indptr_order":
        args["indptr"] = [0, 3, 1, 4]
    elif case == "beyond_float32":
        args["data"], dtype = [1.0, 1e39, 3.0, 4.0], np.float64
    elif case == "complex":
        dtype = np.complex64
    if case == "empty":
        X = sp.csr_matrix((0, 4), dtype=np.float32)
    else:
        X = _csr(args["data"], args["indices"], args["indptr"], args["shape"], dtype)
    with pytest.raises(ValueError, match=message):
        check_sparse(X)
    if case in ("nan", "unsorted", "out_of_range"):  # the entry points give the same message
        with pytest.raises(ValueError, match=message):
            predictability(X, [0, 1, 0], n_partitions=2, train_size=1)


def test_other_formats_converted_once_with_a_warning():
    X, y = counts_problem(n=400, d=30, density=0.2)
    kw = dict(n_partitions=4, train_size=0.5, random_state=0)
    ref = predictability(X, y, **kw)
    for other in (X.tocsc(), X.tocoo(), sp.csr_array(X).tocsc()):
        with pytest.warns(SparseFormatWarning, match="converted once to CSR"):
            res = predictability(other, y, **kw)
        np.testing.assert_array_equal(res.prob_label, ref.prob_label)
    coo = X.tocoo()
    doubled = sp.coo_matrix((np.r_[coo.data, 1.0], (np.r_[coo.row, coo.row[0]], np.r_[coo.col, coo.col[0]])),
                            shape=X.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SparseFormatWarning)
        with pytest.raises(ValueError, match=r"\(COO\) repeats a \(row, column\) entry"):
            predictability(doubled, y, **kw)
    with pytest.raises(ValueError, match="y has 399 entries|399"):
        predictability(X, y[:-1], **kw)
    float64 = predictability(X.astype(np.float64), y, **kw)
    np.testing.assert_array_equal(float64.prob_label, ref.prob_label)  # float32 rows either way


# e. ------------------------------------------------------------------------------------------

def test_cli_reads_save_npz_files(tmp_path):
    from aflite_fast.cli import main

    X, y = counts_problem(n=500, d=40, density=0.2, seed=11)
    sp.save_npz(tmp_path / "X.npz", X)
    np.save(tmp_path / "y.npy", y)
    flags = ["--target-size", "300", "--n-partitions", "8", "--train-size", "0.5", "--slice-size", "100",
             "--seed", "0", "--quiet"]
    assert main(["filter", str(tmp_path / "X.npz"), str(tmp_path / "y.npy"), "--out", str(tmp_path / "out"),
                 *flags]) == 0
    api = aflite(X, y, target_size=300, n_partitions=8, train_size=0.5, slice_size=100, random_state=0,
                 progress=False)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "keep.npy"), api.keep)
    assert main(["evaluate", str(tmp_path / "out"), str(tmp_path / "X.npz"), str(tmp_path / "y.npy"),
                 "--features", str(tmp_path / "X.npz"), "--n-random", "2", "--quiet"]) == 0


def test_cli_bad_npz_is_one_line_and_exit_2(tmp_path, child_process):
    import subprocess
    import sys

    X, y = counts_problem(n=200, d=20, density=0.2)
    X.data[3] = np.nan
    sp.save_npz(tmp_path / "bad.npz", X)
    np.save(tmp_path / "y.npy", y)
    proc = subprocess.run([sys.executable, "-m", "aflite_fast", "filter", str(tmp_path / "bad.npz"),
                           str(tmp_path / "y.npy"), "--target-size", "100", "--train-size", "0.5", "--out",
                           str(tmp_path / "out"), "--quiet"], **child_process, capture_output=True, text=True)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "has a NaN or infinite value (row 0" in lines[0], proc.stderr
