"""The compiled kernel, read from the cubin: which entry function is the contract's kernel, and its real
parameter list against the kernel contract.

The student's file is compiled with C++ linkage (compile.py), so a kernel's symbol is its mangled name:
`mysgemm(int, int, int, const float *, const float *, float *)` is `_Z7mysgemmiiiPKfS0_Pf`, and a kernel
the student declared `extern "C"` keeps its plain name. The kernel is found in the cubin's symbol table
among its entry functions by its own name (mangling.py reads the Itanium names); of several overloads,
the one whose parameters fit how the lab launches it. A template kernel has no name the lab can launch:
that is said as such.

The source check (signature.py) gives a type it cannot resolve (a typedef, a macro) the benefit of the
doubt. The compiler resolves them all: the cubin's `.nv.info.<kernel>` section lists each parameter's
ordinal and size (EIATTR_KPARAM_INFO). A `size_t` where the lab passes a 32-bit int, or a count that
differs, is certain to read the wrong bytes. A float * and a double * are both 8 bytes: the source check
names that one (and the mangled name tells overloads apart).

The cubin is compiler output, read as untrusted bytes: every offset is bounds-checked, and anything
malformed reads as "unknown" (None), never as a verdict.
"""
from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from ...contract import MATRICES, KernelContract
from ...source.signature import namespaced_kernel_problem, template_kernel_problem
from .mangling import Demangled, demangle

KPARAM_INFO = 0x17  # EIATTR_KPARAM_INFO: index u32, ordinal u16, offset u16, flags u32 (size in bits 18..31)
# .nv.info attribute formats: an attribute's length in bytes, format and attribute bytes included. Every
# fixed-format record is four bytes, even one with no value (its last two are zero; a byte value is
# padded as a half-word); a sized value (SVAL) gives its length in a half-word.
FORMAT_SVAL = 4
FIXED_LENGTH = {1: 4, 2: 4, 3: 4}  # no value, byte value, half-word value
SHT_SYMTAB, STT_FUNC = 2, 2
STO_CUDA_ENTRY = 0x10  # in a symbol's st_other: a __global__ function (device functions lack it)
# The C spellings of what the launchers pass for each kind of role (contract.SPELLING, its parameters' types).
SIZE_TYPES, MATRIX_TYPES = frozenset({"int", "unsigned int"}), frozenset({"float *", "const float *"})


def compiled_parameter_sizes(cubin: bytes, kernel: str) -> list[int] | None:
    """The byte size of each of the kernel's parameters, in order; None when the cubin does not say."""
    try:
        section = _section(cubin, f".nv.info.{kernel}")
        return None if section is None else _parameter_sizes(section)
    except (struct.error, ValueError, IndexError):
        return None


def entry_functions(cubin: bytes) -> list[str] | None:
    """The symbols of the cubin's kernels (`__global__` functions), in the symbol table's order; None when the
    cubin cannot be read."""
    try:
        return _entry_functions(cubin)
    except (struct.error, ValueError, IndexError):
        return None


class Section(NamedTuple):
    name: str
    kind: int  # sh_type
    flags: int  # sh_flags
    offset: int
    size: int
    link: int


def section_table(elf: bytes) -> list[Section] | None:
    """Every section header of a 64-bit little-endian ELF file (a cubin, an x86-64 object); None for anything
    else. Raises struct.error, ValueError or IndexError on a malformed one."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        return None
    section_offset = struct.unpack_from("<Q", elf, 0x28)[0]
    entry_size, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    raw = [struct.unpack_from("<IIQQQQI", elf, section_offset + i * entry_size) for i in range(count)]
    names_at = raw[names_index][4]
    return [Section(_string(elf, names_at + name), kind, flags, offset, size, link)
            for name, kind, flags, _, offset, size, link in raw]


def _headers(elf: bytes) -> list[tuple[str, int, int, int, int]] | None:
    """Each section's (name, type, offset, size, link); None for what is not a 64-bit ELF file."""
    table = section_table(elf)
    return None if table is None else [(s.name, s.kind, s.offset, s.size, s.link) for s in table]


def _string(elf: bytes, at: int) -> str:
    return elf[at:elf.index(b"\0", at)].decode("ascii", "replace")


def _section(elf: bytes, wanted: str) -> bytes | None:
    for name, _, offset, size, _ in _headers(elf) or []:
        if name == wanted:
            if offset + size > len(elf):
                raise ValueError("section past the end of the file")
            return elf[offset:offset + size]
    return None


@dataclass(frozen=True)
class Symbol:
    name: str
    function: bool  # a function (else data: a __device__ or __constant__ variable, a section)
    entry: bool  # a __global__ function


def symbols(cubin: bytes) -> list[Symbol] | None:
    """Every named symbol of the cubin's symbol tables; None when the cubin cannot be read."""
    try:
        return _symbols(cubin)
    except (struct.error, ValueError, IndexError):
        return None


def calls_printf(cubin: bytes) -> bool:
    """Whether the module's device code prints: device printf compiles to a call of the driver's vprintf."""
    return any(symbol.name == "vprintf" for symbol in symbols(cubin) or [])


def _entry_functions(elf: bytes) -> list[str] | None:
    found = _symbols(elf)
    return None if found is None else [symbol.name for symbol in found if symbol.function and symbol.entry]


def _symbols(elf: bytes) -> list[Symbol] | None:
    headers = _headers(elf)
    if headers is None:
        return None
    found = []
    for _, at, strings in symbol_entries(elf, headers):
        name, info, other = struct.unpack_from("<IBB", elf, at)
        if name:
            found.append(Symbol(_string(elf, strings + name), info & 0xF == STT_FUNC, bool(other & STO_CUDA_ENTRY)))
    return found


def symbol_entries(elf: bytes, headers: list[tuple[str, int, int, int, int]]) -> Iterator[tuple[int, int, int]]:
    """Each symbol table entry (Elf64_Sym: name u32, info u8, other u8, section u16, value u64, size u64) as
    (its index in its table, its offset in the file, the offset of its table's strings)."""
    for _, kind, offset, size, link in headers:
        if kind == SHT_SYMTAB:
            if offset + size > len(elf):  # a damaged or hostile file: no entry is read from outside it
                raise ValueError("symbol table past the end of the file")
            strings = headers[link][2]
            yield from ((number, at, strings) for number, at in enumerate(range(offset, offset + size - 23, 24)))


def info_records(section: bytes) -> tuple[list[tuple[int, bytes]], bool]:
    """A `.nv.info` section's sized records as (attribute, value), in order, and whether the section was read to
    its end (False: a format this reader does not know, or a record cut short, stopped it; nothing is guessed)."""
    records, at = [], 0
    while at + 2 <= len(section):
        form, attribute = section[at], section[at + 1]
        if form in FIXED_LENGTH:
            at += FIXED_LENGTH[form]
        elif form == FORMAT_SVAL and at + 4 <= len(section):
            length = struct.unpack_from("<H", section, at + 2)[0]
            records.append((attribute, section[at + 4:at + 4 + length]))
            at += 4 + length
        else:
            return records, False
    return records, True


def _parameter_sizes(section: bytes) -> list[int] | None:
    sizes: dict[int, int] = {}
    records, whole = info_records(section)
    if not whole:
        return None
    for attribute, value in records:
        if attribute == KPARAM_INFO and len(value) >= 12:
            _, ordinal, _, flags = struct.unpack_from("<IHHI", value)
            sizes[ordinal] = (flags >> 18) & 0x3FFF
    if sorted(sizes) != list(range(len(sizes))):
        return None
    return [sizes[ordinal] for ordinal in range(len(sizes))] or None


@dataclass(frozen=True)
class Found:
    """The contract's kernel among a cubin's entry functions."""

    symbol: str = ""  # the entry function to launch; '' when the cubin does not say (try the contract's name)
    problem: str = ""  # why no entry function of that name can be launched as the lab launches it


def find_kernel(cubin: bytes, contract: KernelContract) -> Found:
    """The entry function whose own name is the contract's, at file scope as the lab launches it: a plain
    (extern "C") name or a mangled one. Of several overloads, the one whose parameters fit the lab's launch
    (their sizes, then their types)."""
    entries = entry_functions(cubin)
    named = [(symbol, demangle(symbol)) for symbol in entries or []]
    named = [(symbol, read) for symbol, read in named if (read.name if read else symbol) == contract.name]
    if not named:
        return Found()  # the lookup by the contract's name says it is missing
    launchable = [(symbol, read) for symbol, read in named if read is None or not read.template]
    if not launchable:
        return Found(problem=template_kernel_problem(contract.name, [read.qualified for _, read in named]))
    if all(read is not None and read.scope for _, read in launchable):
        return Found(problem=namespaced_kernel_problem(contract.name, [read.qualified for _, read in launchable]))
    launchable = [(symbol, read) for symbol, read in launchable if read is None or not read.scope]
    return Found(launchable[0][0]) if len(launchable) == 1 else _of_overloads(cubin, launchable, contract)


def _of_overloads(cubin: bytes, launchable: list[tuple[str, Demangled | None]], contract: KernelContract) -> Found:
    """The one overload whose parameters' sizes are the lab's, then whose types are."""
    fitting = [(s, r) for s, r in launchable if compiled_parameter_sizes(cubin, s) == list(contract.argument_bytes)]
    typed = [(s, r) for s, r in fitting if r is not None and _types_fit(r, contract)]
    chosen = typed or fitting
    if len(chosen) == 1:
        return Found(chosen[0][0])
    if not chosen:
        return Found(problem=f"{contract.name} is defined {len(launchable)} times and none of them takes what this "
                             f"lab launches it with, ({contract.signature}): {_described(cubin, launchable)}")
    return Found(problem=f"{contract.name} is defined {len(chosen)} times with parameters that fit this lab's launch "
                         f"({contract.signature}), so the grader cannot tell which one to grade: "
                         f"{_described(cubin, chosen)}. Keep one of them")


def kernel_symbol(cubin: bytes, contract: KernelContract) -> str:
    """The name to look the contract's kernel up by in this cubin: its entry function's symbol, else (a
    cubin that does not say) the contract's name itself."""
    return find_kernel(cubin, contract).symbol or contract.name


def _types_fit(read: Demangled, contract: KernelContract) -> bool:
    if read.parameters is None or len(read.parameters) != len(contract.roles):
        return False
    return all(spelled in (MATRIX_TYPES if role in MATRICES else SIZE_TYPES)
               for spelled, role in zip(read.parameters, contract.roles))


def _described(cubin: bytes, definitions: list[tuple[str, Demangled | None]]) -> str:
    """Each definition as the student wrote it, or by its symbol and its parameters' sizes."""
    described = []
    for symbol, read in definitions:
        sizes = compiled_parameter_sizes(cubin, symbol)
        if read is not None and read.parameters is not None:
            described.append(read.readable())
        else:
            described.append(f"{symbol} (parameters of {_bytes(sizes)})" if sizes else symbol)
    return "; ".join(described)


def parameter_problem(cubin: bytes, contract: KernelContract) -> str:
    """What certainly differs between the compiled kernel's parameters and how the lab launches it (or why
    no kernel of that name can be launched); '' when nothing does or the cubin does not say."""
    kernel = find_kernel(cubin, contract)
    if kernel.problem or not kernel.symbol:
        return kernel.problem
    found = compiled_parameter_sizes(cubin, kernel.symbol)
    expected = list(contract.argument_bytes)
    if found is None or found == expected:
        return ""
    intro = (f"{contract.name} as compiled takes {len(found)} parameters of {_bytes(found)}; this lab launches it "
             f"with {len(expected)}, ({contract.signature}): {_bytes(expected)}")
    if len(found) != len(expected):
        return intro
    position, role = next((i, role) for i, (role, size, want) in
                          enumerate(zip(contract.roles, found, expected), start=1) if size != want)
    what = f"the matrix {role}, a 64-bit pointer to float" if role in MATRICES else f"the size {role}, a 32-bit int"
    return (f"{intro}\nparameter {position} is {found[position - 1]} bytes where the lab passes {what} "
            "(check the types behind any typedef or macro in the declaration)")


def _bytes(sizes: list[int]) -> str:
    return ", ".join(map(str, sizes)) + " bytes"
