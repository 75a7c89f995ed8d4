"""Reads NVIDIA compute-sanitizer text output (memcheck, racecheck, synccheck) into hazards and sentences.

The formats follow the Compute Sanitizer user manual (docs.nvidia.com/compute-sanitizer): every line
the tool writes starts with its prefix (`=========` by default, `--prefix`), records are separated by
a bare prefix line, and each tool ends with a summary line:

    ========= Invalid __global__ read of size 4 bytes                        (memcheck)
    =========     at mysgemm+0x1d0 in /tmp/x/kernel.cu:12
    =========     by thread (3,0,0) in block (3,0,0)
    =========     Address 0x7f1c2a000400 is out of bounds
    =========     and is 4 bytes after the nearest allocation at 0x7f1c2a000000 of size 1,024 bytes
    ========= ERROR SUMMARY: 1 error

    ========= Error: Race reported between Write access at mysgemm+0x90 in kernel.cu:14   (racecheck,
    =========     and Read access at mysgemm+0x100 in kernel.cu:19 [508 hazards]              analysis)
    ========= Error: Potential RAW hazard detected at __shared__ 0x40 in block (1,0,0) :  (racecheck,
    =========     Write Thread (0,1,0) at mysgemm+0x90 in kernel.cu:14                         hazard)
    =========     Read Thread (3,0,0) at mysgemm+0x100 in kernel.cu:19
    ========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)

    ========= Barrier error detected. Divergent thread(s) in block.           (synccheck)
    =========     at mysgemm+0x2c0 in kernel.cu:21
    =========     by thread (0,0,0) in block (1,2,0)

Older releases (and cuda-memcheck) wrote locations as `at 0x1d0 in /path/kernel.cu:12:mysgemm(...)`,
newer ones may put `in file:line` on a line of its own and write `Access to 0x.. is out of bounds`;
all of these are read. Without -lineinfo a location has no file and line, and the hazard is kept
without them.

Run the tool with `--log-file`: the sanitizer's lines must not share a stream with the program's own
output, which a kernel's printf controls (it could print a fake summary). Lines without the prefix are
ignored, and error_count sums the summary lines (one per checked process), so a forged `0 errors`
cannot hide real errors; a forged summary can still make a cut-off log look complete.

describe() reports only lines of the student's file (paths are reduced to their basename and compared
with it) and never echoes any other text of the log: names of kernels, files and CUDA errors stay out.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

TOOLS = ("memcheck", "racecheck", "synccheck")
STUDENT_FILE = "kernel.cu"
MAX_SENTENCES = 5

# Hazard kinds.
RACE = "race"  # racecheck: shared-memory data race (analysis or hazard report)
OUT_OF_BOUNDS = "out_of_bounds"  # memcheck: address outside every allocation
MISALIGNED = "misaligned"  # memcheck: misaligned address
INVALID_ACCESS = "invalid_access"  # memcheck: invalid access whose address line is missing or unknown
DIVERGENT_BARRIER = "divergent_barrier"  # synccheck: barrier reached by only some threads
INVALID_BARRIER = "invalid_barrier"  # synccheck: barrier called with invalid arguments
BARRIER_ERROR = "barrier_error"  # synccheck: another barrier error
DEVICE_ERROR = "device_error"  # a hardware exception or other located device error
API_ERROR = "api_error"  # a failed CUDA API call (host side; never located in the kernel)

BARRIER_FUNCTIONS = frozenset({"__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or"})

Dim3 = tuple[int, int, int]


@dataclass(frozen=True)
class Location:
    file: str  # basename only
    line: int


@dataclass(frozen=True)
class Access:
    """One side of a hazard: what was done where (innermost frame first) and by which thread."""

    op: str | None  # "read", "write", "atomic"; None for barriers and device errors
    frames: tuple[Location, ...] = ()
    thread: Dim3 | None = None
    hazards: int | None = None  # racecheck analysis: "[N hazards]" of this pair


@dataclass
class Hazard:
    kind: str
    tool: str
    severity: str = "error"  # "error", "warning" or "info" (racecheck severities; others are errors)
    accesses: list[Access] = field(default_factory=list)
    block: Dim3 | None = None
    thread: Dim3 | None = None
    memory: str | None = None  # "global", "shared", "local", ...
    size: int | None = None  # bytes of the faulting access
    address: int | None = None  # faulting address (memcheck) or shared-memory offset (racecheck hazard)
    allocation: tuple[int, int] | None = None  # nearest allocation (base address, size in bytes)
    distance: int | None = None  # bytes after (positive) or before (negative) the nearest allocation
    hazard_type: str | None = None  # "RAW", "WAR", "WAW" (racecheck hazard reports)
    scope: str | None = None  # "block" or "warp" for divergent barriers

    def lines(self, student_file: str = STUDENT_FILE) -> tuple[int, ...]:
        """Lines of the student's file in this hazard, each access's innermost such frame, in order."""
        found = []
        for access in self.accesses:
            line = _first_line(access, student_file)
            if line is not None:
                found.append(line)
        return tuple(found)


@dataclass
class SanitizerReport:
    tool: str
    hazards: list[Hazard] = field(default_factory=list)
    error_count: int | None = None  # from the summary line(s); None when there was none
    warning_count: int | None = None  # racecheck only
    complete: bool = False  # a summary line was found and the tool did not lose track of a launch
    target_failed: bool = False  # the tool said the checked program ended with an error


# --- parsing ------------------------------------------------------------------------------------------

_PREFIX = re.compile(r"^={3,}")
_NUMBER = r"\d[\d,]{0,24}(?![\d,])"  # bounded: longer numbers are not read
_DIM3 = r"\(\s*(\d{1,10})\s*,\s*(\d{1,10})\s*,\s*(\d{1,10})\s*\)"
_SEVERITY = r"(?:(?P<sev>[A-Za-z]+)\s*:\s*)"

_ERROR_SUMMARY = re.compile(rf"^ERROR SUMMARY:\s*(?P<n>{_NUMBER}) errors?\b")
_RACE_SUMMARY = re.compile(
    rf"^RACECHECK SUMMARY:\s*(?P<h>{_NUMBER}) hazards? displayed\s*"
    rf"\(\s*(?P<e>{_NUMBER}) errors?,\s*(?P<w>{_NUMBER}) warnings?\s*\)")
_INTERNAL_ERROR = re.compile(r"Internal Sanitizer Error|didn't track the launch|Errors might go undetected")
_TARGET_FAILED = re.compile(r"process didn't terminate successfully|Target application returned an error")

_MEMCHECK = re.compile(
    rf"^{_SEVERITY}?(?:Potential\s+)?[Ii]nvalid (?P<space>__\w+?__|\w+) (?P<op>read|write|atomic)\w*"
    rf"(?: of size (?P<size>{_NUMBER}))?")
_RACE = re.compile(rf"^{_SEVERITY}?Race reported between (?P<rest>.*)$")
_RACE_AND = re.compile(r"^and (?P<rest>(?:Read|Write) access at .*)$")
_RACE_SIDE = re.compile(r"^(?P<op>Read|Write) access at (?P<loc>.*)$")
_HAZARD_COUNT = re.compile(rf"\[(?P<n>{_NUMBER}) hazards?\]\s*$")
_HAZARD = re.compile(
    rf"^{_SEVERITY}?(?:\((?P<note>[^)]*)\)\s*)?Potential (?P<type>RAW|WAR|WAW) hazard detected at "
    rf"(?P<space>__\w+?__|\w+) (?P<addr>0x[0-9A-Fa-f]{{1,32}}) in block {_DIM3}")
_HAZARD_THREAD = re.compile(rf"^(?P<op>Read|Write) Thread {_DIM3} at (?P<loc>.*)$")
_BARRIER = re.compile(r"^(?:[A-Za-z]+:\s*)?Barrier error(?: detected)?\s*[.:]?\s*(?P<what>.*)$")
_API = re.compile(r"^Program hit \w+")

_AT = re.compile(r"^at\s+(?P<rest>.*)$")
_DEVICE_FRAME = re.compile(r"^Device Frame\s*:\s*(?P<rest>.*)$")
_IN_LINE = re.compile(rf"^in\s+(?P<path>\S+):(?P<line>\d{{1,9}})(?:\s*\[(?P<n>{_NUMBER}) hazards?\])?\s*$")
_BY_THREAD = re.compile(rf"^by thread {_DIM3} in block {_DIM3}")
_ADDRESS = re.compile(r"^(?:Address|Access to)\s+(?P<addr>0x[0-9A-Fa-f]{1,32})(?:\s+is\s+(?P<what>.*))?$")
_ALLOCATION = re.compile(
    rf"^and is (?:(?P<d>{_NUMBER}) bytes? (?P<rel>after|before)|(?P<inside>inside)) the nearest allocation "
    rf"at (?P<base>0x[0-9A-Fa-f]{{1,32}}) of size (?P<size>{_NUMBER}) bytes?")
# Lines that continue a record (anything else starts a new one).
_CONTINUATION = re.compile(r"^(?:at\s|in\s|and\s|by thread\s|Address\s|Access to\s|Device Frame|Host Frame|"
                           r"(?:Read|Write) Thread\s|Saved host backtrace|Current Value|Sync mask|\(|\[\.\.\.\])")
# ` in <path>:<line>` inside a location; the path has no spaces (Windows drive letters allowed).
_LOCATION = re.compile(r"(?:^|\s)in\s+(?P<path>(?:[A-Za-z]:[\\/])?[^\s:\[\]]+):(?P<line>\d{1,9})(?=$|[\s:\[])")


def parse(tool: str, text: str, prefix: str | None = None) -> SanitizerReport:
    """Parse the text output of one compute-sanitizer run of `tool` (see the module docstring).

    prefix: the tool's line prefix when --prefix was given; by default any run of three or more '='.
    Never trusts an exit code: `complete` says whether a summary line was seen.
    """
    if tool not in TOOLS:
        raise ValueError(f"unknown compute-sanitizer tool {tool!r}; expected one of {', '.join(TOOLS)}")
    report = SanitizerReport(tool)
    state = _State(report)
    error_summaries: list[int] = []  # one ERROR SUMMARY per checked process
    race_summaries: list[tuple[int, int]] = []  # (errors, warnings) of RACECHECK SUMMARY lines
    lost = False
    for raw in text.splitlines():
        body = _strip_prefix(raw, prefix)
        if body is None:
            continue  # the program's own output
        if not body:
            state.close()
        elif match := _ERROR_SUMMARY.match(body):
            error_summaries.append(_int(match.group("n")))
            state.close()
        elif match := _RACE_SUMMARY.match(body):
            race_summaries.append((_int(match.group("e")), _int(match.group("w"))))
            state.close()
        elif _INTERNAL_ERROR.search(body):
            lost = True
            state.close()
        elif _TARGET_FAILED.search(body):
            report.target_failed = True
            state.close()
        else:
            state.line(body)
    state.close()
    if error_summaries:
        report.error_count = sum(error_summaries)
    if race_summaries:
        report.error_count = max(report.error_count or 0, sum(e for e, _ in race_summaries))
        report.warning_count = sum(w for _, w in race_summaries)
    report.complete = bool(error_summaries or race_summaries) and not lost
    return report


def _strip_prefix(raw: str, prefix: str | None) -> str | None:
    if prefix is not None:
        return raw[len(prefix):].strip() if raw.startswith(prefix) else None
    match = _PREFIX.match(raw)
    return raw[match.end():].strip() if match else None


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _dim3(groups: Sequence[str]) -> Dim3:
    x, y, z = (int(g) for g in groups)
    return x, y, z


def _severity(word: str | None) -> str:
    word = (word or "error").lower()
    if word.startswith("warn"):
        return "warning"
    return "info" if word == "info" else "error"


def _frames(location_text: str) -> tuple[Location, ...]:
    """The file:line of one location text (empty without line information); basename only."""
    matches = list(_LOCATION.finditer(location_text))
    if not matches:
        return ()
    match = matches[-1]
    return (Location(_basename(match.group("path")), int(match.group("line"))),)


def _basename(path: str) -> str:
    return re.split(r"[\\/]", path)[-1]


def _first_line(access: Access, student_file: str) -> int | None:
    for frame in access.frames:
        if frame.file == student_file:
            return frame.line
    return None


class _State:
    """The record being read; continuation lines are attached to it."""

    def __init__(self, report: SanitizerReport) -> None:
        self.report = report
        self.hazard: Hazard | None = None
        self.pending: Hazard | None = None  # an unknown header, kept only if a location follows
        self.awaiting_file = False  # the last location line had no `in file:line` yet

    def close(self) -> None:
        self.hazard = self.pending = None
        self.awaiting_file = False

    def start(self, hazard: Hazard) -> Hazard:
        self.close()
        self.hazard = hazard
        self.report.hazards.append(hazard)
        return hazard

    def line(self, body: str) -> None:
        tool = self.report.tool
        if match := _MEMCHECK.match(body):
            space = match.group("space").strip("_")
            hazard = self.start(Hazard(INVALID_ACCESS, tool, _severity(match.group("sev")), memory=space,
                                       size=_int(match.group("size")) if match.group("size") else None))
            hazard.accesses.append(Access(match.group("op")))
            return
        if match := _HAZARD.match(body):
            self.start(Hazard(RACE, tool, _severity(match.group("sev")), block=_dim3(match.groups()[-3:]),
                              memory=match.group("space").strip("_"), address=int(match.group("addr"), 16),
                              hazard_type=match.group("type")))
            return
        if match := _RACE.match(body):
            hazard = self.start(Hazard(RACE, tool, _severity(match.group("sev")), memory="shared"))
            for side in re.split(r"\sand\s(?=\s*(?:Read|Write) access at )", match.group("rest")):
                self._race_side(hazard, side)
            return
        if match := _BARRIER.match(body):
            what = match.group("what").lower()
            if "divergent" in what:
                hazard = Hazard(DIVERGENT_BARRIER, tool, scope="warp" if "warp" in what else "block")
            elif "invalid argument" in what:
                hazard = Hazard(INVALID_BARRIER, tool)
            else:
                hazard = Hazard(BARRIER_ERROR, tool)
            self.start(hazard).accesses.append(Access(None))
            return
        if _API.match(body):
            self.start(Hazard(API_ERROR, tool))
            self.hazard = None  # nothing located follows
            return
        if _CONTINUATION.match(body):
            hazard = self.hazard or self.pending
            if hazard is not None:
                self._continuation(hazard, body)
            return
        # An unknown header (a hardware exception, a note): kept only if a location follows.
        self.close()
        self.pending = Hazard(DEVICE_ERROR, tool)
        self.pending.accesses.append(Access(None))

    def _race_side(self, hazard: Hazard, side: str) -> None:
        match = _RACE_SIDE.match(side.strip())
        if match is None:
            return
        location, hazards = match.group("loc"), None
        if count := _HAZARD_COUNT.search(location):
            location, hazards = location[:count.start()], _int(count.group("n"))
        frames = _frames(location)
        hazard.accesses.append(Access(match.group("op").lower(), frames, hazards=hazards))
        self.awaiting_file = not frames

    def _continuation(self, hazard: Hazard, body: str) -> None:
        if match := _AT.match(body):
            frames = _frames(body)
            if hazard is self.pending:
                if not frames and not re.search(r"\+0x[0-9A-Fa-f]{1,32}|0x[0-9A-Fa-f]{1,32}", body):
                    self.pending = None  # not a location after all
                    return
                self.report.hazards.append(hazard)
                self.hazard, self.pending = hazard, None
            self._set_location(hazard, frames)
            return
        if (match := _IN_LINE.match(body)) and self.awaiting_file:
            self._set_location(hazard, (Location(_basename(match.group("path")), int(match.group("line"))),),
                               append=True)
            if match.group("n") and hazard.accesses[-1].hazards is None:
                hazard.accesses[-1] = replace(hazard.accesses[-1], hazards=_int(match.group("n")))
            return
        if match := _DEVICE_FRAME.match(body):
            self._set_location(hazard, _frames(match.group("rest")), append=True)
            return
        if match := _RACE_AND.match(body):
            self._race_side(hazard, match.group("rest"))
            return
        if match := _HAZARD_THREAD.match(body):
            frames = _frames(match.group("loc"))
            hazard.accesses.append(Access(match.group("op").lower(), frames, _dim3(match.groups()[1:4])))
            self.awaiting_file = not frames
            return
        if match := _BY_THREAD.match(body):
            hazard.thread = _dim3(match.groups()[0:3])
            hazard.block = _dim3(match.groups()[3:6])
            if hazard.accesses:
                hazard.accesses[0] = replace(hazard.accesses[0], thread=hazard.thread)
            return
        if match := _ADDRESS.match(body):
            hazard.address = int(match.group("addr"), 16)
            what = (match.group("what") or "").lower()
            if hazard.kind == INVALID_ACCESS:
                if what.startswith("out of bounds"):
                    hazard.kind = OUT_OF_BOUNDS
                elif what.startswith("misaligned"):
                    hazard.kind = MISALIGNED
            return
        if match := _ALLOCATION.match(body):
            hazard.allocation = (int(match.group("base"), 16), _int(match.group("size")))
            if match.group("inside"):
                hazard.distance = 0
            else:
                distance = _int(match.group("d"))
                hazard.distance = distance if match.group("rel") == "after" else -distance
            return
        self.awaiting_file = False  # host frames, values, notes: not needed

    def _set_location(self, hazard: Hazard, frames: tuple[Location, ...], append: bool = False) -> None:
        """Set (or, with append, extend by outer frames) the frames of the hazard's last access."""
        if not hazard.accesses:
            hazard.accesses.append(Access(None))
        access = hazard.accesses[-1]
        hazard.accesses[-1] = replace(access, frames=access.frames + frames if append else frames)
        self.awaiting_file = not frames


# --- student sentences ---------------------------------------------------------------------------------


def describe(report: SanitizerReport, buffers: Mapping[str, tuple[int, int]] | None = None, *,
             student_file: str = STUDENT_FILE, barrier_lines: Sequence[int] | None = None,
             limit: int = MAX_SENTENCES, shape: tuple[int, int, int] | None = None) -> list[str]:
    """Student sentences for the report's hazards: only lines of student_file, one sentence per
    (kind, access, memory, lines), errors before warnings, at most `limit` (plus one saying how many
    more there were).

    buffers: name -> (device address, size in bytes) of the kernel's arguments, to name the buffer an
    out-of-bounds address belongs to ("A", "B", "C"); without it, "global memory".
    barrier_lines: lines of the __syncthreads() calls in the student's source (see syncthreads_lines());
    with them a race says which of the two tile-loop barriers is missing even when the store comes
    before the read in the loop body, where line order alone cannot tell.
    shape: the launch's (m, n, k), to place an access past A's or B's end in its rows and columns.
    """
    sentences: dict[tuple, str] = {}
    ordered = sorted(report.hazards, key=lambda h: h.severity != "error")
    for hazard in ordered:
        for key, sentence in _sentences(hazard, buffers, student_file, barrier_lines, shape):
            sentences.setdefault(key, sentence)
    result = list(sentences.values())
    if len(result) > limit:
        more = len(result) - limit
        result = [*result[:limit], f"... and {more} more not shown"]
    if not result and report.error_count:
        count = report.error_count
        result.append(f"compute-sanitizer {report.tool} found {count} error{'s' if count != 1 else ''}, "
                      f"but none of them points at a line of {student_file}")
    if not report.complete:
        result.append(f"the {report.tool} run did not complete, so it may have missed problems")
    return result


def syncthreads_lines(source: str) -> list[int]:
    """Lines of live __syncthreads()-family calls in a CUDA source (directly or through a macro),
    comments, strings and `#if 0` groups excluded."""
    from grader.source import cuda_syntax as cs

    root = cs.parse(source).root_node
    macros = cs.macros_mentioning(cs.macro_definitions(root), BARRIER_FUNCTIONS)
    names = BARRIER_FUNCTIONS | macros
    lines = set()
    for node in cs.iter_live(root):
        if node.type == "call_expression" and cs.text(node.child_by_field_name("function")) in names:
            lines.add(cs.line(node))
    return sorted(lines)


def _sentences(hazard: Hazard, buffers, student_file: str, barriers, shape=None) -> list[tuple[tuple, str]]:
    if hazard.kind == RACE:
        return _race_sentences(hazard, student_file, barriers)
    if hazard.kind in (OUT_OF_BOUNDS, MISALIGNED, INVALID_ACCESS):
        return _access_sentence(hazard, buffers, student_file, shape)
    if hazard.kind in (DIVERGENT_BARRIER, INVALID_BARRIER, BARRIER_ERROR, DEVICE_ERROR):
        return _located_sentence(hazard, student_file, barriers)
    return []


def _block(block: Dim3 | None) -> str:
    if block is None:
        return ""
    x, y, z = block
    return f" in block ({x}, {y})" if z == 0 else f" in block ({x}, {y}, {z})"


def _race_sentences(hazard: Hazard, student_file: str, barriers) -> list[tuple[tuple, str]]:
    sides = [(a.op, _first_line(a, student_file)) for a in hazard.accesses]
    sides = [(op, line) for op, line in sides if line is not None and op in ("read", "write")]
    if not sides:
        return []
    first, others = sides[0], sides[1:]
    if not others:
        op, line = first
        what = "store" if op == "write" else "read"
        text = f"shared-memory race involving the {what} at line {line}: a __syncthreads() is missing"
        return [((RACE, op, (line,)), text)]
    result = []
    for other in others:
        if "write" not in (first[0], other[0]):
            continue  # two reads do not race; the report pairs its first line with each other one
        pair = sorted([first, other], key=lambda side: (side[0] != "write", side[1]))
        (_, line1), (op2, line2) = pair
        if op2 == "write":  # two stores
            key = (RACE, "write-write", tuple(sorted({line1, line2})))
            if line1 == line2:
                text = (f"shared-memory race at line {line1}: several threads of a block store to the same "
                        "shared-memory element (check the tile indices)")
            else:
                low, high = sorted((line1, line2))
                text = (f"shared-memory race between the stores at lines {low} and {high}: "
                        "a __syncthreads() is missing between them, or two threads store to the same element")
        else:
            key = (RACE, "write-read", (line1, line2))
            text = _store_read_sentence(line1, line2, barriers)
        result.append((key, text))
    return result


def _store_read_sentence(store: int, read: int, barriers) -> str:
    """The sentence for a race between a shared-memory store and read, with the missing barrier.

    In the tile loop the store (loading a tile) and the read (using it) race across the barrier after
    loading (same phase) or across the barrier after using (the next phase's store overwrites a tile
    others still read). When the store's line comes after the read's, the store is the next phase's
    load, so the barrier after using is missing. When it comes before, both are possible: the barrier
    lines decide (a barrier between them means the one after using is missing).
    """
    if store == read:
        return (f"shared-memory race at line {read}: the same statement stores and reads shared memory "
                "that other threads use; a __syncthreads() is missing")
    low, high = sorted((store, read))
    between = None if barriers is None else any(low < b < high for b in barriers)
    if store < read:
        base = f"shared-memory race between the store at line {store} and the read at line {read}"
        if between is False:
            return f"{base}: a __syncthreads() is missing between them (the barrier after loading the tiles)"
        if between:
            return (f"{base}: a __syncthreads() is missing after the read, before the next tile is stored "
                    "(the barrier after using the tiles)")
        return (f"{base}: a __syncthreads() is missing between them (after loading the tiles) or after the "
                "read, before the next tile is stored (after using the tiles)")
    base = f"shared-memory race between the read at line {read} and the store at line {store}"
    if between:
        return (f"{base}: a __syncthreads() is missing after the store, before the tile is read "
                "(the barrier after loading the tiles)")
    return f"{base}: a __syncthreads() is missing between them (the barrier after using the tiles)"


def _access_sentence(hazard: Hazard, buffers, student_file: str, shape=None) -> list[tuple[tuple, str]]:
    lines = hazard.lines(student_file)
    if not lines:
        return []
    op = hazard.accesses[0].op if hazard.accesses else None
    name = _buffer_of(hazard, buffers)
    target = name or {"global": "global memory", "shared": "shared memory",
                      "local": "local memory"}.get(hazard.memory or "", "memory")
    action = {"read": "read of", "write": "write to", "atomic": "atomic operation on"}.get(op or "", "access to")
    adjective = {OUT_OF_BOUNDS: "out-of-bounds", MISALIGNED: "misaligned"}.get(hazard.kind, "invalid")
    text = f"{adjective} {action} {target} at line {lines[0]}{_block(hazard.block)}"
    detail = _offset_detail(hazard, name, buffers, shape)
    if detail:
        text = f"{text}: {detail}"
    return [((hazard.kind, op, target, lines), text)]


def _buffer_of(hazard: Hazard, buffers: Mapping[str, tuple[int, int]] | None) -> str | None:
    """The buffer an invalid global address belongs to: the one containing it, else the one the
    sanitizer's nearest allocation is (or overlaps)."""
    if not buffers or hazard.memory != "global" or hazard.address is None:
        return None
    address = hazard.address
    for name, (base, size) in buffers.items():
        if base <= address < base + size:
            return name
    if hazard.allocation is not None:
        alloc_base, alloc_size = hazard.allocation
        for name, (base, _size) in buffers.items():
            if base == alloc_base:
                return name
        for name, (base, size) in buffers.items():
            if base < alloc_base + alloc_size and alloc_base < base + size:
                return name
    return None


# An input's rows and columns of (m, n, k), and the names of its row and column index.
INPUT_LAYOUTS = {"A": (("m", "k"), ("row", "k")), "B": (("k", "n"), ("k", "col"))}


def _offset_detail(hazard: Hazard, name: str | None, buffers, shape=None) -> str | None:
    if name is None or hazard.kind != OUT_OF_BOUNDS or hazard.address is None:
        return None
    base, size = buffers[name]
    if hazard.address >= base + size:
        past = hazard.address - (base + size)
        where = f"right after the end of {name}" if past == 0 else f"{past} bytes after the end of {name}"
        return where + _element_past_end(name, size, past, shape)
    if hazard.address < base:
        return f"{base - hazard.address} bytes before the start of {name}"
    return None


def _element_past_end(name: str, size: int, past: int, shape) -> str:
    """Where an access past A's or B's end would be in its rows: "B[k=20][col=16] (element 416): B is k×n =
    20×20, row stride n = 20". Said only where the buffer is exactly the input (4-byte floats, rows×columns)."""
    if shape is None or name not in INPUT_LAYOUTS:
        return ""
    sizes = dict(zip("mnk", shape))
    (rows_name, columns_name), (row_index, column_index) = INPUT_LAYOUTS[name]
    rows, columns = sizes[rows_name], sizes[columns_name]
    if columns <= 0 or size != rows * columns * 4:
        return ""
    element = rows * columns + past // 4
    return (f", {name}[{row_index}={element // columns}][{column_index}={element % columns}] (element {element}): "
            f"{name} is {rows_name}×{columns_name} = {rows}×{columns}, row stride {columns_name} = {columns}")


def _located_sentence(hazard: Hazard, student_file: str, barriers) -> list[tuple[tuple, str]]:
    frames = [f.line for a in hazard.accesses for f in a.frames if f.file == student_file]
    if not frames:
        return []
    line, callers = frames[0], frames[1:]
    where = f"line {line}" + (f" (called from line {callers[0]})" if callers else "")
    block = _block(hazard.block)
    if hazard.kind == DEVICE_ERROR:
        return [((hazard.kind, tuple(frames)), f"the kernel stopped with a device error at {where}{block}")]
    barrier = "__syncthreads()" if barriers is None or line in barriers else "the barrier"
    if hazard.kind == DIVERGENT_BARRIER:
        if hazard.scope == "warp":
            group = f"a warp{block}" if block else "a warp"
        else:
            group = f"block{block[len(' in block'):]}" if block else "a block"
        text = f"{barrier} at {where} is reached by only some threads of {group} (divergent barrier)"
        return [((hazard.kind, hazard.scope, tuple(frames)), text)]
    if hazard.kind == INVALID_BARRIER:
        return [((hazard.kind, tuple(frames)), f"the barrier at {where} is called with invalid arguments{block}")]
    return [((hazard.kind, tuple(frames)), f"barrier error at {where}{block}")]
