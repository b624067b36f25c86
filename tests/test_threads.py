"""The BLAS caps around the kernel's parallel regions: one thread inside, the previous
limits after (also after an error), and the pools found again once modules were imported."""
import sys
import types

import pytest
from threadpoolctl import threadpool_info

from aflite_fast.runtime import threads


def _blas_threads():
    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def test_limit_blas_threads_caps_and_restores():
    before = _blas_threads()
    if not before:
        pytest.skip("no BLAS thread pool in this process")
    with threads.limit_blas_threads():
        assert set(_blas_threads()) == {1}
    assert _blas_threads() == before
    with pytest.raises(RuntimeError):
        with threads.limit_threads(None):
            assert set(_blas_threads()) == {1}
            raise RuntimeError("inside")
    assert _blas_threads() == before


def test_pools_are_found_again_after_an_import(monkeypatch):
    first = threads._thread_pools()
    assert threads._thread_pools() is first  # nothing imported since: kept
    monkeypatch.setitem(sys.modules, "aflite_fast_test_new_module", types.ModuleType("x"))
    assert threads._thread_pools() is not first
