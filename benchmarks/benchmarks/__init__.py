"""asv benchmarks for aflite_fast (see ../README.md).

The data generator and the scikit-learn baseline live one directory up
(``benchmarks/skewed_data.py``, ``benchmarks/baseline.py``) so that ``compare_phase.py`` can use
them without asv; put that directory on the path for the benchmark modules.
"""
import os
import sys

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
