"""Positioned reads of a file into a caller's buffer, with a file that shrinks reported in words.

a. A memory map of a file that another process truncates turns every access past the new end
   into SIGBUS, which kills the process with no message (exit 135).  A positioned read
   (``os.preadv``) of the same bytes returns short instead, so the reader can stop with an
   :class:`InputChangedError` naming the file: the command line exits with code 2 and one line.
b. ``os.preadv`` reads straight into the destination (a NumPy array's memory), so a read costs
   the same single copy from the page cache that touching a memory map costs.
c. A :class:`SharedFile` opens its file on first use and can be pickled (the descriptor is not
   part of its state), so readers built on it can be sent to other processes.  Open
   descriptors are counted and closed together past :data:`MAX_OPEN` (a collection of many
   thousands of shards would otherwise exhaust the process's descriptors).
"""
import os
import threading

#: Descriptors kept open by all SharedFile objects together before they are closed.
MAX_OPEN = 256
#: Largest single read Linux performs (reads of more return short).
_MAX_READ = 0x7FFFF000

_open_files = set()
#: Reentrant: a SharedFile collected while this thread holds the lock (a garbage collection
#: set off by an allocation inside it) closes itself through __del__, which takes it again.
_lock = threading.RLock()


class InputChangedError(ValueError):
    """An input file ended before the bytes its header promised: it was truncated or replaced
    while a run was reading it."""


class SharedFile:
    """A read-only file opened on first use, read with positioned reads.

    Parameters
    ----------
    path : str
    label : str
        How messages name the file's role, e.g. ``"embeddings"``.
    """

    def __init__(self, path, label="embeddings"):
        self.path = os.path.abspath(os.fspath(path))
        self.label = label
        self._fd = None

    def __getstate__(self):
        return {"path": self.path, "label": self.label}

    def __setstate__(self, state):
        self.__init__(state["path"], state["label"])

    def fileno(self):
        fd = self._fd
        if fd is None:
            with _lock:
                if self._fd is None:
                    if len(_open_files) >= MAX_OPEN:
                        for other in list(_open_files):
                            other._close_locked()
                    try:
                        self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
                    except OSError as exc:
                        raise InputChangedError(f"cannot read {self.label} file {self.path!r}: {exc.strerror}; "
                                                "it was removed or replaced while this run was using it") from None
                    _open_files.add(self)
                fd = self._fd
        return fd

    def _close_locked(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        _open_files.discard(self)

    def close(self):
        with _lock:
            self._close_locked()

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown
            pass

    def read_into(self, buffer, offset):
        """Fill ``buffer`` (a writable C-contiguous array) with the file's bytes from ``offset``.

        Raises
        ------
        InputChangedError
            When the file ends first (it was truncated during the run), naming the file.
        """
        view = memoryview(buffer).cast("B")
        total = len(view)
        done = 0
        while done < total:
            try:
                got = os.preadv(self.fileno(), [view[done:done + _MAX_READ]], offset + done)
            except OSError as exc:
                raise InputChangedError(f"cannot read {self.label} file {self.path!r}: {exc.strerror}") from None
            if got == 0:
                size = os.fstat(self.fileno()).st_size
                raise InputChangedError(
                    f"{self.label} file {self.path!r} ended at byte {size} while this run read bytes up to "
                    f"{offset + total}: it was truncated or rewritten during the run; run again once it no "
                    "longer changes")
            done += got
        return buffer
