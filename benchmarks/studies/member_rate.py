"""GFLOP/s of the training kernel's member pass in isolation (one evaluation of objective and
gradient of m models, each over its own t rows), against the deterministic GEMM's rate.

Useful flops per pass: m x 2 products of t x (d+1) x C (logits and gradient), as in the
floor of ``compare_scale.py``.  Rows are gathered as the engine gathers them (aligned padded
stride), models are random weights, partitions drawn as the engine draws them.

    PYTHONPATH=. python benchmarks/studies/member_rate.py [--n 50000] [--d 768] [--classes 3] [--m 64]
        [--shares 0.1 0.5] [--threads 1 2] [--repeat 5] [--layout tree|plain]
"""
import argparse
import time

import numpy as np

from aflite_fast.core import _kernel
from aflite_fast.phase import partitions
from aflite_fast.core import layout
from aflite_fast.core import solver
from aflite_fast.io.rows import membership_matrix
from aflite_fast.core.losses import resolve_loss


def member_inputs(n, d, C, m, share, seed=0):
    rng = np.random.default_rng(seed)
    X = layout.augment_rows(rng.standard_normal((n, d), dtype=np.float32))
    y = rng.integers(0, C, n).astype(np.int32)
    t = int(round(share * n))
    train_pos = partitions.partition_train_positions(seed, 0, n, t, m)
    return member_layout(X, y, train_pos, C, rng)


def member_layout(Xa, y, train_pos, C, rng):
    """The arguments of one member pass of the models ``train_pos`` on the augmented rows
    ``Xa`` (row blocks, super-blocks and member lists as the engine builds them), with small
    random weights: (Xa, y, mptr, mrows, row_blocks, super_blocks, W, t)."""
    n, D = Xa.shape
    m, t = train_pos.shape
    member = membership_matrix(train_pos, n, np.empty((n, m), dtype=np.uint8))
    positions = np.arange(n, dtype=np.int64)
    rb = layout.row_blocks_from_positions(positions)
    sb = layout.super_blocks(positions, rb, D)
    mptr = np.empty((m, rb.size), dtype=np.int64)
    mrows = np.empty(int(member.sum()), dtype=np.int32)
    _kernel.member_index(member, rb, mptr, mrows)
    W = np.zeros((m, C, _kernel.member_width(D)), dtype=np.float32)
    W[:, :, :D] = 0.01 * rng.standard_normal((m, C, D), dtype=np.float32)
    return Xa, y, mptr, mrows, rb, sb, W, t


def member_seconds(inputs, C, threads, repeat):
    X, y, mptr, mrows, rb, sb, W, t = inputs
    m, Dp = W.shape[0], W.shape[2]
    loss = np.zeros(m)
    grad = np.zeros((m, C, Dp))
    scale = np.full(m, 1.0 / t)
    params = np.zeros(0)
    _kernel.member_eval(X, y, mptr, mrows, rb, sb, W, scale, 0, params, loss, grad, 1, threads)
    t0 = time.perf_counter()
    _kernel.member_eval(X, y, mptr, mrows, rb, sb, W, scale, 0, params, loss, grad, repeat, threads)
    return (time.perf_counter() - t0) / repeat


def tree_seconds(inputs, C, threads, repeat):
    """Seconds of one member pass summed through the reduction tree, as the engine sums its
    classification passes (``solver.MemberRows``: leaves of ``reduction_group_rows(n)`` rows)."""
    X, y, mptr, mrows, rb, sb, W, t = inputs
    n = X.shape[0]
    m, Dp = W.shape[0], W.shape[2]
    member = np.zeros((n, m), dtype=np.uint8)
    for j in range(m):
        member[mrows[mptr[j, 0]:mptr[j, -1]], j] = 1
    positions = np.arange(n, dtype=np.int64)
    leaves = positions // layout.reduction_group_rows(n)
    rows = solver.MemberRows(X, y, member, positions, leaves)
    models = np.arange(m, dtype=np.int64)
    scale = np.full(m, 1.0 / t)
    loss = resolve_loss("ce", None, C)
    rows.sums(models, W, scale, loss, n_threads=threads)
    t0 = time.perf_counter()
    for _ in range(repeat):
        rows.sums(models, W, scale, loss, n_threads=threads)
    return (time.perf_counter() - t0) / repeat


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=50000)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--classes", type=int, default=3)
    p.add_argument("--m", type=int, default=64)
    p.add_argument("--shares", type=float, nargs="+", default=[0.1, 0.5])
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--layout", choices=["tree", "plain"], default="tree",
                   help="sum through the reduction tree as the engine does (default), or super-block "
                        "by super-block (the multiple-choice path)")
    a = p.parse_args(argv)
    D, C = a.d + 1, a.classes
    rng = np.random.default_rng(1)
    A = rng.standard_normal((20000, D), dtype=np.float32)
    B = rng.standard_normal((D, a.m * C), dtype=np.float32)
    Z = np.empty((20000, a.m * C), np.float32)
    for share in a.shares:
        inputs = member_inputs(a.n, a.d, C, a.m, share)
        flops = a.m * 2 * 2 * inputs[-1] * D * C
        for th in a.threads:
            s = (tree_seconds if a.layout == "tree" else member_seconds)(inputs, C, th, a.repeat)
            g0 = time.perf_counter()
            _kernel.sgemm(False, A, B, Z, layout.block_bounds(D, layout.COL_BLOCK), False, th)
            g = 2.0 * 20000 * D * a.m * C / (time.perf_counter() - g0) / 1e9
            print(f"n={a.n} d={a.d} C={C} m={a.m} t/N={share} threads={th}: {s * 1e3:.1f} ms per pass, "
                  f"{flops / s / 1e9:.1f} GF/s ({flops / s / 1e9 / th:.1f} per thread); GEMM {g:.0f} GF/s",
                  flush=True)


if __name__ == "__main__":
    main()
