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
import ast
import math
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
#: .npy format versions -> (struct format of the header length, encoding of the header).
_NPY_VERSIONS = {(1, 0): ("<H", "latin1"), (2, 0): ("<I", "latin1"), (3, 0): ("<I", "utf-8")}
#: Longest .npy header read (NumPy's own limit without allow_pickle): a numeric array's header
#: is under 200 bytes.
_NPY_MAX_HEADER = 10_000


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
            shape, fortran, dtype = read_npy_header(fh)  # a corrupt header is refused in our words, not numpy's
            data_start = fh.tell()
        nbytes = _data_bytes(shape, dtype, "it")
        held = os.stat(path).st_size - data_start
        if held < nbytes:
            raise ValueError(f"the file is truncated: its header promises {nbytes} bytes of data, it holds {held}")
        return _map(path, data_start, shape, dtype, fortran)
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

    Versions 1.0, 2.0 and 3.0 of the format are read.  numpy's own messages about a corrupt
    header show its parser's internals (an ``ast`` node's repr, the raw header bytes), and it
    takes a negative or boolean dimension; this says what is wrong in plain words and accepts
    a shape of non-negative integers only.
    """
    magic = fh.read(len(_NPY_MAGIC) + 2)
    if len(magic) < len(_NPY_MAGIC) + 2 or not magic.startswith(_NPY_MAGIC):
        raise ValueError(f"{what} does not start with a .npy header")
    version = (magic[-2], magic[-1])
    if version not in _NPY_VERSIONS:
        raise ValueError(f"{what} has .npy format version {version[0]}.{version[1]}, which cannot be mapped "
                         "(1.0, 2.0 and 3.0 can)")
    length_format, encoding = _NPY_VERSIONS[version]
    raw = fh.read(struct.calcsize(length_format))
    if len(raw) < struct.calcsize(length_format):
        raise ValueError(f"{what} is truncated inside its .npy header")
    (length,) = struct.unpack(length_format, raw)
    if length > _NPY_MAX_HEADER:
        raise ValueError(f"{what} has a .npy header of {length} bytes, more than the {_NPY_MAX_HEADER} read; "
                         "a numeric array's header is a few hundred bytes")
    text = fh.read(length)
    if len(text) < length:
        raise ValueError(f"{what} is truncated inside its .npy header")
    corrupt = ValueError(f"{what} has a corrupt .npy header (it does not describe an array's shape, dtype "
                         "and order)")
    try:
        header = ast.literal_eval(text.decode(encoding))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError, UnicodeDecodeError):
        raise corrupt from None
    if not isinstance(header, dict) or header.keys() != {"descr", "fortran_order", "shape"}:
        raise corrupt
    shape, fortran = header["shape"], header["fortran_order"]
    if (not isinstance(shape, tuple) or not isinstance(fortran, bool)
            or not all(type(s) is int for s in shape)):  # noqa: E721 - bool is not a dimension
        raise corrupt
    if any(s < 0 for s in shape):
        raise ValueError(f"{what} has a .npy header with a negative dimension in its shape {shape}")
    try:
        dtype = np.lib.format.descr_to_dtype(header["descr"])
    except (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError, RecursionError):
        raise corrupt from None
    return shape, fortran, dtype


def _data_bytes(shape, dtype, what):
    """Bytes of an array of ``shape`` and ``dtype`` (computed without wrapping), after refusing
    the dtypes no reader takes; ``what`` names the array."""
    if dtype.hasobject:
        raise ValueError(f"{what} holds Python objects, which cannot be read without unpickling")
    if dtype.names is not None or dtype.subdtype is not None:
        raise ValueError(f"{what} is a structured array (dtype {dtype}); save the numbers as a plain array")
    if dtype.itemsize == 0:
        raise ValueError(f"{what} has dtype {dtype}, whose values take no bytes")
    return math.prod(shape) * dtype.itemsize


def _map(path, offset, shape, dtype, fortran):
    """The array of ``shape`` stored at byte ``offset`` of ``path``, memory-mapped read-only
    (an empty array is made, as a 0-byte map cannot be)."""
    order = "F" if fortran else "C"
    if math.prod(shape) == 0:
        return np.empty(shape, dtype=dtype, order=order)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order=order)


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
                return _read_member(member, key, info.file_size)
    with open(path, "rb") as fh:
        fh.seek(info.header_offset)
        fields = _ZIP_LOCAL_HEADER.unpack(fh.read(_ZIP_LOCAL_HEADER.size))
        member_start = info.header_offset + _ZIP_LOCAL_HEADER.size + fields[-2] + fields[-1]
        fh.seek(member_start)
        shape, fortran, dtype = read_npy_header(fh, f"array {key!r}")
        offset = fh.tell()
    nbytes = _data_bytes(shape, dtype, f"array {key!r}")
    if offset - member_start + nbytes > info.file_size:
        raise ValueError(f"array {key!r} is truncated: its header promises {nbytes} bytes of data")
    return _map(path, offset, shape, dtype, fortran)


def _read_member(member, key, size):
    """The array of a compressed ``.npz`` member (``size`` bytes uncompressed), read whole
    from the open stream ``member`` after the same checks of its header as a mapped one."""
    shape, fortran, dtype = read_npy_header(member, f"array {key!r}")
    nbytes = _data_bytes(shape, dtype, f"array {key!r}")
    data = member.read(nbytes) if member.tell() + nbytes <= size else b""
    if len(data) < nbytes:
        raise ValueError(f"array {key!r} is truncated: its header promises {nbytes} bytes of data")
    order = "F" if fortran else "C"
    return np.frombuffer(bytearray(data), dtype=dtype).reshape(shape, order=order)
