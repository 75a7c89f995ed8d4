"""What sizes a kernel's shared tiles, as an expression the file's scope can evaluate: the grader's probe,
appended after the file, hands it to the compiler (contract.TileSource).

Real labs size their tiles every way: a macro of any name (`#define TW 16`), a number, an integer constant
at file scope (`const int TILE = 16;`, `constexpr int`, `static const unsigned`) or inside the kernel
(`const int tileDim = 8;`), two-dimensional tiles (`As[T][T]`, `As[T][T + 1]`, double-buffered
`As[2][T][T]`: the rows of a tile) or one-dimensional ones (`ds_A[T * T]`). A constant declared inside the
kernel is invisible at file scope, so its initializer is written out instead, its own names resolved the
same way; a name that cannot be resolved (`blockDim.x`, a parameter) gives nothing.
"""
from __future__ import annotations

from tree_sitter import Node

from . import cuda_syntax as cs

INTEGER_TYPES = {"int", "unsigned", "unsigned int", "long", "size_t", "short", "unsigned long"}
# Expression nodes an extent may be made of: the compiler evaluates them at file scope once names resolve.
_ARITHMETIC = {"number_literal", "identifier", "binary_expression", "parenthesized_expression"}
MAX_DEPTH = 8  # constants defined through constants, at most this deep


def tile_constant(source: str, kernel_name: str) -> str:
    """The tile size of the kernel's first __shared__ tile, as file-scope C text (a number, a name, or an
    expression in parentheses); "" when no tile is sized by something the file's scope can evaluate."""
    root = cs.parse(source).root_node
    kernel = next((f for f in cs.function_definitions(root) if cs.function_name(f) == kernel_name), None)
    if kernel is None:
        return ""
    scope = _Names(set(cs.source_macros(source)) | _file_scope_integer_constants(root), _local_constants(kernel))
    for node in cs.iter_live(kernel):
        if node.type != "declaration" or not _is_shared(node):
            continue
        for declarator in node.children_by_field_name("declarator"):
            extent = _tile_extent(declarator)
            if extent is not None:
                return scope.resolve(extent) or ""  # the first tile decides, evaluable or not
    return ""


def launched_without_tile_size(source: str, kernel_name: str, macros: tuple[str, ...]) -> bool:
    """Whether the grader launches this file with the config's block size: nothing sizes its shared tiles
    and it defines none of the lab's tile size macros."""
    defined = cs.source_macros(source)
    return not tile_constant(source, kernel_name) and not any(name in defined for name in macros)


class _Names:
    """Which names an extent may use: file-scope ones as they are, the kernel's constants written out."""

    def __init__(self, file_scope: set[str], local: dict[str, Node]) -> None:
        self.file_scope, self.local = file_scope, local

    def resolve(self, node: Node, depth: int = 0) -> str | None:
        if depth > MAX_DEPTH or any(n.type not in _ARITHMETIC and n.is_named for n in _nodes(node)):
            return None
        pieces, position, start = [], node.start_byte, node.start_byte
        for name in (n for n in _nodes(node) if n.type == "identifier"):
            value = self._value(cs.text(name), depth)
            if value is None:
                return None
            pieces += [_between(node, position - start, name.start_byte - start), value]
            position = name.end_byte
        pieces.append(_between(node, position - start, node.end_byte - start))
        text = "".join(pieces).strip()
        return text if node.type in ("number_literal", "identifier") and text == cs.text(node) else f"({text})"

    def _value(self, name: str, depth: int) -> str | None:
        if name in self.local:  # a kernel's constant shadows a file-scope name
            return self.resolve(self.local[name], depth + 1)
        return name if name in self.file_scope else None


def _nodes(node: Node) -> list[Node]:
    return [n for n in cs.iter_live(node) if n.is_named]


def _between(node: Node, start: int, end: int) -> str:
    return node.text[start:end].decode("utf-8", "replace") if node.text is not None else ""


def _is_shared(declaration: Node) -> bool:
    return any(c.type == "type_qualifier" and cs.text(c) == "__shared__" for c in declaration.children)


def _tile_extent(declarator: Node) -> Node | None:
    """The node that gives a tile's rows: T of `As[T][U]` (and of `As[2][T][U]`), T of a 1-D `As[T * T]`;
    None for anything else (`extern __shared__ float s[]`, a 1-D array of another size)."""
    sizes = []  # innermost dimension first
    while declarator is not None and declarator.type == "array_declarator":
        sizes.append(declarator.child_by_field_name("size"))
        declarator = declarator.child_by_field_name("declarator")
    if len(sizes) >= 2:
        return sizes[1]
    if len(sizes) == 1 and sizes[0] is not None:
        return _square_root(sizes[0])
    return None


def _square_root(extent: Node) -> Node | None:
    """T of `T * T` (parentheses around either side allowed)."""
    while extent.type == "parenthesized_expression" and extent.named_child_count == 1:
        extent = extent.named_children[0]
    if extent.type != "binary_expression" or cs.text(extent.child_by_field_name("operator")) != "*":
        return None
    left, right = extent.child_by_field_name("left"), extent.child_by_field_name("right")
    return left if cs.text(left).replace(" ", "") == cs.text(right).replace(" ", "") else None


def _integer_constant_names(declaration: Node) -> dict[str, Node]:
    """name -> initializer of each `const`/`constexpr` integer a declaration introduces."""
    qualifiers = {cs.text(c) for c in declaration.children if c.type in ("type_qualifier", "storage_class_specifier")}
    kind = cs.text(declaration.child_by_field_name("type"))
    if not ({"const", "constexpr"} & qualifiers) or kind not in INTEGER_TYPES:
        return {}
    found = {}
    for declarator in declaration.children_by_field_name("declarator"):
        value = declarator.child_by_field_name("value") if declarator.type == "init_declarator" else None
        name = cs.declared_name(declarator)
        if name and value is not None:
            found[name] = value
    return found


def _file_scope_integer_constants(root: Node) -> set[str]:
    names: set[str] = set()
    for node in root.children:
        if node.type == "declaration":
            names |= set(_integer_constant_names(node))
    return names


def _local_constants(kernel: Node) -> dict[str, Node]:
    found: dict[str, Node] = {}
    for node in cs.iter_live(kernel.child_by_field_name("body")):
        if node.type == "declaration" and not _is_shared(node):
            found.update(_integer_constant_names(node))
    return found
