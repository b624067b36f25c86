"""A content fingerprint of a whole embedding matrix, computed while a scan reads its rows.

a. What is hashed: the rows' bytes in a canonical form, the source dtype in little-endian byte
   order (``>f4`` rows are hashed as the ``<f4`` bytes of the same values; float16 stays float16),
   cut into blocks of :func:`block_rows` rows.  Each block is hashed with SHA-256 and the
   fingerprint is the SHA-256 of a header (format tag, shape, canonical dtype, block rows)
   followed by the block digests in row order.
b. Same data, same fingerprint, however it is read: the blocks are fixed by the shape and the
   dtype alone, not by the reader's chunks.  :meth:`ContentHash.update` takes rows in chunks of
   any size (an open block is carried over to the next chunk), and a reader whose chunks lie on
   the block grid (``data.scan_rows``, the Dask scan) can hash blocks where the rows are and
   hand in the digests (:func:`block_digests`, :meth:`ContentHash.add_digests`).  So an array, a
   memmap, any chunk size, any Dask chunking or another file format of the same rows give the
   same hex digest (tests/test_watch.py).
c. No extra pass: ``data.scan_rows(X, fingerprint=...)`` gives each chunk to the hash as it
   validates it.  Hashing runs in worker threads (``hashlib`` releases the GIL on buffers
   larger than 2 KiB) while the scan checks and sums the same chunk, so the rows are read from
   disk once; benchmarks/RESULTS.md ("Validation scan with the content fingerprint") has the
   cost.
d. SHA-256 because OpenSSL's implementation uses the CPU's SHA extensions where they exist
   (1.7 GB/s per core measured on the development machine, against 0.7 GB/s for BLAKE2b).
"""
import hashlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

#: Bytes of rows per hashed block (rounded down to whole rows, at least one row).  Small
#: enough that a scan chunk is a whole number of blocks at every chunk size the scan uses.
BLOCK_BYTES = 256 << 10
_FORMAT = b"aflite_fast-content-v1"


def block_rows(n_features, itemsize):
    """Rows per hashed block for rows of ``n_features`` values of ``itemsize`` bytes."""
    return max(1, BLOCK_BYTES // max(1, int(n_features) * int(itemsize)))


def canonical_dtype(dtype):
    """``dtype`` in little-endian byte order (single-byte types unchanged)."""
    return np.dtype(dtype).newbyteorder("<")


def _canonical_rows(rows, dtype):
    return np.ascontiguousarray(rows, dtype=dtype)


def _digest(rows):
    return hashlib.sha256(rows).digest()


def _digest_run(rows, step):
    """Digests of consecutive blocks of ``step`` rows of ``rows`` (the last may be shorter)."""
    return [_digest(rows[i:i + step]) for i in range(0, rows.shape[0], step)]


def block_digests(rows, start, n_rows):
    """Digests of the hashed blocks making up ``rows``, rows ``start`` onwards of an ``n_rows``
    matrix, for a reader that hashes where the rows are (a Dask worker).

    ``start`` must be a multiple of :func:`block_rows`, and ``rows`` a whole number of blocks
    unless it ends the matrix.

    Returns
    -------
    list of bytes, one per block, in row order
    """
    rows = np.asarray(rows)
    step = block_rows(rows.shape[1], rows.dtype.itemsize)
    stop = start + rows.shape[0]
    if start % step or (stop % step and stop != n_rows):
        raise ValueError(f"rows [{start}, {stop}) are not on the {step}-row block grid of the fingerprint")
    return _digest_run(_canonical_rows(rows, canonical_dtype(rows.dtype)), step)


class ContentHash:
    """Fingerprint of an (N, d) matrix fed with its rows in order (see the module docstring).

    Parameters
    ----------
    shape : tuple (N, d)
    dtype : numpy dtype of the rows as stored
    n_threads : int, optional
        Threads hashing the blocks of a chunk (default: the cores available).

    Use as a context manager (or call :meth:`close`) so that the threads end with the scan,
    also when it fails.
    """

    def __init__(self, shape, dtype, n_threads=None):
        from aflite_fast.runtime.threads import effective_n_threads

        self.shape = (int(shape[0]), int(shape[1]))
        self.dtype = canonical_dtype(dtype)
        self.block_rows = block_rows(self.shape[1], self.dtype.itemsize)
        self._n_threads = max(1, effective_n_threads(n_threads))
        self._pool = None
        self._rows_seen = 0       # rows handed in so far
        self._digests = []        # block digests in row order, up to the pending ones
        self._open = None         # hashlib object of a block begun in the previous chunk
        self._open_rows = 0
        self._pending = []        # futures of the last chunk's digests (it stays referenced until done)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Stop the hashing threads (waiting for those running)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def update(self, rows):
        """Hash the next rows (any number; they follow the rows given before).

        Returns at once: the chunk's whole blocks are hashed in threads while the caller goes on
        with the same rows; the previous chunk's hashing is waited for first, so at most one
        chunk is held.
        """
        rows = np.asarray(rows)
        if rows.ndim != 2 or rows.shape[1] != self.shape[1]:
            raise ValueError(f"rows of shape {rows.shape} do not fit a matrix of shape {self.shape}")
        self._wait_pending()
        rows = _canonical_rows(rows, self.dtype)
        m = rows.shape[0]
        i = 0
        if self._open is not None:  # finish the block the previous chunk began
            i = min(m, self.block_rows - self._open_rows)
            self._open.update(rows[:i])
            self._open_rows += i
            if self._open_rows == self.block_rows:
                self._digests.append(self._open.digest())
                self._open, self._open_rows = None, 0
        whole = (m - i) // self.block_rows * self.block_rows
        if whole:
            self._submit(rows[i:i + whole])
        if i + whole < m:  # a block that the next chunk continues
            self._open = hashlib.sha256(rows[i + whole:])
            self._open_rows = m - i - whole
        self._rows_seen += m

    def add_digests(self, start, digests, n_rows):
        """Take the digests of rows [start, start + n_rows) hashed elsewhere (:func:`block_digests`).

        ``start`` must be where the rows handed in so far end, on the block grid.
        """
        if start != self._rows_seen or self._open is not None:
            raise ValueError(f"digests of rows from {start} arrive after {self._rows_seen} rows, or off the block grid")
        self._wait_pending()
        self._digests.extend(digests)
        self._rows_seen += int(n_rows)

    def hexdigest(self):
        """The fingerprint (64 hex digits); every row must have been handed in."""
        self._wait_pending()
        if self._rows_seen != self.shape[0]:
            raise RuntimeError(f"the fingerprint saw {self._rows_seen} of {self.shape[0]} rows")
        digests = list(self._digests)
        if self._open is not None:
            digests.append(self._open.digest())
        h = hashlib.sha256(_FORMAT)
        h.update(f"|{self.shape[0]}x{self.shape[1]}|{self.dtype.str}|{self.block_rows}|".encode())
        for d in digests:
            h.update(d)
        return h.hexdigest()

    def _submit(self, rows):
        """Hash the whole blocks of ``rows``: in threads, one share of the blocks each, unless
        one thread or one block."""
        n_blocks = rows.shape[0] // self.block_rows
        if self._n_threads == 1 or n_blocks < 2:
            self._digests.extend(_digest_run(rows, self.block_rows))
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._n_threads, thread_name_prefix="aflite-fingerprint")
        per = -(-n_blocks // self._n_threads) * self.block_rows
        self._pending = [self._pool.submit(_digest_run, rows[s:s + per], self.block_rows)
                         for s in range(0, rows.shape[0], per)]

    def _wait_pending(self):
        pending, self._pending = self._pending, []
        for future in pending:
            self._digests.extend(future.result())


def labels_digest(y):
    """SHA-256 (64 hex digits) of labels ``y``: their classes (sorted, as JSON) and each row's
    class index.  The same labels read from any file format give the same digest (``1`` from a
    text file and from an int32 ``.npy`` are one class); other classes, or the same classes on
    other rows, give another."""
    import json

    classes, codes = np.unique(np.asarray(y), return_inverse=True)
    h = hashlib.sha256(b"aflite_fast-labels-v1|")
    h.update(json.dumps(classes.tolist(), default=str).encode())
    h.update(b"|")
    h.update(np.ascontiguousarray(codes.reshape(-1), dtype="<i8").tobytes())
    return h.hexdigest()
