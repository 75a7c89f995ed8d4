"""Sanitizer diagnosis: the kernel on one small, ragged shape under compute-sanitizer, told in student terms.

racecheck (shared-memory hazards), memcheck with padding (out-of-bounds accesses) and synccheck
(divergent barriers) run side by side, each in its own process group with a time limit (a deadlocked
kernel never ends under the sanitizer either). Their text summaries are parsed (grader/sanitizer.py):
the exit code alone is never trusted. Worth no points; it says what to fix.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..execute.proc import run_killable
from ..execute.runner import PACKAGE_ROOT, Placement
from ..execute.sandbox import child_environment
from ..result import SANITIZER, CheckResult, failed, passed, skipped
from .sanitizer_log import describe, parse, syncthreads_lines

NAME = "compute-sanitizer"
TOOLS = {"racecheck": ["--racecheck-report", "hazard"], "memcheck": ["--padding", "32"], "synccheck": []}
BUFFERS_MARK = "SGEMM_GRADER_BUFFERS "


def sanitizer_path() -> str | None:
    return shutil.which("compute-sanitizer") or next(
        (p for p in ("/usr/local/cuda/bin/compute-sanitizer",) if Path(p).is_file()), None)


def shape_for(tile: int) -> tuple[int, int, int]:
    """2×2 blocks, ragged in m and n, and k three tiles and a bit: every phase kind, few threads to watch."""
    return tile + 3, tile + 5, 3 * tile + 2


def sanitize(source: str, kernel_name: str, tile: int, timeout_s: float, placement: Placement | None,
             cubin: str = "") -> CheckResult:
    """`cubin`: the GPU run's compiled module (built with -lineinfo), so the three tools need no compile."""
    tool_path = sanitizer_path()
    if tool_path is None:
        return skipped(NAME, SANITIZER, 0, "not run: compute-sanitizer is not installed")
    m, n, k = shape_for(tile)
    with tempfile.TemporaryDirectory(prefix="sgemm-sanitize-") as work:
        Path(work, "kernel.cu").write_text(source, encoding="utf-8")
        env = child_environment(work, PACKAGE_ROOT, (placement or Placement()).environment())
        if cubin and Path(cubin).is_file():
            shutil.copy(cubin, Path(work, "kernel.cubin"))
        launch = [sys.executable, "-m", "grader.execute.sanitizer_child", "kernel.cu", kernel_name, str(tile),
                  str(m), str(n), str(k)]

        def one(tool: str) -> tuple[str, list[str], float]:
            started = time.perf_counter()
            # The tool's report goes to a file of its own: the kernel's printf cannot forge sanitizer lines.
            log = Path(work, f"{tool}.log")
            command = [tool_path, "--tool", tool, *TOOLS[tool], "--show-backtrace", "no", "--print-limit", "50",
                       "--log-file", str(log), *launch]
            finished = run_killable(command, timeout_s, cwd=work, env=env)
            seconds = time.perf_counter() - started
            report = parse(tool, log.read_text(errors="replace") if log.is_file() else "")
            found = describe(report, _buffers(finished.output), barrier_lines=syncthreads_lines(source))
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


def _buffers(output: str) -> dict[str, tuple[int, int]] | None:
    """name -> (device address, bytes) of A, B and C, as the launched program printed them."""
    for line in output.splitlines():
        if line.startswith(BUFFERS_MARK):
            try:
                return {name: (int(a), int(b)) for name, (a, b) in json.loads(line[len(BUFFERS_MARK):]).items()}
            except (ValueError, TypeError):
                return None
    return None
