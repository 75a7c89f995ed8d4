"""Where the tile size comes from when no macro names it: the constant sizing the first shared tile, and
only one the grader's probe can evaluate after the file."""
import pytest
from conftest import SUBMISSIONS

from grader.tile_size import tile_constant

GOOD = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()


@pytest.mark.parametrize("declaration", ["const int TILE_SIZE = 16;", "constexpr int TILE_SIZE = 16;",
                                         "static const unsigned int TILE_SIZE = 16;"])
def test_a_file_scope_integer_constant_sizing_the_tile_is_the_tile_size(declaration):
    assert tile_constant(GOOD.replace("#define TILE_SIZE 16", declaration), "mysgemm") == "TILE_SIZE"


def test_a_macro_of_a_name_the_lab_does_not_list_is_the_tile_size():
    assert tile_constant(GOOD.replace("TILE_SIZE", "TW"), "mysgemm") == "TW"


def test_a_literal_extent_is_the_tile_size():
    source = GOOD.replace("As[TILE_SIZE][TILE_SIZE]", "As[16][16]")
    assert tile_constant(source, "mysgemm") == "16"


@pytest.mark.parametrize("source", [
    # a constant inside the kernel: the probe after the file could not see it
    GOOD.replace("#define TILE_SIZE 16", "").replace("{\n    __shared__", "{\n    const int TILE_SIZE = 16;\n"
                                                     "    __shared__", 1),
    # a variable: not a constant at all
    GOOD.replace("#define TILE_SIZE 16", "int TILE_SIZE = 16;"),
], ids=["kernel-local", "variable"])
def test_nothing_is_offered_that_the_probe_cannot_evaluate(source):
    assert tile_constant(source, "mysgemm") == ""
