"""The escape suite: hostile kernels really attempt each way out, and the host is checked afterwards.

On the CPU backend a kernel's code runs natively, so each attack sits in an `#ifndef __NVCC__` block that
nvcc never sees and g++ compiles. Every attack is given everything it could wish to know (the host
paths, the port, the batch's output folder), so only the sandbox stands between it and success. Each test
asserts containment on the host: no marker file, no canary text in any output, nothing received on the
listener, no process left, the classmate's result unchanged.
"""
from __future__ import annotations

import csv
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import ROOT, SUBMISSIONS

from grader.classroom.zygote import WORKER_NAME
from grader.cli import main
from grader.execute.confine.proc import process_tree
from grader.execute.cpu.build import compiler
from grader.execute.nvcc.compile import nvcc_path

pytestmark = pytest.mark.skipif(compiler() is None or nvcc_path() is None,
                                reason="needs g++ (the CPU emulator) and nvcc (its verdict comes first)")

GOOD = (SUBMISSIONS / "good_basic" / "kernel.cu").read_text()


@pytest.fixture(scope="session")
def config_file(quick_config_file):
    """A few cases: every attack runs in each case, in both thread orders; containment is what is checked."""
    return quick_config_file


ANCHOR = "    int col = blockIdx.x * TILE_SIZE + tx;\n"
CANARY = "CANARY-6f1d2c"


def hostile(attack: str, file_scope: str = "") -> str:
    """good_basic with `attack` run once, natively, by thread (0, 0) of block (0, 0)."""
    block = ("#ifndef __NVCC__\n    if (threadIdx.x == 0 && threadIdx.y == 0 && blockIdx.x == 0 && blockIdx.y == 0) {\n"
             "        static bool fired = false;\n        if (!fired) {\n            fired = true;\n"
             f"{attack}\n        }}\n    }}\n#endif\n")
    source = GOOD.replace(ANCHOR, ANCHOR + block)
    if file_scope:
        guarded = f"#define TILE_SIZE 16\n#ifndef __NVCC__\n{file_scope}\n#endif\n"
        source = source.replace("#define TILE_SIZE 16\n", guarded)
    return source


def write(folder: Path, source: str) -> Path:
    folder.mkdir(parents=True)
    (folder / "kernel.cu").write_text(source)
    return folder


def grade(folder: Path, out: Path, config_file, *extra: str) -> dict:
    assert main([str(folder), "-o", str(out), "--config", str(config_file), "--backend", "cpu", *extra]) == 0
    return json.loads((out / f"{folder.name}.json").read_text())


def verdicts(result: dict) -> list[tuple]:
    return [(c["name"], c["status"], c["score"], c["message"]) for c in result["checks"]]


def every_output(out: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())


def case_statuses(result: dict) -> list[str]:
    return [c["status"] for c in result["checks"] if c["kind"] == "case" and "GPU only" not in c["message"]]


def test_running_a_program_changes_nothing_on_the_host(tmp_path, config_file):
    marker = tmp_path / "pwned"
    attack = f'system("id > {marker}; touch {marker}"); execl("/bin/sh", "sh", "-c", "touch {marker}", (char *)0);'
    result = grade(write(tmp_path / "exec", hostile(attack)), tmp_path / "out", config_file)
    assert not marker.exists()
    assert result["sandbox"] in ("namespaces+uid", "namespaces")
    # execl replaced the harness with a shell, so no case could finish: the student's own loss
    assert case_statuses(result) and set(case_statuses(result)) == {"error"}


def test_host_files_and_the_secret_in_proc_stay_unread(tmp_path, config_file, monkeypatch):
    monkeypatch.setenv("SGEMM_GRADER_SECRET", CANARY + "-secret")
    canary_file = tmp_path / "instructor-notes.txt"
    canary_file.write_text(CANARY + "-file\n")
    attack = f"""
            char text[4096];
            const char *paths[] = {{"{canary_file}", "/etc/shadow", "/root/.bash_history", "{ROOT}/config.yaml",
                                   "{ROOT}/testcases/60-large.yaml"}};
            for (const char *path : paths) {{
                FILE *file = fopen(path, "r");
                if (file) {{ size_t got = fread(text, 1, sizeof text - 1, file); text[got] = 0; printf("%s\\n", text);
                             fclose(file); }}
            }}
            for (int pid = 1; pid < 4194304; ++pid) {{
                char path[64]; snprintf(path, sizeof path, "/proc/%d/environ", pid);
                int fd = open(path, O_RDONLY);
                if (fd < 0) {{ if (pid > 65536) break; continue; }}
                ssize_t got = read(fd, text, sizeof text - 1);
                close(fd);
                for (ssize_t i = 0; i < got; ++i) if (text[i] == 0) text[i] = ' ';
                if (got > 0) {{ text[got] = 0; printf("%s\\n", text); }}
            }}"""
    out = tmp_path / "out"
    grade(write(tmp_path / "reader", hostile(attack)), out, config_file)
    leaked = every_output(out)
    assert CANARY not in leaked
    # /etc/shadow's root entry, the hidden case's definition, the instructor's config file (its comment: the
    # config's values are the result's provenance, written by the grader): none of it
    assert "root:" not in leaked and "m: 1024, n: 1100" not in leaked and "Paths are relative to this" not in leaked


def test_no_connection_reaches_a_listener_on_the_host(tmp_path, config_file):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    received = []

    def listen():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                continue
            received.append(connection.recv(64))
            connection.close()

    stop = threading.Event()
    thread = threading.Thread(target=listen)
    thread.start()
    # socket(2) and connect(2) by number: no header the include policy allows declares them.
    attack = f"""
            unsigned char address[16] = {{2, 0, {port >> 8}, {port & 255}, 127, 0, 0, 1}};
            for (int type : {{1, 2}}) {{
                long fd = syscall(41, 2, type, 0);
                printf("socket: %ld\\n", fd);
                if (fd >= 0) {{ syscall(42, fd, address, 16); syscall(44, fd, "PWNED", 5, 0, address, 16); }}
            }}"""
    try:
        result = grade(write(tmp_path / "net", hostile(attack)), tmp_path / "out", config_file)
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert received == []
    assert "passed" in case_statuses(result)


def test_no_process_outlives_the_grade(tmp_path, config_file):
    attack = """
            for (int i = 0; i < 3; ++i) {
                pid_t child = fork();
                if (child == 0) { setsid(); prctl(PR_SET_NAME, "sgemmdaemon"); sleep(300); _exit(0); }
            }
            signal(SIGHUP, SIG_IGN);"""
    grade(write(tmp_path / "daemon", hostile(attack)), tmp_path / "out", config_file)
    time.sleep(0.5)
    assert not _processes_named("sgemmdaemon")


def test_a_giant_or_endless_static_initializer_is_contained(tmp_path, config_file):
    marker = tmp_path / "static-pwned"
    file_scope = (f'__device__ int sgemm_boom = (system("touch {marker}"), 1);\n'
                  "__device__ char sgemm_giant[1ull << 36];\n")
    started = time.monotonic()
    result = grade(write(tmp_path / "static", hostile("sgemm_giant[5] = 1;", file_scope)), tmp_path / "out",
                   config_file)
    assert time.monotonic() - started < 120
    assert not marker.exists()
    assert result["score"] < result["max_score"] and "passed" not in case_statuses(result)


def _processes_named(name: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# --- a batch: classmates, stored results, workers ----------------------------------------------------------


def batch(paths: list[Path], out: Path, config_file, *extra: str) -> int:
    return main(["batch", *map(str, paths), "-o", str(out), "--config", str(config_file), "--backend", "cpu",
                 "--jobs", "2", *extra])


def stored(out: Path, key: str) -> dict:
    return json.loads((out / "students" / f"{key}.json").read_text())


def test_a_kernel_cannot_touch_a_classmates_result_or_kill_its_worker(tmp_path, config_file):
    out = tmp_path / "out"
    target = out / "students" / "bob.json"
    attack = f"""
            for (int round = 0; round < 50; ++round) {{
                FILE *file = fopen("{target}", "w");
                const char *forged = "{{\\"submission\\": \\"bob\\", \\"outcome\\": \\"graded\\", \\"checks\\": []}}";
                if (file) {{ fputs(forged, file); fclose(file); }}
                unlink("{target}.sig");
                usleep(20000);
            }}
            kill(getppid(), SIGKILL);
            kill(-1, SIGKILL);"""
    klass = tmp_path / "class"
    write(klass / "alice", hostile(attack))
    write(klass / "bob", GOOD)
    assert batch([klass], out, config_file) == 0
    bob = stored(out, "bob")
    alone = grade(klass / "bob", tmp_path / "alone", config_file)
    assert bob["outcome"] == "graded" and verdicts(bob) == verdicts(alone)
    alice = stored(out, "alice")
    assert alice["outcome"] != "grader error"  # it killed only what was inside its own sandbox
    assert batch([klass], out, config_file, "--resume") == 0
    assert stored(out, "bob") == bob


def test_a_result_changed_after_the_grader_wrote_it_is_graded_again(tmp_path, config_file):
    out, klass = tmp_path / "out", tmp_path / "class"
    write(klass / "bob", GOOD)
    write(klass / "carol", GOOD)
    assert batch([klass], out, config_file) == 0
    honest, carol = stored(out, "bob"), (out / "students" / "carol.json").read_bytes()
    forged = dict(honest, checks=[{**c, "score": 0.0} for c in honest["checks"]])
    (out / "students" / "bob.json").write_text(json.dumps(forged))
    assert batch([klass], out, config_file, "--resume") == 0
    assert stored(out, "bob")["score"] == honest["score"] > 0
    assert (out / "students" / "carol.json").read_bytes() == carol  # untouched: kept, not graded again


def test_a_worker_killed_mid_grade_costs_one_row_marked_grader_error(tmp_path, config_file):
    out, klass = tmp_path / "out", tmp_path / "class"
    write(klass / "slowpoke", hostile("sleep(2);"))
    write(klass / "bob", GOOD)
    process = subprocess.Popen([sys.executable, "-m", "grader", "batch", str(klass), "-o", str(out), "--config",
                                str(config_file), "--backend", "cpu", "--jobs", "2"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    killed = _kill_the_last_worker(process.pid, out / "students" / "bob.json", deadline=time.monotonic() + 120)
    assert process.wait(timeout=300) == 0 and killed
    slowpoke, bob = stored(out, "slowpoke"), stored(out, "bob")
    assert slowpoke["outcome"] == "grader error" and "SIGKILL" in slowpoke["message"]
    assert bob["outcome"] == "graded"
    rows = {row["submission"]: row for row in csv.DictReader(io.StringIO((out / "grades.csv").read_text()))}
    assert rows["slowpoke"]["status"] == "grader error" and rows["slowpoke"]["total"] == ""  # empty, never 0
    kept = (out / "students" / "bob.json").read_bytes()
    assert batch([klass], out, config_file, "--resume") == 0
    assert stored(out, "slowpoke")["outcome"] == "graded"
    assert (out / "students" / "bob.json").read_bytes() == kept  # only the lost row is graded again


def _kill_the_last_worker(batch_pid: int, done: Path, deadline: float) -> bool:
    """Once the quick student's result is stored, SIGKILL the one batch worker of this batch still running."""
    while time.monotonic() < deadline:
        workers = _batch_workers(batch_pid) if done.exists() else []
        if len(workers) == 1:
            os.kill(workers[0], signal.SIGKILL)
            return True
        time.sleep(0.05)
    return False


def _batch_workers(root: int) -> list[int]:
    """The batch workers under `root`: forked from the template, they are named batch_worker (their command line
    is the template's); a started one runs the batch_worker module. Only this test's own tree: a scan of the
    whole machine once killed another batch's worker (a parallel test run, or a second suite on the host),
    failing a correct kernel there with a "grader error" row."""
    found = []
    for pid in process_tree(root)[1:]:
        try:
            named = Path(f"/proc/{pid}/comm").read_bytes().strip() == WORKER_NAME
            if named or b"grader.classroom.batch_worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found
