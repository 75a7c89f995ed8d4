"""Builds the CPU emulation of a submission: its device side, instrumented, linked into the harness.

g++ runs in the sandbox (it reads student source, and a crafted file could make it misbehave), writing
only into the build folder; the driver then keeps the binary in the cache, where no sandbox can reach it.
The cache key is the sha256 of everything that goes into the build; one build of a key runs at a time (a second
waits for it, then finds its binary kept, or the student's compile error it met), which lets the parent build a
submission's unit ahead, while the driver starts (build_ahead.py), without the driver building it again.
Compiler messages are turned into `line N: ...` with the student's line numbers. The student's unit is compiled
to an object of its own and then linked, so that what it defines can be read from that object (statics.py:
whether the kernel can carry state between launches), kept in the cache beside the binary.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ...build_failure import NO_COPY, classify
from ...cache_file import keep
from ...contract import DEFAULT_TILE, KernelContract, TileSource
from ...leftovers import PREPARE, owned_scratch
from ...source import cuda_syntax as cs
from ...source.device_side import device_side
from ...source.toolkit_headers import is_toolkit_header
from ..confine.proc import BACKGROUND_NICE, kill_group
from ..confine.sandbox import COMPILER_LIMITS, Confinement, Sandbox
from ..nvcc.compile import MAX_MESSAGE_LINES, STUDENT_FILE, same_place
from ..protocol import read_untrusted
from .compiler import compiler, compiler_version, toolchain
from .instrument import instrument
from .statics import EMULATOR_NAMED, emulator_variables, mutable_statics, names_the_emulator, statics_tag

HERE = Path(__file__).resolve().parent
SHIMS = HERE / "include"  # the emulator's own toolkit headers (cuda_runtime.h, cuda_fp16.h, ...)
MAX_BINARY_BYTES = 256 << 20
MAX_LOG = 32 << 10  # of the compiler's own output, sent to the parent as evidence
COMPILE_FLAGS = [
    "-std=c++17", "-O2", "-w", "-fmax-errors=10", "-fno-diagnostics-show-caret",
    # GPU semantics rather than C++'s: signed overflow wraps, and an empty spin loop is kept (C++ may
    # assume it ends and delete it, turning a kernel that hangs on the GPU into one that "works").
    "-fwrapv", "-fno-finite-loops", "-fno-strict-aliasing",
    # A frame larger than a page touches each of its pages as it grows: a local array bigger than a thread's
    # stack meets the guard page below it (a stack overflow) instead of landing in another thread's stack.
    "-fstack-clash-protection",
]
# The sandbox sees the system's libraries only: a compiler installed elsewhere (/opt/gcc) must not leave the
# harness needing its own libstdc++.
LINK_FLAGS = ["-static-libstdc++", "-static-libgcc"]
FLAGS = [*COMPILE_FLAGS, *LINK_FLAGS]


@dataclass
class Build:
    binary: Path | None
    message: str = ""  # the compiler's errors for the student when binary is None
    # What the compiler printed, as it printed it (bounded): the evidence of whose failure it was, read by
    # grader/build_failure.py (a diagnostic in kernel.cu is the student's; anything else the grader's).
    log: str = ""
    # The student's mutable static storage (statics.py): [] for none; None where unknown, which counts as some.
    state: list[str] | None = None
    compiled: bool = False  # this build compiled the unit and kept it (False: taken from the cache, or none)


class Compiles:
    """The sandboxed compiles of one build, which another thread may stop: a build ahead nobody waits for any
    more (its driver ended) stops its g++ rather than leaving it to run to its limit."""

    def __init__(self):
        self._lock = threading.Lock()
        self._running: subprocess.Popen | None = None
        self.stopped = False

    @property
    def running(self) -> bool:
        """Whether one of its compiles has started (and has not been stopped)."""
        return self._running is not None and not self.stopped

    def pids(self) -> list[int]:
        """The compile running now (its sandbox's outermost process), if one is."""
        running = self._running
        return [running.pid] if running is not None and running.poll() is None else []

    def started(self, process: subprocess.Popen) -> None:
        with self._lock:
            self._running = process
            if self.stopped:
                kill_group(process)

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            if self._running is not None:
                kill_group(self._running)


# CUDA's __noinline__, spelled as g++'s attribute in the student's own text. As a macro in cuda_emu.h it broke
# every standard header that writes __attribute__((__noinline__)) (libstdc++'s shared_ptr; g++ 13's
# <bits/stdc++.h>) when the student includes one.
_NOINLINE = re.compile(r"\b__noinline__\b")


def _spelled_for_gxx(text: str) -> str:
    return _without_toolkit_copies(_NOINLINE.sub("__attribute__((noinline))", text))


def _without_toolkit_copies(text: str) -> str:
    """Each #include of a toolkit header the emulator has no copy of (SHIMS) made an #error at its line, which
    build_failure.py reads as what the kernel uses: g++ would otherwise read the machine's own copy where its
    folders hold one (Debian's nvidia-cuda-dev puts the toolkit in /usr/include) and find none elsewhere, and the
    verdict would depend on the machine. An #include the preprocessor skips (#ifdef) stays harmless."""
    lines = text.split("\n")
    for line, name in cs.included_headers(cs.parse(text).root_node):
        if is_toolkit_header(name) and not (SHIMS / name).is_file():
            lines[line - 1] = "#error " + NO_COPY.format(name)
    return "\n".join(lines)


def emulator_sources(source: str, contract: KernelContract, tile: TileSource = DEFAULT_TILE,
                     headers: dict[str, str] | None = None) -> dict[str, str]:
    """The two files the harness includes: the student's device side (with the tile size probe, which
    defines SGEMM_GRADER_TILE) and the launch of their kernel; and beside them, where `#include "name"`
    finds them, the device side of each header handed in with the file (not instrumented: the emulator's
    line marks would give its lines as kernel.cu's)."""
    device = _spelled_for_gxx(instrument(device_side(source, headers or ()), statics_tag(source, headers)))
    return {
        **{name: _spelled_for_gxx(device_side(text, headers)) for name, text in (headers or {}).items()},
        "student.cu": (f'#line 1 "{STUDENT_FILE}"\n{device}\n'
                       '#line 1 "<grader: tile size probe>"\n'
                       + tile.chain("#define SGEMM_GRADER_TILE {}")),
        "launch.inc": _launch(contract),
    }


def _launch(contract: KernelContract) -> str:
    """The kernel called by its name, from C++ as the GPU finds it by its mangled name (kernel_params.py): of
    overloads, the one the lab's own types call (pointers to float; kernel_params picks the same); a kernel
    taking another pointer type (float4 *) is called through AnyPointer, which converts to any. Both calls
    are templates (AnyPointer is a template parameter), so the one not taken is never compiled; the kernel is
    named from the global scope (`::mysgemm`), where the lab's kernel is, whatever the harness calls its own."""
    sizes = ("args.m", "args.n", "args.k")
    typed = ", ".join(contract.arguments(*sizes, "(Float *)args.A", "(Float *)args.B", "(Float *)args.C"))
    untyped = ", ".join(contract.arguments(*sizes, "AnyPointer{args.A}", "AnyPointer{args.B}", "AnyPointer{args.C}"))
    return (
        '#line 1 "<grader: kernel launch>"\n'
        "namespace cuda_emu_harness {\n"
        "template <class Float, class AnyPointer>\n"
        f"static auto kernel_call(int) -> decltype(::{contract.name}({typed}), void()) {{\n"
        f"    ::{contract.name}({typed});\n}}\n"
        "template <class Float, class AnyPointer>\n"
        f"static void kernel_call(long) {{\n    ::{contract.name}({untyped});\n}}\n"
        "}  // namespace cuda_emu_harness\n"
        "static void cuda_emu_kernel_call() {\n"
        "    cuda_emu_harness::kernel_call<float, cuda_emu_harness::AnyPointer>(0);\n}\n"
    )


# The harness's own code (compiled once, harness_object): its units, compiled side by side and joined into one
# object, and the unit compiled per submission around the student's code, linked with it.
HARNESS_UNITS = ("harness.cpp", "emulator_runtime.cpp")
HARNESS_OWN = (*HARNESS_UNITS, "cuda_emu.h", "student_interface.h")
STUDENT_UNIT = "student_unit.cpp"
UNIT_OBJECT = "student.o"  # the student's unit compiled, before it is linked (statics.py reads it)


def harness_object(cxx: str, cache_dir: Path, timeout_s: float, into: Path) -> None:
    """The harness's units compiled to one object in `into`, from the cache where they were compiled before
    (once per grader version and compiler): none of it is the student's (their unit is compiled apart and
    linked with it), so it is compiled outside the sandbox. Each unit is compiled by a g++ of its own, at
    once, and the objects joined (`-r`): the cold build waits for the slower unit, not for their sum. A
    failure here is the grader's (OSError)."""
    cached = _harness_entry(cxx, cache_dir)
    if cached.is_file():
        shutil.copyfile(cached, into)
        return
    objects = [into.with_name(f"{into.name}.{Path(unit).stem}.o") for unit in HARNESS_UNITS]
    try:
        _compiled([[cxx, *COMPILE_FLAGS, "-c", "-I", str(SHIMS), str(HERE / unit), "-o", str(obj)]
                   for unit, obj in zip(HARNESS_UNITS, objects)], timeout_s, "the harness")
        _compiled([[cxx, "-r", "-nostdlib", *map(str, objects), "-o", str(into)]], timeout_s, "the harness")
    finally:
        for obj in objects:
            obj.unlink(missing_ok=True)
    keep(cached, into.read_bytes())  # a cache that cannot be written costs the next build this again


def _harness_entry(cxx: str, cache_dir: Path) -> Path:
    texts = [(HERE / name).read_text() for name in HARNESS_OWN]
    key = hashlib.sha256("\0".join([*texts, *FLAGS, compiler_version(cxx)]).encode()).hexdigest()
    return Path(cache_dir, "cpu", f"harness-{key}.o")


def _kept_or_compiled(cached: Path, into: Path, command: list[str], timeout_s: float, what: str) -> None:
    """`into` copied from the cache, or made by `command` (grader's own code, unconfined; it writes `into`)
    and kept there. OSError when it does not compile."""
    if cached.is_file():
        shutil.copyfile(cached, into)
        return
    _compiled([command], timeout_s, what)
    keep(cached, into.read_bytes())  # a cache that cannot be written costs the next build this again


def _compiled(commands: list[list[str]], timeout_s: float, what: str) -> None:
    """The grader's own compiles (unconfined), all started at once; OSError when any fails or runs past the
    limit (the others are then stopped)."""
    processes = [subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT) for command in commands]
    deadline = time.monotonic() + timeout_s
    try:
        for process in processes:
            try:
                said, _ = process.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as error:
                raise OSError(f"{what} did not compile within {timeout_s:g} s") from error
            if process.returncode != 0:
                raise OSError(f"{what} did not compile: {said.decode('utf-8', 'replace').strip()[:2000]}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def precompiled_header(cxx: str, cache_dir: Path, timeout_s: float, into: Path) -> Path | None:
    """cuda_emu.h in `into` with its precompiled form beside it (made once per grader version and compiler,
    kept in the cache): a student's unit reads it first (`-include`), a quarter of its g++ time. g++ reads
    the text copy where it cannot use the precompiled one; None (the header compiled as text, as the unit
    includes it) where it could not be made: it changes how fast a build is, never what it builds."""
    try:
        into.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(HERE / "cuda_emu.h", into / "cuda_emu.h")
        # Made from the header where it lies, so a diagnostic in it names the path it names without one.
        command = [cxx, *COMPILE_FLAGS, "-I", str(SHIMS), "-x", "c++-header", str(HERE / "cuda_emu.h"),
                   "-o", str(into / "cuda_emu.h.gch")]
        _kept_or_compiled(_precompiled_entry(cxx, cache_dir), into / "cuda_emu.h.gch", command, timeout_s,
                          "cuda_emu.h")
    except OSError:  # no room, no compiler for it, a name taken: the unit is built from the text
        return None
    return into / "cuda_emu.h"


def harness_and_header(cxx: str, cache_dir: Path, timeout_s: float, harness: Path, header: Path) -> Path | None:
    """harness_object into `harness` and precompiled_header into `header`, made side by side where the cache
    lacks them (the harness's units and the header are three g++ at once); precompiled_header's answer. One
    process builds them at a time (a grade's parent, its child, a batch's workers): the others wait for it and
    copy what it kept."""
    with _alone(cxx, cache_dir), ThreadPoolExecutor(1) as pool:
        precompiled = pool.submit(precompiled_header, cxx, cache_dir, timeout_s, header)
        harness_object(cxx, cache_dir, timeout_s, harness)
        return precompiled.result()


def prepare(cache_dir: Path, timeout_s: float) -> bool:
    """What every submission's build shares, made into the cache now (`grade prepare`, a grade's start) so that
    no student's build waits for it: the harness's object and the precompiled header. False where there is no
    compiler; OSError where the harness does not compile (the grader's fault)."""
    cxx = compiler()
    if cxx is None:
        return False
    if _kept(cxx, cache_dir):
        return True
    with owned_scratch(PREPARE) as work:  # named for this process: a kill -9 leaves nothing for long
        harness_and_header(cxx, cache_dir, timeout_s, work / "harness.o", work / "precompiled")
    return True


def prepared(cache_dir: Path) -> bool:
    """Whether the cache holds the harness's object and the precompiled header for this grader and compiler."""
    cxx = compiler()
    return cxx is not None and _kept(cxx, cache_dir)


def _kept(cxx: str, cache_dir: Path) -> bool:
    return _harness_entry(cxx, cache_dir).is_file() and _precompiled_entry(cxx, cache_dir).is_file()


@contextmanager
def _alone(cxx: str, cache_dir: Path) -> Iterator[None]:
    """Held while the cache lacks the harness or the header: an advisory lock of the cache's, which the system
    lets go of when its holder ends however it ends. Where it cannot be had (a read-only cache), not held."""
    if _kept(cxx, cache_dir):
        yield
        return
    try:
        folder = Path(cache_dir, "cpu")
        folder.mkdir(parents=True, exist_ok=True)
        lock = open(folder / "harness.lock", "a")
    except OSError:
        yield
        return
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _precompiled_entry(cxx: str, cache_dir: Path) -> Path:
    text = (HERE / "cuda_emu.h").read_text()
    key = hashlib.sha256("\0".join([text, *COMPILE_FLAGS, compiler_version(cxx)]).encode()).hexdigest()
    return Path(cache_dir, "cpu", f"cuda_emu-{key}.gch")


def _drop_precompiled(cxx: str, cache_dir: Path) -> None:
    try:
        _precompiled_entry(cxx, cache_dir).unlink(missing_ok=True)
    except OSError:
        pass


def build(source: str, contract: KernelContract, tile: TileSource, cache_dir: Path,
          workdir: Path, sandbox: Sandbox, timeout_s: float, headers: dict[str, str] | None = None,
          compiles: Compiles | None = None) -> Build:
    """The emulation's binary from the cache, else built in `workdir` (the student's unit in the sandbox) and
    kept there; `compiles`: how another thread may stop it."""
    cxx = compiler()
    if cxx is None:
        return Build(None, "the CPU emulator needs a C++ compiler (g++), and none is on PATH")
    sources = emulator_sources(source, contract, tile, headers)
    cached = _binary_entry(cxx, sources, headers, Path(cache_dir))
    kept = _kept_build(cached)
    if kept is not None:
        return kept
    with _building(cached):  # a build of this key already running (one started ahead) is waited for
        kept = _kept_build(cached)
        if kept is not None:
            return kept
        if compiles is not None and compiles.stopped:
            return Build(None, "the build was stopped before it began")
        built = _built(cxx, source, sources, headers, cached, Path(cache_dir), Path(workdir, "emulator"), sandbox,
                       timeout_s, compiles)
        if built.binary is None and built.log and classify(built.log, source, headers or ()).students:
            # the student's own error, kept for the driver that waited for this build: not compiled twice
            keep(_error_file(cached), json.dumps({"message": built.message, "log": built.log}).encode())
        return built


def _kept_build(cached: Path) -> Build | None:
    """The binary built before, or the student's compile error that build met (as it read); None: neither."""
    if cached.is_file():
        return Build(cached, state=_kept_state(cached))
    try:
        error = json.loads(_error_file(cached).read_text())
        return Build(None, str(error["message"]), str(error["log"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _error_file(binary: Path) -> Path:
    return binary.with_name(binary.name + ".error")


def _binary_entry(cxx: str, sources: dict[str, str], headers: dict[str, str] | None, cache_dir: Path) -> Path:
    """The cache's name for the binary built from these sources: the sha256 of everything that goes into it."""
    inputs = [*sources.values(), *((HERE / name).read_text() for name in (*HARNESS_OWN, STUDENT_UNIT))]
    inputs += [path.read_text() for path in sorted(SHIMS.iterdir())]
    inputs += sorted(headers or {})  # a header's name, beside its text, decides which #include finds it
    key = hashlib.sha256("\0".join([*inputs, *FLAGS, compiler_version(cxx)]).encode()).hexdigest()
    return Path(cache_dir, "cpu", key)


@contextmanager
def _building(cached: Path) -> Iterator[None]:
    """Held while one process builds `cached`: an advisory lock on a file beside it, which the system lets go of
    when its holder ends however it ends, removed by its holder (a waiter that then holds a removed file's lock
    opens the new one). Where it cannot be had (a read-only cache), not held: the build is then simply done."""
    path = cached.with_name(cached.name + ".lock")
    while True:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock = open(path, "a")
        except OSError:
            yield
            return
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _same_file(lock, path):
            break
        lock.close()  # its holder removed it while we waited: the lock is now the new file's
    try:
        yield
    finally:
        try:
            path.unlink(missing_ok=True)  # while held: a waiter sees it went, and locks the next one's
        except OSError:
            pass  # left for the next build of this key, which locks it as it is
        lock.close()


def _same_file(opened, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(opened.fileno()), os.stat(path))
    except OSError:
        return False


def _built(cxx: str, source: str, sources: dict[str, str], headers: dict[str, str] | None, cached: Path,
           cache_dir: Path, folder: Path, sandbox: Sandbox, timeout_s: float, compiles: Compiles | None) -> Build:
    """The emulation built in `folder` and kept as `cached`; the student's compile errors as they read them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in sources.items():
        (folder / name).write_text(text, encoding="utf-8")
    # where the sandbox's uid can read them
    header = harness_and_header(cxx, cache_dir, timeout_s, folder / "harness.o", folder / "precompiled")
    emulator = emulator_variables((folder / "harness.o").read_bytes())  # read before any sandbox can change it
    binary = folder / "harness"
    compiled = _compile_unit(cxx, folder, binary, header, sandbox, timeout_s, compiles)
    if compiled is not None and compiled[0] != 0 and header is not None:
        # Built again from the text: what the student sees never depends on the precompiled header, and one
        # that only it broke (damaged in the cache) is dropped, to be made again.
        compiled = _compile_unit(cxx, folder, binary, None, sandbox, timeout_s, compiles)
        if compiled is not None and compiled[0] == 0:
            _drop_precompiled(cxx, cache_dir)
    if compiled is None:
        return Build(None, f"compile error: the C++ compiler ran past {timeout_s:g} s")
    returncode, output = compiled
    if returncode != 0:
        log = output.decode("utf-8", "replace")[:1 << 20]
        built = sources["student.cu"].split("\n", 1)[1]  # after its `#line 1 "kernel.cu"`
        log = log.replace(f"{folder}/", "")  # a handed-in header's diagnostics name it alone: `tiling.cuh:5:3:`
        return Build(None, compiler_message(log, source, built), log[:MAX_LOG])
    state = _state(folder, emulator, statics_tag(source, headers))
    if state is not None and names_the_emulator(source, headers):
        state.append(EMULATOR_NAMED)
    try:
        keep(_state_file(cached), json.dumps(state).encode())  # first: a kept binary without it counts as stateful
        _store_atomically(binary, cached)
    except OSError as error:
        return Build(None, f"compile error: the compiler left no usable program ({error})")
    return Build(cached, state=state, compiled=True)


def _state(folder: Path, emulator: frozenset[str], tag: str) -> list[str] | None:
    """What the student's object holds that can change between launches (statics.py); None when unknown."""
    try:
        student = read_untrusted(folder / UNIT_OBJECT, MAX_BINARY_BYTES)
    except OSError:
        return None
    return mutable_statics(student, emulator, tag)


def _state_file(binary: Path) -> Path:
    return binary.with_name(binary.name + ".state")


def _kept_state(binary: Path) -> list[str] | None:
    try:
        state = json.loads(_state_file(binary).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, list) and all(isinstance(name, str) for name in state) else None


def _compile_unit(cxx: str, folder: Path, binary: Path, header: Path | None, sandbox: Sandbox,
                  timeout_s: float, compiles: Compiles | None = None) -> tuple[int, bytes] | None:
    """g++ on the student's unit, to an object, then linked with the harness's object, in the sandbox: (exit
    code, what it printed), or None when it ran past the limit."""
    compiled = _in_sandbox(cxx, [*COMPILE_FLAGS, *(["-include", str(header)] if header else []),
                                 "-I", str(folder), "-I", str(HERE), "-I", str(SHIMS), "-c",
                                 str(HERE / STUDENT_UNIT), "-o", str(folder / UNIT_OBJECT)], folder, sandbox, timeout_s,
                           compiles)
    if compiled is None or compiled[0] != 0:
        return compiled
    linked = _in_sandbox(cxx, [*LINK_FLAGS, str(folder / UNIT_OBJECT), str(folder / "harness.o"), "-o", str(binary)],
                         folder, sandbox, timeout_s, compiles)
    return None if linked is None else (linked[0], compiled[1] + linked[1])


def _in_sandbox(cxx: str, arguments: list[str], folder: Path, sandbox: Sandbox,
                timeout_s: float, compiles: Compiles | None = None) -> tuple[int, bytes] | None:
    command = [cxx, *arguments]
    confinement = Confinement(folder, COMPILER_LIMITS, seccomp=True, readable=(HERE, *toolchain(cxx)),
                              nice=BACKGROUND_NICE)
    process = sandbox.popen(command, confinement, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env={"PATH": os.environ.get("PATH", "/usr/bin"),
                                                           "LC_ALL": "C", "TMPDIR": str(folder)})
    if compiles is not None:
        compiles.started(process)
    try:
        output, _ = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_group(process)
        return None
    return process.returncode, output


_LOCATION = re.compile(r"^(?:[^\s:]*/)?kernel\.cu:(\d+):(?:\d+:)? ", re.MULTILINE)


_COLUMN = re.compile(r"^(?:[^\s:]*/)?kernel\.cu:(\d+):(\d+): (?:fatal )?error: ")


def compiler_message(log: str, source: str = "", built: str = "") -> str:
    """g++'s `kernel.cu:12:5: error: ...` as `line 12: error: ...`, without the grader's own paths; given the
    student's source and the text g++ built from it (instrumented), each error quotes the student's line
    with a caret where they wrote what it points at."""
    if source and built:
        log = _with_own_lines(log, source.splitlines(), built.splitlines())
    text = _LOCATION.sub(lambda m: f"line {m.group(1)}: ", log)
    text = re.sub(r"^(?:[^\s:]*/)?kernel\.cu: ", "", text, flags=re.MULTILINE)
    text = re.sub(r"(?:/[^\s:'\"]*)?/grader/execute/cpu/", "", text)
    lines = [line.rstrip() for line in text.strip().splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("compilation terminated", "In file included from"))]
    if len(lines) > MAX_MESSAGE_LINES:
        lines = lines[:MAX_MESSAGE_LINES] + [f"[... {len(lines) - MAX_MESSAGE_LINES} more lines truncated ...]"]
    return "compile error:\n" + "\n".join(lines) if lines else "compile error (the compiler printed nothing)"


def _with_own_lines(log: str, own: list[str], built: list[str]) -> str:
    out = []
    for line in log.split("\n"):
        out.append(line)
        where = _COLUMN.match(line)
        number = int(where.group(1)) if where else 0
        if where and 1 <= number <= min(len(own), len(built)) and own[number - 1].strip():
            student = own[number - 1].expandtabs(4).rstrip()
            column = same_place(built[number - 1].expandtabs(4), int(where.group(2)) - 1, student)
            indent = len(student) - len(student.lstrip())
            out += ["    " + student.strip(), "    " + " " * max(0, column - indent) + "^"]
    return "\n".join(out)


def _store_atomically(binary: Path, target: Path) -> None:
    """The sandbox wrote the binary: copy it only as a plain file (never through a link it may have made)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    temporary.write_bytes(read_untrusted(binary, MAX_BINARY_BYTES))
    temporary.chmod(0o755)
    os.replace(temporary, target)
