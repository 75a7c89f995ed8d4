"""The safety of each case, told by compute-sanitizer, for a kernel the CPU emulator cannot run.

The emulator decides whether a case did anything unsafe (judge/findings.py's kinds) wherever it can build the
kernel. Where it cannot (inline PTX, a construct it lacks, no C++ compiler on this host), the three tools decide
the same facts on the same cases: memcheck (out-of-bounds and invalid accesses), racecheck (shared-memory
races), synccheck (barriers some threads skip), each over the module the GPU run graded, launched on every case
the emulator would have run. One process per tool launches them all (launch_kernel.c takes several jobs); a tool
that found nothing there found nothing in any of them. Only a tool that found something is run again, a case to
a process, so each finding is told in the case it happened in.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..cases import Case
from ..execute.confine.sandbox import Sandbox, scratch_folder
from ..execute.runner import Placement
from ..judge.findings import DIVERGENT_BARRIER, OUT_OF_BOUNDS_READ, OUT_OF_BOUNDS_WRITE, SHARED_RACE, Finding
from ..result import SANITIZER, CheckResult, errored, failed, passed
from .launcher import LauncherUnavailable, launcher, staged_inputs
from .run import (
    NAME,
    TOOLS,
    SanitizerRun,
    ToolRun,
    job_arguments,
    kernel_symbol_of,
    run_tool,
    sanitizer_path,
    watch_tool,
)
from .sanitizer_log import SanitizerReport, syncthreads_lines

MAX_SIDE_BY_SIDE = 8  # per-case runs of one tool at once: each is a CUDA program under the tool


@dataclass
class CaseSafety:
    """What the tools found in each case (name -> findings, each with its unsafe kind); `problem`: why a tool's
    silence cannot be trusted (the grader's side), with the cases then judged on their values alone."""

    findings: dict[str, list[Finding]] = field(default_factory=dict)
    problem: str = ""
    tools_s: float = 0.0  # the tools' own seconds, added up
    cases: int = 0  # how many cases the tools ran

    def check(self) -> CheckResult:
        """The diagnosis check these runs make (worth no points): what was found, once each."""
        found = list(dict.fromkeys(finding.fact for found in self.findings.values() for finding in found))
        metrics = {"tools_s": round(self.tools_s, 3), "cases": self.cases}
        if self.problem:
            return errored(NAME, SANITIZER, 0, f"grader error: compute-sanitizer could not check this kernel "
                           f"({self.problem})", metrics=metrics)
        if found:
            return failed(NAME, SANITIZER, 0, "\n".join(found), metrics=metrics)
        return passed(NAME, SANITIZER, 0, f"{', '.join(TOOLS)} found nothing in the {self.cases} cases they ran "
                      "(the CPU emulator cannot run this kernel)", metrics=metrics)


def case_safety(run: SanitizerRun, cases: list[Case], placement: Placement, sandbox: Sandbox,
                cache_dir: Path) -> CaseSafety:
    """Each tool over every case; a tool that found something, again over each case alone."""
    tool_path = sanitizer_path()
    if tool_path is None:
        return CaseSafety(problem="compute-sanitizer is not installed")
    if not run.cubin or not Path(run.cubin).is_file():
        return CaseSafety(problem="the GPU run left no compiled module to check")
    try:
        program = launcher(cache_dir)
    except LauncherUnavailable as error:
        return CaseSafety(problem=str(error))
    with scratch_folder("sgemm-safety-") as root:
        inputs = staged_inputs(root, program, {"kernel.cubin": Path(run.cubin)})
        check = _Checker(run, tool_path, root, inputs, placement, sandbox, kernel_symbol_of(inputs / "kernel.cubin",
                                                                                            run.contract))
        with ThreadPoolExecutor(len(TOOLS)) as pool:
            over_all = dict(zip(TOOLS, pool.map(lambda tool: check.clean_over(tool, cases), TOOLS)))
        safety = CaseSafety(tools_s=sum(seconds for _, seconds in over_all.values()), cases=len(cases))
        dirty = [tool for tool, (clean, _) in over_all.items() if not clean]
        for tool in dirty:
            check.each_case(tool, cases, safety)
        return safety


def unsafe_kind(tool: str, report: SanitizerReport | None) -> str:
    """The kind of what a tool found: memcheck's a write where any reported access stores, else a read."""
    if tool == "racecheck":
        return SHARED_RACE
    if tool == "synccheck":
        return DIVERGENT_BARRIER
    writes = report is not None and any(access.op == "write" for hazard in report.hazards
                                        for access in hazard.accesses[:1])
    return OUT_OF_BOUNDS_WRITE if writes else OUT_OF_BOUNDS_READ


class _Checker:
    def __init__(self, run: SanitizerRun, tool_path: str, root: Path, inputs: Path, placement: Placement,
                 sandbox: Sandbox, symbol: str):
        self.run, self.tool_path, self.root, self.inputs = run, tool_path, root, inputs
        self.placement, self.sandbox, self.symbol = placement, sandbox, symbol
        self.barriers = syncthreads_lines(run.source)

    def launch(self, cases: list[Case]) -> list[str]:
        """launch_kernel with one job per case, in the order given."""
        return [str(self.inputs / "launch_kernel"),
                *(argument for case in cases for argument in
                  job_arguments(self.inputs / "kernel.cubin", self.run.contract, self.run.tile,
                                (case.m, case.n, case.k), self.symbol))]

    def clean_over(self, tool: str, cases: list[Case]) -> tuple[bool, float]:
        """Whether the tool found nothing over every case, in one process; and its seconds. Clean only when it
        ended with status 0, its summary was read and counts no error or warning, and every case launched ok."""
        folder = self.root / "all"
        folder.mkdir(exist_ok=True)
        result, watched, report = watch_tool(tool, self.tool_path, self.launch(cases), folder, self.inputs,
                                             self.placement, self.sandbox, self.run.timeout_s, self.run.launch_s)
        launched = [event for event in watched.events if event["event"] == "launched"]
        clean = (not watched.timed_out and not watched.protocol_error and watched.returncode == 0
                 and report.complete and not report.error_count and not report.warning_count
                 and len(launched) == len(cases) and all(event["status"] == "ok" for event in launched))
        return clean, result.seconds

    def each_case(self, tool: str, cases: list[Case], safety: CaseSafety) -> None:
        """The tool over each case alone: its findings are that case's."""
        def one(index: int) -> ToolRun:
            folder = self.root / f"case{index}"
            folder.mkdir(exist_ok=True)
            return run_tool(tool, self.tool_path, self.launch([cases[index]]), folder, self.inputs, self.run,
                            self.placement, self.sandbox, self.barriers)

        with ThreadPoolExecutor(min(MAX_SIDE_BY_SIDE, len(cases))) as pool:
            runs = list(pool.map(one, range(len(cases))))
        for case, ran in zip(cases, runs):
            safety.tools_s += ran.seconds
            if ran.problem:
                safety.problem = safety.problem or f"{tool}: {ran.problem}"
            kind = unsafe_kind(tool, ran.report)
            safety.findings.setdefault(case.name, []).extend(
                Finding(f"compute-sanitizer {tool}: {sentence}", "", kind) for sentence in ran.reported)

