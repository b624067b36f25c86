"""The machine's resources as the package uses them, below every other layer.

- :mod:`.threads`: the thread count of a call (``n_jobs``), caps on BLAS and OpenMP pools
  around the kernel's parallel regions, and row ranges split over threads.
- :mod:`.memory`: memory budgets (``max_memory="2GB"``) parsed and formatted.

Pure Python and NumPy-free at import, so the command line's parsers can use them.
"""
