"""Input files watched during a run: one that changes is noticed before its results are used.

a. A run reads its embeddings many times (a memory map, or positioned reads, phase after
   phase), so a file rewritten in place while it runs would give phases that mix old and new
   rows.  :class:`InputWatch` takes the status of every file behind the inputs when the run
   starts (:func:`source_files`) and :meth:`InputWatch.check` compares it at every phase
   boundary (``aflite``) and before a command commits its outputs; a difference is a
   ValueError naming the file, so the command line exits with code 2 and commits nothing, and
   a checkpoint is not saved for the phase that may have read mixed rows.
b. What counts as a change: the file's size, its modification time (nanoseconds), its inode
   or device (the name now points at another file: replaced by a rename) or its removal.  A
   writer that restores both the size and the modification time (``touch -r``) is not seen;
   a resumed run is protected all the same, since the checkpoint holds a fingerprint of every
   row (:mod:`aflite_fast.io.fingerprint`).  Labels and group files are read whole when a
   command starts, so a change to them cannot mix rows, but the outputs would describe files
   that no longer hold what was used: commands watch them too.
c. The status is read with ``os.stat``: a few microseconds per file and check.
"""
import os

import numpy as np

from aflite_fast.io.arrayfile import split_key


def source_files(X):
    """Absolute paths of the files holding the rows of input ``X``, in order; [] for data in memory.

    Knows a path (``FILE.npz:KEY`` included), a list of paths (shards), an ``np.memmap`` and an
    array whose base is one, and a reader of stored rows that lists its files (a ``files``
    attribute beside ``read_rows``).  A directory or glob gives the files of the embeddings it
    holds (:func:`aflite_fast.io.formats.spec_files`), [] if none.
    """
    if isinstance(X, (str, os.PathLike)):
        path = split_key(X)[0]
        if os.path.isfile(path):
            return [os.path.abspath(path)]
        from aflite_fast.io.formats import spec_files  # a directory or glob of shards, a dataset, FILE.safetensors:KEY

        return spec_files(X)
    if hasattr(X, "read_rows") and hasattr(X, "files"):
        return [os.path.abspath(os.fspath(f)) for f in X.files]
    if isinstance(X, (list, tuple)) and X and all(isinstance(p, (str, os.PathLike)) for p in X):
        return [f for p in X for f in source_files(p)]
    while isinstance(X, np.ndarray):
        if isinstance(X, np.memmap) and getattr(X, "filename", None):
            return [os.path.abspath(X.filename)]
        X = X.base
    return []


def describe(files):
    """How messages name an input: its file(s), or "an in-memory array"."""
    if not files:
        return "an in-memory array"
    shown = ", ".join(repr(f) for f in files[:3])
    return shown + (f" and {len(files) - 3} more file(s)" if len(files) > 3 else "")


def _status(path):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _change(before, after):
    """What differs between two statuses, in words (None when nothing does)."""
    if after is None:
        return "it was removed"
    if before[:2] != after[:2]:
        return "its name now points at another file"
    if before[2] != after[2]:
        return f"its size went from {before[2]} to {after[2]} bytes"
    if before[3] != after[3]:
        return "it was modified"
    return None


class InputWatch:
    """The status of the files behind a run's inputs, taken now; :meth:`check` compares it.

    Parameters
    ----------
    inputs : iterable of (label, input)
        ``label`` names the input in messages (``"X"``, or a command's ``"EMB"``, ``"--groups"``);
        ``input`` is anything :func:`source_files` knows (a path, a memmap, ...) or None.
    """

    def __init__(self, inputs):
        self._watched = []
        for label, value in inputs:
            if value is None:
                continue
            for path in source_files(value):
                status = _status(path)
                if status is not None:
                    self._watched.append((label, path, status))

    @property
    def files(self):
        """The watched paths."""
        return [path for _, path, _ in self._watched]

    def check(self):
        """Raise ValueError naming the first watched file that changed since the watch began."""
        for label, path, status in self._watched:
            change = _change(status, _status(path))
            if change is not None:
                raise ValueError(f"{label} file {path!r} changed while this run was using it ({change}); its "
                                 "results would mix old and new data, so the run stops: run it again once the "
                                 "file no longer changes")
