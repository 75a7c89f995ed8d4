"""The device side of a submission: its kernels, device functions, device globals and preprocessor lines.

Host code (a `basicSgemm` wrapper, `main`, host globals, C++ host headers) is blanked out character by
character, so every line and column of what remains is where the student wrote it. The CPU backend
compiles only this; the GPU path falls back to it when the whole file does not compile (host code that needs
a library the grader does not have: libwb's wb.h, a course's own header).
"""
from __future__ import annotations

from collections.abc import Iterable

from tree_sitter import Node

from . import cuda_syntax as cs

HOST_CODE_LEFT_OUT = "host code left out: the whole file does not compile, and only the kernel is graded"
DEVICE_KEYWORDS = ("__global__", "__device__")
DEVICE_STORAGE = ("__device__", "__constant__", "__shared__", "__managed__")
# C++ forms of C headers, which device code uses too (cmath's functions); any other header without `.h`
# (iostream, vector, ...) serves only host code.
C_COMPATIBLE_HEADERS = frozenset({"cstdio", "cmath", "cstdlib", "cstdint", "cfloat", "climits", "cassert", "cstring"})
_CONTAINERS = ("namespace_definition", "declaration_list", "linkage_specification", "preproc_if", "preproc_ifdef",
               "preproc_else", "preproc_elif", "preproc_elifdef")


def device_side(source: str, handed_in: Iterable[str] = ()) -> str:
    """`handed_in`: the headers handed in with the file, whose #include lines stay (device code may be in them)."""
    tree = cs.parse(source)
    data = bytearray(source.encode("utf-8", "replace"))
    for node in _host_parts(tree.root_node, frozenset(handed_in)):
        _blank(data, node.start_byte, node.end_byte)
    return data.decode("utf-8", "replace")


def device_identifiers(source: str, handed_in: Iterable[str] = ()) -> set[str]:
    """The names the device side's code mentions, and those in the bodies of the macros it uses (an error-check
    macro of cuBLAS calls used by host code alone is no use of cuBLAS)."""
    root = cs.parse(device_side(source, handed_in)).root_node
    names = cs.code_identifiers(root)
    macros = cs.macro_definitions(root)
    pending = names & macros.keys()
    while pending:
        mentioned = set(cs.WORD.findall(macros[pending.pop()]))
        pending |= (mentioned - names) & macros.keys()
        names |= mentioned
    return names


def _host_parts(container: Node, handed_in: frozenset[str]) -> list[Node]:
    parts: list[Node] = []
    for node in container.children:
        if node.type in _CONTAINERS:
            parts.extend(_host_parts(node, handed_in))
        elif node.type == "function_definition" and not _is_device_function(node):
            parts.append(node)
        elif node.type == "template_declaration" and _templated_host_function(node):
            parts.append(node)
        elif node.type == "declaration" and _is_host_declaration(node):
            parts.append(node)
        elif node.type == "preproc_include" and _is_host_header(node, handed_in):
            parts.append(node)
    return parts


def _is_device_function(function: Node) -> bool:
    return any(cs.has_keyword(function, keyword) for keyword in DEVICE_KEYWORDS)


def _templated_host_function(template: Node) -> bool:
    inner = next((c for c in template.named_children if c.type == "function_definition"), None)
    return inner is not None and not _is_device_function(inner)


def _is_host_declaration(declaration: Node) -> bool:
    """Host globals and host prototypes; device globals and compile-time constants stay."""
    words = {cs.text(c) for c in declaration.children if c.type in ("type_qualifier", *DEVICE_STORAGE)}
    words |= {c.type for c in declaration.children}
    if words & {*DEVICE_STORAGE, *DEVICE_KEYWORDS}:
        return False
    return not words & {"const", "constexpr"} or _declares_function(declaration)


def _declares_function(declaration: Node) -> bool:
    return any(d.type == "function_declarator" for d in declaration.children_by_field_name("declarator"))


def _is_host_header(include: Node, handed_in: frozenset[str]) -> bool:
    name = cs.header_name(include)
    if cs.text(include.child_by_field_name("path")).startswith('"') and name in handed_in:
        return False
    return not name.endswith(".h") and name not in C_COMPATIBLE_HEADERS


def _blank(data: bytearray, start: int, end: int) -> None:
    for index in range(start, end):
        if data[index] not in b"\r\n":
            data[index] = 0x20
