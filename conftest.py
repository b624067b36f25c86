"""Make ``python -m pytest`` from the repository root test the *installed* package.

``python -m`` puts the current directory first on sys.path, where the source package has
no compiled kernel after a plain ``pip install .``.  When the source tree holds no built
extension, drop it from sys.path so the installed copy is imported.  After an in-place
build (``python setup.py build_ext --inplace`` or ``pip install -e .``) the source tree is used.
"""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _source_tree_is_built():
    pkg = os.path.join(_HERE, "aflite_fast", "core")
    return os.path.isdir(pkg) and any(name.startswith("_kernel.") and name.endswith((".so", ".pyd"))
                                      for name in os.listdir(pkg))


if not _source_tree_is_built():
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
