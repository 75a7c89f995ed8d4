"""The cluster as docs/service-and-cluster.md starts it, on 127.0.0.1 only: `grade cluster-certs`, `grade
scheduler`, `grade worker`. Whoever lacks a certificate of the cluster's CA gets no code run (through the scheduler,
or a worker's or nanny's own port); plain TCP is refused unless --insecure; and `kill -9` of `grade worker`
leaves no Dask process running or registered."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path

import distributed
import pytest
from conftest import ROOT, SUBMISSIONS, descendants, left_in
from distributed.comm import connect
from distributed.core import rpc
from distributed.protocol import ToPickle
from distributed.protocol.pickle import dumps
from distributed.security import Security
from hardware import needs_cxx, needs_gpu
from test_serve import free_port

from grader.classroom.cluster_tls import CA, ROLES, cert_file, checked_files, key_file
from grader.cli import main

LOOPBACK = "127.0.0.1"  # tests talk to this host's loopback only
START_S = 60  # for a scheduler or a worker to come up on a busy 2-core machine
GONE_S = 10  # for a killed worker's processes to end and the scheduler to notice
STOP_S = 5  # for a stopped scheduler's or worker's processes to end on SIGTERM


def grade(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def start(*args: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A `grade` command in a session of its own, so a failed test can still kill whatever it left."""
    with log.open("w") as out:
        return subprocess.Popen([sys.executable, "-m", "grader", *args], cwd=ROOT, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, env=env)


def stop(process: subprocess.Popen) -> None:
    """SIGTERM first: multiprocessing's resource tracker (which ignores it) then outlives the others and
    unlinks their named semaphores, which a SIGKILL of the whole group left in /dev/shm, six a cluster.
    Whatever is left after that gets SIGKILL."""
    _signal_group(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(process.pid, signal.SIGKILL)  # the session's leader may be gone; its group is not
    process.wait(timeout=30)


def _signal_group(group: int, number: int) -> bool:
    """Whether the group still had a process to signal."""
    try:
        os.killpg(group, number)
    except ProcessLookupError:
        return False
    return True


def client_security(certs: Path) -> Security:
    return Security(tls_ca_file=str(certs / CA), tls_client_cert=str(cert_file(certs, "client")),
                    tls_client_key=str(key_file(certs, "client")), require_encryption=True)


def impostor(cluster_certs: Path, cert: str, key: str) -> Security:
    """A client that trusts the cluster's CA (so it accepts the scheduler) with a certificate not of it: only
    the scheduler's side of mutual TLS can refuse it."""
    return Security(tls_ca_file=str(cluster_certs / CA), tls_client_cert=cert, tls_client_key=key,
                    require_encryption=True)


def strangers(cluster_certs: Path, other_certs: Path) -> dict[str, Security]:
    throwaway = Security.temporary()  # Dask's own self-signed certificate, made now
    return {"no certificate": NoCertificate(cluster_certs / CA),
            "another CA's certificate": impostor(cluster_certs, str(cert_file(other_certs, "client")),
                                                 str(key_file(other_certs, "client"))),
            "a self-signed certificate": impostor(cluster_certs, throwaway.tls_client_cert,
                                                  throwaway.tls_client_key)}


class NoCertificate(Security):
    """A client that checks the scheduler's certificate against the cluster's CA but offers none of its own."""

    def __init__(self, ca: Path):
        super().__init__(require_encryption=True)
        self.ca = ca

    def get_connection_args(self, role):
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca))
        context.check_hostname = False
        return {"ssl_context": context, "require_encryption": True, "extra_conn_args": {}}


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("cluster") / "certs"
    made = grade("cluster-certs", str(folder))
    assert made.returncode == 0, made.stderr
    return folder


@pytest.fixture(scope="module")
def other_certs(tmp_path_factory) -> Path:
    """Another cluster's certificates, made by the same command: the same names, another CA."""
    folder = tmp_path_factory.mktemp("other") / "certs"
    assert grade("cluster-certs", str(folder)).returncode == 0
    return folder


class Cluster:
    """`grade scheduler` and `grade worker` on 127.0.0.1, the way docs/service-and-cluster.md starts them."""

    def __init__(self, certs: Path, logs: Path):
        self.certs, self.logs, self.port = certs, logs, free_port()
        self.address = f"tls://{LOOPBACK}:{self.port}"
        self.scheduler = start("scheduler", "--certs", str(certs), "--host", LOOPBACK, "--port", str(self.port),
                               "--http", f"{LOOPBACK}:0", log=logs / "scheduler.log")
        self.workers: list[subprocess.Popen] = []

    def add_worker(self, env: dict[str, str] | None = None) -> subprocess.Popen:
        worker = start("worker", "--scheduler", self.address, "--certs", str(self.certs), "--listen", LOOPBACK,
                       log=self.worker_log(len(self.workers)), env=env)
        self.workers.append(worker)
        return worker

    def worker_log(self, index: int) -> Path:
        return self.logs / f"worker{index}.log"

    def client(self) -> distributed.Client:
        return distributed.Client(self.address, security=client_security(self.certs), timeout=f"{START_S}s")

    def close(self) -> None:
        for process in [*self.workers, self.scheduler]:
            stop(process)


@pytest.fixture(scope="module")
def cluster(certs, tmp_path_factory):
    running = Cluster(certs, tmp_path_factory.mktemp("logs"))
    try:
        running.add_worker()
        with running.client() as client:
            client.wait_for_workers(1, timeout=START_S)
        yield running
    finally:
        running.close()


def test_cluster_certs_makes_a_ca_and_a_certificate_and_private_key_per_role(certs):
    assert stat.S_IMODE(certs.stat().st_mode) == 0o700
    for role in ROLES:
        assert stat.S_IMODE(key_file(certs, role).stat().st_mode) == 0o600
        assert cert_file(certs, role).read_text().startswith("-----BEGIN CERTIFICATE-----")
    assert not list(certs.glob("ca-key*"))  # nobody can sign another certificate for this cluster
    again = grade("cluster-certs", str(certs))
    assert again.returncode == 2 and "already there" in again.stderr  # an existing cluster's are never replaced


def try_to_run(address: str, security, marker: Path) -> None:
    """Connect as a client and submit a task that would create `marker` on a worker."""
    with distributed.Client(address, security=security, timeout="5s") as client:
        client.submit(Path.touch, marker, pure=False).result(timeout=30)


def test_a_client_with_the_clusters_certificate_runs_tasks(cluster, tmp_path):
    marker = tmp_path / "ran"
    try_to_run(cluster.address, client_security(cluster.certs), marker)
    assert marker.exists()


@pytest.mark.parametrize("who", ["no certificate", "plain TCP", "another CA's certificate",
                                 "a self-signed certificate"])
def test_a_client_without_a_certificate_of_the_clusters_ca_runs_nothing(cluster, other_certs, tmp_path, who):
    if who == "plain TCP":
        address, security = f"tcp://{LOOPBACK}:{cluster.port}", None
    else:
        address, security = cluster.address, strangers(cluster.certs, other_certs)[who]
    marker = tmp_path / "ran"
    with pytest.raises((OSError, TimeoutError)):
        try_to_run(address, security, marker)
    assert not marker.exists()


def run_directly(address: str, connection_args: dict, marker: Path) -> None:
    """A worker's and a nanny's own ports run functions too (Dask's `run`): send one there, skipping the
    scheduler."""
    async def send():
        remote = rpc(address, timeout=5, connection_args=connection_args)
        try:
            await remote.run(function=dumps(Path.touch), args=dumps((marker,)))
        finally:
            await remote.close_rpc()

    asyncio.run(asyncio.wait_for(send(), 30))


def test_the_workers_and_nannies_own_ports_need_the_certificate_too(cluster, other_certs, tmp_path):
    with cluster.client() as client:
        ((address, worker),) = client.scheduler_info(n_workers=-1)["workers"].items()
    ports = {"worker": address, "nanny": worker["nanny"]}
    for name, address in ports.items():
        assert address.startswith(f"tls://{LOOPBACK}:"), address
        for stranger in strangers(cluster.certs, other_certs).values():
            marker = tmp_path / f"{name}-stranger"
            with pytest.raises((OSError, TimeoutError)):
                run_directly(address, stranger.get_connection_args("client"), marker)
            assert not marker.exists()
        marker = tmp_path / f"{name}-member"
        run_directly(address, client_security(cluster.certs).get_connection_args("client"), marker)
        assert marker.exists()  # the same call with the cluster's certificate runs: the refusals were the TLS's


@pytest.mark.parametrize("command", [
    ["worker", "--scheduler", "tcp://127.0.0.1:1"],
    ["batch", str(SUBMISSIONS / "compile_error"), "--no-run", "--cluster", "tcp://127.0.0.1:1"],
    ["serve", "--tokens", "tokens.yaml", "--cluster", "127.0.0.1:1"],  # no scheme: Dask's tcp
])
def test_a_plain_tcp_scheduler_is_refused_without_insecure(command, tmp_path, capsys):
    if command[0] == "batch":
        command += ["-o", str(tmp_path / "out")]
    assert main(command) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "plain-TCP" in said and "TLS" in said and "grade cluster-certs DIR" in said
    assert not (tmp_path / "out").exists()


def test_insecure_allows_plain_tcp_and_certificates_belong_with_a_cluster(tmp_path, capsys):
    assert checked_files("tcp://127.0.0.1:1", "worker", None, None, None, None, True, "--scheduler") is None
    assert main(["batch", str(SUBMISSIONS / "compile_error"), "--no-run", "-o", str(tmp_path / "out"),
                 "--certs", str(tmp_path)]) == 2
    assert "are for --cluster" in capsys.readouterr().err


def test_a_tls_scheduler_needs_the_certificates(tmp_path, capsys):
    assert main(["worker", "--scheduler", "tls://127.0.0.1:1"]) == 2
    assert "--certs DIR" in capsys.readouterr().err
    assert main(["worker", "--scheduler", "tls://127.0.0.1:1", "--certs", str(tmp_path)]) == 2
    assert "ca.pem: cannot read it (missing)" in " ".join(capsys.readouterr().err.split())


def alive(pid: int) -> bool:
    """Running, not a zombie. (The test session is a subreaper: orphans become its children; reap them.)"""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_kill_9_of_grade_worker_takes_its_dask_worker_with_it(certs, tmp_path):
    """Killed while grading: the nanny, the worker process and everything under them end, and the scheduler
    drops the worker (no task of a class goes to it)."""
    running = Cluster(certs, tmp_path)
    try:
        worker = running.add_worker()
        with running.client() as client:
            client.wait_for_workers(1, timeout=START_S)
            grading = client.submit(time.sleep, 600, pure=False)
            deadline = time.monotonic() + START_S
            while not any(client.processing().values()) and time.monotonic() < deadline:
                time.sleep(0.1)
            family = descendants(worker.pid)
            assert any("dask_worker" in c for c in family.values()), family  # the nanny's process
            assert any("spawn_main" in c for c in family.values()), family  # the worker's process
            worker.kill()
            worker.wait(timeout=10)
            deadline = time.monotonic() + GONE_S
            while any(alive(pid) for pid in family) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not [command for pid, command in family.items() if alive(pid)]
            while client.scheduler_info(n_workers=-1)["workers"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert client.scheduler_info(n_workers=-1)["workers"] == {}
            grading.cancel()
    finally:
        running.close()


@pytest.mark.parametrize("backend, child", [
    pytest.param("cpu", "/bin/harness ", marks=needs_cxx),
    pytest.param("gpu", "grader.execute.gpu.child", marks=[pytest.mark.gpu, needs_gpu])])
def test_kill_9_of_grade_worker_mid_grading_leaves_no_process(certs, tmp_path, backend, child, temp_root):
    """`grade batch --cluster` grading a student on the worker (its batch_worker, and in the sandbox the
    child running the student's kernel) when `grade worker` is killed: nothing of it is left running. Its
    task's and its grade's folders (the student's code) stay in the temporary root until the next `grade
    worker` there starts: that one clears them, says so, and grades the student again."""
    running = Cluster(certs, tmp_path)
    batch = None
    env = {**os.environ, "TMPDIR": str(temp_root)}
    try:
        worker = running.add_worker(env)
        with running.client() as client:
            client.wait_for_workers(1, timeout=START_S)
            batch = start("batch", str(SUBMISSIONS / "good_basic"), "-o", str(tmp_path / "out"), "--backend", backend,
                          "--cluster", running.address, "--certs", str(certs), log=tmp_path / "batch.log")
            deadline = time.monotonic() + 3 * START_S
            family = {}
            while not any(child in c for c in family.values()) and time.monotonic() < deadline:
                time.sleep(0.05)
                family = descendants(worker.pid)
            assert any(child in c for c in family.values()), "\n".join(family.values())  # the student's kernel
            assert any("grader.classroom.batch_worker" in c for c in family.values()), "\n".join(family.values())
            assert any("bwrap" in c for c in family.values()), "\n".join(family.values())
            worker.kill()
            worker.wait(timeout=10)
            deadline = time.monotonic() + GONE_S
            while any(alive(pid) for pid in family) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not [command for pid, command in family.items() if alive(pid)]
            while client.scheduler_info(n_workers=-1)["workers"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert client.scheduler_info(n_workers=-1)["workers"] == {}
        left = left_in(temp_root)  # the grade's and the task's folders, and the Dask worker's own
        # (a GPU grade has two grade folders: its GPU child's, and the emulator's beside it)
        # and, where the kill came while the grade asked a compiler ahead (grader/ahead.py), that query's folder
        assert {"grade", "task", "worker"} <= {name.split("-")[1] for name in left} \
            <= {"grade", "task", "worker", "query"}, left
        running.add_worker(env)  # the batch waits for a worker to retry the task on
        assert batch.wait(timeout=3 * START_S) == 0, (tmp_path / "batch.log").read_text()
        stop(running.workers[1])
        said = " ".join(running.worker_log(1).read_text().split())
        assert f"grade worker: removed {len(left)} temporary folders that graders which ended without cleaning up" \
            in said
        assert left_in(temp_root) == []  # and, stopped, it left nothing of its own
    finally:
        if batch is not None:
            stop(batch)
        running.close()


# --- roles: only a client's key submits tasks or runs functions ------------------------------------------------


def role_security(certs: Path, role: str) -> Security:
    """This cluster's certificate of `role`, used to connect as a client does (what a stolen key allows)."""
    return Security(tls_ca_file=str(certs / CA), tls_client_cert=str(cert_file(certs, role)),
                    tls_client_key=str(key_file(certs, role)), require_encryption=True)


class Touch:
    """A pickle that, loaded, touches a file: what code smuggled in data runs."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return Path.touch, (Path(self.path),)


@pytest.mark.parametrize("role", ["worker", "scheduler"])
def test_a_worker_or_scheduler_key_cannot_be_a_client(cluster, tmp_path, role):
    """The certificates `grade cluster-certs` makes for the GPU hosts and the scheduler's host connect to the
    scheduler as a client would: no task of theirs runs."""
    marker = tmp_path / "ran"
    with pytest.raises((OSError, TimeoutError)):
        try_to_run(cluster.address, role_security(cluster.certs, role), marker)
    assert not marker.exists()


def test_a_worker_key_runs_nothing_through_the_scheduler_or_on_another_worker(cluster, tmp_path):
    """Everything a GPU host's key could send to run code: the scheduler's `run` on itself and on every
    worker, a worker's and a nanny's own `run`, and a pickle hidden in a message a worker sends anyway."""
    with cluster.client() as client:
        ((worker_address, worker),) = client.scheduler_info(n_workers=-1)["workers"].items()
    key = role_security(cluster.certs, "worker").get_connection_args("client")
    markers = {name: tmp_path / name for name in ("run_function", "broadcast", "worker", "nanny", "pickle")}

    async def attempts():
        scheduler = rpc(cluster.address, timeout=5, connection_args=key)
        try:
            with pytest.raises(PermissionError, match="'run_function' is not allowed to a worker certificate"):
                await scheduler.run_function(function=dumps(Path.touch), args=dumps((markers["run_function"],)))
            with pytest.raises(PermissionError, match="'broadcast' is not allowed to a worker certificate"):
                await scheduler.broadcast(msg={"op": "run", "function": dumps(Path.touch),
                                               "args": dumps((markers["broadcast"],))})
        finally:
            await scheduler.close_rpc()
        comm = await connect(cluster.address, **key)
        await comm.write({"op": "heartbeat_worker", "address": worker_address, "now": time.time(), "metrics": {},
                          "extra": ToPickle(Touch(markers["pickle"]))})
        with pytest.raises(OSError):  # refused as it is read: the scheduler drops the connection
            await asyncio.wait_for(comm.read(), 10)

    asyncio.run(asyncio.wait_for(attempts(), 60))
    for name, address in (("worker", worker_address), ("nanny", worker["nanny"])):
        with pytest.raises(PermissionError, match="'run' is not allowed to a worker certificate"):
            run_directly(address, key, markers[name])
    time.sleep(1)  # whatever might have run has
    assert [name for name, marker in markers.items() if marker.exists()] == []
    log = " ".join((cluster.logs / "scheduler.log").read_text().split())
    assert "refused operation 'run_function'" in log and "refused to unpickle what a worker certificate sent" in log


def test_a_worker_key_cannot_submit_a_task_on_the_stream_a_worker_registers(cluster, tmp_path):
    """A real submission (a client's update-graph, taken on its way out) replayed by a worker that registered
    with the GPU hosts' key, on the stream a worker reports its tasks on: with its pickles and with them
    unwrapped. Neither runs; the same message from the client does."""
    marker = tmp_path / "ran"
    with cluster.client() as client:
        captured = []
        client._send_to_scheduler = captured.append
        future = client.submit(Path.touch, marker, pure=False)
        (message,) = captured
        unwrapped = {key: value.data if isinstance(value, ToPickle) else value for key, value in message.items()}
        for replayed in (message, unwrapped):
            asyncio.run(asyncio.wait_for(rogue_worker_sends(cluster, replayed), 60))
        time.sleep(1)
        assert not marker.exists()
        type(client)._send_to_scheduler(client, message)
        future.result(timeout=60)
    assert marker.exists()  # the replayed message was a submission that runs, from a client
    assert "refused stream message 'update-graph'" in (cluster.logs / "scheduler.log").read_text()


async def rogue_worker_sends(cluster, message: dict) -> None:
    """A Dask worker of this process, registered with the worker key, sends `message` on its stream."""
    key = Security(tls_ca_file=str(cluster.certs / CA), tls_worker_cert=str(cert_file(cluster.certs, "worker")),
                   tls_worker_key=str(key_file(cluster.certs, "worker")), require_encryption=True)
    async with distributed.Worker(cluster.address, security=key, nthreads=1, host=LOOPBACK) as rogue:
        rogue.batched_stream.send({**message, "client": "rogue"})
        deadline = time.monotonic() + 10
        while rogue.status == distributed.core.Status.running and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert rogue.status != distributed.core.Status.running  # the scheduler dropped it


@needs_cxx
def test_a_batch_whose_only_worker_stops_says_so_stops_and_keeps_what_was_graded(certs, tmp_path, quick_config_file):
    """The only `grade worker` stops mid-class: the batch says no worker is connected, waits --worker-wait,
    stops (exit 3) with what was graded saved and a grader-error row for each of the others; --resume with a
    worker grades those."""
    klass = tmp_path / "class"
    shutil.copytree(SUBMISSIONS / "compile_error", klass / "compile_error")  # graded in a second or two
    for name in ("hang_a", "hang_b", "hang_c"):  # each busy for as long as its cases time out
        shutil.copytree(SUBMISSIONS / "hang", klass / name)
    out = tmp_path / "out"
    command = ("batch", str(klass), "-o", str(out), "--backend", "cpu", "--config", str(quick_config_file),
               "--cluster", None, "--certs", str(certs), "--worker-wait", "5")
    running = Cluster(certs, tmp_path)
    batch = None
    try:
        worker = running.add_worker()
        args = [running.address if part is None else part for part in command]
        batch = start(*args, log=tmp_path / "batch.log")
        deadline = time.monotonic() + 3 * START_S
        while not (out / "students" / "compile_error.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        stop(worker)
        assert batch.wait(timeout=3 * START_S) == 3
        said = " ".join((tmp_path / "batch.log").read_text().split())
        assert f"no worker is connected to the scheduler at {running.address}: waiting up to 5 s" in said
        assert f"stopped: no worker of the cluster at {running.address} was connected for 5 s" in said
        stored = {path.stem: json.loads(path.read_text()) for path in (out / "students").glob("*.json")}
        assert stored["compile_error"]["outcome"] == "compile error"
        for name in ("hang_a", "hang_b", "hang_c"):
            assert stored[name]["outcome"] == "grader error" and "--resume" in stored[name]["message"]
        assert (out / "grades.csv").read_text().count("\n") == 1 + 1 + 4  # header, points possible, the class

        running.add_worker()
        again = start(*args, "--resume", log=tmp_path / "again.log")
        assert again.wait(timeout=3 * START_S) == 0, (tmp_path / "again.log").read_text()
        assert "3 graded now, 1 kept from earlier runs" in " ".join((tmp_path / "again.log").read_text().split())
    finally:
        if batch is not None:
            stop(batch)
        running.close()
