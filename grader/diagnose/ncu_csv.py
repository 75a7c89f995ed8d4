"""Nsight Compute's CSV, read (issue 26): the metrics the grader asks ncu for, per profiled kernel, and the
figures a student is told (sectors per request of global loads, shared-memory bank-conflict ways, % of peak
FP32 and DRAM bandwidth, achieved occupancy).

Two layouts are read, both as `ncu --csv --print-units base` writes them:
- `--page raw` (what the grader asks for): a header row ("ID", "Process ID", ..., "Kernel Name", ...,
  then one column per metric), a row of units under it, then one row per profiled kernel;
- `--page details`: one row per metric, with "Kernel Name", "Metric Name", "Metric Unit", "Metric Value".
ncu's own messages (`==PROF==`, `==WARNING==`) may come before the table and are passed over. A value may
carry thousands separators ("4,194,304") or be "n/a". Units are read as given (the units row, or "Metric
Unit") and turned into the grader's: durations into ns, rates into per second, "K"/"M"/"G" counts into
counts; so a table in ncu's automatic units reads the same as one in base units.

The file comes from a process that ran student code: it is read bounded and parsed as untrusted text; what
cannot be read is left out, never guessed.
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field

MAX_CSV_BYTES = 4 << 20
MAX_KERNELS = 64
MAX_FIELD = 64 << 10

# What the grader asks ncu for (names checked against the Nsight Compute metrics reference).
DURATION = "gpu__time_duration.sum"  # ns
CYCLES_PER_SECOND = "sm__cycles_elapsed.avg.per_second"
FFMA, FADD, FMUL = (f"smsp__sass_thread_inst_executed_op_{op}_pred_on.sum" for op in ("ffma", "fadd", "fmul"))
# FFMAs a cycle the whole GPU can issue (inst/cycle): the FP32 peak of ncu's own roofline section
FFMA_PEAK = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
GLOBAL_LD_SECTORS, GLOBAL_LD_REQUESTS = ("l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
                                         "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum")
GLOBAL_ST_SECTORS, GLOBAL_ST_REQUESTS = ("l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
                                         "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum")
SHARED_LD_CONFLICTS, SHARED_ST_CONFLICTS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                                            "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")
SHARED_LD_WAVEFRONTS, SHARED_ST_WAVEFRONTS = ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                                              "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum")
SHARED_LD_INSTRUCTIONS, SHARED_ST_INSTRUCTIONS = ("smsp__sass_inst_executed_op_shared_ld.sum",
                                                  "smsp__sass_inst_executed_op_shared_st.sum")
ACHIEVED_OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
METRICS = (DURATION, CYCLES_PER_SECOND, FFMA, FADD, FMUL, FFMA_PEAK, DRAM_PCT, SM_PCT, GLOBAL_LD_SECTORS,
           GLOBAL_LD_REQUESTS, GLOBAL_ST_SECTORS, GLOBAL_ST_REQUESTS, SHARED_LD_CONFLICTS, SHARED_ST_CONFLICTS,
           SHARED_LD_WAVEFRONTS, SHARED_ST_WAVEFRONTS, SHARED_LD_INSTRUCTIONS, SHARED_ST_INSTRUCTIONS,
           ACHIEVED_OCCUPANCY)
_IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
             "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value")


@dataclass
class KernelProfile:
    """One profiled launch: its metrics in base units (ns, sectors, %, ...), by name."""

    kernel: str
    metrics: dict[str, float] = field(default_factory=dict)

    def _ratio(self, top: str, bottom: str) -> float | None:
        a, b = self.metrics.get(top), self.metrics.get(bottom)
        return round(a / b, 2) if a is not None and b else None

    @property
    def sectors_per_load(self) -> float | None:
        """32-byte sectors each warp-level global load touches: 4 for 32 consecutive floats."""
        return self._ratio(GLOBAL_LD_SECTORS, GLOBAL_LD_REQUESTS)

    @property
    def sectors_per_store(self) -> float | None:
        return self._ratio(GLOBAL_ST_SECTORS, GLOBAL_ST_REQUESTS)

    @property
    def shared_load_ways(self) -> float | None:
        """Wavefronts per shared-memory load instruction: 1 without bank conflicts, n for an n-way conflict."""
        return self._ratio(SHARED_LD_WAVEFRONTS, SHARED_LD_INSTRUCTIONS)

    @property
    def shared_store_ways(self) -> float | None:
        return self._ratio(SHARED_ST_WAVEFRONTS, SHARED_ST_INSTRUCTIONS)

    @property
    def achieved_occupancy(self) -> float | None:
        return self.metrics.get(ACHIEVED_OCCUPANCY)

    @property
    def dram_pct(self) -> float | None:
        return self.metrics.get(DRAM_PCT)

    @property
    def fp32_pct(self) -> float | None:
        """Achieved FP32 FLOP/s as % of the GPU's peak, as ncu's roofline counts them (an FFMA is two)."""
        m = self.metrics
        if FFMA not in m or not m.get(DURATION) or not m.get(FFMA_PEAK) or not m.get(CYCLES_PER_SECOND):
            return None
        flops = 2 * m[FFMA] + m.get(FADD, 0.0) + m.get(FMUL, 0.0)
        achieved = flops / (m[DURATION] * 1e-9)
        peak = 2 * m[FFMA_PEAK] * m[CYCLES_PER_SECOND]
        return round(100.0 * achieved / peak, 1)

    def figures(self) -> dict[str, float | None]:
        """What reports and the lead's comparisons use, by name."""
        return {"fp32_pct_of_peak": self.fp32_pct, "dram_pct_of_peak": self.dram_pct,
                "sectors_per_load": self.sectors_per_load, "sectors_per_store": self.sectors_per_store,
                "shared_load_ways": self.shared_load_ways, "shared_store_ways": self.shared_store_ways,
                "achieved_occupancy_pct": self.achieved_occupancy,
                "duration_ms": round(self.metrics[DURATION] / 1e6, 3) if DURATION in self.metrics else None}


TIME_NS = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
RATE_HZ = {"hz": 1.0, "hertz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9, "cycle/second": 1.0, "cycle/usecond": 1e6,
           "cycle/msecond": 1e3, "cycle/nsecond": 1e9}
COUNT_PREFIX = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def scale(unit: str) -> float:
    """What a value in `unit` is multiplied by for the grader's units: a duration into ns, a rate into per
    second, a "K"/"M"/"G" count into a count; any other unit ("%", "sector", "inst/cycle") as it is."""
    unit = unit.strip()
    if unit in TIME_NS:
        return TIME_NS[unit]
    if unit.lower() in RATE_HZ:
        return RATE_HZ[unit.lower()]
    if len(unit) > 1 and unit[0] in COUNT_PREFIX and unit[1].islower():
        return COUNT_PREFIX[unit[0]]
    return 1.0


def _in_units(value: float | None, unit: str) -> float | None:
    return None if value is None else value * scale(unit)


def number(text: str) -> float | None:
    """A value as ncu prints it: "4,194,304", "91.40", "n/a"; None for what is not a finite number."""
    cleaned = text.strip().replace(",", "")
    try:
        value = float(cleaned)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse(text: str) -> list[KernelProfile]:
    """Every kernel the CSV profiles, in order; [] when it holds no table."""
    lines = text[:MAX_CSV_BYTES].splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    rows = _csv_rows("\n".join(lines[start:])) if start is not None else []
    if not rows:
        return []
    header = rows[0]
    if "Metric Name" in header and "Metric Value" in header:
        return _details(header, rows[1:])
    return _raw(header, rows[1:])


def _raw(header: list[str], rows: list[list[str]]) -> list[KernelProfile]:
    if "Kernel Name" not in header:
        return []
    name_at = header.index("Kernel Name")
    wanted = [(i, name) for i, name in enumerate(header) if name in METRICS]
    units = rows[0] if rows and len(rows[0]) == len(header) and not rows[0][0].strip() else [""] * len(header)
    found = []
    for row in rows:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue  # the units row, or a row cut short
        values = {name: _in_units(number(row[i]), units[i]) for i, name in wanted}
        found.append(KernelProfile(row[name_at], {k: v for k, v in values.items() if v is not None}))
        if len(found) >= MAX_KERNELS:
            break
    return found


def _details(header: list[str], rows: list[list[str]]) -> list[KernelProfile]:
    at = {name: header.index(name) for name in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
    unit_at = header.index("Metric Unit") if "Metric Unit" in header else None
    by_id: dict[str, KernelProfile] = {}
    for row in rows:
        if len(row) != len(header):
            continue
        launch = row[at["ID"]]
        if launch not in by_id:
            if len(by_id) >= MAX_KERNELS:
                break
            by_id[launch] = KernelProfile(row[at["Kernel Name"]])
        unit = row[unit_at] if unit_at is not None else ""
        name, value = row[at["Metric Name"]], _in_units(number(row[at["Metric Value"]]), unit)
        if name in METRICS and value is not None:
            by_id[launch].metrics[name] = value
    return list(by_id.values())


# The source page (`ncu --import REP --page source --csv --print-source cuda,sass`, from a run with the
# SourceCounters section): a row per line of the kernel's CUDA source (its number under "Line No"), each
# followed by its SASS rows (no number). These columns are the line's memory counters, its SASS added up.
LINE_COLUMNS = {
    "global_requests": "L1 Tag Requests Global",
    "global_sectors": "L2 Theoretical Sectors Global",
    "global_ideal_sectors": "L2 Theoretical Sectors Global Ideal",
    "shared_wavefronts": "L1 Wavefronts Shared",
    "shared_ideal_wavefronts": "L1 Wavefronts Shared Ideal",
}
MAX_SOURCE_LINES = 100_000


@dataclass
class LineCounters:
    """What ncu measured at one line of the student's file, over the whole launch: the 32-byte sectors its
    global accesses took and needed at best, the shared-memory wavefronts taken and needed at best. (Its
    "L1 Tag Requests Global" counts tag lookups, not a warp's requests: kept, never divided by.)"""

    global_requests: float = 0.0
    global_sectors: float = 0.0
    global_ideal_sectors: float = 0.0
    shared_wavefronts: float = 0.0
    shared_ideal_wavefronts: float = 0.0

    def excess_sectors(self) -> float | None:
        """Sectors taken per sector needed (1: as coalesced as the bytes allow)."""
        return self.global_sectors / self.global_ideal_sectors if self.global_ideal_sectors else None

    def shared_ways(self) -> float | None:
        """Wavefronts taken per wavefront needed: the line's mean bank-conflict ways (1: none)."""
        return self.shared_wavefronts / self.shared_ideal_wavefronts if self.shared_ideal_wavefronts else None

    def figures(self) -> dict[str, float | None]:
        rounded = {"excess_sectors": self.excess_sectors(), "shared_ways": self.shared_ways()}
        return {name: None if value is None else round(value, 2) for name, value in rounded.items()}


def parse_source_lines(text: str, file_name: str = "kernel.cu") -> dict[int, LineCounters]:
    """The source page's counters by line of `file_name` (the student's file, as its `#line` names it); {}
    when the page holds no table of it. The page has a table per source file of the module (the grader's own
    helpers have one too), each under its "File Path" row: only the student's file's lines are read."""
    counted: dict[int, LineCounters] = {}
    current, width, where = "", 0, {}  # the table's file, its row width, and each counter's column
    for row in _csv_rows(text[:MAX_CSV_BYTES])[:MAX_SOURCE_LINES]:
        if len(row) == 2 and row[0] in ("File Path", "File Name"):
            current, where = row[1].replace("\\", "/").rsplit("/", 1)[-1], {}
        elif row and row[0] == "Line No":
            found = all(column in row for column in LINE_COLUMNS.values())
            width, where = len(row), {name: row.index(column) for name, column in LINE_COLUMNS.items()} if found else {}
        elif current == file_name and where and len(row) == width:
            line = number(row[0])
            if line is not None and line == int(line) and line >= 1:  # else a SASS row under its line
                counted[int(line)] = LineCounters(**{name: number(row[index]) or 0.0 for name, index in where.items()})
    return counted


def _csv_rows(text: str) -> list[list[str]]:
    """ncu's CSV as rows, each field bounded; [] where it is not CSV."""
    csv.field_size_limit(MAX_FIELD)
    try:
        return list(csv.reader(io.StringIO(text)))
    except csv.Error:
        return []
