"""The GEMM's code path is the one asked for.

The compiled GEMM picks its instruction set once, at its first use: AVX-512 when the CPU has
AVX-512F and AVX-512VL, else AVX2 when it has AVX2 and FMA, else the generic C code.  The
environment variable ``AFLITE_FAST_ISA`` lowers the choice for tests and benchmarks of each
path: ``avx2`` (AVX2 even on an AVX-512 CPU) or ``generic``; any other value keeps the
default.  ``.ci/run`` and ``.ci/isa_suites`` run tests with each value; these tests fail when
the kernel runs another path than the one the run claims to test, so a run "with avx2" that
silently ran AVX-512 (a misspelt value, a CPU without AVX2) does not pass for one.
"""
import importlib
import os
import platform

import pytest

PATHS = ("avx512", "avx2", "generic")


def gemm_isa():
    """The path the kernel reports (``afl_gemm_isa``), wherever the package keeps its kernel."""
    for name in ("aflite_fast._kernel", "aflite_fast.core._kernel"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return module.gemm_isa()
    raise AssertionError("no compiled kernel with gemm_isa() found in aflite_fast")


def _cpu_flags():
    """The CPU's feature flags from /proc/cpuinfo (Linux), or None where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def _best_path(flags):
    if {"avx512f", "avx512vl"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "generic"


def test_reported_path_is_a_known_one():
    assert gemm_isa() in PATHS


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64") or _cpu_flags() is None,
                    reason="needs an x86-64 CPU whose flags /proc/cpuinfo lists")
def test_path_is_the_one_asked_for():
    """With AFLITE_FAST_ISA=avx2 / generic the kernel runs that path; without it (or with
    another value) the best one the CPU has."""
    best = _best_path(_cpu_flags())
    asked = os.environ.get("AFLITE_FAST_ISA", "")
    if asked == "generic":
        expected = "generic"
    elif asked == "avx2":
        if best == "generic":
            pytest.fail("AFLITE_FAST_ISA=avx2 on a CPU without AVX2 and FMA: the run tests the "
                        "generic path, not AVX2")
        expected = "avx2"
    else:
        assert asked in ("", "avx512"), (
            f"AFLITE_FAST_ISA={asked!r} is not one of avx2, generic (or avx512 / unset for the default)")
        expected = best
    assert gemm_isa() == expected, (f"AFLITE_FAST_ISA={asked!r}: the kernel runs {gemm_isa()!r}, "
                                    f"expected {expected!r} on this CPU")


def test_an_unknown_value_is_ignored_with_a_warning(child_process):
    """A misspelt AFLITE_FAST_ISA (a prefix, another case) leaves the best path and says so."""
    import subprocess
    import sys

    code = ("import warnings; warnings.simplefilter('error')\n"
            "try:\n    import aflite_fast.core.compiled\n"
            "except RuntimeWarning as w:\n    print(w)\n")
    env = dict(child_process["env"], AFLITE_FAST_ISA="avx")
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=child_process["cwd"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "AFLITE_FAST_ISA='avx' is not one of avx512, avx2, generic: ignored" in proc.stdout
