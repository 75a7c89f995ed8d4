"""The CPU emulator's build of a submission: cuda_emu.h precompiled once and kept in the cache, a damaged copy
of it never costing a student anything."""
import pytest
from conftest import ROOT, SUBMISSIONS
from hardware import needs_cxx

from grader.execute.confine.sandbox import detect, scratch_folder
from grader.execute.cpu.build import build

pytestmark = needs_cxx


@pytest.fixture(scope="module")
def contract():
    from grader.config import load_config

    return load_config(ROOT / "config.yaml").kernel.contract()


def built(source: str, contract, cache):
    with scratch_folder("sgemm-test-") as work:  # a folder the sandbox's uid can reach, as the driver's
        return build(source, contract, contract.tile_source(""), cache, work, detect(), 120)


def precompiled(cache):
    return list((cache / "cpu").glob("cuda_emu-*.gch"))


def test_the_header_is_precompiled_once_and_a_damaged_copy_is_rebuilt_without_failing_a_build(tmp_path, contract):
    cache = tmp_path / "cache"
    good = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
    assert built(good, contract, cache).binary is not None
    [entry] = precompiled(cache)
    whole = entry.read_bytes()
    entry.write_bytes(whole[: len(whole) // 2])  # as a full disk or a crash elsewhere could leave it

    assert built(good + "\n// another student\n", contract, cache).binary is not None
    assert not precompiled(cache)  # dropped: the build that found it broken compiled the header as text
    assert built(good + "\n// a third student\n", contract, cache).binary is not None
    [remade] = precompiled(cache)  # made again, whole (g++ writes a few bytes differently each time)
    assert abs(remade.stat().st_size - len(whole)) < len(whole) // 100


def test_a_students_compile_error_reads_the_same_with_the_precompiled_header(tmp_path, contract):
    source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text().replace("__syncthreads();", "__syncthreads()", 1)
    first = built(source, contract, tmp_path / "cache")  # the header is precompiled by this build
    again = built(source + "\n", contract, tmp_path / "cache")  # ... and read precompiled by this one
    assert first.binary is None and again.binary is None
    assert "error" in first.message and first.message == again.message
    assert precompiled(tmp_path / "cache")  # a student's error is theirs: the precompiled header is kept


def test_a_build_where_the_precompiled_header_cannot_be_placed_is_built_from_the_text(tmp_path, contract):
    source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
    with scratch_folder("sgemm-test-") as work:
        (work / "emulator").mkdir()
        (work / "emulator" / "precompiled").write_text("a file where its folder goes")
        built = build(source, contract, contract.tile_source(""), tmp_path / "cache", work, detect(), 120)
    assert built.binary is not None, built.message
