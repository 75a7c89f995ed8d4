"""Whether a kernel can carry state from one launch to the next: the mutable static storage of its unit.

The student's unit (student_unit.cpp around their device code, build.py) is compiled to an object of its own
before it is linked with the harness's, so the object's ELF symbol table holds what that unit defines. A named
datum in a writable section there is state a launch can leave for the next (a `__device__` variable, a static
local, a `__shared__` scalar, a `__shared__` array of a template) unless it is:
- one of the emulator's own variables (cuda_emu.h): the harness's object defines each one as well (new_launch
  resets them all), or the per-unit iostream initializer of the C++ library;
- in a section the grader named (instrument.py): a `__shared__` array (each block finds it poisoned), the
  pointer to the dynamic shared buffer, or a `__constant__` variable (device code cannot change constant
  memory between launches on the GPU); or the guard variable of such a datum. The sections are named after a
  hash of the submission (statics_tag), so no text in it can name them;
- read-only once relocated (.data.rel.ro), or in the tables of static constructors and destructors.
Bytes of a writable section that no symbol names count as state too: when in doubt, state. So does a file that
names the emulator (`cuda_emu`): its code could keep a count in the emulator's own variables.

The object is built from student code: read as untrusted bytes, anything malformed reads as None (unknown,
which the driver treats as state).
"""
from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator

from ..nvcc.kernel_params import Section, _headers, _string, section_table, symbol_entries

SHF_WRITE, SHF_ALLOC = 0x1, 0x2
SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_PREINIT_ARRAY = 14, 15, 16
SHN_UNDEF, SHN_COMMON = 0, 0xFFF2
STT_SECTION, STT_FILE = 3, 4
RELRO = ".data.rel.ro"
LIBRARY = frozenset({"_ZStL8__ioinit"})  # <iostream>'s std::ios_base::Init in each unit (g++ before 13)
EMULATOR_NAMED = "cuda_emu (the emulator's own names, in the submission)"


def names_the_emulator(source: str, headers: dict[str, str] | None = None) -> bool:
    return any("cuda_emu" in text for text in [source, *(headers or {}).values()])


def statics_tag(source: str, headers: dict[str, str] | None = None) -> str:
    """The prefix of the sections instrument.py names for the submission's `__shared__` arrays and `__constant__`
    data: a hash of its files, which none of them can contain."""
    texts = [source, *(f"{name}\0{text}" for name, text in sorted((headers or {}).items()))]
    return "cuda_emu_" + hashlib.sha256("\0".join(texts).encode()).hexdigest()[:20]


def emulator_variables(harness_object: bytes) -> frozenset[str]:
    """The data the harness's own object defines in writable sections: the emulator's variables."""
    return frozenset(name for name, _ in _writable_data(harness_object, ""))


def mutable_statics(student_object: bytes, emulator: frozenset[str], tag: str) -> list[str] | None:
    """The names of the data in the student's object that a launch can change for the next (a writable
    section's name where no symbol names its bytes); [] for none; None when the object cannot be read."""
    try:
        table = section_table(student_object)
        if table is None:
            return None
        data = list(_data(student_object))
    except (struct.error, ValueError, IndexError):
        return None
    placed = {name for name, index in data if 0 < index < len(table) and table[index].name.startswith(tag)}
    holding = {index for index, section in enumerate(table) if _may_hold_state(section, tag)}
    state = {name for name, index in data if (index in holding or index == SHN_COMMON)
             and name not in emulator and name not in LIBRARY and not _guard_of(name, placed)}
    named = {index for _, index in data}
    state |= {table[index].name for index in holding if table[index].size and index not in named}
    return sorted(state)


def _writable_data(elf: bytes, tag: str) -> list[tuple[str, int]]:
    try:
        table = section_table(elf) or []
        return [(name, index) for name, index in _data(elf) if 0 < index < len(table)
                and _may_hold_state(table[index], tag)]
    except (struct.error, ValueError, IndexError):
        return []


def _data(elf: bytes) -> Iterator[tuple[str, int]]:
    """(name, section index) of each named, defined symbol that is not a section's or a file's."""
    for _, at, strings in symbol_entries(elf, _headers(elf) or []):
        name, info, _, index = struct.unpack_from("<IBBH", elf, at)
        if name and index != SHN_UNDEF and info & 0xF not in (STT_SECTION, STT_FILE):
            yield _string(elf, strings + name), index


def _may_hold_state(section: Section, tag: str) -> bool:
    writable = section.flags & SHF_WRITE and section.flags & SHF_ALLOC
    tables = section.kind in (SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_PREINIT_ARRAY)
    placed = bool(tag) and section.name.startswith(tag)
    return bool(writable) and not tables and not placed and not section.name.startswith(RELRO)


def _guard_of(name: str, placed: set[str]) -> bool:
    """`name` is the guard variable of a datum in the grader's sections (its first initialization, done once)."""
    return name.startswith("_ZGV") and "_Z" + name[4:] in placed
