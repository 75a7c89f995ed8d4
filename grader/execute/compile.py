"""Prepares a submission for PyCUDA's SourceModule and turns compiler output into student messages.

SourceModule wraps the source in `extern "C" {` ... `}`, which shifts every line by one; a `#line`
directive restores the student's own numbering (for errors and for -lineinfo). A probe appended
after the student's code lets the compiler itself evaluate TILE_SIZE.
"""
from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from .proc import run_killable
from .sandbox import COMPILER_LIMITS, Confinement, Sandbox, child_environment, scratch_folder

STUDENT_FILE = "kernel.cu"
TILE_PROBE_SYMBOL = "sgemm_grader_tile_size_"
# The names real labs give the tile size, tried in this order (config: kernel.tile_macros).
TILE_MACROS = ("TILE_SIZE", "TILE_WIDTH", "BLOCK_SIZE", "TILEWIDTH", "TILE_DIM")


def tile_macro_chain(macros: tuple[str, ...] | list[str], line: str) -> str:
    """Preprocessor lines that emit `line` (with {} for the value) for the first of `macros` the file
    defines: the compiler, not the grader, evaluates the student's macro."""
    chain = [f"#{'if' if i == 0 else 'elif'} defined({name})\n{line.format(f'({name})')}"
             for i, name in enumerate(macros)]
    return "\n".join(chain) + "\n#endif\n" if chain else ""


def _tile_probe(macros) -> str:
    probe = tile_macro_chain(macros, f"__device__ int {TILE_PROBE_SYMBOL} = {{}};")
    return '\n#line 1 "<grader: tile size probe>"\n' + probe


MAX_MESSAGE_LINES = 25

FILL_KERNEL = "sgemm_grader_fill"
# Fresh timing inputs, uniform in [-1, 1), made on the GPU from a seed (a hash per element): no upload per
# repetition. Compiled into the reference's module, which is the grader's own code.
FILL_SOURCE = f"""
#line 1 "<grader: input fill>"
__global__ void {FILL_KERNEL}(float *x, unsigned int n, unsigned int seed)
{{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int h = (i * 2654435761u) ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    x[i] = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}}
"""


def prepare_source(source: str, file_name: str = STUDENT_FILE, tile_macros=TILE_MACROS) -> str:
    return f'#line 1 "{file_name}"\n{source}\n{_tile_probe(tile_macros)}'


def reference_with_fill(reference: str) -> str:
    """The reference kernel's module as the GPU child compiles it: the reference plus the input fill."""
    return prepare_source(reference, "reference.cu") + FILL_SOURCE


def cubin_key(source: str, options: list[str], arch: str, nvcc_version: str) -> str:
    """The compile cache's key: the exact text, the options, the GPU architecture and the compiler."""
    return hashlib.sha256("\0".join([source, *options, arch, nvcc_version]).encode()).hexdigest()


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


def compile_check(source: str, arch: str, options: list[str], timeout: float, sandbox: Sandbox) -> CompileOutcome:
    """Compile as SourceModule would, without a GPU: nvcc --cubin for `arch`, in the sandbox, output discarded."""
    nvcc = nvcc_path()
    if nvcc is None:
        raise FileNotFoundError("nvcc not found on PATH")
    with scratch_folder("sgemm-compile-") as work:
        Path(work, STUDENT_FILE).write_text(wrap_like_sourcemodule(prepare_source(source)))
        confinement = Confinement(work, COMPILER_LIMITS, cuda=True, seccomp=True)
        env = child_environment(str(work), {})
        finished = run_killable([nvcc, "--cubin", *options, "-arch", arch, STUDENT_FILE], timeout, env=env,
                                start=lambda cmd, **kw: sandbox.popen(cmd, confinement, **kw))
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
