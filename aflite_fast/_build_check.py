"""A readable error when the compiled extension is missing (e.g. running from a source tree).

The common case: the package was installed (``pip install .``) and Python was then started in
the repository's root, whose source folder ``aflite_fast/`` comes first on ``sys.path`` and
has no compiled kernel.  The message says so, names the installed copy it hides, and gives the
two fixes that work: start Python in another directory, or build the kernel in place.
"""
import glob
import importlib.machinery
import os
import sys

INSTRUCTIONS = """
aflite_fast's compiled kernel could not be imported:

    {error}

This aflite_fast is the source folder {here}, whose kernel was not built.{shadow}
Either
  - start Python in another directory (the source folder is found first only from the
    repository's root), using the installed package: pip install . (from the root), or
  - build the kernel in place, to use and edit the source tree itself:
        pip install setuptools wheel cython numpy scipy     # build requirements, once
        python setup.py build_ext --inplace

Building needs a C compiler; OpenMP is optional.
"""

SHADOW = """
An installed aflite_fast at {installed} is hidden by it: Python looks in the current
directory first."""


def installed_elsewhere(here):
    """Folder of another aflite_fast on ``sys.path`` (not ``here``) that holds a compiled
    kernel, or None."""
    root = os.path.realpath(os.path.dirname(here))
    others = [p for p in sys.path if os.path.realpath(p or os.getcwd()) != root]
    spec = importlib.machinery.PathFinder.find_spec("aflite_fast", others)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        if any(glob.glob(os.path.join(folder, "core", "_kernel" + suffix))
               for suffix in importlib.machinery.EXTENSION_SUFFIXES):
            return folder
    return None


def raise_build_error(error):
    here = os.path.dirname(os.path.abspath(__file__))
    installed = installed_elsewhere(here)
    shadow = "" if installed is None else SHADOW.format(installed=installed)
    raise ImportError(INSTRUCTIONS.format(error=error, here=here, shadow=shadow)) from error
