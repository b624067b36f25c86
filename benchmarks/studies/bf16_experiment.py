"""Would storing rows in bf16 (float32 sums) make a phase at least 1.5x faster, with held-out
predictions equal on at least 99.5% of rows?  Measured, not assumed.

Two questions, each answered on the same data (skewed embedding-like rows, N=50k, d=768,
C=3, m=64, t/N=0.1 and 0.5), one thread:

a. Speed.  Paired float32 / bf16 kernels of identical structure (benchmarks/studies/bf16_kernels.c,
   compiled here with ``-mavx512bf16``) for the phase's three products: member logits, member
   gradient, prediction.  Their ratios are applied to the package's own measured phase (the
   member pass's share of training from ``n_eval`` x one pass of ``_kernel.member_eval``,
   prediction, the rest unchanged): the phase a bf16 path could reach at best.
b. Agreement.  The phase trained on the rows rounded to bf16 (the float32 kernel on
   bf16-valued rows: what bf16 storage with float32 sums computes, up to summation order)
   against the phase on the float32 rows, same partitions; held-out predictions compared per
   (row, model) with the weights also rounded to bf16, and per row (every held-out prediction
   of the row the same).

Needs a CPU with AVX512-BF16 and gcc.  Not part of the package.

    PYTHONPATH=. python benchmarks/studies/bf16_experiment.py [--n 50000] [--d 768] [--shares 0.1 0.5]
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

# this directory (member_rate) and benchmarks/ (skewed_data)
sys.path[:0] = [os.path.dirname(os.path.abspath(__file__)),
                os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
from member_rate import member_layout, member_seconds  # noqa: E402
from skewed_data import make_skewed_embeddings  # noqa: E402

from aflite_fast.phase import local
from aflite_fast.phase import partitions
from aflite_fast.core import layout

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_flags():
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def build_kernels(tmp):
    so = os.path.join(tmp, "bf16_kernels.so")
    subprocess.run(["gcc", "-O3", "-mavx512f", "-mavx512bw", "-mavx512bf16", "-fPIC", "-shared",
                    os.path.join(HERE, "bf16_kernels.c"), "-o", so], check=True)
    lib = ctypes.CDLL(so)
    p = ctypes.c_void_p
    i64 = ctypes.c_int64
    for name in ("logits_f32", "logits_bf16", "grad_f32", "grad_bf16"):
        getattr(lib, name).argtypes = [i64, p, i64, p, ctypes.c_int, p, p]
    for name in ("predict_f32", "predict_bf16"):
        getattr(lib, name).argtypes = [i64, i64, p, i64, p, p]
    return lib


def to_bf16(a):
    """Round float32 to bf16 (nearest, ties to even): the bf16 bits as uint16."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def from_bf16(b):
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


def aligned(shape, dtype):
    """A zeroed array whose data starts on a 64-byte boundary."""
    n = int(np.prod(shape)) * np.dtype(dtype).itemsize
    raw = np.zeros(n + 64, dtype=np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + n].view(dtype).reshape(shape)


def ptr(a):
    return a.ctypes.data


def best_seconds(call, repeat):
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best


def kernel_ratios(lib, Xa, train_pos, C, repeat):
    """Seconds of one member pass (logits + gradient of all models) and of prediction (all rows,
    all models' classes), float32 and bf16, with the paired kernels."""
    n, D = Xa.shape
    Dp = (D + 31) // 32 * 32
    X32 = aligned((n, Dp), np.float32)
    X32[:, :D] = Xa
    X16 = aligned((n, Dp), np.uint16)
    X16[:, :D] = to_bf16(Xa)
    m = train_pos.shape[0]
    rng = np.random.default_rng(1)
    W32 = aligned((m * C, Dp), np.float32)
    W32[:, :D] = 0.01 * rng.standard_normal((m * C, D), dtype=np.float32)
    W16 = aligned((m * C, Dp), np.uint16)
    W16[:, :D] = to_bf16(W32[:, :D])
    rows = [np.ascontiguousarray(p, dtype=np.int32) for p in train_pos]
    z = np.empty((train_pos.shape[1], C), np.float32)
    r = 0.01 * rng.standard_normal((train_pos.shape[1], C)).astype(np.float32)
    g = aligned((C, Dp), np.float32)

    def logits(fn, X, W, Wsize):
        for j, rj in enumerate(rows):
            fn(rj.size, ptr(rj), Dp, ptr(X), C, ptr(W) + j * C * Dp * Wsize, ptr(z))

    def grad(fn, X):
        for rj in rows:
            fn(rj.size, ptr(rj), Dp, ptr(X), C, ptr(r), ptr(g))

    out = {
        "logits_f32": best_seconds(lambda: logits(lib.logits_f32, X32, W32, 4), repeat),
        "logits_bf16": best_seconds(lambda: logits(lib.logits_bf16, X16, W16, 2), repeat),
        "grad_f32": best_seconds(lambda: grad(lib.grad_f32, X32), repeat),
        "grad_bf16": best_seconds(lambda: grad(lib.grad_bf16, X16), repeat),
    }
    K = m * C
    zp = np.empty((n, K), np.float32)
    out["predict_f32"] = best_seconds(lambda: lib.predict_f32(n, Dp, ptr(X32), K, ptr(W32), ptr(zp)), repeat)
    out["predict_bf16"] = best_seconds(lambda: lib.predict_bf16(n, Dp, ptr(X16), K, ptr(W16), ptr(zp)), repeat)
    return out


def package_member_seconds(Xa, codes, train_pos, C, repeat):
    """One pass of the package's member kernel (all models, one thread)."""
    inputs = member_layout(Xa, codes, train_pos, C, np.random.default_rng(2))
    return member_seconds(inputs, C, 1, repeat)


def heldout_argmax(Xa, coef, train_pos):
    """(n, m) predicted class of every row by every model, and the (n, m) held-out mask."""
    n = Xa.shape[0]
    m, D, C = coef.shape
    logits = Xa @ coef.transpose(1, 0, 2).reshape(D, m * C).astype(np.float32)
    pred = logits.reshape(n, m, C).argmax(axis=2)
    held = np.ones((n, m), dtype=bool)
    for j, p in enumerate(train_pos):
        held[p[p >= 0], j] = False
    return pred, held


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=50_000)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--classes", type=int, default=3)
    p.add_argument("--m", type=int, default=64)
    p.add_argument("--shares", type=float, nargs="+", default=[0.1, 0.5])
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    flags = cpu_flags()
    print(f"CPU flags: avx512_bf16={'avx512_bf16' in flags} amx_bf16={'amx_bf16' in flags} "
          f"amx_tile={'amx_tile' in flags}; load average {os.getloadavg()[0]:.2f}")
    if "avx512_bf16" not in flags:
        sys.exit("this CPU has no AVX512-BF16")
    with tempfile.TemporaryDirectory() as tmp:
        lib = build_kernels(tmp)
        X, y = make_skewed_embeddings(a.n, a.d, a.classes, random_state=0)
        X = X.astype(np.float32)
        codes = y.astype(np.int32)
        center = X.mean(axis=0).astype(np.float32)
        Xa = layout.augment_rows(X, center)
        Xb = from_bf16(to_bf16(X))  # the rows as bf16 storage holds them
        active = np.arange(a.n, dtype=np.int64)
        rows_out = []
        for share in a.shares:
            t = int(round(share * a.n))
            train_pos = partitions.partition_train_positions(0, 0, a.n, t, a.m)
            k = kernel_ratios(lib, Xa, train_pos, a.classes, a.repeat)
            t0 = time.perf_counter()
            ph = local.score_phase(X, codes, active, center, train_pos, n_classes=a.classes, n_threads=1)
            phase = time.perf_counter() - t0
            phb = local.score_phase(Xb, codes, active, center, train_pos, n_classes=a.classes, n_threads=1)
            member = package_member_seconds(Xa, codes, train_pos, a.classes, a.repeat)
            sec = ph.seconds
            member_total = float(ph.n_eval.mean()) * member
            s_member = (k["logits_f32"] + k["grad_f32"]) / (k["logits_bf16"] + k["grad_bf16"])
            s_predict = k["predict_f32"] / k["predict_bf16"]
            rest = phase - member_total - sec["predict"]
            bf16_phase = rest + member_total / s_member + sec["predict"] / s_predict
            # the instruction-count limit: VDPBF16PS does twice an FMA's products, so no bf16
            # product runs more than 2x faster (the gradient also only with bf16 residuals)
            ideal_phase = rest + (member_total + sec["predict"]) / 2
            # agreement: weights rounded to bf16 too for the bf16 predictions
            pred32, held = heldout_argmax(Xa, ph.coef, train_pos)
            Xab = layout.augment_rows(Xb, center)
            coef_b = from_bf16(to_bf16(phb.coef.astype(np.float32)))
            pred16, _ = heldout_argmax(Xab, coef_b, train_pos)
            per_pred = float((pred32 == pred16)[held].mean())
            rows_equal = float(((pred32 == pred16) | ~held).all(axis=1).mean())
            rows_out.append((share, k, phase, sec["predict"], member_total, s_member, s_predict, bf16_phase,
                             ideal_phase, per_pred, rows_equal))
            print(f"t/N={share}: logits f32 {k['logits_f32']:.3f}s bf16 {k['logits_bf16']:.3f}s; "
                  f"gradient f32 {k['grad_f32']:.3f}s bf16 {k['grad_bf16']:.3f}s; "
                  f"predict f32 {k['predict_f32']:.3f}s bf16 {k['predict_bf16']:.3f}s; "
                  f"the package's member pass {member:.3f}s", flush=True)
    print()
    print("| t/N | phase (float32) | member pass in it | prediction in it | member x bf16 | prediction x bf16 "
          "| phase with bf16 (measured ratios) | speed-up | speed-up if every product ran 2x "
          "| held-out predictions equal | rows fully equal |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (share, k, phase, pred, member_total, s_member, s_predict, bf16_phase, ideal_phase, per_pred,
         rows_equal) in rows_out:
        print(f"| {share} | {phase:.2f} s | {member_total:.2f} s | {pred:.2f} s | {s_member:.2f} | {s_predict:.2f} "
              f"| {bf16_phase:.2f} s | {phase / bf16_phase:.2f}x | {phase / ideal_phase:.2f}x "
              f"| {100 * per_pred:.2f}% | {100 * rows_equal:.2f}% |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
