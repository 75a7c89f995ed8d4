"""`grade batch --cluster`: a real Dask LocalCluster with worker processes (CPU backend). A class graded
there gets each student's verdicts of grading them alone; a worker killed mid-task costs a retry, not a
row; and a TLS cluster with self-signed certificates refuses a client without them."""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import distributed
import pytest
from conftest import ROOT, SUBMISSIONS, descendants
from hardware import needs_cxx
from rich.console import Console
from test_cluster_tls import Cluster, alive
from test_serve import free_port

from grader.cases import load_cases
from grader.classroom.batch import BatchOptions, run_batch
from grader.classroom.cluster import WORKER_CACHE
from grader.classroom.cluster_tls import CA, ROLES, cert_file, key_file, make_certificates
from grader.config import load_config
from grader.judge.verdicts import differences
from grader.pipeline import CPU, RunPlan, grade

CLASS = ("good_basic", "compile_error", "wrong_kernel_name")


@pytest.fixture(scope="module", autouse=True)
def no_resource_tracker_left():
    """LocalCluster's worker processes start Python's multiprocessing resource tracker in this process; it
    would outlive the session (the suite fails on any process left running), so it stops with the module."""
    yield
    from multiprocessing import resource_tracker

    resource_tracker._resource_tracker._stop()


@pytest.fixture(scope="module")
def setup():
    config = load_config()
    return config, load_cases(config.testcases_dir)[:4]


def local_cluster(workers: int = 2, **options) -> distributed.LocalCluster:
    # The scheduler's HTTP pages on a free loopback port, not 8787: tests on other workers run clusters too.
    return distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                                    scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}, **options)


def a_class(tmp_path, names):
    folder = tmp_path / "class"
    for name in names:
        shutil.copytree(SUBMISSIONS / name, folder / name)
    return folder


def batch_on(cluster, tmp_path, names, setup, security=None):
    config, cases = setup
    options = BatchOptions(tmp_path / "out", cluster=cluster.scheduler_address, security=security)
    return run_batch([a_class(tmp_path, names)], config, cases, RunPlan(CPU), options, Console(quiet=True))


@needs_cxx
def test_a_cluster_batch_grades_each_student_as_grading_them_alone(tmp_path, setup):
    config, cases = setup
    with local_cluster() as cluster:
        outcome = batch_on(cluster, tmp_path, CLASS, setup)
    assert sorted(r.submission for r in outcome.results) == sorted(CLASS)
    for result in outcome.results:
        alone = grade(SUBMISSIONS / result.submission, config, cases, RunPlan(CPU))
        assert differences(result, alone, config.timing.max_ratio) == [], result.submission
    assert (tmp_path / "out" / "students" / "good_basic.json").is_file()


@needs_cxx
def test_a_worker_killed_mid_task_costs_a_retry_not_a_row(tmp_path, setup, monkeypatch):
    config, cases = setup
    monkeypatch.setenv(WORKER_CACHE, str(tmp_path / "worker-cache"))  # nothing cached: grading takes seconds
    with local_cluster() as cluster, distributed.Client(cluster) as watcher:
        finished = {}
        batch = threading.Thread(target=lambda: finished.update(outcome=batch_on(cluster, tmp_path, ["good_basic"],
                                                                                 setup)))
        batch.start()
        deadline = time.monotonic() + 120
        busy = []
        while not busy and time.monotonic() < deadline:
            busy = [worker for worker, tasks in watcher.processing().items() if tasks]
            time.sleep(0.05)
        assert busy, "the task never started"
        time.sleep(1.0)  # well into grading: the worker's batch_worker and sandbox are running
        os.kill(watcher.run(os.getpid, workers=busy)[busy[0]], signal.SIGKILL)
        batch.join(timeout=300)
        log = cluster.scheduler.transition_log
        started = [t for t in log if str(t[0]).startswith("grade_task") and t[2] == "processing"]
    assert len(started) == 2  # killed while processing, then run again on the other worker
    results = finished["outcome"].results
    assert len(results) == 1 and results[0].graded
    alone = grade(SUBMISSIONS / "good_basic", config, cases, RunPlan(CPU))
    assert differences(results[0], alone, config.timing.max_ratio) == []


def test_a_tls_cluster_with_self_signed_certificates(tmp_path, setup):
    security = distributed.security.Security.temporary()  # a self-signed CA and certificate, made now
    with local_cluster(1, protocol="tls", security=security) as cluster:
        assert cluster.scheduler_address.startswith("tls://")
        stranger = distributed.security.Security.temporary()  # certificates of another, self-made CA
        with pytest.raises((OSError, TimeoutError)):
            distributed.Client(cluster.scheduler_address, security=stranger, timeout="3s")
        outcome = batch_on(cluster, tmp_path, ["compile_error"], setup, security=security)
    assert [r.outcome for r in outcome.results] == ["compile error"]


def test_half_a_tls_setup_is_misuse(tmp_path):
    from grader.cli import main

    key = tmp_path / "key.pem"
    key.write_text("x")
    assert main(["batch", str(SUBMISSIONS / "compile_error"), "-o", str(tmp_path / "out"), "--no-run",
                 "--cluster", "tls://127.0.0.1:1", "--tls-key", str(key)]) == 2


def test_grade_worker_serves_a_scheduler_that_grade_batch_sends_to(tmp_path):
    """The commands as docs/service-and-cluster.md has an instructor run them, TLS throughout (on 127.0.0.1): `grade
    cluster-certs`, `grade scheduler`, `grade worker` on this (GPU-less) host, and `grade batch --cluster`.
    Stopping `grade worker` stops the Dask processes it started."""
    certs = tmp_path / "certs"
    assert subprocess.run([sys.executable, "-m", "grader", "cluster-certs", str(certs)], cwd=ROOT,
                          capture_output=True, timeout=60).returncode == 0
    running = Cluster(certs, tmp_path)
    try:
        worker = running.add_worker()
        finished = subprocess.run([sys.executable, "-m", "grader", "batch", str(SUBMISSIONS / "compile_error"),
                                   "-o", str(tmp_path / "out"), "--backend", "cpu", "--cluster", running.address,
                                   "--certs", str(certs)], cwd=ROOT, capture_output=True, text=True, timeout=180)
        family = descendants(worker.pid)
        worker.terminate()  # grade worker alone: it stops the Dask worker it started
        worker.wait(timeout=60)
        assert family and not [command for pid, command in family.items() if alive(pid)]
    finally:
        running.close()
    assert finished.returncode == 0, finished.stderr
    stored = json.loads((tmp_path / "out" / "students" / "compile_error.json").read_text())
    assert stored["outcome"] == "compile error"


@pytest.mark.parametrize("transport", ["tls", "insecure"])
def test_grade_serve_sends_its_jobs_to_the_cluster(tmp_path, transport):
    """With the cluster's certificates (--certs), or over plain TCP where --insecure allows it."""
    from test_serve import BROKEN, Service, zipped

    certs = tmp_path / "certs"
    make_certificates(certs)
    tls = dict(protocol="tls", security=every_role(certs)) if transport == "tls" else {}
    flags = ["--certs", str(certs)] if transport == "tls" else ["--insecure"]
    with local_cluster(1, **tls) as cluster:
        service = Service(tmp_path, "--cluster", cluster.scheduler_address, *flags).start()
        try:
            code, queued = service.submit("olivia", zipped({"kernel.cu": BROKEN}))
            assert code == 202
            assert service.result(queued["id"])["result"]["outcome"] == "compile error"
        finally:
            service.kill()
        first = service.log_text().splitlines()[0]  # the workers run student code: this host's level is not theirs
        assert "sandbox each worker's own" in first and "grading on the Dask cluster" in first
        ran = [t for t in cluster.scheduler.transition_log if str(t[0]).startswith("grade_task") and t[2] == "memory"]
    assert cluster.scheduler_address.startswith("tls://" if transport == "tls" else "tcp://")
    assert len(ran) == 1  # graded by the cluster's worker, once


def every_role(certs):
    """A LocalCluster's scheduler, workers and clients, each with its certificate of `grade cluster-certs`."""
    files = {f"tls_{role}_{kind}": str(path(certs, role)) for role in ROLES
             for kind, path in (("cert", cert_file), ("key", key_file))}
    return distributed.security.Security(tls_ca_file=str(certs / CA), require_encryption=True, **files)


def test_gpu_turns_are_per_host_even_when_hosts_share_a_cache_folder(tmp_path, monkeypatch):
    """Cluster workers on two hosts with one home folder (NFS): node2's gpu0 is free while node1's is held;
    a second grader on node1 waits for node1's gpu0."""
    import socket

    from grader.pipeline import device_lock

    config = load_config()
    config.compile.cache_dir = str(tmp_path / "shared-home-cache")
    monkeypatch.setattr(socket, "gethostname", lambda: "node1")
    held = device_lock(config, 0).turn("timing")
    same_host = device_lock(config, 0)
    monkeypatch.setattr(socket, "gethostname", lambda: "node2")
    other_host = device_lock(config, 0)
    got: dict[str, float] = {}

    def take(name, lock):
        started = time.monotonic()
        lock.turn("case").release()
        got[name] = time.monotonic() - started

    waiters = [threading.Thread(target=take, args=(name, lock), daemon=True)
               for name, lock in (("node2", other_host), ("node1", same_host))]
    for waiter in waiters:
        waiter.start()
    time.sleep(1.0)
    assert "node2" in got and "node1" not in got
    held.release()
    waiters[1].join(timeout=10)
    assert got["node1"] >= 1.0


def test_the_workers_gpus_decide_the_backend_not_the_submitting_hosts(tmp_path, monkeypatch):
    """`grade batch --cluster` from a host without a GPU: GPU grading when a worker offers the GPU resource
    (`grade worker` on a GPU host), the CPU emulator when none does, and --backend gpu refused by name
    when no worker has a GPU; an unreachable scheduler is a usage error, not a traceback."""
    from grader.classroom.cluster import SLOTS
    from grader.cli import parse_args, run_plan
    from grader.errors import UsageError

    def plan_for(address, *flags):
        args = parse_args(["batch", str(tmp_path), "--cluster", address, *flags])
        args.security = None
        return run_plan(args)

    with local_cluster(1) as cpu_only:
        assert plan_for(cpu_only.scheduler_address).backend == CPU
        with pytest.raises(UsageError, match="no worker of the cluster .* has a GPU"):
            plan_for(cpu_only.scheduler_address, "--backend", "gpu")
    with local_cluster(1, resources={SLOTS: 4}) as with_gpu:
        plan = plan_for(with_gpu.scheduler_address)
        assert plan.backend == "gpu" and plan.sanitize  # a batch sanitizes by default, as on one host
        assert not plan_for(with_gpu.scheduler_address, "--no-sanitize").sanitize
    monkeypatch.setattr("grader.classroom.cluster.CONNECT_TIMEOUT", "2s")  # a scheduler away is given 30 s
    with pytest.raises(UsageError, match="cannot reach the scheduler"):
        plan_for(f"tcp://127.0.0.1:{free_port()}")
