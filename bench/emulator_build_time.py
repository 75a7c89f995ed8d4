"""Seconds of each of the CPU emulator's builds (one core, as a grade's compile takes it).

Usage: python3 bench/emulator_build_time.py [--rounds N] [SUBMISSION ...]   (default: good_basic and
good_tile32_macro_sync). Prints the per-version builds made into an empty cache (the harness's object, the
precompiled header, both at once as `grade prepare` makes them), and per submission the build of its unit
(compile in the sandbox, and link) with those in the cache: the median and best of N rounds, each a source no
build has seen (a comment added), so the cache never answers it.
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchlib import ROOT

from grader.config import load_config
from grader.execute.confine.sandbox import detect, scratch_folder
from grader.execute.cpu import build as emulator

SUBMISSIONS = ROOT / "tests" / "submissions"
DEFAULT = ["good_basic", "good_tile32_macro_sync"]


def timed(call, *arguments) -> float:
    started = time.perf_counter()
    call(*arguments)
    return time.perf_counter() - started


def per_version(cxx: str) -> dict[str, float]:
    """Each build made once per grader version, into an empty cache: alone, then together."""
    seconds = {}
    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        seconds["harness object"] = timed(emulator.harness_object, cxx, work / "a", 600, work / "harness.o")
        seconds["precompiled header"] = timed(emulator.precompiled_header, cxx, work / "b", 600, work / "precompiled")
        seconds["both (prepare)"] = timed(emulator.prepare, work / "c", 600)
    return seconds


def unit_seconds(name: str, contract, cache: Path, rounds: int) -> list[float]:
    source = (SUBMISSIONS / name / "kernel.cu").read_text()
    sandbox, times = detect(), []
    for round_ in range(rounds):
        with scratch_folder("sgemm-bench-") as work:
            unique = f"{source}\n// round {round_} {time.time_ns()}\n"
            times.append(timed(emulator.build, unique, contract, contract.tile_source(""), cache, work, sandbox, 600))
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("submissions", nargs="*", default=DEFAULT)
    args = parser.parse_args()
    cxx = emulator.compiler()
    contract = load_config(ROOT / "config.yaml").kernel.contract()
    for what, seconds in per_version(cxx).items():
        print(f"{what:<28} {seconds:6.2f} s")
    with tempfile.TemporaryDirectory() as cache:
        emulator.prepare(Path(cache), 600)
        for name in args.submissions:
            times = unit_seconds(name, contract, Path(cache), args.rounds)
            print(f"unit {name:<23} {statistics.median(times):6.2f} s median, {min(times):.2f} s best "
                  f"of {len(times)}")


if __name__ == "__main__":
    main()
