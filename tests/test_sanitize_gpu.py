"""The compute-sanitizer diagnosis on a real GPU: the missing barrier is named, bounds errors are placed,
and "found nothing" is said only of a kernel that really ran under every tool."""
import shutil

import pytest
from conftest import SUBMISSIONS
from hardware import needs_gpu, needs_sanitizer
from test_block_sampling import seed_that

from grader.cases import SAMPLED, Case, load_cases
from grader.config import load_config
from grader.contract import KernelContract
from grader.diagnose.checks import HUNG_ON_BOTH, STOPPED_ON_BOTH
from grader.diagnose.run import TOOLS, SanitizerRun, sanitize
from grader.execute.runner import Placement
from grader.judge.engines import hung_on_both, stopped_on_both
from grader.pipeline import GPU, RunPlan, grade, sandbox_of
from grader.result import CASE, ERROR, FAILED, GRADED, GRADER_ERROR, PASSED, SANITIZER, SKIPPED

pytestmark = [
    pytest.mark.gpu,
    needs_gpu,
    needs_sanitizer,
]
EVERY_TOOL = RunPlan(GPU, sanitize=True, sanitize_always=True)  # the diagnosis over every kernel (--sanitize)
# A grade's default (`grade DIR`, `grade batch`): the tools where they see what the CPU emulator cannot
WHERE_USEFUL = RunPlan(GPU, sanitize=True)


@pytest.fixture(scope="module")
def setup(config_file):
    config = load_config(config_file)
    return config, [case for case in load_cases(config.testcases_dir) if case.on_cpu == "whole"][:1]


@pytest.fixture(scope="module")
def diagnose(setup):
    """The sanitizer check of a corpus submission graded on the GPU with the diagnosis on, as a batch does."""
    config, cases = setup

    def run(name: str):
        result = grade(SUBMISSIONS / name, config, cases, EVERY_TOOL)
        return next(c for c in result.checks if c.kind == SANITIZER)

    return run


@pytest.mark.parametrize("name, barrier", [("missing_load_barrier", "the barrier after loading the tiles"),
                                           ("missing_use_barrier", "the barrier after using the tiles")])
def test_the_missing_barrier_is_named_on_every_run(diagnose, name, barrier):
    for _ in range(2):
        check = diagnose(name)
        assert check.status == FAILED and "shared-memory race" in check.message and barrier in check.message


def test_out_of_bounds_reads_name_the_buffer_and_line(diagnose):
    check = diagnose("no_bounds_checks")
    assert check.status == FAILED and "out-of-bounds read of" in check.message and "at line 1" in check.message


def test_a_correct_kernel_is_clean_and_fast(diagnose):
    check = diagnose("good_basic")
    assert check.status == PASSED and "found nothing" in check.message, check.message
    assert max(check.metrics[f"{tool}_s"] for tool in ("racecheck", "memcheck", "synccheck")) < 30


@pytest.mark.parametrize("name", ["template_helper", "overloaded_kernel"])
def test_a_kernel_with_cpp_linkage_is_launched_under_every_tool(diagnose, name):
    """Its symbol is mangled (_Z7mysgemmiiiPKfS0_Pf): looked up by its plain name, no tool would launch it, and
    the diagnosis would be an error. Of overloaded_kernel's two mysgemm, the float one is launched."""
    check = diagnose(name)
    assert check.status == PASSED and "found nothing" in check.message, check.message


def test_a_deadlocking_barrier_holds_the_gpu_only_for_the_hang_limit_and_is_explained(diagnose, setup):
    """Every tool's launch hangs; each holds the GPU (nobody else may use it) for sanitizer_launch_s, not for
    the tool's whole time limit."""
    config, _ = setup
    limit = config.timeouts.sanitizer_launch_s
    check = diagnose("conditional_barrier")
    assert check.status == FAILED and "__syncthreads()" in check.message
    assert f"the kernel did not finish in {limit:g} s" in check.message, check.message
    assert check.metrics["turn_held_s"] < 3 * (limit + 2)
    print(check.message)  # whether synccheck named line 21 before the hang, for the record


def diagnosis_of(result):
    return next(c for c in result.checks if c.kind == SANITIZER)


def test_a_kernel_hung_on_the_gpu_and_the_emulator_alike_is_not_run_under_the_tools(setup):
    """`hang` spins forever on both engines: under each tool it would only hang to sanitizer_launch_s (three
    launches, 16.6 s on an H200), holding the sanitizer's turns. Skipped with the reason, no tool's time spent."""
    config, cases = setup
    result = grade(SUBMISSIONS / "hang", config, cases, WHERE_USEFUL)
    hung = [c for c in result.checks if c.kind == CASE and c.status == ERROR]
    assert hung and all(hung_on_both(c) for c in hung), [(c.name, c.metrics) for c in hung]
    check = diagnosis_of(result)
    count = "1 case" if len(hung) == 1 else f"{len(hung)} cases"
    assert (check.status, check.message) == (SKIPPED, HUNG_ON_BOTH.format(count=count)), check.message
    assert not check.metrics  # no tool's seconds, no turn held or waited for
    assert result.phases.get("sanitizer", 0) < 1, result.phases
    assert result.outcome == GRADED


def test_an_explicit_sanitize_still_runs_the_tools_over_a_hung_kernel(diagnose, setup):
    """--sanitize asks for every kernel: each tool's launch hangs and is stopped at sanitizer_launch_s."""
    config, _ = setup
    check = diagnose("hang")
    assert check.status == FAILED and f"did not finish in {config.timeouts.sanitizer_launch_s:g} s" in check.message
    assert check.metrics["turn_held_s"] > 0, check.metrics


@pytest.mark.parametrize("name, words", [("illegal_address", "invalid memory access at line 28"),
                                         ("trap", "kernel aborted: __trap() at line 10"),
                                         ("conditional_barrier", "barrier divergence in block")])
def test_a_fault_the_emulator_stopped_at_for_a_named_cause_is_not_run_under_the_tools(name, words, config_file):
    """Each case the kernel faulted or hung in on the GPU, the emulator beside it stopped for a cause it names at
    the student's line: the tools would find that again. Skipped with the reason, no tool's time spent."""
    config = load_config(config_file)
    cases = [case for case in load_cases(config.testcases_dir) if case.name in ("square_16", "ragged_m")]
    result = grade(SUBMISSIONS / name, config, cases, WHERE_USEFUL)
    faulted = [c for c in result.checks if c.kind == CASE and c.status == ERROR]
    assert faulted and all(stopped_on_both(c) and c.message.startswith(words) for c in faulted), \
        [(c.name, c.metrics, c.message) for c in faulted]
    check = diagnosis_of(result)
    count = "1 case" if len(faulted) == 1 else f"{len(faulted)} cases"
    assert (check.status, check.message) == (SKIPPED, STOPPED_ON_BOTH.format(count=count)), check.message
    assert not check.metrics and result.phases.get("sanitizer", 0) < 1, (check.metrics, result.phases)


def test_a_fault_in_blocks_the_emulator_did_not_run_still_runs_every_tool(config_file):
    """trap_one_interior_block traps in block (9, 11) alone; a sampled case whose sample leaves that block out
    faults on the GPU while the emulator's blocks pass: the tools may see what it did not run."""
    config = load_config(config_file)
    config.sampling.interior_blocks = 4  # of the 144 interior tiles of a 13 × 13 grid
    case = Case("sampled_elsewhere", 200, 200, 48, seed_that(False, 200, 200, 4), 5, cpu=SAMPLED)
    result = grade(SUBMISSIONS / "trap_one_interior_block", config, [case], WHERE_USEFUL)
    (faulted,) = [c for c in result.checks if c.kind == CASE]
    assert faulted.status == ERROR and "saw nothing wrong in them" in faulted.message, faulted.message
    assert not stopped_on_both(faulted)
    check = diagnosis_of(result)
    assert check.status != SKIPPED and all(f"{tool}_s" in check.metrics for tool in TOOLS), check.message
    assert result.phases["sanitizer"] > 0.1, result.phases


def test_the_launch_uses_the_configured_parameter_order(setup, tmp_path):
    """A lab whose kernel takes (A, B, C, m, n, k): the tools launch it that way, and it is clean."""
    config, cases = setup
    source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
    signature = "int m, int n, int k, const float *A, const float *B, float *C"
    assert signature in source
    folder = tmp_path / "reordered"
    folder.mkdir()
    (folder / "kernel.cu").write_text(source.replace(signature, "const float *A, const float *B, float *C, "
                                                                "int m, int n, int k"))
    config.kernel.args = ["A", "B", "C", "m", "n", "k"]
    try:
        result = grade(folder, config, cases, EVERY_TOOL)
    finally:
        config.kernel.args = ["m", "n", "k", "A", "B", "C"]
    checks = {c.kind: c for c in result.checks}
    assert checks["case"].status == PASSED and checks[SANITIZER].status == PASSED, checks[SANITIZER].message


def test_a_kernel_that_never_ran_under_the_tools_is_an_error_not_a_pass(setup, tmp_path):
    """The module has no such kernel (as when removing host code left it empty): every tool's silence
    would mean nothing, so the check is a grader error with the reason."""
    config, cases = setup
    grade(SUBMISSIONS / "good_basic", config, cases, EVERY_TOOL)  # a module in the cache
    module = next(config.cache_dir.rglob("*.cubin"))
    shutil.copy(module, tmp_path / "kernel.cubin")
    run = SanitizerRun(str(tmp_path / "kernel.cubin"), KernelContract("no_such_kernel"), 16, "", 20, 3)
    check = sanitize(run, Placement(), sandbox_of(RunPlan(GPU)), config.cache_dir)
    assert check.status == ERROR and "not launched" in check.message and "found nothing" not in check.message


def test_a_diagnosis_that_could_not_run_makes_the_row_a_grader_error(setup, monkeypatch):
    config, cases = setup
    monkeypatch.setattr("grader.diagnose.run.launcher", _no_launcher)
    result = grade(SUBMISSIONS / "good_basic", config, cases, EVERY_TOOL)
    assert result.outcome == GRADER_ERROR
    check = next(c for c in result.checks if c.kind == SANITIZER)
    assert check.status == ERROR and check.message.startswith("grader error: no C compiler")


def _no_launcher(cache_dir):
    from grader.diagnose.launcher import LauncherUnavailable

    raise LauncherUnavailable("no C compiler (g++) to build the sanitizer's launch program")
