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

from aflite_fast.io.rowsource import FileRows
from aflite_fast.io._pread import SharedFile

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
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("not a safetensors file (its header is not JSON)") from None
    if not isinstance(header, dict):
        raise ValueError("not a safetensors file (its header is not a JSON object)")
    header.pop("__metadata__", None)
    return header, 8 + length


def open_safetensors(spec, what="embeddings"):
    """The tensor ``KEY`` of ``FILE.safetensors:KEY`` as a row source.

    Raises
    ------
    ValueError
        Naming the file and the problem: unreadable header, missing or ambiguous key, a dtype
        NumPy has no name for, not 2-D, or a file shorter than the header promises.
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
        entry = tensors[key]
        name = entry.get("dtype")
        if name not in DTYPES:
            raise ValueError(f"tensor {key!r} has dtype {name}, which NumPy cannot hold; save it as float32 or "
                             "float16 (e.g. tensor.float())")
        dtype = np.dtype(DTYPES[name])
        shape = tuple(int(s) for s in entry["shape"])
        begin, end = (int(v) for v in entry["data_offsets"])
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
