import ctypes
import gc
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest

# The tests grade in this process as `grade` does in its own: the same BLAS settings, before numpy loads.
import grader.blas_threads  # noqa: F401, E402
from grader.leftovers import clear_dead, owned_folder  # noqa: E402

# Fails the run when a test skips for any reason but missing hardware; pytester runs it on toy suites.
pytest_plugins = ["skip_policy", "pytester"]

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = ROOT / "tests" / "submissions"
# A case's limit of its worker's own time on the CPU: a sampled large case's edge blocks with 32-wide tiles take
# up to 2 s of it (execute/cpu/sampling.py), a hung kernel costs this per case.
RUN_TIMEOUT_S = 4

# Where the run's files go (pytest's folders, every grade's scratch, the sandbox's reachable copies), unless
# TMPDIR says: a folder of the run's own in RAM where the machine has a roomy tmpfs, removed when the run
# ends (what a grade killed mid-way leaves would stay in RAM). The suite creates and deletes hundreds of
# thousands of small files, and on ext4 that alone was about 5% of its CPU (15 CPU-s on 2 cores).
RAM_TEMP, RAM_TEMP_MIN_FREE = Path("/dev/shm"), 4 << 30
RAM_TEMP_OWNER = "SGEMM_TESTS_RAM_TEMP_OWNER"  # the pid of the run's first process, which removes it
RAM_TEMP_PREFIX = "sgemm-tests-"


def _use_ram_backed_temp() -> None:
    if "TMPDIR" in os.environ or not os.access(RAM_TEMP, os.W_OK | os.X_OK):
        return
    found = os.statvfs(RAM_TEMP)
    if found.f_flag & os.ST_NOEXEC or found.f_bavail * found.f_frsize < RAM_TEMP_MIN_FREE:
        return  # the emulation runs programs from its scratch; Docker's /dev/shm is 64 MB
    # Named for this run's first process: a run killed before it could remove its folder (RAM: every grade's
    # files) leaves it only until the next run on the machine starts.
    clear_dead(RAM_TEMP, prefixes=(RAM_TEMP_PREFIX,), unowned=None)
    folder = str(owned_folder(RAM_TEMP_PREFIX, RAM_TEMP))
    os.chmod(folder, 0o711)  # the sandbox's uid passes through it to a grade's own folder
    os.environ["TMPDIR"] = folder  # for the workers and the grader processes the tests start, too
    os.environ[RAM_TEMP_OWNER] = str(os.getpid())
    tempfile.tempdir = None


def _remove_ram_backed_temp() -> None:
    if os.environ.get(RAM_TEMP_OWNER) == str(os.getpid()):
        shutil.rmtree(os.environ["TMPDIR"], ignore_errors=True)


_use_ram_backed_temp()


@pytest.fixture
def submission_source():
    def read(name: str) -> str:
        return (SUBMISSIONS / name / "kernel.cu").read_text()

    return read


@pytest.fixture
def temp_root():
    """A temporary root of the test's own (the TMPDIR of the graders it starts), so what they leave there is
    theirs alone; reachable by the sandbox's uid, as the real one is. Removed after the test."""
    root = Path(tempfile.mkdtemp(prefix="sgemm-test-root-"))
    root.chmod(0o711)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def left_in(root: Path) -> list[str]:
    """What graders left in a temporary root: everything but the sandbox's copies of the grader, which a root
    grader keeps there only where /var/cache cannot hold them."""
    return sorted(p.name for p in root.iterdir() if p.name != "sgemm-grader-sandbox-root")


def wait_until_gone(pids, timeout_s: float = 30) -> None:
    """Waits for processes to end (an ended orphan is a zombie of the session until its reaper thread runs)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        running = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and not _zombie(pid)]
        if not running:
            return
        time.sleep(0.1)
    raise AssertionError(f"processes still running after {timeout_s} s: {running}")


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def owners_of(names: list[str]) -> set[int]:
    """The pids that own temporary folders named by grader/leftovers.py (sgemm-grade-<ns>.<pid>.<start>-...)."""
    return {int(name.split("-", 2)[2].split(".")[1]) for name in names
            if name.startswith(("sgemm-grade-", "sgemm-task-")) and name.count(".") >= 2}


def descendants(pid: int) -> dict[int, str]:
    """The live descendants of `pid` (from /proc): pid -> command line."""
    parents, commands = {}, {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                fields = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()
                commands[int(entry.name)] = Path(f"/proc/{entry.name}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = {}, {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found.update({child: commands[child].decode(errors="replace") for child in frontier})
    return found


@pytest.fixture(scope="session")
def sandbox():
    """The sandbox this machine allows, as `grade` would pick it (CI: namespaces and a real uid)."""
    from grader.execute.confine.sandbox import detect

    return detect()


@pytest.fixture(scope="session")
def config_file(tmp_path_factory):
    """The shipped config with a short run timeout, so a hanging submission costs seconds."""
    return _test_config(tmp_path_factory.mktemp("config"), ROOT / "testcases")


def _test_config(folder: Path, testcases: Path) -> Path:
    text = (ROOT / "config.yaml").read_text()
    text = text.replace("testcases: testcases", f"testcases: {testcases}")
    text = text.replace("reference: reference/kernel.cu", f"reference: {ROOT / 'reference' / 'kernel.cu'}")
    text = text.replace("run_s: 10", f"run_s: {RUN_TIMEOUT_S}")
    (folder / "config.yaml").write_text(text)
    return folder / "config.yaml"


# A few of the shipped cases, for tests of what happens around grading (batches, the service, escapes):
# a small one, a ragged one, a hidden one and one for the GPU only (`cpu: skip` here: the checks a CPU grade leaves
# for a GPU, which the exports must tell). What the emulator finds in a kernel is
# tested on all of them (test_cpu_grading.py and the corpus tests).
QUICK_CASES = ("square_16", "ragged_all", "rect_hidden", "large_ragged")


@pytest.fixture(scope="session")
def quick_config_file(tmp_path_factory):
    """The test config with only QUICK_CASES, each as the shipped case files define it but the large one, kept for a
    GPU (cpu: skip). (A module may use it as its `config_file`.)"""
    import yaml

    folder = tmp_path_factory.mktemp("quick")
    shipped = [case for path in sorted((ROOT / "testcases").glob("*.yaml"))
               for case in yaml.safe_load(path.read_text())["cases"]]
    chosen = [case for case in shipped if case["name"] in QUICK_CASES]
    assert [case["name"] for case in chosen] == list(QUICK_CASES)
    chosen[-1]["cpu"] = "skip"
    (folder / "testcases").mkdir()
    (folder / "testcases" / "quick.yaml").write_text(yaml.safe_dump({"cases": chosen}))
    return _test_config(folder, folder / "testcases")


@pytest.fixture(scope="session")
def graders(config_file, tmp_path_factory):
    """backend -> grade(path), shared by every test module, and by every pytest-xdist worker of the run, so
    each submission is graded once per backend in a whole run."""
    made = {}
    shared = run_folder(tmp_path_factory) / "shared-grades"

    def for_backend(backend: str):
        if backend not in made:
            made[backend] = make_grader(config_file, backend, shared)
        return made[backend]

    return for_backend


def make_grader(config_file, backend: str, shared: Path | None = None):
    """grade(path) on one backend with the short-timeout config, each submission graded once (in this
    process; with `shared`, a folder, once among every process that shares it)."""
    from grader.cases import load_cases
    from grader.config import load_config
    from grader.pipeline import RunPlan, grade

    config = load_config(config_file)
    cases = load_cases(config.testcases_dir)
    results = {}

    def grade_named(path: Path):
        if path not in results:
            graded = lambda: grade(path, config, cases, RunPlan(backend))  # noqa: E731
            results[path] = graded() if shared is None else _graded_once(shared, f"{backend}\0{path}", graded)
        return results[path]

    def prefetch(paths: list[Path]) -> None:
        """Grade many at once: each runs in its own child, so threads here only wait."""
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            list(pool.map(grade_named, [p for p in paths if p not in results]))

    grade_named.prefetch = prefetch
    return grade_named


def _graded_once(folder: Path, key: str, graded):
    """The result stored under `key` in `folder`, graded here by the first process to ask; the others wait
    for it and read it back."""
    from grader.result import SubmissionResult

    return _once(folder, key, graded, lambda result: result.to_dict(with_log=True), SubmissionResult.from_dict)


def path_without_nvcc() -> str:
    """PATH less its folders holding nvcc; a folder this user cannot look into finds none, as for the shell
    (os.path.exists, unlike Path.exists before Python 3.12, says False there instead of raising)."""
    return os.pathsep.join(d for d in os.environ.get("PATH", "").split(os.pathsep)
                           if d and not os.path.exists(os.path.join(d, "nvcc")))


@contextmanager
def machine_path(path: str):
    """Grading in this process as on a machine whose PATH is `path` (no nvcc, as in a Gradescope container, or
    another toolkit's): the compilers' include folders, which a process asks of them once, are asked again
    under it, and again after."""
    from grader.source.include_policy import forget_folders

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PATH", path)
        forget_folders()
        try:
            yield
        finally:
            forget_folders()


def run_folder(tmp_path_factory) -> Path:
    """A folder of the whole run: pytest-xdist's workers each have a folder of their own in it."""
    basetemp = tmp_path_factory.getbasetemp()
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


def once_per_run(tmp_path_factory, key: str, compute, encode=lambda value: value, decode=lambda value: value):
    """compute()'s value, computed by the first of the run's workers to ask and read back by the others, for a
    module fixture that grades: its tests go to whichever worker is free, and each worker setting the module
    up again would grade it again. `encode` makes the value JSON, `decode` makes it back."""
    return _once(run_folder(tmp_path_factory) / "once", key, compute, encode, decode)


def _once(folder: Path, key: str, compute, encode, decode):
    """An exclusive lock per key: the first process computes and stores, the others wait and read."""
    import fcntl
    import hashlib
    import json

    folder.mkdir(exist_ok=True)
    name = hashlib.sha256(key.encode()).hexdigest()[:32]
    stored = folder / f"{name}.json"
    with open(folder / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stored.exists():
            return decode(json.loads(stored.read_text()))
        value = compute()
        temporary = folder / f".{name}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps(encode(value)))
        os.replace(temporary, stored)
        return value


# --- nothing the suite starts may outlive it -----------------------------------------------------------------
# pytest becomes a child subreaper: whatever a test starts and orphans (a daemon, a pool worker, a
# multiprocessing resource tracker) is re-parented to pytest instead of init, so at the end of the session
# every such leftover is a live child of pytest, and the run fails.
PR_SET_CHILD_SUBREAPER = 36
LEFTOVER_GRACE_S = 5.0


ORPHAN_REAP_INTERVAL_S = 0.5


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a few more workers than cores (2 cores: 4). Many tests wait (a timeout, a service, a killed
    batch), and a worker waiting leaves its core to another: on CI's 2 cores, 232 s against 250 s."""
    cores = len(os.sched_getaffinity(0)) or 1
    return cores + min(cores, 4)


# The order tests start in: the corpus's CPU grades first (the longest chain, and other modules wait for
# its results), then the modules whose tests mostly wait (a service, a killed batch, a sandbox as another
# user), so their waits overlap the CPU-bound grading instead of ending the run; then the rest, as
# collected.
FIRST_MODULES = ("test_cpu_grading.py", "test_batch.py", "test_cluster.py", "test_serve.py",
                 "test_sandbox_reach.py", "test_escapes.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: index for index, name in enumerate(FIRST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: otherwise as collected


def pytest_collection_finish(session):
    # What collection imported (the grader, fastapi, dask, matplotlib) lives until the end: out of the
    # collector's way, each worker's full collections were a sixth of its CPU.
    gc.freeze()


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist") and config.getoption("maxschedchunk", None) is None:
        # A test goes to whichever worker is free: xdist's default sends a worker a share of what is left, and
        # one worker was still running its share of waiting tests 40 s after the others had run out.
        config.option.maxschedchunk = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1)
    threading.Thread(target=_reap_orphans_forever, name="orphan-reaper", daemon=True).start()


def _reap_orphans_forever() -> None:
    """Reaps the orphans that ended. Each sandbox leaves one (bwrap's init in its pid namespace exits after
    the bwrap that started it): init would reap it; here it comes to pytest, and thousands of zombies made
    every listing of /proc the grader does (a turn's priorities) cost 50 ms, most of the suite's CPU."""
    while True:
        time.sleep(ORPHAN_REAP_INTERVAL_S)
        for pid in ended_orphans():
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def ended_orphans() -> list[int]:
    """Our zombie children that nobody here started: a child we start keeps our session or begins its own
    (sid = its pid); an orphan is in the session of whoever started it. Reaping a child we started would
    steal the exit status its Popen waits for."""
    session = os.getsid(0)
    return [pid for pid, state, sid in own_children() if state == "Z" and sid not in (pid, session)]


def own_children() -> list[tuple[int, str, int]]:
    """(pid, state, session id) of each child of this process. The kernel lists each thread's children
    (/proc/self/task/*/children; an orphan comes to whichever thread it picks), so this reads a few files,
    not every process's: a listing of all /proc every half second in each worker was seconds of the suite."""
    found = []
    for pid in _child_pids():
        try:
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()  # the command may hold spaces and ")"
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            found.append((pid, fields[0], int(fields[3])))
    return found


def _child_pids() -> set[int]:
    if not os.path.exists(f"/proc/self/task/{os.getpid()}/children"):  # a kernel without CONFIG_PROC_CHILDREN
        return {int(entry.name) for entry in os.scandir("/proc") if entry.name.isdigit()}
    pids = set()
    for task in os.scandir("/proc/self/task"):
        try:
            with open(f"{task.path}/children") as children:
                pids.update(map(int, children.read().split()))
        except OSError:  # the thread ended meanwhile
            continue
    return pids


def live_children() -> list[str]:
    found = []
    for pid, state, _ in own_children():
        if state == "Z":
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            continue
        found.append(f"{pid}: {command}")
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def pytest_sessionfinish(session, exitstatus):
    deadline = time.monotonic() + LEFTOVER_GRACE_S  # a sandbox being torn down may take a moment
    while True:
        _reap()
        leftovers = live_children()
        if not leftovers or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    worker_output = getattr(session.config, "workeroutput", None)
    if worker_output is not None:  # a pytest-xdist worker: its controller fails the run (pytest_testnodedown)
        worker_output["leftovers"] = leftovers
        return
    _fail_on_leftovers(session, list(dict.fromkeys(leftovers + _WORKER_LEFTOVERS)) + semaphores_left())
    _remove_ram_backed_temp()


# --- nor may a named semaphore -------------------------------------------------------------------------------
# Python's multiprocessing (Dask's nannies, a LocalCluster) makes named semaphores in /dev/shm; the resource
# tracker of the process that made them unlinks them when it ends, unless it is killed first. What the run
# made (created since it started) and no live process maps any more was left behind: the run removes it and
# fails. Another suite on the machine keeps its own, which its processes map.
SHM, SESSION_STARTED = Path("/dev/shm"), time.time()


def semaphores_left(grace_s: float = LEFTOVER_GRACE_S) -> list[str]:
    deadline = time.monotonic() + grace_s  # a tracker whose processes just ended may be unlinking them
    while (left := orphaned_semaphores()) and time.monotonic() < deadline:
        time.sleep(0.2)
    for path in left:
        path.unlink(missing_ok=True)
    return [f"{path} (a named semaphore no process uses; removed)" for path in left]


def orphaned_semaphores() -> list[Path]:
    try:
        made = {entry.stat().st_ino: Path(entry.path) for entry in os.scandir(SHM)
                if entry.name.startswith("sem.") and entry.stat().st_ctime >= SESSION_STARTED}
    except OSError:  # no /dev/shm here, or one entry went away meanwhile: asked again after a moment
        return []
    return [path for inode, path in made.items() if inode not in _mapped_inodes()] if made else []


def _mapped_inodes() -> set[int]:
    """The inodes every live process maps (a semaphore in use is mapped by each process that opened it)."""
    inodes = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/maps") as maps:
                    inodes.update(int(line.split()[4]) for line in maps if "/dev/shm/" in line)
            except (OSError, IndexError, ValueError):
                continue
    return inodes


# What each pytest-xdist worker left running, sent to the controller when the worker ends.
_WORKER_LEFTOVERS: list[str] = []


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent where xdist is not installed (the GPU machine)
def pytest_testnodedown(node, error):
    _WORKER_LEFTOVERS.extend(getattr(node, "workeroutput", {}).get("leftovers", []))


def _fail_on_leftovers(session, leftovers: list[str]) -> None:
    if leftovers:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line("left behind by the test session (processes running, semaphores):\n"
                                + "\n".join(leftovers), red=True)
        session.exitstatus = 1
