"""Where the tile size comes from: whatever sizes the first shared tile, as text the grader's probe can
evaluate after the file (a kernel-local constant is written out)."""
import pytest
from conftest import SUBMISSIONS

from grader.source.tile_size import tile_constant

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


def kernel(body: str, head: str = "") -> str:
    declaration = "__global__ void mysgemm(int m, int n, int k, const float *A, const float *B, float *C)"
    return f"{head}{declaration}\n{{\n{body}\n}}\n"


@pytest.mark.parametrize(("head", "body", "size"), [
    ("", "    const int tileDim = 8;\n    __shared__ float As[tileDim][tileDim];", "(8)"),
    ("", "    constexpr int T = 4 * 2;\n    const int U = T;\n    __shared__ float As[U][U];", "(((4 * 2)))"),
    ("#define Tile_Width 16\n", "    __shared__ float ds_A[Tile_Width * Tile_Width];", "Tile_Width"),
    ("#define TW 8\n", "    __shared__ float ds_A[(TW) * (TW)];", "((TW))"),
    ("#define TW 8\n", "    __shared__ float As[2][TW][TW + 1];", "TW"),  # double-buffered: a tile's rows
    ("const int TILE = 32;\n", "    const int half = TILE / 2;\n    __shared__ float As[half][half];", "((TILE / 2))"),
], ids=["kernel-local", "local-through-local", "1-D", "1-D-parenthesized", "3-D", "local-of-file-scope"])
def test_tiles_as_real_labs_size_them(head, body, size):
    assert tile_constant(kernel(body, head), "mysgemm") == size


@pytest.mark.parametrize("source", [
    # a variable: not a constant at all
    GOOD.replace("#define TILE_SIZE 16", "int TILE_SIZE = 16;"),
    kernel("    const int t = blockDim.x;\n    __shared__ float As[t][t];"),
    kernel("    __shared__ float As[m][m];"),
    kernel("    extern __shared__ float s[];"),
    kernel("    __shared__ float s[256];"),  # 1-D, not written as T * T: which tile is it?
], ids=["variable", "from-blockDim", "parameter", "dynamic", "1-D-number"])
def test_nothing_is_offered_that_the_probe_cannot_evaluate(source):
    assert tile_constant(source, "mysgemm") == ""
