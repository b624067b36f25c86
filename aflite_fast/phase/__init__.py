"""Scoring one AFLite phase: train the partitions' models, predict the held-out rows.

- :mod:`.backends`: the backend seam: local threads or a Dask cluster behind one interface.
- :mod:`.local`: the local backend's phase (blocks of partitions, gathered rows, prediction
  chunks); :mod:`.dask_backend`: the Dask backend (rows held on the workers).
- :mod:`.partitions`: each partition's training positions from its own seed.
- :mod:`.plan`: the memory plan of a phase (one estimate function per thing) and its shape.
- :mod:`.gather`: active rows gathered into the kernel's buffers, reused between phases.
- :mod:`.scores`: the per-row results of a phase.
- :mod:`.multiple_choice`, :mod:`.evaluation_rows`, :mod:`.groups`: items of K candidates,
  rows scored but never trained on, rows trained on together.

Importing this package loads nothing.
"""
