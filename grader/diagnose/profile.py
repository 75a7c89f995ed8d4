"""Nsight Compute on a GPU (issue 26): one launch of the student's kernel and one of the reference's on the
timing shape, measured, told as advice (source "ncu"). Opt-in: `grade --profile` (ncu costs a second or
two per kernel, too much for every grade of a batch).

Each launch is the sanitizer's launch program (launch_kernel.c: the GPU run's module, the contract's
parameter order and geometry, the launch's dynamic shared memory) under `ncu`, in the sandbox, holding the
device alone for its launch (a "profile" turn: no other kernel may share the GPU while counters are read).
ncu writes its CSV to a file of its own in the tool's folder (the kernel's printf cannot forge it), which
the parent reads bounded and parses as untrusted text (ncu_csv.py). The reference's figures are kept in the
cache per GPU, shape and reference text, so a class profiles it once.
"""
from __future__ import annotations

import glob
import hashlib
import json
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cache_file import keep
from ..contract import REFERENCE, KernelContract
from ..execute.confine.proc import BACKGROUND_NICE, run_killable
from ..execute.confine.sandbox import GPU_LIMITS, Confinement, Sandbox, child_environment, scratch_folder
from ..execute.nvcc.compile import MAX_CUBIN_BYTES, TILE_PROBE_SYMBOL, nvcc_path, prepare_source
from ..execute.nvcc.cubin_resources import cubin_arch, device_int
from ..execute.protocol import read_untrusted
from ..execute.runner import Placement
from ..result import BANK_CONFLICT, THROUGHPUT, UNCOALESCED_LOAD, UNCOALESCED_STORE, Feedback
from . import run as sanitizer_run
from .launcher import LauncherUnavailable, launcher, staged_inputs
from .ncu_csv import MAX_CSV_BYTES, METRICS, KernelProfile, LineCounters, parse, parse_source_lines
from .resources import REFERENCE_FILE, build_cubin

NCU_PATHS = ("/usr/local/cuda/bin/ncu",)
# Where Nsight Compute itself is installed. The toolkit's bin/ncu is a shell script that looks for it (under
# the toolkit, else /opt/nvidia): the sandbox sees only what it binds, so the grader runs the real binary and
# binds its installation folder.
NCU_INSTALLS = ("/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/nsight-compute*/ncu")
PROFILE_TIMEOUT_S = 90.0  # ncu's start, its passes over the launch and its report, per kernel
PROFILE_LAUNCH_S = 30.0  # of which the launch under ncu (every replay pass of it) while the GPU is held
TURN = "profile"  # a device turn of its own kind: never shared, so nothing else runs while counters count
SLOWER = 0.8  # a figure this much worse than the reference's is told
# Beyond what a warp's 32 floats need (4 sectors; the reference loads A and B tiles coalesced)
SECTOR_MARGIN, WAY_MARGIN = 1.5, 0.5


def ncu_path() -> str | None:
    """The ncu program itself where an installation of Nsight Compute is found (the newest), else the `ncu` on
    PATH or in the toolkit."""
    installed = sorted((path for pattern in NCU_INSTALLS for path in glob.glob(pattern) if Path(path).is_file()),
                       key=_version_order)
    if installed:
        return installed[-1]
    return shutil.which("ncu") or next((p for p in NCU_PATHS if Path(p).is_file()), None)


def _version_order(path: str) -> tuple[int, ...]:
    """2025.3.1 in .../nsight-compute/2025.3.1/ncu or .../nsight-compute-2025.3.1/ncu, as numbers."""
    return tuple(int(part) for part in re.findall(r"\d+", Path(path).parent.name))


@dataclass
class Profiled:
    profile: KernelProfile | None
    problem: str = ""  # why there is no profile: the grader's side, for the instructor
    seconds: float = 0.0


def profile_cubin(cubin: str | Path, contract: KernelContract, tile: int, shape: tuple[int, int, int],
                  placement: Placement, sandbox: Sandbox, cache_dir: Path) -> Profiled:
    """ncu's figures for one launch of the contract's kernel in `cubin` on `shape` (the lead's comparisons
    with the emulator call this: .profile.sectors_per_load, .profile.shared_load_ways, ...)."""
    def options(tool: str, symbol: str, work: Path) -> list[str]:
        return ncu_command(tool, symbol, work / "ncu.csv", [])

    def figures(tool: str, work: Path, confinement: Confinement) -> tuple[KernelProfile | None, str]:
        profiles = [p for p in parse(_read(work / "ncu.csv")) if p.metrics]
        return (profiles[0], "") if profiles else (None, "ncu gave no figures")

    profile, problem, seconds = _under_ncu(cubin, contract, tile, shape, placement, sandbox, cache_dir, options,
                                           figures)
    return Profiled(profile, problem, seconds)


def profile_lines(cubin: str | Path, source: str, contract: KernelContract, tile: int, shape: tuple[int, int, int],
                  placement: Placement, sandbox: Sandbox, cache_dir: Path) -> tuple[dict[int, LineCounters], str]:
    """What ncu measured at each line of the student's file (its SourceCounters section, read back from the
    report's source page: the cubin's -lineinfo names kernel.cu's own lines), over one launch on `shape`; and
    why there is nothing, where there is not."""
    def options(tool: str, symbol: str, work: Path) -> list[str]:
        return [tool, "--section", "SourceCounters", "--kernel-name-base", "mangled", "--kernel-name", symbol,
                "--launch-count", "1", "--cache-control", "all", "--clock-control", "base", "-f", "-o",
                str(work / "lines")]

    def counters(tool: str, work: Path, confinement: Confinement) -> tuple[dict[int, LineCounters], str]:
        (work / "kernel.cu").write_text(source, encoding="utf-8")  # the text the line numbers are of
        command = [tool, "--import", str(work / "lines.ncu-rep"), "--page", "source", "--csv", "--print-source",
                   "cuda,sass", "--resolve-source-file", str(work / "kernel.cu"), "--log-file",
                   str(work / "lines.csv")]
        try:  # the report was written beside a launch of student code: read in the sandbox too
            finished = run_killable(command, PROFILE_TIMEOUT_S, env=child_environment(str(work), {}),
                                    start=lambda cmd, **kw: sandbox.popen(cmd, confinement, **kw))
        except (OSError, RuntimeError) as error:
            return {}, f"ncu could not read its report: {error}"
        lines = parse_source_lines(_read(work / "lines.csv") or finished.output[:MAX_CSV_BYTES])
        return lines, "" if lines else "ncu's report has no counters by source line"

    lines, problem, _ = _under_ncu(cubin, contract, tile, shape, placement, sandbox, cache_dir, options, counters)
    return lines or {}, problem


def _under_ncu(cubin: str | Path, contract: KernelContract, tile: int, shape: tuple[int, int, int],
               placement: Placement, sandbox: Sandbox, cache_dir: Path, options: Callable[[str, str, Path], list[str]],
               read: Callable[[str, Path, Confinement], tuple[Any, str]]) -> tuple[Any, str, float]:
    """One launch of the kernel in `cubin` under ncu (`options(tool, symbol, work)`: ncu and its options, the
    launch program after them), in the sandbox, holding the device alone; then `read(tool, work, confinement)`
    -> (what it measured, why nothing) while its folder exists. (value, problem, seconds)."""
    started = time.perf_counter()
    tool = ncu_path()
    if tool is None:
        return None, "Nsight Compute (ncu) is not installed", 0.0
    try:
        program = launcher(cache_dir)
    except LauncherUnavailable as error:
        return None, str(error), 0.0
    with scratch_folder("sgemm-profile-") as root:
        inputs = staged_inputs(root, program, {"kernel.cubin": Path(cubin)})
        symbol = sanitizer_run.kernel_symbol_of(inputs / "kernel.cubin", contract)
        launch = sanitizer_run.launch_command(inputs / "launch_kernel", inputs / "kernel.cubin", contract, tile,
                                              shape, symbol)
        work = root / "ncu"
        work.mkdir()
        confinement = Confinement(work, GPU_LIMITS, cuda=True, gpu=True,
                                  readable=(inputs, Path(tool).resolve().parent), nice=BACKGROUND_NICE)
        watched = sanitizer_run.watch([*options(tool, symbol, work), *launch], confinement, sandbox,
                                      child_environment(str(work), placement.environment()), PROFILE_TIMEOUT_S,
                                      PROFILE_LAUNCH_S, placement, TURN)
        launched = next((e for e in watched.events if e["event"] == "launched"), None)
        if watched.timed_out or launched is None:
            problem = "timed out under ncu" if watched.timed_out else "the kernel was not launched under ncu"
            return None, problem, time.perf_counter() - started
        value, problem = read(tool, work, confinement)
    if launched["status"] != "ok" or value is None:
        why = problem or "ncu gave no figures"
        return None, f"{why} (launch: {launched['status']}, exit {watched.returncode})", time.perf_counter() - started
    return value, "", time.perf_counter() - started


def ncu_command(tool: str, symbol: str, report: Path, launch: list[str]) -> list[str]:
    """ncu over the launch program: the one launch of `symbol`, the grader's metrics, CSV in base units into
    `report` (a file of ncu's own, not the kernel's stdout)."""
    return [tool, "--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(METRICS),
            "--kernel-name-base", "mangled", "--kernel-name", symbol, "--launch-count", "1",
            "--cache-control", "all", "--clock-control", "base", "--log-file", str(report), *launch]


def _read(path: Path) -> str:
    try:
        return read_untrusted(path, MAX_CSV_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def reference_profile(reference_source: str, student_cubin: bytes, options: list[str], shape: tuple[int, int, int],
                      device: str, placement: Placement, sandbox: Sandbox, cache_dir: Path,
                      timeout: float) -> Profiled:
    """The reference kernel compiled as the student's (same options, same architecture), profiled the same way;
    its figures cached per GPU, shape, text and options."""
    arch = cubin_arch(student_cubin) or ""
    prepared = prepare_source(reference_source, REFERENCE_FILE)
    key = hashlib.sha256("\0".join([prepared, *options, arch, device, str(shape), str(nvcc_path()),
                                    ",".join(METRICS)]).encode()).hexdigest()
    stored = Path(cache_dir, "profiles", f"{key}.json")
    try:
        data = json.loads(stored.read_text(encoding="utf-8"))
        return Profiled(KernelProfile(data["kernel"], {k: float(v) for k, v in data["metrics"].items()}))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    cubin = build_cubin(prepared, arch, options, timeout, sandbox) if arch else b""
    if not cubin:
        return Profiled(None, "the reference did not compile for profiling")
    with scratch_folder("sgemm-profile-ref-") as folder:
        path = Path(folder, "reference.cubin")
        path.write_bytes(cubin)
        tile = _reference_tile(cubin)
        profiled = profile_cubin(path, REFERENCE, tile, shape, placement, sandbox, cache_dir)
    if profiled.profile is not None:
        keep(stored, json.dumps({"kernel": profiled.profile.kernel, "metrics": profiled.profile.metrics}))
    return profiled


def _reference_tile(cubin: bytes) -> int:
    return device_int(cubin, TILE_PROBE_SYMBOL) or REFERENCE.block_size


def profile_feedback(student: KernelProfile, reference: KernelProfile | None) -> list[Feedback]:
    """What ncu measured, told where it is worse than the reference's on the same shape (pure)."""
    found = []
    ref = reference or KernelProfile("")
    mine_fp, ref_fp = student.fp32_pct, ref.fp32_pct
    if mine_fp is not None and (ref_fp is None or mine_fp < SLOWER * ref_fp):
        dram = f" and {student.dram_pct:g}% of its DRAM bandwidth" if student.dram_pct is not None else ""
        versus = f"; the reference reached {ref_fp:g}%" if ref_fp is not None else ""
        found.append(Feedback(THROUGHPUT, f"measured on the timing shape, the kernel reached {mine_fp:g}% of the "
                              f"GPU's FP32 peak{dram}{versus}",
                              "the findings below say where the time goes: memory accesses first, then occupancy",
                              value=mine_fp, reference_value=ref_fp, unit="% of peak FP32", source="ncu"))
    found += _worse(UNCOALESCED_LOAD, "global loads", student.sectors_per_load, ref.sectors_per_load, SECTOR_MARGIN,
                    "sectors per request", "consecutive threadIdx.x should read consecutive addresses (columns of a "
                    "row-major matrix)")
    found += _worse(UNCOALESCED_STORE, "global stores", student.sectors_per_store, ref.sectors_per_store,
                    SECTOR_MARGIN, "sectors per request", "consecutive threadIdx.x should write consecutive columns "
                    "of C")
    for kind, ways, ref_ways in (("loads", student.shared_load_ways, ref.shared_load_ways),
                                 ("stores", student.shared_store_ways, ref.shared_store_ways)):
        found += _worse(BANK_CONFLICT, f"shared-memory {kind}", ways, ref_ways, WAY_MARGIN, "way",
                        "a warp should touch 32 different banks: index tiles [ty][tx] with tx innermost, or pad a "
                        "32-wide tile to [32][33]")
    return found


def _worse(what: str, accesses: str, mine: float | None, theirs: float | None, margin: float, unit: str,
           advice: str) -> list[Feedback]:
    if mine is None or (theirs is not None and mine <= theirs + margin):
        return []
    if theirs is None and mine <= (4 + margin if unit != "way" else 1 + margin):
        return []
    said = f"measured by Nsight Compute, the kernel's {accesses} take {mine:g} {unit}"
    said += f" on average where the reference's take {theirs:g}" if theirs is not None else " on average"
    return [Feedback(what, said, advice, value=mine, reference_value=theirs, unit=unit, source="ncu")]


def profile_submission(student_cubin_path: str, contract: KernelContract, tile: int, shape: tuple[int, int, int],
                       reference_source: str, options: list[str], device: str, placement: Placement,
                       sandbox: Sandbox, cache_dir: Path, compile_timeout: float) -> tuple[list[Feedback], dict]:
    """The student's kernel and the reference's, profiled; their findings and figures. Without ncu, or when a
    run gives no figures: no findings, and the figures say why (for the instructor)."""
    if ncu_path() is None:
        return [], {"skipped": "Nsight Compute (ncu) is not installed"}
    try:
        student_bytes = read_untrusted(Path(student_cubin_path), MAX_CUBIN_BYTES)
    except OSError:
        return [], {"skipped": "the GPU run left no compiled module to profile"}
    mine = profile_cubin(student_cubin_path, contract, tile, shape, placement, sandbox, cache_dir)
    if mine.profile is None:
        return [], {"problem": mine.problem, "seconds": round(mine.seconds, 2)}
    theirs = reference_profile(reference_source, student_bytes, options, shape, device, placement, sandbox,
                               cache_dir, compile_timeout)
    figures = {"student": mine.profile.figures(), "seconds": round(mine.seconds + theirs.seconds, 2)}
    if theirs.profile is not None:
        figures["reference"] = theirs.profile.figures()
    else:
        figures["reference_problem"] = theirs.problem
    return profile_feedback(mine.profile, theirs.profile), figures
