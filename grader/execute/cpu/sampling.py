"""Block sampling: which blocks of a case too large to emulate whole the CPU emulator runs (issues 47, 49).

A large case's grid has thousands of blocks; emulating every one costs minutes. The bugs of a tiled kernel
sit where its bounds bite (the last block row and the last block column, ragged there, and their corner) or
show in any block (a wrong stride, a missing barrier). So the emulator runs every edge block, a sample of the
interior ones, and the blocks the caller names (where the GPU found wrong elements), each emulated fully and
instrumented exactly as a small case's are (bounds, races, divergence, unwritten reads), and the judge checks
every element of those blocks' tiles of C against a float64 truth computed for just those elements.

Which interior blocks: a seeded sample (`BlockSample.seed`, derived from the case's seed, which the grading
secret is mixed into: cases.py), so nobody without the secret can predict them. Everything here is in tiles
of C (tile row, tile column), which is what the judge checks; `launched_blocks` turns them into the blockIdx
the kernel contract launches them as. Pure: the driver and the parent compute the same tiles from the same
sample and tile size, so the parent never takes the child's word for what was checked.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from ...contract import ROWS

Tile = tuple[int, int]  # (tile row, tile column) of C


@dataclass(frozen=True)
class BlockSample:
    """How a case is sampled: `interior` interior tiles drawn with `seed`, and the `extra` tiles run as well."""

    seed: int
    interior: int
    extra: tuple[Tile, ...] = ()

    def to_wire(self) -> dict:
        return {"seed": self.seed, "interior": self.interior, "extra": [list(tile) for tile in self.extra]}

    @classmethod
    def from_wire(cls, data: dict) -> BlockSample:
        return cls(int(data["seed"]), int(data["interior"]), tuple((int(r), int(c)) for r, c in data.get("extra", ())))


@dataclass(frozen=True)
class SampledTiles:
    """The tiles of C a sampled case runs: the edge ones, the sampled interior ones, the extra ones asked for
    (those not already among the others), out of `total`."""

    edge: tuple[Tile, ...]
    interior: tuple[Tile, ...]
    extra: tuple[Tile, ...] = ()
    total: int = 0
    grid: Tile = field(default=(0, 0))  # tile rows, tile columns

    @property
    def all(self) -> list[Tile]:
        return sorted({*self.edge, *self.interior, *self.extra})

    def describe(self) -> str:
        """What was checked, in words: "the 129 edge tiles and 64 sampled interior tiles of 4,160"."""
        parts = [_count(len(self.edge), "edge tile")]
        if self.interior:
            parts.append(_count(len(self.interior), "sampled interior tile"))
        if self.extra:
            parts.append(_count(len(self.extra), "tile", " where the GPU found wrong elements"))
        listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        return f"the {listed} of {self.total:,}"


def _count(number: int, what: str, after: str = "") -> str:
    return f"{number:,} {what}{'' if number == 1 else 's'}{after}"


def sampled_tiles(m: int, n: int, tile: int, sample: BlockSample) -> SampledTiles:
    """The edge tiles: every tile of the last tile row and the last tile column (the corner among them), and the
    first tile (where a kernel's "thread zero" code runs); `sample.interior` of the others drawn by the seed (all of
    them when there are no more), with, on a square grid, each one's transpose (a kernel that takes its row from
    blockIdx.x computes the transposed tile, and is right on a square C: both are run); the extra tiles in C."""
    rows, columns = -(-m // tile), -(-n // tile)
    edge = tuple(sorted({(rows - 1, c) for c in range(columns)} | {(r, columns - 1) for r in range(rows)} | {(0, 0)}))
    inner = [(r, c) for r in range(rows - 1) for c in range(columns - 1) if (r, c) != (0, 0)]
    drawn = set(random.Random(sample.seed).sample(inner, min(sample.interior, len(inner))))
    if rows == columns:
        drawn |= {(c, r) for r, c in drawn}
    chosen = {*edge, *drawn}
    extra = tuple(sorted({t for t in sample.extra if 0 <= t[0] < rows and 0 <= t[1] < columns} - chosen))
    return SampledTiles(edge, tuple(sorted(drawn)), extra, rows * columns, (rows, columns))


def launched_blocks(tiles: list[Tile], x: str) -> list[tuple[int, int]]:
    """The blockIdx (x, y) that computes each tile under the kernel contract: x over C's columns, or its rows."""
    return [(r, c) if x == ROWS else (c, r) for r, c in tiles]


def tiles_of_elements(rows, columns, tile: int, most: int) -> tuple[Tile, ...]:
    """The tiles holding the given elements of C (e.g. the wrong ones the GPU found), at most `most` of them,
    spread over the list (the first, the last, and evenly between)."""
    found = sorted({(int(r) // tile, int(c) // tile) for r, c in zip(rows, columns)})
    if len(found) <= most:
        return tuple(found)
    step = (len(found) - 1) / max(most - 1, 1)
    return tuple(sorted({found[round(i * step)] for i in range(most)}))


def block_parts(blocks: list, parts: int) -> list[list]:
    """`blocks` cut into `parts` contiguous runs, in order, their lengths differing by one at most (the CPU driver
    runs each run in a worker of its own: schedule.py)."""
    return [blocks[len(blocks) * part // parts:len(blocks) * (part + 1) // parts] for part in range(parts)]
