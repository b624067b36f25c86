"""A tensor of a safetensors file, ``FILE.safetensors:KEY``, read in place.

a. The format is an 8-byte little-endian header length, a JSON header naming every tensor's
   dtype, shape and byte range, then the tensors' bytes, little-endian and C-ordered
   (https://github.com/huggingface/safetensors#format).  The header is read here directly, so
   no package is needed, and the tensor's rows are read with positioned reads
   (:class:`aflite_fast.io.rowsource.FileRows`), never loaded whole.
b. ``KEY`` may be omitted when the file holds one tensor.  bfloat16 and 8-bit float tensors
   have no NumPy dtype and are refused with a message saying how to convert them.
"""
import json
import os
import struct

import numpy as np

from aflite_fast.io._pread import SharedFile
from aflite_fast.io.rowsource import FileRows

#: safetensors dtype names -> NumPy dtypes (little-endian, as the format stores them).
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1",
          "U64": "<u8", "U32": "<u4", "U16": "<u2", "U8": "u1", "BOOL": "?"}
#: Largest header the format allows (100 MB).
_MAX_HEADER = 100_000_000


def split_safetensors(spec):
    """``(path, key)`` of ``FILE.safetensors[:KEY]``, or None when ``spec`` is not one."""
    spec = os.fspath(spec)
    if spec.lower().endswith(".safetensors"):
        return spec, None
    path, sep, key = spec.rpartition(":")
    if sep and path.lower().endswith(".safetensors"):
        return path, key
    return None


def read_header(path):
    """``(tensors, data_start)``: the header's tensor entries (name -> dict) and where data begins."""
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise ValueError("the file is too short to be a safetensors file")
        (length,) = struct.unpack("<Q", raw)
        if length > _MAX_HEADER:
            raise ValueError(f"not a safetensors file (its first 8 bytes give a header of {length} bytes)")
        text = fh.read(length)
    if len(text) < length:
        raise ValueError("the file is truncated inside its header")
    try:
        header = json.loads(text.decode("utf-8"), object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ValueError(f"its header names {exc} more than once") from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError("not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise ValueError("not a safetensors file (its header is not a JSON object)")
    header.pop("__metadata__", None)
    return header, 8 + length


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs):
    """A JSON object's dict, refusing a key given twice (JSON would keep the last silently)."""
    out = {}
    for name, value in pairs:
        if name in out:
            raise _DuplicateKey(repr(name))
        out[name] = value
    return out


def _is_count(value):
    """True for a JSON integer >= 0 (not a float such as 2000.0, not true/false)."""
    return type(value) is int and value >= 0  # noqa: E721 - bool is an int subclass


def _entry(entry, key):
    """``(dtype name, shape, (begin, end))`` of a tensor's header entry, after checking that it
    is an object whose ``dtype`` is a string, ``shape`` a list of integers >= 0 and
    ``data_offsets`` two integers with 0 <= begin <= end (a negative begin would read the
    header's bytes as the first row and shift every row after it)."""
    if not isinstance(entry, dict):
        raise ValueError(f"tensor {key!r}: its header entry is not a JSON object with dtype, shape and "
                         "data_offsets")
    name, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(name, str):
        raise ValueError(f"tensor {key!r}: its dtype {name!r} is not a name such as \"F32\"")
    if not isinstance(shape, list) or not all(_is_count(s) for s in shape):
        raise ValueError(f"tensor {key!r}: its shape {shape!r} is not a list of integers >= 0")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(v) for v in offsets)
            or offsets[0] > offsets[1]):
        raise ValueError(f"tensor {key!r}: its data_offsets {offsets!r} are not [begin, end] with "
                         "0 <= begin <= end (bytes after the header)")
    return name, tuple(shape), tuple(offsets)


def open_safetensors(spec, what="embeddings"):
    """The tensor ``KEY`` of ``FILE.safetensors:KEY`` as a row source.

    Raises
    ------
    ValueError
        Naming the file and the problem: unreadable header, missing or ambiguous key, a dtype
        NumPy has no name for, not 2-D, a shape or byte range that is not integers >= 0 (or
        that do not agree), a key given twice, or a file shorter than the header promises.
    """
    path, key = split_safetensors(spec)
    try:
        tensors, data_start = read_header(path)
        if key is None:
            if len(tensors) != 1:
                raise ValueError(f"the file holds {len(tensors)} tensors ({', '.join(sorted(tensors)) or 'none'}); "
                                 f"choose one as {path}:KEY")
            key = next(iter(tensors))
        if key not in tensors:
            raise ValueError(f"the file has no tensor {key!r}; it holds {', '.join(sorted(tensors)) or 'none'}")
        name, shape, (begin, end) = _entry(tensors[key], key)
        if name not in DTYPES:
            raise ValueError(f"tensor {key!r} has dtype {name}, which NumPy cannot hold; save it as float32 or "
                             "float16 (e.g. tensor.float())")
        dtype = np.dtype(DTYPES[name])
        if len(shape) != 2:
            raise ValueError(f"tensor {key!r} is {len(shape)}-D with shape {shape}; embeddings must be 2-D "
                             "(rows x features)")
        if end - begin != shape[0] * shape[1] * dtype.itemsize:
            raise ValueError(f"tensor {key!r}: its byte range does not match its shape {shape} and dtype {name}")
        size = os.stat(path).st_size
        if data_start + end > size:
            raise ValueError(f"the file is truncated: tensor {key!r} ends at byte {data_start + end}, the file "
                             f"at {size}")
    except (OSError, KeyError, TypeError, ValueError) as exc:
        detail = str(exc) if isinstance(exc, ValueError) else f"not a safetensors file ({exc})"
        raise ValueError(f"cannot read {what} from {os.fspath(spec)!r}: {detail}") from None
    if 0 in shape:
        raise ValueError(f"{what} {os.fspath(spec)!r} is empty: shape {shape}")
    return FileRows(SharedFile(path, what), data_start + begin, shape, dtype, name=repr(f"{path}:{key}"))
