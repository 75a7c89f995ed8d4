"""The parent's supervision of child processes, with real children that misbehave on purpose.

These children stand in for nothing GPU-specific: they exercise the process handling (deadlines,
process-group kills, crash detection, restarts after a fault) that every submission goes through.
"""
import json
import sys
import textwrap
import time
from pathlib import Path

import pytest

from grader.contract import KernelContract
from grader.execute.job import CaseSpec, Job
from grader.execute.runner import ChildProgram, Limits, run_job

CHILD_PRELUDE = """
import json, os, sys, time, subprocess
from grader.execute.protocol import await_job
fd, control = int(sys.argv[2]), int(sys.argv[3])
await_job(control)  # as the grader's children do: the job file is written once the parent says so
job = json.load(open(sys.argv[1]))
def send(event, **fields):
    os.write(fd, (json.dumps({"event": event, **fields}) + "\\n").encode())
def send_case(name):
    send("case", case=name, seconds=0.1, a_changed=False, b_changed=False)
"""


def make_job(tmp_path, cases=("one", "two", "three")):
    return Job(student_source="", reference_source="", contract=KernelContract(tile_sizes=(16,)), options=[],
               cache_dir=str(tmp_path / "cache"), workdir=str(tmp_path),
               cases=[CaseSpec(name, 1, 1, 1, 0, "uniform") for name in cases], timing=None)


def child(tmp_path, body: str) -> ChildProgram:
    script = tmp_path / "child.py"
    script.write_text(CHILD_PRELUDE + textwrap.dedent(body))
    return ChildProgram((sys.executable, str(script)))


LIMITS = Limits(startup_s=5, compile_s=5, run_s=1, max_restarts=2)
AUTOGROUP_CHANGE_INTERVAL_S = 0.15  # the kernel's limit (HZ / 10) with room to spare


def events_of(tmp_path, body, want_timing=lambda: True, limits=LIMITS, cases=("one", "two", "three")):
    return list(run_job(make_job(tmp_path, cases), limits, want_timing, child(tmp_path, body)))


def test_events_pass_through_and_the_parent_decides_on_timing(tmp_path):
    body = """
    for case in job["cases"]:
        send("phase", phase="case", case=case["name"])
        send_case(case["name"])
    send("await_timing")
    answer = os.fdopen(control).readline().strip()
    print("student printf output; the parent answered", answer)
    send("done")
    """
    for wanted, answer in ((True, "go"), (False, "skip")):
        events = events_of(tmp_path, body, want_timing=lambda wanted=wanted: wanted)
        kinds = [e["event"] for e in events]
        assert kinds == ["case", "case", "case", "done", "output"]
        assert f"student printf output; the parent answered {answer}" in events[-1]["text"]


def test_hung_case_times_out_and_its_whole_process_group_dies(tmp_path):
    body = """
    send("phase", phase="case", case="one")
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    open(os.path.join(job["workdir"], "..", "helper.pid"), "w").write(str(helper.pid))
    time.sleep(60)
    """
    started = time.monotonic()
    events = events_of(tmp_path, body, cases=("one",))
    assert time.monotonic() - started < 5
    assert events[0] == {"event": "timeout", "phase": "case", "case": "one", "limit_s": 1}
    helper = int((tmp_path / "helper.pid").read_text())
    time.sleep(0.2)
    assert not alive(helper)  # the grandchild went with the group


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for a reaper."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


def test_phase_deadlines_are_per_phase(tmp_path):
    body = """
    send("phase", phase="compile")
    time.sleep(2)  # longer than run_s, shorter than compile_s
    send("phase", phase="case", case="one")
    send_case("one")
    send("done")
    """
    kinds = [e["event"] for e in events_of(tmp_path, body, cases=("one",))]
    assert kinds == ["case", "done", "output"]


def test_a_case_has_its_own_limit_where_one_is_set_and_timing_keeps_run_s(tmp_path):
    """On the GPU a case is milliseconds and holds the GPU alone: a hang there is cut at case_s, while the
    timing phase keeps run_s."""
    body = """
    send("phase", phase="timing")
    time.sleep(0.6)  # longer than case_s, shorter than run_s
    send("phase", phase="case", case="one")
    time.sleep(60)
    """
    limits = Limits(startup_s=5, compile_s=5, run_s=1, max_restarts=0, case_s=0.3)
    started = time.monotonic()
    events = events_of(tmp_path, body, limits=limits, cases=("one",))
    assert events[0] == {"event": "timeout", "phase": "case", "case": "one", "limit_s": 0.3}
    assert time.monotonic() - started < 3


def test_child_dying_without_a_word_is_a_crash(tmp_path):
    body = """
    send("phase", phase="case", case="two")
    print("Segmentation fault", file=sys.stderr)
    os._exit(139)
    """
    events = events_of(tmp_path, body)
    assert events[0] == {"event": "crash", "phase": "case", "case": "two", "returncode": 139}
    assert "Segmentation fault" in events[1]["text"]


def test_a_fault_gets_a_fresh_child_for_the_remaining_cases_only(tmp_path):
    body = """
    names = [c["name"] for c in job["cases"]]
    print("started with", names)
    for name in names:
        send("phase", phase="case", case=name)
        if name != "three":
            send("fault", error="an illegal memory access was encountered")
            os._exit(0)
        send_case(name)
    send("done")
    """
    events = events_of(tmp_path, body)
    assert [e["event"] for e in events] == ["fault", "output", "restart", "fault", "output", "restart",
                                            "case", "done", "output"]
    outputs = [e["text"].strip() for e in events if e["event"] == "output"]
    assert outputs == ["started with ['one', 'two', 'three']", "started with ['two', 'three']",
                       "started with ['three']"]
    assert events[0]["case"] == "one" and events[3]["case"] == "two"


def test_a_hang_also_gets_a_fresh_child_for_the_rest(tmp_path):
    body = """
    names = [c["name"] for c in job["cases"]]
    send("phase", phase="case", case=names[0])
    if names[0] == "one":
        time.sleep(60)
    send_case(names[0])
    send("done")
    """
    events = [e for e in events_of(tmp_path, body, cases=("one", "two")) if e["event"] != "output"]
    assert [e["event"] for e in events] == ["timeout", "restart", "case", "done"]
    assert events[2]["case"] == "two"


def test_after_a_hang_the_cases_it_is_told_to_leave_out_are_not_run_again(tmp_path):
    """Beside an emulator (hang_notices.py), a hang in case one asks which remaining cases to leave out: the next
    child gets the others only, and 'left_out' names the rest; a fault asks nothing."""
    body = """
    names = [c["name"] for c in job["cases"]]
    print("started with", names)
    send("phase", phase="case", case=names[0])
    if names[0] == "one":
        time.sleep(60)
    for name in names:
        send("phase", phase="case", case=name)
        send_case(name)
    send("done")
    """
    asked = []

    def left_out(hung: str, remaining: list[str]) -> list[str]:
        asked.append((hung, remaining))
        return ["two", "four"]

    limits = Limits(startup_s=5, compile_s=5, run_s=0.5, max_restarts=2)
    job = make_job(tmp_path, ("one", "two", "three", "four"))
    events = list(run_job(job, limits, lambda: True, child(tmp_path, body), left_out_after_hang=left_out))
    assert asked == [("one", ["two", "three", "four"])]
    assert [e["event"] for e in events if e["event"] != "output"] == ["timeout", "left_out", "restart", "case", "done"]
    assert next(e for e in events if e["event"] == "left_out") == {"event": "left_out", "after": "one",
                                                                    "cases": ["two", "four"]}
    assert [e["text"].strip() for e in events if e["event"] == "output"][-1] == "started with ['three']"


def test_restarts_are_bounded(tmp_path):
    body = """
    name = job["cases"][0]["name"]
    send("phase", phase="case", case=name)
    send("fault", error="unspecified launch failure")
    os._exit(0)
    """
    limits = Limits(startup_s=5, compile_s=5, run_s=1, max_restarts=1)
    events = [e for e in events_of(tmp_path, body, limits=limits) if e["event"] != "output"]
    assert [e["event"] for e in events] == ["fault", "restart", "fault"]


def test_a_child_sees_no_secret_and_a_home_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("SGEMM_GRADER_SECRET", "s3cret-seed")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak")
    body = """
    print(json.dumps({"names": sorted(os.environ), "home": os.environ["HOME"],
                      "values": " ".join(os.environ.values())}))
    send("done")
    """
    output = next(e for e in events_of(tmp_path, body) if e["event"] == "output")["text"]
    seen = json.loads(output)
    assert "s3cret-seed" not in seen["values"] and "leak" not in seen["values"]
    assert "SGEMM_GRADER_SECRET" not in seen["names"] and "PATH" in seen["names"]
    # Its own folder, inside the job's, where nothing of another child is
    assert Path(seen["home"]).parent == tmp_path and Path(seen["home"]).name.startswith("child-")


TIMED_CHILD = """
answers = os.fdopen(control)
send("await_device")
answers.readline()
send("phase", phase="case", case="one")
case_started = time.time(); time.sleep(0.3)
open(os.path.join(job["workdir"], "..", "case-span"), "w").write(f"{case_started} {time.time()}")
send_case("one")
send("await_timing")
answer = answers.readline().split()
send("phase", phase="timing")
started = time.time(); time.sleep(0.3)
send("timing", student_ms=[started, time.time()], reference_ms=[1.0, 1.0], launches=int(answer[1]),
     wrong_launches=0, first_wrong_launch=None, m=1, n=1, k=1, phase_s=0.3, peak_gflops=1.0)
send("await_timing")
answers.readline()
send("done")
"""


def run_in_threads(tmp_path, names, body, placement, answers):
    """Each name's child run in a thread of its own, all at once, each given `answers` to its timing
    requests in turn; their events by name."""
    import threading

    events = {}

    def one(name):
        folder = tmp_path / name
        folder.mkdir()
        turns = iter(answers)
        events[name] = list(run_job(make_job(folder, cases=("one",)), LIMITS, lambda: next(turns),
                                    child(folder, body), placement))

    threads = [threading.Thread(target=one, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return events


def spans(tmp_path, events):
    """(start, end) of each child's timing and of its case."""
    timing = {name: tuple(e["student_ms"]) for name, got in events.items() for e in got if e["event"] == "timing"}
    cases = {name: tuple(map(float, (tmp_path / name / "case-span").read_text().split())) for name in events}
    return timing, cases


def test_no_two_children_use_the_device_at_once(tmp_path):
    """Three children at once: no case or timing measurement of one overlaps any case or measurement of
    another (a racy kernel must run on a quiet GPU, as it does alone); the answer carries the repetitions."""
    from grader.execute.gpu.device_lock import DeviceLock
    from grader.execute.runner import Placement

    placement = Placement(gpu=0, lock=DeviceLock(tmp_path / "turns", "gpu0"))
    events = run_in_threads(tmp_path, ["a", "b", "c"], TIMED_CHILD, placement, [15, 0])
    timing, cases = spans(tmp_path, events)
    assert len(timing) == 3 and all(e["launches"] == 15 for got in events.values() for e in got
                                    if e["event"] == "timing")
    spans_of = [(f"{name}'s timing", span) for name, span in timing.items()]
    spans_of += [(f"{name}'s case", span) for name, span in cases.items()]
    for name, (start, end) in spans_of:
        for other, (other_start, other_end) in spans_of:
            if other != name:
                assert other_end <= start or other_start >= end, f"{other} ran during {name}"
    kinds = sorted(e["kind"] for got in events.values() for e in got if e["event"] == "turn")
    assert kinds == ["case"] * 3 + ["timing"] * 3
    for got in events.values():  # each held the device for its 0.3 s case and its 0.3 s measurement
        held = next(e["held_s"] for e in got if e["event"] == "turns_held")
        assert held.keys() == {"case", "timing"} and all(0.3 <= s < 2 for s in held.values())


def test_waiting_for_a_turn_is_not_the_childs_time(tmp_path):
    """A case queued behind a timing turn held for three times its case limit still finishes."""
    import threading

    from grader.execute.gpu.device_lock import DeviceLock
    from grader.execute.runner import Placement

    lock = DeviceLock(tmp_path / "turns", "gpu0")
    held = lock.turn("timing")
    threading.Timer(3 * LIMITS.run_s, held.release).start()
    body = """
    send("await_device")
    os.fdopen(control).readline()
    send("phase", phase="case", case="one")
    send_case("one")
    send("done")
    """
    events = list(run_job(make_job(tmp_path, cases=("one",)), LIMITS, lambda: 0, child(tmp_path, body),
                          Placement(lock=lock)))
    kinds = [e["event"] for e in events]
    assert "timeout" not in kinds and kinds[-3:] == ["done", "turns_held", "output"]
    turn = next(e for e in events if e["event"] == "turn")
    assert turn["kind"] == "case" and turn["waited_s"] > 2 * LIMITS.run_s  # far past its limit


@pytest.mark.serial  # shares core 0 with exactly one busy process: a parallel test on that core would be a third
def test_waiting_for_a_cpu_is_not_the_childs_time(tmp_path):
    """A child that needs 0.7 s of CPU within a 1 s limit, sharing its one core with a busy process: its wall
    time passes the limit, its own time does not."""
    import subprocess

    from grader.execute.confine.proc import BACKGROUND_NICE, set_session_priority

    # Another child: a session of its own, weighed as a child's session is, its threads at the grader's nice,
    # so the two share the core with autogroups or without.
    hog = subprocess.Popen([sys.executable, "-c", "import os; os.sched_setaffinity(0, {0})\nwhile True: pass"],
                           start_new_session=True)
    set_session_priority(hog.pid, BACKGROUND_NICE)
    # Without CAP_SYS_ADMIN the kernel takes one autogroup change a tenth of a second (EAGAIN before): the
    # child's, right after the hog's, was refused, and its session outweighed the hog's.
    time.sleep(AUTOGROUP_CHANGE_INTERVAL_S)
    try:
        body = """
        os.sched_setaffinity(0, {0})
        send("phase", phase="case", case="one")
        started = time.monotonic()
        while time.process_time() < 0.7:
            pass
        open(os.path.join(job["workdir"], "..", "wall"), "w").write(str(time.monotonic() - started))
        send_case("one")
        send("done")
        """
        events = events_of(tmp_path, body, cases=("one",))
    finally:
        hog.kill()
        hog.wait()
    assert [e["event"] for e in events][-2:] == ["done", "output"], events
    assert float((tmp_path / "wall").read_text()) > LIMITS.run_s  # it really did wait for the CPU


@pytest.mark.parametrize("line, words", [
    ("not json at all", "not JSON"),
    ('{"event": "output", "text": "forged by the child"}', "unknown event 'output'"),
    ('{"event": "case", "case": "one", "seconds": "fast", "a_changed": false, "b_changed": false}', "wrong type"),
    ('{"event": "case", "case": "one"}', "missing seconds"),
    ('{"event": "fault", "error": "x", "extra": 1}', "unexpected field"),
    ("[" * 100 + "]" * 100, "unknown event"),
])
def test_a_malformed_event_stops_the_child_as_its_own_fault(tmp_path, line, words):
    body = f"""
    send("phase", phase="case", case="one")
    os.write(fd, {line!r}.encode() + b"\\n")
    time.sleep(60)
    """
    started = time.monotonic()
    events = events_of(tmp_path, body, cases=("one",))
    assert time.monotonic() - started < 5  # killed at once, not left to time out
    assert events[0]["event"] == "protocol_error" and events[0]["case"] == "one"
    assert words in events[0]["error"]


def test_a_line_that_never_ends_is_refused_without_exhausting_memory(tmp_path):
    body = """
    os.write(fd, b'{"event": "fault", "error": "' + b"x" * (3 << 20))
    time.sleep(60)
    """
    events = events_of(tmp_path, body, cases=("one",))
    assert events[0]["event"] == "protocol_error" and "bytes" in events[0]["error"]


def test_work_that_holds_no_turn_runs_at_the_background_niceness():
    """Compilers and sanitizer tools run niced, in the strongest sandbox here, so that a batch's GPU holder
    gets the CPUs first; the holder itself keeps the grader's niceness."""
    import os
    import subprocess

    from grader.execute.confine.proc import BACKGROUND_NICE
    from grader.execute.confine.sandbox import Confinement, ResourceLimits, detect, scratch_folder

    def niceness(nice: int) -> tuple[int, str]:
        """(the thread's niceness, its session's autogroup line) inside the sandbox."""
        with scratch_folder("sgemm-nice-test-") as workdir:
            confinement = Confinement(workdir, ResourceLimits(cpu_s=5, processes=64), nice=nice)
            script = "cut -d' ' -f19 /proc/self/stat; cat /proc/self/autogroup 2>/dev/null || echo none"
            proc = detect().popen(["/bin/sh", "-c", script], confinement, stdout=subprocess.PIPE,
                                  env={"PATH": "/usr/bin:/bin"})
            thread, session = proc.communicate(timeout=30)[0].decode().splitlines()
            return int(thread), session

    own = os.getpriority(os.PRIO_PROCESS, 0)
    background, plain = niceness(BACKGROUND_NICE), niceness(0)
    assert background[0] == own + BACKGROUND_NICE and plain[0] == own
    if background[1] != "none" and os.geteuid() == 0:
        # With autogroups the kernel weighs sessions first, and each sandbox is a session of its own.
        assert background[1].endswith(f"nice {BACKGROUND_NICE}") and plain[1].endswith("nice 0")


def test_the_holder_of_a_turn_runs_first_and_gives_its_priority_back(tmp_path):
    """While a child holds the device every other child waits for it, so where the grader may (root) it
    raises the holder's priority for the turn, and only for the turn: every thread of the sandboxed child,
    in its own session, and that session's autogroup, which is what the kernel weighs first."""
    import dataclasses
    import os

    from grader.execute.confine.proc import BACKGROUND_NICE, TURN_NICE
    from grader.execute.confine.sandbox import detect
    from grader.execute.gpu.device_lock import DeviceLock
    from grader.execute.runner import Placement

    body = """
    def niceness():
        return int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[16])
    def group():
        try:
            return int(open("/proc/self/autogroup").read().split()[-1])
        except OSError:
            return None
    answers = os.fdopen(control)
    before = (niceness(), group())
    send("await_device")
    answers.readline()
    during = (niceness(), group())
    send("await_timing")
    answers.readline()  # "skip": the case turn has ended
    print(json.dumps([before, during, (niceness(), group())]))
    send("done")
    """
    # Namespaces and a session of its own as for a submission; the uid kept, so that the interpreter
    # (which may live under root's home here) can start.
    sandbox = dataclasses.replace(detect(), drop_uid=False)
    program = ChildProgram((sys.executable, "-c", CHILD_PRELUDE + textwrap.dedent(body)), sandbox)
    events = list(run_job(make_job(tmp_path, ()), LIMITS, lambda: 0, program,
                          Placement(lock=DeviceLock(tmp_path / "turns", "gpu0"))))
    seen = [tuple(pair) for pair in json.loads(next(e for e in events if e["event"] == "output")["text"])]
    own = os.getpriority(os.PRIO_PROCESS, 0)
    before, during, after = seen
    assert before[0] == after[0] == own
    if os.geteuid() == 0:
        assert during[0] == TURN_NICE
        if during[1] is not None:  # a kernel with autogroups: the session waits in the background
            assert (before[1], during[1], after[1]) == (BACKGROUND_NICE, TURN_NICE, BACKGROUND_NICE)
    else:
        assert during[0] == before[0]


def test_emulated_cases_share_the_cpu_while_a_gpu_is_used_by_one_at_a_time(tmp_path):
    import threading

    from grader.execute.gpu.device_lock import DeviceLock

    cpu = DeviceLock(tmp_path, "cpu", shared_kinds=frozenset({"case"}))
    first, second = cpu.turn("case"), cpu.turn("case")  # granted together
    assert first.waited_s < 0.2 and second.waited_s < 0.2
    first.release(), second.release()
    gpu = DeviceLock(tmp_path, "gpu0")
    held = gpu.turn("case")
    threading.Timer(0.5, held.release).start()
    assert gpu.turn("case").waited_s >= 0.4  # a racy kernel runs alone, as it does when graded alone


def test_sanitizer_launches_share_the_gpu_but_not_with_a_case_and_cannot_starve_one(tmp_path):
    """Tools' launches overlap each other; a case (or a timing measurement) waits until they end, and a
    launch that asks after the case waits behind it, however many launches keep coming."""
    import threading

    from grader.execute.gpu.device_lock import DeviceLock

    gpu = DeviceLock(tmp_path, "gpu0", shared_kinds=frozenset({"sanitizer"}))
    first, second = gpu.turn("sanitizer"), gpu.turn("sanitizer")  # granted together
    assert first.waited_s < 0.2 and second.waited_s < 0.2
    order = []

    def take(kind: str, hold_s: float) -> None:
        turn = gpu.turn(kind)
        order.append(kind)
        time.sleep(hold_s)
        turn.release()

    case = threading.Thread(target=take, args=("case", 0.3))
    case.start()
    time.sleep(0.2)
    late = threading.Thread(target=take, args=("sanitizer", 0))
    late.start()
    time.sleep(0.2)
    assert order == []  # the case waits for the two launches, the late launch for the case
    first.release(), second.release()
    case.join(), late.join()
    assert order == ["case", "sanitizer"]


def test_the_access_profile_after_the_cases_has_a_build_s_limit_not_a_cases(tmp_path):
    """The CPU emulator's access profile waits for the reference's build, then runs twice: under load that
    took longer than one case may, and the advice was cut off. Its phase has the compile limit."""
    body = """
    send("phase", phase="case", case="one")
    send_case("one")
    send("phase", phase="profile")
    time.sleep(1.5)  # longer than run_s, shorter than compile_s
    send("done")
    """
    events = events_of(tmp_path, body, cases=("one",))
    assert [e["event"] for e in events] == ["case", "done", "output"], events
