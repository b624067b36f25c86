"""A readable error when the compiled extension is missing (e.g. running from a source tree)."""

INSTRUCTIONS = """
aflite_fast's compiled kernel could not be imported:

    {error}

If you are working from a source checkout, build it first:

    pip install .            # or: pip install -e . --no-build-isolation
    python setup.py build_ext --inplace

It needs a C compiler and Cython; OpenMP is optional.
"""


def raise_build_error(error):
    raise ImportError(INSTRUCTIONS.format(error=error)) from error
