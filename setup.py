"""Build of the compiled extensions; metadata lives in pyproject.toml.

OpenMP is used when the compiler supports it; otherwise the extension is built without it
and runs single-threaded (a warning says so).  Compiler flags stay portable: the GEMM picks
AVX-512 / AVX2 code paths at run time, so no -march=native is needed.
"""
import os
import sys
import tempfile
import textwrap

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("csrc")


def _compiler_has_openmp(compiler):
    """Compile and link a tiny OpenMP program; True if it works."""
    if os.environ.get("AFLITE_FAST_NO_OPENMP"):
        return False
    src = textwrap.dedent(
        """
        #include <omp.h>
        int main(void) { int n = 0;
        #pragma omp parallel reduction(+:n)
        n += 1;
        return n > 0 ? 0 : 1; }
        """
    )
    flag = "/openmp" if compiler.compiler_type == "msvc" else "-fopenmp"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "check_openmp.c")
        with open(path, "w") as fh:
            fh.write(src)
        try:
            objs = compiler.compile([path], output_dir=tmp, extra_postargs=[flag])
            compiler.link_executable(objs, os.path.join(tmp, "check_openmp"),
                                     extra_postargs=[] if compiler.compiler_type == "msvc" else [flag])
        except Exception:  # any compile or link failure means: no OpenMP
            return False
    return True


class BuildExt(build_ext):
    def build_extensions(self):
        has_omp = _compiler_has_openmp(self.compiler)
        if not has_omp:
            sys.stderr.write("aflite_fast: OpenMP not available; building a single-threaded kernel.\n")
        msvc = self.compiler.compiler_type == "msvc"
        for ext in self.extensions:
            if msvc:
                ext.extra_compile_args += ["/O2"] + (["/openmp"] if has_omp else [])
            else:
                # -O3 but never -ffast-math: the kernel relies on a fixed summation order.
                ext.extra_compile_args += ["-O3", "-std=gnu11", "-ffp-contract=fast"]
                if has_omp:
                    ext.extra_compile_args.append("-fopenmp")
                    ext.extra_link_args.append("-fopenmp")
        super().build_extensions()


def extensions():
    from Cython.Build import cythonize

    kernel = Extension(
        "aflite_fast.core._kernel",
        sources=["aflite_fast/core/_kernel.pyx", os.path.join(CSRC, "afl_gemm.c"),
                 os.path.join(CSRC, "afl_member.c"), os.path.join(CSRC, "afl_dual.c")],
        include_dirs=[CSRC],
        depends=[os.path.join(CSRC, h) for h in ("afl_gemm.h", "afl_gemm_impl.h", "afl_exp_impl.h", "afl_losses.h",
                                                  "afl_omp.h", "afl_member.h", "afl_member_impl.h",
                                                  "afl_dual.h", "afl_dual_impl.h", "afl_dual_model.h")],
    )
    # sparse (CSR) rows: the member pass and prediction (docs/sparse.md)
    sparse_kernel = Extension(
        "aflite_fast.core._sparse_kernel",
        sources=["aflite_fast/core/_sparse_kernel.pyx", os.path.join(CSRC, "afl_sparse.c")],
        include_dirs=[CSRC],
        depends=[os.path.join(CSRC, h) for h in ("afl_sparse.h", "afl_losses.h", "afl_omp.h")],
    )
    # the row helpers of the filtering path (input checks, membership): no OpenMP, no csrc
    rowscan = Extension("aflite_fast.io._rowscan", sources=["aflite_fast/io/_rowscan.pyx"])
    return cythonize(
        [kernel, sparse_kernel, rowscan],
        compiler_directives={"language_level": 3, "boundscheck": False, "wraparound": False,
                             "cdivision": True, "initializedcheck": False},
    )


setup(ext_modules=extensions(), cmdclass={"build_ext": BuildExt})
