"""asv benchmarks: out-of-fold probabilities and the deterministic GEMM's shapes.

``OOF`` times ``oof_predict_proba`` on skewed data at a small size and at the reference size
(N=50000, d=768, 5 classes, 5 folds; scikit-learn's ``cross_val_predict`` there takes about
40 s, so the ratio is measured by ``benchmarks/bench_oof.py``, not inside asv).

``Gemm`` times the two products of a solver round, logits (rows x (d+1) @ (d+1) x N) and
gradient ((d+1) x rows @ rows x N with the rows transposed), for the widths that occur: 25
columns (5 folds x 5 classes, the narrow gradient path) and 192 (64 partitions x 3 classes,
the general path).
"""
import numpy as np

from aflite_fast.core import _kernel
from aflite_fast.filtering.oof import oof_predict_proba

from skewed_data import make_skewed_embeddings

SEED = 0
N_THREADS = 2
# name: (N, d, classes)
OOF_SIZES = {"small": (5000, 128, 5), "reference": (50000, 768, 5)}


class OOF:
    """Five-fold out-of-fold probabilities, all folds in one batched kernel call."""

    params = [list(OOF_SIZES)]
    param_names = ["size"]
    number = 1
    repeat = (1, 3, 600.0)
    timeout = 900

    def setup_cache(self):
        return {size: make_skewed_embeddings(n, d, c, random_state=SEED)
                for size, (n, d, c) in OOF_SIZES.items()}

    def setup(self, cache, size):
        self.X, self.y = cache[size]

    def time_oof_predict_proba(self, cache, size):
        oof_predict_proba(self.X, self.y, cv=5, random_state=SEED, n_jobs=N_THREADS)

    def peakmem_oof_predict_proba(self, cache, size):
        oof_predict_proba(self.X, self.y, cv=5, random_state=SEED, n_jobs=N_THREADS)


class Gemm:
    """One logits and one gradient product at n=20000 rows, d+1=769 (ROW_BLOCK K-blocks)."""

    params = [[25, 192], [1, 2]]
    param_names = ["columns", "threads"]
    number = 3
    repeat = (3, 7, 60.0)

    def setup(self, columns, threads):
        rng = np.random.default_rng(SEED)
        n, D = 20000, 769
        self.X = rng.standard_normal((n, D), dtype=np.float32)
        self.W = rng.standard_normal((D, columns), dtype=np.float32)
        self.Z = np.empty((n, columns), np.float32)
        self.G = np.empty((D, columns), np.float32)
        self.col_blocks = np.array([0, 256, 512, D], np.int64)
        self.row_blocks = np.append(np.arange(0, n, 256), n).astype(np.int64)

    def time_logits(self, columns, threads):
        _kernel.sgemm(False, self.X, self.W, self.Z, self.col_blocks, False, threads)

    def time_gradient(self, columns, threads):
        _kernel.sgemm(True, self.X, self.Z, self.G, self.row_blocks, False, threads)
