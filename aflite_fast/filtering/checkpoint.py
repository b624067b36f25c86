"""Resumable AFLite runs: the loop's state after every phase, in one file written atomically.

a. Format: one ``.npz`` file, no pickle: the state's arrays (``active``, ``removed``,
   ``removed_phase``, ``scores``, ``warm_mean``) and ``header``, a JSON document stored as
   uint8 bytes: format name and version, the run's parameters, fingerprints of the data, the
   next phase, the stop reason when the last phase ended the run, and the history (each
   phase's ``PhaseRecord.as_dict()``, whatever fields it has).
b. Atomic (:func:`aflite_fast.io.atomic.write_file_atomically`): the file is written under a
   unique hidden name in the checkpoint's directory, fsynced, renamed over the previous one
   (``os.replace``) and the directory fsynced, so a process killed at any moment leaves the
   previous or the new checkpoint, never a broken one (the next save deletes the temporary
   file such a kill can leave).
c. Resume: an existing checkpoint must have been written with the same parameters and data
   (:meth:`Checkpoint.start` compares them and raises ValueError naming the difference,
   writing nothing).  It holds everything the next phase depends on, so a resumed run gives
   bitwise the result of an uninterrupted one (only the timing fields of the history differ).
d. Fingerprints (:func:`data_fingerprint`): X's shape, dtype and content fingerprint (a
   SHA-256 of every row, computed by the validation scan: :mod:`aflite_fast.io.fingerprint`),
   so a resume after any row of X changed is refused naming X's file; y's classes and a
   SHA-256 of its codes; the same of the group codes.
"""
import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from aflite_fast.io.atomic import write_file_atomically

FORMAT = "aflite_fast-checkpoint"
#: 2: partitions and random ties keyed by row; 3: classifiers trained in the reference-class form
#: (aflite_fast.core.reference_class).  Earlier versions are refused: their phases are never
#: continued by other arithmetic.
VERSION = 3
#: What changed since each earlier version, for the message that refuses its checkpoints.
_SINCE = {1: "drew partitions and ties by position (this version keys them by row)",
          2: "trained its models in another arithmetic (this version trains classifiers in the reference-class "
             "form, with other bits)"}
_ARRAYS = ("active", "removed", "removed_phase", "scores", "warm_mean")


@dataclass
class LoopState:
    """What the AFLite loop carries from one phase to the next.

    ``phase`` is the next phase to run, ``warm_mean`` the mean model of the last phase (the
    next phase's warm start; None before phase 0), ``history`` the ``PhaseRecord.as_dict()``
    of every phase run, ``stop_reason`` set when the last phase ended the run.
    """

    phase: int
    active: np.ndarray
    removed: np.ndarray
    removed_phase: np.ndarray
    scores: np.ndarray
    warm_mean: Optional[np.ndarray] = None
    history: List[dict] = field(default_factory=list)
    stop_reason: Optional[str] = None


def _sha256(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def data_fingerprint(X, codes, classes, group_codes=None, *, content):
    """Fingerprints of X (shape, dtype, ``content``: the hex digest of its
    :class:`~aflite_fast.io.fingerprint.ContentHash`), y and groups (a dict)."""
    return {
        "X": {"shape": [int(s) for s in X.shape], "dtype": np.dtype(X.dtype).name, "content_sha256": content},
        "y": {"classes": [str(c) for c in np.asarray(classes).tolist()],
              "codes_sha256": _sha256(np.asarray(codes, dtype="<i4"))},
        "groups": None if group_codes is None else _sha256(np.asarray(group_codes, dtype="<i8")),
    }


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot store {type(value).__name__} in a checkpoint header")


def _canonical(obj):
    """``obj`` as it reads back from JSON (tuples become lists, numpy scalars Python numbers)."""
    return json.loads(json.dumps(obj, default=_json_default))


def _differences(saved, current, prefix=""):
    """Keys (dotted) whose values differ between two JSON-like dicts, with both values."""
    out = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append((f"{prefix}{key}", a, b))
    return out


def _check_writable(folder, shown):
    """Refuse now, before any phase runs, a checkpoint whose directory takes no new file: each
    save writes a temporary file there and renames it over the checkpoint."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".aflite-checkpoint-probe-", dir=folder)
    except OSError as exc:
        raise ValueError(f"checkpoint {shown!r} cannot be written: {exc.strerror or exc} in {folder!r}") from None
    os.close(fd)
    os.unlink(probe)


class Checkpoint:
    """The checkpoint file of one run (see the module docstring).

    Parameters
    ----------
    path : str or os.PathLike
        The file (conventionally ``*.npz``).  Its directory must exist.  If the file exists it
        is read now; a file that is not a checkpoint is a ValueError.
    """

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            raise ValueError(f"checkpoint {os.fspath(path)!r}: directory {folder!r} does not exist")
        if os.path.isdir(self.path):
            raise ValueError(f"checkpoint {os.fspath(path)!r} is a directory; give a file name")
        self._header = None
        self._arrays = None
        self._bound = None
        if os.path.exists(self.path):
            self._header, self._arrays = self._read()
        _check_writable(folder, os.fspath(path))

    def _read(self):
        with open(self.path, "rb") as fh:
            start = fh.read(4)
        if start != b"PK\x03\x04":  # an .npz is a zip archive; never let np.load guess (pickle advice)
            kind = "a .npy array" if start == b"\x93NUM" else "empty" if not start else "not an .npz archive"
            raise ValueError(f"checkpoint {self.path!r} exists but is not a readable aflite_fast checkpoint ({kind}); "
                             "remove it or give another path")
        try:
            with np.load(self.path, allow_pickle=False) as npz:
                header = json.loads(npz["header"].tobytes().decode("utf-8"))
                arrays = {name: npz[name] for name in _ARRAYS}
        except (OSError, ValueError, KeyError, EOFError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
            raise ValueError(f"checkpoint {self.path!r} exists but is not a readable aflite_fast checkpoint "
                             f"({exc}); remove it or give another path") from exc
        if header.get("format") == FORMAT and isinstance(header.get("version"), int) and header["version"] < VERSION:
            raise ValueError(f"checkpoint {self.path!r} is of version {header['version']}, written by an earlier "
                             f"aflite_fast that {_SINCE.get(header['version'], 'worked otherwise')}; this version's "
                             f"({VERSION}) phases would not continue that run: give another checkpoint path (or "
                             "remove it) to start the run again")
        if header.get("format") != FORMAT or header.get("version") != VERSION:
            raise ValueError(f"checkpoint {self.path!r} is not an aflite_fast checkpoint of version {VERSION} "
                             f"(format {header.get('format')!r}, version {header.get('version')!r})")
        return header, arrays

    @property
    def exists(self):
        """True when the file held a checkpoint when this object was made."""
        return self._header is not None

    @property
    def saved_seed(self):
        """The seed entropy of the saved run (None when there is none)."""
        return None if self._header is None else self._header["parameters"].get("seed")

    def start(self, parameters, fingerprint, x_source="X"):
        """Bind this run's parameters and data; return the saved state to resume, or None.

        Parameters
        ----------
        parameters : dict
            Everything that changes the result (JSON-serialisable).
        fingerprint : dict
            :func:`data_fingerprint` of this run's data.
        x_source : str
            How the refusal of other data names X (its file).

        Raises
        ------
        ValueError
            If the file holds a checkpoint of other parameters or data (it is left untouched).
        """
        current = {"parameters": _canonical(parameters), "data": _canonical(fingerprint)}
        self._bound = current
        if self._header is None:
            return None
        saved = {"parameters": self._header["parameters"], "data": self._header["data"]}
        diffs = _differences(saved, current)
        data = [key.split(".")[1] for key, _, _ in diffs if key.startswith("data.")]
        if data and not any(key.startswith("parameters.") for key, _, _ in diffs):
            names = {"X": x_source, "y": "y (the labels)", "groups": "groups"}
            changed = list(dict.fromkeys(names.get(key, key) for key in data))
            earlier = "" if "content_sha256" in saved["data"].get("X", {}) else (
                " (or it was written by an earlier version, which fingerprinted only a sample of X)")
            raise ValueError(f"checkpoint {self.path!r} was written for other data: {' and '.join(changed)} "
                             f"{'is' if len(changed) == 1 else 'are'} not what it was saved with{earlier}; "
                             "resume on the same data, or give another checkpoint path")
        if diffs:
            shown = "; ".join(
                f"{key}: checkpoint {a!r}, this run {b!r}" if key.startswith("parameters.")
                else f"{key} differs" for key, a, b in diffs[:4])
            raise ValueError(f"checkpoint {self.path!r} was written by a run with other parameters or data "
                             f"({shown}); rerun with the same ones to resume, or give another checkpoint path")
        a = self._arrays
        warm = a["warm_mean"]
        return LoopState(phase=int(self._header["phase"]), active=a["active"].astype(np.int64),
                         removed=a["removed"].astype(np.int64), removed_phase=a["removed_phase"].astype(np.int64),
                         scores=a["scores"].astype(np.float64), warm_mean=None if warm.ndim == 1 else warm,
                         history=list(self._header["history"]), stop_reason=self._header.get("stop_reason"))

    def save(self, state):
        """Write ``state`` atomically (see the module docstring); call :meth:`start` first."""
        if self._bound is None:
            raise RuntimeError("Checkpoint.start must be called before save")
        header = dict(format=FORMAT, version=VERSION, **self._bound, phase=int(state.phase),
                      stop_reason=state.stop_reason, history=state.history)
        payload = json.dumps(header, default=_json_default).encode("utf-8")
        arrays = dict(active=state.active, removed=state.removed, removed_phase=state.removed_phase,
                      scores=state.scores,
                      warm_mean=np.empty(0) if state.warm_mean is None else state.warm_mean,
                      header=np.frombuffer(payload, dtype=np.uint8))

        def write(tmp):
            with open(tmp, "wb") as fh:
                np.savez(fh, **arrays)

        write_file_atomically(self.path, write)
        self._header = header
