"""Where the tile size comes from when no macro of `kernel.tile_macros` names it: the extent of the
kernel's first two-dimensional `__shared__` tile, when that extent is a number, a macro of another name
(`#define TW 16`), or an integer constant declared at file scope (`const int TILE = 16;`, `constexpr
int`, `static const unsigned`).

Only such a name is returned: the compiler evaluates it at file scope, after the file, so a constant
declared inside the kernel (which the probe could not see) is never offered.
"""
from __future__ import annotations

from tree_sitter import Node

from . import cuda_syntax as cs

INTEGER_TYPES = {"int", "unsigned", "unsigned int", "long", "size_t", "short", "unsigned long"}


def tile_constant(source: str, kernel_name: str) -> str:
    """The first dimension of the kernel's first 2-D __shared__ array, as a name or number the file's
    scope can evaluate; "" when there is none."""
    root = cs.parse(source).root_node
    kernel = next((f for f in cs.function_definitions(root) if cs.function_name(f) == kernel_name), None)
    if kernel is None:
        return ""
    constants = _file_scope_integer_constants(root) | set(cs.macro_definitions(root))
    for node in cs.iter_live(kernel):
        if node.type != "declaration" or not _is_shared(node):
            continue
        for declarator in node.children_by_field_name("declarator"):
            extent = _first_extent(declarator)
            if extent is None:
                continue
            if extent.type == "number_literal" or (extent.type == "identifier" and cs.text(extent) in constants):
                return cs.text(extent)
            return ""  # the first tile's extent is something the probe cannot evaluate: say nothing
    return ""


def _is_shared(declaration: Node) -> bool:
    return any(c.type == "type_qualifier" and cs.text(c) == "__shared__" for c in declaration.children)


def _first_extent(declarator: Node) -> Node | None:
    """For `As[T1][T2]` the node of T1; None for anything but an array of two or more dimensions."""
    sizes = []
    while declarator is not None and declarator.type == "array_declarator":
        sizes.append(declarator.child_by_field_name("size"))
        declarator = declarator.child_by_field_name("declarator")
    return sizes[-1] if len(sizes) >= 2 else None


def _file_scope_integer_constants(root: Node) -> set[str]:
    names = set()
    for node in root.children:
        if node.type != "declaration":
            continue
        qualifiers = {cs.text(c) for c in node.children if c.type in ("type_qualifier", "storage_class_specifier")}
        kind = cs.text(node.child_by_field_name("type"))
        if not ({"const", "constexpr"} & qualifiers) or kind not in INTEGER_TYPES:
            continue
        for declarator in node.children_by_field_name("declarator"):
            if declarator.type == "init_declarator":
                name = cs.declared_name(declarator)
                if name:
                    names.add(name)
    return names
