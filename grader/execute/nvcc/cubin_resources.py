"""A compiled kernel's resources read from its cubin, in pure Python (no cuobjdump): registers per thread,
static shared memory per block, local memory (stack frame) per thread, and the architecture it was built for.

Where nvcc puts them (checked on nvcc 12 and 13 cubins for sm_75 to sm_120):
- `.nv.info`, one record per function keyed by its symbol table index: EIATTR_REGCOUNT (registers) and
  EIATTR_FRAME_SIZE (the per-thread stack frame: spills and local arrays, ptxas's "bytes stack frame");
- `.nv.shared.<kernel>`, a NOBITS section as large as the kernel's static `__shared__` data. From sm_90 on
  it starts with the driver's reserved 1 KB when the cubin has a `.nv.shared.reserved.*` section (ptxas
  says "2048 bytes smem" for a section of 3072): that reserve is not the student's and is left out;
- the ELF header's e_flags: the SM version in bits 8..15 (0x5a: sm_90).

The cubin is student-derived: read as untrusted bytes, every offset bounds-checked (kernel_params.py),
anything malformed reads as None, never a figure.
"""
from __future__ import annotations

import struct

from ...judge.occupancy import Resources
from .kernel_params import _headers, _section, info_records, symbol_entries

REGCOUNT, FRAME_SIZE = 0x2F, 0x11
RESERVED_SHARED = 1024  # the driver's reserve inside the kernel's shared section (sm_90 and later)
RESERVED_SECTION = ".nv.shared.reserved."


def cubin_arch(cubin: bytes) -> str | None:
    """"sm_90" for a cubin built for sm_90; None for what is not a cubin."""
    try:
        if cubin[:4] != b"\x7fELF" or cubin[4] != 2:
            return None
        version = (struct.unpack_from("<I", cubin, 0x30)[0] >> 8) & 0xFF
    except (struct.error, IndexError):
        return None
    return f"sm_{version}" if version else None


def kernel_resources(cubin: bytes, symbol: str) -> Resources | None:
    """The resources of the entry function `symbol`; None when the cubin does not say."""
    try:
        return _resources(cubin, symbol)
    except (struct.error, ValueError, IndexError):
        return None


def _resources(elf: bytes, symbol: str) -> Resources | None:
    headers = _headers(elf)
    if headers is None:
        return None
    index = _symbol_index(elf, headers, symbol)
    info = _section(elf, ".nv.info")
    if index is None or info is None:
        return None
    values = _per_function(info, index)
    if REGCOUNT not in values:
        return None
    return Resources(values[REGCOUNT], _static_shared(elf, headers, symbol), values.get(FRAME_SIZE, 0))


def _symbol_index(elf: bytes, headers: list, symbol: str) -> int | None:
    for number, at, strings in symbol_entries(elf, headers):
        name = struct.unpack_from("<I", elf, at)[0]
        if name and _equals(elf, strings + name, symbol):
            return number
    return None


def _equals(elf: bytes, at: int, text: str) -> bool:
    wanted = text.encode() + b"\0"
    return elf[at:at + len(wanted)] == wanted


def _per_function(info: bytes, index: int) -> dict[int, int]:
    """The `.nv.info` records (symbol index u32, value u32) of the function at `index`, by attribute."""
    found: dict[int, int] = {}
    for attribute, value in info_records(info)[0]:  # what was read before anything unknown stands
        if len(value) == 8:
            owner, figure = struct.unpack_from("<II", value)
            if owner == index:
                found.setdefault(attribute, figure)
    return found


def _static_shared(elf: bytes, headers: list, symbol: str) -> int:
    size = next((size for name, _, _, size, _ in headers if name == f".nv.shared.{symbol}"), 0)
    if size and any(name.startswith(RESERVED_SECTION) for name, *_ in headers):
        size = max(0, size - RESERVED_SHARED)
    return size


def device_int(cubin: bytes, name: str) -> int | None:
    """The initial value of the `__device__ int` called `name` (the tile size probe, compile.py); None when the
    cubin does not hold one."""
    try:
        return _device_int(cubin, name)
    except (struct.error, ValueError, IndexError):
        return None


def _device_int(elf: bytes, name: str) -> int | None:
    headers = _headers(elf)
    if headers is None:
        return None
    for _, at, strings in symbol_entries(elf, headers):
        label, _, _, section, value, length = struct.unpack_from("<IBBHQQ", elf, at)
        if not label or length != 4 or not _equals(elf, strings + label, name) or section >= len(headers):
            continue
        _, section_kind, data, data_size, _ = headers[section]
        if section_kind != 1 or value + 4 > data_size or data + value + 4 > len(elf):  # PROGBITS only
            return None
        return struct.unpack_from("<i", elf, data + value)[0]
    return None
