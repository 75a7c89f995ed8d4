"""Whose failure a failed CPU-emulator build is: the student's code, or the grader's machine.

Why: what is checkable depends on the machine and the config, never on the submission. When nvcc compiles
a kernel and the emulator cannot build it, the cases still count (a student must not move points out of
the total by writing one construct the emulator lacks); when the build failed for a reason that is not
the student's (the compiler missing or not executable, a file the sandbox cannot read, out of memory, a
sandbox that would not start), it is a grader error, graded again by `--resume`.

Decided from evidence: a diagnostic the compiler located in kernel.cu or in a header handed in with it
(g++'s `kernel.cu:12:5: error`, nvcc's `kernel.cu(12): error`; an error there, or a note there saying the
student's line called what failed in the emulator's headers) makes it the student's. No such diagnostic,
or no compiler output at all, makes it the grader's. The same rule serves nvcc's GPU-less compile check
(execute/nvcc/without_gpu.py), where ptxas's verdict on one of the student's functions (too much shared
memory, an undefined device function) and an error in the code the grader adds around the file (which only
the student's macros can break) count as the student's too (NVCC_EVIDENCE). The student's own words for it name the
construct and the line ("uses inline PTX (line 14)", "uses <mma.h> (line 2)": a toolkit header the emulator
does not have), or say it generically when the construct is unknown.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

# `kernel.cu:14:32: error: ...`, `kernel.cu:14: Error: ...` (the assembler), nvcc's `kernel.cu(14): error: ...`,
# with or without a folder; FILE stands for kernel.cu or a handed-in header.
_LOCATED = r"^(?:[^\s:]*/)?(?:FILE)(?::(\d+):(?:\d+:)?|\((\d+)\):)\s*(.*)$"
STUDENT_FILE = "kernel.cu"
# nvcc's evidence that a failure is the student's though no line of theirs is named: ptxas refusing one of
# their functions, a diagnostic in the grader's own code around the file (`<grader: tile size probe>(1)`).
NVCC_EVIDENCE = re.compile(r"^ptxas (?:error|fatal)\s*:.*'[^']+'|^\"?<grader: [^>]*>\"?\(\d+\): error",
                           re.MULTILINE)
_ERROR = re.compile(r"^(?:fatal )?error:|^Error:")
# The #error the emulator's build puts where the file includes a toolkit header it has no copy of (cpu/build.py):
# the header is what the kernel uses.
NO_COPY = "the CPU emulator has no copy of <{}>"
_NO_COPY = re.compile("^error: #error " + re.escape(NO_COPY).replace(r"<\{\}>", r"<([\w./+-]+)>"))
_ASM = re.compile(r"\b(?:asm|__asm__|__asm)\b")
# g++'s words (LC_ALL=C) for a name it does not know: the name is the construct.
_UNKNOWN_NAME = re.compile(
    r"'([A-Za-z_]\w*)' (?:was not declared|has not been declared|does not name a type|is not a member of|"
    r"is not a template|is not a type|was not declared in this scope)"
    r"|there are no arguments to '([A-Za-z_]\w*)'"
    r"|no matching function for call to '(?:[\w:]*::)?([A-Za-z_]\w*)[(<]")
MAX_DETAIL = 200
MAX_FAULT_LINES = 4


@dataclass(frozen=True)
class BuildFailure:
    students: bool  # what the student wrote is what the emulator cannot build
    line: int | None = None  # the kernel.cu line of the first diagnostic there
    construct: str = ""  # what it uses, in a student's words ("inline PTX", "__nanosleep"), or "" if unknown
    header: str = ""  # the toolkit header the emulator has no copy of (mma.h), where that is what failed
    grader_reason: str = ""  # for a grader fault: what went wrong, from the compiler or the sandbox

    @property
    def student_reason(self) -> str:
        """What the student reads on each case the emulator could not run."""
        if self.construct:
            return (f"uses {self.construct} (line {self.line}), which the CPU grader cannot run: "
                    "it is graded on a GPU")
        return f"line {self.line} is code the CPU grader cannot build: it is graded on a GPU"


def classify(log: str, source: str, headers: Iterable[str] = (), evidence: re.Pattern | None = None) -> BuildFailure:
    """The failure as the compiler's own output shows it. `log` is what the compiler (or the sandbox starting
    it) printed, or the driver's reason when nothing ran; `source` is the student's kernel.cu, `headers` the
    names of the files handed in with it; `evidence` what else in the log shows the failure is the student's."""
    located = [(int(match.group(1) or match.group(2)), match.group(3).strip())
               for match in _located(tuple(headers)).finditer(log)]
    if not located:
        if evidence is not None and evidence.search(log):
            return BuildFailure(True)
        return BuildFailure(False, grader_reason=_fault(log))
    errors = [(line, text) for line, text in located if _ERROR.match(text)]
    line, text = (errors or located)[0]
    missing = _NO_COPY.match(text)
    if missing:
        return BuildFailure(True, line, f"<{missing.group(1)}>", header=missing.group(1))
    return BuildFailure(True, line, _construct(line, text, errors or located, source, log))


@functools.cache
def _located(headers: tuple[str, ...]) -> re.Pattern:
    files = "|".join(re.escape(name) for name in (STUDENT_FILE, *headers))
    return re.compile(_LOCATED.replace("FILE", files), re.MULTILINE)


def _construct(line: int, text: str, located: list[tuple[int, str]], source: str, log: str) -> str:
    lines = source.splitlines()
    written = lines[line - 1] if 0 < line <= len(lines) else ""
    if text.startswith("Error:") or "Assembler messages" in log or _ASM.search(written) or "'asm'" in text:
        return "inline PTX"
    for _, said in located:
        found = _UNKNOWN_NAME.search(said)
        if found:
            return next(name for name in found.groups() if name)
    return ""


def _fault(log: str) -> str:
    lines = [line.strip() for line in log.strip().splitlines() if line.strip()]
    text = "; ".join(lines[:MAX_FAULT_LINES]) or "the C++ compiler failed and printed nothing"
    return text if len(text) <= MAX_DETAIL * 2 else text[:MAX_DETAIL * 2] + " [...]"
