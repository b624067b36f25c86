"""A phase's rows gathered from X into the kernel's row buffers (float32, centred, with the
intercept column), and the buffer kept from phase to phase (:class:`Workspace`: the next phase's
rows are a subset of this one's, compacted in place)."""
import numpy as np

from aflite_fast.core import layout
from aflite_fast.core.preconditioning import KeptPreconditioner
from aflite_fast.io import _rowscan
from aflite_fast.io.inputs import gather_rows
from aflite_fast.phase.multiple_choice import candidate_rows, gather_items
from aflite_fast.phase.plan import phase_shape


def gather(X, rows, center, out, chunk_bytes=None, position_bias=False, n_threads=1):
    """The kernel rows of ``rows`` (sorted; items of multiple-choice X: K rows each) into ``out``."""
    if X.ndim == 3:
        return gather_items(X, rows, center, out, position_bias, chunk_bytes, n_threads)
    return gather_rows(X, rows, center, out, chunk_bytes, n_threads)


def gather_new(X, rows, center, chunk_bytes=None, position_bias=False, n_threads=1):
    """:func:`gather` of ``rows`` into new kernel rows (``layout.empty_rows``), both on
    ``n_threads`` threads."""
    G, D, _ = phase_shape(X, 1, position_bias)
    out = layout.empty_rows(len(rows) * G, D, n_threads=n_threads)
    return gather(X, rows, center, out, chunk_bytes, position_bias, n_threads)


class Workspace:
    """Memory that successive phases reuse: the buffer of the block's gathered rows.

    Each phase gathers (nearly) every active row into float32; the active set only shrinks,
    so the first phase's buffer serves all the later ones and the system does not have to
    map and zero gigabytes again every phase (measured: 0.25-6 s for 2.3 GB).  The buffer
    also remembers which rows of which X (and centre) it holds: a later phase whose rows are
    a subset of them (every phase after the first, and every null pass, of an AFLite run)
    moves them to the front in place instead of reading X again (:meth:`gather`), the same
    float32 values a fresh gather would write; a preconditioner's sample of those rows is
    copied from it (:meth:`take`).  It also keeps small X's phase preconditioner
    (:class:`~aflite_fast.core.preconditioning.KeptPreconditioner`), and larger X's last one with
    its active rows (:meth:`sampled_preconditioner`: the chance check and the null score the
    same rows again).  It changes memory reuse, reads and work, never results.
    """

    def __init__(self):
        self.buffer = None
        self._held = None  # (X, center, rows, n_columns) of the rows in the buffer, if any
        #: the whole-X phase preconditioner kept for the next phase (aflite_fast.phase.local)
        self.preconditioner = KeptPreconditioner()
        self._sampled = None  # (what it was built from, active rows, preconditioner): see sampled_preconditioner
        self._row_gram = None  # (X, center, RowGram) of small models' phases: see row_gram

    def rows(self, n_rows, n_columns, n_threads=1):
        """An (n_rows, n_columns) row array in the workspace's buffer (grown if too small);
        whatever the buffer held is forgotten."""
        self._held = None
        need = layout.row_buffer_size(n_rows, n_columns)
        if self.buffer is None or self.buffer.size < need:
            self.buffer = None  # let the old one go before the new one is allocated
            self.buffer = layout.row_buffer(n_rows, n_columns)
        return layout.empty_rows(n_rows, n_columns, self.buffer, n_threads)

    def gather(self, X, rows, center, chunk_bytes=None, position_bias=False, n_threads=1):
        """:func:`gather` of ``rows`` (items of multiple-choice X) into the workspace's buffer.

        When the buffer holds rows of the same X and centre of which ``rows`` (sorted) is a
        subset, they are moved down in place (:func:`compact_rows`); otherwise X is read.
        """
        rows = np.asarray(rows, dtype=np.int64)
        G, D, _ = phase_shape(X, 1, position_bias)
        key = (D, bool(position_bias))
        kept = self._subset_of_held(X, rows, center, key)
        if kept is None:
            out = self.rows(rows.size * G, D, n_threads)
            gather(X, rows, center, out, chunk_bytes, position_bias, n_threads)
        else:
            compact_rows(layout.padded_rows(self.buffer, self._held[2].size * G, D),
                         candidate_rows(kept, G) if G > 1 else kept)
            # the same first rows; their padding moved with them and is zero already (empty_rows
            # would write it again: a pass over every row's last cache line)
            out = layout.padded_rows(self.buffer, rows.size * G, D)[:, :D]
        self._held = (X, np.array(center, copy=True), rows.copy(), key)
        return out

    def take(self, X, rows, center, position_bias=False):
        """:func:`gather` of ``rows`` (sorted; items of multiple-choice X) into new rows
        (rows.size x K, D) copied from the buffer, or None unless the buffer holds them all
        (rows of the same X and centre): the same float32 values a gather from X would write,
        without reading X (a preconditioner's sample of a later phase: thousands of rows
        spread over X, each its own read of a file)."""
        rows = np.asarray(rows, dtype=np.int64)
        G, D, _ = phase_shape(X, 1, position_bias)
        pos = self._subset_of_held(X, rows, center, (D, bool(position_bias)))
        if pos is None:
            return None
        full = layout.padded_rows(self.buffer, self._held[2].size * G, D)
        # indexing, not np.take: np.take copies a strided source whole (the buffer) first
        return full[candidate_rows(pos, G) if G > 1 else pos, :D]

    def sampled_preconditioner(self, key, active, build):
        """The phase preconditioner of ``active`` (sorted rows) estimated from a sample of
        them: the one built last if it was built for the same ``active`` and ``key`` (X, its
        centre and everything else it is a function of), else ``build()``, kept in its place.

        The chance check and the null score the phase's rows again under permuted labels;
        the preconditioner does not depend on the labels, so each of those scorings would
        rebuild the same bits (a second-moment pass over the sample and an inverse)."""
        kept = self._sampled
        if kept is not None:
            (kX, kcenter, krest), kactive, precond = kept
            X, center, rest = key
            if kX is X and krest == rest and np.array_equal(kcenter, center) and np.array_equal(kactive, active):
                return precond
        self._sampled = None  # let the old one go before the new one is built
        precond = build()
        X, center, rest = key
        self._sampled = ((X, np.array(center, copy=True), rest), np.array(active, copy=True), precond)
        return precond

    def row_gram(self, X, rows, center, build):
        """The :class:`~aflite_fast.core.row_space.RowGram` holding ``rows`` (sorted rows of X
        centred by ``center``): the one built last if it holds them (a run's active rows only
        shrink), else ``build()``, kept in its place.  Its entries do not depend on which rows
        it was built for, so neither does any result."""
        kept = self._row_gram
        if kept is not None:
            kX, kcenter, gram = kept
            if kX is X and np.array_equal(kcenter, center) and gram.lookup(rows) is not None:
                return gram
        self._row_gram = None  # let the old one go before the new one is built
        gram = build()
        self._row_gram = (X, np.array(center, copy=True), gram)
        return gram

    def _subset_of_held(self, X, rows, center, key):
        """Positions of ``rows`` among the held rows, or None if they are not all held."""
        if self._held is None:
            return None
        hX, hcenter, hrows, hkey = self._held
        if hX is not X or hkey != key or not np.array_equal(hcenter, center) or rows.size > hrows.size:
            return None
        pos = np.searchsorted(hrows, rows)
        if pos.size and (pos[-1] >= hrows.size or not np.array_equal(hrows[np.minimum(pos, hrows.size - 1)], rows)):
            return None
        return pos


def compact_rows(full, keep):
    """Move row ``keep[i]`` of ``full`` to row i for every i, in place.

    ``keep`` is increasing, so ``keep[i] >= i``: rows are moved in increasing order and a
    row is never overwritten before it has been moved.  Runs of consecutive rows move as one
    slice (an AFLite phase removes scattered rows, so runs are long).
    """
    keep = np.asarray(keep, dtype=np.int64)
    if keep.size == 0:
        return full
    if full.dtype == np.float32 and full.flags.c_contiguous and full.ndim == 2:
        # compiled: one memmove a run (NumPy copies overlapping slices through a temporary)
        _rowscan.compact_float_rows(full, np.ascontiguousarray(keep))
        return full
    breaks = np.flatnonzero(np.diff(keep) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [keep.size]))
    for a, b in zip(starts.tolist(), ends.tolist()):
        src = int(keep[a])
        if src != a:
            full[a:b] = full[src:src + (b - a)]  # overlapping slices: NumPy copies as if via a temporary
    return full
