"""Files written all-or-nothing: a command's outputs *as a set* (:class:`OutputSet`), or one
file alone (:func:`write_file_atomically`, e.g. a checkpoint).

Layout of an output directory DIR (``--out``) after a run::

    DIR/keep.npy     -> .aflite/current/keep.npy     one symbolic link per output name
    DIR/scores.npy   -> .aflite/current/scores.npy
    DIR/report.json  -> .aflite/current/report.json
    DIR/.aflite/current -> set-20260102T101112Z-1234-ab12cd   the one link a commit switches
    DIR/.aflite/set-20260102T101112Z-1234-ab12cd/             the files themselves
    DIR/.aflite/lock                                          flock'ed while a run writes DIR

a. Staging happens inside DIR (``DIR/.aflite/set-*``), so every rename stays on DIR's file
   system: DIR may be a mount point (tmpfs, a container volume) whose parent is another device.
b. A commit makes the new set whole and durable (each file, then its folder, fsync'ed), then
   switches ``current`` with one ``rename()`` of a new link over it.  Each ``DIR/NAME``
   resolves through ``current``, so at any instant a reader sees the whole old set or the whole
   new one, whichever step a kill (SIGKILL included) interrupts: before that rename nothing a
   reader can see has changed, after it the new set is complete.  Resolving ``current`` once
   (``os.path.realpath(DIR/.aflite/current)``) pins one set for a reader of several files.
c. Why links: ``rename()`` switches one name atomically and the set has several names.  DIR
   itself cannot be swapped for a fresh directory (it may be a mount point or someone's working
   directory, and staging must stay on its device); a manifest written last, or a journal
   replayed by the next run, would leave the plain names mixed for every reader that does not
   know our format until that recovery.  A link switch needs neither reader cooperation nor
   recovery.
d. A run holds an exclusive ``flock`` on ``DIR/.aflite/lock`` from before its first phase to the
   end of its commit, and a second run on DIR refuses (ValueError) rather than silently winning.
   The kernel drops the lock when its process dies, however it dies.
e. Stale files: holding the lock, a run knows that no live process owns anything in
   ``.aflite`` except ``current`` and its target, so it deletes every other entry there (staging
   folders of killed runs, a previous set left by a kill just after the switch) and our
   temporary or dangling links in DIR.  No guessing by age or process id is needed.
f. A failed or interrupted run deletes its staging folder; if DIR holds no committed set it also
   deletes ``.aflite`` and the directories it created, so a failed first run leaves nothing.
g. Fallbacks: on a file system without symbolic links (FAT, some SMB shares) each file is
   renamed into DIR on its own: every file is whole, the set is not atomic.  Without ``fcntl``
   (Windows) or where ``flock`` is refused (some network file systems) runs are not serialised
   and stale staging folders are left in place.
h. Adding to a set (``extend=True``, ``aflite-fast report DIR`` adding report.png): holding the
   lock, the run hard-links (or copies) every file of the committed set it does not rewrite
   into its staging folder, so the new set is the old one plus the new files, and is switched
   in the same way.  A later run without the added name drops it with its set (its link goes).
i. One file (:func:`write_file_atomically`): written under a hidden temporary name in the
   file's own directory, fsync'ed, renamed over the file and the directory fsync'ed; a kill
   leaves the old file or the new one.  Temporary files of the same name left by processes
   that no longer run are deleted by the next write.
"""
import errno
import json
import os
import shutil
import time
import uuid

#: Hidden folder inside an output directory holding the sets, the switch link and the lock.
STATE_DIR = ".aflite"
_LOCK = "lock"
_CURRENT = "current"
_SET_PREFIX = "set-"
#: Temporary links (in DIR and in STATE_DIR) are created under this prefix and renamed.
_TMP_LINK_PREFIX = ".aflite-link-"

# A command's outputs being published (a commit in progress) and how many were published in
# this process: the command line's signal handler lets a command that has begun to publish its
# outputs finish, so that no run publishes them and then reports that it wrote nothing.
_publishing = 0
_published = 0


def publishing():
    """(commits in progress, outputs published) in this process (see :class:`OutputSet`)."""
    return _publishing, _published


class _Publishing:
    """``with``: a commit of outputs is in progress; counted as published when it succeeds."""

    def __enter__(self):
        global _publishing
        _publishing += 1

    def __exit__(self, exc_type, exc, tb):
        global _publishing, _published
        _publishing -= 1
        if exc_type is None:
            _published += 1
        return False


class OutputSet:
    """Files of one run, staged inside ``path`` and switched in together when the block ends.

    Used as a context manager around the whole computation: entering checks that ``path`` is
    writable and takes its lock (so a bad ``--out`` fails before any work); leaving without an
    exception commits the set, leaving with one (Ctrl-C and SIGTERM included) discards it and
    leaves ``path`` as it was.  See the module docstring for the layout and its guarantees.

    Parameters
    ----------
    path : str or path-like
        Output directory; created (with its parents) if missing.
    names : sequence of str
        The file names of the set; each must be written before the block ends, and no other.
    label : str, default="output directory"
        How error messages name ``path`` (the command line passes ``"--out"``).
    extend : bool, default=False
        Keep the files of the committed set that ``names`` does not list: they are carried into
        the new set (module docstring, h) and :meth:`file` gives their staged path to read.
    before_commit : callable, optional
        Called with no argument just before the set is switched in; an exception it raises
        discards the set instead (e.g. :meth:`aflite_fast.io.watch.InputWatch.check`: inputs
        that changed during the run).

    Examples
    --------
    >>> with OutputSet("out", ["a.txt", "b.txt"]) as out:   # doctest: +SKIP
    ...     out.save_text("a.txt", "first")
    ...     out.save_text("b.txt", "second")
    """

    def __init__(self, path, names, *, label="output directory", extend=False, before_commit=None):
        self.path = os.path.abspath(os.fspath(path))
        self.names = tuple(names)
        self.label = label
        self.extend = extend
        self.before_commit = before_commit
        for name in self.names:
            if not name or name.startswith(".") or os.path.basename(name) != name:
                raise ValueError(f"output name {name!r} must be a plain, non-hidden file name")
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"output names repeat: {self.names}")
        self._state = os.path.join(self.path, STATE_DIR)
        self._created = []      # directories this run created, outermost first
        self._lock_fd = None
        self._locked = False
        self._staging = None
        self._links = True
        self._committed = False

    # -- entering: writability, lock, stale files, staging -------------------------------
    def __enter__(self):
        if os.path.lexists(self.path) and not os.path.isdir(self.path):
            raise ValueError(f"{self.label} {self.path!r} exists and is not a directory")
        try:
            self._open()
        except BaseException as exc:
            self._close()
            if isinstance(exc, OSError):
                raise ValueError(f"cannot write to {self.label} {self.path!r}: {exc}") from exc
            raise
        return self

    def _open(self):
        self._make_dirs(self.path)
        self._make_dirs(self._state)
        for name in self.names:
            if os.path.isdir(os.path.join(self.path, name)) and not os.path.islink(os.path.join(self.path, name)):
                raise ValueError(f"{self.label} {self.path!r} already holds a directory named {name!r}")
        self._acquire_lock()
        if self._locked:
            self._remove_stale()
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self._staging = os.path.join(self._state, f"{_SET_PREFIX}{stamp}-{os.getpid()}-{uuid.uuid4().hex[:6]}")
        os.mkdir(self._staging)
        probe = os.path.join(self._staging, ".probe")
        try:
            os.symlink("probe-target", probe)
        except (OSError, NotImplementedError):
            self._links = False  # no symbolic links here: per-file renames (docstring, g)
        else:
            os.unlink(probe)
        if self.extend:
            self._carry_current()

    def _carry_current(self):
        """Link the committed set's other files into the staging folder (docstring, h)."""
        target = self._current_target()
        carried = sorted(self._current_names() - set(self.names))
        for name in carried:
            source = os.path.join(self._state, target, name)
            try:
                os.link(source, os.path.join(self._staging, name))
            except OSError:  # no hard links here: a copy is as good (the set is never modified)
                shutil.copy2(source, os.path.join(self._staging, name))
        self.names += tuple(carried)

    def _make_dirs(self, path):
        missing = []
        while not os.path.isdir(path):
            missing.append(path)
            path = os.path.dirname(path)
        for d in reversed(missing):
            try:
                os.mkdir(d)
            except FileExistsError:
                if not os.path.isdir(d):
                    raise
                continue  # another run made it a moment ago: not ours to remove
            self._created.append(d)

    def _acquire_lock(self):
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no flock, runs are not serialised
            return
        lock_path = os.path.join(self._state, _LOCK)
        for _ in range(16):
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_pid(fd)
                os.close(fd)
                raise ValueError(
                    f"{self.label} {self.path!r} is in use by another aflite-fast run"
                    f"{f' (pid {holder})' if holder else ''}; wait for it to end or choose another "
                    "directory") from None
            except OSError as exc:
                os.close(fd)
                if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                    return  # the file system refuses locks (docstring, g)
                raise
            # A run that failed before committing anything deletes the whole state folder,
            # lock file included: if that happened between our open() and flock(), we hold a
            # lock on a deleted file, so start again on the current one.
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(lock_path))
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self._lock_fd, self._locked = fd, True
                return
            os.close(fd)
            self._make_dirs(self._state)
        raise ValueError(f"{self.label} {self.path!r}: could not take its lock (it keeps being replaced)")

    def _current_target(self):
        try:
            return os.readlink(os.path.join(self._state, _CURRENT))
        except OSError:
            return None

    def _remove_stale(self):
        """Delete what killed runs left (we hold the lock, so nobody else owns it)."""
        keep = {_LOCK, _CURRENT, self._current_target()}
        for entry in os.listdir(self._state):
            if entry not in keep:
                _remove(os.path.join(self._state, entry))
        self._remove_stray_links(self._current_names())

    def _current_names(self):
        target = self._current_target()
        if target is None:
            return set()
        try:
            return set(os.listdir(os.path.join(self._state, target)))
        except OSError:
            return set()

    def _remove_stray_links(self, names):
        """Delete our temporary links in DIR and links to names the current set lacks."""
        for entry in os.listdir(self.path):
            full = os.path.join(self.path, entry)
            if entry.startswith(_TMP_LINK_PREFIX) and os.path.islink(full):
                os.unlink(full)
            elif entry not in names and _is_our_link(full, entry):
                os.unlink(full)

    # -- writing into the staged set -----------------------------------------------------
    def file(self, name):
        """Path of ``name`` in the staged set (write it completely before the block ends)."""
        if name not in self.names:
            raise ValueError(f"{name!r} is not one of this output set's names {self.names}")
        if self._staging is None:
            raise RuntimeError("OutputSet.file() is only valid inside the with block")
        return os.path.join(self._staging, name)

    def write(self, name, writer):
        """Call ``writer(path)`` to write ``name`` (e.g. ``figure.savefig``)."""
        writer(self.file(name))

    def save_npy(self, name, array):
        """Save ``array`` as ``name`` in .npy format (no pickles)."""
        import numpy as np

        with open(self.file(name), "wb") as fh:
            np.save(fh, array, allow_pickle=False)

    def save_json(self, name, obj):
        """Save ``obj`` as indented JSON (NumPy scalars and arrays become plain values)."""
        with open(self.file(name), "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, default=_jsonable)
            fh.write("\n")

    def save_text(self, name, text):
        """Save ``text`` as UTF-8, newlines as given."""
        with open(self.file(name), "w", encoding="utf-8", newline="") as fh:
            fh.write(text)

    # -- leaving: commit or discard ------------------------------------------------------
    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                with _Publishing():
                    self._commit()
        finally:
            self._close()
        return False

    def _commit(self):
        missing = [n for n in self.names if not os.path.isfile(os.path.join(self._staging, n))]
        if missing:
            raise RuntimeError(f"output set incomplete: {missing} not written")
        if self.before_commit is not None:
            self.before_commit()
        for name in self.names:
            _fsync_path(os.path.join(self._staging, name))
        _fsync_path(self._staging)
        if not self._links:
            for name in self.names:
                os.replace(os.path.join(self._staging, name), os.path.join(self.path, name))
            self._committed = True
            _fsync_path(self.path)
            _remove(self._staging)
            return
        # 1. A link for every name: each resolves through `current`, so until the switch a
        # new name reads as absent, which is what the old set says.  Plain files (not ours)
        # are replaced only after the switch, where a new file is what a reader expects.
        plain = []
        for name in self.names:
            full = os.path.join(self.path, name)
            if _is_our_link(full, name):
                continue
            if os.path.lexists(full) and not os.path.islink(full):
                plain.append(name)
            else:
                self._place_link(name)
        # 2. The switch: one rename.
        old = self._current_target()
        new_link = os.path.join(self._state, f"{_TMP_LINK_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:6]}")
        os.symlink(os.path.basename(self._staging), new_link)
        os.replace(new_link, os.path.join(self._state, _CURRENT))
        self._committed = True
        # 3. Tidying; what a failure or a kill leaves here, the next run removes (docstring, e).
        try:
            _fsync_path(self._state)
            for name in plain:
                self._place_link(name)
            self._remove_stray_links(set(self.names))
            if old is not None and old != os.path.basename(self._staging):
                _remove(os.path.join(self._state, old))
            _fsync_path(self.path)
        except OSError:
            pass

    def _place_link(self, name):
        tmp = os.path.join(self.path, f"{_TMP_LINK_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:6]}")
        os.symlink(_link_target(name), tmp)
        os.replace(tmp, os.path.join(self.path, name))

    def _close(self):
        try:
            if not self._committed:
                if self._staging is not None:
                    _remove(self._staging)
                if self._locked:
                    if os.path.isdir(self.path):
                        self._remove_stray_links(self._current_names())  # links placed for us
                    if self._current_target() is None:
                        # nothing was ever committed here: leave no trace (lock file included)
                        _remove(self._state)
                for d in reversed(self._created):
                    try:
                        os.rmdir(d)  # only if empty
                    except FileNotFoundError:
                        continue
                    except OSError:
                        break
        finally:
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd, self._locked = None, False


def write_file_atomically(path, writer, *, output=False):
    """Write the one file ``path`` all-or-nothing (module docstring, i).

    Parameters
    ----------
    path : str or path-like
        The file; its directory must exist.
    writer : callable
        ``writer(tmp)`` writes the complete file at the path ``tmp`` (beside ``path``).
    output : bool
        The file is a command's output (not, e.g., a checkpoint): its rename is counted as
        published (:func:`publishing`).

    A failure (in ``writer`` too) removes the temporary file and leaves ``path`` untouched.
    """
    path = os.path.abspath(os.fspath(path))
    folder, name = os.path.split(path)
    prefix = f".{name}."
    for entry in os.listdir(folder):  # left by a process killed between its write and rename
        pid = entry[len(prefix):].split(".", 1)[0]
        if entry.startswith(prefix) and entry.endswith(".tmp") and pid.isdigit() and not _alive(int(pid)):
            _remove(os.path.join(folder, entry))
    # not mkstemp: its 0600 mode would survive the rename
    tmp = os.path.join(folder, f"{prefix}{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        writer(tmp)
        _fsync_path(tmp)
        if output:
            with _Publishing():
                os.replace(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    _fsync_path(folder)


def _alive(pid):
    """True unless process ``pid`` is known not to exist."""
    if os.name == "nt":  # pragma: no cover - os.kill(pid, 0) would terminate it on Windows
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process
        return True
    return True


def _link_target(name):
    return os.path.join(STATE_DIR, _CURRENT, name)


def _is_our_link(path, name):
    try:
        return os.readlink(path) == _link_target(name)
    except OSError:
        return False


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _fsync_path(path):
    """fsync a file or a directory (so a power loss cannot undo a completed rename)."""
    flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if os.path.isdir(path) else 0)
    try:
        fd = os.open(path, flags)
    except OSError:  # pragma: no cover - directories cannot be opened on Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - e.g. EINVAL on file systems without fsync
        pass
    finally:
        os.close(fd)


def _read_pid(fd):
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _jsonable(value):
    if hasattr(value, "tolist"):  # NumPy scalars and arrays
        return value.tolist()
    if hasattr(value, "as_dict"):
        return value.as_dict()
    return str(value)
