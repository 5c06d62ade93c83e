"""A worker never outlives its harness: killed with SIGKILL while a model spins in run(), the harness takes its
worker with it (serving and one-off); a request past its own deadline ends its worker even with the harness alive."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import builders
import numpy as np
import pytest
from gates import WorkerGate, wait_for

pytestmark = pytest.mark.release

WORKER = Path(__file__).resolve().parent.parent / "harness" / "worker.py"
EXIT_ORPHAN, EXIT_DEADLINE = 5, 6  # harness/worker.py


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie waiting for init to reap it has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spin_files(tmp_path: Path) -> tuple[Path, Path]:
    model = builders.save(builders.spin_model(), tmp_path / "spin.onnx")  # 10**12 trips: hours of run()
    np.savez(tmp_path / "spin.npz", x=np.zeros(1, np.float32))
    return model, tmp_path / "spin.npz"


def spinning(pid: int, harness: subprocess.Popen) -> None:
    """Let the held worker go, and wait until it has spent a second of CPU in run() (held, it only sleeps)."""
    start = cpu_seconds(pid)
    wait_for(lambda: cpu_seconds(pid) - start > 1.0 or harness.poll() is not None, "the worker to spin in run()")
    assert harness.poll() is None, harness.stderr.read()


QEMU = ("--arch", "aarch64", "--backend", "qemu")
NODE = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js runs the node and web bindings' worker")


@pytest.mark.parametrize("command", [
    ("sweep", "--from", "1.19.2", "--to", "1.19.2"),
    ("trace", "--version", "1.19.2"),
    # under QEMU user mode the process the harness started is qemu-aarch64 running the worker: one process,
    # whose getppid() is the host's
    pytest.param(("sweep", "--from", "1.23.2", "--to", "1.23.2", *QEMU), marks=pytest.mark.qemu),
    # harness/worker.js: its watchdog is a thread of its own, as onnxruntime-web runs a model on the main one
    pytest.param(("sweep", "--from", "1.19.2", "--to", "1.19.2", "--binding", "node"), marks=NODE),
    pytest.param(("sweep", "--from", "1.19.2", "--to", "1.19.2", "--binding", "web"), marks=NODE),
], ids=["serving", "one-off", "serving-qemu", "serving-node", "serving-web"])
def test_a_worker_spinning_in_run_dies_with_its_harness_killed_by_sigkill(cache_dir, tmp_path, command):
    model, batch = spin_files(tmp_path)
    argv = [sys.executable, "-m", "harness.cli", command[0], "--model", str(model), "--inputs", str(batch),
            *command[1:], "--cache-dir", str(cache_dir)]
    if command[0] == "sweep":
        argv += ["--results-dir", str(tmp_path / "results")]
    gate = WorkerGate(tmp_path / "gate")
    harness = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **gate.env})
    worker = None
    try:
        worker = gate.next_running(harness)
        with open(f"/proc/{worker}/cmdline", "rb") as f:
            served = b"--serve" in f.read().split(b"\0")
        assert served == (command[0] == "sweep")  # the search serves its probes; a trace's first is a one-off
        if "qemu" in command:
            with open(f"/proc/{worker}/cmdline", "rb") as f:
                assert Path(f.read().split(b"\0")[0].decode()).name == "qemu-aarch64"
            assert int(open(f"/proc/{worker}/stat").read().rsplit(")", 1)[1].split()[1]) == harness.pid
        gate.let_go(worker)
        spinning(worker, harness)
        harness.kill()  # SIGKILL: no handler runs, nothing is ended by the harness itself
        harness.wait(timeout=30)
        deadline = time.monotonic() + 20  # the watchdog looks five times a second; a loaded machine is slower
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(worker), f"worker {worker} outlived its harness killed by SIGKILL"
    finally:
        gate.open()
        harness.kill()
        if worker is not None and alive(worker):
            os.kill(worker, signal.SIGKILL)


def request(tmp_path: Path, name: str, model: Path, batch: Path, deadline_s: float) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"model": str(model), "inputs": str(batch), "outputs": [], "session_options": {},
                                "memory_limit_mb": None, "outputs_path": None, "hold_dir": None,
                                "deadline_s": deadline_s, "result_path": str(tmp_path / f"{name}.result.json")}))
    return path


def test_a_request_past_its_deadline_ends_its_worker_while_the_harness_lives(env, tmp_path):
    """One-off and serving: the worker ends itself (status 6) once its request's deadline passes, with no result;
    a serving worker's deadline is its request's, so one idle past an earlier request's deadline serves the next."""
    runner, environment = env
    argv, child_env = runner.worker_command(environment)
    model, batch = spin_files(tmp_path)
    quick = builders.save(builders.residual_norm_model(), tmp_path / "quick.onnx")
    np.savez(tmp_path / "quick.npz", **builders.residual_norm_inputs())

    t0 = time.monotonic()
    one = subprocess.run([*argv, str(request(tmp_path, "one", model, batch, 3.0))], env=child_env,
                         capture_output=True, text=True, timeout=120)
    assert one.returncode == EXIT_DEADLINE, one.stderr
    assert "ran past its deadline" in one.stderr and time.monotonic() - t0 >= 3.0
    assert not (tmp_path / "one.result.json").exists()

    served = subprocess.Popen([*argv, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=child_env)
    try:
        served.stdin.write(f"{request(tmp_path, 'first', quick, tmp_path / 'quick.npz', 2.0)}\n")
        served.stdin.flush()
        assert served.stdout.readline().strip() == "0"
        time.sleep(3.0)  # idle past the first request's deadline: that deadline is over with its request
        assert served.poll() is None
        served.stdin.write(f"{request(tmp_path, 'spin', model, batch, 3.0)}\n")
        served.stdin.flush()
        assert served.stdout.readline() == ""  # no answer: it ended
        assert served.wait(timeout=60) == EXIT_DEADLINE
        assert "ran past its deadline" in served.stderr.read()
        assert not (tmp_path / "spin.result.json").exists()
    finally:
        served.kill()


def test_every_request_a_worker_gets_carries_its_deadline(env, tmp_path):
    """The harness writes the deadline into the request it hands a worker: its timeout and a grace."""
    from harness.runners.workers import DEADLINE_GRACE_S, run_worker_process

    runner, environment = env
    argv, child_env = runner.worker_command(environment)
    quick = builders.save(builders.residual_norm_model(), tmp_path / "quick.onnx")
    np.savez(tmp_path / "quick.npz", **builders.residual_norm_inputs())
    out = run_worker_process(argv, {"model": str(quick), "inputs": str(tmp_path / "quick.npz"), "outputs": [],
                                    "session_options": {}}, tmp_path / "work", 45.0, env=child_env)
    assert out.returncode == 0, out.stderr_tail
    sent = json.loads((tmp_path / "work" / "request.json").read_text())
    assert sent["deadline_s"] == 45.0 + DEADLINE_GRACE_S


@NODE
@pytest.mark.parametrize("binding", ["node", "web"])
def test_a_javascript_worker_past_its_deadline_ends_while_the_harness_lives(cache_dir, tmp_path, binding):
    """worker.js keeps the same deadline: its watchdog thread ends the process (by SIGKILL: onnxruntime-web holds
    the main thread in run(), where nothing else can end it) with the reason on stderr, and writes no result."""
    from harness.releases.versions import Release, Target
    from harness.releases.packages import Package
    from harness.runners import make_runner

    runner = make_runner("auto", Target(os.uname().machine, "3.11"), cache_dir,
                         package=Package(*{"node": ("onnxruntime-node", "cpu"), "web": ("onnxruntime-web", "wasm")}[binding]))
    environment = runner.prepare(Release("1.19.2", ["onnxruntime-node-1.19.2.tgz" if binding == "node"
                                                     else "onnxruntime-web-1.19.2.tgz"]))
    argv, child_env = runner.worker_command(environment)
    model, batch = spin_files(tmp_path)
    t0 = time.monotonic()
    one = subprocess.run([*argv, str(request(tmp_path, "one", model, batch, 3.0))], env=child_env,
                         capture_output=True, text=True, timeout=120)
    assert one.returncode == -signal.SIGKILL, one.stderr
    assert "ran past its deadline" in one.stderr and time.monotonic() - t0 >= 3.0
    assert not (tmp_path / "one.result.json").exists()
