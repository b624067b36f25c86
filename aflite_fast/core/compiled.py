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

__all__ = ["_kernel"]
