"""Reading and writing files: the data layer's readers and the atomic output sets.

- :mod:`.formats`: which reader opens an input (``open_rows``), label columns of tables
  (``read_column``), the optional dependencies and the extra that installs them.
- :mod:`.rowsource`: row sources, an N x d matrix read a run or a sorted set of rows at a time
  into the caller's buffer; :mod:`._pread`: the positioned reads behind them (a file truncated
  during a run is an error naming it, not a bus error).
- One reader per format: :mod:`.shards` (``.npy`` files and collections of shards),
  :mod:`.safetensors_file`, :mod:`.arrow` (Hugging Face datasets, ``.arrow`` files),
  :mod:`.parquet`.
- :mod:`.arrayfile`: ``.npy``, ``.npz`` and ``FILE.npz:KEY`` arrays opened read-only, their
  headers and layouts.
- :mod:`.labelfile`: label and group-id files (``.npy``/``.npz``, text/CSV/TSV, table columns).
- :mod:`.fingerprint`, :mod:`.watch`: the content fingerprint of X and the files watched during
  a run.
- :mod:`.atomic`: output sets switched in with one rename, and single files written
  atomically.
- :mod:`.inputs`: embeddings opened and validated through these readers (``open_embeddings``),
  labels encoded, the validation scan, rows gathered by sorted index in chunks;
  :mod:`.rows` (+ the compiled ``_rowscan``): the row helpers (NaN/inf scans, the membership
  matrix); :mod:`.scale`: X's scale, measured when a model fails; :mod:`.optional`: the optional
  dependencies of the readers and the extra that installs them.
"""
