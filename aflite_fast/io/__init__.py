"""Reading and writing files: the data layer's readers and the atomic output sets.

- :mod:`.arrayfile`: ``.npy``, ``.npz`` and ``FILE.npz:KEY`` arrays opened read-only,
  memory-mapped where the file allows it.
- :mod:`.labelfile`: label and group-id files (``.npy``/``.npz`` or text/CSV/TSV).
- :mod:`.atomic`: output sets switched in with one rename, and single files written
  atomically.

:mod:`aflite_fast.data` opens and validates embeddings through these readers.
"""
