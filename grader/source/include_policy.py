"""Which preprocessor (and assembler) features a submission may use: nothing that can open a file
the student could not read anyway.

nvcc runs the host compiler's preprocessor over kernel.cu before anything else; an `#include` of any file
would make it open that file on the grading machine, and its compile errors would quote that file's lines
back to the student. So a header is allowed by where it resolves, not by a list: `#include <name>` or
`#include "name"` is accepted when the name resolves, as the compiler searches, inside the CUDA toolkit's
include folders or the C/C++ compiler's system folders (public files: reading them leaks nothing; asked
of the compilers once per process, include_folders()), or when it is a file the lab lets a student hand in
beside kernel.cu (config `compile.handed_in_headers`, quoted only). A header the CUDA toolkit ships (its
own or one of its libraries', cuBLAS, cuRAND, NVTX...: toolkit_headers.py) is also accepted by its name where
no folder here holds it: its package is not installed on this machine, or no toolkit is, and the verdict must
not depend on that (where found, it must resolve inside those folders as any other). `compile.allowed_headers`,
when set, narrows the toolkit and system headers to those names. Everything else that can make a tool open a
file is refused before the compiler sees the source:

- absolute paths, `..` components, backslashes and unusual characters in header names, a name that
  resolves nowhere or outside those folders (through a link, say), and `#include MACRO` (a computed
  include: the macro could name any file);
- `#include_next`, `#import`, `#embed` and every directive not in `_ALLOWED_DIRECTIVES`;
- `__has_include`, `__has_include_next`, `__has_embed` anywhere (they probe files on the grading machine);
- the file-opening pragmas (`#pragma GCC dependency`, `GCC pch_preprocess`, MSVC `include_alias` and
  `comment`, any unknown `#pragma GCC ...`), `_Pragma` with anything but a plain string, `__pragma`;
- inline assembly whose text is not a plain string literal, or whose text uses `.incbin`, `.include` or
  the assembler's macro features (which could assemble those directives from pieces);
- token pasting (`##`, `%:%:`) that assembles `_Pragma`, `__pragma`, `asm`, `__has_include` or `import`
  (ASSEMBLED) from harmless-looking pieces. A paste is accepted from the text where a written-out operand
  holds text no such name contains (`num##M##Columns`, `ld_##M`: the token made contains it), or where it is
  written out entirely and spells none; one of macro arguments (`a ## b`) is PASTE, judged by what the file's
  macros expand to (execute/macros.py expands pastes_shown's text in the sandbox; pasted_violations reads
  it); and no `#if`/`#elif` may use a macro that holds such a paste (a pasted `__has_include` would probe a
  file there and leave no expanded text);
- C++20 header-unit imports (`import <x>;`).

Strictness: directives are looked for everywhere, including inside `#if 0` groups; a `#` counts as
the start of a directive whenever only white space and comments precede it on its line. The source is
read the way the preprocessor reads it: `\\r` and `\\r\\n` are line ends, a backslash followed by a
line end joins lines (also with spaces in between, as GCC accepts), `%:` is `#`, comments and string
literals (raw strings too) hide what they contain. Where compilers and language versions differ
(trigraphs such as `??=`, a backslash followed by spaces before the line end, digit separators as in
`1'000`, raw string literals, which C++03 does not have) every reading is checked and any violation
counts. Each violation is reported once per line.
Comments and string literals never cause a violation: `// #include "x"` and `puts("#include")` are fine.

`#line` directives that name a file (or whose operands come from a macro) are refused by
line_directive_violations(): they would make the compiler and the sanitizer attribute errors to another
file name. `#line N` alone only renumbers the student's own lines and is allowed.

No file is ever opened here (a header is only looked up with stat): a violation holds the line number,
the student's own text of the offending line (control characters escaped, shortened) and the reason.
"""
from __future__ import annotations

import bisect
import functools
import os
import re
import shutil
import subprocess
import unicodedata
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from ..ahead import Ahead
from ..leftovers import QUERY, owned_scratch
from .toolkit_headers import is_toolkit_header

# The headers allowed by name where no CUDA toolkit can be asked where its headers are (a CPU-only machine
# without nvcc), besides what the C++ compiler's folders hold: the toolkit's names a lab uses, which the
# emulator's shims provide, and the standard ones.
DEFAULT_ALLOWED_HEADERS: tuple[str, ...] = (
    "cuda_runtime.h",
    "cuda.h",
    "device_launch_parameters.h",
    "cuda_fp16.h",
    "cooperative_groups.h",  # the CPU emulator has its own (grader/execute/cpu/include)
    "math.h",
    "cmath",
    "stdio.h",
    "cstdio",
    "stdlib.h",
    "cstdlib",
    "stdint.h",
    "cstdint",
    "float.h",
    "cfloat",
    "assert.h",
    "cassert",
    "limits.h",
    "climits",
    # Standard headers a host wrapper or test driver uses: the compiler's own, no file of the machine's.
    "string.h",
    "cstring",
    "time.h",
    "ctime",
    "iostream",
    "vector",
    "algorithm",
    "chrono",
    "cuda_runtime_api.h",
    "device_functions.h",
    "cooperative_groups.h",
)

MAX_DESCRIBED = 10  # describe() lists at most this many violations
MAX_DIRECTIVE_CHARS = 100  # longer offending lines are shortened in violations

# Violation kinds (IncludeViolation.kind).
INCLUDE = "include"  # an #include-like directive or a header probe
DIRECTIVE = "directive"  # a directive this lab does not allow
PRAGMA = "pragma"
ASSEMBLY = "asm"
PASTE = "paste"
LINE = "line"

_ALLOWED_DIRECTIVES = frozenset({
    "define", "undef", "if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif",
    "error", "warning", "pragma", "include", "line",
})
_INCLUDE_LIKE = frozenset({"include", "include_next", "import", "embed"})
_HEADER_PROBES = frozenset({"__has_include", "__has_include_next", "__has_embed"})
_ASM_KEYWORDS = frozenset({"asm", "__asm", "__asm__"})
_ASM_QUALIFIERS = frozenset({"volatile", "__volatile", "__volatile__", "inline", "__inline", "__inline__", "goto"})
_RAW_PREFIXES = frozenset({"R", "LR", "uR", "UR", "u8R"})
# Pragmas that open files (GCC, MSVC), by their first word.
_FILE_PRAGMAS = frozenset({"include_alias", "comment", "dependency", "pch_preprocess"})
# `#pragma GCC <word>` is refused unless <word> is one of these (GCC has several file-related ones).
_SAFE_GCC_PRAGMAS = frozenset({
    "diagnostic", "unroll", "ivdep", "novector", "optimize", "push_options", "pop_options",
    "reset_options", "target", "visibility", "poison", "system_header", "warning", "error",
})
# Inside inline assembly text: directives that read files, and macro features that could spell them.
_ASM_FORBIDDEN = re.compile(r"incbin|\.include\b|\.macro\b|\.irpc?\b|\.altmacro\b", re.IGNORECASE)


@dataclass(frozen=True)
class IncludeViolation:
    line: int  # 1-based line of the student's file
    directive: str  # the student's own text of that (logical) line, never anything of another file
    reason: str  # why it is refused, for the student
    kind: str = INCLUDE  # INCLUDE, DIRECTIVE, PRAGMA, ASSEMBLY, PASTE or LINE


@dataclass(frozen=True)
class HeaderPolicy:
    """Where an included header may resolve, and what else may be included."""

    folders: tuple[str, ...] = ()  # the toolkit's and the compilers' include folders, in search order
    only: frozenset[str] | None = None  # config allowed_headers: when set, only these of those folders' headers
    handed_in: frozenset[str] = frozenset()  # files a student hands in beside kernel.cu ("name" only)
    toolkit: bool = True  # whether folders hold the CUDA toolkit's; if not, `fallback` names its headers
    fallback: frozenset[str] = frozenset(DEFAULT_ALLOWED_HEADERS)

    def __post_init__(self) -> None:
        # A header may resolve anywhere under a folder's real path, and only there (never through a link out).
        object.__setattr__(self, "_roots", tuple(os.path.realpath(f) for f in self.folders))

    def problem(self, name: str, quoted: bool) -> str | None:
        """Why `name` may not be included, or None."""
        spelled = f'"{name}"' if quoted else f"<{name}>"
        if quoted and name in self.handed_in:
            return None
        if self.only is not None and name not in self.only:
            return f"{spelled} is not one of the headers this lab allows"
        if not self.toolkit and name in self.fallback:
            return None
        found = self.found(name)
        if found is not None:
            real = os.path.realpath(found)
            if any(real.startswith(root + os.sep) for root in self._roots):
                return None
            return f"{spelled} leads outside the CUDA toolkit's and the compiler's include folders"
        if is_toolkit_header(name):
            return None  # the toolkit's name, where its package is not installed: nothing here to read
        if not self.folders:
            return f"{spelled} is not one of the headers this lab allows"
        handed = ", ".join(f'"{h}"' for h in sorted(self.handed_in))
        also = f" or a file handed in with kernel.cu ({handed})" if handed else ""
        return f"{spelled} is not a header of the CUDA toolkit or the C/C++ compiler{also}"

    def found(self, name: str) -> str | None:
        """Where the compilers find `name` first (looked up with stat, never opened), or None."""
        candidates = (os.path.join(folder, name) for folder in self.folders)
        return next((candidate for candidate in candidates if os.path.isfile(candidate)), None)


def include_folders() -> tuple[str, ...]:
    """The folders nvcc searches for headers: the toolkit's (`nvcc --dryrun` names them), then the host
    compiler's system folders (`g++ -E -v`). Empty when neither compiler is here."""
    _FOLDERS.wait()
    return tuple(dict.fromkeys(toolkit_folders() + compiler_folders()))


def ask_folders_soon() -> None:
    """The compilers asked for their folders on a thread now (three compiler runs, 40-90 ms, that the static
    check waited for before any child started): a grade's start, its configuration and its sandbox's set-up go
    on meanwhile."""
    _FOLDERS.start()


@functools.cache
def toolkit_folders() -> tuple[str, ...]:
    nvcc = shutil.which("nvcc")
    found = _nvcc_folders(_ask([nvcc, "--dryrun", "-E", "-x", "cu", os.devnull])) if nvcc else []
    return tuple(f for f in found if os.path.isdir(f))


@functools.cache
def compiler_folders() -> tuple[str, ...]:
    """The system folders of the emulator's compiler ($CXX) and of nvcc's host compiler (g++ on PATH), both:
    a $CXX that cannot run is the grader's fault, reported when the emulator is built, and must not make
    <stdio.h> look like a header of no compiler here (a student's compile error)."""
    found: list[str] = []
    for cxx in dict.fromkeys(filter(None, (os.environ.get("CXX"), shutil.which("g++"), shutil.which("c++")))):
        found += _cxx_folders(_ask([cxx, "-xc++", "-E", "-v", os.devnull]))
    return tuple(f for f in dict.fromkeys(found) if os.path.isdir(f))


_FOLDERS = Ahead("include-folders", toolkit_folders, compiler_folders)


def forget_folders() -> None:
    """The compilers asked again when next needed (another PATH: a machine without nvcc); a question asked ahead
    and still running is let finish first, so that its answer is forgotten too, not kept afterwards."""
    _FOLDERS.wait()
    toolkit_folders.cache_clear()
    compiler_folders.cache_clear()


def _ask(command: list[str]) -> str:
    """A compiler's answer. Its temporary files (`nvcc --dryrun -E` does preprocess) go to a folder of this
    process's own: a Ctrl-C or kill -9 mid-question leaves them where the next sweep clears them."""
    with owned_scratch(QUERY) as scratch:
        try:
            finished = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                                      stdin=subprocess.DEVNULL,
                                      env={**os.environ, "LC_ALL": "C", "TMPDIR": str(scratch)})
        except (OSError, subprocess.TimeoutExpired):
            return ""
    return finished.stdout + finished.stderr


def _nvcc_folders(dryrun: str) -> list[str]:
    """The -I and -isystem folders of nvcc's INCLUDES and SYSTEM_INCLUDES (its nvcc.profile's)."""
    folders = []
    for line in dryrun.splitlines():
        if re.match(r"#\$ (?:SYSTEM_)?INCLUDES=", line):
            folders += [a or b for a, b in re.findall(r'"-I([^"]+)"|"-isystem"\s+"([^"]+)"', line)]
    return [os.path.normpath(f) for f in folders]


def _cxx_folders(verbose: str) -> list[str]:
    """The `#include <...> search starts here:` list of `g++ -E -v`."""
    match = re.search(r"#include <\.\.\.> search starts here:\n(.*?)\nEnd of search list", verbose, re.DOTALL)
    if not match:
        return []
    return [os.path.normpath(line.strip()) for line in match.group(1).splitlines()
            if line.strip() and not line.strip().endswith("(framework directory)")]


def header_policy(allowed: Sequence[str] | None = None, handed_in: Sequence[str] = ()) -> HeaderPolicy:
    """The policy of a lab: headers by where this machine's compilers find them."""
    folders = include_folders()  # first: it waits for the folders asked ahead
    return HeaderPolicy(folders, None if allowed is None else frozenset(allowed), frozenset(handed_in),
                        toolkit=bool(toolkit_folders()))


def missing_here(headers: Iterable[str]) -> list[str]:
    """Those of the headers (the toolkit's: the policy accepts nothing else that no folder holds) that this
    machine's compilers do not find: their package is not installed here."""
    policy = header_policy()
    return sorted(name for name in headers if policy.found(name) is None)


# --- public API -----------------------------------------------------------------------------------


def check_includes(source: str, allowed: Sequence[str] | None = None, handed_in: Sequence[str] = (),
                   policy: HeaderPolicy | None = None, pasting: frozenset[str] | None = None) -> list[IncludeViolation]:
    """Everything in source that could make the preprocessor, compiler or assembler open a file it may not,
    except #line (see line_directive_violations). Empty when the source is acceptable. `pasting`: the macros
    of every file compiled with it that no #if may use (unproven_pasting_macros); None: this file's."""
    policy = policy or header_policy(allowed, handed_in)
    return _collect(source, lambda reading: _include_findings(reading, policy, pasting))


def line_directive_violations(source: str) -> list[IncludeViolation]:
    """#line directives (and GCC's `# 12 "file"` line markers) that name a file or take macro operands."""
    return _collect(source, _line_findings)


def check_source(source: str, allowed: Sequence[str] | None = None, handed_in: Sequence[str] = (),
                 policy: HeaderPolicy | None = None, pasting: frozenset[str] | None = None) -> list[IncludeViolation]:
    """Both checks, in line order: what the grader runs before compiling a submission."""
    found = check_includes(source, allowed, handed_in, policy, pasting) + line_directive_violations(source)
    return sorted(found, key=lambda v: v.line)


def describe(violations: Sequence[IncludeViolation], allowed: Sequence[str] | None = None,
             handed_in: Sequence[str] = ()) -> str:
    """A student-facing message, one line per violation, then what may be included where it matters."""
    if not violations:
        return ""
    lines = [("kernel.cu is not compiled: these lines could make the compiler read other files "
              "on the grading machine.")]
    for violation in violations[:MAX_DESCRIBED]:
        lines.append(f"line {violation.line}: {violation.directive} is not allowed: {violation.reason}")
    if len(violations) > MAX_DESCRIBED:
        lines.append(f"... and {len(violations) - MAX_DESCRIBED} more")
    if any(v.kind == INCLUDE for v in violations):
        lines.append(_what_may_be_included(allowed, handed_in))
    return "\n".join(lines)


def needs_expansion(violations: Sequence[IncludeViolation]) -> bool:
    """Whether every violation is a paste the text alone cannot judge (PASTE): what the file's macros expand
    to decides (pastes_shown, pasted_violations)."""
    return bool(violations) and all(v.kind == PASTE for v in violations)


ARCH_DEPENDENT = ("token pasting (##) here joins macro arguments with nothing written out that rules out names "
                  "such as asm or _Pragma, in files that test __CUDA_ARCH__: what it makes depends on the GPU, so "
                  "it cannot be checked once")


def arch_dependent(sources: Iterable[str]) -> bool:
    """Whether what the files' macros expand to may differ by GPU (the expansion is made for one)."""
    return any("__CUDA_ARCH" in source for source in sources)


def shown_pastes_header(tag: str) -> str:
    """What a preprocessor is given first (-include) for pastes_shown's text: the macro that shows a paste."""
    return f"#define {tag}_SHOW(file, line, ...) {tag}_MADE(file, line, #__VA_ARGS__) __VA_ARGS__\n"


def pastes_shown(source: str, file: int, tag: str) -> str:
    """The source with each paste a text alone cannot judge (PASTE) wrapped so that its expansion shows what it
    made: `a ## b` becomes `TAG_SHOW(file, line, a ## b)`, which expands to `TAG_MADE(file, line, "<the token
    pasted>")` before the pasted token, wherever and however often the macro is used (a `_Pragma` the
    preprocessor runs leaves no trace of its own in its output). Lines keep their numbers; `tag` is the
    grader's, unknown to the student, so no macro of theirs can hide it."""
    physical = source.replace("\r\n", "\n").replace("\r", "\n")
    reading = _Reading(physical, *_readings(physical)[0])  # GCC's, as both compilers read it
    scan = _Scan(reading)
    spans = sorted({paste.span for paste in _pastes(scan) if not paste.harmless and paste.kind == PASTE})
    out, position = [], 0
    for start, end in spans:
        first, last = reading.phys(start), reading.phys(end - 1) + 1
        out += [physical[position:first], f"{tag}_SHOW({file}, {reading.line_of(start)}, ",
                physical[first:last], ")"]
        position = last
    return "".join(out) + physical[position:]


def pasted_violations(expansions: Sequence[str], sources: Sequence[str],
                      tag: str) -> list[tuple[int, IncludeViolation]]:
    """What the pastes pastes_shown wrapped made, in each preprocessor's output: (file index, violation) for each
    line of a #define whose paste made a name of ASSEMBLED somewhere it was used, with the student's own line."""
    made = re.compile(rf'{tag}_MADE\s*\(\s*(\d+)\s*,\s*(\d+)\s*,\s*("(?:[^"\\\n]|\\.)*")\s*\)')
    found: dict[tuple[int, int], IncludeViolation] = {}
    for expansion in expansions:
        for match in made.finditer(expansion):
            file, line = int(match.group(1)), int(match.group(2))
            names = set(re.findall(r"[A-Za-z_$][\w$]*", _string_value(match.group(3)))) & ASSEMBLED
            if names and 0 <= file < len(sources) and (file, line) not in found:
                name = sorted(names)[0]
                found[(file, line)] = IncludeViolation(
                    line, _printable(_physical_line(sources[file], line)),
                    f"where this macro is used, token pasting (##) builds {name}, which is not allowed",
                    _kind_of(name))
    return [(file, violation) for (file, _), violation in sorted(found.items())]


def _kind_of(name: str) -> str:
    """The kind of violation a name of ASSEMBLED makes."""
    if name in _HEADER_PROBES or name == "import":
        return INCLUDE
    return PRAGMA if "pragma" in name.lower() else ASSEMBLY


def _physical_line(source: str, line: int) -> str:
    lines = source.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return lines[line - 1] if 0 < line <= len(lines) else ""


def _what_may_be_included(allowed: Sequence[str] | None, handed_in: Sequence[str]) -> str:
    if allowed is not None:
        names = ", ".join(f"<{h}>" for h in allowed) if allowed else "(none)"
        text = f"Only these headers may be included: {names}"
    else:
        text = ("Headers of the CUDA toolkit and of the C/C++ compiler may be included, by their names "
                "(#include <cuda_runtime.h>, #include <cstdio>), never by a path")
    if handed_in:
        text += "; and the files handed in with kernel.cu: " + ", ".join(f'"{h}"' for h in handed_in)
    return text


# --- reading the source as the preprocessor does ----------------------------------------------------

# A reading is (trigraphs, backslash-spaces-newline is a splice, digit separators as in 1'000, raw strings);
# (False, True, True, True) is how GCC, nvcc's host preprocessor, reads C++14 and later.
_TRIGRAPHS = {"=": "#", "/": "\\", "'": "^", "(": "[", ")": "]", "!": "|", "<": "{", ">": "}", "-": "~"}


class _Reading:
    """The source after translation phases 1-2 (trigraphs optional, line splicing), with a map back
    to offsets in the physical text (whose line ends are normalised to \\n)."""

    def __init__(self, physical: str, trigraphs: bool, space_splice: bool, separators: bool,
                 raw_strings: bool) -> None:
        self.physical = physical
        self.separators = separators
        self.raw_strings = raw_strings
        blank = r"[ \t\f\v]*" if space_splice else ""
        alternatives = []
        if trigraphs:
            alternatives.append(rf"\?\?/{blank}\n")
        alternatives.append(rf"\\{blank}\n")
        if trigraphs:
            alternatives.append(r"\?\?[=/'()!<>\-]")
        pattern = re.compile("|".join(alternatives))
        pieces: list[str] = []
        self._logical_starts: list[int] = []
        self._physical_starts: list[int] = []
        self._identity: list[bool] = []
        position = length = 0
        for match in pattern.finditer(physical):
            if match.start() > position:
                self._segment(length, position, True)
                pieces.append(physical[position:match.start()])
                length += match.start() - position
            token = match.group()
            if not token.endswith("\n"):  # a trigraph: three characters read as one
                self._segment(length, match.start(), False)
                pieces.append(_TRIGRAPHS[token[2]])
                length += 1
            position = match.end()
        if position < len(physical):
            self._segment(length, position, True)
            pieces.append(physical[position:])
            length += len(physical) - position
        self.text = "".join(pieces)
        self._newlines = [i for i, c in enumerate(physical) if c == "\n"]

    def _segment(self, logical: int, phys: int, identity: bool) -> None:
        self._logical_starts.append(logical)
        self._physical_starts.append(phys)
        self._identity.append(identity)

    def phys(self, logical: int) -> int:
        """Physical offset of a logical offset (the end of the text maps to the end)."""
        k = bisect.bisect_right(self._logical_starts, logical) - 1
        if k < 0:
            return logical
        return self._physical_starts[k] + (logical - self._logical_starts[k])

    def logical(self, phys: int) -> int:
        """The first logical offset whose physical offset is phys or later."""
        k = bisect.bisect_right(self._physical_starts, phys) - 1
        if k < 0:
            return 0
        start = self._logical_starts[k]
        end = self._logical_starts[k + 1] if k + 1 < len(self._logical_starts) else len(self.text)
        offset = phys - self._physical_starts[k]
        if not self._identity[k]:
            return start + (1 if offset > 0 else 0)
        return start + min(offset, end - start)

    def line_of(self, logical: int) -> int:
        return bisect.bisect_right(self._newlines, self.phys(logical) - 1) + 1

    def display(self, start: int, end: int) -> str:
        """The student's text from logical start to end, as written (continuations joined)."""
        raw = self.physical[self.phys(start):self.phys(end) if end < len(self.text) else len(self.physical)]
        raw = re.sub(r"(?:\\|\?\?/)[ \t\f\v]*\n", "", raw)
        return _printable(" ".join(raw.split("\n")).strip())


def _printable(text: str) -> str:
    """Text safe to show in a terminal or report: control, format (bidi, zero-width) and line-separator
    characters escaped, tabs as spaces, shortened to MAX_DIRECTIVE_CHARS."""
    out = []
    for char in text:
        code = ord(char)
        if char == "\t":
            out.append(" ")
        elif unicodedata.category(char) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(char)
    text = "".join(out)
    if len(text) > MAX_DIRECTIVE_CHARS:
        text = text[:MAX_DIRECTIVE_CHARS - 3] + "..."
    return text


# --- tokens -----------------------------------------------------------------------------------------

_TOKEN_PATTERN = r"""
      (?P<nl>\n)
    | (?P<ws>(?:[^\S\n]|[\ufeff\u200b])+)
    | (?P<comment>//[^\n]*)
    | (?P<number>\.?\d(?:[eEpP][+-]|SEPARATOR\w|\.)*)
    | (?P<ident>(?:[^\W\d]|\$|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})(?:\w|\$|\\u[0-9A-Fa-f]{4}|\\U[0-9A-Fa-f]{8})*)
    | (?P<string>"(?:\\[^\n]|[^"\\\n])*(?:"|(?=\n)|\Z))
    | (?P<char>'(?:\\[^\n]|[^'\\\n])*(?:'|(?=\n)|\Z))
    | (?P<punct>%:%:|%:|\#\#|\#|\S)
    """


@functools.cache
def _token(separators: bool) -> re.Pattern:
    """The tokens with or without C++14 digit separators, compiled when first read (each takes some 5 ms, and most
    files are read with separators alone: _readings)."""
    return re.compile(_TOKEN_PATTERN.replace("SEPARATOR", "'\\w|" if separators else ""), re.VERBOSE | re.DOTALL)


_HEADER_NAME = re.compile(r"<[^>\n]*>")
_RAW_DELIMITER = re.compile(r'([^ ()\\\t\v\f\n]{0,16})\(')


@dataclass
class _Token:
    kind: str  # nl, ws, comment, number, ident, string, char, punct, header, raw
    start: int  # logical offsets
    end: int
    text: str
    directive: int | None = None  # index into _Scan.directives when inside a directive


@dataclass
class _Directive:
    start: int  # logical offset of the '#'
    end: int  # logical offset of the line end
    tokens: list[_Token]  # significant tokens after the '#': name first


class _Scan:
    """Tokens and directives of one reading of the source."""

    def __init__(self, reading: _Reading) -> None:
        self.reading = reading
        self.tokens: list[_Token] = []
        self.directives: list[_Directive] = []
        # A /* with no */ after it is not a comment (the strict reading: what follows stays visible).
        self._last_close = reading.text.rfind("*/")
        self._unterminated: dict[str, int] = {}  # raw-string terminator -> physical offset it is absent after
        self._lex()
        self.line_ends = [t.start for t in self.tokens if t.kind == "nl"]

    def _lex(self) -> None:
        text, reading = self.reading.text, self.reading
        position, line_start = 0, True
        directive: _Directive | None = None
        expect_header = False  # after #include-like names and __has_include(
        while position < len(text):
            if expect_header and text[position] == "<":
                header = _HEADER_NAME.match(text, position)
                if header:
                    self._add(_Token("header", position, header.end(), header.group()), directive)
                    position, expect_header, line_start = header.end(), False, False
                    continue
            if text.startswith("/*", position) and position + 2 <= self._last_close:
                end = text.find("*/", position + 2) + 2
                if "\n" in text[position:end] and directive is None:
                    line_start = True  # strict: a # after a multi-line comment still counts
                position = end
                continue
            match = _token(reading.separators).match(text, position)
            assert match is not None
            kind, value, end = match.lastgroup or "punct", match.group(), match.end()
            if (kind == "ident" and value in _RAW_PREFIXES and text.startswith('"', end) and directive is None
                    and reading.raw_strings and not self._suffix_position(position)):
                raw_end = self._raw_string_end(end)
                if raw_end is not None:
                    kind, end, value = "raw", raw_end, text[position:raw_end]
            if kind == "nl":
                if directive is not None:
                    directive.end = position
                    directive = None
                line_start, expect_header = True, False
                self.tokens.append(_Token(kind, position, end, value))
                position = end
                continue
            if kind in ("ws", "comment"):
                position = end
                continue
            token = _Token(kind, position, end, value)
            if kind == "punct" and value in ("#", "%:") and line_start and directive is None:
                directive = _Directive(position, len(text), [])
                self.directives.append(directive)
                token.directive = len(self.directives) - 1
                self.tokens.append(token)
                line_start, position = False, end
                continue
            self._add(token, directive)
            if directive is not None and len(directive.tokens) == 1:
                expect_header = kind == "ident" and value in _INCLUDE_LIKE
            elif kind == "punct" and value == "(" and self._previous_ident() in _HEADER_PROBES:
                expect_header = True
            else:
                expect_header = False
            line_start, position = False, end

    def _add(self, token: _Token, directive: _Directive | None) -> None:
        if directive is not None:
            token.directive = len(self.directives) - 1
            directive.tokens.append(token)
        self.tokens.append(token)

    def _suffix_position(self, position: int) -> bool:
        """Whether an identifier at position is the ud-suffix of the literal just before it ("x"R)."""
        previous = self.tokens[-1] if self.tokens else None
        return previous is not None and previous.end == position and previous.kind in ("string", "char", "raw")

    def _previous_ident(self) -> str | None:
        significant = [t for t in self.tokens[-2:] if t.kind != "nl"]
        return significant[0].text if len(significant) == 2 and significant[0].kind == "ident" else None

    def _raw_string_end(self, quote: int) -> int | None:
        """Logical end of a raw string whose opening quote is at logical offset quote, or None when
        the delimiter is invalid or the string never ends (then it is read as an ordinary string,
        which ends at the line end at the latest: the strict reading)."""
        physical = self.reading.physical
        start = self.reading.phys(quote) + 1
        delimiter = _RAW_DELIMITER.match(physical, start)
        if delimiter is None:
            return None
        terminator = ")" + delimiter.group(1) + '"'
        if delimiter.end() >= self._unterminated.get(terminator, len(physical) + 1):
            return None
        close = physical.find(terminator, delimiter.end())
        if close < 0:
            self._unterminated[terminator] = min(delimiter.end(), self._unterminated.get(terminator, delimiter.end()))
            return None
        return self.reading.logical(close + len(delimiter.group(1)) + 2)


# --- findings ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Finding:
    start: int  # logical offsets of the text to show
    end: int
    reason: str
    kind: str


def _collect(source: str, find) -> list[IncludeViolation]:
    physical = source.replace("\r\n", "\n").replace("\r", "\n")
    found: dict[int, IncludeViolation] = {}  # one violation per line: the GCC reading's first,
    for options in _readings(physical):       # unless another reading sees an include there
        reading = _Reading(physical, *options)
        for finding in find(_Scan(reading)):
            line = reading.line_of(finding.start)
            if line not in found or (finding.kind == INCLUDE and found[line].kind != INCLUDE):
                found[line] = IncludeViolation(line, reading.display(finding.start, finding.end),
                                               finding.reason, finding.kind)
    return [found[line] for line in sorted(found)]


def _readings(physical: str) -> list[tuple[bool, bool, bool, bool]]:
    """GCC's reading first, then every other one that can differ from it for this text (digit
    separators came with C++14, after raw strings, so there is no reading with the first only)."""
    trigraphs = (False, True) if "??" in physical else (False,)
    splices = (True, False) if re.search(r"(?:\\|\?\?/)[ \t\f\v]+\n", physical) else (True,)
    separators = re.search(r"\w'", physical) is not None
    raw = re.search(r"R[\\?/ \t\f\v\n]*\"", physical) is not None
    versions = [(True, True)] + ([(False, True)] if separators else []) + ([(False, False)] if raw else [])
    return [(t, s, sep, r) for t in trigraphs for s in splices for sep, r in versions]


def _significant(tokens: Iterable[_Token]) -> list[_Token]:
    return [t for t in tokens if t.kind != "nl"]


def _include_findings(scan: _Scan, policy: HeaderPolicy, pasting: frozenset[str] | None = None) -> list[_Finding]:
    findings: list[_Finding] = []
    for directive in scan.directives:
        reason = _directive_problem(directive, policy)
        if reason is not None:
            findings.append(_Finding(directive.start, directive.end, *reason))
    pastes = _pastes(scan)
    findings.extend(_token_findings(scan))
    findings.extend(_Finding(p.directive.start, p.directive.end, p.reason, p.kind) for p in pastes if not p.harmless)
    unproven = _unproven_macros(scan, pastes) if pasting is None else pasting
    findings.extend(_conditions_using(scan, unproven))
    return findings


def _directive_problem(directive: _Directive, policy: HeaderPolicy) -> tuple[str, str] | None:
    if not directive.tokens:
        return None  # the null directive
    name, operands = directive.tokens[0], directive.tokens[1:]
    if name.kind == "number":
        return None  # a GCC line marker: line_directive_violations
    if name.kind != "ident":
        return "this is not a preprocessor directive the lab allows", DIRECTIVE
    word = name.text
    if word == "include":
        return _include_problem(operands, policy)
    if word in _INCLUDE_LIKE:
        return f"#{word} can open any file; only #include of a toolkit or compiler header is accepted", INCLUDE
    if word == "pragma":
        problem = _pragma_problem([t.text for t in operands if t.kind in ("ident", "number")][:2])
        return (problem, PRAGMA) if problem else None
    if word not in _ALLOWED_DIRECTIVES:
        return f"#{word} is not a preprocessor directive the lab allows", DIRECTIVE
    return None


_HEADER_CHARACTERS = re.compile(r"[A-Za-z0-9_.+/-]+")


def _include_problem(operands: list[_Token], policy: HeaderPolicy) -> tuple[str, str] | None:
    if not operands:
        return "#include needs a header name", INCLUDE
    first = operands[0]
    quoted = first.kind == "string" and first.text.startswith('"') and first.text.endswith('"')
    if first.kind != "header" and not quoted:
        return ("the header name comes from a macro or expression, so it could name any file; "
                "write it out as <name> or \"name\""), INCLUDE
    name = first.text[1:-1]
    if "\\" in name:
        return "backslashes are not allowed in header names", INCLUDE
    if name.startswith(("/", "~")) or re.match(r"[A-Za-z]:", name):
        return "absolute paths are not allowed in header names", INCLUDE
    if ".." in name.split("/"):
        return '".." is not allowed in header names', INCLUDE
    if operands[1:]:
        return "there is extra text after the header name", INCLUDE
    if not _HEADER_CHARACTERS.fullmatch(name):
        return "a header name may hold only letters, digits and _ . + / -", INCLUDE
    problem = policy.problem(name, quoted)
    return (problem, INCLUDE) if problem else None


def _pragma_problem(words: list[str]) -> str | None:
    """Why a pragma with these leading words is refused, or None."""
    if not words:
        return None
    first = words[0]
    if first in _FILE_PRAGMAS:
        return f"#pragma {first} can open files"
    if first == "GCC":
        second = words[1] if len(words) > 1 else ""
        if second in _FILE_PRAGMAS:
            return f"#pragma GCC {second} can open files"
        if second not in _SAFE_GCC_PRAGMAS:
            return f"#pragma GCC {second} is not one of the GCC pragmas the lab allows".replace("  ", " ")
    return None


def _token_findings(scan: _Scan) -> list[_Finding]:
    """Problems that are not about one directive's name: they are looked for in code and directives alike.
    A `##` of a #define is judged by _pastes; anywhere else it pastes nothing, and is refused as before."""
    findings: list[_Finding] = []
    tokens = [t for t in scan.tokens if t.kind != "nl"]
    directive_starts = {d.start for d in scan.directives}
    for i, token in enumerate(tokens):
        start, end = _line_span(scan, token)
        text, kind = token.text, token.kind
        following = tokens[i + 1] if i + 1 < len(tokens) else None
        if kind == "ident" and text in _HEADER_PROBES:
            findings.append(_Finding(start, end, f"{text} probes files on the grading machine", INCLUDE))
        elif kind == "punct" and text in ("##", "%:%:") and not _in_define(scan, token):
            findings.append(_Finding(start, end, "token pasting (##) is not allowed: it can assemble "
                                     "names such as asm or _Pragma from harmless-looking pieces", PASTE))
        elif (kind == "punct" and text in ("#", "%:") and token.start not in directive_starts
              and following is not None and following.kind == "ident" and following.text in _INCLUDE_LIKE):
            findings.append(_Finding(start, end, f"#{following.text} may only appear as a directive of its own",
                                     INCLUDE))
        elif kind == "ident" and text == "import" and following is not None and (
                following.kind in ("string", "raw") or following.text == "<"):
            findings.append(_Finding(start, end, "importing a header unit can open any file", INCLUDE))
        elif kind == "ident" and text == "__pragma":
            findings.append(_Finding(start, end, "__pragma is not allowed; use #pragma", PRAGMA))
        elif kind == "ident" and text == "_Pragma":
            problem = _operator_pragma_problem(tokens[i + 1:i + 4])
            if problem:
                findings.append(_Finding(start, end, problem, PRAGMA))
        elif kind == "ident" and text in _ASM_KEYWORDS:
            problem = _asm_problem(tokens, i + 1)
            if problem:
                findings.append(_Finding(start, end, problem, ASSEMBLY))
    return findings


# --- token pasting ------------------------------------------------------------------------------------

# The names the policy refuses (or holds to a plain string) where they are written out: a paste must not
# assemble one where the text shows none.
ASSEMBLED = _HEADER_PROBES | _ASM_KEYWORDS | frozenset({"_Pragma", "__pragma", "import"})
_PASTE_OPERATORS = ("##", "%:%:")
_NOT_WRITTEN_OUT = frozenset({"__VA_ARGS__", "__VA_OPT__"})
PASTED_ARGUMENTS = ("token pasting (##) here joins macro arguments with nothing written out that rules out "
                    "names such as asm or _Pragma, and its expansion could not be checked")


@dataclass(frozen=True)
class _Paste:
    """One `##` of a #define and what it can make."""

    directive: _Directive
    macro: str
    harmless: bool  # no expansion can make it build a name of ASSEMBLED
    reason: str = ""  # when not harmless
    kind: str = PASTE  # PASTE: judged by what the macro's uses expand to; anything else: refused as written
    span: tuple[int, int] = (0, 0)  # logical offsets of its chain `a ## b ## c`, first operand to last


def _in_define(scan: _Scan, token: _Token) -> bool:
    if token.directive is None:
        return False
    words = scan.directives[token.directive].tokens
    return bool(words) and words[0].text == "define"


def _pastes(scan: _Scan) -> list[_Paste]:
    """Every `##` of every #define, each judged from the text alone. A paste joins its operands' texts into
    one token, so an operand written out (not a parameter) whose text occurs in no name of ASSEMBLED keeps
    that token from being one (`num##M##Columns`, `ld_##M`); a chain written out entirely is judged by what
    it spells. The rest (`a##b` of two parameters) depend on the arguments: PASTE, judged by expansion."""
    found: list[_Paste] = []
    for directive in scan.directives:
        words = directive.tokens
        if len(words) < 3 or words[0].text != "define" or not any(t.text in _PASTE_OPERATORS for t in words):
            continue
        parameters, body = _macro_parameters(words)
        for chain in _paste_chains(body):
            found += _judged_chain(directive, words[1].text, chain, parameters)
    return found


def _macro_parameters(words: list[_Token]) -> tuple[frozenset[str], list[_Token]]:
    """A #define's parameter names (none for an object-like macro) and its replacement list."""
    name, rest = words[1], words[2:]
    if not rest or rest[0].text != "(" or rest[0].start != name.end:
        return frozenset(), rest
    close = next((i for i, t in enumerate(rest) if t.text == ")"), len(rest) - 1)
    names = {t.text for t in rest[1:close] if t.kind == "ident"}
    return frozenset(names | _NOT_WRITTEN_OUT), rest[close + 1:]


def _paste_chains(body: list[_Token]) -> list[list[_Token]]:
    """The operands of each run `a ## b ## c` of the replacement list (a stringized `#x` as its `#`)."""
    chains: list[list[_Token]] = []
    for i, token in enumerate(body):
        if token.text not in _PASTE_OPERATORS or i == 0 or i + 1 >= len(body):
            continue
        if chains and chains[-1][-1] is body[i - 1]:
            chains[-1].append(body[i + 1])
        else:
            chains.append([body[i - 1], body[i + 1]])
    return chains


def _judged_chain(directive: _Directive, macro: str, chain: list[_Token], parameters: frozenset[str]) -> list[_Paste]:
    written = [_written_out(t, parameters) for t in chain]
    span = (chain[0].start, chain[-1].end)
    if all(written):
        spelled = "".join(t.text for t in chain)
        if spelled in ASSEMBLED:
            return [_Paste(directive, macro, False, f"token pasting (##) here builds {spelled}, which is not "
                           "allowed", _kind_of(spelled), span)]
        return [_Paste(directive, macro, True, span=span)]
    joints = zip(zip(chain, written), zip(chain[1:], written[1:]))
    return [_Paste(directive, macro, _rules_out((left, left_written), (right, right_written)), PASTED_ARGUMENTS,
                   span=span)
            for (left, left_written), (right, right_written) in joints]


def _written_out(token: _Token, parameters: frozenset[str]) -> bool:
    """An operand whose text is in the #define itself: not a parameter, and plain (no universal character)."""
    return token.text not in parameters and "\\" not in token.text


def _rules_out(*operands: tuple[_Token, bool]) -> bool:
    """Whether a written-out operand of one `##` occurs in no name of ASSEMBLED (the token made contains it)."""
    return any(written and not any(token.text in name for name in ASSEMBLED) for token, written in operands)


def _unproven_macros(scan: _Scan, pastes: list[_Paste]) -> frozenset[str]:
    """The macros whose expansion may involve a paste that is not harmless: those holding one, and those whose
    replacement list names one of them (a pasted name is rescanned: only these can make it)."""
    names = {paste.macro for paste in pastes if not paste.harmless}
    bodies = {d.tokens[1].text: {t.text for t in d.tokens[2:] if t.kind == "ident"}
              for d in scan.directives if len(d.tokens) >= 2 and d.tokens[0].text == "define"}
    grown = True
    while grown:
        more = {macro for macro, words in bodies.items() if words & names} - names
        names |= more
        grown = bool(more)
    return frozenset(names)


def unproven_pasting_macros(sources: Iterable[str]) -> frozenset[str]:
    """Over several files (kernel.cu and the headers handed in with it): the macros _unproven_macros names,
    which no #if or #elif of any of them may use."""
    names: set[str] = set()
    for source in sources:
        physical = source.replace("\r\n", "\n").replace("\r", "\n")
        for options in _readings(physical):
            scan = _Scan(_Reading(physical, *options))
            names |= _unproven_macros(scan, _pastes(scan))
    return frozenset(names)


def _conditions_using(scan: _Scan, macros: frozenset[str]) -> list[_Finding]:
    """#if and #elif lines that use such a macro: a pasted __has_include there would probe a file while the
    preprocessor decides, where no expanded text shows it. Testing whether one is defined is fine."""
    findings = []
    for directive in scan.directives:
        words = directive.tokens
        if not macros or not words or words[0].text not in ("if", "elif"):
            continue
        tested = {t.text for i, t in enumerate(words) if i and not _defined_operand(words, i)}
        used = sorted(tested & macros)
        if used:
            findings.append(_Finding(directive.start, directive.end, f"#{words[0].text} may not use {used[0]}: "
                                     "it pastes tokens (##), which could assemble __has_include, a probe of "
                                     "files on the grading machine", INCLUDE))
    return findings


def _defined_operand(words: list[_Token], i: int) -> bool:
    before = [t.text for t in words[max(0, i - 2):i]]
    return before[-1:] == ["defined"] or before == ["defined", "("]


def _line_span(scan: _Scan, token: _Token) -> tuple[int, int]:
    """The logical line around a token (the whole directive when the token is in one)."""
    if token.directive is not None:
        directive = scan.directives[token.directive]
        return directive.start, directive.end
    ends = scan.line_ends
    k = bisect.bisect_left(ends, token.start)
    start = ends[k - 1] + 1 if k > 0 else 0
    return start, ends[k] if k < len(ends) else len(scan.reading.text)


def _operator_pragma_problem(after: list[_Token]) -> str | None:
    if (len(after) == 3 and after[0].text == "(" and after[1].kind == "string" and after[2].text == ")"):
        content = _string_value(after[1].text)
        problem = _pragma_problem(re.findall(r"[A-Za-z_]\w*", content)[:2])
        return problem.replace("#pragma", "_Pragma") if problem else None
    return "_Pragma must be given one plain string literal"


def _asm_problem(tokens: list[_Token], index: int) -> str | None:
    while index < len(tokens) and tokens[index].text in _ASM_QUALIFIERS:
        index += 1
    if index >= len(tokens) or tokens[index].text != "(":
        return "asm may only be used as asm(\"...\") with the assembly written out as a string"
    parts: list[str] = []
    index += 1
    while index < len(tokens) and tokens[index].kind in ("string", "raw"):
        parts.append(_string_value(tokens[index].text))
        index += 1
    if not parts or index >= len(tokens) or tokens[index].text not in (":", ")"):
        return "the assembly text of asm(...) must be written out as string literals, not come from a macro"
    if _ASM_FORBIDDEN.search("".join(parts)):
        return "inline assembly may not use .incbin, .include or assembler macros: they can read files"
    return None


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b",
            "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _string_value(literal: str) -> str:
    """The characters of a (possibly prefixed, possibly raw) string literal, escapes decoded."""
    quote = literal.index('"')
    prefix = literal[:quote]
    if prefix.endswith("R"):
        body = literal[quote + 1:-1]
        return body[body.index("(") + 1:body.rindex(")")] if "(" in body and ")" in body else body
    body = literal[quote + 1:]
    body = body.removesuffix('"')
    out, i = [], 0
    while i < len(body):
        char = body[i]
        if char != "\\" or i + 1 >= len(body):
            out.append(char)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in "01234567":
            digits = re.match(r"[0-7]{1,3}", body[i + 1:]).group()
            out.append(chr(int(digits, 8)))
            i += 1 + len(digits)
        elif nxt == "x":
            digits = re.match(r"[0-9A-Fa-f]*", body[i + 2:]).group()
            out.append(chr(int(digits, 16) % 0x110000) if digits else "x")
            i += 2 + len(digits)
        elif nxt in "uU":
            width = 4 if nxt == "u" else 8
            digits = body[i + 2:i + 2 + width]
            if re.fullmatch(r"[0-9A-Fa-f]+", digits or "-") and len(digits) == width:
                out.append(chr(int(digits, 16) % 0x110000))
                i += 2 + width
            else:
                out.append(nxt)
                i += 2
        else:
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
    return "".join(out)


def _line_findings(scan: _Scan) -> list[_Finding]:
    findings = []
    for directive in scan.directives:
        if not directive.tokens:
            continue
        name, operands = directive.tokens[0], directive.tokens[1:]
        if name.kind == "number":  # GCC line marker: `# 12 "file" 1`
            operands = [name, *operands]
        elif not (name.kind == "ident" and name.text == "line"):
            continue
        problem = _line_problem(operands)
        if problem:
            findings.append(_Finding(directive.start, directive.end, problem, LINE))
    return findings


def _line_problem(operands: list[_Token]) -> str | None:
    if operands and operands[0].kind == "number" and operands[0].text.isdigit():
        if len(operands) == 1:
            return None
        if operands[1].kind in ("string", "raw"):
            return "it names a file, so messages would point at another file"
    return "only a plain line number may follow #line"


_PLAIN_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]([A-Za-z0-9_./+-]+)[>"][ \t]*(?://.*)?$')


def drop_host_headers(source: str, host_only: Sequence[str], libraries: Collection[str] = ()) -> str:
    """The source with each plain `#include <name>` / `"name"` of a host-only header (libwb's wb.h) blanked,
    whatever folder the line names (`#include "../libwb/wb.h"`), and of each toolkit library header in
    `libraries` (toolkit_headers.unneeded_headers), named as the toolkit names it; lines kept: those headers
    serve only host code, which is left out before compiling, and no file is ever read for them. Only a whole
    plain line is dropped; any other spelling still meets check_source."""
    if not host_only and not libraries:
        return source
    names = set(host_only)
    lines = source.split("\n")
    for index, line in enumerate(lines):
        match = _PLAIN_INCLUDE.match(line.rstrip("\r"))
        if (match and (match.group(1).rsplit("/", 1)[-1] in names or match.group(1) in libraries)
                and not (index and lines[index - 1].rstrip("\r").endswith("\\"))):
            lines[index] = ""
    return "\n".join(lines)
