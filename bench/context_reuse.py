"""Whether one long-lived GPU process could grade several students, and what it would save (GPU host).

Usage: python3 bench/context_reuse.py [COPIES]
A batch makes a CUDA context per GPU child and per sanitizer run, and a host makes contexts one at a time
whatever its GPUs (bench/cuda_start.py). This prints, through context_reuse.c:
- the isolation facts such a process would rest on: whether a kernel reaches the process's malloc'd host
  memory, whether a kernel in one context reads another context's buffer in the same process, and whether
  it reads what a freed buffer of its own context held;
- what a fresh context costs in a running process, alone and with COPIES (default 16) such processes side by
  side, against as many whole programs making one context each: whether a context per student in a kept
  process would dodge the host's queue, or only the interpreter's start.
The grader's children run with CUDA_DEVICE_MAX_CONNECTIONS=1 (runner.Placement), and so does this.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchlib import gpu_arch

PROBE = ('extern "C" __global__ void peek(const unsigned *src, unsigned *dst) { *dst = *src; }\n'
         'extern "C" __global__ void poke(unsigned *dst) { *dst = 42u; }\n')
PER_COPY = 10  # contexts each side-by-side process makes, and programs each side-by-side slot starts


def build(work: Path) -> tuple[str, str]:
    program = work / "context_reuse"
    subprocess.run(["gcc", "-O2", "-o", str(program), str(Path(__file__).with_name("context_reuse.c")), "-ldl"],
                   check=True)
    (work / "probe.cu").write_text(PROBE)
    subprocess.run(["nvcc", "--cubin", "-arch", gpu_arch(), "probe.cu", "-o", "probe.cubin"], cwd=work, check=True)
    return str(program), str(work / "probe.cubin")


def side_by_side(copies: int, command: list[str], times: int) -> float:
    """Seconds for COPIES slots side by side, each running `command` `times` times in turn."""
    def slot(_: int) -> None:
        for _ in range(times):
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)

    started = time.perf_counter()
    with ThreadPoolExecutor(copies) as pool:
        list(pool.map(slot, range(copies)))
    return time.perf_counter() - started


def main() -> None:
    copies = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    with tempfile.TemporaryDirectory() as work:
        program, cubin = build(Path(work))
        subprocess.run([program, "isolation", cubin], check=True)
        print("alone, in one process: ", end="", flush=True)
        subprocess.run([program, "contexts", cubin, "20"], check=True)
        count = copies * PER_COPY
        kept = side_by_side(copies, [program, "contexts", cubin, str(PER_COPY)], 1)
        fresh = side_by_side(copies, [program, "contexts", cubin, "1"], PER_COPY)
        print(f"{count} contexts, {copies} kept processes side by side: {count / kept:.1f} contexts/s; "
              f"{count} programs of one context each, {copies} at a time: {count / fresh:.1f} programs/s")


if __name__ == "__main__":
    main()
