"""A collection of ``.npy`` shards (a directory, a glob or a list of paths) as one N x d matrix.

a. The shards are read in natural sort order (``part_2`` before ``part_10``, as clip-retrieval
   and most writers number them), each in place with positioned reads
   (:class:`aflite_fast.io.rowsource.FileRows`): no copy of the collection is made, and a
   shard truncated during a run is an error naming it.
b. Every shard must be 2-D with the width and dtype of the first; a shard of another width or
   dtype, a truncated or unreadable shard, is refused naming the shard.  An empty shard
   (0 rows) is skipped.
c. A ``.npy`` file alone (or ``FILE.npz:KEY``) is the collection of one shard: the data layer
   opens every embeddings file this way.  A compressed ``.npz`` member, which cannot be read
   in place, is decompressed into memory.
"""
import glob
import os

import numpy as np

from aflite_fast.io._pread import SharedFile
from aflite_fast.io.arrayfile import array_layout, open_array_file
from aflite_fast.io.rowsource import ArrayRows, ConcatRows, FileRows, natural_key

GLOB_CHARS = "*?["


def is_glob(spec):
    """True for a pattern (``shards/part_*.npy``) that does not name an existing path."""
    spec = os.fspath(spec)
    return any(c in spec for c in GLOB_CHARS) and not os.path.exists(spec)


def shard_paths(spec, suffixes=(".npy",)):
    """The files of a directory or glob with one of ``suffixes``, in natural order."""
    spec = os.fspath(spec)
    if os.path.isdir(spec):
        names = [os.path.join(spec, n) for n in os.listdir(spec)
                 if n.lower().endswith(suffixes) and not n.startswith(".")]
    else:
        names = [p for p in glob.glob(spec) if os.path.isfile(p)]
    return sorted(names, key=natural_key)


def array_rows(spec, what="embeddings", name=None):
    """One ``.npy`` file (or ``FILE.npz:KEY``) as a row source read in place, or an ndarray
    when it cannot be read row by row (compressed member, Fortran order, not 2-D, empty)."""
    layout = array_layout(spec, what)
    if isinstance(layout, np.ndarray):
        return layout
    if layout.fortran or len(layout.shape) != 2 or 0 in layout.shape:
        # rows of a Fortran-ordered file are not contiguous: mapped; other shapes are refused by the caller
        return open_array_file(spec, what)
    return FileRows(SharedFile(layout.path, what), layout.offset, layout.shape, layout.dtype,
                    name=name or repr(os.fspath(spec)))


def open_shards(paths, what="embeddings", name=None):
    """The shards ``paths`` (in the given order) as one row source.

    Raises
    ------
    ValueError
        Naming the shard: unreadable, truncated, not 2-D, or of another width or dtype than the
        first shard; or when there is no shard.
    """
    paths = [os.fspath(p) for p in paths]
    name = name or (f"the {len(paths)} shards" if len(paths) != 1 else repr(paths[0]))
    if not paths:
        raise ValueError(f"no .npy shards found for {what}")
    parts, names, first = [], [], None
    for path in paths:
        try:
            rows = array_rows(path, what, name=f"shard {path!r}")
        except ValueError as exc:
            raise ValueError(f"shard {path!r}: {exc}") from None
        if rows.ndim != 2:
            raise ValueError(f"shard {path!r} is {rows.ndim}-D with shape {rows.shape}; every shard must be "
                             "2-D (rows x features)")
        if first is None:
            first = (path, rows.shape[1], rows.dtype)
        elif (rows.shape[1], rows.dtype) != first[1:]:
            raise ValueError(f"shard {path!r} has {rows.shape[1]} columns of {rows.dtype}, but shard {first[0]!r} "
                             f"has {first[1]} columns of {first[2]}; every shard must have the same width and dtype")
        if rows.shape[0] == 0:
            continue
        if isinstance(rows, np.ndarray):
            rows = ArrayRows(rows, name=f"shard {path!r}", files=(os.path.abspath(path),))
        parts.append(rows)
        names.append(f"shard {os.path.basename(path)!r}")
    if not parts:
        raise ValueError(f"every shard of {what} is empty (0 rows)")
    return ConcatRows(parts, names, name=name)
