"""Tests of the member-row training pass (csrc/afl_member.h) and the solver's preconditioner.

a. The pass's loss and gradient of every model over its own rows equal a float64 NumPy
   reference (CE's vectorised row pass and the generic loss path), at training shares
   t/N = 0.1 and 0.5, for widths that are and are not whole vectors, more classes than one
   register group holds, and rows packed back to back or padded to aligned strides.
b. Bitwise: the same with 1 and 2 threads, whichever other models are evaluated with a
   model and in which order, and whatever the rows' stride; also for rows wide enough to be
   evaluated in several feature slices.
c. The preconditioner is the same from a whole sample or from chunks of it, with any thread
   count; trained with it, models reach the optimum without it in far fewer iterations.
d. One AFLite phase at t/N = 0.1 and 0.5 gives bitwise the same scores with 1 and 2
   threads, from a read-only memmap, and under a budget that splits the partitions into
   several blocks, for narrow rows and rows of several feature slices.
e. The workspace: rows of a shrinking active set compacted in place across phases are
   bitwise the rows a fresh gather writes (and X is not read again), and phases scored from
   them equal phases scored from fresh gathers.
"""
import numpy as np
import pytest

from aflite_fast import predictability
from aflite_fast.core import _kernel, layout, preconditioning, solver
from aflite_fast.core.losses import resolve_loss
from aflite_fast.phase import gather, local, partitions, plan


def _index(member, positions=None):
    n, B = member.shape
    positions = np.arange(n, dtype=np.int64) if positions is None else positions
    rb = layout.row_blocks_from_positions(positions)
    mptr = np.empty((B, rb.size), np.int64)
    mrows = np.empty(int(member.sum()), np.int32)
    _kernel.member_index(np.ascontiguousarray(member), rb, mptr, mrows)
    return mptr, mrows, rb


def _eval(Xa, y, member, W, loss="ce", n_threads=1, positions=None, n_classes=None):
    """Loss sums and gradients (B, C, D) of the member pass for weights W (B, D, C)."""
    n, D = Xa.shape
    B, _, C = W.shape
    positions = np.arange(n, dtype=np.int64) if positions is None else positions
    mptr, mrows, rb = _index(member, positions)
    sb = layout.super_blocks(positions, rb, D)
    Dp = _kernel.member_width(D)
    Wc = np.zeros((B, C, Dp), np.float32)
    Wc[:, :, :D] = W.transpose(0, 2, 1)
    scale = 1.0 / member.sum(axis=0)
    spec = resolve_loss(loss, None, C)
    loss_out, grad = np.zeros(B), np.zeros((B, C, Dp))
    _kernel.member_eval(Xa, y, mptr, mrows, rb, sb, Wc, scale, spec.code, spec.params, loss_out, grad,
                        1, n_threads)
    assert not grad[:, :, D:].any()  # padding columns stay zero
    return loss_out, grad[:, :, :D]


def _reference(Xa, y, member, W, loss="ce", q=0.7):
    X = Xa.astype(np.float64)
    B, D, C = W.shape
    losses, grads = np.zeros(B), np.zeros((B, C, D))
    for j in range(B):
        rows = np.flatnonzero(member[:, j])
        Z = X[rows] @ W[j].astype(np.float32).astype(np.float64)
        Z -= Z.max(axis=1, keepdims=True)
        P = np.exp(Z) / np.exp(Z).sum(axis=1, keepdims=True)
        py = P[np.arange(rows.size), y[rows]]
        E = np.zeros_like(P)
        E[np.arange(rows.size), y[rows]] = 1.0
        if loss == "ce":
            losses[j], w = -np.log(py).sum(), np.ones_like(py)
        else:  # gce
            losses[j], w = ((1.0 - py ** q) / q).sum(), py ** q
        R = (w[:, None] * (P - E)) / rows.size
        grads[j] = (X[rows].T @ R).T
    return losses, grads


def _problem(make_problem, seed, n, d, n_classes, share, B=6):
    rng = np.random.default_rng([seed, n, d, n_classes])
    X, y = make_problem(rng, n, d, n_classes, signal=0.6)
    Xa = layout.augment_rows(X, X.mean(axis=0).astype(np.float32))
    member = np.zeros((n, B), np.uint8)
    for j in range(B):
        member[rng.choice(n, size=int(share * n), replace=False), j] = 1
    W = 0.3 * rng.standard_normal((B, d + 1, n_classes))
    return Xa, y.astype(np.int32), member, W


@pytest.mark.parametrize("share", [0.1, 0.5])
@pytest.mark.parametrize("d,n_classes", [(37, 3), (47, 2), (20, 7)])
@pytest.mark.parametrize("loss", ["ce", "gce"])
def test_member_pass_matches_numpy(seed, make_problem, share, d, n_classes, loss):
    Xa, y, member, W = _problem(make_problem, seed, 1300, d, n_classes, share)
    got_loss, got_grad = _eval(Xa, y, member, W, loss=loss)
    ref_loss, ref_grad = _reference(Xa, y, member, W, loss=loss)
    np.testing.assert_allclose(got_loss, ref_loss, rtol=1e-6)
    # float32 products summed in float32 within row blocks of 256: about 1e-6 of the terms
    scale = np.abs(ref_grad).max()
    assert np.abs(got_grad - ref_grad).max() <= 1e-5 * scale
    # padded, aligned rows (what the engine gathers) give the same bits as packed rows
    assert Xa.strides[0] != 4 * Xa.shape[1] or d + 1 == _kernel.member_width(d + 1)
    packed = np.ascontiguousarray(Xa)
    p_loss, p_grad = _eval(packed, y, member, W, loss=loss)
    assert np.array_equal(p_loss, got_loss) and np.array_equal(p_grad, got_grad)


@pytest.mark.parametrize("share", [0.1, 0.5])
def test_member_pass_wide_rows_in_slices(seed, make_problem, share):
    """Rows of 601 columns are evaluated in several feature slices: the same sums as the
    float64 reference, bitwise across threads, model company and row stride."""
    Xa, y, member, W = _problem(make_problem, seed, 1100, 600, 4, share, B=5)
    loss1, grad1 = _eval(Xa, y, member, W, n_threads=1)
    ref_loss, ref_grad = _reference(Xa, y, member, W)
    np.testing.assert_allclose(loss1, ref_loss, rtol=1e-6)
    assert np.abs(grad1 - ref_grad).max() <= 1e-5 * np.abs(ref_grad).max()
    loss2, grad2 = _eval(np.ascontiguousarray(Xa), y, member, W, n_threads=2)
    assert np.array_equal(loss1, loss2) and np.array_equal(grad1, grad2)
    lj, gj = _eval(Xa, y, np.ascontiguousarray(member[:, [3]]), W[[3]], n_threads=2)
    assert lj[0] == loss1[3] and np.array_equal(gj[0], grad1[3])


@pytest.mark.parametrize("share", [0.1, 0.5])
def test_member_pass_bitwise_independent_of_threads_and_company(seed, make_problem, share):
    Xa, y, member, W = _problem(make_problem, seed, 2600, 31, 3, share, B=7)
    loss1, grad1 = _eval(Xa, y, member, W, n_threads=1)
    loss2, grad2 = _eval(Xa, y, member, W, n_threads=2)
    assert np.array_equal(loss1, loss2) and np.array_equal(grad1, grad2)
    # each model alone, and the block in another order, give the same bits
    for j in range(member.shape[1]):
        lj, gj = _eval(Xa, y, np.ascontiguousarray(member[:, [j]]), W[[j]], n_threads=2)
        assert lj[0] == loss1[j] and np.array_equal(gj[0], grad1[j])
    perm = np.random.default_rng(seed).permutation(member.shape[1])
    lp, gp = _eval(Xa, y, np.ascontiguousarray(member[:, perm]), W[perm])
    assert np.array_equal(lp, loss1[perm]) and np.array_equal(gp, grad1[perm])
    # a model on its own rows only, with their positions in the full set (what the engine does)
    rows = np.flatnonzero(member[:, 2])
    lo, go = _eval(np.ascontiguousarray(Xa[rows]), y[rows], np.ones((rows.size, 1), np.uint8), W[[2]],
                   positions=rows)
    assert lo[0] == loss1[2] and np.array_equal(go[0], grad1[2])


@pytest.mark.parametrize("n_models", [1, 3, 7])
def test_member_pass_bitwise_across_thread_counts_over_many_super_blocks(seed, make_problem, n_models):
    """Threads split the models, or (fewer than two models a thread) take super-blocks: the
    same bits either way, whatever the thread count (positions spread out so that the rows
    form several super-blocks)."""
    Xa, y, member, W = _problem(make_problem, seed, 2600, 31, 3, 0.3, B=n_models)
    positions = np.arange(Xa.shape[0], dtype=np.int64) * 50
    assert layout.super_blocks(positions, _index(member, positions)[2], Xa.shape[1]).size - 1 >= 3
    loss1, grad1 = _eval(Xa, y, member, W, n_threads=1, positions=positions)
    for n_threads in (2, 3, 4):
        lt, gt = _eval(Xa, y, member, W, n_threads=n_threads, positions=positions)
        assert np.array_equal(lt, loss1) and np.array_equal(gt, grad1)


def test_preconditioner_chunks_threads_and_shape(seed, make_problem):
    rng = np.random.default_rng([seed, 5])
    X, _ = make_problem(rng, 3000, 40, 3)
    Xa = np.ascontiguousarray(layout.augment_rows(X, X.mean(axis=0).astype(np.float32)))
    whole = preconditioning.preconditioner(Xa, 3, 1e-4, n_threads=1).dense
    chunks = preconditioning.preconditioner((Xa[i:i + 512] for i in range(0, 3000, 512)), 3, 1e-4, n_threads=2).dense
    assert np.array_equal(whole, chunks)
    assert whole.shape == (41, 41) and whole.dtype == np.float32 and np.array_equal(whole, whole.T)
    assert np.linalg.eigvalsh(whole.astype(np.float64)).min() > 0
    # it is the inverse it claims to be
    # the matrix of H0 = (I + 1 1') x M^-1 of the reference-class form (C = 3): s = 1 / C
    M = (1 / 3) * (Xa.T.astype(np.float64) @ Xa) / 3000 + 1e-4 * np.eye(41)
    np.testing.assert_allclose(whole.astype(np.float64) @ M, np.eye(41), atol=2e-3)
    with pytest.raises(ValueError, match="multiple of"):
        preconditioning.preconditioner([Xa[:100], Xa[100:300]], 3, 1e-4)


@pytest.mark.parametrize("share", [0.1, 0.5])
def test_preconditioned_solver_reaches_the_same_optimum_in_fewer_steps(seed, make_problem, share):
    rng = np.random.default_rng([seed, 6])
    n, d, C = 6000, 60, 3
    X, y = make_problem(rng, n, d, C, signal=0.5)
    Xa = layout.augment_rows(X, X.mean(axis=0).astype(np.float32))
    member = np.zeros((n, 4), np.uint8)
    for j in range(4):
        member[rng.choice(n, size=int(share * n), replace=False), j] = 1
    opts = solver.SolverOptions(tol=1e-6, max_iter=3000)
    plain, info_p = solver.train_models(Xa, y.astype(np.int32), member, C, options=opts)
    pre, info_h = solver.train_models(Xa, y.astype(np.int32), member, C, precond="auto", options=opts)
    assert np.all(info_p["status"] == solver._kernel.STATUS_CONVERGED)
    assert np.all(info_h["status"] == solver._kernel.STATUS_CONVERGED)
    assert info_h["n_iter"].mean() <= info_p["n_iter"].mean() / 3, (info_h["n_iter"], info_p["n_iter"])
    np.testing.assert_allclose(info_h["objective"], info_p["objective"], rtol=1e-7)
    np.testing.assert_allclose(pre, plain, atol=2e-3 * np.abs(plain).max())


@pytest.mark.parametrize("share,small,n,d", [(0.1, "700KB", 4000, 48), (0.5, "1.2MB", 4000, 48),
                                             (0.5, "3MB", 1500, 300)])
def test_phase_bitwise_across_threads_memmap_and_blocks(seed, make_problem, readonly_memmap, monkeypatch,
                                                        share, small, n, d):
    rng = np.random.default_rng([seed, 7])
    X, y = make_problem(rng, n, d, 3, signal=0.5)
    blocks = []
    real = local.score_phase

    def spy(*args, **kwargs):
        res = real(*args, **kwargs)
        blocks.append(res.n_blocks)
        return res

    monkeypatch.setattr(local, "score_phase", spy)
    run = dict(n_partitions=8, train_size=int(share * n), random_state=seed)
    base = predictability(X, y, n_jobs=1, **run)
    assert base.n_iter.min() > 0
    for other in (predictability(X, y, n_jobs=2, **run),
                  predictability(readonly_memmap(X), y, n_jobs=1, **run),
                  predictability(X, y, n_jobs=2, max_memory=small, **run)):
        assert np.array_equal(base.scores, other.scores, equal_nan=True)
        assert np.array_equal(base.prob_label, other.prob_label, equal_nan=True)
        assert np.array_equal(base.n_iter, other.n_iter)
    # the small budget did split the partitions into blocks (the others trained one block)
    assert blocks[:3] == [1, 1, 1] and blocks[3] > 1, blocks


def _greedy_blocks(member, budget, n_features, n_classes, history, n_threads=1, group=1):
    """plan.plan_blocks' greedy pass, column by column, as a reference (no shortcut)."""
    blocks, current, in_union, n_member = [], [], np.zeros(member.shape[0], dtype=bool), 0
    for j in range(member.shape[1]):
        col = member[:, j].astype(bool)
        rows = int(np.count_nonzero(in_union | col))
        if current and plan.training_bytes(rows, len(current) + 1, n_features, n_classes, history,
                                           n_member + int(col.sum()), n_threads, group) > budget:
            blocks.append(current)
            current, in_union, n_member = [], np.zeros_like(in_union), 0
        current.append(j)
        in_union |= col
        n_member += int(col.sum())
    return blocks + [current]


@pytest.mark.parametrize("share", [0.1, 0.5])
def test_plan_blocks_is_the_greedy_pass(seed, share):
    # d. the blocks of partitions: one block of all when every step of the greedy pass fits
    # (taken without the pass), else the pass's blocks, for budgets around that bound
    rng = np.random.default_rng([seed, 17])
    n, m, d, C, history = 5000, 12, 40, 3, 10
    member = (rng.random((n, m)) < share).astype(np.uint8)
    member[rng.random(n) < 0.3] = 0  # rows no partition trains on: the union is fewer than n rows
    total = int(member.sum())
    bound = max(plan.training_bytes(n, k, d, C, history, total) for k in range(1, m + 1))
    union = int(np.count_nonzero(member.any(axis=1)))
    exact = plan.training_bytes(union, m, d, C, history, total)
    assert exact < bound
    one = max(plan.training_bytes(int(c), 1, d, C, history, int(c)) for c in member.sum(axis=0))
    small = one + (exact - one) // 4
    for budget in (bound + 1, bound, bound - 1, exact, exact - 1, (one + exact) // 2, small, one):
        expected = _greedy_blocks(member, budget, d, C, history)
        assert plan.plan_blocks(member, budget, d, C, history) == expected, budget
    assert plan.plan_blocks(member, bound, d, C, history) == [list(range(m))]
    assert len(_greedy_blocks(member, small, d, C, history)) > 2


def test_workspace_compacts_rows_in_place_as_a_fresh_gather(seed, make_problem):
    """Successive phases use one buffer (gather.Workspace), and each phase's active rows are a
    subset of the previous phase's: the workspace moves them down in its buffer instead of
    reading X, and the rows (padding included) and the phase's scores are bitwise those of a
    fresh gather."""
    from aflite_fast.io.inputs import gather_rows, scan_rows
    rng = np.random.default_rng([seed, 9])
    n = 2500
    X, y = make_problem(rng, n, 45, 3, signal=0.5)
    center = scan_rows(X).astype(np.float32)
    codes = y.astype(np.int32)
    ws = gather.Workspace()
    active = np.arange(n, dtype=np.int64)
    for phase in range(4):
        if phase:
            # a slice removed, scattered, with some long runs kept (as a phase removes rows)
            active = np.sort(rng.choice(active, active.size - active.size // 5, replace=False))
        tp = partitions.partition_train_positions(seed, phase, active.size, active.size // 2, 6)
        fresh = local.score_phase(X, codes, active, center, tp, n_classes=3)
        reused = local.score_phase(X, codes, active, center, tp, n_classes=3, workspace=ws)
        assert np.array_equal(fresh.coef, reused.coef) and np.array_equal(fresh.n_iter, reused.n_iter)
        assert np.array_equal(fresh.scores, reused.scores, equal_nan=True)
        assert np.array_equal(fresh.prob_label, reused.prob_label)
        if phase == 0:
            first_buffer = ws.buffer
    assert ws.buffer is first_buffer  # the later, smaller phases reused the first one's buffer
    # the compaction itself: bitwise a fresh gather, padding zero, X not read again
    first = ws.gather(X, active, center)
    assert np.array_equal(first, gather_rows(X, active, center, layout.empty_rows(active.size, 46)))
    keep = np.sort(rng.choice(active, active.size // 2, replace=False))
    expected = gather_rows(X, keep, center, layout.empty_rows(keep.size, 46))
    X_changed = X  # the workspace holds rows of this very array, so it must not read it again:
    X_changed[keep] += 1.0  # rows changed after the gather keep their gathered values
    got = ws.gather(X_changed, keep, center)
    assert np.array_equal(got, expected)
    assert not layout.padded_rows(ws.buffer, keep.size, 46)[:, 46:].any()
    # another centre, or rows not all held, are read from X
    assert np.array_equal(ws.gather(X_changed, keep, center + 1), gather_rows(
        X_changed, keep, center + 1, layout.empty_rows(keep.size, 46)))
    assert np.array_equal(ws.gather(X_changed, active, center + 1), gather_rows(
        X_changed, active, center + 1, layout.empty_rows(active.size, 46)))


_ISA_SCRIPT = r"""
import sys
import numpy as np
from aflite_fast.core import _kernel, layout, prediction, solver
sys.path.insert(0, sys.argv[1])
import test_member_pass as t
assert _kernel.gemm_isa() == sys.argv[2], _kernel.gemm_isa()
rng = np.random.default_rng(3)
n, C, B = 900, 5, 4
for d, losses in ((300, ("ce",)), (37, ("ce", "gce"))):  # several feature slices, then one
    X = (rng.standard_normal((n, d)) * (1 + np.arange(d)) ** -0.5 + 2).astype(np.float32)
    y = rng.integers(0, C, n).astype(np.int32)
    Xa = layout.augment_rows(X, X.mean(axis=0).astype(np.float32))
    member = (rng.random((n, B)) < 0.3).astype(np.uint8)
    W = 0.3 * rng.standard_normal((B, d + 1, C))
    for loss in losses:
        got_l, got_g = t._eval(Xa, y, member, W, loss=loss)
        two_l, two_g = t._eval(Xa, y, member, W, loss=loss, n_threads=2)
        assert np.array_equal(got_l, two_l) and np.array_equal(got_g, two_g)
        ref_l, ref_g = t._reference(Xa, y, member, W, loss=loss)
        np.testing.assert_allclose(got_l, ref_l, rtol=1e-6)
        assert np.abs(got_g - ref_g).max() <= 1e-5 * np.abs(ref_g).max()
coef, info = solver.train_models(Xa, y, member, C, precond="auto")
assert (info["status"] == 0).all() and info["n_iter"].min() > 0
coef2, _ = solver.train_models(Xa, y, member, C, precond="auto", n_threads=2)
assert np.array_equal(coef, coef2)
seen, correct, prob = np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n)
prediction.predict_accumulate(Xa, y, np.ascontiguousarray(1 - member), prediction.stack_weights(coef), C, seen, correct,
                          prob, n_threads=2)
assert np.array_equal(seen, (1 - member).sum(axis=1))
print("ok")
"""


@pytest.mark.parametrize("isa", ["avx2", "generic"])
def test_other_instruction_sets(isa, tmp_path, child_process):
    """The AVX2 and baseline builds of the row passes (picked with AFLITE_FAST_ISA) against the
    same float64 reference, bitwise across threads, through training and prediction."""
    import os
    import subprocess
    import sys

    if isa == "avx2" and _kernel.gemm_isa() == "generic":
        pytest.skip("the kernel runs its generic path here (a CPU without AVX2, or AFLITE_FAST_ISA=generic)")
    env = dict(child_process["env"], AFLITE_FAST_ISA=isa)
    here = os.path.dirname(os.path.abspath(__file__))
    script = tmp_path / "isa.py"
    script.write_text(_ISA_SCRIPT)
    out = subprocess.run([sys.executable, str(script), here, isa], env=env, cwd=child_process["cwd"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]
