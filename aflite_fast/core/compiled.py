"""The compiled kernel (``_kernel``), imported with a readable error when the extension was not built.

Every module of the package that calls the kernel imports it from here, so a broken install
fails with one message that says how to build (:mod:`aflite_fast._build_check`) instead of a
bare ImportError from whichever module came first.
"""
try:
    from aflite_fast.core import _kernel
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    from aflite_fast._build_check import raise_build_error

    raise_build_error(exc)

#: The values ``AFLITE_FAST_ISA`` takes (tests and benchmarks of each code path).
ISA_NAMES = ("avx512", "avx2", "generic")


def _check_isa_request():
    import os
    import warnings

    asked = os.environ.get("AFLITE_FAST_ISA")
    if asked is not None and asked not in ISA_NAMES:
        warnings.warn(f"AFLITE_FAST_ISA={asked!r} is not one of {', '.join(ISA_NAMES)}: ignored, the kernel runs "
                      f"its {_kernel.gemm_isa()} path", RuntimeWarning, stacklevel=3)


_check_isa_request()

__all__ = ["ISA_NAMES", "_kernel"]
