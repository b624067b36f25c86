"""Which reader opens an input: the formats of embeddings (and of label columns) by path.

============================================  =========================================  ==========
input                                         reader                                     needs
============================================  =========================================  ==========
``X.npy``, ``X.npz``, ``X.npz:KEY``           :mod:`.shards` (one shard)                  -
a directory of ``.npy`` files, a glob,        :mod:`.shards`                              -
a list of ``.npy`` paths
``X.safetensors``, ``X.safetensors:KEY``      :mod:`.safetensors_file`                    -
a ``save_to_disk`` directory, ``X.arrow``     :mod:`.arrow` (``column=``)                 pyarrow
``X.parquet``, a directory of them            :mod:`.parquet` (``column=``)               pyarrow
============================================  =========================================  ==========

A directory is classified by what it holds: a dataset saved by ``datasets`` (``state.json``,
``.arrow`` files), ``.parquet`` files or ``.npy`` files.  pyarrow is imported only for the
formats that need it; when it is missing, :func:`aflite_fast.io.optional.require` names the extra
that installs it.
"""
import os

from aflite_fast.io.shards import is_glob, shard_paths

#: Formats that take ``column=``.
TABLE_FORMATS = ("arrow", "parquet")


def detect(spec):
    """The format of ``spec``: ``"shards"``, ``"npy"``, ``"safetensors"``, ``"arrow"`` or ``"parquet"``.

    Raises
    ------
    ValueError
        For a directory or glob holding nothing readable.
    """
    from aflite_fast.io.arrow import is_dataset_dir
    from aflite_fast.io.safetensors_file import split_safetensors

    if isinstance(spec, (list, tuple)):
        return "shards"
    spec = os.fspath(spec)
    if split_safetensors(spec) is not None:
        return "safetensors"
    lower = spec.lower()
    if os.path.isdir(spec):
        if is_dataset_dir(spec):
            return "arrow"
        names = os.listdir(spec)
        if any(n.lower().endswith((".parquet", ".pq")) for n in names):
            return "parquet"
        if any(n.lower().endswith(".npy") for n in names):
            return "shards"
        raise ValueError(f"the directory {spec!r} holds no embeddings: no .npy shards, .parquet files or "
                         "dataset saved with save_to_disk")
    if is_glob(spec):
        return "shards"
    if lower.endswith(".arrow"):
        return "arrow"
    if lower.endswith((".parquet", ".pq")):
        return "parquet"
    return "npy"


def open_rows(spec, column=None, what="embeddings"):
    """Open the embeddings ``spec`` as a row source (or an array, for inputs read whole).

    Parameters
    ----------
    spec : str, os.PathLike, or list of paths
        See the module docstring.
    column : str, optional
        The embedding column of a table (Arrow, Parquet); needed when it has several list
        columns.

    Returns
    -------
    aflite_fast.io.rowsource.RowSource, or an ndarray / memmap (a compressed ``.npz`` member,
    a Fortran-ordered file, an array that is not 2-D for the caller to refuse)
    """
    fmt = detect(spec)
    if column is not None and fmt not in TABLE_FORMATS:
        shown = "the shards" if isinstance(spec, (list, tuple)) else repr(os.fspath(spec))
        raise ValueError(f"column={column!r} (--column) chooses a column of a table (Arrow, Hugging Face dataset, "
                         f"Parquet); {shown} is not one")
    if fmt == "shards":
        from aflite_fast.io.shards import open_shards

        paths = list(spec) if isinstance(spec, (list, tuple)) else shard_paths(spec)
        if not paths:
            raise ValueError(f"no .npy shards match {os.fspath(spec)!r}")
        return open_shards(paths, what, name=None if isinstance(spec, (list, tuple)) else repr(os.fspath(spec)))
    if fmt == "safetensors":
        from aflite_fast.io.safetensors_file import open_safetensors

        return open_safetensors(spec, what)
    if fmt == "arrow":
        from aflite_fast.io.arrow import open_arrow

        return open_arrow(spec, column, what)
    if fmt == "parquet":
        from aflite_fast.io.parquet import open_parquet

        return open_parquet(spec, column, what)
    from aflite_fast.io.shards import array_rows

    return array_rows(spec, what)


def is_table(spec):
    """True when ``spec`` is an Arrow/Hugging Face or Parquet table (labels may be its column)."""
    if isinstance(spec, (list, tuple)):
        return False
    try:
        return detect(spec) in TABLE_FORMATS
    except ValueError:
        return False


def read_column(spec, column, what="labels"):
    """One value per row from column ``column`` of a table (labels, group ids), read whole.

    Raises
    ------
    ValueError
        When ``spec`` is not a table, the column is missing, holds lists, or has a missing value.
    """
    fmt = detect(spec)
    if column is None:
        raise ValueError(f"{os.fspath(spec)!r} is a table: name the {what} column")
    if fmt == "arrow":
        from aflite_fast.io.arrow import read_arrow_column

        return read_arrow_column(spec, column, what)
    if fmt == "parquet":
        from aflite_fast.io.parquet import read_parquet_column

        return read_parquet_column(spec, column, what)
    raise ValueError(f"{os.fspath(spec)!r} is not a table (Arrow, Hugging Face dataset, Parquet)")


def spec_files(spec):
    """The files behind ``spec`` without opening them (for :mod:`.watch`); [] if unknown."""
    from aflite_fast.io.arrayfile import split_key

    try:
        fmt = detect(spec)
        if fmt == "shards":
            paths = list(spec) if isinstance(spec, (list, tuple)) else shard_paths(spec)
        elif fmt == "safetensors":
            from aflite_fast.io.safetensors_file import split_safetensors

            paths = [split_safetensors(spec)[0]]
        elif fmt == "arrow":
            from aflite_fast.io.arrow import arrow_files

            paths = arrow_files(spec)
        elif fmt == "parquet":
            from aflite_fast.io.parquet import parquet_files

            paths = parquet_files(spec)
        else:
            paths = [split_key(spec)[0]]
    except (ValueError, OSError):
        return []
    return [os.path.abspath(os.fspath(p)) for p in paths if os.path.isfile(p)]
