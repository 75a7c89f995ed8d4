"""The sanitizer's launch program (launch_kernel.c), built once per machine by the grader itself.

It is the grader's own code, compiled from a file in this package by the grader's process (no student
byte goes into it) and kept in the cache under the hash of its source and the compiler, so it is built
once and rebuilt after any change to either.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from ..execute.cpu.compiler import compiler, compiler_version

SOURCE = Path(__file__).resolve().parent / "launch_kernel.c"


class LauncherUnavailable(Exception):
    """No C compiler, or the launcher did not build: the grader's problem, said as such."""


def launcher(cache_dir: Path) -> Path:
    cc = compiler()
    if cc is None:
        raise LauncherUnavailable("no C compiler (g++) to build the sanitizer's launch program")
    source = SOURCE.read_bytes()
    key = hashlib.sha256(source + b"\0" + compiler_version(cc).encode()).hexdigest()[:24]
    binary = Path(cache_dir, "launcher", key, "launch_kernel")
    if binary.is_file():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    temporary = binary.with_name(f".launch_kernel.{os.getpid()}")
    command = [cc, "-x", "c", "-std=c11", "-O2", "-Wall", "-Werror", "-o", str(temporary), str(SOURCE), "-ldl"]
    built = subprocess.run(command, capture_output=True, text=True, check=False)
    if built.returncode != 0:
        raise LauncherUnavailable(f"the sanitizer's launch program did not build: {built.stderr.strip()[:500]}")
    temporary.chmod(0o755)
    os.replace(temporary, binary)  # whole or not at all: another grader may be building it too
    return binary


def staged_inputs(root: Path, program: Path, modules: dict[str, Path | bytes]) -> Path:
    """root/inputs, the folder a tool's runs may read but not write (each writes only into a folder of its
    own): the launch program and the modules, by name (a file copied, or the bytes already read)."""
    inputs = root / "inputs"
    inputs.mkdir()
    inputs.chmod(0o755)  # whatever the umask: the tools may run as another uid
    shutil.copy(program, inputs / "launch_kernel")
    (inputs / "launch_kernel").chmod(0o755)
    for name, module in modules.items():
        if isinstance(module, bytes):
            (inputs / name).write_bytes(module)
        else:
            shutil.copy(module, inputs / name)
        (inputs / name).chmod(0o644)
    return inputs
