"""The emulator's cuda_fp16.h gives the GPU's results: each conversion and operation on halves rounds its exact
result once, to nearest-even, as the GPU's __float2half, __hadd, __hmul, __hdiv and __hfma do. Checked against
numpy's float16 (a float64 holds a sum or product of halves exactly) and, for the fused multiply-add, against the
exact rational result, on every half and on random halves, subnormals, infinities and NaNs among them.
"""
from __future__ import annotations

import subprocess
from fractions import Fraction

import numpy as np
import pytest
from hardware import needs_cxx

from grader.execute.cpu.build import COMPILE_FLAGS, HERE, SHIMS, compiler

pytestmark = needs_cxx

# Each record: three halves and a float in; the halves' results out, each rounded as the GPU rounds them.
DRIVER = """#include <cuda_fp16.h>
#include <cstdio>
struct In { unsigned short a, b, c, pad; float f; };
struct Out { unsigned short add, sub, mul, div, fma, max, min, from_float; float to_float; };
int main() {
    In in;
    while (fread(&in, sizeof in, 1, stdin) == 1) {
        __half a = __ushort_as_half(in.a), b = __ushort_as_half(in.b), c = __ushort_as_half(in.c);
        Out out = {__half_as_ushort(__hadd(a, b)), __half_as_ushort(a - b), __half_as_ushort(a * b),
                   __half_as_ushort(__hdiv(a, b)), __half_as_ushort(__hfma(a, b, c)),
                   __half_as_ushort(__hmax(a, b)), __half_as_ushort(__hmin(a, b)),
                   __half_as_ushort(__float2half(in.f)), __half2float(a)};
        fwrite(&out, sizeof out, 1, stdout);
    }
}
"""
IN = np.dtype([("a", "<u2"), ("b", "<u2"), ("c", "<u2"), ("pad", "<u2"), ("f", "<f4")])
OUT = np.dtype([(name, "<u2") for name in ("add", "sub", "mul", "div", "fma", "max", "min", "from_float")]
               + [("to_float", "<f4")])


def halves(bits) -> np.ndarray:
    return np.asarray(bits, dtype=np.uint16).view(np.float16)


def nearest_half(exact: Fraction) -> np.float16:
    """The half nearest to an exact value, ties to even: what one rounding of the exact result gives."""
    if abs(exact) >= 65520:
        return np.float16(np.inf if exact > 0 else -np.inf)
    guess = np.float16(float(exact))
    near = [guess, np.nextafter(guess, np.float16(-np.inf)), np.nextafter(guess, np.float16(np.inf))]
    near = [h for h in near if np.isfinite(h)]
    return min(near, key=lambda h: (abs(Fraction(float(h)) - exact), int(h.view(np.uint16)) & 1))


def same_halves(got, want) -> np.ndarray:
    got, want = halves(got), np.asarray(want, dtype=np.float16)
    return (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))


@pytest.fixture(scope="module")
def fp16_results(tmp_path_factory):
    """The records in, and what the emulator's cuda_fp16.h made of them, built as the emulator builds a kernel."""
    folder = tmp_path_factory.mktemp("fp16")
    (folder / "driver.cpp").write_text(DRIVER)
    subprocess.run([compiler(), *COMPILE_FLAGS, "-include", str(HERE / "cuda_emu.h"), "-I", str(SHIMS),
                    str(folder / "driver.cpp"), "-o", str(folder / "driver")], check=True)
    rng = np.random.default_rng(16)
    count = 200_000
    records = np.zeros(count, IN)
    for name in ("a", "b", "c"):  # every kind of half: subnormals, infinities and NaNs among them
        records[name] = rng.integers(0, 1 << 16, count)
    records["a"][: 1 << 16] = np.arange(1 << 16)  # every half once, for the conversion to float
    floats = rng.integers(0, 1 << 32, count, dtype=np.uint64).astype(np.uint32).view(np.float32)
    below = halves(rng.integers(0, 0x7BFF, count // 2))  # finite halves, and the next one up: halfway is a tie
    floats[: count // 2] = (below.astype(np.float32) + np.nextafter(below, np.float16(np.inf)).astype(np.float32)) / 2
    records["f"] = floats
    finished = subprocess.run([str(folder / "driver")], input=records.tobytes(), capture_output=True, check=True)
    return records, np.frombuffer(finished.stdout, OUT)


def test_fp16_conversions_round_to_nearest_even(fp16_results):
    records, out = fp16_results
    a = halves(records["a"])
    assert np.array_equal(out["to_float"], a.astype(np.float32), equal_nan=True)
    with np.errstate(over="ignore"):  # floats past the largest half become infinite, as they should
        assert same_halves(out["from_float"], records["f"].astype(np.float16)).all()


@pytest.mark.parametrize("operation, exact", [
    ("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("div", np.divide),
])
def test_fp16_arithmetic_rounds_the_exact_result_once(fp16_results, operation, exact):
    records, out = fp16_results
    a, b = (halves(records[name]).astype(np.float64) for name in ("a", "b"))
    with np.errstate(all="ignore"):  # a float64 holds a sum or product of halves exactly, and rounds a quotient
        want = exact(a, b).astype(np.float16)  # only where rounding again to a half cannot change it
    assert same_halves(out[operation], want).all()


def test_fp16_fused_multiply_add_rounds_once(fp16_results):
    records, out = fp16_results
    finite = np.isfinite(halves(records["a"])) & np.isfinite(halves(records["b"])) & np.isfinite(halves(records["c"]))
    for index in np.flatnonzero(finite)[:20_000]:
        a, b, c = (Fraction(float(halves(records[name][index]))) for name in ("a", "b", "c"))
        exact = a * b + c
        if exact == 0:  # the sign of a zero is IEEE's rule, not the exact value's
            assert float(halves(out["fma"][index])) == 0
        else:
            assert same_halves(out["fma"][index], nearest_half(exact)), (a, b, c)


def test_fp16_max_and_min_take_the_number_over_a_nan_and_plus_over_minus_zero(fp16_results):
    records, out = fp16_results
    a, b = halves(records["a"]), halves(records["b"])
    with np.errstate(invalid="ignore"):
        larger = np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.where(
            a == b, np.where(np.signbit(a), b, a), np.maximum(a, b))))
        smaller = np.where(np.isnan(a), b, np.where(np.isnan(b), a, np.where(
            a == b, np.where(np.signbit(a), a, b), np.minimum(a, b))))
    assert same_halves(out["max"], larger).all() and same_halves(out["min"], smaller).all()
