"""Memory budgets: parse "2GB"-style strings and pick a default."""
import os
import re

_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
          "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}


def parse_memory(value):
    """Bytes from an int or a string such as "512MB", "2GB", "1.5GiB".

    None gives the default: a quarter of physical memory, at least 256 MiB.
    """
    if value is None:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total = 8 * 2**30
        return max(256 * 2**20, total // 4)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError(f"max_memory must be positive, got {value}")
        return int(value)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([KMGT]?I?B?)\s*", str(value).upper())
    if not m or m.group(2) not in _UNITS:
        raise ValueError(f"cannot read a memory size from {value!r} (use e.g. '512MB', '2GB')")
    nbytes = int(float(m.group(1)) * _UNITS[m.group(2)])
    if nbytes <= 0:
        raise ValueError(f"max_memory must be positive, got {value!r}")
    return nbytes
