"""Prepares a submission for PyCUDA's compiler and turns compiler output into student messages.

The student's file is compiled with C++ linkage, as nvcc compiles any .cu file: pycuda's
`no_extern_c=True`, not SourceModule's default `extern "C" {` ... `}` around it, inside which a template,
an overload or a C++ header (`<cooperative_groups.h>`) is a compile error. The kernel is then found in the
cubin by its mangled name (kernel_params.find_kernel); one the student declared `extern "C"` keeps its
plain name. The grader's own module (the reference and its helpers) says `extern "C"` itself. A `#line`
directive gives the student's file its own name and numbering (for errors and for -lineinfo) after the
lines the grader puts before it. A probe appended after the student's code lets the compiler itself
evaluate TILE_SIZE (a variable at file scope: its name is never mangled); a prelude before it adds the
late-warps hooks (late_warps.py).
"""
from __future__ import annotations

import functools
import hashlib
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ...build_failure import NVCC_EVIDENCE, classify
from ...contract import DEFAULT_TILE, KernelContract, TileSource
from ..confine.proc import BACKGROUND_NICE, run_killable
from ..gpu.late_warps import PRELUDE as LATE_WARPS_PRELUDE
from ..gpu.late_warps import with_late_warps
from ..protocol import read_untrusted
from .kernel_params import parameter_problem

if TYPE_CHECKING:
    from ..confine.sandbox import Sandbox

STUDENT_FILE, CUBIN_FILE = "kernel.cu", "kernel.cubin"
MAX_CUBIN_BYTES = 64 << 20
TILE_PROBE_SYMBOL = "sgemm_grader_tile_size_"


def _tile_probe(tile: TileSource) -> str:
    return '\n#line 1 "<grader: tile size probe>"\n' + tile.chain(f"__device__ int {TILE_PROBE_SYMBOL} = {{}};")


MAX_MESSAGE_LINES = 25

FILL_KERNEL, COUNT_KERNEL = "sgemm_grader_fill", "sgemm_grader_count_far"
POISON_SHARED_KERNEL, TOUCH_KERNEL = "sgemm_grader_poison_shared", "sgemm_grader_touch"
DIFFER_KERNEL = "sgemm_grader_count_differ"
# The grader's own kernels, compiled into the reference's module (the grader's code):
# - every SM's shared memory filled with poison before each timed launch of the student's kernel. A
#   kernel that reads a tile before it is written (a missing barrier) reads stale shared memory, and
#   stale memory is whatever ran last on that SM: the same kernel on the same inputs (right by luck), or
#   a classmate's kernel in a batch (wrong). Poisoned, the stale value is always wrong. One block per SM:
#   each asks for all the shared memory an SM has, and waits (a bounded time) until every block has
#   arrived, so no SM can take a second block while another gets none. (A case's launches poison their
#   own blocks' shared memory at entry instead, which no other context can come between: late_warps.py);
# - a read of A, B and C before each case's launch: their pages start warm in L2 and the GPU's TLBs whatever
#   ran before (another student's turn in a batch, nothing when graded alone), so a racy kernel's loads
#   take the same time either way;
# - fresh inputs, uniform in [-1, 1), made on the GPU from a seed (a hash per element): no upload per
#   repetition;
# - the count of a timed output's elements farther than the bound from the reference's (NaN and inf
#   always are), compared on the GPU: no output is copied back while the GPU is held for timing.
#   `!(|s - r| <= bound)` in float32 is tolerance.within's float32 test, negated;
# - the count of words that differ bit for bit between two buffers: whether a launch changed A or B, and
#   whether it gave the same C as the case's first launch, asked on the GPU, so a case's turn copies back
#   only the outputs that differ.
GRADER_KERNELS_SOURCE = f"""
#line 1 "<grader: helpers>"
extern __shared__ volatile unsigned int sgemm_grader_stale[];  // volatile: the stores must happen

__global__ void {POISON_SHARED_KERNEL}(unsigned int words, unsigned int bits, unsigned int *arrived,
                                     long long patience_cycles)
{{
    for (unsigned int i = threadIdx.x; i < words; i += blockDim.x) sgemm_grader_stale[i] = bits;
    if (threadIdx.x == 0) {{
        atomicAdd(arrived, 1u);
        long long start = clock64();
        while (atomicAdd(arrived, 0u) < gridDim.x && clock64() - start < patience_cycles) {{ }}
    }}
    __syncthreads();
}}

__global__ void {TOUCH_KERNEL}(const float *x, unsigned int n, unsigned int *sink)
{{
    float seen = 0.0f;
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) seen += x[i];
    if (seen == 1.2345678f) atomicAdd(sink, 1u);  // never true in practice; keeps the loads
}}

__global__ void {FILL_KERNEL}(float *x, unsigned int n, unsigned int seed)
{{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned int h = (i * 2654435761u) ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    x[i] = (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}}

__global__ void {COUNT_KERNEL}(const float *got, const float *expected, unsigned int n, float bound,
                               unsigned int *far)
{{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && !(fabsf(got[i] - expected[i]) <= bound)) atomicAdd(far, 1u);
}}

__global__ void {DIFFER_KERNEL}(const unsigned int *x, const unsigned int *y, unsigned int n, unsigned int *differ)
{{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && x[i] != y[i]) atomicAdd(differ, 1u);
}}
"""


def prepare_source(source: str, file_name: str = STUDENT_FILE, tile: TileSource = DEFAULT_TILE) -> str:
    """The text nvcc gets for a student's file, with C++ linkage (NO_EXTERN_C): the late-warps hooks, the
    file under its own name and line numbers, the tile size probe."""
    return f'{LATE_WARPS_PRELUDE}#line 1 "{file_name}"\n{with_late_warps(source)}\n{_tile_probe(tile)}'


def reference_module_source(reference: str) -> str:
    """The reference kernel's module as the GPU child compiles it: the reference plus the grader's helpers,
    with C linkage as SourceModule would give them (their names are the grader's, looked up as written)."""
    return wrap_like_sourcemodule(prepare_source(reference, "reference.cu") + GRADER_KERNELS_SOURCE)


# pycuda.compiler.compile's no_extern_c for every module the grader compiles: the text is handed to nvcc as it
# is, so the text alone says its linkage (and the cache key, the text, says it too).
NO_EXTERN_C = True
# In every cache key: cubins cached when the student's text was compiled inside extern "C" are not this text's.
LINKAGE = "linkage as written"


def cubin_key(source: str, options: list[str], arch: str, nvcc_version: str,
              headers: dict[str, str] | None = None) -> str:
    """The compile cache's key: the exact text, the headers handed in with it (name and text), the options, the
    GPU architecture and the compiler."""
    handed_in = [f"{name}\0{text}" for name, text in sorted((headers or {}).items())]
    return hashlib.sha256("\0".join([source, *options, arch, nvcc_version, LINKAGE, *handed_in]).encode()).hexdigest()


def wrap_like_sourcemodule(prepared: str) -> str:
    """What SourceModule's default (no_extern_c=False) would hand nvcc: the text inside extern "C"."""
    return 'extern "C" {\n%s\n}\n' % prepared


def nvcc_path() -> str | None:
    return shutil.which("nvcc")


@functools.cache
def toolkit_release() -> str:
    """The CUDA toolkit nvcc belongs to ("12.4, V12.4.131"), the grader's own toolchain; "" without nvcc."""
    nvcc = nvcc_path()
    if nvcc is None:
        return ""
    try:
        said = subprocess.run([nvcc, "--version"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    found = re.search(r"release (\S+ V\S+|\S+)", said)
    return found[1] if found else ""


@dataclass
class CompileOutcome:
    ok: bool
    message: str  # student-facing: errors with the student's line numbers
    timed_out: bool = False
    mismatch: bool = False  # it compiled, but its parameters are not the ones the lab launches it with
    grader_fault: str = ""  # nvcc failed for a reason that is not the student's (build_failure.py): the reason
    # What nvcc built (read bounded, as untrusted bytes): its resources make feedback. Kept out of repr (megabytes).
    cubin: bytes = field(default=b"", repr=False)


def compile_check(source: str, arch: str, options: list[str], timeout: float, sandbox: Sandbox,
                  contract: KernelContract | None = None, headers: dict[str, str] | None = None) -> CompileOutcome:
    """Compile as the GPU child would, without a GPU: nvcc --cubin for `arch`, in the sandbox, the text
    pycuda hands nvcc with NO_EXTERN_C, the headers handed in with it beside it. The cubin is read only for
    the contract's kernel and its parameter list (kernel_params.py), then discarded. A failure with no
    evidence that it is the student's (build_failure.py) is the grader's, not a compile error."""
    # The sandbox's module (seccomp, the reachable copies) only here, in the parent: the GPU child, which imports
    # this module for its compiles, runs in the sandbox already and starts without it (issue 50)
    from ..confine.sandbox import COMPILER_LIMITS, Confinement, child_environment, scratch_folder

    nvcc = nvcc_path()
    if nvcc is None:
        raise FileNotFoundError("nvcc not found on PATH")
    with scratch_folder("sgemm-compile-") as work:
        write_sources(Path(work), prepare_source(source), headers)
        confinement = Confinement(work, COMPILER_LIMITS, cuda=True, seccomp=True, nice=BACKGROUND_NICE)
        env = child_environment(str(work), {})
        try:
            finished = run_killable(cubin_command(nvcc, options, arch, bool(headers)), timeout, env=env,
                                    start=lambda cmd, **kw: sandbox.popen(cmd, confinement, **kw))
        # nvcc or the sandbox could not be started at all (an OSError from exec, or the sandbox's own refusal to
        # start, a RuntimeError, when its uid cannot reach nvcc): the grader's fault, never the file's.
        except (OSError, RuntimeError) as error:
            return CompileOutcome(False, f"nvcc could not be started: {error}", grader_fault=str(error))
        if finished.timed_out:
            return CompileOutcome(False, f"compilation timed out after {timeout:g} s", timed_out=True)
        if finished.returncode != 0:
            return _failed(finished.output, source, headers or {})
        cubin = _read_cubin(Path(work, CUBIN_FILE))
        declared = parameter_problem(cubin, contract) if contract and cubin else ""
    if declared:
        return CompileOutcome(False, declared, mismatch=True)
    return CompileOutcome(True, warnings_of(finished.output, source), cubin=cubin)


def cubin_command(nvcc: str, options: list[str], arch: str, headers: bool) -> list[str]:
    """nvcc's command line for kernel.cu's cubin in the current folder, as pycuda's compile runs it for the GPU
    child: the handed-in headers beside the file are on the include path (-I), found by <name> too."""
    return [nvcc, "--cubin", *options, "-arch", arch, *(["-I."] if headers else []), STUDENT_FILE, "-o", CUBIN_FILE]


def write_sources(folder: Path, prepared: str, headers: dict[str, str] | None) -> None:
    """kernel.cu and, beside it, each header handed in with it (names checked by config and intake: plain)."""
    Path(folder, STUDENT_FILE).write_text(prepared, encoding="utf-8")
    for name, text in (headers or {}).items():
        Path(folder, name).write_text(text, encoding="utf-8")


def _failed(log: str, source: str, headers: dict[str, str]) -> CompileOutcome:
    """The student's compile error, or the grader's fault when nvcc's output locates nothing in their files."""
    failure = classify(log, source, headers, NVCC_EVIDENCE)
    if failure.students:
        return CompileOutcome(False, student_compile_message(log, source))
    return CompileOutcome(False, f"nvcc failed for a reason that is not the student's: {failure.grader_reason}",
                          grader_fault=failure.grader_reason)


def _read_cubin(cubin: Path) -> bytes:
    try:
        return read_untrusted(cubin, MAX_CUBIN_BYTES)
    except OSError:
        return b""  # no cubin to read: nvcc's verdict stands


_LOCATION = re.compile(r'^(?:[^\s:]*/)?kernel\.cu\((\d+)\): ', re.MULTILINE)
# A diagnostic in code the grader adds around the file (each part has a `#line 1 "<grader: PART>"`).
# nvcc's closing words and its hint on silencing warnings: nothing a student wrote.
_NOT_FOR_STUDENTS = ("Compilation terminated", "Remark: ")
_STUDENT_DIAGNOSTIC = re.compile(r"^line \d+: ")
_GRADER_LOCATION = re.compile(r'^"?<grader: ([^>]*)>"?\(\d+\): ')
# What a student can do when the grader's part did not compile, by part.
_GRADER_PART_ADVICE = {
    "tile size probe": "the tile size must be a compile-time integer constant, e.g. #define TILE_SIZE 16",
    "late warps": "do not redefine warpSize, clock64 or __syncthreads",
}


def student_compile_message(log: str, source: str = "") -> str:
    """nvcc's output with `kernel.cu(12): ` turned into `line 12: ` and temp paths removed. Diagnostics in
    the grader's own lines around the file never show (their text and names mean nothing to a student):
    one sentence says what in the file they point at. Given the student's source, each quoted line is the
    student's own, the caret where they wrote what it points at (nvcc quotes the macro-expanded text)."""
    if source:
        log = own_lines(log, source)
    text = _LOCATION.sub(lambda m: f"line {m.group(1)}: ", log)
    text = re.sub(r"/tmp/[^\s\"']*/", "", text)
    lines = [line.rstrip() for line in text.strip().splitlines()]
    lines = [line for line in lines if not line.startswith(_NOT_FOR_STUDENTS)]
    lines, parts = _without_grader_diagnostics(lines)
    for part in parts:
        advice = _GRADER_PART_ADVICE.get(part, "check the macros and declarations it uses")
        lines.insert(0, f"your file does not work with the code the grader adds after it ({part}): {advice}")
    if len(lines) > MAX_MESSAGE_LINES:
        lines = lines[:MAX_MESSAGE_LINES] + [f"[... {len(lines) - MAX_MESSAGE_LINES} more lines truncated ...]"]
    return "compile error:\n" + "\n".join(lines) if lines else "compile error (the compiler printed nothing)"


_QUOTE_INDENT = "  "  # nvcc's indent before the line it quotes (the line's own white space follows)
_TOKENS = re.compile(r"[A-Za-z_]\w*|\d[\w.]*|\S")


def own_lines(log: str, source: str) -> str:
    """nvcc's log with the source line quoted under each `kernel.cu(N): ` diagnostic replaced by line N of the
    student's file, and the caret moved to the same token there."""
    students = source.splitlines()
    lines = log.split("\n")
    for i in range(len(lines) - 2):
        location = _LOCATION.match(lines[i])
        caret = lines[i + 2]
        if not location or not caret.strip() == "^" or not lines[i + 1].startswith(_QUOTE_INDENT):
            continue
        number = int(location.group(1))
        if not 1 <= number <= len(students):
            continue
        quoted = lines[i + 1][len(_QUOTE_INDENT):]
        own = students[number - 1].expandtabs(4).rstrip()
        column = same_place(quoted, caret.index("^") - len(_QUOTE_INDENT), own)
        lines[i + 1] = "    " + own.strip()
        lines[i + 2] = "    " + " " * max(0, column - (len(own) - len(own.lstrip()))) + "^"
    return "\n".join(lines)


def same_place(quoted: str, column: int, own: str) -> int:
    """The column in `own` of the token at `column` of `quoted` (the same line after macro expansion): tokens
    are matched in order; one that came from a macro points at the macro's name."""
    import difflib

    theirs = [(m.start(), m.group()) for m in _TOKENS.finditer(quoted)]
    ours = [(m.start(), m.group()) for m in _TOKENS.finditer(own)]
    if not ours:
        return 0
    index = next((k for k, (start, token) in enumerate(theirs) if start + len(token) > column), len(theirs))
    matcher = difflib.SequenceMatcher(None, [t for _, t in theirs], [t for _, t in ours], autojunk=False)
    for tag, i1, i2, j1, _ in matcher.get_opcodes():
        if i1 <= index < i2 or (i1 == i2 == index):
            k = j1 + (index - i1) if tag == "equal" else j1
            return ours[min(k, len(ours) - 1)][0]
    return ours[-1][0]


def _without_grader_diagnostics(lines: list[str]) -> tuple[list[str], list[str]]:
    """The lines minus each diagnostic located in the grader's code (its location line and the source and
    caret lines under it, up to the next diagnostic); and the grader parts they were in, once each."""
    kept, parts, dropping = [], [], False
    for line in lines:
        grader = _GRADER_LOCATION.match(line)
        if grader:
            dropping = True
            parts += [grader.group(1)] if grader.group(1) not in parts else []
        elif not (dropping and (not line.strip() or line.startswith(" "))):
            dropping = False
            kept.append(line)
    return kept, parts


def warnings_of(log: str, source: str = "") -> str:
    """A compile that passed: its warnings about the student's own lines (each with the line it quotes), or
    "compiled"; nvcc's and ptxas's remarks about nothing the student wrote are left out."""
    told = student_compile_message(log, source).split("\n")[1:] if log.strip() else []
    kept, keeping = [], False
    for line in told:
        if not line.startswith(" "):  # a diagnostic's first line; the lines it quotes are indented under it
            keeping = bool(_STUDENT_DIAGNOSTIC.match(line))
        if keeping and line.strip():
            kept.append(line)
    return "compiled with warnings:\n" + "\n".join(kept) if kept else "compiled"
