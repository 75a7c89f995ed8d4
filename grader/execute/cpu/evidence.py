"""What the emulator saw the kernel do with A, B and C, told at the student's line in the code they wrote
(issue 42): an index off its matrix (a stride that is not the row length, a row or a column past the matrix),
C read before any thread stored it (`C[i] += sum`), the tile loop's trip count against ceil(k / TILE), and
each thread storing the element of the transposed launch.

Pure functions of the harness's reports (checked by protocol.py: numbers only) and of the sites (sites.py),
which hold every text shown: a report names a site by its number. Each finding's fix names the line and what
the code there does, in words that hold for every case it shows in (no sizes, no thread); its fact says what
this case's run did.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...contract import COLUMNS, ROWS
from ...judge.findings import Finding
from .sites import LOAD, NO_SITES, UPDATE, Site, Sites, bare

DIMENSIONS = {"A": ("m", "k"), "B": ("k", "n"), "C": ("m", "n")}  # each matrix's rows and columns, by role
DOES = {"load": "reads", "store": "stores", "update": "adds to"}
STRIDE, ROW, COLUMN = "stride", "row", "column"  # an index off its matrix, in the order one explains the rest
_NAME = re.compile(r"[A-Za-z_]\w*")


@dataclass(frozen=True)
class Program:
    """What the emulator's reports refer to: the sites, the tile size, the kernel's names for the lab's
    matrices and sizes ((role, name) pairs, a role under several names: ECE408's numAColumns and numBRows are
    both k), and what the launch's x runs over."""

    sites: Sites = NO_SITES
    tile: int = 0
    names: tuple[tuple[str, str], ...] = ()
    x: str = COLUMNS

    def name(self, role: str, near: str = "") -> str:
        """The role's name: of several, one that has `near` in it (numBColumns near B), else the first."""
        named = self.all_names(role)
        return next((name for name in named if near and near in name), named[0])

    def all_names(self, role: str) -> list[str]:
        return [name for named, name in self.names if named == role] or [role]


def xy(values: list[int]) -> str:
    x, y, z = values
    return f"({x}, {y})" if z == 0 else f"({x}, {y}, {z})"


def by_thread(report: dict) -> str:
    return f"thread {xy(report['thread'])} of block {xy(report['block'])}"


# --- an index off its matrix ----------------------------------------------------------------------------------


def off_matrix(records: list[dict], program: Program, shape: tuple[int, int, int]) -> list[Finding]:
    """One finding per site whose index the emulator saw off its matrix, in the order of the sites; each told by
    the report that explains most (a wrong stride, then a row, then a column past the matrix)."""
    found: dict[int, tuple[int, dict, list[str]]] = {}
    for record in records:
        site, kinds = program.sites.site(record["site"]), _kinds(record, shape)
        if site is None or not site.indexed or not kinds:
            continue  # no such site, or nothing off: not a report the harness makes
        rank = min(map([STRIDE, ROW, COLUMN].index, kinds))
        if record["site"] not in found or rank < found[record["site"]][0]:
            found[record["site"]] = (rank, record, kinds)
    return [_off_matrix(program.sites.sites[index], record, kinds, program, shape)
            for index, (_, record, kinds) in sorted(found.items())]


def _kinds(record: dict, shape: tuple[int, int, int]) -> list[str]:
    """What is off in a report, as the harness tells it (a stride only past row 0: there any stride is right)."""
    rows, columns = _size(record["matrix"], shape)
    return [kind for kind, off in ((STRIDE, record["stride"] != columns and record["row"] != 0),
                                   (ROW, not 0 <= record["row"] < rows), (COLUMN, not 0 <= record["column"] < columns))
            if off]


def _size(matrix: str, shape: tuple[int, int, int]) -> tuple[int, int]:
    sizes = dict(zip("mnk", shape))
    return tuple(sizes[role] for role in DIMENSIONS[matrix])


def _off_matrix(site: Site, record: dict, kinds: list[str], program: Program, shape) -> Finding:
    return Finding(f"{by_thread(record)} {_what_it_meant(site, record, kinds, program, shape)}",
                   _index_fix(site, record["matrix"], kinds[0], program))


def _what_it_meant(site: Site, record: dict, kinds: list[str], program: Program, shape, reaches: bool = True) -> str:
    """"reads B[63][67] (B[(p * TILE_SIZE + ty) * n + col] at line 19): column 67 is past B's last column (n = 67)";
    with `reaches`, which element a wrong stride reaches instead."""
    role, row, column, stride = record["matrix"], record["row"], record["column"], record["stride"]
    matrix, (rows_name, columns_name), (rows, columns) = program.name(role), _dimensions(role, program), _size(
        role, shape)
    said = f"{DOES[site.access]} {matrix}[{row}][{column}] ({site.expression} at line {site.line})"
    if kinds[0] == STRIDE:
        element = row * stride + column
        lands = (f"past {matrix}'s end" if element >= rows * columns or element < 0
                 else f"{matrix}[{element // columns}][{element % columns}]")
        return (f"{said} in rows {site.stride} = {stride} long, where {matrix}'s rows are {columns_name} = {columns} "
                f"long" + (f": it reaches {lands}" if reaches else ""))
    if kinds[0] == ROW:
        return f"{said}: row {row} is {_beyond(row)} {matrix}'s {_end(row)} row ({rows_name} = {rows})"
    return f"{said}: column {column} is {_beyond(column)} {matrix}'s {_end(column)} column ({columns_name} = {columns})"


def _beyond(index: int) -> str:
    return "before" if index < 0 else "past"


def _end(index: int) -> str:
    return "first" if index < 0 else "last"


def _dimensions(role: str, program: Program) -> tuple[str, str]:
    """What the kernel calls the matrix's rows and columns (ECE408: numBRows, numBColumns for B)."""
    return tuple(program.name(size, program.name(role)) for size in DIMENSIONS[role])


def _index_fix(site: Site, role: str, kind: str, program: Program) -> str:
    """What to change at the site: the stride (the matrix's row length), or the bounds its guard does not keep."""
    if kind == STRIDE:
        matrix, columns_name = program.name(role), _dimensions(role, program)[1]
        row, column = bare(site.row), site.column
        factor = row if row.isidentifier() else f"({row})"
        return (f"line {site.line} {DOES[site.access]} {site.expression}: {matrix}'s rows are {columns_name} long, "
                f"so its element [{row}][{column}] is {matrix}[{factor} * {columns_name} + {column}]")
    constant = _constant_index_fix(site, role, program)
    if constant:
        return constant
    bounds, missing = _bounds(site, role, program)
    if not site.guard or not _guard_names_index(site, program):  # a guard of other variables bounds nothing here
        where = "with no bound"
    else:
        where = f"where `{site.guard}`" + (f", which does not keep {' and '.join(missing)}" if missing else "")
    verb = {"load": "read", "store": "store", "update": "add to"}[site.access]
    zero = " (0 elsewhere)" if site.access == LOAD else ""
    return (f"line {site.line} {DOES[site.access]} {site.expression} {where}: {verb} it only where "
            f"{' and '.join(bounds)}{zero}")


def _index_variables(site: Site, program: Program) -> set[str]:
    """The names the site's index X * S + Y varies with: its identifiers less the sizes (m, n, k and the kernel's
    names for them) and constants spelled as macros are (TILE_SIZE)."""
    sizes = {name for size in "mnk" for name in program.all_names(size)}
    names = set(_NAME.findall(f"{site.row} {site.column}"))
    return {name for name in names if name not in sizes and not name.isupper()}


def _guard_names_index(site: Site, program: Program) -> bool:
    return bool(_index_variables(site, program) & set(_NAME.findall(site.guard)))


def _constant_index_fix(site: Site, role: str, program: Program) -> str:
    """The fix of an index made of sizes and constants alone (`C[m * n + 4096]`), told as where it lands: every
    thread that runs it touches that one element, whatever its guard, so no bound on a variable can help."""
    if _index_variables(site, program):
        return ""
    matrix, (rows, columns) = program.name(role), _dimensions(role, program)
    row, column = bare(site.row), bare(site.column)
    if row in program.all_names(DIMENSIONS[role][0]) and column.isdigit():
        past = int(column)
        where = (f"just past {matrix}'s end" if past == 0 else
                 f"{past} element{'s' * (past != 1)} past {matrix}'s end")
    else:
        where = f"an index of sizes and constants alone, off {matrix}"
    return (f"line {site.line} {DOES[site.access]} {site.expression}, {where} ({matrix} holds {rows} × {columns} "
            f"elements): no thread may {DOES[site.access].removesuffix('s')} there")


def _bounds(site: Site, role: str, program: Program) -> tuple[list[str], list[str]]:
    """The bounds an access of the matrix must keep ("row < m", "col < n"), and those its guard does not."""
    sizes, expressions = _dimensions(role, program), (bare(site.row), site.column)
    bounds = [f"{expression} < {size}" for expression, size in zip(expressions, sizes)]
    kept = [any(site.keeps(expression, name) for name in program.all_names(size))  # any name of that size
            for expression, size in zip(expressions, DIMENSIONS[role])]
    return bounds, [bound for bound, keeps in zip(bounds, kept) if not keeps]


def fault_meant(problem: dict, program: Program, shape: tuple[int, int, int]) -> Finding | None:
    """A fault outside A, B or C at a site's access, told by the element the thread meant (None: no such site,
    or the report's element is not off its matrix)."""
    site = program.sites.site(problem.get("site"))
    fields = ("matrix", "row", "column", "stride", "thread", "block", "buffer", "side")
    if site is None or not site.indexed or not all(key in problem for key in fields):
        return None
    kinds = _kinds(problem, shape)
    if not kinds:
        return None
    noun = {"read": "read", "write": "write"}.get(problem.get("access"), "access")
    buffer = program.name(problem["buffer"])
    where = f"past {buffer}'s end" if problem["side"] == "after" else f"before {buffer}'s start"
    return Finding(f"out-of-bounds {noun} of {buffer} at line {site.line}: {by_thread(problem)} "
                   f"{_what_it_meant(site, problem, kinds, program, shape, reaches=False)}; that is {where}",
                   _index_fix(site, problem["matrix"], kinds[0], program))


# --- C read before it was stored --------------------------------------------------------------------------------

NOT_ZEROED = ("the grader's C starts as NaN, as a real C holds whatever was there; add up the sum in a variable "
              "and store it with `=`")


def read_before_stored(record: dict, program: Program) -> Finding | None:
    """A read of C (`C[i] += sum`, or C[i] in a sum) before any thread stored that element in the launch."""
    site = program.sites.site(record["site"])
    if site is None or site.access not in (LOAD, UPDATE):
        return None
    matrix = program.name("C")
    how = f"adds to {matrix} (`{site.operator}`)" if site.access == UPDATE else f"reads {matrix}"
    return Finding(f"{by_thread(record)} {DOES[site.access]} {matrix}[{record['row']}][{record['column']}] "
                   f"({site.expression} at line {site.line}) before any thread stored it",
                   f"line {site.line} {how} before {matrix} was ever written: {NOT_ZEROED}")


def unstored(record: dict, program: Program) -> Finding | None:
    """A thread that stored nothing into C, whose element (the launch's) no thread stored, where C's one store
    has a guard that does not keep C's bounds: that guard is why (None where it is not so)."""
    matrix = program.name("C")
    stores = [site for site in program.sites.sites if site.access != LOAD and site.matrix == matrix]
    if len(stores) != 1 or not stores[0].indexed or not stores[0].guard or not _bounds(stores[0], "C", program)[1]:
        return None
    site = stores[0]
    return Finding(f"{by_thread(record)} stored nothing into {matrix}, where the launch gives it "
                   f"{matrix}[{record['row']}][{record['column']}], which no thread stored: the store at line "
                   f"{site.line} runs only where `{site.guard}`", _index_fix(site, "C", ROW, program))


# --- the tile loop's trips ----------------------------------------------------------------------------------------


def trip_count(record: dict, program: Program, shape: tuple[int, int, int]) -> Finding | None:
    """The tile loop ran the same number of times in every thread, and not ceil(k / TILE): which of a few
    counts it was, and that a store to C inside it never ran when it ran 0 times."""
    loop, tile = program.sites.tile_loop, program.tile
    count = record["most"]
    if loop is None or tile <= 0 or record["fewest"] != count:
        return None
    m, n, k = shape
    needed = -(-k // tile)
    names = {role: next((name for name in program.all_names(role) if name in loop.names), program.name(role))
             for role in "mnk"}  # as the loop's condition names them, where it does
    if count == needed:
        return _thread_guard(loop, program, f"ceil({names['k']} / {tile}) = {needed}")
    runs = " = ".join([*_counts_like(count, names, shape, tile, loop.names), str(count)])
    fact = (f"the tile loop at line {loop.line} runs {runs} times here ({names['m']} = {m}, {names['n']} = {n}, "
            f"{names['k']} = {k}); the dot product needs ceil({names['k']} / {tile}) = {needed}")
    inside = [site for site in program.sites.sites if site.matrix == program.name("C") and site.access != LOAD
              and loop.holds(site.line)]
    if count == 0 and inside:
        fact += f": the store to {program.name('C')} at line {inside[0].line}, inside it, never runs"
    condition = f" (`{loop.condition}`)" if loop.condition else ""
    return Finding(fact, f"the tile loop at line {loop.line}{condition} must run ceil({names['k']} / {tile}) times, "
                         f"({names['k']} + {tile - 1}) / {tile} in integer arithmetic: one trip per tile of the "
                         f"{names['k']} terms of each dot product")


def _thread_guard(loop, program: Program, runs: str) -> Finding | None:
    """Where the trips are right, an inner-product guard that tests the thread's index (`p * TILE + tx < k` in the
    loop over i), not the loop's: it drops whole phases for some threads, however many phases run."""
    guard = next((g for g in loop.thread_guards if set(program.all_names("k")) & set(_NAME.findall(g[1]))), None)
    if guard is None:
        return None
    line, condition, counter, thread = guard
    meant = re.sub(rf"\b{re.escape(thread)}\b", counter, condition)
    return Finding(f"the tile loop at line {loop.line} runs {runs} times, as it must; inside it, the inner product "
                   f"at line {line} runs only where `{condition}`, which tests the thread's {thread}, not the term "
                   f"{counter}",
                   f"line {line} guards each term of the dot product with `{condition}`: it tests the thread's own "
                   f"{thread}, so a thread drops every term of a phase or none: test the term's index, `{meant}`")


def phases_all_ran(event: dict, program: Program, shape: tuple[int, int, int]) -> bool:
    """Whether every thread's tile loop ran ceil(k / TILE) times: the phase count is right, whatever C holds."""
    loops, tile = event.get("tile_loops", []), program.tile
    return bool(loops) and tile > 0 and all(r["fewest"] == r["most"] == -(-shape[2] // tile) for r in loops)


def _counts_like(count: int, names: dict[str, str], shape: tuple[int, int, int], tile: int,
                 read: frozenset[str]) -> list[str]:
    """The phase counts a wrong loop bound makes that equal `count`: the first of a size the loop's condition
    reads, else the first two of any size."""
    m, n, k = shape
    counts = [("k", f"floor({names['k']} / {tile})", k // tile), ("n", f"ceil({names['n']} / {tile})", -(-n // tile)),
              ("m", f"ceil({names['m']} / {tile})", -(-m // tile)), ("n", f"floor({names['n']} / {tile})", n // tile),
              ("m", f"floor({names['m']} / {tile})", m // tile),
              ("k", f"ceil({names['k']} / {tile}) + 1", -(-k // tile) + 1), ("k", names["k"], k),
              ("n", names["n"], n), ("m", names["m"], m)]
    equal = [(role, said) for role, said, value in counts if value == count]
    by_condition = [said for role, said in equal if names[role] in read]
    return by_condition[:1] or [said for _, said in equal][:2]


# --- the thread-to-element mapping --------------------------------------------------------------------------------


def transposed(record: dict, program: Program) -> Finding | None:
    """Every store into C went to the element the transposed launch would give its thread (none to the one
    this lab's launch gives): the kernel takes its row from the launch's other axis."""
    stores = record["stores"]
    if stores == 0 or record["transposed"] != stores or record["as_launched"] == stores or "thread" not in record:
        return None
    matrix, tile, rows_lab = program.name("C"), program.tile, program.x == ROWS
    line = _row_line(record["line"], program)
    axis, other = ("y", "x") if rows_lab else ("x", "y")
    lab = "rows" if rows_lab else "columns"
    (bx, by, _), (tx, ty, _) = record["block"], record["thread"]
    along_x, along_y = bx * tile + tx, by * tile + ty
    given = (along_x, along_y) if rows_lab else (along_y, along_x)
    fact = (f"every thread stores the element of {matrix} whose row its blockIdx.{axis} and threadIdx.{axis} pick: "
            f"{by_thread(record)} stores {matrix}[{record['row']}][{record['column']}] (line {record['line']}), where "
            f"this lab's launch gives it {matrix}[{given[0]}][{given[1]}]")
    fix = (f"line {line} takes the row from threadIdx.{axis}: this lab launches x over {matrix}'s {lab}, so the row "
           f"is blockIdx.{other} * {tile} + threadIdx.{other} and the column blockIdx.{axis} * {tile} + "
           f"threadIdx.{axis}")
    return Finding(fact, fix, notes=(("launch_matches", f"kernel.launch: {{x: {'columns' if rows_lab else 'rows'}}}"),))


def _row_line(store_line: int, program: Program) -> int:
    """Where the row of the store into C at that line is computed (its declaration), else the store's line."""
    site = next((site for site in program.sites.sites if site.line == store_line and site.indexed
                 and site.access != LOAD), None)
    return site.row_line if site is not None else store_line


# --- a case's evidence -------------------------------------------------------------------------------------------


def observed(event: dict, program: Program, shape: tuple[int, int, int]) -> list[Finding]:
    """What a case's event says the emulator saw of A, B and C, root causes first: indices off their matrix, C
    read before it was stored, the tile loop's trip count, the transposed launch."""
    found = off_matrix(event.get("indices", []), program, shape)
    found += [read_before_stored(record, program) for record in event.get("c_reads", [])]
    found += [trip_count(record, program, shape) for record in event.get("tile_loops", [])]
    found += [transposed(record, program) for record in event.get("mappings", [])]
    found += [unstored(record, program) for record in event.get("unstored", [])]
    return [finding for finding in found if finding is not None]


def stores_off_c(event: dict, program: Program) -> bool:
    """Whether a store's index went off C's rows and columns: what makes C depend on the threads' order then."""
    sites = [program.sites.site(record["site"]) for record in event.get("indices", [])]
    return any(site is not None and site.access != LOAD for site in sites)
