"""Which children a grade will run, started as soon as its run plan is known (issue 50): before the parent imports the
pipeline and runs the static check, so that their interpreter start, imports and CUDA initialisation overlap that
work. Each waits for its job (spawn.py); the runs take them (child_run.py); the grade closes what nobody took.

A GPU grade runs the GPU child, and the CPU emulator's driver beside it where this host has a C++ compiler and the
emulator has cases to run (on_gpu.py), and begins guessing the GPU's toolchain where no child has told it yet; a CPU
grade runs the driver alone (on_cpu.py); a grade with no engine (--no-run, or nothing to run on) starts nothing.
"""
from __future__ import annotations

from ..cases import Case, emulator_cases
from ..config import Config
from ..plan import CPU, GPU, RunPlan, sandbox_of
from .cpu.compiler import compiler
from .spawn import ChildProgram, EarlyChildren, Placement


def start_early(config: Config, cases: list[Case], plan: RunPlan) -> EarlyChildren:
    """The children this grade will need, started now and waiting for their jobs."""
    early = EarlyChildren()
    try:
        _start(early, str(config.cache_dir), cases, plan)
    except Exception:  # noqa: BLE001 - a head start only: each run starts its own child, and says what is wrong
        pass
    return early


def _start(early: EarlyChildren, cache_dir: str, cases: list[Case], plan: RunPlan) -> None:
    emulated = emulator_cases(cases)
    if plan.backend == GPU:
        placement = plan.placement or Placement()
        try:
            early.start(ChildProgram.gpu_child(sandbox_of(plan)), placement, cases, cache_dir)
            if emulated and compiler() is not None:
                early.start(ChildProgram.cpu_driver(), Placement(), emulated, cache_dir)  # on_gpu's _emulator_plan
        finally:  # where a child could not start early, its run starts it, and the guess helps that one alike
            _guess_toolchain(cache_dir, placement)
    elif plan.backend == CPU and emulated:
        early.start(ChildProgram.cpu_driver(), plan.placement or Placement(), emulated, cache_dir)


def _guess_toolchain(cache_dir: str, placement: Placement) -> None:
    """Where no GPU child has told this GPU's toolchain yet (a fresh cache: a first grade, the first after `grade
    prepare`, every LMS container's), the parent's guess of it begun now, with the children (cubin_cache.guess_soon),
    for every GPU grade: the compiles ahead wait for it as the job is handed over, which on the H200 host waited
    0.16 s for a guess begun later, with the pipeline's grade."""
    from .nvcc import cubin_cache  # after the children's start: it imports the CUDA grammar

    cubin_cache.guess_soon(cache_dir, placement.gpu_name())
