"""The only reasons a test may skip: hardware or a hardware toolchain this machine lacks.

Every skip in the suite goes through one of these markers, so its reason starts with HARDWARE and the
skip policy (tests/skip_policy.py) can tell it from a skip that hides a missing Python package.
"""
from __future__ import annotations

import pytest

from grader.diagnose.profile import ncu_path
from grader.diagnose.run import sanitizer_path
from grader.execute.cpu.build import compiler
from grader.execute.gpu.detect import gpu_unavailable_reason
from grader.execute.nvcc.compile import nvcc_path

HARDWARE = "hardware:"  # every allowed skip reason starts with this


def _skip_unless(missing: str | None) -> pytest.MarkDecorator:
    return pytest.mark.skipif(missing is not None, reason=f"{HARDWARE} {missing}")


needs_gpu = _skip_unless(gpu_unavailable_reason())
needs_nvcc = _skip_unless(None if nvcc_path() else "nvcc (the CUDA toolkit) is not on PATH")
needs_sanitizer = _skip_unless(None if sanitizer_path() else "compute-sanitizer (the CUDA toolkit) is not installed")
# The CLI's own no-GPU message is what some tests check: on a GPU machine it cannot appear.
without_gpu = _skip_unless("this machine has a GPU" if gpu_unavailable_reason() is None else None)
# g++ is not hardware: CI must have it. Without it these tests skip, and the skip policy fails the run
# with this reason, rather than dozens of tests failing on a missing compiler.
needs_cxx = pytest.mark.skipif(compiler() is None, reason="no C++ compiler (g++) for the CPU emulator: install g++")
# Nsight Compute, for the measured feedback (issue 26): with a GPU, the lent machines have it.
needs_ncu = _skip_unless(None if ncu_path() else "Nsight Compute (ncu) is not installed")
