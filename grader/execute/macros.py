"""The student's macros expanded as the compilers will expand them, in the sandbox, for the include policy.

A paste of two macro arguments (`#define J(a, b) a ## b`) can assemble any name, `_Pragma` or `asm` among them, and
only its uses say which (source/include_policy.py proves the other pastes harmless from the text). So such a file is
preprocessed, following its includes (the policy has already accepted each by where it resolves), by the
preprocessors that will compile it: g++ as the CPU emulator compiles it (its headers, its `__CUDA_ARCH__`), and
nvcc's device pass for the lab's architecture where nvcc is here, each such paste wrapped so that the output shows
the token it made (include_policy.pastes_shown); the policy then reads them. The preprocessor runs on student-
controlled text (a pasted `_Pragma` acts while it runs), so it runs confined, as the compilers do, in a folder of
its own with nothing secret in reach; its output is read bounded and never shown (a report quotes the student's own
line).
"""
from __future__ import annotations

import secrets
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from ..source.include_policy import (
    ARCH_DEPENDENT,
    IncludeViolation,
    arch_dependent,
    pasted_violations,
    pastes_shown,
    shown_pastes_header,
)
from .confine.proc import BACKGROUND_NICE, run_killable
from .confine.sandbox import COMPILER_LIMITS, Confinement, Sandbox, child_environment, scratch_folder
from .cpu.build import HERE, SHIMS
from .cpu.compiler import compiler, toolchain
from .nvcc.compile import STUDENT_FILE, nvcc_path, write_sources
from .protocol import read_untrusted

EXPANDED, PRELUDE = "expanded.ii", "grader_prelude.h"
MAX_EXPANDED_BYTES = 64 << 20  # a file that includes cuda_runtime.h expands to about 2 MB


@dataclass(frozen=True)
class Expansions:
    texts: tuple[str, ...]  # each preprocessor's output (`-E`), when every one finished
    seconds: float  # what expanding cost, all preprocessors together
    problem: str = ""  # why there are none: a preprocessor failed or ran past its time (then texts is empty)


def expand(files: dict[str, str], prelude: str, options: list[str], arch: str, sandbox: Sandbox,
           timeout_s: float) -> Expansions:
    """kernel.cu (`files[STUDENT_FILE]`) and the headers handed in with it, expanded by each compiler here (side
    by side), with `prelude` (the grader's macros) included before kernel.cu."""
    started = time.perf_counter()
    preprocessors = list(_preprocessors(options, arch))
    with ThreadPoolExecutor(max(1, len(preprocessors))) as pool:
        outcomes = list(pool.map(lambda p: _expanded(files, prelude, *p, sandbox, timeout_s), preprocessors))
    seconds = time.perf_counter() - started
    problem = next((outcome for outcome in outcomes if not isinstance(outcome, bytes)), "")
    if problem:
        return Expansions((), seconds, problem)
    return Expansions(tuple(outcome.decode("utf-8", "replace") for outcome in outcomes), seconds)


def _expanded(files: dict[str, str], prelude: str, command: list[str], confinement_of, sandbox: Sandbox,
              timeout_s: float) -> bytes | str:
    """One preprocessor's output, or why there is none."""
    with scratch_folder("sgemm-expand-") as work:
        write_sources(Path(work), files[STUDENT_FILE], {n: t for n, t in files.items() if n != STUDENT_FILE})
        Path(work, PRELUDE).write_text(prelude, encoding="utf-8")
        confinement = confinement_of(Path(work))
        finished = run_killable(command, timeout_s, env=child_environment(str(work), {}),
                                start=lambda cmd, **kw: sandbox.popen(cmd, confinement, **kw))
        if finished.timed_out or finished.returncode != 0:
            return f"{command[0]} -E " + ("ran past its time" if finished.timed_out
                                          else f"stopped (exit {finished.returncode})")
        try:
            return read_untrusted(Path(work, EXPANDED), MAX_EXPANDED_BYTES)
        except OSError as error:  # not a plain file, or too large: written so by the student's text
            return f"{command[0]} -E: {error}"


def _preprocessors(options: list[str], arch: str):
    """(command, confinement for a folder) of each compiler that will compile the file on this machine."""
    cxx, nvcc = compiler(), nvcc_path()
    if cxx:  # as build.py compiles the emulator's unit: its shims for the toolkit's headers, cuda_emu.h first
        yield ([cxx, "-E", "-x", "c++", "-std=c++17", "-include", "cuda_emu.h", "-include", PRELUDE,
                "-I", str(HERE), "-I", str(SHIMS), "-I.", STUDENT_FILE, "-o", EXPANDED],
               lambda work: Confinement(work, COMPILER_LIMITS, seccomp=True, readable=(HERE, *toolchain(cxx)),
                                        nice=BACKGROUND_NICE))
    if nvcc:  # as compile.py's cubin_command compiles it: the device pass
        yield ([nvcc, "-E", *options, "-arch", arch, "-include", PRELUDE, "-I.", STUDENT_FILE, "-o", EXPANDED],
               lambda work: Confinement(work, COMPILER_LIMITS, cuda=True, seccomp=True, nice=BACKGROUND_NICE))


def pastes_judged(files: dict[str, str], violations: dict[str, list[IncludeViolation]], options: list[str],
                  arch: str, sandbox: Sandbox, timeout_s: float) -> tuple[dict[str, list[IncludeViolation]], float]:
    """The policy's violations of each file once what its pastes make is known, and the seconds that took:
    where the text alone could not judge a paste (include_policy.needs_expansion of them all), the files are
    expanded with every such paste shown, and what is refused is what a paste built; where they cannot be
    expanded (or the expansion would depend on the GPU), the violations stand, with the reason."""
    if arch_dependent(files.values()):
        return {name: [replace(v, reason=ARCH_DEPENDENT) for v in found] for name, found in violations.items()}, 0.0
    tag = "G" + secrets.token_hex(8)  # the grader's names in the expansion: no student's macro can know them
    shown = {name: pastes_shown(text, index, tag) for index, (name, text) in enumerate(files.items())}
    expansions = expand(shown, shown_pastes_header(tag), options, arch, sandbox, timeout_s)
    if expansions.problem:
        return violations, expansions.seconds
    names = list(files)
    judged: dict[str, list[IncludeViolation]] = {name: [] for name in files}
    for index, violation in pasted_violations(expansions.texts, list(files.values()), tag):
        judged[names[index]].append(violation)
    return judged, expansions.seconds
