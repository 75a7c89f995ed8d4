"""What the CPU emulator found, told to a student: races, barrier divergence, out-of-bounds accesses.

Pure functions of the harness's reports (see harness.cpp and cuda_emu.h for their fields).
"""
from __future__ import annotations

from ...findings import Finding

LOAD_BARRIER = ("the barrier after loading the tiles is missing: add __syncthreads() after the loads, "
                "before any thread reads the tiles")
USE_BARRIER = ("the barrier after using the tiles is missing: add __syncthreads() after the loop that reads the "
               "tiles, so no thread loads the next phase's tiles while others still read these")


def _xy(values: list[int]) -> str:
    x, y, z = values
    return f"({x}, {y})" if z == 0 else f"({x}, {y}, {z})"


def _element(race: dict) -> str:
    return (f"{race['array']}[{race['row']}][{race['column']}]" if race["two_d"]
            else f"{race['array']}[{race['column']}]")


def describe_race(race: dict) -> Finding:
    element, block = _element(race), _xy(race["block"])
    store = f"thread {_xy(race['store_thread'])} stores {element} at line {race['store_line']}"
    other = f"thread {_xy(race['other_thread'])}"
    if race["kind"] == "read_after_store":
        what = (f"{other} reads {element} at line {race['other_line']} after {store}, in the same phase "
                f"(block {block}, no __syncthreads() between them)")
    elif race["kind"] == "store_after_read":
        reader = other if race["other_thread"] != race["store_thread"] else "other threads"
        what = (f"{store} while {reader} still read it at line {race['other_line']} "
                f"(block {block}, no __syncthreads() between them)")
    else:
        what = (f"{store}, and {other} stores it at line {race['other_line']}, with no __syncthreads() "
                f"between them (block {block})")
    return Finding(f"shared-memory race: {what}", USE_BARRIER if race["store_after_read"] else LOAD_BARRIER)


def describe_races(races: list[dict], differing: int, elements: int) -> list[Finding]:
    """Every race the run showed (none: an empty list)."""
    found = [describe_race(race) for race in races]
    if differing and not found:
        found.append(Finding(
            f"race: the result depends on the order the threads run in ({differing} of {elements} elements of C "
            "differ between forward and reversed thread order)",
            "some thread reads data another thread writes with no __syncthreads() between them: add the barrier"))
    return found


def describe_problem(problem: dict) -> Finding:
    """A fault or barrier divergence that ended the emulated launch."""
    if problem["event"] == "divergence":
        return _divergence(problem)
    if problem["event"] == "warp_divergence":
        return _warp_divergence(problem)
    what = problem["what"]
    where = (f"thread {_xy(problem['thread'])} of block {_xy(problem['block'])}"
             if "thread" in problem else "the kernel")
    if what == "out_of_bounds":
        return _out_of_bounds(problem, where)
    if what == "invalid_address":
        return Finding(f"invalid memory {problem['access']}{_at_line(problem)}: {where} accessed an address "
                       "outside A, B and C", "check the index arithmetic of every load and store")
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
                   "check the bounds on the row, the column and the k index of every load and store")


def _at_line(problem: dict) -> str:
    """Where the faulting thread was: the kernel statement it ran (0: none was marked)."""
    return f" at line {problem['line']}" if problem.get("line", 0) > 0 else ""


def _divergence(problem: dict) -> Finding:
    block, waiting, other = _xy(problem["block"]), _xy(problem["thread"]), _xy(problem["other_thread"])
    rule = ("every thread of a block must reach every __syncthreads(): do not put one inside an if, or return "
            "early, on a condition only some threads meet")
    if problem["kind"] == "exited":
        return Finding(f"barrier divergence in block {block}: thread {waiting} waits at the __syncthreads() on "
                       f"line {problem['line']}, but thread {other} has already returned", rule)
    return Finding(f"barrier divergence in block {block}: thread {waiting} waits at the __syncthreads() on line "
                   f"{problem['line']} while thread {other} waits at the one on line {problem['other_line']}", rule)


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
                   f"warp {where}", WARP_RULE)
