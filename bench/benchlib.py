"""What the bench scripts share: the project's config with its own cache, a generated class, a grade alone."""
from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the grader package, wherever the script is started from

from grader.execute.nvcc.compile import (  # noqa: E402 - after the path is set
    prepare_source,
    reference_module_source,
)
from grader.result import SubmissionResult  # noqa: E402

# (corpus kernel, how many in 300): mostly correct, the usual mistakes, a few that crash or hang.
MIX = [("good_basic", 90), ("good_tile8_renamed", 30), ("good_tile32_macro_sync", 30), ("missing_use_barrier", 25),
       ("missing_load_barrier", 20), ("no_bounds_checks", 25), ("b_wrong_stride", 20), ("truncated_phases", 20),
       ("store_outside_c", 15), ("compile_error", 10), ("call_counter", 5), ("trap", 5), ("illegal_address", 3),
       ("conditional_barrier", 1), ("hang", 1)]


def config_with_cache(cache: Path, folder: Path, root: Path = ROOT) -> Path:
    """config.yaml written into folder, pointing at the project's cases and reference and at `cache` (`root`: the
    project, or an earlier checkout of it)."""
    text = (root / "config.yaml").read_text()
    text = text.replace("testcases: testcases", f"testcases: {root / 'testcases'}")
    text = text.replace("reference: reference/kernel.cu", f"reference: {root / 'reference' / 'kernel.cu'}")
    text = text.replace("cache_dir: ~/.cache/sgemm-grader", f"cache_dir: {cache}")
    path = folder / "config.yaml"
    path.write_text(text)
    return path


def generate(folder: Path, count: int, mix: list[tuple[str, int]] = MIX) -> list[Path]:
    names = [name for name, share in mix for _ in range(share)]
    random.Random(7).shuffle(names)  # any first COUNT has the mix's kinds, not only its first ones
    students = []
    for index in range(count):
        name = names[index % len(names)]
        source = (ROOT / "tests" / "submissions" / name / "kernel.cu").read_text()
        source = source.replace("sum", f"acc{index}") + f"\n// student {index:03d}\n"
        student = folder / f"student{index:03d}_{name}"
        student.mkdir(parents=True)
        (student / "kernel.cu").write_text(source)
        students.append(student)
    return students


def grade_alone(student: Path, config: Path, outdir: Path, backend: str, sanitize: bool) -> SubmissionResult:
    """The student graded by `grade` on its own, as a student or instructor would run it."""
    # The default diagnosis, as a batch's (where the emulator cannot see), or none at all.
    subprocess.run([sys.executable, "-m", "grader", str(student), "--config", str(config), "--backend", backend,
                    *([] if sanitize else ["--no-sanitize"]), "-o", str(outdir)], check=False, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    return SubmissionResult.from_dict(json.loads((outdir / f"{student.name}.json").read_text()))


def gpu_arch() -> str:
    """The first GPU's architecture as nvcc names it (sm_90), asked through pycuda in a process of its own."""
    return subprocess.run([sys.executable, "-c", "import pycuda.driver as c; c.init(); "
                           "print('sm_%d%d' % c.Device(0).compute_capability())"],
                          capture_output=True, text=True, check=True).stdout.strip()


def build_cubin(folder: Path, name: str, module_source: str, arch: str) -> Path:
    """A module's source, compiled with -lineinfo as the GPU child compiles it (the text as it is: a student's
    with C++ linkage, the reference's saying extern "C" itself): folder/NAME.cubin."""
    (folder / f"{name}.cu").write_text(module_source)
    subprocess.run(["nvcc", "--cubin", "-lineinfo", "-arch", arch, f"{name}.cu", "-o", f"{name}.cubin"], cwd=folder,
                   check=True)
    return folder / f"{name}.cubin"


def reference_cubin(folder: Path, arch: str) -> Path:
    """The grader's reference module (with its own kernels), as the GPU child builds it."""
    return build_cubin(folder, "ref", reference_module_source((ROOT / "reference" / "kernel.cu").read_text()), arch)


def corpus_cubin(folder: Path, kernel: str, arch: str) -> Path:
    """A corpus submission's kernel, as the GPU child builds a student's (with the grader's hooks)."""
    source = (ROOT / "tests" / "submissions" / kernel / "kernel.cu").read_text()
    return build_cubin(folder, kernel, prepare_source(source), arch)


def archive(student: Path) -> bytes:
    """The student's folder as the zip an LMS container sends."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zipped:
        for file in student.iterdir():
            zipped.write(file, file.name)
    return buffer.getvalue()
