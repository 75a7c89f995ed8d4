"""Static checks on the student's tiled SGEMM kernel: shared-memory tiles and the two tile-loop barriers.

The source is parsed with tree-sitter (no compiler, no preprocessor run). What a function does to
__shared__ arrays and barriers becomes a list of Events in source order; a __device__ helper it calls
contributes its own events at the call site. The three checks reason only over those events.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tree_sitter import Node

from grader.judge.findings import FIX_BARRIER_DIVERGENCE, FIX_LOAD_BARRIER, FIX_USE_BARRIER
from grader.result import STATIC, CheckResult, errored, failed, passed, skipped
from grader.source import cuda_syntax as cs

TILES = "shared-memory tiles"
LOAD_BARRIER = "barrier after loading tiles"
USE_BARRIER = "barrier after using tiles"
STATIC_CHECKS = (("shared_tiles", TILES), ("load_barrier", LOAD_BARRIER), ("use_barrier", USE_BARRIER))

BARRIER_FUNCTIONS = frozenset({"__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or"})
THREAD_INDEX = "threadIdx"
_CASTS = frozenset({"reinterpret_cast", "static_cast", "const_cast"})
_EXITS = frozenset({"return_statement", "break_statement", "continue_statement"})
_MAX_HELPER_DEPTH = 12  # helpers calling helpers; deeper chains are not followed

_SKIP_ADVICE = "threads that skip it leave the others waiting or racing"


@dataclass
class Event:
    """A shared-memory access or a barrier at `anchor` (the call site when it happens in a helper)."""

    anchor: Node
    pos: tuple[int, int]  # source order; events inside a helper share the call's end byte and count up
    array: str | None = None
    read: bool = False
    write: bool = False
    barrier: str | None = None  # how a message names the barrier
    helper_condition: int | None = None  # line of a threadIdx-dependent condition inside the helper

    @property
    def line(self) -> int:
        return cs.line(self.anchor)


def _shared_arrays(nodes) -> dict[str, tuple[int, int]]:
    """__shared__ arrays declared among nodes: name -> (line, dimensions)."""
    arrays: dict[str, tuple[int, int]] = {}
    for node in nodes:
        if node.type != "declaration" or not any(
            c.type == "type_qualifier" and cs.text(c) == "__shared__" for c in node.children
        ):
            continue
        for declarator in node.children_by_field_name("declarator"):
            pointers, dims = cs.declarator_shape(declarator)
            name = cs.declared_name(declarator)
            if name and dims and not pointers:
                arrays.setdefault(name, (cs.line(declarator), dims))
    return arrays


class _File:
    """Facts about the whole source: kernels, helpers, file-scope __shared__ arrays, macros."""

    def __init__(self, source: str) -> None:
        if isinstance(source, bytes):
            source = source.decode("utf-8", "replace")
        root = cs.parse(source).root_node
        self.macros = cs.source_macros(source)
        self.indexing_macros = _indexing_macros(root)
        self.barrier_macros = cs.macros_mentioning(self.macros, BARRIER_FUNCTIONS)
        self.kernels: list[tuple[str, Node]] = []
        self.helpers: dict[str, Node] = {}
        for function in cs.function_definitions(root):
            name = cs.function_name(function)
            if not name or function.child_by_field_name("body") is None:
                continue
            if cs.has_keyword(function, "__global__"):
                self.kernels.append((name, function))
            else:
                self.helpers.setdefault(name, function)
        self.shared = _shared_arrays(cs.iter_live(root, no_descend=("function_definition",)))
        self.thread_names = self._thread_names()
        self._helper_cache: dict[tuple, list[Event]] = {}

    def kernel(self, name: str) -> Node | None:
        return next((node for kernel, node in self.kernels if kernel == name), None)

    def _thread_names(self) -> set[str]:
        """threadIdx plus the macros and helpers whose value depends on it."""
        names = {THREAD_INDEX} | cs.macros_mentioning(self.macros, {THREAD_INDEX})
        uses = {name: cs.identifier_names(fn.child_by_field_name("body")) for name, fn in self.helpers.items()}
        changed = True
        while changed:
            changed = False
            for name, used in uses.items():
                if name not in names and used & names:
                    names.add(name)
                    changed = True
        return names

    def helper_events(self, name: str, aliases: dict[str, tuple[str, int]], stack: tuple[str, ...]) -> list[Event]:
        """Events of helper `name` when its pointer parameters denote the given shared arrays."""
        key = (name, tuple(sorted(aliases.items())))
        if key not in self._helper_cache:
            self._helper_cache[key] = []  # a recursive call sees no events instead of looping
            scope = _Scope(self, self.helpers[name], aliases, stack + (name,))
            for event in scope.events:
                if event.barrier is not None and event.helper_condition is None:
                    found = scope.thread_condition(event)
                    event.helper_condition = found[0] if found else None
            self._helper_cache[key] = scope.events
        return self._helper_cache[key]


class _Scope:
    """One function body, with the map from its local names to the shared arrays they denote."""

    def __init__(self, file: _File, function: Node, aliases: dict[str, tuple[str, int]], stack: tuple[str, ...]):
        self.file, self.function, self.stack = file, function, stack
        self.body = function.child_by_field_name("body")
        self.nodes = list(cs.iter_live(self.body)) if self.body is not None else []
        self.local_shared = _shared_arrays(self.nodes)
        self.names: dict[str, tuple[str, int]] = {n: (n, dims) for n, (_, dims) in file.shared.items()}
        self.names.update(aliases)
        self.names.update({n: (n, dims) for n, (_, dims) in self.local_shared.items()})
        self._find_pointer_aliases()
        self.tainted = self._taint()
        self.exits = [n for n in self.nodes if n.type in _EXITS]
        self.events = sorted(self._collect_events(), key=lambda e: e.pos)

    # -- shared-memory names and accesses --

    def _climb(self, ident: Node) -> tuple[Node, bool]:
        """From a shared-array name up through subscripts, casts and pointer arithmetic to the
        expression that uses it; also whether that expression is still an address."""
        levels = self.names[cs.text(ident)][1]
        node = ident
        while (parent := node.parent) is not None:
            kind = parent.type
            if kind == "subscript_expression" and parent.child_by_field_name("argument") == node:
                levels -= 1
            elif kind == "pointer_expression":
                levels += 1 if _operator(parent) == "&" else -1
            elif kind == "field_expression" and parent.child_by_field_name("argument") == node:
                levels = 0
            elif kind == "cast_expression" and parent.child_by_field_name("value") == node:
                pass
            elif kind == "binary_expression" and levels > 0 and _operator(parent) in ("+", "-"):
                pass
            elif kind == "argument_list" and _is_cast(parent.parent):
                parent = parent.parent
            elif kind == "argument_list" and self._indexed_by_macro(parent, node):
                levels -= self._indexed_by_macro(parent, node)
                parent = parent.parent
            elif kind != "parenthesized_expression":
                break
            node = parent
        return node, levels > 0

    def _indexed_by_macro(self, arguments: Node, argument: Node) -> int:
        """How many subscripts an indexing macro puts on this argument (`AT(As, r, c)` for `As[(r) * ld + (c)]`)."""
        call = arguments.parent
        function = call.child_by_field_name("function") if call is not None and call.type == "call_expression" else None
        subscripts = self.file.indexing_macros.get(cs.text(function) if function is not None else "", {})
        args = [a for a in arguments.named_children if a.type != "comment"]
        return subscripts.get(args.index(argument), 0) if argument in args else 0

    def _shared_uses(self, node: Node):
        """(identifier, used expression, is address) for each shared-array name under node."""
        for ident in cs.iter_live(node):
            if ident.type == "identifier" and cs.text(ident) in self.names and not _is_declarator(ident):
                yield (ident, *self._climb(ident))

    def _find_pointer_aliases(self) -> None:
        """`float *p = As;` / `p = &Bs[0][0];` make p another name for the array."""
        flows = [(target, value) for target, value, plain in _flows(self.nodes) if plain]
        for _ in range(len(flows)):
            added = False
            for target, value in flows:
                if target and value is not None and target not in self.names:
                    for ident, used, address in self._shared_uses(value):
                        if used == value and address:
                            self.names[target] = (self.names[cs.text(ident)][0], 1)
                            added = True
                            break
            if not added:
                break

    def _access(self, ident: Node) -> Event | None:
        node, address = self._climb(ident)
        array = self.names[cs.text(ident)][0]
        parent = node.parent
        kind = parent.type if parent is not None else ""
        if kind in ("sizeof_expression", "alignof_expression"):
            return None
        if kind == "assignment_expression":
            if parent.child_by_field_name("left") == node:
                compound = _operator(parent) != "="
                return self._event(node, array=array, read=compound, write=True)
            if address:
                return None  # p = As: an alias, not a read
        elif kind == "update_expression":
            return self._event(node, array=array, read=True, write=True)
        elif kind == "init_declarator" and address:
            return None  # float *p = As: an alias
        elif kind == "argument_list" and parent.parent is not None and parent.parent.type == "call_expression":
            if self._helper_called(parent.parent):
                return None  # accounted for with the call
            return self._event(node, array=array, read=True, write=address)  # atomicAdd(&As[i], v) writes
        return self._event(node, array=array, read=True)

    @staticmethod
    def _event(anchor: Node, **facts) -> Event:
        return Event(anchor, (anchor.start_byte, 0), **facts)

    # -- barriers and helper calls --

    def _helper_called(self, call: Node) -> str | None:
        function = call.child_by_field_name("function")
        if function is not None and function.type == "template_function":
            function = function.child_by_field_name("name")
        name = cs.text(function) if function is not None and function.type == "identifier" else ""
        if name in self.file.helpers and name not in self.stack and len(self.stack) < _MAX_HELPER_DEPTH:
            return name
        return None

    def _call_events(self, call: Node, name: str) -> list[Event]:
        """Events of a helper at its call site; a shared array passed to a pointer parameter is followed inside."""
        events: list[Event] = []
        aliases: dict[str, tuple[str, int]] = {}
        arguments = call.child_by_field_name("arguments")
        args = [a for a in arguments.named_children if a.type != "comment"] if arguments is not None else []
        for (param, levels), arg in zip(cs.parameters(self.file.helpers[name]), args):
            for ident, used, address in self._shared_uses(arg):
                if used != arg:
                    continue  # a nested use such as f(As[i][j] * 2) is an ordinary read
                array = self.names[cs.text(ident)][0]
                if address and levels and param:
                    aliases[param] = (array, levels)
                else:
                    events.append(self._event(call, array=array, read=True))
        for index, inner in enumerate(self.file.helper_events(name, aliases, self.stack), start=1):
            label = f"{name}() (which calls __syncthreads())" if inner.barrier else None
            events.append(
                Event(call, (call.end_byte, index), inner.array, inner.read, inner.write, label, inner.helper_condition)
            )
        return events

    def _barrier(self, node: Node) -> Event | None:
        """A barrier named by node: __syncthreads, a macro expanding to it, or cooperative groups' block.sync(),
        cg::sync(block) (a warp tile's sync() is no barrier of the block)."""
        if node.type == "call_expression":
            group = _synced_group(node)
            if group is not None and cs.text(group) not in self.warp_groups:
                return self._event(node, barrier=cs.text(node)[:60])
            return None
        name = cs.text(node)
        if _is_declarator(node) or (name not in BARRIER_FUNCTIONS and name not in self.file.barrier_macros):
            return None
        parent = node.parent
        is_call = parent is not None and parent.type == "call_expression"
        is_call = is_call and parent.child_by_field_name("function") == node
        anchor = parent if is_call else node
        if name == "__syncthreads":
            label = "__syncthreads()"
        elif name in BARRIER_FUNCTIONS:
            label = f"{name}()"
        else:
            label = f"{name}{'()' if is_call else ''} (which expands to __syncthreads())"
        return self._event(anchor, barrier=label)

    def _collect_events(self) -> list[Event]:
        events: list[Event] = []
        for node in self.nodes:
            if node.type == "identifier":
                shared = cs.text(node) in self.names and not _is_declarator(node)
                event = self._access(node) if shared else self._barrier(node)
                if event is not None:
                    events.append(event)
            elif node.type == "call_expression":
                helper = self._helper_called(node)
                if helper is not None:
                    events.extend(self._call_events(node, helper))
                elif (event := self._barrier(node)) is not None:
                    events.append(event)
        return events

    @property
    def warp_groups(self) -> set[str]:
        """Names of cooperative groups smaller than the block (tiled_partition, coalesced_threads)."""
        if not hasattr(self, "_warp_groups"):
            statements = [node for node in self.nodes if node.type in ("declaration", "expression_statement")
                          and any(word in cs.text(node) for word in _WARP_GROUP_WORDS)]
            # `cg::thread_block_tile<16> t = ...` parses as an expression (`<` and `>`) whose assignment names t
            self._warp_groups = {cs.declared_name(d) for node in statements if node.type == "declaration"
                                 for d in node.children_by_field_name("declarator")}
            self._warp_groups |= {cs.text(n.child_by_field_name("left")) for node in statements
                                  for n in cs.iter_live(node) if n.type == "assignment_expression"}
        return self._warp_groups

    # -- thread dependence --

    def _taint(self) -> set[str]:
        """Names whose value may differ between threads of a block: threadIdx and what is computed from it."""
        flows = [(target, cs.identifier_names(value)) for target, value, _ in _flows(self.nodes)]
        tainted = set(self.file.thread_names)
        changed = True
        while changed:
            changed = False
            for target, used in flows:
                if target not in tainted and used & tainted:
                    tainted.add(target)
                    changed = True
        return tainted

    def depends_on_thread(self, node: Node) -> bool:
        return bool(cs.identifier_names(node) & self.tainted)

    def _condition_above(self, node: Node) -> int | None:
        """Line of the nearest enclosing threadIdx-dependent condition of node, if any."""
        child = node
        for parent in cs.ancestors(node, self.body):
            condition = cs.controlling_condition(parent, child)
            if condition is not None and self.depends_on_thread(condition):
                return cs.line(condition)
            child = parent
        return None

    def _exit_skips(self, exit_: Node, node: Node) -> bool:
        """Whether taking the return/break/continue exit_ makes a thread miss node."""
        if exit_.type == "return_statement":
            if exit_.start_byte < node.start_byte:
                return True
            return any(p.type in cs.LOOP_TYPES and cs.contains(p, exit_) for p in cs.ancestors(node, self.body))
        targets = cs.LOOP_TYPES | ({"switch_statement"} if exit_.type == "break_statement" else set())
        target = next((p for p in cs.ancestors(exit_, self.body) if p.type in targets), None)
        if target is None or target.type not in cs.LOOP_TYPES or not cs.contains(target, node):
            return False
        return exit_.type == "break_statement" or exit_.start_byte < node.start_byte

    def thread_condition(self, event: Event) -> tuple[int, int | None] | None:
        """(condition line, early-exit line or None) when some threads of the block may skip event."""
        if event.helper_condition is not None:
            return event.helper_condition, None
        found = self._condition_above(event.anchor)
        if found is not None:
            return found, None
        for exit_ in self.exits:
            if self._exit_skips(exit_, event.anchor):
                found = self._condition_above(exit_)
                if found is not None:
                    return found, cs.line(exit_)
        return None


_WARP_GROUP_WORDS = ("tiled_partition", "thread_block_tile", "coalesced_threads", "coalesced_group")


def _synced_group(call: Node) -> Node | None:
    """The group a cooperative-groups sync call synchronizes: `g` of `g.sync()` and of `cg::sync(g)`."""
    function = call.child_by_field_name("function")
    if function is None:
        return None
    if function.type == "field_expression" and cs.text(function.child_by_field_name("field")) == "sync":
        return function.child_by_field_name("argument")
    arguments = call.child_by_field_name("arguments")
    named = arguments.named_children if arguments is not None else []
    if function.type in ("identifier", "qualified_identifier") and cs.text(function).split("::")[-1] == "sync" \
            and len(named) == 1:
        return named[0]
    return None


def _indexing_macros(root: Node) -> dict[str, dict[int, int]]:
    """Function-like macros that subscript a parameter, as indexing macros do (`#define AT(M, r, c)
    M[(r) * ld_##M + (c)]`): name -> {parameter position: how many subscripts}. A shared array passed there is
    read or written where the macro is used, as if subscripted there."""
    found: dict[str, dict[int, int]] = {}
    for node in cs.iter_live(root):
        parameters = node.child_by_field_name("parameters") if node.type == "preproc_function_def" else None
        value = node.child_by_field_name("value") if parameters is not None else None
        if value is None:
            continue
        names = [cs.text(p) for p in parameters.named_children if p.type == "identifier"]
        body = cs.text(value)
        subscripts = {i: max((m.group(1).count("[") for m in re.finditer(
            rf"(?<![\w#])(?:{re.escape(name)})((?:\s*\[[^\[\]]*\])+)", body)), default=0)
            for i, name in enumerate(names)}
        if any(subscripts.values()):
            found[cs.text(node.child_by_field_name("name"))] = {i: n for i, n in subscripts.items() if n}
    return found


def _is_declarator(ident: Node) -> bool:
    parent = ident.parent
    if parent is None:
        return False
    return parent.child_by_field_name("declarator") == ident or parent.type in ("preproc_def", "preproc_function_def")


def _is_cast(call: Node | None) -> bool:
    if call is None or call.type != "call_expression":
        return False
    function = call.child_by_field_name("function")
    if function is None or function.type != "template_function":
        return False
    return cs.text(function.child_by_field_name("name")) in _CASTS


def _operator(node: Node) -> str:
    return cs.text(node.child_by_field_name("operator"))


def _flows(nodes: list[Node]):
    """(variable, value expression, is a plain `=`) for each initialisation and assignment among nodes."""
    for node in nodes:
        if node.type == "init_declarator":
            target, value = cs.declared_name(node.child_by_field_name("declarator")), node.child_by_field_name("value")
            plain = True
        elif node.type == "assignment_expression":
            target, value = _base_name(node.child_by_field_name("left")), node.child_by_field_name("right")
            plain = _operator(node) == "="
        else:
            continue
        if target and value is not None:
            yield target, value, plain


def _base_name(node: Node | None) -> str | None:
    """The variable an lvalue such as `a[i].x` or `*p` writes to."""
    while node is not None and node.type != "identifier":
        if node.type in ("subscript_expression", "field_expression", "pointer_expression"):
            node = node.child_by_field_name("argument")
        elif node.type == "parenthesized_expression" and node.named_child_count:
            node = node.named_children[0]
        else:
            return None
    return cs.text(node) if node is not None else None


# --- the tile loop ----------------------------------------------------------------------------------


@dataclass
class _TileLoop:
    loop: Node
    body: Node
    use: Node  # the inner loop (or helper call) that reads the tiles
    events: list[Event]  # events inside the loop body, in source order

    @property
    def first_use(self) -> tuple[int, int]:
        return min(e.pos for e in self.events if e.read and e.array and cs.contains(self.use, e.anchor))

    @property
    def stores(self) -> list[Event]:
        return [e for e in self.events if e.write and not cs.contains(self.use, e.anchor)]

    @property
    def last_read(self) -> Event:
        return max((e for e in self.events if e.read and e.array and e.pos >= self.first_use), key=lambda e: e.pos)

    def in_use_loop(self, event: Event) -> bool:
        return self.use.type in cs.LOOP_TYPES and cs.contains(self.use, event.anchor)

    @property
    def barriers(self) -> list[Event]:
        """Barriers of the loop body outside the inner loop."""
        return [e for e in self.events if e.barrier and not self.in_use_loop(e)]


def _use_site(scope: _Scope, body: Node, events: list[Event]) -> Node | None:
    """First inner loop (or helper call) in body that reads shared arrays and stores none."""
    candidates = [n for n in scope.nodes if n.type in cs.LOOP_TYPES and n != body and cs.contains(body, n)]
    candidates += [e.anchor for e in events if e.anchor.type == "call_expression" and e.array]
    best = None
    for node in candidates:
        inside = [e for e in events if e.array and cs.contains(node, e.anchor)]
        if any(e.read for e in inside) and not any(e.write for e in inside):
            if best is None or (node.start_byte, -node.end_byte) < (best.start_byte, -best.end_byte):
                best = node
    return best


def _as_tile_loop(scope: _Scope, loop: Node) -> _TileLoop | None:
    body = loop.child_by_field_name("body")
    if body is None:
        return None
    events = [e for e in scope.events if cs.contains(body, e.anchor)]
    use = _use_site(scope, body, events)
    if use is None:
        return None
    tile = _TileLoop(loop, body, use, events)
    return tile if tile.stores else None


def _find_tile_loop(scope: _Scope) -> _TileLoop | None:
    """The innermost loop whose body stores to shared memory and has an inner loop that reads it."""
    found = [t for t in (_as_tile_loop(scope, n) for n in scope.nodes if n.type in cs.LOOP_TYPES) if t]
    innermost = [t for t in found if not any(o.loop != t.loop and cs.contains(t.loop, o.loop) for o in found)]
    return innermost[0] if innermost else None


# --- the three checks --------------------------------------------------------------------------------


def _check_tiles(scope: _Scope, kernel: str, points: float) -> CheckResult:
    declared = sorted({**scope.file.shared, **scope.local_shared}.items(), key=lambda item: item[1][0])
    if not declared:
        return failed(
            TILES, STATIC, points,
            f"line {cs.line(scope.function)}: no __shared__ tile is declared in {kernel}: load tiles of A and B into "
            f"__shared__ arrays (e.g. __shared__ float As[TILE_SIZE][TILE_SIZE]) and compute from those",
            metrics={"line": cs.line(scope.function)},
        )
    reads = {e.array for e in scope.events if e.read and e.array}
    writes = {e.array for e in scope.events if e.write and e.array}
    tiles = [name for name, _ in declared if name in reads and name in writes]
    if tiles:
        return passed(TILES, STATIC, points, f"{kernel} writes and reads the __shared__ tiles {', '.join(tiles)}",
                      metrics={"arrays": tiles})
    partial = [item for item in declared if item[0] in reads or item[0] in writes]
    name, (line, _) = (partial or declared)[0]
    if name in writes:
        problem = "is declared but never read: compute the partial sums from this tile instead of from global memory"
    elif name in reads:
        problem = "is read but never written: store a tile of A or B into it before the inner loop reads it"
    else:
        problem = "is declared but never used: store a tile of A or B into it and read it in the inner loop"
    return failed(TILES, STATIC, points, f"line {line}: __shared__ array {name} {problem}",
                  metrics={"line": line, "array": name})


def _no_tile_loop(name: str, scope: _Scope, kernel: str, points: float) -> CheckResult:
    line = cs.line(scope.function)
    return failed(
        name, STATIC, points,
        f"line {line}: no tile loop found in {kernel}: expected a loop (for/while/do) whose body stores tiles into "
        f"__shared__ arrays and then runs an inner loop that reads them; load one tile of A and one of B per "
        f"iteration of a loop over the tiles, then multiply them in an inner loop",
        metrics={"line": line},
    )


def _barrier_verdict(name: str, scope: _Scope, tile: _TileLoop, candidates: list[Event], points: float,
                     success: str, missing: str, missing_line: int) -> CheckResult:
    """Pass on the first unconditional candidate; otherwise say why the first one does not count."""
    where = {"tile_loop_line": cs.line(tile.loop), "inner_loop_line": cs.line(tile.use)}
    for event in candidates:
        if scope.thread_condition(event) is None:
            return passed(name, STATIC, points, f"line {event.line}: {event.barrier} {success}",
                          metrics={"line": event.line, **where})
    if not candidates:
        return failed(name, STATIC, points, missing, metrics={"line": missing_line, **where},
                      fixes=[FIX_LOAD_BARRIER if name == LOAD_BARRIER else FIX_USE_BARRIER])
    event = candidates[0]
    condition, exit_line = scope.thread_condition(event)
    if exit_line is None:
        message = (f"line {event.line}: {event.barrier} is under a condition that depends on threadIdx "
                   f"(line {condition}): {_SKIP_ADVICE}; move the bounds check to the loads and stores instead")
    else:
        message = (f"line {event.line}: {event.barrier} is skipped by threads that leave early at line {exit_line} "
                   f"under a condition that depends on threadIdx (line {condition}): {_SKIP_ADVICE}; do not leave "
                   f"early, move the bounds check to the loads and stores instead")
    return failed(name, STATIC, points, message, fixes=[FIX_BARRIER_DIVERGENCE],
                  metrics={"line": event.line, "condition_line": condition, "exit_line": exit_line, **where})


def _inner_loop_hint(tile: _TileLoop, counted: list[Event] = ()) -> str:
    inner = [e for e in tile.events if e.barrier and tile.in_use_loop(e) and e not in counted]
    if not inner:
        return ""
    return f"; the __syncthreads() at line {inner[0].line} is inside the inner loop, so it does not count"


def _after_every_read(tile: _TileLoop) -> list[Event]:
    """Barriers in the inner loop's body after every read of the tiles there: each iteration ends at one, the
    last one too, so the last read is behind a barrier before the next phase's stores, as with one barrier
    after the loop (each costs one barrier per iteration where one per phase would do)."""
    if tile.use.type not in cs.LOOP_TYPES:
        return []
    reads = [e.pos for e in tile.events if e.read and e.array and tile.in_use_loop(e)]
    return [e for e in tile.events if e.barrier and tile.in_use_loop(e) and reads and e.pos > max(reads)]


def _check_load_barrier(scope: _Scope, tile: _TileLoop | None, kernel: str, points: float) -> CheckResult:
    if tile is None:
        return _no_tile_loop(LOAD_BARRIER, scope, kernel, points)
    first_use = tile.first_use
    before = [e for e in tile.stores if e.pos < first_use]
    start = max((e.pos for e in before), default=(tile.body.start_byte, 0))
    candidates = [b for b in tile.barriers if start < b.pos < first_use]
    use_line = cs.line(tile.use)
    stored = f" (the last tile store is at line {before[-1].line})" if before else ""
    early = [b for b in tile.barriers if b.pos < start]
    if early:
        hint = f"; the __syncthreads() at line {early[-1].line} comes before the last store, so it does not count"
    else:
        hint = _inner_loop_hint(tile)
    missing = (f"line {use_line}: no __syncthreads() between loading the tiles{stored} and the inner loop at line "
               f"{use_line}: add __syncthreads() right before the inner loop so every thread sees the whole tile "
               f"before using it{hint}")
    return _barrier_verdict(LOAD_BARRIER, scope, tile, candidates, points,
                            f"separates loading the tiles from the inner loop (line {use_line})", missing, use_line)


def _check_use_barrier(scope: _Scope, tile: _TileLoop | None, kernel: str, points: float) -> CheckResult:
    if tile is None:
        return _no_tile_loop(USE_BARRIER, scope, kernel, points)
    last_read = tile.last_read
    candidates = [b for b in tile.barriers if b.pos > last_read.pos]
    first_store = min(e.pos for e in tile.stores)
    if first_store < tile.first_use:  # a barrier at the top of the body also guards the next phase's stores
        candidates += [b for b in tile.barriers if b.pos < first_store]
    in_inner = _after_every_read(tile) if cs.contains(tile.use, last_read.anchor) else []
    candidates += [b for b in in_inner if b not in candidates]
    use_end = cs.end_line(tile.use)
    if last_read.line > use_end:
        after = f"the last read of a tile (line {last_read.line})"
    else:
        after = f"the inner loop (line {cs.line(tile.use)})"
    hint = _inner_loop_hint(tile, in_inner)
    missing_line = max(last_read.line, use_end)
    missing = (f"line {missing_line}: no __syncthreads() after {after} in the tile loop (line {cs.line(tile.loop)}): "
               f"add __syncthreads() at the end of the tile loop body so no thread overwrites a tile that others "
               f"are still reading{hint}")
    verdict = _barrier_verdict(USE_BARRIER, scope, tile, candidates, points,
                               f"keeps the next tiles from overwriting ones still in use by the inner loop "
                               f"(line {cs.line(tile.use)})", missing, missing_line)
    if verdict.passed and any(b.line == verdict.metrics["line"] for b in in_inner):
        verdict.message += (", as the last statement of each of its iterations: it runs once per iteration, "
                            "where one after the inner loop would do")
        verdict.metrics["in_inner_loop"] = True
    return verdict


# --- public API ---------------------------------------------------------------------------------------


def find_kernels(source: str) -> list[str]:
    """Names of the __global__ functions defined in source, in file order (dead code ignored)."""
    names: list[str] = []
    for name, _ in _File(source).kernels:
        if name not in names:
            names.append(name)
    return names


def tile_loop_spans(source: str) -> list[tuple[int, int]]:
    """(start byte, end byte) of each kernel's tile loop, in file order: the CPU emulator counts its trips
    (instrument.py). A kernel the checker cannot analyse has none."""
    spans = []
    try:
        file = _File(source)
        for name, kernel in file.kernels:
            tile = _find_tile_loop(_Scope(file, kernel, {}, (name,)))
            if tile is not None:
                spans.append((tile.loop.start_byte, tile.loop.end_byte))
    except Exception:  # noqa: BLE001 - student input must never break the emulator's build: no marks then
        return []
    return spans


def skipped_static_checks(points: dict[str, float], reason: str) -> list[CheckResult]:
    return [skipped(name, STATIC, float(points.get(key, 0.0)), reason) for key, name in STATIC_CHECKS]


def static_checks(source: str, kernel_name: str, points: dict[str, float]) -> list[CheckResult]:
    """The three static checks of kernel_name, in order: shared tiles, load barrier, use barrier."""
    worth = {name: float(points.get(key, 0.0)) for key, name in STATIC_CHECKS}
    try:
        file = _File(source)
        kernel = file.kernel(kernel_name)
        if kernel is None:
            return skipped_static_checks(points, f"kernel {kernel_name} not found")
        scope = _Scope(file, kernel, {}, (kernel_name,))
        tile = _find_tile_loop(scope)
        return [
            _check_tiles(scope, kernel_name, worth[TILES]),
            _check_load_barrier(scope, tile, kernel_name, worth[LOAD_BARRIER]),
            _check_use_barrier(scope, tile, kernel_name, worth[USE_BARRIER]),
        ]
    except Exception as exc:  # noqa: BLE001 - student input must never crash grading; the error is reported
        message = (f"the static checker could not analyse {kernel_name} ({type(exc).__name__}); "
                   f"this check needs a manual review by the instructor")
        return [errored(name, STATIC, worth[name], message, metrics={"error": repr(exc)[:300]})
                for _, name in STATIC_CHECKS]
