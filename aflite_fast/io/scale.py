"""The scale of X, measured only when a model failed and its likely cause is wanted."""
import numpy as np

#: Above this |X - column mean| the likely cause of a stuck solver is the scale of X.
LARGE_VALUE = 1e6


class DataScale:
    """The largest ``|X - center|`` of X and its column, computed on first use and kept.

    One chunked pass over X (memmaps too), paid only when a model failed and the cause is
    wanted.  ``X=None`` (e.g. data on a Dask cluster) knows nothing.
    """

    def __init__(self, X, center=None):
        self.X, self.center, self._value = X, center, None

    def largest(self):
        """(value, column), or None without X."""
        if self.X is None:
            return None
        if self._value is None and hasattr(self.X, "tocsr"):  # scipy sparse: column extremes
            from aflite_fast.io.sparse import column_stats

            _, value, col = column_stats(self.X)
            self._value = (value, col)
        if self._value is None:
            from aflite_fast.io.inputs import SCAN_CHUNK_BYTES

            n, d = self.X.shape
            chunk = max(1, SCAN_CHUNK_BYTES // max(1, d * self.X.dtype.itemsize))
            center = np.zeros(d) if self.center is None else np.asarray(self.center, dtype=np.float64)
            worst = np.zeros(d)
            for start in range(0, n, chunk):
                block = np.asarray(self.X[start:start + chunk], dtype=np.float64)
                np.maximum(worst, np.abs(block - center).max(axis=0), out=worst)
            col = int(np.argmax(worst))
            self._value = (float(worst[col]), col)
        return self._value

    def too_large(self):
        found = self.largest()
        return found is not None and found[0] > LARGE_VALUE

    def describe(self):
        value, col = self.largest()
        return f"|X - column mean| reaches {value:.3g} in column {col}"
