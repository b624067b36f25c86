"""Names and codes of the built-in losses, importable without NumPy.

The command line lists these in ``--help`` without importing the numerical modules; the
registry itself (parameters, validation) is :mod:`aflite_fast.core.losses`.
"""

#: Integer code of each loss; they match the enum in ``csrc/afl_losses.h``.
LOSS_CODES = {"ce": 0, "gce": 1, "gce_trunc": 2, "mae": 3, "sce": 4, "forward": 5, "user": 6}

#: Names accepted by ``loss=`` everywhere (API and command line).
LOSS_NAMES = tuple(name for name in LOSS_CODES if name != "user")
