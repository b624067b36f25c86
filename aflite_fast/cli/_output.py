"""Writing a command's outputs all-or-nothing."""
import json
import os
import shutil
import tempfile

import numpy as np


class AtomicOutputDir:
    """Collect output files in a temporary directory beside ``path``; move them in on success.

    Used as a context manager: on an exception the temporary directory is removed and
    ``path`` is left as it was, so no half-written output is ever visible.
    """

    def __init__(self, path):
        self.path = os.path.abspath(os.fspath(path))
        self.tmp = None

    def __enter__(self):
        parent = os.path.dirname(self.path)
        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise ValueError(f"--out {self.path!r} exists and is not a directory")
        try:
            os.makedirs(parent, exist_ok=True)
            self.tmp = tempfile.mkdtemp(prefix=".aflite-tmp-", dir=parent)
        except OSError as exc:
            raise ValueError(f"cannot write to {parent!r}: {exc}") from exc
        return self

    def file(self, name):
        """Path of ``name`` inside the temporary directory."""
        return os.path.join(self.tmp, name)

    def save_npy(self, name, array):
        np.save(self.file(name), array, allow_pickle=False)

    def save_json(self, name, obj):
        with open(self.file(name), "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, default=_jsonable)
            fh.write("\n")

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None:
                os.makedirs(self.path, exist_ok=True)
                for name in sorted(os.listdir(self.tmp)):
                    os.replace(os.path.join(self.tmp, name), os.path.join(self.path, name))
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False


def _jsonable(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if hasattr(value, "as_dict"):
        return value.as_dict()
    return str(value)
