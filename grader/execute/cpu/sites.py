"""The instrumented global accesses (sites) and the tile loop, as the student wrote them.

instrument.py numbers each load and store through a pointer parameter (`B[(p * TILE_SIZE + ty) * n + col]`)
in the order it meets them; the emulator's reports name a site by that number, and the parent, which finds
the same sites in the same source (`sites_of`), tells the student the line, the expression and its guard.
No text a report carries is ever shown: student code shares the harness's process and could have written it.

An index of the form `X * S + Y` (or `Y + X * S`), S a size parameter of the function, X free of side effects,
is the element [X][Y] of a matrix whose rows are S long: the emulator checks X, Y and S against the matrix the
pointer points at (cuda_emu.h, `site_access`). Its guard is what must hold for it to run (an enclosing `if`,
`?:` or `&&`), and the bounds that guard keeps (`col < n` keeps `col` below `n`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from ...source import cuda_syntax as cs

MAX_SITES = 256  # sites past these get the plain wrappers (instrument.py); protocol.py bounds the reports by it
LOAD, STORE, UPDATE = "load", "store", "update"  # an update: a compound assignment or ++/-- (read, then store)
_ARITHMETIC = frozenset({"+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^"})
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Site:
    index: int
    line: int
    matrix: str  # the pointer parameter, as written: "B"
    access: str  # LOAD, STORE or UPDATE
    expression: str  # "B[(p * TILE_SIZE + ty) * n + col]"
    operator: str = ""  # an update's: "+=", "++"
    row: str = ""  # X, S and Y of an index X * S + Y ("" where it is not of that form)
    stride: str = ""
    column: str = ""
    guard: str = ""  # the conditions it runs under, as written: "row < m && tx < k"
    bounded: frozenset[tuple[str, str]] = frozenset()  # (expression, size) pairs the guard keeps below
    row_line: int = 0  # the line that defines X (its declaration in the function), else the site's

    @property
    def indexed(self) -> bool:
        return bool(self.stride)

    def keeps(self, expression: str, size: str) -> bool:
        """Whether the guard keeps `expression` below `size` (`col < n`, or `col >= n` on the other branch)."""
        return (normal(expression), normal(size)) in self.bounded


@dataclass(frozen=True)
class TileLoop:
    line: int
    end_line: int
    condition: str  # as written: "p < numPhases" ("" for none)
    names: frozenset[str] = frozenset()  # what the condition depends on, through the function's assignments
    # Conditions inside an inner loop of it that test the thread's own index and not that loop's (`if (p * TILE +
    # tx < k)` in `for (i ...)`): (line, condition as written, the loop's variable, the thread's name it tests).
    thread_guards: tuple[tuple[int, str, str, str], ...] = ()

    def holds(self, line: int) -> bool:
        return self.line <= line <= self.end_line


@dataclass(frozen=True)
class Sites:
    sites: tuple[Site, ...] = ()
    tile_loop: TileLoop | None = None  # the graded kernel's (the first kernel's that has one)

    def site(self, index: object) -> Site | None:
        return self.sites[index] if isinstance(index, int) and 0 <= index < len(self.sites) else None


NO_SITES = Sites()


def normal(text: str) -> str:
    """An expression's text without spaces or outer parentheses, to compare two spellings of it."""
    return bare(_SPACE.sub("", text))


def bare(text: str) -> str:
    """An expression's text without its outer parentheses: `(p * T + ty)` is `p * T + ty`."""
    text = text.strip()
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def unparenthesized(node: Node) -> Node:
    while node.type in ("parenthesized_expression", "condition_clause") and node.named_child_count == 1:
        node = node.named_children[0]
    return node


def _operator(node: Node) -> str:
    return cs.text(node.child_by_field_name("operator"))


# --- one site ---------------------------------------------------------------------------------------------


def describe(node: Node, index: int, access: str, sizes: set[str], function: Node) -> tuple[Site, tuple[str, str]]:
    """The site of subscript `node` (through a pointer parameter), and the texts of its X and S for the
    emulator (("", "") where the index is not X * S + Y with X free of side effects)."""
    indices = node.child_by_field_name("indices")
    index_node = indices.named_children[0] if indices is not None and indices.named_child_count == 1 else None
    parts = _row_stride_column(index_node, sizes) if index_node is not None else None
    operator = _operator(node.parent) if access == UPDATE else ""
    guard, bounded = _guard(node, function.child_by_field_name("body"))
    site = Site(index, cs.line(node), cs.text(node.child_by_field_name("argument")), access, cs.text(node),
                operator, guard=guard, bounded=bounded, row_line=cs.line(node))
    if parts is None:
        return site, ("", "")
    row, stride, column = parts
    site = Site(site.index, site.line, site.matrix, access, site.expression, operator, cs.text(row), cs.text(stride),
                column, guard, bounded, _defined_at(row, function) or site.line)
    return site, (cs.text(row), cs.text(stride))


def _terms(node: Node, sign: int = 1) -> list[tuple[int, Node]]:
    """The terms of a sum, with their signs: `a * n + b - c` is [(+, a * n), (+, b), (-, c)]."""
    node = unparenthesized(node)
    if node.type == "binary_expression" and _operator(node) in ("+", "-"):
        right = -sign if _operator(node) == "-" else sign
        return _terms(node.child_by_field_name("left"), sign) + _terms(node.child_by_field_name("right"), right)
    return [(sign, node)]


def _row_stride_column(index: Node, sizes: set[str]) -> tuple[Node, Node, str] | None:
    """(X, S, Y's text) of an index X * S + Y: exactly one term is X times a size parameter S."""
    terms, found = _terms(index), []
    for position, (sign, term) in enumerate(terms):
        if term.type != "binary_expression" or _operator(term) != "*" or sign < 0:
            continue
        left, right = term.child_by_field_name("left"), term.child_by_field_name("right")
        for row, stride in ((left, right), (right, left)):
            if unparenthesized(stride).type == "identifier" and cs.text(unparenthesized(stride)) in sizes:
                found.append((position, row, unparenthesized(stride)))
                break
    if len(found) != 1 or not _pure(found[0][1]):
        return None
    position, row, stride = found[0]
    rest = [(sign, cs.text(term)) for at, (sign, term) in enumerate(terms) if at != position]
    column = "".join(f"{'-' if sign < 0 else ''}{text}" if i == 0 else f" {'-' if sign < 0 else '+'} {text}"
                     for i, (sign, text) in enumerate(rest))
    return row, stride, column or "0"


def _pure(node: Node) -> bool:
    """Whether evaluating the expression again changes nothing: names, numbers, fields (threadIdx.x) and
    arithmetic on them; no call, assignment, increment or memory access."""
    kind = node.type
    if kind in ("identifier", "number_literal"):
        return True
    if kind == "field_expression":
        return node.child_by_field_name("argument").type == "identifier"
    if kind == "parenthesized_expression":
        return node.named_child_count == 1 and _pure(node.named_children[0])
    if kind == "binary_expression":
        sides = (node.child_by_field_name("left"), node.child_by_field_name("right"))
        return _operator(node) in _ARITHMETIC and all(_pure(side) for side in sides)
    if kind == "unary_expression":
        return _operator(node) in ("-", "+") and _pure(node.child_by_field_name("argument"))
    return False


def _defined_at(row: Node, function: Node) -> int:
    """The line of the declaration of X in the function when X is a name (`int row = ...`), else 0."""
    row = unparenthesized(row)
    if row.type != "identifier":
        return 0
    for node in cs.iter_live(function):
        if node.type == "init_declarator" and cs.declared_name(node.child_by_field_name("declarator")) == cs.text(row):
            return cs.line(node)
    return 0


# --- its guard --------------------------------------------------------------------------------------------


def _guard(node: Node, body: Node | None) -> tuple[str, frozenset[tuple[str, str]]]:
    """What must hold for `node` to run (outermost first), and the bounds that keeps."""
    said: list[str] = []
    bounded: set[tuple[str, str]] = set()
    child = node
    for parent in cs.ancestors(node, body):
        held = _held(parent, child)
        if held is not None and cs.constant_value(held[0]) is None:  # `if (1)` guards nothing
            condition, taken = held
            said.append(cs.text(condition) if taken else f"!({cs.text(condition)})")
            bounded |= _bounds(condition, taken)
        child = parent
    return " && ".join(reversed(said)), frozenset(bounded)


def _held(parent: Node, child: Node) -> tuple[Node, bool] | None:
    """(condition, whether it is true there) when `parent` runs `child` only on one outcome of a condition."""
    kind = parent.type
    if kind in ("if_statement", "conditional_expression"):
        condition = parent.child_by_field_name("condition")
        if child == parent.child_by_field_name("consequence"):
            return unparenthesized(condition), True
        if child == parent.child_by_field_name("alternative"):  # an if's is its else_clause
            return unparenthesized(condition), False
    if kind == "binary_expression" and _operator(parent) == "&&" and child == parent.child_by_field_name("right"):
        return unparenthesized(parent.child_by_field_name("left")), True
    return None


def _bounds(condition: Node, taken: bool) -> set[tuple[str, str]]:
    """(E, N) for each `E < N` (or `N > E`) that holds: conjuncts of a true condition, the negated disjuncts
    (`E >= N`) of a false one."""
    parts, found = _parts(condition, "&&" if taken else "||"), set()
    for part in parts:
        if part.type != "binary_expression":
            continue
        left, right = (normal(cs.text(part.child_by_field_name(side))) for side in ("left", "right"))
        below = {"<": (left, right), ">": (right, left)} if taken else {">=": (left, right), "<=": (right, left)}
        if _operator(part) in below:
            found.add(below[_operator(part)])
    return found


def _parts(node: Node, operator: str) -> list[Node]:
    node = unparenthesized(node)
    if node.type == "binary_expression" and _operator(node) == operator:
        return _parts(node.child_by_field_name("left"), operator) + _parts(node.child_by_field_name("right"), operator)
    return [node]


def tile_loop_of(loop: Node, function: Node) -> TileLoop:
    condition = loop.child_by_field_name("condition")
    guards = _thread_guards(loop, function)
    if condition is None:
        return TileLoop(cs.line(loop), cs.end_line(loop), "", thread_guards=guards)
    return TileLoop(cs.line(loop), cs.end_line(loop), cs.text(unparenthesized(condition)),
                    _depends_on(condition, function), guards)


def _thread_guards(loop: Node, function: Node) -> tuple[tuple[int, str, str, str], ...]:
    """Each `if` inside an inner loop of the tile loop whose condition reads a name of the thread's index (tx,
    from threadIdx) but not the inner loop's own variable: it keeps or drops a whole phase per thread."""
    body, found = loop.child_by_field_name("body"), []
    for inner in (n for n in cs.iter_live(body) if n.type == "for_statement") if body is not None else ():
        counter = cs.identifier_names(inner.child_by_field_name("update") or inner) & cs.identifier_names(
            inner.child_by_field_name("condition") or inner)
        for branch in (n for n in cs.iter_live(inner) if n.type == "if_statement"):
            condition = branch.child_by_field_name("condition")
            read = cs.identifier_names(condition)
            thread = sorted(name for name in read if name == "threadIdx" or "threadIdx" in _depends_on_name(
                name, function))
            if len(counter) == 1 and thread and not read & counter:
                found.append((cs.line(branch), cs.text(unparenthesized(condition)), min(counter), thread[0]))
    return tuple(found)


def _depends_on_name(name: str, function: Node) -> frozenset[str]:
    return _depends_on_names({name}, function)


def _depends_on(node: Node, function: Node) -> frozenset[str]:
    """The names an expression reads, and those the values assigned to them read (`numPhases = k / TILE`)."""
    return _depends_on_names(cs.identifier_names(node), function)


def _depends_on_names(read: set[str], function: Node) -> frozenset[str]:
    values: dict[str, list[Node]] = {}
    for found in cs.iter_live(function):
        if found.type == "init_declarator" and found.child_by_field_name("value") is not None:
            name = cs.declared_name(found.child_by_field_name("declarator"))
            values.setdefault(name, []).append(found.child_by_field_name("value"))
        elif found.type == "assignment_expression" and found.child_by_field_name("left").type == "identifier":
            values.setdefault(cs.text(found.child_by_field_name("left")), []).append(found.child_by_field_name("right"))
    names, pending = set(), list(read)
    while pending:
        name = pending.pop()
        if name not in names:
            names.add(name)
            pending += [used for value in values.get(name, ()) for used in cs.identifier_names(value)]
    return frozenset(names)
