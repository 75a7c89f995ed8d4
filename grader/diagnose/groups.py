"""A batch's sanitizer runs of several students in one process per tool, where that can only say "clean".

Why: every CUDA program a batch starts makes and ends a context, which the driver does one process at a
time, host-wide, and a context under a sanitizer tool is dear (racecheck: 0.75 s alone on an H100). A
class of 300 started 900 of them, one per tool per student, and that queue, not the GPU, set the batch's
pace (bench/cuda_start.py). Here one tool process launches the kernels of up to GROUP_SIZE students in
turn (launch_kernel.c takes several jobs), so a group pays for one start per tool.

A student is offered to a group for the tools the GPU run gives no reason to expect a finding from
(diagnose/checks.py): memcheck always; synccheck where no barrier is under a condition; racecheck only where every
barrier is in place. Students of all the host's GPUs gather together where their modules are built for one
architecture (module_kind), so on several GPUs groups fill as fast as on one. A group may
only ever vouch that a tool found nothing in any of the kernels it checked there. A tool vouches when its
process ended with status 0, its summary was read and counts no error and no warning, and every job was
launched and synchronized "ok", in order; and memcheck's run over the whole group vouches too (below).
Each student then gets, for each tool vouched for, what checking it alone says of a clean kernel, and is
checked alone, in its own worker, for every other tool, as if the group had never run: run.verdict over
both is what checking the student alone gives. So the only thing a kernel's run in a group can ever tell a
student, its own or another's, is "found nothing", which says nothing of the others' data; and one
student's finding or fault costs the rest of the group only the group's time for that tool.

Between jobs the launch program zeroes and frees the last job's buffers and unloads its module, so no kernel
even finds another's inputs. What a kernel could still do is write outside its buffers onto a tool's own
memory and so hide a later kernel's finding in that process. So every student of a group is in memcheck's
run, which launches each kernel on every shape the group's tools use (ALSO_ON_SHAPES_OF): such a write
makes memcheck report, and then the group vouches for no tool at all (a kernel that wrote only when it is
not under memcheck would escape this).

The channel to the batch parent is a socket pair made for each worker (batch.py); a sandboxed child never
holds it.
"""
from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..execute.confine.sandbox import Sandbox, scratch_folder
from ..execute.nvcc.compile import MAX_CUBIN_BYTES
from ..execute.protocol import read_untrusted, read_untrusted_head
from ..execute.runner import Placement
from .launcher import LauncherUnavailable, launcher, staged_inputs
from .run import TOOLS, SanitizerRun, ToolRun, job_arguments, kernel_symbol_of, sanitizer_path, shape_for, watch_tool

GROUP_SIZE = 8  # students per tool process
# How long a request waits for others to join it before its group runs as it is. A waiting worker holds
# its batch slot but no CPU or GPU; 300 students on an H100 (half of them clean) took 161.9 s with 1 s
# (groups of 2-3) and 154.8 s with 3 s (groups of 5-6).
GATHER_S = 3.0
JOB_ARGUMENTS = 7  # a job after its cubin: KERNEL ARGS GRID BLOCK M N K (launch_kernel.c)
MAX_REQUEST_BYTES = 64 << 10
ELF64_HEADER_BYTES = 64
# memcheck also launches each kernel on racecheck's shape. racecheck and synccheck do not check where a kernel
# writes, so a kernel that wrote outside its buffers on the one-block shape alone could scribble on the tool's
# own memory and hide a later kernel's finding; memcheck sees that write, and then nobody's group is believed.
# (Alone, memcheck checks the ragged shape only; a group that is stricter than alone only sends its students
# to be checked alone.)
ALSO_ON_SHAPES_OF = {"memcheck": ("racecheck",)}
GUARD = "memcheck"  # the tool every student of a group is in, whose word every other tool's needs


@dataclass(frozen=True)
class Request:
    """One student's sanitizer runs, as a worker asks for them: its module, per tool its launch, and the tools
    it is offered to the group for (memcheck always)."""

    gpu: int | None
    cubin: str  # the GPU run's module, in the worker's folder (read by the parent, which copies it)
    jobs: dict[str, list[str]]  # tool -> KERNEL ARGS GRID BLOCK M N K (run.job_arguments, cubin left out)
    timeout_s: float
    launch_s: float
    tools: tuple[str, ...] = tuple(TOOLS)

    def to_json(self) -> bytes:
        return json.dumps({**vars(self), "tools": list(self.tools)}).encode() + b"\n"

    @classmethod
    def from_json(cls, line: bytes) -> Request:
        """A worker's request, checked field by field (ValueError names what is wrong)."""
        data = json.loads(line)
        fields = {"gpu", "cubin", "jobs", "timeout_s", "launch_s", "tools"}
        if not isinstance(data, dict) or set(data) != fields:
            raise ValueError(f"a request has exactly the fields {', '.join(sorted(fields))}")
        jobs = data["jobs"]
        if not isinstance(jobs, dict) or set(jobs) != set(TOOLS) or not all(
                isinstance(args, list) and len(args) == JOB_ARGUMENTS and all(isinstance(a, str) for a in args)
                for args in jobs.values()):
            raise ValueError(f"jobs: one launch of {JOB_ARGUMENTS} strings for each of {', '.join(TOOLS)}")
        if not (data["gpu"] is None or isinstance(data["gpu"], int)) or not isinstance(data["cubin"], str):
            raise ValueError("gpu is a number or null, cubin a path")
        limits = [data["timeout_s"], data["launch_s"]]
        if not all(isinstance(v, (int, float)) and 0 < v <= 3600 for v in limits):
            raise ValueError("timeout_s and launch_s are seconds, more than 0 and at most an hour")
        tools = data["tools"]
        if not isinstance(tools, list) or GUARD not in tools or not set(tools) <= set(TOOLS) or \
                len(set(tools)) != len(tools):
            raise ValueError(f"tools: some of {', '.join(TOOLS)}, each once, {GUARD} among them")
        return cls(data["gpu"], data["cubin"], jobs, float(data["timeout_s"]), float(data["launch_s"]),
                   tuple(tools))


def run_group(requests: list[Request], placement: Placement, sandbox: Sandbox, cache_dir: Path) -> dict:
    """Each tool once over the kernels offered to it: the reply every requester of the group gets, which
    names the tools it vouches for ("vouched") and why each other one does not ("why_not")."""
    tool_path = sanitizer_path()
    if tool_path is None:
        return _vouching_for_none(requests, "compute-sanitizer is not installed")
    try:
        program = launcher(cache_dir)
    except LauncherUnavailable as error:
        return _vouching_for_none(requests, str(error))
    modules = {}
    for index, request in enumerate(requests):
        try:
            modules[f"kernel{index}.cubin"] = read_untrusted(Path(request.cubin), MAX_CUBIN_BYTES)
        except OSError as error:
            return _vouching_for_none(requests, f"a module could not be read ({error.strerror or error})")
    with scratch_folder("sgemm-sanitize-group-") as root:
        inputs = staged_inputs(root, program, modules)

        def one(tool: str) -> ToolRun:
            launch, jobs = [str(inputs / "launch_kernel")], 0
            for index, request in enumerate(requests):
                if tool not in request.tools:
                    continue
                for shape_of in (tool, *ALSO_ON_SHAPES_OF.get(tool, ())):
                    launch += [str(inputs / f"kernel{index}.cubin"), *request.jobs[shape_of]]
                    jobs += 1
            return _tool_together(tool, tool_path, launch, jobs, root, inputs, requests, placement, sandbox)

        asked = [tool for tool in TOOLS if any(tool in request.tools for request in requests)]
        with ThreadPoolExecutor(len(asked)) as pool:
            tools = list(pool.map(one, asked))
    why_not = {t.tool: t.problem for t in tools if t.problem}
    if GUARD in why_not:  # a kernel may have written onto the other tools' memory: none of them vouches
        why_not |= {t.tool: f"{GUARD} did not vouch for the group" for t in tools if t.tool != GUARD}
    return {"vouched": [t.tool for t in tools if t.tool not in why_not], "why_not": why_not,
            "group": len(requests), "tools": {t.tool: {"seconds": round(t.seconds, 3), "waited_s": round(t.waited_s, 3),
                                                        "held_s": round(t.held_s, 3)} for t in tools}}


def _vouching_for_none(requests: list[Request], why: str) -> dict:
    return {"vouched": [], "why_not": {"group": why}, "group": len(requests), "tools": {}}


def _tool_together(tool: str, tool_path: str, launch: list[str], jobs: int, root: Path, inputs: Path,
                   requests: list[Request], placement: Placement, sandbox: Sandbox) -> ToolRun:
    """One tool over the group's jobs; its problem says why its silence does not vouch for every kernel."""
    timeout_s, launch_s = max(r.timeout_s for r in requests), max(r.launch_s for r in requests)
    result, watched, report = watch_tool(tool, tool_path, launch, root, inputs, placement, sandbox, timeout_s,
                                         launch_s)
    launched = [(e.get("job"), e.get("status")) for e in watched.events if e["event"] == "launched"]
    if watched.timed_out:
        result.problem = "timed out"
    elif watched.protocol_error:
        result.problem = f"protocol: {watched.protocol_error}"
    elif launched != [(index, "ok") for index in range(jobs)]:
        result.problem = "not every kernel was launched and ended ok"
    elif watched.returncode != 0:
        result.problem = f"the tool ended with status {watched.returncode}"
    elif not report.complete or report.hazards or report.error_count or report.warning_count:
        result.problem = "it reported something"
    return result


class SanitizerGroups:
    """The batch parent's side: gathers workers' requests into groups and runs each group once.

    Requests whose modules were built for the same GPU architecture gather together, whichever of the host's
    GPUs ran them: a group runs on the GPU of whoever completes or ends it, and on several GPUs groups fill
    as fast as on one. A request waits up to gather_s for others; a group runs as soon as it has `size`
    requests, or when a waiting request's time is up, in the thread of whoever completes or ends it. Every
    requester of a group gets the group's reply."""

    def __init__(self, placements: list[Placement], sandbox: Sandbox, cache_dir: Path, size: int = GROUP_SIZE,
                 gather_s: float = GATHER_S, run=run_group):
        self.placements = {p.gpu: p for p in placements}
        self.sandbox, self.cache_dir, self.size, self.gather_s, self.run = sandbox, cache_dir, size, gather_s, run
        self.lock = threading.Lock()
        self.pending: dict[str, list[tuple[Request, Future]]] = {}  # per kind of module (module_kind)

    def check(self, request: Request) -> dict:
        placement = self.placements.get(request.gpu)
        if placement is None:
            return _vouching_for_none([request], f"no GPU {request.gpu} in this batch")
        kind, mine = module_kind(request), Future()
        with self.lock:
            waiting = self.pending.setdefault(kind, [])
            waiting.append((request, mine))
            group = self._take(kind) if len(waiting) >= self.size else None
        if group is None:
            try:
                return mine.result(timeout=self.gather_s)
            except TimeoutError:
                with self.lock:  # still nobody's: run what has gathered, ours among it
                    group = self._take(kind) if any(f is mine for _, f in self.pending[kind]) else None
            if group is None:
                return mine.result()  # taken meanwhile by another requester, who runs it
        self._run(group, placement)
        return mine.result()

    def _take(self, kind: str) -> list[tuple[Request, Future]]:
        group, self.pending[kind] = self.pending[kind][:self.size], self.pending[kind][self.size:]
        return group

    def _run(self, group: list[tuple[Request, Future]], placement: Placement) -> None:
        try:
            reply = self.run([request for request, _ in group], placement, self.sandbox, self.cache_dir)
        except Exception as error:  # a grader bug here costs the group its grouping, never a grade
            reply = _vouching_for_none([request for request, _ in group], f"{type(error).__name__}: {error}")
        for _, future in group:
            future.set_result(reply)

    def serve(self, channel: socket.socket) -> None:
        """One worker's channel, until the worker closes it: a request per line, a reply per line."""
        with channel, channel.makefile("rb") as lines:
            for line in lines:
                try:
                    reply = self.check(Request.from_json(line[:MAX_REQUEST_BYTES]))
                except (ValueError, TypeError) as error:
                    reply = {"vouched": [], "why_not": {"request": f"a bad request: {error}"}, "group": 0,
                             "tools": {}}
                try:
                    channel.sendall(json.dumps(reply).encode() + b"\n")
                except OSError:
                    return


def module_kind(request: Request) -> str:
    """Which requests may share a tool process: modules for one GPU architecture, as the cubin's ELF header
    (machine and flags) says. A module whose header cannot be read stays with its own GPU's requests, where
    it is sure to load."""
    try:
        header = read_untrusted_head(Path(request.cubin), ELF64_HEADER_BYTES)
    except OSError:
        header = b""
    if len(header) < ELF64_HEADER_BYTES or header[:5] != b"\x7fELF\x02":
        return f"gpu {request.gpu}"
    machine, flags = int.from_bytes(header[18:20], "little"), int.from_bytes(header[48:52], "little")
    return f"elf machine {machine} flags {flags:#x}"


def ask(channel_fd: int, request: Request, timeout_s: float) -> dict | None:
    """A worker's side: the group's reply to this request, or None when there was none to be had."""
    try:
        with socket.socket(fileno=channel_fd) as channel:
            channel.settimeout(timeout_s)
            channel.sendall(request.to_json())
            with channel.makefile("rb") as lines:
                reply = json.loads(lines.readline(MAX_REQUEST_BYTES))
    except (OSError, ValueError):
        return None
    return reply if isinstance(reply, dict) and isinstance(reply.get("vouched"), list) else None


@dataclass
class Vouched:
    """What a group said of one student: the tools that found nothing there (their times are the group's),
    and how many students the group held."""

    tools: dict[str, ToolRun]
    group: int = 0


def check_in_group(run: SanitizerRun, gpu: int | None, channel_fd: int, offered: tuple[str, ...]) -> Vouched:
    """A worker's kernel offered to a group for some tools (GUARD among them): the tools the group vouches
    for; the worker checks the kernel alone for the rest."""
    symbol = kernel_symbol_of(Path(run.cubin), run.contract)
    jobs = {tool: job_arguments(run.cubin, run.contract, run.tile, shape_for(tool, run.tile, run.contract),
                                symbol)[1:] for tool in TOOLS}
    # However the group went, the worker waits no longer than a group could take (each launch and each tool's
    # own time), then checks the kernel alone.
    reply = ask(channel_fd, Request(gpu, run.cubin, jobs, run.timeout_s, run.launch_s, offered),
                GATHER_S + (GROUP_SIZE + 1) * (run.timeout_s + run.launch_s))
    if reply is None:
        return Vouched({})
    times = reply.get("tools") if isinstance(reply.get("tools"), dict) else {}
    vouched = {tool: ToolRun(tool, **{key: float(value) for key, value in times.get(tool, {}).items()
                                      if key in ("seconds", "waited_s", "held_s") and isinstance(value, (int, float))})
               for tool in offered if tool in reply["vouched"]}
    group = reply.get("group")
    return Vouched(vouched, group if isinstance(group, int) else 0)
