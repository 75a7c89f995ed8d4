"""The speed model (judge/speed_model.py): counts on the profile shape → the timing shape's work → an estimated
time on the configured GPU → pass, fail or held. Pure: every figure here is worked out by hand."""
import pytest

from grader.config import SpeedModelConfig
from grader.diagnose.speed import gpu_figures
from grader.judge.speed_model import FAIL, HELD, PASS, estimate, global_lines, verdict, work_on_shape

H200 = SpeedModelConfig()
WARPS = 8  # a 16 × 16 block
# The reference's wavefronts per block on 2048³ (128 phases): stores of As and Bs, the inner loop's reads of
# both, the loads of A and B (a line each) and the store of C
REFERENCE_WAVEFRONTS = 2 * 128 * WARPS + 2 * 128 * 16 * WARPS + 2 * 128 * WARPS + WARPS


class _Config:  # gpu_figures reads config.timing.model only
    class timing:
        model = H200


GPU = gpu_figures(_Config)


def access(line, kind, array, requests, total, ideal=None):
    return {"event": "access", "line": line, "kind": kind, "array": array, "requests": requests, "total": total,
            "max": max(1, total // requests), "ideal": requests if ideal is None else ideal, "rows": 16,
            "columns": 16, "bytes": 4}


def tiled_profile(ways: int = 1, sectors: int = 4) -> list[dict]:
    """The reference's profile on 64³ over two 16 × 16 blocks (4 phases each), shared reads `ways`-way
    conflicted and A's loads touching `sectors` sectors per request."""
    per_phase = 2 * WARPS * 4  # two blocks, a request per warp, four phases
    inner = per_phase * 16  # the inner loop's 16 reads per phase
    return [access(17, "global_load", "A", per_phase, per_phase * sectors, per_phase * 4),
            access(18, "global_load", "B", per_phase, per_phase * 4, per_phase * 4),
            access(17, "shared_store", "As", per_phase, per_phase),
            access(18, "shared_store", "Bs", per_phase, per_phase),
            access(22, "shared_load", "As", inner, inner * ways),
            access(22, "shared_load", "Bs", inner, inner),
            access(27, "global_store", "C", 2 * WARPS, 2 * WARPS * 4, 2 * WARPS * 4),
            {"event": "barriers", "line": 20, "count": 8}, {"event": "barriers", "line": 24, "count": 8}]


def work_2048(records):
    return work_on_shape(records, 64, 2, 256, 128 * 128, 2048, 2048, 2048)


def test_a_site_in_the_k_loop_scales_with_k_and_the_store_of_c_does_not():
    work = work_2048(tiled_profile())
    # Per block on 2048³: 128 phases of 8 warps' requests, each a line (4 sectors of one line)
    assert work.global_lines == 2 * 128 * WARPS * 1 + WARPS * 1
    assert work.global_sectors == 2 * 128 * WARPS * 4 + WARPS * 4
    assert work.stored_sectors == WARPS * 4  # once per thread: not scaled by k
    assert work.shared_wavefronts == 2 * 128 * WARPS + 2 * 128 * 16 * WARPS
    assert work.barriers == 2 * 128
    assert work.multiply_adds == 256 * 2048
    assert work.footprint_bytes == 2 * 16 * 2048 * 4  # 16 rows of A and 16 columns of B, all of k


def test_the_lines_a_global_site_touched_are_the_emulators_count_else_estimated_from_its_sectors():
    assert global_lines({**access(1, "global_load", "A", 10, 40, 40), "lines": 20}) == 20  # 2 rows a warp
    # From a record without the count: a coalesced request touches a line, a strided one a line a sector
    assert global_lines(access(1, "global_load", "A", 10, 40, 40)) == 10
    assert global_lines(access(1, "global_load", "A", 10, 320, 40)) == 10 + 280


@pytest.mark.parametrize("ratio, decided", [(1.0, PASS), (1.25, PASS), (1.26, HELD), (3.19, HELD), (3.2, FAIL),
                                            (8.0, FAIL)])
def test_the_estimate_decides_only_outside_the_margin(ratio, decided):
    assert verdict(ratio, 2.0, 1.6) == decided


def test_the_reference_is_bound_by_its_shared_memory_turns():
    reference = estimate(work_2048(tiled_profile()), GPU, 8)
    assert reference.bound == "shared memory and L1"
    # 16,384 blocks over 132 SMs: 125 for the busiest; each block's wavefronts at the SM's share of the
    # shared-memory bandwidth, 128 bytes each (about one a clock)
    per_second = H200.shared_tbs * 1e12 / 128 / H200.sms
    assert reference.ms == pytest.approx(125 * REFERENCE_WAVEFRONTS / per_second * 1e3, rel=1e-6)


def test_an_eight_way_bank_conflict_in_the_inner_loop_makes_the_kernel_several_times_slower():
    reference = estimate(work_2048(tiled_profile()), GPU, 8)
    conflicted = estimate(work_2048(tiled_profile(ways=8)), GPU, 8)
    assert conflicted.ms / reference.ms == pytest.approx(
        (REFERENCE_WAVEFRONTS + 7 * 16 * 128 * WARPS) / REFERENCE_WAVEFRONTS, rel=1e-3)
    assert verdict(conflicted.ms / reference.ms, 2.0, 1.6) == FAIL


def test_uncoalesced_loads_of_a_cost_a_line_per_sector():
    reference = estimate(work_2048(tiled_profile()), GPU, 8)
    strided = estimate(work_2048(tiled_profile(sectors=16)), GPU, 8)
    assert strided.ms / reference.ms == pytest.approx(
        (REFERENCE_WAVEFRONTS + 12 * 128 * WARPS) / REFERENCE_WAVEFRONTS, rel=1e-3)  # 13 lines a request, not 1


def test_too_few_resident_warps_hide_less():
    work = work_2048(tiled_profile())
    full, one_block = estimate(work, GPU, 8), estimate(work, GPU, 1)
    assert one_block.ms == pytest.approx(full.ms * 16 / WARPS, rel=1e-3)  # 8 warps of the 16 that saturate
    assert estimate(work, GPU, 0) is None  # a kernel no SM can hold a block of


def test_barriers_bound_a_kernel_that_waits_more_than_it_works():
    records = tiled_profile() + [{"event": "barriers", "line": 23, "count": 10_000}]
    slow = estimate(work_2048(records), GPU, 1)
    assert slow.bound == "barriers"


def test_a_profile_with_fewer_requests_than_computing_c_needs_is_held_not_passed():
    """The harness's report is written by the process student code runs in: a forged, tiny profile would
    estimate a kernel faster than the reference. Fewer requests than 2k operands per thread need: held."""
    from grader.config import load_config
    from grader.diagnose.speed import modelled_timing
    from grader.result import SKIPPED

    config = load_config()
    forged = [access(17, "global_load", "A", 16, 64), {"event": "barriers", "line": 20, "count": 2}]
    profile = {"size": 64, "student": forged, "reference": tiled_profile(), "reference_tile": 16}
    timing = modelled_timing(profile, 16, config.kernel.contract(), None, None, [], config, 10, "timing")
    assert timing.status == SKIPPED and timing.needs_gpu == "timing" and timing.metrics["modelled_ratio"] < 0.5
    assert "but the emulator counted fewer memory accesses than computing C needs" in timing.message
    honest = {**profile, "student": tiled_profile()}
    assert modelled_timing(honest, 16, config.kernel.contract(), None, None, [], config, 10, "timing").passed
