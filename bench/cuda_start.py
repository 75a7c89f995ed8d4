"""Where a CUDA program's start and end go when many run side by side (GPU host): which phase queues.

Usage: python3 bench/cuda_start.py [RUNS] [--side-by-side N,N,...] [--under TOOL] [NAME=VALUE ...] [-- OPTIONS]
A batch starts four CUDA programs per student (the GPU child and three sanitizer tools), and a host starts
only so many a second, however many GPUs it has (bench/sanitizer_cost.py --side-by-side). This runs a small
C program (cuda_start_phases.c: the reference's module loaded, a buffer allocated and set, the context
released) N copies at once, RUNS rounds each, and prints the median time of each phase: exec (fork to
main), dlopen of libcuda, cuInit, the primary context, the module load, allocation and a memset, the
context's release and the exit. A phase whose time grows with N is what the programs queue on.
NAME=VALUE sets an environment variable for every run (e.g. CUDA_DEVICE_MAX_CONNECTIONS=1). --under runs
each program under compute-sanitizer's TOOL as the grader runs it, plus the OPTIONS after `--`: which
phases a tool makes dearer (its exit includes the tool's report).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from statistics import median

from benchlib import gpu_arch, reference_cubin

from grader.contract import REFERENCE
from grader.diagnose.run import TOOLS, sanitizer_path

PHASES = ("exec", "dlopen", "cuInit", "context", "module", "alloc+memset", "release", "exit")


def build(work: Path) -> tuple[Path, Path]:
    program = work / "phases"
    subprocess.run(["gcc", "-O2", "-o", str(program), str(Path(__file__).with_name("cuda_start_phases.c")), "-ldl"],
                   check=True)
    return program, reference_cubin(work, gpu_arch())


def one_run(command: list[str]) -> list[float] | None:
    """Seconds spent in each phase, or None if the program failed."""
    started = time.monotonic_ns()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    while line and not line[0].isdigit():  # a tool's banner comes first
        line = proc.stdout.readline()
    printed = time.monotonic_ns()
    proc.stdout.read()
    proc.wait()
    ended = time.monotonic_ns()
    if proc.returncode != 0 or not line.strip():
        return None
    marks = [started, *map(int, line.split()), printed]
    return [(b - a) / 1e9 for a, b in zip(marks, marks[1:])][:-1] + [(ended - marks[-2]) / 1e9]


def side_by_side(command: list[str], copies: int, runs: int) -> None:
    started = time.perf_counter()
    with ThreadPoolExecutor(copies) as pool:
        results = list(pool.map(lambda _: one_run(command), range(copies * runs)))
    wall = time.perf_counter() - started
    good = [r for r in results if r is not None]
    phases = "  ".join(f"{name} {median(r[i] for r in good) * 1000:6.0f}" for i, name in enumerate(PHASES))
    print(f"x{copies:<3d} {len(good) / wall:6.2f} programs/s ({len(results) - len(good)} failed)  median ms: {phases}",
          flush=True)


def main() -> None:
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    tool = args[args.index("--under") + 1] if "--under" in args else ""
    runs = int(args[0]) if args and args[0].isdigit() else 3
    copies = [int(c) for c in args[args.index("--side-by-side") + 1].split(",")] if "--side-by-side" in args else [1]
    os.environ.update(arg.split("=", 1) for arg in args if "=" in arg)
    with tempfile.TemporaryDirectory() as work:
        program, cubin = build(Path(work))
        command = [str(program), str(cubin), REFERENCE.name]
        if tool:
            command = [sanitizer_path(), "--tool", tool, *TOOLS[tool].options, *extra, *command]
        settings = " ".join(arg for arg in args if "=" in arg) or "default environment"
        print(f"{settings}{f', under {tool} ' + ' '.join(extra) if tool else ''}:")
        for count in copies:
            side_by_side(command, count, runs)


if __name__ == "__main__":
    main()
