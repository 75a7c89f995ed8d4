"""The CUDA toolkit's headers, known by name: those of its host libraries (which library a header belongs to,
and which identifiers are that library's) and its own.

Why: a student's file often includes <cublas_v2.h> or <curand.h> for its host code (a wrapper that checks the
kernel against cublasSgemm, a main that fills the matrices with cuRAND), and each library comes in a package
of its own that a grading machine may lack (an LMS container often installs the compiler alone, or no nvcc at
all). The verdict must not depend on which packages are there: a library header whose library no device code
references is dropped before anything compiles, on every machine (source/before_compile.py), as the host code that
needed it is left out; any other header of this table is accepted by its name even where this machine lacks it
(include_policy.HeaderPolicy), not compiled by nvcc there, and graded on a GPU where the emulator cannot
build it.

Names are the toolkit's as `#include` names them (fnmatch patterns, for families of headers); an identifier
is a library's when it starts with one of the library's prefixes (cublasSgemm, CUBLAS_OP_N).
"""
from __future__ import annotations

import fnmatch
import functools
from collections.abc import Iterable
from dataclasses import dataclass

from . import cuda_syntax as cs
from .device_side import device_identifiers


@dataclass(frozen=True)
class Library:
    name: str  # as NVIDIA names it
    headers: tuple[str, ...]  # fnmatch patterns of its headers' names
    prefixes: tuple[str, ...]  # of its identifiers: functions, types, constants, macros

    def owns(self, identifier: str) -> bool:
        return identifier.startswith(self.prefixes)


LIBRARIES: tuple[Library, ...] = (
    Library("cuBLAS", ("cublas*.h",), ("cublas", "CUBLAS")),  # cublas_v2.h, cublas_api.h, cublasLt.h, cublasXt.h
    Library("cuRAND", ("curand*.h",), ("curand", "CURAND")),  # curand.h, and curand_kernel.h's device API
    Library("cuFFT", ("cufft*.h", "cudalibxt.h"), ("cufft", "CUFFT", "fftw", "FFTW", "cudaLibXt", "cudaXt",
                                                   "CUDA_XT")),  # cufftw.h is FFTW's interface
    Library("cuSPARSE", ("cusparse*.h",), ("cusparse", "CUSPARSE")),
    Library("cuSOLVER", ("cusolver*.h",), ("cusolver", "CUSOLVER")),  # cusolverDn.h, cusolverSp.h, ...
    Library("NVTX", ("nvToolsExt*.h", "nvtx3/*"), ("nvtx", "NVTX")),  # nvtx3::scoped_range too
    Library("the profiler API", ("cuda_profiler_api.h", "cudaProfiler.h", "cudaProfilerTypedefs.h"),
            ("cudaProfiler", "cuProfiler", "PFN_cuProfiler")),
    Library("NPP", ("npp*.h",), ("npp", "Npp", "NPP")),
    Library("nvJPEG", ("nvjpeg*.h",), ("nvjpeg", "NVJPEG")),
    Library("NVRTC", ("nvrtc.h",), ("nvrtc", "NVRTC")),
    Library("nvJitLink", ("nvJitLink.h",), ("nvJitLink", "NVJITLINK")),
    Library("nvPTXCompiler", ("nvPTXCompiler.h",), ("nvPTXCompiler", "NVPTXCOMPILE")),
    Library("nvFatbin", ("nvFatbin.h",), ("nvFatbin", "NVFATBIN")),
    Library("cuFile", ("cufile.h",), ("cuFile", "CUfile", "CU_FILE")),
    Library("CUPTI", ("cupti*.h", "nvperf*.h"), ("cupti", "CUpti", "CUPTI", "NVPW", "nvperf")),
    Library("NVML", ("nvml.h",), ("nvml", "NVML")),
    # Graphics interop: host calls, and headers that need the machine's OpenGL, EGL, VDPAU or Direct3D ones.
    Library("graphics interop", ("cuda_*_interop.h", "cudaGL*.h", "cudaEGL*.h", "cudaVDPAU*.h", "cudaD3D*.h"),
            ("cudaGraphicsGL", "cudaGL", "cuGraphicsGL", "cuGL", "CU_GL", "cudaGraphicsEGL", "cudaEGL",
             "cuGraphicsEGL", "cuEGL", "CU_EGL", "cudaGraphicsVDPAU", "cudaVDPAU", "cuGraphicsVDPAU", "cuVDPAU",
             "cudaGraphicsD3D", "cudaD3D", "cuGraphicsD3D", "cuD3D", "CU_D3D")),
)


# The toolkit's own headers (cudart, nvcc, CCCL's folders), by the names its releases have shipped them under;
# exact names where a student's own helper could share a prefix (a "cuda_utils.h" not handed in is refused).
CORE: tuple[str, ...] = (
    "cuda.h", "cuda_runtime.h", "cuda_runtime_api.h", "cudaTypedefs.h", "cudart_platform.h", "cuda_stdint.h",
    "cuda_device_runtime_api.h", "device_launch_parameters.h", "device_functions.h", "device_types.h",
    "device_atomic_functions.h", "device_atomic_functions.hpp", "device_double_functions.h", "driver_types.h",
    "driver_functions.h", "host_config.h", "host_defines.h", "builtin_types.h", "channel_descriptor.h",
    "common_functions.h", "library_types.h", "math_constants.h", "math_functions.h", "vector_types.h",
    "vector_functions.h", "vector_functions.hpp", "cuComplex.h", "cooperative_groups.h", "mma.h",
    "cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp", "cuda_fp8.h", "cuda_fp8.hpp", "cuda_fp6.h",
    "cuda_fp6.hpp", "cuda_fp4.h", "cuda_fp4.hpp", "cuda_pipeline.h", "cuda_pipeline_helpers.h",
    "cuda_pipeline_primitives.h", "cuda_awbarrier.h", "cuda_awbarrier_helpers.h", "cuda_awbarrier_primitives.h",
    "cuda_occupancy.h", "cuda_texture_types.h", "cuda_surface_types.h", "surface_types.h", "texture_types.h",
    "surface_functions.h", "surface_indirect_functions.h", "texture_fetch_functions.h",
    "texture_indirect_functions.h", "sm_*_intrinsics.h", "sm_*_intrinsics.hpp", "sm_*_atomic_functions.h",
    "sm_*_atomic_functions.hpp", "cooperative_groups/*", "crt/*", "cub/*", "thrust/*", "cuda/*", "nv/*",
)


def compile_patterns() -> None:
    """Every pattern above compiled now: fnmatch compiles one at its first use and keeps it for the process, and a
    student's `#include <stdio.h>` is tried against each (90 compiles, 0.02 CPU-s). A batch's template calls this
    once, so that none of the workers it forks compiles them again (classroom/zygote.py)."""
    for pattern in (*CORE, *(pattern for library in LIBRARIES for pattern in library.headers)):
        fnmatch.fnmatchcase("", pattern)


def library_of(header: str) -> Library | None:
    """The library whose header `header` is (as `#include` names it), or None."""
    return next((library for library in LIBRARIES if _matches(header, library.headers)), None)


def is_toolkit_header(header: str) -> bool:
    return library_of(header) is not None or _matches(header, CORE)


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    """fnmatch.fnmatchcase against any of the patterns; one without a wildcard is the name itself, compared as a
    string (fnmatch compiles a regular expression of each pattern first: all 90 took 5-15 ms of every grade)."""
    exact, wild = _split(patterns)
    return name in exact or any(fnmatch.fnmatchcase(name, pattern) for pattern in wild)


@functools.cache
def _split(patterns: tuple[str, ...]) -> tuple[frozenset[str], tuple[str, ...]]:
    wild = tuple(pattern for pattern in patterns if any(special in pattern for special in "*?["))
    return frozenset(patterns) - frozenset(wild), wild


def toolkit_headers(texts: Iterable[str]) -> set[str]:
    """The toolkit's headers the texts include, outside comments and `#if 0` groups."""
    return {name for text in texts for _, name in cs.included_headers(cs.parse(text).root_node)
            if is_toolkit_header(name)}


def unneeded_headers(texts: Iterable[str], handed_in: Iterable[str] = ()) -> frozenset[str]:
    """The library headers the texts (kernel.cu and the headers handed in with it, named `handed_in`) include
    whose library no device code of theirs references: only host code can need them."""
    texts = list(texts)
    included = {name for name in toolkit_headers(texts) if library_of(name) is not None}
    if not included:
        return frozenset()
    referenced = set().union(*(device_identifiers(text, handed_in) for text in texts))
    return frozenset(name for name in included if not any(map(library_of(name).owns, referenced)))
