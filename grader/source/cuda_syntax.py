"""Generic helpers over the tree-sitter CUDA grammar.

Everything here is about syntax only (parsing, dead code, declarators, conditions); what the lab asks
for lives in static_check.py. All tree walks are iterative: student files can nest arbitrarily deep.
"""
from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Iterable, Iterator

from tree_sitter import Language, Node, Parser, Tree

LOOP_TYPES = frozenset({"for_statement", "while_statement", "do_statement", "for_range_loop"})

_LOCAL = threading.local()  # a Parser must not be shared between threads (batch grading uses several)


def parser() -> Parser:
    if getattr(_LOCAL, "parser", None) is None:
        import tree_sitter_cuda

        _LOCAL.parser = Parser(Language(tree_sitter_cuda.language()))
    return _LOCAL.parser


# The trees of the last few texts parsed on this thread. Every stage that reads a submission (static check,
# declaration, tile size, host code, late-warps hooks) asks for the tree of the same text, so a
# submission's file is parsed once and the tree shared; a grade parses at most its file, the file's device
# side and the reference. Nobody edits a tree, so sharing one is safe.
TREES_KEPT = 8


def parse(source: str) -> Tree:
    """Parse CUDA source after blanking `#if 0` style groups; line numbers stay those of the file."""
    trees = _LOCAL.__dict__.setdefault("trees", OrderedDict())
    tree = trees.get(source)
    if tree is None:
        tree = trees[source] = parse_text(source)
        while len(trees) > TREES_KEPT:
            trees.popitem(last=False)
    trees.move_to_end(source)
    return tree


# `__align__(16)` among a declaration's specifiers derails the grammar (it swallows the statements after it);
# parsed as blanks of the same length, the declaration reads as without it.
_ALIGN = re.compile(r"__align__\s*\([^()\n]*\)")


def parse_text(source: str) -> Tree:
    text = blank_inactive_preprocessor(source)
    text = _ALIGN.sub(lambda match: " " * len(match.group().encode("utf-8", "replace")), text)
    return parser().parse(text.encode("utf-8", "replace"))


def insert_text(source: str, insertions: list[tuple[int, str]]) -> str:
    """The source with each (byte offset in its parse, text) inserted. Of two insertions at one offset,
    the later in the list lands first."""
    data = source.encode("utf-8", "replace")
    for position, text in sorted(insertions, key=lambda item: item[0], reverse=True):
        data = data[:position] + text.encode() + data[position:]
    return data.decode("utf-8", "replace")


# --- preprocessor -------------------------------------------------------------------------------

_DIRECTIVE = re.compile(r"[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b(.*)", re.S)
_LEX = re.compile(r"/\*|\*/|//|\"|'|\\.|\n", re.S)
_COMMENTS = re.compile(r"/\*.*?(\*/|$)|//.*", re.S)


class _Group:
    """One open #if group: kind is "const" (we know which branch is live), "opaque" or "dead"."""

    __slots__ = ("kind", "active", "taken")

    def __init__(self, kind: str, active: bool, taken: bool) -> None:
        self.kind, self.active, self.taken = kind, active, taken


def blank_inactive_preprocessor(source: str) -> str:
    """Empty the lines of branches under a constant false #if/#elif (and the directives of such groups).

    Done on text rather than on the tree because a dead branch may hold unbalanced braces; lines are
    emptied, not removed, so reported line numbers stay those of the student's file.
    """
    lines = source.split("\n")
    in_comment = _lines_starting_in_comment(source)
    groups: list[_Group] = []
    out: list[str] = []
    continued = False
    for number, line in enumerate(lines):
        match = None if (continued or number in in_comment) else _DIRECTIVE.match(line)
        continued = line.rstrip("\r").endswith("\\")
        if match is None:
            out.append(line if all(g.active for g in groups) else "")
        else:
            out.append(_directive(groups, match.group(1), match.group(2), line))
    return "\n".join(out)


def _directive(groups: list[_Group], word: str, argument: str, line: str) -> str:
    """Update the group stack for one directive; return the line to keep ("" to blank it)."""
    live = all(g.active for g in groups)
    if word in ("if", "ifdef", "ifndef"):
        value = _constant_condition(argument) if word == "if" else None
        if not live:
            groups.append(_Group("dead", False, True))
            return ""
        if value is None:
            groups.append(_Group("opaque", True, True))
            return line
        groups.append(_Group("const", value, value))
        return ""
    if not groups:  # unbalanced: leave it to the parser
        return line
    group = groups[-1]
    outer_live = all(g.active for g in groups[:-1])
    if word == "endif":
        groups.pop()
        return line if group.kind == "opaque" and outer_live else ""
    if group.kind == "dead" or not outer_live:
        return ""
    if group.kind == "opaque":
        return line
    if word == "else" or group.taken:
        group.active = not group.taken
        group.taken = True
        return ""
    value = _constant_condition(argument)
    if value is None:  # `#if 0 ... #elif FOO`: from here on the group is an ordinary #if FOO
        group.kind, group.active, group.taken = "opaque", True, True
        return re.sub(r"#[ \t]*elif", "#if", line, count=1)
    group.active = group.taken = value
    return ""


def _constant_condition(argument: str) -> bool | None:
    expr = _COMMENTS.sub(" ", argument).strip()
    while expr.startswith("(") and expr.endswith(")"):
        expr = expr[1:-1].strip()
    if expr in ("true", "false"):
        return expr == "true"
    return _number_value(expr)


def _number_value(literal: str) -> bool | None:
    """Truth value of an integer or floating literal, None if it is not one."""
    if not literal[:1].isdigit() and not literal[:2].startswith("."):
        return None
    digits = literal.rstrip("uUlLfF") if not literal.lower().startswith("0x") else literal.rstrip("uUlL")
    for convert in (lambda s: int(s, 0), lambda s: int(s, 8), float):
        try:
            return convert(digits) != 0
        except ValueError:
            continue
    return None


def without_comments(source: str, keep_lines: bool = False) -> str:
    """The source with its comments blanked (a rough cut: a comment marker inside a string counts too); with
    keep_lines, a comment's line ends stay, so every line keeps its number."""
    if keep_lines:
        return _COMMENTS.sub(lambda comment: re.sub(r"[^\n]", " ", comment.group()), source)
    return _COMMENTS.sub(" ", source)


def _lines_starting_in_comment(source: str) -> set[int]:
    """0-based numbers of the lines that begin inside a /* */ comment (their # is not a directive)."""
    inside: set[int] = set()
    number, state = 0, "code"
    for match in _LEX.finditer(source):
        token = match.group()
        if token == "\n" or token == "\\\n":
            number += 1
            if state == "block":
                inside.add(number)
            elif token == "\n" and state != "code":
                state = "code"  # line comments and unterminated literals end here
        elif state == "code":
            state = {"/*": "block", "//": "line", '"': "string", "'": "char"}.get(token, "code")
        elif (state, token) in (("block", "*/"), ("string", '"'), ("char", "'")):
            state = "code"
    return inside


# --- nodes ----------------------------------------------------------------------------------------


def line(node: Node) -> int:
    """1-based line of the node's start."""
    return node.start_point[0] + 1


def end_line(node: Node) -> int:
    return node.end_point[0] + 1


def text(node: Node | None) -> str:
    if node is None or node.text is None:
        return ""
    return node.text.decode("utf-8", "replace")


def contains(outer: Node, inner: Node) -> bool:
    return outer.start_byte <= inner.start_byte and inner.end_byte <= outer.end_byte


def ancestors(node: Node, stop: Node | None = None) -> Iterator[Node]:
    """Parents of node, nearest first, up to (not including) stop."""
    parent = node.parent
    while parent is not None and parent != stop:
        yield parent
        parent = parent.parent


def constant_value(node: Node | None) -> bool | None:
    """Truth value of a constant condition such as `(0)`, `false`, `!1`; None when not constant."""
    negate = False
    while node is not None:
        kind = node.type
        if kind == "condition_clause":
            node = node.child_by_field_name("value")
        elif kind == "parenthesized_expression" and node.named_child_count == 1:
            node = node.named_children[0]
        elif kind == "unary_expression" and text(node.child_by_field_name("operator")) == "!":
            negate, node = not negate, node.child_by_field_name("argument")
        elif kind in ("true", "false"):
            return (kind == "true") != negate
        elif kind == "number_literal":
            value = _number_value(text(node).replace("'", ""))
            return None if value is None else value != negate
        else:
            return None
    return None


def _live_children(node: Node) -> list[Node]:
    """Children that can execute: drops the dead branch of `if (0)` / `if (1) ... else` and `while (0)` bodies."""
    children = node.children
    if node.type == "if_statement":
        value = constant_value(node.child_by_field_name("condition"))
        if value is not None:
            dead = node.child_by_field_name("alternative" if value else "consequence")
            return [c for c in children if c != dead]
    elif node.type == "while_statement":
        if constant_value(node.child_by_field_name("condition")) is False:
            body = node.child_by_field_name("body")
            return [c for c in children if c != body]
    return children


def iter_live(node: Node, no_descend: Iterable[str] = ()) -> Iterator[Node]:
    """Pre-order walk that skips comments and constant-false branches; nodes of a type in
    no_descend are yielded but not entered."""
    stop = frozenset(no_descend)
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "comment":
            continue
        yield current
        if current.type not in stop or current == node:
            stack.extend(reversed(_live_children(current)))


def identifier_names(node: Node | None) -> set[str]:
    if node is None:
        return set()
    return {text(n) for n in iter_live(node) if n.type == "identifier"}


_NAMES = frozenset({"identifier", "type_identifier", "field_identifier", "namespace_identifier"})
_DIRECTIVES = ("preproc_def", "preproc_function_def", "preproc_call", "preproc_include")
# A conditional group's test (`#ifdef CUBLAS_API`, `#if defined(X)`) asks about a name, it does not use it.
_TESTS = {"preproc_if": "condition", "preproc_elif": "condition", "preproc_ifdef": "name", "preproc_elifdef": "name"}


def code_identifiers(root: Node) -> set[str]:
    """Every name the live code under root mentions (functions, variables, types, fields, namespaces): not
    the names in preprocessor directives, whose macro bodies are text to tree-sitter (macro_definitions)."""
    tests = [node.child_by_field_name(_TESTS[node.type]) for node in iter_live(root) if node.type in _TESTS]
    spans = [(test.start_byte, test.end_byte) for test in tests if test is not None]
    return {text(node) for node in iter_live(root, no_descend=_DIRECTIVES)
            if node.type in _NAMES and not any(start <= node.start_byte < end for start, end in spans)}


def included_headers(root: Node) -> list[tuple[int, str]]:
    """(line, name) of each live `#include <name>` or `"name"` (not one that names a macro)."""
    return [(line(node), header_name(node)) for node in iter_live(root) if node.type == "preproc_include"
            and node.child_by_field_name("path") is not None
            and node.child_by_field_name("path").type in ("system_lib_string", "string_literal")]


def header_name(include: Node) -> str:
    return text(include.child_by_field_name("path")).strip('<>"')


def has_keyword(node: Node, keyword: str) -> bool:
    """Whether an unnamed child token such as `__global__` appears directly on the node."""
    return any(child.type == keyword for child in node.children)


# --- declarations ---------------------------------------------------------------------------------


def declared_name(declarator: Node | None) -> str | None:
    """Name introduced by a declarator (`As` in `As[16][16]`, `p` in `*p`)."""
    if declarator is None:
        return None
    for node in iter_live(declarator):
        if node.type in ("identifier", "field_identifier"):
            return text(node)
        if node.type == "qualified_identifier":
            return text(node.child_by_field_name("name")) or None
    return None


def declarator_shape(declarator: Node | None) -> tuple[int, int]:
    """(pointer or reference levels, array dimensions) written in a declarator, sizes excluded."""
    pointers = arrays = 0
    node = declarator
    while node is not None:
        if node.type in ("pointer_declarator", "reference_declarator"):
            pointers += 1
        elif node.type == "array_declarator":
            arrays += 1
        inner = node.child_by_field_name("declarator")
        if inner is None and node.type in ("reference_declarator", "parenthesized_declarator"):
            inner = next((c for c in node.named_children if c.type != "type_qualifier"), None)
        node = inner
    return pointers, arrays


def function_definitions(root: Node) -> list[Node]:
    """Live function definitions in file order (including inside extern "C", templates, namespaces)."""
    return [n for n in iter_live(root, no_descend=("function_definition",)) if n.type == "function_definition"]


def function_name(function: Node) -> str | None:
    node = function.child_by_field_name("declarator")
    while node is not None and node.type != "function_declarator":
        node = node.child_by_field_name("declarator")
    if node is None:
        return None
    name = node.child_by_field_name("declarator")
    if name is not None and name.type in ("qualified_identifier", "template_function"):
        name = name.child_by_field_name("name")
    return text(name) or None


def parameters(function: Node) -> list[tuple[str | None, int]]:
    """(name, pointer/array levels) for each parameter of a function definition; 0 levels = by value."""
    node = function.child_by_field_name("declarator")
    while node is not None and node.type != "function_declarator":
        node = node.child_by_field_name("declarator")
    params = node.child_by_field_name("parameters") if node is not None else None
    result = []
    for param in params.named_children if params is not None else []:
        if param.type in ("parameter_declaration", "optional_parameter_declaration"):
            declarator = param.child_by_field_name("declarator")
            result.append((declared_name(declarator), sum(declarator_shape(declarator))))
    return result


# --- macros ---------------------------------------------------------------------------------------

WORD = re.compile(r"[A-Za-z_]\w*")


def macro_definitions(root: Node) -> dict[str, str]:
    """Live #define name -> replacement text (comments removed), object- and function-like.

    A name defined in several #ifdef branches gets all its texts joined: we cannot tell which one is built.
    """
    macros: dict[str, str] = {}
    for node in iter_live(root):
        if node.type in ("preproc_def", "preproc_function_def"):
            name = text(node.child_by_field_name("name"))
            if name:
                body = _COMMENTS.sub(" ", text(node.child_by_field_name("value")))
                macros[name] = f"{macros[name]}\n{body}" if name in macros else body
    return macros


def source_macros(source: str) -> dict[str, str]:
    """macro_definitions of the tree of `source` (a copy, the caller's to change), found once per text kept as
    parse keeps its tree: the kernels, the static checks, the tile size and the launch each ask for the same file's."""
    found = _LOCAL.__dict__.setdefault("macros", OrderedDict())
    macros = found.get(source)
    if macros is None:
        macros = found[source] = macro_definitions(parse(source).root_node)
        while len(found) > TREES_KEPT:
            found.popitem(last=False)
    found.move_to_end(source)
    return dict(macros)


def macros_mentioning(macros: dict[str, str], words: Iterable[str]) -> set[str]:
    """Macros whose expansion contains one of words, directly or through other macros."""
    targets = set(words)
    users: dict[str, set[str]] = {}
    found: list[str] = []
    for name, body in macros.items():
        mentioned = set(WORD.findall(body))
        if mentioned & targets:
            found.append(name)
        for word in mentioned & macros.keys():
            users.setdefault(word, set()).add(name)
    result: set[str] = set()
    while found:
        name = found.pop()
        if name not in result:
            result.add(name)
            found.extend(users.get(name, ()))
    return result


# --- control flow ---------------------------------------------------------------------------------


def controlling_condition(parent: Node, child: Node) -> Node | None:
    """The condition that decides whether `child` (a direct child of parent) runs, if parent has one."""
    kind = parent.type
    if kind == "if_statement" or kind == "conditional_expression":
        if child in (parent.child_by_field_name("consequence"), parent.child_by_field_name("alternative")):
            return parent.child_by_field_name("condition")
    elif kind in ("switch_statement", "while_statement", "do_statement"):
        if child == parent.child_by_field_name("body"):
            return parent.child_by_field_name("condition")
    elif kind == "for_statement":
        if child in (parent.child_by_field_name("body"), parent.child_by_field_name("update")):
            return parent.child_by_field_name("condition")
    elif kind == "for_range_loop":
        if child == parent.child_by_field_name("body"):
            return parent.child_by_field_name("right")
    elif kind == "binary_expression" and text(parent.child_by_field_name("operator")) in ("&&", "||"):
        if child == parent.child_by_field_name("right"):
            return parent.child_by_field_name("left")
    return None
