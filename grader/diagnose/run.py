"""Sanitizer diagnosis: the kernel on one small, ragged shape under compute-sanitizer, told in student terms.

racecheck (shared-memory hazards), memcheck with padding (out-of-bounds accesses) and synccheck
(divergent barriers) run side by side, each in its own process group with a time limit (a deadlocked
kernel never ends under the sanitizer either). Their text summaries are parsed (grader/sanitizer.py):
the exit code alone is never trusted. Worth no points; it says what to fix.
"""
from __future__ import annotations

import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..execute.proc import run_killable
from ..execute.protocol import ProtocolError, decode, read_untrusted
from ..execute.runner import Placement
from ..execute.sandbox import GPU_LIMITS, Confinement, Sandbox, child_environment, scratch_folder
from ..result import SANITIZER, CheckResult, failed, passed, skipped
from .sanitizer_log import describe, parse, syncthreads_lines

NAME = "compute-sanitizer"
TOOLS = {"racecheck": ["--racecheck-report", "hazard"], "memcheck": ["--padding", "32"], "synccheck": []}
EVENTS_FILE = "events.jsonl"  # the launched program's one protocol event: where A, B and C are
LOG_BYTES = 4 << 20


def sanitizer_path() -> str | None:
    return shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if Path(p).is_file()), None)


def shape_for(tile: int) -> tuple[int, int, int]:
    """2×2 blocks, ragged in m and n, and k three tiles and a bit: every phase kind, few threads to watch."""
    return tile + 3, tile + 5, 3 * tile + 2


def sanitize(source: str, kernel_name: str, tile: int, timeout_s: float, placement: Placement | None,
             sandbox: Sandbox, cubin: str = "") -> CheckResult:
    """`cubin`: the GPU run's compiled module (built with -lineinfo), so the three tools need no compile."""
    tool_path = sanitizer_path()
    if tool_path is None:
        return skipped(NAME, SANITIZER, 0, "not run: compute-sanitizer is not installed")
    m, n, k = shape_for(tile)
    with scratch_folder("sgemm-sanitize-") as root:
        source_dir = root / "source"  # read-only for the tools: each writes only into a folder of its own
        source_dir.mkdir(mode=0o755)
        Path(source_dir, "kernel.cu").write_text(source, encoding="utf-8")
        if cubin and Path(cubin).is_file():
            shutil.copy(cubin, Path(source_dir, "kernel.cubin"))
        for path in source_dir.iterdir():
            path.chmod(0o644)
        env_extra = (placement or Placement()).environment()
        launch = [sys.executable, "-m", "grader.execute.sanitizer_child", str(source_dir / "kernel.cu"), kernel_name,
                  str(tile), str(m), str(n), str(k), EVENTS_FILE]

        def one(tool: str) -> tuple[str, list[str], float]:
            started = time.perf_counter()
            work = root / tool
            work.mkdir()
            # The tool's report goes to a file of its own: the kernel's printf cannot forge sanitizer lines.
            log = work / f"{tool}.log"
            command = [tool_path, "--tool", tool, *TOOLS[tool], "--show-backtrace", "no", "--print-limit", "50",
                       "--log-file", str(log), *launch]
            confinement = Confinement(work, GPU_LIMITS, python=True, cuda=True, gpu=True, readable=(source_dir,))
            finished = run_killable(command, timeout_s, env=child_environment(str(work), env_extra),
                                    start=lambda cmd, **kw: sandbox.popen(cmd, confinement, **kw))
            seconds = time.perf_counter() - started
            report = parse(tool, _read(log))
            found = describe(report, _buffers(work / EVENTS_FILE), barrier_lines=syncthreads_lines(source))
            if finished.timed_out:
                # What the tool logged before the kernel hung is still true (synccheck may have seen the
                # divergent barrier that hangs it); the "did not complete" remark gives way to the timeout.
                found = [s for s in found if "did not complete" not in s]
                found.append(f"{tool} timed out after {timeout_s:g} s: the kernel did not finish on a {m}×{n}×{k} "
                             "problem (threads waiting at a __syncthreads() others never reach?)")
            return tool, found, seconds

        with ThreadPoolExecutor(len(TOOLS)) as pool:
            outcomes = list(pool.map(one, TOOLS))
    sentences = [sentence for _, found, _ in outcomes for sentence in found]
    metrics = {f"{tool}_s": round(seconds, 2) for tool, _, seconds in outcomes} | {"m": m, "n": n, "k": k}
    if sentences:
        return failed(NAME, SANITIZER, 0, "\n".join(dict.fromkeys(sentences)), metrics=metrics)
    return passed(NAME, SANITIZER, 0, f"racecheck, memcheck and synccheck found nothing on {m}×{n}×{k}",
                  metrics=metrics)


def _read(path: Path) -> str:
    try:
        return read_untrusted(path, LOG_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def _buffers(path: Path) -> dict[str, tuple[int, int]] | None:
    """name -> (device address, bytes) of A, B and C, as the launched program reported them."""
    for line in _read(path).splitlines():
        try:
            event = decode(line.encode())
        except ProtocolError:
            return None
        if event["event"] == "buffers":
            return {name: (address, size) for name, (address, size) in event["buffers"].items()}
    return None
