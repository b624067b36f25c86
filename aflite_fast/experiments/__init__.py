"""Reproducible experiments from the AFLite paper (Le Bras et al., ICML 2020).

- :mod:`aflite_fast.experiments.synthetic`: section 3, Figure 2 and Table 7 (concentric
  circles with planted spurious features), also run by ``aflite-fast synthetic --out DIR``.
"""

from .synthetic import (
    SyntheticLevelResult,
    run_synthetic_experiment,
    run_synthetic_levels,
)

__all__ = ["SyntheticLevelResult", "run_synthetic_experiment", "run_synthetic_levels"]
