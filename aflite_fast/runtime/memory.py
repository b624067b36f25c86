"""Memory budgets: parse "2GB"-style sizes and pick a default.

Units (case-insensitive), defined once here for the API and the command line:

- decimal (SI): ``K``/``KB`` = 10**3 bytes, ``M``/``MB`` = 10**6, ``G``/``GB`` = 10**9, ``T``/``TB``
  = 10**12.  A bare letter is the SI prefix, as in dask (``parse_bytes``) and Kubernetes;
- binary (IEC): ``Ki``/``KiB`` = 2**10, ``Mi``/``MiB`` = 2**20, ``Gi``/``GiB`` = 2**30, ``Ti``/``TiB`` = 2**40;
- no unit or ``B``: bytes.  Fractions are allowed (``1.5G``); the result is rounded down.
"""
import math
import os
import re

_PREFIX = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}
_SIZE = re.compile(r"\s*([0-9]*\.?[0-9]+(?:E[+-]?[0-9]+)?)\s*([KMGT]?)(I?)(B?)\s*")


def parse_memory(value):
    """Bytes from an int or a string such as ``"512MB"``, ``"2G"``, ``"1.5GiB"``, ``"1000000"``.

    See the module docstring for the units.  None gives the default: a quarter of physical
    memory, at least 256 MiB.

    Raises
    ------
    ValueError
        If ``value`` is not a positive size (naming ``max_memory``).
    """
    if value is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total = 8 * 2**30
        return max(256 * 2**20, total // 4)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if not value > 0 or not math.isfinite(value):
            raise ValueError(f"max_memory must be a positive number of bytes, got {value}")
        return int(value)
    m = _SIZE.fullmatch(str(value).upper())
    if not m or (m.group(3) and not m.group(2)):
        raise ValueError(f"cannot read a memory size from {value!r} for max_memory "
                         "(use e.g. 500M, 2GB, 1GiB or a number of bytes)")
    number, prefix, binary = float(m.group(1)), m.group(2), m.group(3)
    size = number * (1024 if binary else 1000) ** _PREFIX[prefix]
    if not math.isfinite(size):
        raise ValueError(f"max_memory {value!r} is out of range")
    nbytes = int(size)
    if nbytes <= 0:
        raise ValueError(f"max_memory must be positive, got {value!r}")
    return nbytes


def format_size(nbytes):
    """``nbytes`` in the decimal unit that keeps three significant digits readable: ``"8.03 TB"``,
    ``"6.32 GB"``, ``"908 kB"``."""
    for power, unit in ((4, "TB"), (3, "GB"), (2, "MB"), (1, "kB")):
        if nbytes >= 1000 ** power:
            return f"{nbytes / 1000 ** power:.3g} {unit}"
    return f"{int(nbytes)} bytes"
