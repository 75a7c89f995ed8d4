"""Rewrites shared-array accesses so the CPU emulator sees every load and store of shared memory.

`As[ty][tx] = v` becomes `CUDA_EMU_WRITE(As[ty][tx]) = v`, a read becomes `CUDA_EMU_READ(...)`, `+=` and
`++` become `CUDA_EMU_UPDATE(...)`, and each `__shared__` declaration registers its array. A store through
any other subscript (`acc[i] = v`) becomes `CUDA_EMU_STORE(...)`, and one straight through a pointer parameter
(`C[row * n + col] = sum`) a site's `CUDA_EMU_STORE_AT` (below), so the emulator knows which thread stored each
element of C; a load through one of the function's pointer parameters (`A[row * k + col]`) is a site's
`CUDA_EMU_LOAD_AT`, so a profile run sees each global load (`CUDA_EMU_LOAD` past the last site number; a load
through a local copy of the pointer is not seen). Each statement
of a block starts with `CUDA_EMU_AT(__LINE__);`, so a fault is told with the line the thread was on. Only
text is inserted, never a newline, so lines stay the student's. Accesses through pointers or macros are not
seen; the schedule comparison still catches the races they cause.

`extern __shared__ float smem[];` (dynamic shared memory) becomes `__shared__ float *const smem =
CUDA_EMU_DYNAMIC_SHARED(smem);`, a pointer to the emulator's one dynamic buffer (every such array aliases it,
as on the GPU): `extern` and `[]` are blanked with spaces, so columns and lines stay.

Given `sections` (build.py: statics.statics_tag), each registered shared array, each such pointer and each
`__constant__` variable is put in a section of its own named after it (`<sections>.<n>`), which is how
statics.py tells them from the student's state; one section each, so no two objects of different kinds (an
inline function's, a const one) ever share one, which g++ refuses.

A load or store through a pointer parameter is a site (sites.py): `CUDA_EMU_LOAD_AT(3, B, (p * T + ty), (n),
B[(p * T + ty) * n + col])` gives the emulator the site's number and, for an index X * S + Y, X and S, so it
sees which element of which matrix each thread meant; a compound store (`C[i] += v`) is `CUDA_EMU_UPDATE_AT`,
a read of C before it. The tile loop (static_check.py finds it) is marked: `CUDA_EMU_TILE_LOOP();` before it
and `CUDA_EMU_TRIP();` first in its body, so the emulator counts each thread's trips.
"""
from __future__ import annotations

import threading
from collections import OrderedDict

from tree_sitter import Node

from ...source import cuda_syntax as cs
from ...source.static_check import tile_loop_spans
from . import sites as sites_

READ, WRITE, UPDATE, AT = "CUDA_EMU_READ", "CUDA_EMU_WRITE", "CUDA_EMU_UPDATE", "CUDA_EMU_AT"
STORE, LOAD = "CUDA_EMU_STORE", "CUDA_EMU_LOAD"
# A site's wrapper, by what the access does (sites.py)
AT_SITE = {sites_.LOAD: "CUDA_EMU_LOAD_AT", sites_.STORE: "CUDA_EMU_STORE_AT", sites_.UPDATE: "CUDA_EMU_UPDATE_AT"}
TILE_LOOP, TRIP = "CUDA_EMU_TILE_LOOP();", "CUDA_EMU_TRIP();"
# The sites of the last few texts instrumented in this process (they do not depend on `sections`): a grade's build
# of the emulation, on a thread of its own (build_ahead.py), numbers the very sites the judge's reading of the
# emulator's reports asks for (sites_of), in the same device side. Sites are frozen: sharing them is safe.
SITES_KEPT = 8
_sites: OrderedDict[str, sites_.Sites] = OrderedDict()
_sites_lock = threading.Lock()


class Sections:
    """The section attribute for each next object the grader places (none without a prefix)."""

    def __init__(self, prefix: str):
        self.prefix, self.count = prefix, 0

    def attribute(self) -> str:
        if not self.prefix:
            return ""
        self.count += 1
        return f' __attribute__((section("{self.prefix}.{self.count}")))'


def instrument(source: str, sections: str = "") -> str:
    return instrumented(source, sections)[0]


def sites_of(source: str) -> sites_.Sites:
    """The sites the emulator's reports number, as instrument numbers them in the same (device-side) source: kept
    from this process's instrumenting of it where there was one."""
    with _sites_lock:
        kept = _sites.get(source)
    return kept if kept is not None else instrumented(source)[1]


def _keep(source: str, sites: sites_.Sites) -> sites_.Sites:
    with _sites_lock:
        _sites[source] = sites
        _sites.move_to_end(source)
        while len(_sites) > SITES_KEPT:
            _sites.popitem(last=False)
    return sites


def instrumented(source: str, sections: str = "") -> tuple[str, sites_.Sites]:
    tree = cs.parse(source)
    placed = Sections(sections)
    blanks, insertions, dynamic = _dynamic_shared(tree.root_node, placed)
    insertions += _constant_sections(tree.root_node, placed)
    found: list[sites_.Site] = []
    loops = _tile_loops(tree.root_node, source)
    for function in cs.function_definitions(tree.root_node):
        body = function.child_by_field_name("body")
        if body is not None:
            insertions.extend(_function_insertions(body, dynamic, _pointer_parameters(function), placed,
                                                   _Sites(function, found)))
            insertions.extend(_trip_marks(loops, function))
    data = bytearray(source.encode("utf-8", "replace"))
    for start, end in blanks:
        data[start:end] = b" " * (end - start)
    tile_loop = next((sites_.tile_loop_of(loop, function) for loop in loops
                      for function in cs.function_definitions(tree.root_node) if cs.contains(function, loop)), None)
    sites = _keep(source, sites_.Sites(tuple(found), tile_loop))
    return cs.insert_text(data.decode("utf-8", "replace"), insertions), sites


def _tile_loops(root: Node, source: str) -> list[Node]:
    """Each kernel's tile loop whose body is a block (the marks go in it), in file order."""
    spans = set(tile_loop_spans(source))
    return [node for node in cs.iter_live(root) if node.type in cs.LOOP_TYPES
            and (node.start_byte, node.end_byte) in spans
            and getattr(node.child_by_field_name("body"), "type", "") == "compound_statement"]


def _trip_marks(loops: list[Node], function: Node) -> list[tuple[int, str]]:
    """A thread reaching a tile loop of the function starts counting its trips; each trip counts one."""
    marks = []
    for loop in (loop for loop in loops if cs.contains(function, loop)):
        marks += [(loop.start_byte, f"{TILE_LOOP} "), (loop.child_by_field_name("body").start_byte + 1, f" {TRIP}")]
    return marks


class _Sites:
    """The sites of one function, numbered on from those before it."""

    def __init__(self, function: Node, found: list[sites_.Site]):
        self.function, self.found = function, found
        self.sizes = {name for name, levels in cs.parameters(function) if name and levels == 0}

    def wrapper(self, node: Node, access: str) -> str | None:
        """The site wrapper's opening for subscript `node` through a pointer parameter, or None past MAX_SITES."""
        if len(self.found) >= sites_.MAX_SITES:
            return None
        site, (row, stride) = sites_.describe(node, len(self.found), access, self.sizes, self.function)
        self.found.append(site)
        return f"{AT_SITE[access]}({site.index}, {site.matrix}, ({row or 0}), ({stride or 0}), "


def _constant_sections(root: Node, placed: Sections) -> list[tuple[int, str]]:
    """A section of its own for each `__constant__` variable defined outside functions."""
    insertions = []
    for node in cs.iter_live(root, no_descend=("function_definition",)):
        if node.type == "declaration" and _has_qualifier(node, "__constant__") and not _is_extern(node):
            insertions += [(_attribute_place(d), placed.attribute()) for d in node.children_by_field_name("declarator")]
    return [(at, text) for at, text in insertions if text]


def _attribute_place(declarator: Node) -> int:
    """Where an attribute of a declarator goes: after its name and array sizes, before any initializer."""
    if declarator.type == "init_declarator":
        declarator = declarator.child_by_field_name("declarator") or declarator
    return declarator.end_byte


def _dynamic_shared(root: Node, placed: Sections) -> tuple[list[tuple[int, int]], list[tuple[int, str]], set[str]]:
    """(byte ranges to blank, insertions, names) that make each `extern __shared__ T name[]` a pointer to the
    emulator's dynamic shared buffer."""
    blanks: list[tuple[int, int]] = []
    insertions: list[tuple[int, str]] = []
    names: set[str] = set()
    for node in cs.iter_live(root):
        if node.type != "declaration" or not _is_shared(node) or not _is_extern(node):
            continue
        blanks += [(c.start_byte, c.end_byte) for c in node.children if c.type == "storage_class_specifier"]
        for array in _unsized_arrays(node):
            name = array.child_by_field_name("declarator")
            names.add(cs.text(name))
            blanks.append((name.end_byte, array.end_byte))
            initializer = f"{placed.attribute()} = CUDA_EMU_DYNAMIC_SHARED({cs.text(name)})"
            insertions += [(array.start_byte, "*const "), (array.end_byte, initializer)]
    return blanks, insertions, names


def _unsized_arrays(declaration: Node) -> list[Node]:
    """The `name[]` declarators of a declaration (also where `__align__(16)` confuses the parser)."""
    found, stack = [], list(declaration.children)
    while stack:
        node = stack.pop()
        declarator = node.child_by_field_name("declarator") if node.type == "array_declarator" else None
        if declarator is not None and declarator.type == "identifier" and node.child_by_field_name("size") is None:
            found.append(node)
        else:
            stack.extend(node.children)
    return found


def _is_extern(declaration: Node) -> bool:
    return any(c.type == "storage_class_specifier" and cs.text(c) == "extern" for c in declaration.children)


# Statements marked with their line: those directly in a block, and the unbraced body of an if, an else or a
# loop, which gets braces around its mark (a mark before it would end up outside it), so a fault in
# `if (...)\n    As[ty][tx] = A[...];` is told at the load's line, not the if's.
MARKED_STATEMENTS = ("expression_statement", "declaration", "if_statement", "for_statement", "while_statement",
                     "do_statement", "return_statement")
BODY_FIELDS = {"if_statement": "consequence", "for_statement": "body", "while_statement": "body",
               "do_statement": "body", "for_range_loop": "body"}


def _pointer_parameters(function: Node) -> set[str]:
    """The names of the function's parameters that are pointers (or arrays) of one level: `const float *A`."""
    return {name for name, levels in cs.parameters(function) if name and levels == 1}


def _function_insertions(body: Node, dynamic: set[str], parameters: set[str] = frozenset(),
                         placed: Sections | None = None, sites: _Sites | None = None) -> list[tuple[int, str]]:
    arrays: dict[str, int] = dict.fromkeys(dynamic, 1)  # name -> dimensions
    insertions: list[tuple[int, str]] = []
    placed = placed or Sections("")
    for node in cs.iter_live(body):
        if node.type == "declaration" and _is_shared(node) and not _is_extern(node):
            declared = []
            for declarator in node.children_by_field_name("declarator"):
                pointers, dims = cs.declarator_shape(declarator)
                name = cs.declared_name(declarator)
                if name and dims and not pointers:
                    arrays[name] = dims
                    declared.append(f" CUDA_EMU_SHARE({name});")
                    insertions.append((_attribute_place(declarator), placed.attribute()))
            insertions.append((node.end_byte, "".join(declared)))
    for node in cs.iter_live(body):
        if node.type == "subscript_expression":
            wrapper = (_access_wrapper(node, arrays) or _store_wrapper(node, arrays)
                       or _load_wrapper(node, parameters, arrays))
            opening = _site_wrapper(node, wrapper, parameters, sites) if wrapper in (STORE, LOAD) else None
            if wrapper:
                insertions += [(node.start_byte, opening or wrapper + "("), (node.end_byte, ")")]
    # Last: of two insertions at one place the later lands first, and the mark goes before an access's macro.
    for node in cs.iter_live(body):
        if node.type not in MARKED_STATEMENTS or node.parent is None:
            continue
        if node.parent.type == "compound_statement":
            insertions.append((node.start_byte, f"{AT}(__LINE__); "))
        elif _unbraced_body(node):
            insertions += [(node.start_byte, f"{{ {AT}(__LINE__); "), (node.end_byte, " }")]
    return insertions


def _site_wrapper(node: Node, wrapper: str, parameters: set[str], sites: _Sites | None) -> str | None:
    """A site's wrapper for a load or store straight through a pointer parameter (`B[...]`, not `p[...]`)."""
    base = node.child_by_field_name("argument")
    if sites is None or base is None or base.type != "identifier" or cs.text(base) not in parameters:
        return None
    if wrapper == LOAD:
        return sites.wrapper(node, sites_.LOAD)
    parent = node.parent
    plain = parent.type == "assignment_expression" and cs.text(parent.child_by_field_name("operator")) == "="
    return sites.wrapper(node, sites_.STORE if plain else sites_.UPDATE)


def _unbraced_body(node: Node) -> bool:
    """The statement an if, an else or a loop runs, written without braces (not a loop's initializer)."""
    parent = node.parent
    if parent.type == "else_clause":
        return True
    field = BODY_FIELDS.get(parent.type)
    return field is not None and parent.child_by_field_name(field) == node


def _store_wrapper(node: Node, arrays: dict[str, int]) -> str | None:
    """STORE for the full subscript a store goes through, outside shared memory (`C[i] = v`, `C[i] += v`)."""
    parent = node.parent
    if parent is None or (parent.type == "subscript_expression" and parent.child_by_field_name("argument") == node):
        return None
    base = node
    while base is not None and base.type == "subscript_expression":
        base = base.child_by_field_name("argument")
    if base is not None and base.type == "identifier" and cs.text(base) in arrays:
        return None  # a shared array's own wrapper, or a row of it
    stored = parent.type == "update_expression" or (
        parent.type == "assignment_expression" and parent.child_by_field_name("left") == node)
    return STORE if stored else None


def _load_wrapper(node: Node, pointers: set[str], arrays: dict[str, int]) -> str | None:
    """LOAD for `P[i]` read through a pointer parameter P (called after _store_wrapper: not a store)."""
    parent, base = node.parent, node.child_by_field_name("argument")
    if base is None or base.type != "identifier" or cs.text(base) not in pointers or cs.text(base) in arrays:
        return None
    if parent is not None and parent.type == "parenthesized_expression":
        parent = parent.parent  # sizeof(A[0])
    if parent is not None and parent.type in ("pointer_expression", "sizeof_expression", "alignof_expression",
                                              "subscript_expression"):
        return None  # &A[i] is an address, sizeof(A[i]) no access; A[i][j] is not a float load
    return LOAD


def _is_shared(declaration: Node) -> bool:
    return _has_qualifier(declaration, "__shared__")


def _has_qualifier(declaration: Node, qualifier: str) -> bool:
    return any(c.type == "type_qualifier" and cs.text(c) == qualifier for c in declaration.children)


def _access_wrapper(node: Node, arrays: dict[str, int]) -> str | None:
    """The macro for a full subscript of a shared array (`As[i][j]`, not the row `As[i]`), else None."""
    parent = node.parent
    if parent is not None and parent.type == "subscript_expression" and parent.child_by_field_name("argument") == node:
        return None  # the outer subscript is the access
    base, depth = node, 0
    while base is not None and base.type == "subscript_expression":
        base, depth = base.child_by_field_name("argument"), depth + 1
    if base is None or base.type != "identifier" or arrays.get(cs.text(base)) != depth:
        return None
    kind = parent.type if parent is not None else ""
    if kind == "pointer_expression" or kind in ("sizeof_expression", "alignof_expression"):
        return None  # &As[i][j] is an address, not an access
    if kind == "update_expression":
        return UPDATE
    if kind == "assignment_expression" and parent.child_by_field_name("left") == node:
        operator = parent.child_by_field_name("operator")
        return WRITE if operator is not None and cs.text(operator) == "=" else UPDATE
    return READ
