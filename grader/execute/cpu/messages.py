"""What the CPU emulator found, told to a student: races, barrier divergence, out-of-bounds accesses, two
threads storing one element of C, a tile entry read before any thread stored it (unsafe where its value
reaches C, a hint where it does not).

Pure functions of the harness's reports (see harness.cpp and cuda_emu.h for their fields). Each text names
what the emulator saw; a fix names a barrier only where it saw a store and a read of one shared entry with
no barrier between them. A race inside the tile loop is told by each access's trip of it: a store for the
next tile while another thread still reads this one is the barrier that ends the loop's body missing, not
one between lines that already have one. What the emulator saw of A, B and C: evidence.py.
"""
from __future__ import annotations

from ...judge.findings import (
    DIVERGENT_BARRIER,
    DIVERGENT_WARP,
    FIX_BARRIER_DIVERGENCE,
    FIX_LOAD_BARRIER,
    FIX_USE_BARRIER,
    INVALID_ADDRESS,
    OUT_OF_BOUNDS_READ,
    OUT_OF_BOUNDS_WRITE,
    SHARED_RACE,
    UNWRITTEN_READ,
    Finding,
)
from ...judge.layout import GUARD_BEFORE, guard_after
from .evidence import Program, fault_meant
from .evidence import xy as _xy
from .sites import TileLoop

LOAD_BARRIER, USE_BARRIER = FIX_LOAD_BARRIER, FIX_USE_BARRIER


def _element(race: dict) -> str:
    return (f"{race['array']}[{race['row']}][{race['column']}]" if race["two_d"]
            else f"{race['array']}[{race['column']}]")


def describe_race(race: dict, loop: TileLoop | None = None) -> Finding:
    element, block = _element(race), _xy(race["block"])
    if race["kind"] == "store_after_store":
        return _two_stores(race, element, block)
    if loop is not None and "store_trip" in race and all(loop.holds(race[f"{who}_line"]) for who in ("store", "other")):
        return _race_in_trips(race, element, block, loop)
    store = f"thread {_xy(race['store_thread'])} stores {element} at line {race['store_line']}"
    other = f"thread {_xy(race['other_thread'])}"
    if race["kind"] == "read_after_store":
        what = (f"{other} reads {element} at line {race['other_line']} after {store}, in the same phase "
                f"(block {block}, no __syncthreads() ran between them)")
    else:
        what = (f"{store} while {_reader(race)} still read it at line {race['other_line']} "
                f"(block {block}, no __syncthreads() ran between them)")
    return Finding(f"shared-memory race: {what}", USE_BARRIER if race["store_after_read"] else LOAD_BARRIER,
                   SHARED_RACE)


def _reader(race: dict) -> str:
    return f"thread {_xy(race['other_thread'])}" if race["other_thread"] != race["store_thread"] else "other threads"


def _race_in_trips(race: dict, element: str, block: str, loop: TileLoop) -> Finding:
    """A race of two accesses in the tile loop, told by their trips: a store for a later trip than the read's
    overtook this tile's reads (the barrier at the end of the loop's body is missing); one of the same trip came
    before or after the read with no barrier between the loads and the reads (the one after loading)."""
    stored, read = race["store_trip"], race["other_trip"]
    storer, reader = f"thread {_xy(race['store_thread'])}", _reader(race)
    at = f"shared-memory race in block {block}: "
    if stored > read:
        missing = f"follows the reads before the loop body ends (line {loop.end_line})"
        if race.get("barrier_line"):
            missing = f"the __syncthreads() at line {race['barrier_line']} precedes the reads, and none {missing}"
        else:
            missing = f"no __syncthreads() {missing}"
        return Finding(f"{at}{storer} already stores {element} for the next tile (line {race['store_line']}, trip "
                       f"{stored} of the tile loop at line {loop.line}) while {reader} still reads this tile's "
                       f"(line {race['other_line']}, trip {read}): {missing}", USE_BARRIER, SHARED_RACE)
    order = "after" if race["kind"] == "read_after_store" else "before"
    return Finding(f"{at}{reader} reads {element} at line {race['other_line']} {order} {storer} stores it at line "
                   f"{race['store_line']} for the same tile (trip {stored} of the tile loop at line {loop.line}), and "
                   "no __syncthreads() runs between the tile's stores and its reads", LOAD_BARRIER, SHARED_RACE)


def _two_stores(race: dict, element: str, block: str) -> Finding:
    """Two threads store one tile entry in one phase: no barrier orders that, each entry has one owner."""
    lines = sorted({race["store_line"], race["other_line"]})
    at = f"line {lines[0]}" if len(lines) == 1 else f"lines {lines[0]} and {lines[1]}"
    return Finding(f"threads {_xy(race['other_thread'])} and {_xy(race['store_thread'])} of block {block} both store "
                   f"{element} ({at}) in the same phase",
                   f"check the index of your store to {race['array']} at {at}: each thread of a block must store "
                   "its own entry of the tile", SHARED_RACE)


def describe_races(races: list[dict], differing: int, elements: int, collisions: int = 0,
                   loop: TileLoop | None = None) -> list[Finding]:
    """Every race the run showed (none: an empty list). Outputs that differ between thread orders are told as
    such; when the emulator saw two threads store one element of C, or a store off C's rows and columns
    (`collisions` counts either), that finding explains them instead."""
    found = [describe_race(race, loop) for race in races]
    if differing and not found and not collisions:
        found.append(Finding(
            f"the result depends on the order the threads run in ({differing} of {elements} elements of C "
            "differ between forward and reversed thread order), though the emulator saw no two threads touch "
            "one shared entry, or store one element of C, between barriers: look for shared memory reached "
            "through a pointer, or a thread reading what another stores in global memory"))
    return found


def describe_collision(collision: dict, elements: int) -> Finding:
    """Two threads stored one element of C (`elements`: how many elements of C more than one thread stored)."""
    first, second = _thread_in_block(collision, "other_"), _thread_in_block(collision, "")
    lines = sorted({collision["other_line"], collision["line"]})
    at = f"line {lines[0]}" if len(lines) == 1 else f"lines {lines[0]} and {lines[1]}"
    if collision["block"] == collision["other_block"]:
        who = (f"threads {_xy(collision['other_thread'])} and {_xy(collision['thread'])} of block "
               f"{_xy(collision['block'])}")
    else:
        who = f"{first} and {second}"
    fact = f"{who} both store C[{collision['row']}][{collision['column']}] ({at})"
    if elements > 1:
        fact += f"; {elements} elements of C are stored by more than one thread"
    axis = _only_difference(collision)
    if axis:
        return Finding(fact + f": the two threads differ only in threadIdx.{axis}",
                       "the grader launches blocks of tile × tile threads, in threadIdx.x and threadIdx.y: your "
                       "row and column must tell every thread of a block apart, so each stores its own element of C")
    return Finding(fact, f"check the index of your store to C ({at}) and the condition that guards it: C is m×n, "
                   "so element [row][col] is C[row * n + col], stored only where row < m and col < n, each by its "
                   "own thread")


def _thread_in_block(report: dict, prefix: str) -> str:
    return f"thread {_xy(report[prefix + 'thread'])} of block {_xy(report[prefix + 'block'])}"


def _only_difference(collision: dict) -> str:
    """"x" or "y" when the two threads are of one block and differ in that index alone (else ""): the index
    of C does not depend on it, as in a kernel written for blocks of another shape."""
    mine, other = collision["thread"], collision["other_thread"]
    differ = [axis for axis, a, b in zip("xyz", mine, other) if a != b]
    same_block = collision["block"] == collision["other_block"]
    return differ[0] if same_block and len(differ) == 1 and differ[0] in "xy" else ""


POISONED = ("it holds the NaN the grader fills shared memory with at each block's start (on a GPU, whatever was "
            "there before)")


def _loads_fix(array: str) -> str:
    return (f"check the loads into {array}: every entry the tile loop reads must be stored by a thread of the block "
            "before the barrier that comes before the reads")


def describe_unwritten_in_c(record: dict, first_read: dict | None = None) -> Finding:
    """Values read from shared entries no thread of the block stored reached C (unsafe): told at the read (the
    entry, its line, the thread) and at the store into C. Where the harness could not say which read it was,
    `first_read` (the launch's first such read) names the array to check."""
    element = f"C[{record['row']}][{record['column']}]"
    if "line" in record:
        element += f" (stored at line {record['line']} by {_thread_in_block(record, '')})"
    count = record["elements"]
    also = f"; {count} elements of C are" if count > 1 else ""
    if "read_line" in record:
        entry = _element({"array": record["array"], "two_d": record["two_d"], "row": record["entry_row"],
                          "column": record["entry_column"]})
        read = (f"{entry} is read at line {record['read_line']} (thread {_xy(record['read_thread'])} of block "
                f"{_xy(record['read_block'])}) before any thread of the block stored it: {POISONED}")
        return Finding(f"{read}; that value reaches C: {element} is computed from it{also}",
                       _loads_fix(record["array"]), UNWRITTEN_READ)
    array = first_read["array"] if first_read else "the tiles"
    return Finding(f"{element} is computed from a shared entry no thread of its block stored{also}: {POISONED}",
                   _loads_fix(array), UNWRITTEN_READ)


def unstored_read_hint(read: dict) -> str:
    """A read of a shared entry no thread of the block stored, whose value reached no element of C: no point
    depends on it, and the words hold for every case it shows in (no thread, no block)."""
    return (f"line {read['line']} reads entries of {read['array']} that no thread of the block stored (the NaN "
            "the grader fills shared memory with; on a GPU, whatever was there before): their values reach no "
            f"element of C, so no point depends on them. Cleaner: store 0 into {read['array']} where the load falls "
            "outside the matrix (an else branch), or read only the entries the block stored")


def describe_problem(problem: dict, shape: tuple[int, int, int] | None = None,
                     program: Program | None = None) -> Finding:
    """A fault or barrier divergence that ended the emulated launch; `shape` (m, n, k) places an access
    outside A or B in their rows and columns, by the element the thread meant where `program` has the site."""
    if problem["event"] == "divergence":
        return _divergence(problem)
    if problem["event"] == "warp_divergence":
        return _warp_divergence(problem)
    what = problem["what"]
    where = (f"thread {_xy(problem['thread'])} of block {_xy(problem['block'])}"
             if "thread" in problem else "the kernel")
    if what == "out_of_bounds":
        meant = fault_meant(problem, program, shape) if program is not None and shape is not None else None
        if meant is not None:
            return Finding(meant.fact, meant.fix, _out_of_bounds_kind(problem))
        if shape is not None and problem["buffer"] in LAYOUTS:
            return _outside_input(problem, where, shape)
        return _out_of_bounds(problem, where)
    if what == "invalid_address":
        return Finding(f"invalid memory {problem['access']}{_at_line(problem)}: {where} accessed an address "
                       "outside A, B and C", "check the index arithmetic of every load and store", INVALID_ADDRESS)
    if what == "trap":
        return Finding(f"kernel aborted: __trap() at line {problem['line']} ({where})")
    if what == "abort":
        return Finding(f"kernel aborted: an assert failed ({where})")
    if what == "stack_overflow":
        return Finding(f"stack overflow in {where}", "a very large local array, or endless recursion")
    if what == "arithmetic":
        return Finding(f"arithmetic fault in {where}: an integer division or remainder by zero")
    if what == "crashed":
        return Finding(f"the emulated kernel crashed (exit code {problem['returncode']})")
    return Finding(f"kernel fault ({what}) in {where}")


def _out_of_bounds(problem: dict, where: str) -> Finding:
    buffer, count = problem["buffer"], problem["elements"]
    if problem["side"] == "after":
        position = "just past the end" if count == 0 else f"{count + 1} elements past the end"
    else:
        position = f"{count} element{'s' if count != 1 else ''} before the start"
    shape = {"A": "m×k", "B": "k×n", "C": "m×n"}[buffer]
    access = {"read": "read", "write": "write"}.get(problem["access"], "access")
    return Finding(f"out-of-bounds {access} of {buffer}{_at_line(problem)}: {where} touched {buffer} {position} "
                   f"({buffer} is {shape})",
                   "check the bounds on the row, the column and the k index of every load and store",
                   _out_of_bounds_kind(problem))


# Each buffer's (rows, columns) of (m, n, k), and the names of its row and column index.
LAYOUTS = {"A": (("m", "k"), ("row", "k")), "B": (("k", "n"), ("k", "col")), "C": (("m", "n"), ("row", "col"))}


def _outside_input(problem: dict, where: str, shape: tuple[int, int, int]) -> Finding:
    """An access outside A, B or C, told by the element it would be in the buffer's rows (the stride is the
    buffer's width)."""
    buffer, count = problem["buffer"], problem["elements"]
    sizes = dict(zip("mnk", shape))
    (rows_name, columns_name), (row_index, column_index) = LAYOUTS[buffer]
    rows, columns = sizes[rows_name], sizes[columns_name]
    access = {"read": "reads", "write": "writes"}.get(problem["access"], "touches")
    if buffer == "C":  # the emulator's C has the grader's guard bands around it: the fault is beyond them
        count += guard_after(columns) if problem["side"] == "after" else GUARD_BEFORE
    if problem["side"] == "after":
        flat = rows * columns + count
        element = (f"{buffer}[{row_index}={flat // columns}][{column_index}={flat % columns}] "
                   f"(element {flat}) past {buffer}'s end")
    else:
        element = f"{count} element{'s' if count != 1 else ''} before the start of {buffer}"
    noun = {"read": "read", "write": "write"}.get(problem["access"], "access")
    fact = (f"out-of-bounds {noun} of {buffer}{_at_line(problem)}: {where} {access} {element}: {buffer} is "
            f"{rows_name}×{columns_name} = {rows}×{columns}, row stride {columns_name} = {columns}")
    line = problem.get("line", 0)
    read = f"the {noun} of {buffer} at line {line}" if line > 0 else f"every {noun} of {buffer}"
    return Finding(fact, f"check the index of {read}: {buffer} is {rows_name}×{columns_name}, so its element [r][c] "
                   f"is {buffer}[r * {columns_name} + c], with r < {rows_name} and c < {columns_name}",
                   _out_of_bounds_kind(problem))


def _out_of_bounds_kind(problem: dict) -> str:
    """A store outside a buffer is a write; a load, or an access the fault did not tell, a read."""
    return OUT_OF_BOUNDS_WRITE if problem.get("access") == "write" else OUT_OF_BOUNDS_READ


def _at_line(problem: dict) -> str:
    """Where the faulting thread was: the kernel statement it ran (0: none was marked)."""
    return f" at line {problem['line']}" if problem.get("line", 0) > 0 else ""


def _divergence(problem: dict) -> Finding:
    block, waiting, other = _xy(problem["block"]), _xy(problem["thread"]), _xy(problem["other_thread"])
    rule = FIX_BARRIER_DIVERGENCE
    if problem["kind"] == "exited":
        return Finding(f"barrier divergence in block {block}: thread {waiting} waits at the __syncthreads() on "
                       f"line {problem['line']}, but thread {other} has already returned", rule, DIVERGENT_BARRIER)
    return Finding(f"barrier divergence in block {block}: thread {waiting} waits at the __syncthreads() on line "
                   f"{problem['line']} while thread {other} waits at the one on line {problem['other_line']}", rule,
                   DIVERGENT_BARRIER)


WARP_RULE = ("every thread a warp primitive's mask names must call it: with a full mask (0xffffffff) all 32 threads "
             "of the warp must get there, so do not return early or call it inside an if only some of them enter "
             "(give out-of-range threads a neutral value, e.g. 0, and let every thread call it), or pass a mask "
             "of only the threads that call it")


def _warp_divergence(problem: dict) -> Finding:
    """A warp collective that some lane of its mask never reached: a hang or garbage on the GPU."""
    block, waiting, other = _xy(problem["block"]), _xy(problem["thread"]), _xy(problem["other_thread"])
    mask, arrived = problem["mask"] & 0xFFFFFFFF, problem["arrived"]
    named = "all 32 threads of its warp" if mask == 0xFFFFFFFF else f"the threads of mask {mask:#010x}"
    company = f" (with {arrived - 1} other thread{'s' if arrived != 2 else ''} of its warp)" if arrived > 1 else ""
    state = problem["other_state"]
    if state == "exited":
        where = "has already returned"
    elif state == "barrier":
        where = f"waits at the __syncthreads() on line {problem['other_line']}"
    else:
        where = f"waits at {problem['other_primitive']} on line {problem['other_line']}"
    return Finding(f"warp divergence in block {block}: thread {waiting}{company} calls {problem['primitive']} at "
                   f"line {problem['line']} with mask {mask:#010x}, naming {named}, but thread {other} of that "
                   f"warp {where}", WARP_RULE, DIVERGENT_WARP)
