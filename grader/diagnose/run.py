"""Sanitizer diagnosis: the kernel on small shapes under compute-sanitizer, told in student terms.

racecheck (shared-memory hazards, on one block), memcheck with padding (out-of-bounds accesses) and
synccheck (divergent barriers), both on a small ragged shape, run side by side, each in the sandbox, each
watching one launch of the module the GPU run built (same compile options, same parameter order) by
launch_kernel.c. Each has the device alone for its launch (device_lock.py), so nobody's kernel shares the
GPU with it; its time limit counts its own work only, and the launch, which holds the GPU, has a shorter
one of its own (config: sanitizer_launch_s). Their text summaries are parsed (sanitizer_log.py). A
tool's silence is trusted only when the launch demonstrably happened under it, it ended with status 0
and its summary was read; anything less is an error with its reason, never "found nothing". Worth no
points; it says what to fix. In a batch, a kernel is first checked several to a tool process, for the tools
its GPU run gives no reason to expect a finding from (groups.py), which may only ever say "clean".
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..contract import REFERENCE, KernelContract
from ..execute.confine.deadline import Deadline
from ..execute.confine.proc import BACKGROUND_NICE, TURN_NICE, kill_group, set_tree_priority
from ..execute.confine.sandbox import GPU_LIMITS, Confinement, Sandbox, child_environment, scratch_folder
from ..execute.event_pipe import TimedOut, read_events
from ..execute.gpu.device_lock import Turn
from ..execute.nvcc.compile import MAX_CUBIN_BYTES
from ..execute.nvcc.kernel_params import kernel_symbol
from ..execute.protocol import ProtocolError, read_untrusted
from ..execute.runner import Placement
from ..result import SANITIZER, CheckResult, errored, failed, passed, skipped
from .launcher import LauncherUnavailable, launcher, staged_inputs
from .sanitizer_log import SanitizerReport, describe, parse, syncthreads_lines

NAME = "compute-sanitizer"


def ragged_shape(tile: int) -> tuple[int, int, int]:
    """2×2 blocks, ragged in m and n, and k three tiles and a bit: every edge and phase kind, few threads."""
    return tile + 3, tile + 5, 3 * tile + 2


def one_block_shape(tile: int) -> tuple[int, int, int]:
    """One block, and k two tiles and a bit: a race is between threads of a block, in a phase or across
    two; more blocks only add hazards to record, and racecheck records each through the host while the
    GPU is held (a racy kernel on the ragged shape held it 3.5 s on an H100, on this one under 1.5 s)."""
    return tile, tile, 2 * tile + 2


def square_shape(tile: int) -> tuple[int, int, int]:
    """A square lab's kernel takes one size: 2×2 blocks, ragged, and two phases, the last partial."""
    return tile + 3, tile + 3, tile + 3


def shape_for(tool: str, tile: int, contract: KernelContract) -> tuple[int, int, int]:
    return square_shape(tile) if contract.square else TOOLS[tool].shape(tile)


@dataclass(frozen=True)
class Tool:
    options: tuple[str, ...]
    shape: Callable[[int], tuple[int, int, int]]


TOOLS = {
    # racecheck's analysis threads: by default one per core in every run, which side-by-side runs fight over
    "racecheck": Tool(("--racecheck-report", "hazard", "--racecheck-num-workers", "1"), one_block_shape),
    "memcheck": Tool(("--padding", "32"), ragged_shape),
    "synccheck": Tool((), ragged_shape),
}
FOUND_ERRORS_EXIT = 86  # the tool's exit status when it reported errors (--error-exitcode)
LOG_BYTES = 4 << 20
EXIT_GRACE_S = 10.0  # for the tool to write its report after the launch program ended


@dataclass(frozen=True)
class SanitizerRun:
    """What the tools check: the GPU run's module, launched the way the grader launches it."""

    cubin: str  # the module the GPU run built and ran (its compile options, -lineinfo included)
    contract: KernelContract
    tile: int
    source: str  # the student's file, for the lines of its barriers
    timeout_s: float  # each tool's own time
    launch_s: float  # of which the launch itself, while the GPU is held for it (config: sanitizer_launch_s)


@dataclass
class ToolRun:
    tool: str
    sentences: list[str] = field(default_factory=list)  # what it found, for the student
    problem: str = ""  # why its silence cannot be trusted: the grader's side, not the student's
    seconds: float = 0.0
    waited_s: float = 0.0  # for its turn on the GPU, not counted against its limit
    held_s: float = 0.0  # how long its launch held the GPU
    # Of the sentences, those the tool's report itself gives (its findings in the kernel's code, not that the
    # launch hung or failed under it), and the report they were read from.
    reported: list[str] = field(default_factory=list)
    report: SanitizerReport | None = None


def sanitizer_path() -> str | None:
    return shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if Path(p).is_file()), None)


def sanitize(run: SanitizerRun, placement: Placement, sandbox: Sandbox, cache_dir: Path,
             vouched: dict[str, ToolRun] | None = None) -> CheckResult:
    """The diagnosis: each tool run alone over the kernel, but for those a group vouched for (groups.py), whose
    clean runs count as they are; one verdict over all of them, as if each had run here."""
    vouched = vouched or {}
    left = [tool for tool in TOOLS if tool not in vouched]
    ran = _run_alone(run, left, placement, sandbox, cache_dir) if left else []
    if isinstance(ran, CheckResult):
        return ran
    runs = {**vouched, **{tool.tool: tool for tool in ran}}
    return verdict([runs[tool] for tool in TOOLS], run.tile, run.contract)


def _run_alone(run: SanitizerRun, tools: list[str], placement: Placement, sandbox: Sandbox,
               cache_dir: Path) -> list[ToolRun] | CheckResult:
    """Each of `tools` over the kernel, side by side; or why none could run, as the check."""
    tool_path = sanitizer_path()
    if tool_path is None:
        return skipped(NAME, SANITIZER, 0, "not run: compute-sanitizer is not installed")
    if not run.cubin or not Path(run.cubin).is_file():
        return errored(NAME, SANITIZER, 0, "grader error: the GPU run left no compiled module to check")
    try:
        program = launcher(cache_dir)
    except LauncherUnavailable as error:
        return errored(NAME, SANITIZER, 0, f"grader error: {error}")
    with scratch_folder("sgemm-sanitize-") as root:
        inputs = staged_inputs(root, program, {"kernel.cubin": Path(run.cubin)})
        barriers = syncthreads_lines(run.source)
        symbol = kernel_symbol_of(inputs / "kernel.cubin", run.contract)

        def one(tool: str) -> ToolRun:
            launch = launch_command(inputs / "launch_kernel", inputs / "kernel.cubin", run.contract, run.tile,
                                    shape_for(tool, run.tile, run.contract), symbol)
            return run_tool(tool, tool_path, launch, root, inputs, run, placement, sandbox, barriers)

        with ThreadPoolExecutor(len(tools)) as pool:
            return list(pool.map(one, tools))


def launch_command(program: Path, cubin: Path, contract: KernelContract, tile: int,
                   shape: tuple[int, int, int], symbol: str = "") -> list[str]:
    """launch_kernel's command line (before its two pipes) for one launch of the contract's kernel, looked up
    by its symbol in the cubin (kernel_params.kernel_symbol: mangled, or the contract's name)."""
    return [str(program), *job_arguments(cubin, contract, tile, shape, symbol)]


def job_arguments(cubin: Path | str, contract: KernelContract, tile: int, shape: tuple[int, int, int],
                  symbol: str = "") -> list[str]:
    """One job of launch_kernel's command line: CUBIN KERNEL ARGS GRID BLOCK M N K."""
    m, n, k = shape
    geometry = contract.launch(m, n, tile)
    return [str(cubin), symbol or contract.name, ",".join(contract.launch_roles),
            ",".join(map(str, geometry.grid)), ",".join(map(str, geometry.block)), str(m), str(n), str(k)]


def kernel_symbol_of(cubin: Path, contract: KernelContract) -> str:
    """The symbol the GPU run launched the kernel by (the same cubin, the same lookup)."""
    try:
        return kernel_symbol(read_untrusted(cubin, MAX_CUBIN_BYTES), contract)
    except OSError:
        return contract.name  # the launch program reports the module it cannot read


def tool_command(tool_path: str, tool: str, log: Path | str, launch: list[str],
                 extra: tuple[str, ...] = ()) -> list[str]:
    """compute-sanitizer's command line for one tool watching `launch` (extra: options a bench adds)."""
    return [tool_path, "--tool", tool, *TOOLS[tool].options, "--show-backtrace", "no", "--print-limit", "50",
            "--error-exitcode", str(FOUND_ERRORS_EXIT), "--log-file", str(log), *extra, *launch]


def verdict(tools: list[ToolRun], tile: int, contract: KernelContract = REFERENCE) -> CheckResult:
    m, n, k = shape_for("memcheck", tile, contract)
    metrics = {f"{t.tool}_s": round(t.seconds, 2) for t in tools}
    metrics |= {"m": m, "n": n, "k": k, "racecheck_shape": "×".join(map(str, shape_for("racecheck", tile, contract))),
                "turn_wait_s": round(sum(t.waited_s for t in tools), 3),
                "turn_held_s": round(sum(t.held_s for t in tools), 3)}
    sentences = list(dict.fromkeys(s for t in tools for s in t.sentences))
    problems = [f"{t.tool}: {t.problem}" for t in tools if t.problem]
    if problems:
        found = "\n".join(sentences)
        return errored(NAME, SANITIZER, 0, "grader error: compute-sanitizer could not check this kernel ("
                       + "; ".join(problems) + ")" + (f"\nwhat the other tools found:\n{found}" if found else ""),
                       metrics=metrics)
    if sentences:
        return failed(NAME, SANITIZER, 0, "\n".join(sentences), metrics=metrics)
    return passed(NAME, SANITIZER, 0, f"racecheck ({metrics['racecheck_shape']}), memcheck and synccheck "
                  f"({m}×{n}×{k}) found nothing", metrics=metrics)


def watch_tool(tool: str, tool_path: str, launch: list[str], root: Path, inputs: Path, placement: Placement,
               sandbox: Sandbox, timeout_s: float, launch_s: float) -> tuple[ToolRun, Watched, SanitizerReport]:
    """One tool over the launch program, in the sandbox, in a folder of its own under root (inputs readable):
    its run (timed, what it waited and held the GPU for), what was watched, and its report as parsed."""
    started = time.perf_counter()
    work = root / tool
    work.mkdir()
    # The tool's report goes to a file of its own: the kernel's printf cannot forge sanitizer lines.
    log = work / f"{tool}.log"
    command = tool_command(tool_path, tool, log, launch)
    confinement = Confinement(work, GPU_LIMITS, cuda=True, gpu=True, readable=(inputs,), nice=BACKGROUND_NICE)
    watched = watch(command, confinement, sandbox, child_environment(str(work), placement.environment()),
                    timeout_s, launch_s, placement)
    result = ToolRun(tool, seconds=time.perf_counter() - started, waited_s=watched.waited_s,
                     held_s=watched.held_s)
    return result, watched, parse(tool, read_log(log))


def run_tool(tool: str, tool_path: str, launch: list[str], root: Path, inputs: Path, run: SanitizerRun,
              placement: Placement, sandbox: Sandbox, barriers: list[int]) -> ToolRun:
    result, watched, report = watch_tool(tool, tool_path, launch, root, inputs, placement, sandbox, run.timeout_s,
                                         run.launch_s)
    buffers = next((e["buffers"] for e in watched.events if e["event"] == "buffers"), None)
    shape = tuple(int(size) for size in launch[-3:])  # the launch's m, n, k (launch_command)
    found = describe(report, buffers, barrier_lines=barriers, shape=shape)
    found = [s for s in found if "did not complete" not in s]  # said below, as what it is
    result.reported, result.report = list(found), report
    launched = next((e for e in watched.events if e["event"] == "launched"), None)
    refused = next((e for e in watched.events if e["event"] == "not_launched"), None)
    if watched.timed_out:
        # What the tool logged before the kernel hung is still true (synccheck may have seen the divergent
        # barrier that hangs it).
        m, n, k = launch[-3:]
        if watched.in_launch:
            found.append(f"under {tool} the kernel did not finish in {run.launch_s:g} s on a {m}×{n}×{k} problem "
                         "(threads waiting at a __syncthreads() others never reach?)")
        else:
            found.append(f"{tool} timed out after {run.timeout_s:g} s on a {m}×{n}×{k} problem")
    elif watched.protocol_error:
        found.append(f"the kernel's process broke the grader's protocol under {tool} ({watched.protocol_error})")
    elif launched is None:
        result.problem = (f"the kernel was not launched ({refused['reason']})" if refused else
                          f"the launch program ended (status {watched.returncode}) before launching the kernel")
    elif watched.returncode not in (0, FOUND_ERRORS_EXIT):
        result.problem = f"the tool ended with status {watched.returncode}"
    elif not report.complete:
        result.problem = "the tool's report has no summary"
    elif launched["status"] != "ok" and not found:
        found.append(f"the kernel failed under {tool} ({launched['status']})")
    result.sentences = found
    return result


@dataclass
class Watched:
    events: list[dict]
    returncode: int | None
    timed_out: bool = False
    in_launch: bool = False  # it timed out during the kernel's launch (the GPU held for it)
    protocol_error: str = ""
    waited_s: float = 0.0
    held_s: float = 0.0


def watch(command: list[str], confinement: Confinement, sandbox: Sandbox, env: dict[str, str], timeout_s: float,
          launch_s: float, placement: Placement, kind: str = "sanitizer") -> Watched:
    """Run the tool over the launch program, which speaks the protocol on a pipe (its last two arguments):
    its events, its exit status, and whether its own time ran out: timeout_s in all, but launch_s from the
    GPU turn to the launch's end (a hung kernel holds the GPU that long, and nobody else can use it)."""
    read_fd, write_fd = os.pipe()
    control_read, control_write = os.pipe()
    proc = sandbox.popen([*command, str(write_fd), str(control_read)], confinement,
                         pass_fds=(write_fd, control_read), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env=env)
    os.close(write_fd)
    os.close(control_read)
    deadline, events, turn = Deadline(proc.pid, timeout_s), [], None
    try:
        for event in read_events(read_fd, deadline):
            if event["event"] == "await_device":
                if placement.lock is not None:
                    set_tree_priority(proc.pid, TURN_NICE)  # the tool's CPU work during the launch holds the GPU
                turn = _turn(placement, kind)
                deadline.restart(launch_s)  # the wait was not the kernel's time
                os.write(control_write, b"go\n")
                events.append(event)
                continue
            if event["event"] == "launched":
                deadline.restart(timeout_s)  # done with the GPU: the rest is the tool writing its report
                if turn is not None:
                    turn.release()
                    set_tree_priority(proc.pid, BACKGROUND_NICE)
            events.append(event)
        proc.wait(timeout=max(deadline.remaining(), EXIT_GRACE_S))
        return Watched(events, proc.returncode, **_given_back(turn))
    except (TimedOut, subprocess.TimeoutExpired):
        kill_group(proc)  # before the turn is given back: a hung kernel leaves the GPU with its process
        kinds = {event["event"] for event in events}
        in_launch = "await_device" in kinds and "launched" not in kinds
        return Watched(events, None, timed_out=True, in_launch=in_launch, **_given_back(turn))
    except (ProtocolError, BrokenPipeError) as error:
        return Watched(events, None, protocol_error=str(error) or "its pipe closed early")
    finally:
        kill_group(proc)
        if turn is not None:
            turn.release()
        for fd in (read_fd, control_write):
            os.close(fd)


def _given_back(turn: Turn | None) -> dict[str, float]:
    """Release the turn (again: a no-op once the launch gave it back); how long it was waited for and held."""
    if turn is None:
        return {}
    turn.release()
    return {"waited_s": turn.waited_s, "held_s": turn.held_s}


def _turn(placement: Placement, kind: str = "sanitizer") -> Turn | None:
    """A turn of `kind`: the sanitizer's share the GPU with each other; ncu's ("profile") has it alone."""
    return placement.lock.turn(kind) if placement.lock is not None else None


def read_log(path: Path) -> str:
    try:
        return read_untrusted(path, LOG_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""
