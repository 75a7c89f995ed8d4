"""The kernel contract: what the lab's kernel is called, what it takes in which order, where its tile size
comes from, and how it is launched.

Built once from config (`KernelConfig.contract()`). The GPU child, the CPU emulator's launch, the
sanitizer's launch program and the declaration checks all read this one object, so no launcher can
disagree with another about an argument, its type or the grid. Parameters are roles: the matrices A, B
and C, and the sizes m, n and k, a size repeated under any name (ECE408's numARows = m, numAColumns = k,
numBRows = k, numBColumns = n, numCRows = m, numCColumns = n), or for a square lab the one size `width`
(the PMPP textbook's `MatrixMulKernel(float *M, float *N, float *P, int Width)`: m = n = k).

The launch is one thread per element of C in tile × tile blocks, the grid's x over C's columns (the
default) or over its rows (`kernel.launch.x: rows`: the student's host launches row = blockIdx.x * T +
threadIdx.x). The block is always tile × tile: every tiled lab this grader knows (ECE408 MP3, PMPP
chapter 5, the project's own) launches one thread per tile entry, and a kernel written for another block
shape is not that lab's kernel. A lab that needs another shape adds it here, in `launch`, the one place
every launcher reads the geometry. What reads block coordinates after a launch is orientation-neutral:
the late-warps hook holds back blocks near the border along x and y alike, and the judge (locate.py)
speaks of C's rows and columns, never of blockIdx.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

SIZES, MATRICES = ("m", "n", "k"), ("A", "B", "C")
ROLES = SIZES + MATRICES
WIDTH = "width"  # a square lab's one size: m = n = k
KNOWN_ROLES = ROLES + (WIDTH,)
# How every launcher passes a role: a size as a 32-bit int, a matrix as a 64-bit pointer to float.
SPELLING = {"m": "int m", "n": "int n", "k": "int k", "A": "const float *A", "B": "const float *B", "C": "float *C",
            WIDTH: "int width"}
ARGUMENT_BYTES = {"m": 4, "n": 4, "k": 4, "A": 8, "B": 8, "C": 8, WIDTH: 4}
# Which of C's dimensions the grid's x (and threadIdx.x) runs over: config kernel.launch.x.
COLUMNS, ROWS = "columns", "rows"

# The names real labs give the tile size, tried in this order (config: kernel.tile_macros).
TILE_MACROS = ("TILE_SIZE", "TILE_WIDTH", "BLOCK_SIZE", "TILEWIDTH", "TILE_DIM")


@dataclass(frozen=True)
class TileSource:
    """Where a submission's tile size comes from: `constant`, what sizes its first shared tile (a number, a
    macro of any name, a file-scope or kernel-local integer constant: tile_size.py), else the first of
    `macros` the file defines, else `fallback` (the config's block size: a kernel without tiles is still
    launched and graded on its values), else nowhere."""

    macros: tuple[str, ...] = TILE_MACROS
    constant: str = ""
    fallback: int = 0

    def chain(self, line: str) -> str:
        """Preprocessor lines that emit `line` (with {} for the value) for the first source the file has:
        the compiler, not the grader, evaluates the student's macro or constant."""
        branches = [("1", self.constant)] if self.constant else []
        branches += [(f"defined({name})", name) for name in self.macros]
        chain = [f"#{'if' if i == 0 else 'elif'} {test}\n{line.format(f'({value})')}"
                 for i, (test, value) in enumerate(branches)]
        if chain and self.fallback:
            chain.append(f"#else\n{line.format(f'({self.fallback})')}")
        elif self.fallback:
            return line.format(f"({self.fallback})") + "\n"
        return "\n".join(chain) + "\n#endif\n" if chain else ""


DEFAULT_TILE = TileSource()


# Bytes of dynamic shared memory (`extern __shared__`) every launch of the student's kernel gets, on every
# backend (the GPU child, the sanitizer's launcher, the CPU emulator): room for an A tile and a B tile of
# floats, 2 * TILE_SIZE * TILE_SIZE * 4.
DYNAMIC_SHARED_TILES = 2


def dynamic_shared_bytes(tile: int) -> int:
    return DYNAMIC_SHARED_TILES * tile * tile * 4


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0  # dynamic shared memory


@dataclass(frozen=True)
class KernelContract:
    name: str = "mysgemm"
    roles: tuple[str, ...] = ROLES
    tile_sizes: tuple[int, ...] = (8, 16, 32)
    tile_macros: tuple[str, ...] = TILE_MACROS
    block_size: int = 16  # the launch's tile × tile blocks for a kernel whose tiles give no size
    x: str = COLUMNS  # what the grid's x runs over: C's columns, or its rows

    def launch(self, m: int, n: int, tile: int) -> Launch:
        """One thread per element of C: blocks of tile × tile threads, the grid's x over n columns and y over
        m rows, or (x: rows) the other way round."""
        columns, rows = (n + tile - 1) // tile, (m + tile - 1) // tile
        grid = (rows, columns, 1) if self.x == ROWS else (columns, rows, 1)
        return Launch(grid, (tile, tile, 1), dynamic_shared_bytes(tile))

    @property
    def square(self) -> bool:
        """Whether the kernel takes one size, width = m = n = k (its cases must be square)."""
        return WIDTH in self.roles

    def arguments(self, m, n, k, a, b, c) -> list:
        """The values in the kernel's parameter order (a square lab's width is m, which is n and k)."""
        values = {"m": m, "n": n, "k": k, "A": a, "B": b, "C": c, WIDTH: m}
        return [values[role] for role in self.roles]

    @property
    def launch_roles(self) -> tuple[str, ...]:
        """The roles as the sanitizer's launch program reads them (one letter each: width is m)."""
        return tuple("m" if role == WIDTH else role for role in self.roles)

    @property
    def argument_bytes(self) -> tuple[int, ...]:
        return tuple(ARGUMENT_BYTES[role] for role in self.roles)

    @property
    def signature(self) -> str:
        """The declaration the launchers call, in words: "int m, int n, int k, const float *A, …"."""
        return ", ".join(SPELLING[role] for role in self.roles)

    def tile_source(self, constant: str = "") -> TileSource:
        return TileSource(self.tile_macros, constant, self.block_size)

    def to_wire(self) -> dict:
        return asdict(self)

    @classmethod
    def from_wire(cls, data: dict) -> KernelContract:
        return cls(data["name"], tuple(data["roles"]), tuple(data["tile_sizes"]), tuple(data["tile_macros"]),
                   data.get("block_size", 16), data.get("x", COLUMNS))


# The grader's reference kernel (reference/kernel.cu), always called through its own fixed signature,
# whatever the student's contract.
REFERENCE = KernelContract()
