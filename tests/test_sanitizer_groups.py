"""Several students' kernels under one sanitizer process per tool (diagnose/groups.py): a group can only ever
say "clean", and a batch gives every student what grading them alone gives."""
import json
import os
import shutil
import socket
import threading
import time

import pytest
from conftest import SUBMISSIONS
from hardware import needs_cxx, needs_gpu, needs_sanitizer

from grader.diagnose.groups import GROUP_SIZE, Request, SanitizerGroups, ask
from grader.diagnose.run import TOOLS
from grader.execute.runner import Placement

# A kernel that computes every case right and has both barriers, with a shared-memory race that changes
# nothing: every thread of a block writes its own index to one shared int, and nobody waits before reading
# it. Its workers offer it to a group (it looks clean), and racecheck finds the race.
HIDDEN_RACE = ("    volatile __shared__ int last;\n    last = tx;\n    if (last > 4096) C[0] = 0.0f;\n"
               "    float sum = 0.0f;\n")

# Right on every case, and clean on memcheck's ragged shape; on racecheck's one-block shape it writes past C,
# where racecheck would not look. Its group's memcheck launches it on that shape too, and sees the write.
ONE_BLOCK_SCRIBBLE = ("    if (gridDim.x == 1 && gridDim.y == 1 && tx == 0 && ty == 0) C[m * n] = 1.0f;\n"
                      "    float sum = 0.0f;\n")


def request(gpu=0, cubin="/nonexistent/kernel.cubin", tools=TOOLS) -> Request:
    job = ["mysgemm", "m,n,k,A,B,C", "2,2,1", "16,16,1", "19", "21", "50"]
    return Request(gpu, cubin, {tool: list(job) for tool in TOOLS}, 15.0, 5.0, tuple(tools))


# --- the parent's side, without a GPU: how requests gather and what a bad one gets ---------------------------


def test_requests_gather_into_one_group_of_at_most_the_group_size():
    ran = []

    def run(requests, placement, sandbox, cache_dir):
        ran.append(len(requests))
        return {"vouched": list(TOOLS), "why_not": {}, "group": len(requests), "tools": {}}

    groups = SanitizerGroups([Placement(gpu=0)], None, None, size=3, gather_s=5.0, run=run)
    replies = []
    threads = [threading.Thread(target=lambda: replies.append(groups.check(request()))) for _ in range(3)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert ran == [3] and [r["group"] for r in replies] == [3, 3, 3]
    assert time.monotonic() - started < 4.0  # a full group does not wait for the gathering time


def test_a_lone_request_runs_alone_once_its_wait_is_over():
    groups = SanitizerGroups([Placement(gpu=0)], None, None, size=GROUP_SIZE, gather_s=0.2,
                             run=lambda requests, *_: {"vouched": list(TOOLS), "group": len(requests), "tools": {}})
    assert groups.check(request())["group"] == 1


def elf_header(path, flags: int):
    """The start of a cubin: an ELF64 header for CUDA (machine 190) with these architecture flags."""
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    header[18:20] = (190).to_bytes(2, "little")
    header[48:52] = flags.to_bytes(4, "little")
    path.write_bytes(bytes(header) + b"\0" * 64)
    return str(path)


def test_modules_for_one_architecture_share_a_group_whichever_gpu_ran_them(tmp_path):
    """On a host with several GPUs of one kind, groups fill as fast as on one GPU; a module built for another
    architecture never shares a tool process with them, nor does one whose header cannot be read."""
    seen = []

    def run(requests, placement, *_):
        seen.append((placement.gpu, sorted(r.gpu for r in requests)))
        return {"vouched": list(TOOLS), "group": len(requests), "tools": {}}

    hopper, ampere = elf_header(tmp_path / "a.cubin", 0x5a05a), elf_header(tmp_path / "b.cubin", 0x500550)
    groups = SanitizerGroups([Placement(gpu=0), Placement(gpu=1)], None, None, size=4, gather_s=1.0, run=run)
    asked = [request(0, hopper), request(1, hopper), request(0, hopper), request(1, hopper)]
    threads = [threading.Thread(target=groups.check, args=(r,)) for r in asked]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 1 and seen[0][1] == [0, 0, 1, 1] and seen[0][0] in (0, 1)

    seen.clear()
    groups = SanitizerGroups([Placement(gpu=0), Placement(gpu=1)], None, None, size=2, gather_s=0.3, run=run)
    os.mkfifo(tmp_path / "pipe.cubin")  # a pipe where a module should be: never waited on
    asked = [request(0, hopper), request(1, ampere), request(0, str(tmp_path / "missing.cubin")),
             request(1, str(tmp_path / "pipe.cubin"))]
    threads = [threading.Thread(target=groups.check, args=(r,)) for r in asked]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == [(0, [0]), (0, [0]), (1, [1]), (1, [1])]


def test_a_group_that_raised_is_not_clean_for_anyone():
    def run(*_):
        raise RuntimeError("the grader's bug")

    groups = SanitizerGroups([Placement(gpu=0)], None, None, size=1, run=run)
    reply = groups.check(request())
    assert reply["vouched"] == [] and "the grader's bug" in reply["why_not"]["group"]
    assert groups.check(request(gpu=7))["vouched"] == []  # a GPU this batch does not have


@pytest.mark.parametrize("line", [b"not json\n", b"[]\n", b'{"gpu": 0}\n',
                                  json.dumps({**vars(request()), "jobs": {"racecheck": []}}).encode() + b"\n",
                                  json.dumps({**vars(request()), "timeout_s": -1}).encode() + b"\n",
                                  request(tools=["racecheck"]).to_json(),
                                  request(tools=["memcheck", "initcheck"]).to_json(),
                                  request(tools=["memcheck", "memcheck"]).to_json()])
def test_a_bad_request_on_the_channel_gets_a_reply_that_vouches_for_nothing(line):
    groups = SanitizerGroups([Placement(gpu=0)], None, None, size=1,
                             run=lambda requests, *_: {"vouched": list(TOOLS), "group": 1, "tools": {}})
    ours, theirs = socket.socketpair()
    server = threading.Thread(target=groups.serve, args=(ours,))
    server.start()
    theirs.sendall(line)
    reply = json.loads(theirs.makefile("rb").readline())
    theirs.close()
    server.join(5)
    assert reply["vouched"] == [] and reply["why_not"]["request"].startswith("a bad request")
    assert not server.is_alive()


def test_a_worker_asks_over_its_channel_and_gets_the_groups_reply():
    asked = []

    def run(requests, *_):
        asked.append(requests)
        return {"vouched": list(TOOLS), "group": 1, "tools": {}}

    groups = SanitizerGroups([Placement(gpu=0)], None, None, size=1, run=run)
    ours, theirs = socket.socketpair()
    threading.Thread(target=groups.serve, args=(ours,), daemon=True).start()
    mine = request(tools=["memcheck", "synccheck"])
    assert ask(theirs.detach(), mine, 5.0) == {"vouched": list(TOOLS), "group": 1, "tools": {}}
    assert asked == [[mine]]  # the request as it was sent, the tools it was offered for among it


def test_a_parent_that_never_answers_leaves_the_worker_to_check_alone():
    ours, theirs = socket.socketpair()
    started = time.monotonic()
    assert ask(theirs.detach(), request(), 0.3) is None
    assert time.monotonic() - started < 3
    ours.close()


def test_a_tools_inputs_are_staged_readable_and_not_writable_by_the_tool(tmp_path):
    from grader.diagnose.launcher import staged_inputs

    program, module = tmp_path / "launch_kernel", tmp_path / "kernel.cubin"
    program.write_bytes(b"#!")
    module.write_bytes(b"a module")
    (tmp_path / "root").mkdir()
    inputs = staged_inputs(tmp_path / "root", program, {"kernel0.cubin": module, "kernel1.cubin": b"bytes read"})
    modes = {path.name: path.stat().st_mode & 0o777 for path in inputs.iterdir()}
    assert modes == {"launch_kernel": 0o755, "kernel0.cubin": 0o644, "kernel1.cubin": 0o644}
    assert inputs.stat().st_mode & 0o777 == 0o755 and (inputs / "kernel1.cubin").read_bytes() == b"bytes read"


@needs_cxx
def test_the_launch_program_takes_whole_jobs_only_and_names_the_job_it_could_not_launch(tmp_path):
    """Two jobs: without a driver (CI) it says so for the first, and never launches; a job cut short is a
    usage error (exit 2), before anything is opened."""
    import os
    import subprocess

    from grader.contract import KernelContract
    from grader.diagnose.launcher import launcher
    from grader.diagnose.run import job_arguments
    from grader.execute.protocol import decode

    program = launcher(tmp_path / "cache")
    job = job_arguments(tmp_path / "kernel.cubin", KernelContract(), 16, (19, 21, 50))

    def run(arguments):
        events_read, events_write = os.pipe()
        control_read, control_write = os.pipe()
        finished = subprocess.run([str(program), *arguments, str(events_write), str(control_read)],
                                  pass_fds=(events_write, control_read), stderr=subprocess.DEVNULL, timeout=60)
        os.close(events_write)
        with os.fdopen(events_read, "rb") as events:
            said = [decode(line) for line in events.read().splitlines()]
        os.close(control_read)
        os.close(control_write)
        return finished.returncode, said

    assert run([*job, *job[:-1]]) == (2, [])
    code, said = run([*job, *job])
    if code == 3 and said and "driver" in said[0]["reason"]:  # CI: no driver
        assert said == [{"event": "not_launched", "job": 0, "reason": said[0]["reason"]}]
    else:  # a GPU host: the module does not exist
        assert code == 3 and said[0] == {"event": "not_launched", "job": 0,
                                         "reason": "the compiled module could not be read"}


# --- the worker's side, without a GPU: what it offers, and what it makes of what a group vouched for ---------


def test_a_kernel_is_offered_only_for_the_tools_its_gpu_run_gives_no_reason_to_expect_a_finding_from():
    from grader.diagnose.checks import groupable_tools
    from grader.result import CASE, COMPILE, STATIC, TIMING, errored, failed, passed, skipped

    inside = {"stray_stores": 0, "inputs_changed": False, "stored_nonfinite": 0}

    def wrong(**metrics):
        return failed("ragged_all", CASE, 5, "12 of 400 elements of C are wrong", metrics={**inside, **metrics})

    compiled = passed("compile", COMPILE, 10, "compiled")
    right = passed("square_64", CASE, 5, "correct", metrics=dict(inside))
    statics = [passed(name, STATIC, 5, "found") for name in ("shared tiles", "load barrier", "use barrier")]
    barrier_missing = [*statics[:2], failed("use barrier", STATIC, 5, "no __syncthreads() after the use",
                                            metrics={"line": 17})]
    barrier_skipped = [*statics[:2], failed("use barrier", STATIC, 5, "__syncthreads() under a condition",
                                            metrics={"line": 17, "condition_line": 12, "exit_line": None})]
    untiled = [failed(name, STATIC, 5, "no tile loop found", metrics={"line": 3})
               for name in ("shared tiles", "load barrier", "use barrier")]
    not_checked = [*statics[:2], skipped("use barrier", STATIC, 5, "the kernel could not be parsed")]
    slow = failed("speed vs reference", TIMING, 10, "3× the reference's time")
    assert groupable_tools([compiled, right, *statics, slow]) == tuple(TOOLS)
    # every barrier in place and values wrong, but none a NaN it stored (a read of the poison past A or B)
    assert groupable_tools([compiled, right, wrong(), *statics]) == tuple(TOOLS)
    assert groupable_tools([compiled, right, wrong(stored_nonfinite=3), *statics]) == ()
    # a barrier missing: a race, racecheck's finding, so racecheck checks it alone; the values a race spoils
    # (poisoned tile entries among them) say nothing of where the kernel reads. synccheck reports no missing
    # barrier: it checks such a kernel with the others
    assert groupable_tools([compiled, right, *barrier_missing]) == ("memcheck", "synccheck")
    assert groupable_tools([compiled, wrong(stored_nonfinite=40), *barrier_missing]) == ("memcheck", "synccheck")
    assert groupable_tools([compiled, right, *untiled]) == ("memcheck", "synccheck")
    # a barrier some threads skip is what synccheck reports; a static check that did not run says nothing
    assert groupable_tools([compiled, right, *barrier_skipped]) == ("memcheck",)
    assert groupable_tools([compiled, right, *not_checked]) == ("memcheck",)
    # a sign of reaching outside its buffers, in any case: such a kernel never shares a tool process
    for case in (wrong(stray_stores=1), wrong(inputs_changed=True),
                 errored("ragged_all", CASE, 5, "kernel fault: illegal memory access")):
        assert groupable_tools([compiled, right, case, *statics]) == ()
        assert groupable_tools([compiled, right, case, *barrier_missing]) == ()
    assert groupable_tools([errored("compile", COMPILE, 10, "error"), *statics]) == ()
    assert groupable_tools([compiled, *statics]) == ()  # no case ran


def test_a_diagnosis_of_tools_a_group_vouched_for_is_what_checking_the_kernel_alone_says_of_a_clean_one(tmp_path):
    """Every tool vouched for: the clean verdict, with nothing run here (this machine has no sanitizer); some
    only: the rest run alone, and where they cannot, the check says so as it would alone."""
    from grader.contract import KernelContract
    from grader.diagnose.run import SanitizerRun, ToolRun, sanitize, verdict
    from grader.result import PASSED

    run = SanitizerRun(str(tmp_path / "kernel.cubin"), KernelContract(), 16, "", 15.0, 5.0)
    everything = {tool: ToolRun(tool, seconds=1.5) for tool in TOOLS}
    check = sanitize(run, Placement(), None, tmp_path, everything)
    assert check.status == PASSED and check.message == verdict([ToolRun(t) for t in TOOLS], 16).message
    partly = sanitize(run, Placement(), None, tmp_path, {"memcheck": everything["memcheck"]})
    alone = sanitize(run, Placement(), None, tmp_path)
    assert (partly.status, partly.message) == (alone.status, alone.message)


# --- on a GPU: the tools, the batch --------------------------------------------------------------------------


def a_class(tmp_path, names: list[str]):
    folder = tmp_path / "class"
    for name in names:
        shutil.copytree(SUBMISSIONS / name, folder / name)
    hidden = folder / "hidden_race"
    hidden.mkdir()
    source = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()
    (hidden / "kernel.cu").write_text(source.replace("    float sum = 0.0f;\n", HIDDEN_RACE, 1))
    return folder


@pytest.mark.gpu
@needs_gpu
@needs_sanitizer
def test_run_group_vouches_only_for_the_tools_that_found_nothing_in_any_kernel_offered_to_them(tmp_path,
                                                                                               config_file):
    """Clean kernels together: every tool vouches. One racy kernel among them: racecheck does not, the others
    do; offered for memcheck and synccheck only, racecheck never sees it and vouches for the rest. One that
    writes past its output on racecheck's shape only: memcheck does not vouch, and so no tool does."""
    from grader.config import load_config
    from grader.diagnose.groups import run_group
    from grader.pipeline import GPU, RunPlan, sandbox_of

    config = load_config(config_file)
    cubins = {name: _cubin(name, tmp_path)
              for name in ("good_basic", "good_tile8_renamed", "hidden_race", "one_block_scribble")}
    sandbox = sandbox_of(RunPlan(GPU))
    clean = [_request(cubins[name], tile) for name, tile in (("good_basic", 16), ("good_tile8_renamed", 8))]
    reply = run_group(clean * 2, Placement(), sandbox, config.cache_dir)
    assert reply["vouched"] == list(TOOLS) and reply["group"] == 4, reply
    racy = [clean[0], _request(cubins["hidden_race"], 16), clean[1]]
    reply = run_group(racy, Placement(), sandbox, config.cache_dir)
    assert sorted(reply["vouched"]) == ["memcheck", "synccheck"] and list(reply["why_not"]) == ["racecheck"], reply
    racy[1] = _request(cubins["hidden_race"], 16, tools=("memcheck", "synccheck"))
    reply = run_group(racy, Placement(), sandbox, config.cache_dir)
    assert reply["vouched"] == list(TOOLS), reply
    scribbling = [clean[0], _request(cubins["one_block_scribble"], 16), clean[1]]
    reply = run_group(scribbling, Placement(), sandbox, config.cache_dir)
    assert reply["vouched"] == [] and "memcheck" in reply["why_not"], reply


@pytest.mark.gpu
@needs_gpu
@needs_sanitizer
def test_a_batch_checks_clean_kernels_together_and_gives_everyone_what_grading_alone_gives(tmp_path, config_file):
    from rich.console import Console

    from grader.cases import load_cases
    from grader.classroom.batch import BatchOptions, run_batch
    from grader.config import load_config
    from grader.judge.verdicts import differences
    from grader.pipeline import GPU, RunPlan, grade
    from grader.result import FAILED, PASSED, SANITIZER

    every_tool = RunPlan(GPU, sanitize=True, sanitize_always=True)  # groups form where the tools run on every kernel
    config = load_config(config_file)
    cases = [case for case in load_cases(config.testcases_dir) if case.on_cpu == "whole"][:2]
    names = ["good_basic", "good_tile8_renamed", "tile_width_named", "template_helper", "missing_load_barrier",
             "no_bounds_checks", "conditional_barrier", "truncated_phases"]
    folder = a_class(tmp_path, names)
    outcome = run_batch([folder], config, cases, every_tool, BatchOptions(tmp_path / "out", jobs=8),
                        Console(quiet=True))
    batch = {result.submission: result for result in outcome.results}
    assert len(batch) == len(names) + 1
    grouped: dict[str, set[str]] = {}
    for name in [*names, "hidden_race"]:
        alone = grade(folder / name, config, cases, every_tool)
        together = batch[name]
        assert differences(together, alone, config.timing.max_ratio) == [], name
        mine, theirs = (next(c for c in r.checks if c.kind == SANITIZER) for r in (together, alone))
        assert mine.status == theirs.status, name
        if mine.status == PASSED:  # a race's report names whichever racing store the tool saw first
            assert mine.message == theirs.message, name
        if "sanitizer_group" in mine.metrics:
            grouped[name] = set(mine.metrics["sanitizer_grouped"])
    # stores outside C: memcheck's finding, so no group vouches for it (on these two square cases it looks
    # clean and is offered); a missing barrier races, so never racecheck (groupable_tools), and a barrier under a
    # condition, synccheck's finding, memcheck at most. Whether a group formed for a tool depends on who offered
    # it at the same moment: these are upper bounds.
    assert "no_bounds_checks" not in grouped, grouped
    assert grouped.get("missing_load_barrier", set()) <= {"memcheck", "synccheck"}, grouped
    assert grouped.get("conditional_barrier", set()) <= {"memcheck"}, grouped
    # offered to a group as it looked clean, the group was not: checked alone, the race is found
    hidden = next(c for c in batch["hidden_race"].checks if c.kind == SANITIZER)
    assert hidden.status == FAILED and "race" in hidden.message and "racecheck" not in grouped.get("hidden_race", ())

    # A class of clean kernels only: each is checked in a group, and some groups hold several students.
    clean = a_class(tmp_path / "clean", ["good_basic", "good_tile8_renamed", "tile_width_named", "template_helper"])
    shutil.rmtree(clean / "hidden_race")
    outcome = run_batch([clean], config, cases, every_tool, BatchOptions(tmp_path / "out2", jobs=8),
                        Console(quiet=True))
    sizes = [next(c for c in r.checks if c.kind == SANITIZER).metrics.get("sanitizer_group") for r in outcome.results]
    assert None not in sizes and max(sizes) >= 2, sizes


def _cubin(name, tmp_path):
    """A corpus kernel (or the hidden race) built as the GPU run builds it, for this machine's GPU."""
    import subprocess

    inserted = {"hidden_race": HIDDEN_RACE, "one_block_scribble": ONE_BLOCK_SCRIBBLE}
    source = (SUBMISSIONS / ("good_basic" if name in inserted else name) / "kernel.cu").read_text()
    if name in inserted:
        source = source.replace("    float sum = 0.0f;\n", inserted[name], 1)
    work, target = tmp_path / f"{name}.cu", tmp_path / f"{name}.cubin"
    work.write_text(f'#line 1 "kernel.cu"\n{source}')
    subprocess.run(["nvcc", "--cubin", "-arch=native", "-lineinfo", "-o", str(target), str(work)], check=True)
    return target


def _request(cubin, tile, tools=TOOLS):
    from grader.contract import KernelContract
    from grader.diagnose.run import job_arguments, kernel_symbol_of, shape_for

    contract = KernelContract()
    symbol = kernel_symbol_of(cubin, contract)
    return Request(None, str(cubin), {tool: job_arguments(cubin, contract, tile, shape_for(tool, tile, contract),
                                                          symbol)[1:] for tool in TOOLS}, 15.0, 5.0, tuple(tools))
