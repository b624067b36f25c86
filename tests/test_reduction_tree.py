"""The reduction tree of the member pass: partial sums of whole groups of rows, computed apart
and added by ``layout.combine_nodes``, drive the solver (``solver.train_models_with``) to
bitwise the models of one ``solver.train_models`` call on all the rows.

a. Any split of the rows into runs of whole groups, with a warm-up loss (truncated GCE) too.
b. One group (small X) is the sum in super-block order: the same bits as without groups.
c. The layout of a subset of the rows is the layout of all restricted to it.
d. Multiple choice (items of K candidate rows, groups of whole items, unpenalised position
   columns): split sums give the models of one call, and one group is the item pass in order.
"""
import os

import numpy as np
import pytest

from aflite_fast.core import layout, preconditioning, solver
from aflite_fast.core.losses import resolve_loss
from aflite_fast.phase import multiple_choice as mc

# several reduction groups even on the small X of these tests
pytestmark = pytest.mark.usefixtures("small_reduction_groups")


@pytest.fixture
def seed():
    return int(os.environ.get("AFLITE_FAST_TEST_SEED", "0"))


def _problem(seed, n=5000, d=20, n_classes=3, n_models=5):
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((n, d)) * (1.0 + np.arange(d)) ** -1.0).astype(np.float32)
    y = rng.integers(0, n_classes, n).astype(np.int32)
    member = (rng.random((n, n_models)) < 0.3).astype(np.uint8)
    return layout.augment_rows(X), y, member


def _split_evaluate(Xa, y, member, positions, leaves, cuts, group=1, reference=False):
    """An evaluate of train_models_with from holders of rows [cuts[i], cuts[i+1]) (whole groups;
    items of ``group`` rows of Xa); the last holder's leaves run to the end of the tree.
    ``reference``: the solver trains classifiers in the reference-class form."""
    holders = []
    n = y.shape[0]
    for i, (a, b) in enumerate(zip(cuts[:-1], cuts[1:])):
        lo = 0 if i == 0 else int(leaves[a])
        hi = layout.REDUCE_LEAVES if b == n else int(leaves[b - 1]) + 1
        rows = solver.MemberRows(Xa[a * group:b * group], y[a:b], member[a:b], positions[a:b], leaves[a:b], group)
        holders.append((rows, (lo, hi)))

    def evaluate(models, W, scale, loss):
        nodes = []
        for rows, leaf_range in reversed(holders):  # any order: the tree fixes the additions
            nodes.extend(rows.sums(models, W, scale, loss, leaf_range, reference=reference))
        return layout.combine_nodes(nodes)

    return evaluate


@pytest.mark.parametrize("loss", ["ce", "gce_trunc"])
@pytest.mark.parametrize("cuts", [[0, 5000], [0, 1875, 2500, 5000], [0, 625, 4375, 5000]])
def test_split_sums_give_the_same_models(seed, loss, cuts):
    Xa, y, member = _problem(seed)
    n, D = Xa.shape
    positions = np.arange(n, dtype=np.int64)
    leaves = positions // layout.reduction_group_rows(n)
    assert leaves[-1] + 1 == 8  # groups of 625 rows
    pre = preconditioning.preconditioner(Xa[::2], 3, 1e-3)
    whole, info = solver.train_models(Xa, y, member, 3, loss=loss, positions=positions, precond=pre, leaves=leaves)
    evaluate = _split_evaluate(Xa, y, member, positions, leaves, cuts, reference=True)
    split, info_split = solver.train_models_with(evaluate, member.sum(axis=0), D, 3, loss=loss, precond=pre)
    assert info["n_iter"].min() >= 2
    np.testing.assert_array_equal(split, whole)
    for key in ("n_iter", "status", "n_eval", "objective"):
        np.testing.assert_array_equal(info_split[key], info[key])


@pytest.mark.parametrize("position_bias", [False, True])
def test_multiple_choice_split_sums_and_one_group(seed, position_bias):
    rng = np.random.default_rng([seed, 4])
    n, K, d = 1800, 3, 10
    X = (rng.standard_normal((n, K, d)) * (1.0 + np.arange(d)) ** -0.5).astype(np.float32)
    y = rng.integers(0, K, n).astype(np.int32)
    X[np.arange(n), y, 0] += 1.0
    Xa = mc.augment_items(X, position_bias=position_bias)
    D = Xa.shape[1]
    n_free = D - d
    member = (rng.random((n, 4)) < 0.4).astype(np.uint8)
    positions = np.arange(n, dtype=np.int64)
    leaves = positions // layout.reduction_group_rows(n)  # two groups of 900 items
    kw = dict(loss="gce", loss_params={"q": 0.5}, positions=positions, group=K, n_free=n_free)
    whole, info = solver.train_models(Xa, y, member, 1, leaves=leaves, **kw)
    evaluate = _split_evaluate(Xa, y, member, positions, leaves, [0, 900, n], group=K)
    split, info_split = solver.train_models_with(evaluate, member.sum(axis=0), D, 1, C=1.0,
                                                 loss=resolve_loss("gce", {"q": 0.5}, K), n_free=n_free)
    assert info["n_iter"].min() >= 2
    np.testing.assert_array_equal(split, whole)
    np.testing.assert_array_equal(info_split["n_eval"], info["n_eval"])
    # one group: the item pass without groups, in super-block order
    first = slice(0, 500)
    a, _ = solver.train_models(Xa[:500 * K], y[first], member[first], 1, leaves=np.zeros(500, np.int64),
                               **dict(kw, positions=positions[first] * 3))
    b, _ = solver.train_models(Xa[:500 * K], y[first], member[first], 1, **dict(kw, positions=positions[first] * 3))
    np.testing.assert_array_equal(a, b)


def test_one_group_is_the_sum_in_order(seed):
    Xa, y, member = _problem(seed, n=500)
    positions = np.arange(500, dtype=np.int64) * 3  # several row blocks, one group
    leaves = np.zeros(500, dtype=np.int64)
    a, _ = solver.train_models(Xa, y, member, 3, positions=positions, leaves=leaves)
    b, _ = solver.train_models(Xa, y, member, 3, positions=positions)
    np.testing.assert_array_equal(a, b)


def test_layout_of_a_subset(seed):
    rng = np.random.default_rng(seed)
    positions = np.sort(rng.choice(20000, 6000, replace=False)).astype(np.int64)
    leaves = positions // 1300
    rb, sb, gb, gl = layout.reduction_layout(positions, leaves, 400)
    key = lambda p, l: list(zip(l[rb[:-1]].tolist(), (p[rb[:-1]] // layout.ROW_BLOCK).tolist()))  # noqa: E731
    assert len(set(key(positions, leaves))) == rb.size - 1  # one block per (group, run of 512 positions)
    assert np.all(np.diff(gl) > 0) and gb[-1] == sb.size - 1
    part = (leaves >= 4) & (leaves < 9)
    rb2, sb2, gb2, gl2 = layout.reduction_layout(positions[part], leaves[part], 400)
    np.testing.assert_array_equal(gl2, gl[(gl >= 4) & (gl < 9)])
    first = np.flatnonzero(part)[0]
    inside = (rb[:-1] >= first) & (rb[:-1] < first + part.sum())
    np.testing.assert_array_equal(rb2[:-1], rb[:-1][inside] - first)


def test_combine_nodes_takes_any_order_and_absent_subtrees():
    rng = np.random.default_rng(1)
    leaves = {i: rng.standard_normal(4) for i in (0, 1, 2, 5)}
    tree = {(0, i): v for i, v in leaves.items()}
    # by hand: ((l0 + l1) + l2) + l5, as the tree adds them
    expect = ((leaves[0] + leaves[1]) + leaves[2]) + leaves[5]
    got = layout.combine_nodes([(1, 0, leaves[0] + leaves[1]), (0, 5, leaves[5]), (0, 2, leaves[2])], n_leaves=8)
    np.testing.assert_array_equal(got, expect)
    np.testing.assert_array_equal(layout.combine_nodes([(l, i, v) for (l, i), v in tree.items()], 8), expect)
    assert layout.combine_nodes([], 8) is None
