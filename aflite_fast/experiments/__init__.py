"""Reproducible experiments from the AFLite paper (Le Bras et al., ICML 2020).

- :mod:`aflite_fast.experiments.synthetic`: section 3, Figure 2 and Table 7 (concentric
  circles with planted spurious features), also run by ``aflite-fast synthetic --out DIR``.
"""

__all__ = ["SyntheticLevelResult", "run_synthetic_experiment", "run_synthetic_levels"]


def __getattr__(name):
    # imported on first use, so the command line's parsers can read ._names without NumPy
    if name in __all__:
        from aflite_fast.experiments import synthetic

        return getattr(synthetic, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
