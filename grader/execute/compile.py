"""Prepares a submission for PyCUDA's SourceModule and turns compiler output into student messages.

SourceModule wraps the source in `extern "C" {` ... `}`, which shifts every line by one; a `#line`
directive restores the student's own numbering (for errors and for -lineinfo). A probe appended
after the student's code lets the compiler itself evaluate TILE_SIZE.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .proc import run_killable

STUDENT_FILE = "kernel.cu"
TILE_PROBE_SYMBOL = "sgemm_grader_tile_size_"
_TILE_PROBE = f"""
#line 1 "<grader: TILE_SIZE probe>"
#ifdef TILE_SIZE
__device__ int {TILE_PROBE_SYMBOL} = (TILE_SIZE);
#endif
"""
MAX_MESSAGE_LINES = 25


def prepare_source(source: str, file_name: str = STUDENT_FILE) -> str:
    return f'#line 1 "{file_name}"\n{source}\n{_TILE_PROBE}'


def wrap_like_sourcemodule(prepared: str) -> str:
    """Exactly the text pycuda.compiler.compile hands nvcc (no_extern_c=False)."""
    return 'extern "C" {\n%s\n}\n' % prepared


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


@dataclass
class CompileOutcome:
    ok: bool
    message: str  # student-facing: errors with the student's line numbers
    timed_out: bool = False


def compile_check(source: str, arch: str, options: list[str], timeout: float) -> CompileOutcome:
    """Compile as SourceModule would, without a GPU: nvcc --cubin for `arch`, output discarded."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise FileNotFoundError("nvcc not found on PATH")
    with tempfile.TemporaryDirectory(prefix="sgemm-compile-") as work:
        Path(work, STUDENT_FILE).write_text(wrap_like_sourcemodule(prepare_source(source)))
        finished = run_killable([nvcc, "--cubin", *options, "-arch", arch, STUDENT_FILE], timeout, cwd=work)
    if finished.timed_out:
        return CompileOutcome(False, f"compilation timed out after {timeout:g} s", timed_out=True)
    if finished.returncode != 0:
        return CompileOutcome(False, student_compile_message(finished.output))
    return CompileOutcome(True, warnings_of(finished.output))


_LOCATION = re.compile(r'^(?:[^\s:]*/)?kernel\.cu\((\d+)\): ', re.MULTILINE)


def student_compile_message(log: str) -> str:
    """nvcc's output with `kernel.cu(12): ` turned into `line 12: ` and temp paths removed."""
    text = _LOCATION.sub(lambda m: f"line {m.group(1)}: ", log)
    text = re.sub(r"/tmp/[^\s\"']*/", "", text)
    lines = [line.rstrip() for line in text.strip().splitlines()]
    lines = [line for line in lines if not line.startswith("Compilation terminated")]
    if len(lines) > MAX_MESSAGE_LINES:
        lines = lines[:MAX_MESSAGE_LINES] + [f"[... {len(lines) - MAX_MESSAGE_LINES} more lines truncated ...]"]
    return "compile error:\n" + "\n".join(lines) if lines else "compile error (the compiler printed nothing)"


def warnings_of(log: str) -> str:
    if not log.strip():
        return "compiled"
    return "compiled with warnings:\n" + student_compile_message(log).split("\n", 1)[-1]
