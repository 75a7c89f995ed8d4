"""The GPU twins of test_cpu_warp_emulation.py: each construct kernel the CPU emulator grades 90/90 gets full
marks on a real GPU too, so both backends agree on what students write (warp shuffles and votes,
cooperative groups, templates, `extern __shared__` with the lab's dynamic shared memory, vector types,
intrinsics).

Marked `gpu`; skipped where there is no NVIDIA GPU or no pycuda. The template and cooperative-groups kernels
need C++ linkage on the GPU path (SourceModule's `extern "C"` refuses them).
"""
import pytest
from conftest import SUBMISSIONS
from hardware import needs_gpu

from grader.result import PASSED

pytestmark = [pytest.mark.gpu, needs_gpu]

# Kernels doing about the reference's work: full marks, timing included. The four that reduce every dot
# product across a row with shuffles (warp_shfl_down, _up, _xor, coop_groups_reduce) pad their B tile, so the
# column a row reads comes from 16 banks: unpadded, that read was a 16-way conflict and cost timing points.
AS_FAST_AS_THE_REFERENCE = ["warp_shfl", "warp_ballot", "warp_any", "warp_all", "warp_activemask", "warp_syncwarp",
                            "extern_shared", "vector_types", "intrinsics", "template_helper", "coop_groups",
                            "warp_shfl_down", "warp_shfl_up", "warp_shfl_xor", "coop_groups_reduce"]


@pytest.fixture(scope="module")
def grade_one(graders):
    grade_gpu = graders("gpu")
    grade_gpu.prefetch([SUBMISSIONS / name for name in AS_FAST_AS_THE_REFERENCE])
    return grade_gpu


def not_passed(result, timing: bool = True) -> list:
    return [(c.name, c.message) for c in result.checks if c.status != PASSED and (timing or c.kind != "timing")]


@pytest.mark.parametrize("name", AS_FAST_AS_THE_REFERENCE)
def test_construct_kernel_gets_full_marks_on_the_gpu(grade_one, name):
    result = grade_one(SUBMISSIONS / name)
    assert not_passed(result) == []
    assert result.score == result.max_score == 100 and result.tile_size == 16
