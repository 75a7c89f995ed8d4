"""Where a grade runs: the engine (GPU, CPU emulator, or none), its sandbox, and its place on the machine."""
from __future__ import annotations

import functools
import socket
from dataclasses import dataclass

from .config import Config
from .execute.confine.sandbox import Sandbox, detect
from .execute.gpu.device_lock import DeviceLock
from .execute.spawn import EarlyChildren, Placement
from .result import Provenance

GPU, CPU = "gpu", "cpu"
# Said with every grade on the CPU emulator (its result's message, the skipped timing check)
CPU_NOTE = "CPU emulation: correctness checked, timing skipped"


@dataclass
class RunPlan:
    """Where the cases run: "gpu", "cpu" (emulation), or None for the static check and compile only."""

    backend: str | None
    skip_reason: str = ""  # shown on each skipped check when backend is None
    note: str = ""  # why this backend, shown with the result
    placement: Placement | None = None  # which GPU, and its timing lock, in a batch
    # compute-sanitizer's diagnosis is a check (GPU backend): run where it sees what the CPU emulator cannot (a
    # GPU fault, a kernel the emulator cannot build), or on every kernel with sanitize_always (--sanitize).
    sanitize: bool = False
    sanitize_always: bool = False
    # How many emulator workers run one grade's cases side by side (0: one per core it may use). A batch, which
    # grades a student per core, gives each student one; beside a GPU child, the child keeps a core.
    emulator_workers: int = 0
    profile: bool = False  # also measure the kernel and the reference with Nsight Compute (GPU backend, advice)
    sandbox: Sandbox | None = None  # where student code runs; None: the strongest this machine allows
    # In a batch worker: its socket to the batch parent, which checks kernels under the sanitizer in groups
    # (diagnose/groups.py); None grades alone.
    sanitizer_channel: int | None = None
    # What every student of the run is graded with but what they hand in (provenance.class_provenance): made once
    # by the batch's workers on the host they grade on, not again in each student's process (nvcc --version, the
    # grader's code hashed); None: the grade makes it.
    provenance: Provenance | None = None
    # The children this grade's runs take, started before their jobs were ready (execute/early.py); set by the
    # grade for itself alone, never shared between grades.
    early: EarlyChildren | None = None


@functools.cache
def _detected_sandbox() -> Sandbox:
    return detect()


def sandbox_of(plan: RunPlan) -> Sandbox:
    return plan.sandbox or _detected_sandbox()


def placement_of(plan: RunPlan, config: Config) -> Placement:
    """The batch's placement, or for one submission the machine's GPU (or the CPU emulator), with its turns
    kept in the cache folder: a single grade and a batch on one machine take turns on the same lock."""
    if plan.placement is not None:
        return plan.placement
    return Placement(lock=device_lock(config, None if plan.backend == GPU else CPU))


def device_lock(config: Config, gpu: int | str | None) -> DeviceLock:
    """The lock of one GPU (by its index among the visible ones), of the GPU a child sees by default
    (None), or of "cpu" for the emulator."""
    if gpu is None:
        gpu = Placement().gpu_name()
    # Per host: cluster workers whose cache sits in one shared home folder (NFS) must not queue for each
    # other's "gpu0".
    turns = config.cache_dir / "turns" / socket.gethostname()
    if gpu == CPU:
        return DeviceLock(turns, CPU, shared_kinds=frozenset({"case"}))
    return DeviceLock(turns, f"gpu{gpu}", shared_kinds=frozenset({"sanitizer"}))
