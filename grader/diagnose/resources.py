"""Feedback from the compiled kernel (issue 26), wherever nvcc is: registers, shared memory and local memory
read from the student's cubin (cubin_resources.py, pure Python: no native tool parses student-derived bytes
outside the sandbox), the theoretical occupancy they allow on the lab's GPU (judge/occupancy.py), compared
with the reference kernel compiled the same way (nvcc in the sandbox, same options, same architecture).

The reference's resources are kept in the cache by the hash of its text, the options, the architecture and
nvcc's path, so a batch compiles it once. Advice only: nothing here changes a check or a point.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
import traceback
from dataclasses import asdict
from pathlib import Path

from ..cache_file import keep
from ..config import Config
from ..contract import REFERENCE, KernelContract
from ..execute.confine.proc import BACKGROUND_NICE, run_killable
from ..execute.confine.sandbox import COMPILER_LIMITS, Confinement, Sandbox, child_environment, scratch_folder
from ..execute.nvcc.compile import (
    CUBIN_FILE,
    MAX_CUBIN_BYTES,
    STUDENT_FILE,
    TILE_PROBE_SYMBOL,
    nvcc_path,
    prepare_source,
)
from ..execute.nvcc.cubin_resources import cubin_arch, device_int, kernel_resources
from ..execute.nvcc.kernel_params import calls_printf, kernel_symbol
from ..execute.protocol import read_untrusted
from ..judge.occupancy import ArchLimits, Launched, Resources, limits_for, occupancy_feedback, of
from ..result import CheckResult, Feedback, SubmissionResult

REFERENCE_FILE = "reference.cu"


def launched(cubin: bytes, contract: KernelContract, tile: int | None) -> tuple[Launched | None, int | None]:
    """The contract's kernel in `cubin` as the lab launches it (tile × tile blocks, the launch's dynamic shared
    memory), and the tile used: the run's, else the tile probe compiled into the cubin, else the config's."""
    resources = kernel_resources(cubin, kernel_symbol(cubin, contract))
    tile = tile or device_int(cubin, TILE_PROBE_SYMBOL) or contract.block_size
    if resources is None or not 0 < tile <= 32:
        return None, None
    geometry = contract.launch(tile, tile, tile)
    return Launched(resources, geometry.block[0] * geometry.block[1], geometry.shared_bytes), tile


def compiler_feedback(student_cubin: bytes, contract: KernelContract, tile: int | None, gpu: str,
                      reference: Launched | None) -> tuple[list[Feedback], dict]:
    """Occupancy and spill findings for the student's cubin on `gpu` (or the cubin's own architecture), and the
    figures behind them for the instructor (a compile check's metrics)."""
    student, _ = launched(student_cubin, contract, tile)
    arch = limits_for(gpu or cubin_arch(student_cubin) or "")
    if student is None or arch is None:
        return [], {}
    prints = calls_printf(student_cubin)
    return occupancy_feedback(arch, student, reference, prints), _figures(arch, student, reference)


def _figures(arch: ArchLimits, student: Launched, reference: Launched | None) -> dict:
    figures = {"gpu": arch.name, "registers": student.resources.registers,
               "static_shared_bytes": student.resources.static_shared, "local_bytes": student.resources.local_bytes,
               "occupancy_pct": of(arch, student).percent}
    if reference is not None:
        figures["reference_occupancy_pct"] = of(arch, reference).percent
        figures["reference_registers"] = reference.resources.registers
    return figures


def reference_launched(reference_source: str, arch: str, options: list[str], timeout: float, sandbox: Sandbox,
                       cache_dir: Path) -> Launched | None:
    """The reference kernel compiled as the student's is (C++ linkage, the same options, for `arch`), as the
    lab launches it; cached. None when it does not compile or its cubin does not say."""
    nvcc = nvcc_path()
    if nvcc is None:
        return None
    prepared = prepare_source(reference_source, REFERENCE_FILE)
    key = hashlib.sha256("\0".join([prepared, *options, arch, os.path.realpath(nvcc)]).encode()).hexdigest()
    with _build_lock(key):  # one build of it at a time in this process: a later asker reads what it kept
        return _reference_kernel(prepared, arch, options, timeout, sandbox,
                                 Path(cache_dir, "resources", f"{key}.json"))


_BUILD_LOCKS: dict[str, threading.Lock] = {}
_BUILD_LOCKS_GUARD = threading.Lock()


def _build_lock(key: str) -> threading.Lock:
    with _BUILD_LOCKS_GUARD:
        return _BUILD_LOCKS.setdefault(key, threading.Lock())


def warm_reference(reference_source: str, arch: str, options: list[str], timeout: float, sandbox: Sandbox,
                   cache_dir: Path) -> None:
    """reference_launched on a thread: a GPU grade starts it once the child says which arch it built for, so
    the reference's nvcc build (a cold cache's) runs beside the cases and the timing, not after them."""
    def build() -> None:
        try:
            reference_launched(reference_source, arch, options, timeout, sandbox, cache_dir)
        except Exception:
            pass  # add_compiler_feedback asks again, and logs what went wrong
    threading.Thread(target=build, name="reference-resources", daemon=True).start()


def _reference_kernel(prepared: str, arch: str, options: list[str], timeout: float, sandbox: Sandbox,
                      stored: Path) -> Launched | None:
    try:
        data = json.loads(stored.read_text(encoding="utf-8"))  # written by this process's kind only
        return Launched(Resources(**data["resources"]), data["threads"], data["dynamic_shared"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    cubin = build_cubin(prepared, arch, options, timeout, sandbox)
    kernel, _ = launched(cubin, REFERENCE, None) if cubin else (None, None)
    if kernel is not None:
        _store(stored, {"resources": asdict(kernel.resources), "threads": kernel.threads,
                        "dynamic_shared": kernel.dynamic_shared})
    return kernel


def build_cubin(prepared: str, arch: str, options: list[str], timeout: float, sandbox: Sandbox) -> bytes:
    """nvcc --cubin of a prepared text, in the sandbox as every compile is; b"" when it fails."""
    nvcc = nvcc_path()
    if nvcc is None:
        return b""
    with scratch_folder("sgemm-resources-") as work:
        Path(work, STUDENT_FILE).write_text(prepared, encoding="utf-8")
        confinement = Confinement(work, COMPILER_LIMITS, cuda=True, seccomp=True, nice=BACKGROUND_NICE)
        try:
            finished = run_killable([nvcc, "--cubin", *options, "-arch", arch, STUDENT_FILE, "-o", CUBIN_FILE],
                                    timeout, env=child_environment(str(work), {}),
                                    start=lambda cmd, **kw: sandbox.popen(cmd, confinement, **kw))
        except (OSError, RuntimeError):
            return b""
        if finished.timed_out or finished.returncode != 0:
            return b""
        try:
            return read_untrusted(Path(work, CUBIN_FILE), MAX_CUBIN_BYTES)
        except OSError:
            return b""


def _store(path: Path, data: dict) -> None:
    keep(path, json.dumps(data))  # a cache that cannot be written costs a compile next time, nothing else


def add_compiler_feedback(result: SubmissionResult, compiled: CheckResult, cubin: bytes | str, config: Config,
                          sandbox: Sandbox, tile: int | None) -> None:
    """The compiled kernel's findings onto result.feedback and its figures onto the compile check's metrics.
    `cubin`: the bytes nvcc built, or the GPU run's cached cubin (a path). Advice only: a failure here is
    logged for the instructor and changes nothing else."""
    try:
        data = cubin if isinstance(cubin, bytes) else read_untrusted(Path(cubin), MAX_CUBIN_BYTES) if cubin else b""
        if not data:
            return
        arch = cubin_arch(data) or config.compile.arch_without_gpu
        reference = reference_launched(config.reference_path.read_text(encoding="utf-8"), arch, config.compile.options,
                                       config.timeouts.compile_s, sandbox, config.cache_dir)
        found, figures = compiler_feedback(data, config.kernel.contract(), tile, config.feedback.gpu, reference)
    except Exception:  # advice must never cost a grade
        result.log += "\n[grader] the compiled kernel's feedback failed:\n" + traceback.format_exc()
        return
    result.feedback += found
    if figures:
        compiled.metrics["resources"] = figures
