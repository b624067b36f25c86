"""Opening array files read-only without loading them: ``.npy``, ``.npz`` and ``FILE.npz:KEY``.

a. A ``.npy`` file is memory-mapped (``np.load(mmap_mode="r")``), so a file larger than memory
   is never read whole.
b. A ``.npz`` archive is a zip of ``.npy`` members.  ``np.savez`` stores them uncompressed, so
   a member is memory-mapped in place: its data starts at a fixed byte offset of the archive
   (the member's local zip header, then its ``.npy`` header).  A member compressed by
   ``np.savez_compressed`` cannot be mapped and is decompressed into memory.
c. An archive holding one array needs no key; with several the caller names one as
   ``FILE.npz:KEY``.
d. What the file is comes from its first bytes (the ``.npy`` magic string, a zip header, or
   nothing at all), not its name, so a 0-byte file or a text file gets a message saying so
   instead of numpy's ``EOFError`` or its refusal to unpickle.  Object arrays are refused:
   reading them would mean unpickling.
"""
import os
import struct
import zipfile
from typing import NamedTuple

import numpy as np

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"
#: Fixed part of a zip local file header; its last two fields are the lengths of the name and
#: of the extra field, which precede the member's data (PKWARE APPNOTE 4.3.7).
_ZIP_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_NPY_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                       (2, 0): np.lib.format.read_array_header_2_0}


def split_key(spec):
    """``(path, key)`` of ``"FILE.npz:KEY"``; ``(spec, None)`` when ``spec`` names a file itself."""
    spec = os.fspath(spec)
    if not os.path.exists(spec) and ":" in spec:
        path, _, key = spec.rpartition(":")
        if os.path.isfile(path):
            return path, key
    return spec, None


def looks_like_array_file(spec):
    """True when ``spec`` is ``FILE.npz:KEY``, is named ``.npy``/``.npz``, or starts like one."""
    path, key = split_key(spec)
    if key is not None or path.lower().endswith((".npy", ".npz")):
        return True
    try:
        with open(path, "rb") as fh:
            start = fh.read(len(_NPY_MAGIC))
    except OSError:
        return False
    return start.startswith((_NPY_MAGIC, _ZIP_MAGIC))


def open_array_file(spec, what="array"):
    """The array in ``spec`` (a ``.npy`` path, a ``.npz`` path or ``FILE.npz:KEY``), read-only.

    Parameters
    ----------
    spec : str or os.PathLike
    what : str
        What the file holds, for error messages ("embeddings", "labels").

    Returns
    -------
    numpy.memmap, or ndarray for an empty array or a compressed ``.npz`` member

    Raises
    ------
    ValueError
        Naming the file and the problem: missing, empty, not a ``.npy``/``.npz`` file,
        truncated, an object array, or an archive key that is missing or needed.
    """
    path, key = split_key(spec)
    try:
        with open(path, "rb") as fh:
            start = fh.read(len(_NPY_MAGIC))
        if not start:
            raise ValueError("the file is empty (0 bytes)")
        if start.startswith(_ZIP_MAGIC):
            return _open_npz(path, key)
        if key is not None:
            raise ValueError(f"':{key}' selects an array of a .npz archive, but this is not one")
        if not start.startswith(_NPY_MAGIC):
            raise ValueError(f"not a .npy or .npz file (it starts with {start!r})")
        with open(path, "rb") as fh:
            shape, _, dtype = read_npy_header(fh)  # a corrupt header is refused in our words, not numpy's
            data_start = fh.tell()
        if dtype.hasobject:
            raise ValueError("it holds Python objects, which cannot be read without unpickling")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        held = os.stat(path).st_size - data_start
        if held < nbytes:
            raise ValueError(f"the file is truncated: its header promises {nbytes} bytes of data, it holds {held}")
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"cannot read {what} from {os.fspath(spec)!r}: {exc}") from exc


class ArrayLayout(NamedTuple):
    """Where an uncompressed array lies in its file: ``path``, the byte ``offset`` of its data,
    its ``shape``, ``dtype`` and whether it is stored in Fortran order."""

    path: str
    offset: int
    shape: tuple
    dtype: np.dtype
    fortran: bool


def array_layout(spec, what="array"):
    """The :class:`ArrayLayout` of the array in ``spec`` (as :func:`open_array_file` takes it),
    so that a reader can fetch its rows with positioned reads instead of a memory map; or the
    array itself, loaded, when it cannot be read in place (a compressed ``.npz`` member, an
    empty array).

    Raises
    ------
    ValueError
        As :func:`open_array_file` does.
    """
    array = open_array_file(spec, what)
    if not isinstance(array, np.memmap):
        return array
    path = split_key(spec)[0]
    return ArrayLayout(path, int(array.offset), tuple(int(s) for s in array.shape), array.dtype,
                       bool(array.flags.f_contiguous and not array.flags.c_contiguous))


def read_npy_header(fh, what="the file"):
    """``(shape, fortran_order, dtype)`` from the ``.npy`` header at ``fh``'s position.

    numpy's own messages about a corrupt header show its parser's internals (an ``ast`` node's
    repr, the raw header bytes); this says what is wrong in plain words.
    """
    try:
        version = np.lib.format.read_magic(fh)
    except ValueError:
        raise ValueError(f"{what} does not start with a .npy header") from None
    if version not in _NPY_HEADER_READERS:
        raise ValueError(f"{what} has .npy format version {version[0]}.{version[1]}, which cannot be mapped")
    try:
        return _NPY_HEADER_READERS[version](fh)
    except (ValueError, SyntaxError, TypeError, KeyError, EOFError):
        raise ValueError(f"{what} has a corrupt .npy header (it does not describe an array's shape, dtype "
                         "and order)") from None


def _open_npz(path, key):
    with zipfile.ZipFile(path) as archive:
        members = {name[:-4]: name for name in archive.namelist() if name.endswith(".npy")}
        if key is None:
            if len(members) != 1:
                listed = ", ".join(sorted(members)) or "none"
                raise ValueError(f"the archive holds {len(members)} arrays ({listed}); "
                                 f"choose one as {path}:KEY")
            key = next(iter(members))
        elif key not in members:
            raise ValueError(f"the archive has no array {key!r}; it holds {', '.join(sorted(members)) or 'none'}")
        info = archive.getinfo(members[key])
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
            with archive.open(info) as member:  # compressed: cannot be mapped, read it
                return np.lib.format.read_array(member, allow_pickle=False)
    with open(path, "rb") as fh:
        fh.seek(info.header_offset)
        fields = _ZIP_LOCAL_HEADER.unpack(fh.read(_ZIP_LOCAL_HEADER.size))
        member_start = info.header_offset + _ZIP_LOCAL_HEADER.size + fields[-2] + fields[-1]
        fh.seek(member_start)
        shape, fortran, dtype = read_npy_header(fh, f"array {key!r}")
        offset = fh.tell()
    if dtype.hasobject:
        raise ValueError(f"array {key!r} holds Python objects, which cannot be read without unpickling")
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if offset - member_start + nbytes > info.file_size:
        raise ValueError(f"array {key!r} is truncated: its header promises {nbytes} bytes of data")
    if nbytes == 0:
        return np.empty(shape, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape,
                     order="F" if fortran else "C")
