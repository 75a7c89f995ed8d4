"""The compiled kernel's real parameter list, read from the cubin, against the kernel contract.

The source check (signature.py) gives a type it cannot resolve (a typedef, a macro) the benefit of the
doubt. The compiler resolves them all: the cubin's `.nv.info.<kernel>` section lists each parameter's
ordinal and size (EIATTR_KPARAM_INFO). Under SourceModule's extern "C" the name carries no types, so
sizes are what can be compared: a `size_t` where the lab passes a 32-bit int, or a count that differs,
is certain to read the wrong bytes. A float * and a double * are both 8 bytes: the source check names
that one.

The cubin is compiler output, read as untrusted bytes: every offset is bounds-checked, and anything
malformed reads as "unknown" (None), never as a verdict.
"""
from __future__ import annotations

import struct

from ..contract import KernelContract

KPARAM_INFO = 0x17  # EIATTR_KPARAM_INFO: index u32, ordinal u16, offset u16, flags u32 (size in bits 18..31)
# .nv.info attribute formats: an attribute's length in bytes, format and attribute bytes included. Every
# fixed-format record is four bytes, even one with no value (its last two are zero; a byte value is
# padded as a half-word); a sized value (SVAL) gives its length in a half-word.
FORMAT_SVAL = 4
FIXED_LENGTH = {1: 4, 2: 4, 3: 4}  # no value, byte value, half-word value

def compiled_parameter_sizes(cubin: bytes, kernel: str) -> list[int] | None:
    """The byte size of each of the kernel's parameters, in order; None when the cubin does not say."""
    try:
        section = _section(cubin, f".nv.info.{kernel}")
        return None if section is None else _parameter_sizes(section)
    except (struct.error, ValueError, IndexError):
        return None


def _section(elf: bytes, wanted: str) -> bytes | None:
    if elf[:4] != b"\x7fELF" or elf[4] != 2:  # 64-bit ELF, as every cubin is
        return None
    section_offset = struct.unpack_from("<Q", elf, 0x28)[0]
    entry_size, count, names_index = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", elf, section_offset + i * entry_size) for i in range(count)]
    names_at = headers[names_index][4]
    for name, _, _, _, offset, size in headers:
        end = elf.index(b"\0", names_at + name)
        if elf[names_at + name:end].decode("ascii", "replace") == wanted:
            if offset + size > len(elf):
                raise ValueError("section past the end of the file")
            return elf[offset:offset + size]
    return None


def _parameter_sizes(section: bytes) -> list[int] | None:
    sizes: dict[int, int] = {}
    at = 0
    while at + 2 <= len(section):
        form, attribute = section[at], section[at + 1]
        if form == FORMAT_SVAL:
            length = struct.unpack_from("<H", section, at + 2)[0]
            value, at = section[at + 4:at + 4 + length], at + 4 + length
        elif form in FIXED_LENGTH:
            at += FIXED_LENGTH[form]
            continue
        else:
            return None  # a format this reader does not know: stop rather than guess
        if attribute == KPARAM_INFO and len(value) >= 12:
            _, ordinal, _, flags = struct.unpack_from("<IHHI", value)
            sizes[ordinal] = (flags >> 18) & 0x3FFF
    if sorted(sizes) != list(range(len(sizes))):
        return None
    return [sizes[ordinal] for ordinal in range(len(sizes))] or None


def parameter_problem(cubin: bytes, contract: KernelContract) -> str:
    """What certainly differs between the compiled kernel's parameters and how the lab launches it; ''
    when nothing does or the cubin does not say."""
    found = compiled_parameter_sizes(cubin, contract.name)
    expected = list(contract.argument_bytes)
    if found is None or found == expected:
        return ""
    intro = (f"{contract.name} as compiled takes {len(found)} parameters of {_bytes(found)}; this lab launches it "
             f"with {len(expected)}, ({contract.signature}): {_bytes(expected)}")
    if len(found) != len(expected):
        return intro
    position, role = next((i, role) for i, (role, size, want) in
                          enumerate(zip(contract.roles, found, expected), start=1) if size != want)
    what = f"the size {role}, a 32-bit int" if role in "mnk" else f"the matrix {role}, a 64-bit pointer to float"
    return (f"{intro}\nparameter {position} is {found[position - 1]} bytes where the lab passes {what} "
            "(check the types behind any typedef or macro in the declaration)")


def _bytes(sizes: list[int]) -> str:
    return ", ".join(map(str, sizes)) + " bytes"
