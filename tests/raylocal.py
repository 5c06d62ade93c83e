"""Local Ray clusters for the tests, on loopback only: the variables every process runs under, the head as a
user starts it, and ending by PID every process a test started (tests/test_ray.py, tests/test_ray_nodes.py).

Every node is started on 127.0.0.1 (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`: on Linux, Ray would otherwise give
nodes the machine's interface address) with its session files under a scratch RAY_TMPDIR whose path every
process's command line names, so that the processes of a test's clusters, and only those, are found and ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def ray_env(cache_dir):
    """The variables every process of a test cluster and the driver run under; restored afterwards."""
    scratch = tempfile.mkdtemp(prefix="ortray-")  # short: Ray's socket paths live under it
    env = {"RAY_TMPDIR": scratch, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
           "RAY_USAGE_STATS_ENABLED": "0", "ORTBISECT_NODE_CACHE": str(cache_dir)}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        end_processes_under(scratch)
        shutil.rmtree(scratch, ignore_errors=True)


def pids_under(scratch: str) -> list[int]:
    """The processes of the clusters started here: their command lines name this scratch folder."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if scratch.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def end_processes_under(scratch: str) -> None:
    """End, by PID, every process whose command line names `scratch` (SIGTERM, then SIGKILL: Ray's gcs_server and
    monitor may not end on SIGTERM promptly)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids_under(scratch):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + 10
        while pids_under(scratch) and time.time() < deadline:
            time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_addresses(address: str) -> list[str]:
    """Every live node's address, as the cluster's control store has it (asked from a process of its own: Ray's
    client in the test process itself hung connecting under pytest)."""
    ask = ("import json, ray; ray.init(address=%r, logging_level='ERROR', log_to_driver=False); "
           "print(json.dumps([n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']]))" % address)
    proc = subprocess.run([sys.executable, "-c", ask], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def records(results: Path) -> list[dict]:
    (run_dir,) = [p for p in results.iterdir() if (p / "probes.jsonl").exists()]
    return [json.loads(line) for line in (run_dir / "probes.jsonl").read_text().splitlines() if line.strip()]


@contextlib.contextmanager
def started_head(ray_env: dict, cpus: int, labels: str = ""):
    """A head on loopback, started by `ray start` from this environment, as a user would (with `labels`,
    `k=v,...`, else none of ours); its address, then every process under the scratch folder ended by PID."""
    port = free_port()
    ray_bin = Path(sys.executable).parent / "ray"
    log = Path(ray_env["RAY_TMPDIR"]) / "ray-start.log"
    # into a file, not a pipe: the daemons `ray start` leaves behind would hold a pipe open for good
    with log.open("w") as said:
        proc = subprocess.run([str(ray_bin), "start", "--head", "--node-ip-address", "127.0.0.1", "--port",
                               str(port), "--num-cpus", str(cpus), "--include-dashboard=false",
                               "--disable-usage-stats", *(["--labels", labels] if labels else [])],
                              stdout=said, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=180)
    try:
        assert proc.returncode == 0, log.read_text()[-2000:]
        yield f"127.0.0.1:{port}"
    finally:
        end_processes_under(ray_env["RAY_TMPDIR"])


@contextlib.contextmanager
def joined_node(argv: list[str], what: str, wait_s: float, **popen):
    """A node run by tests/raynode.py (`argv` starts it), joined to a head: what it said when it started ({"node_id",
    "seconds"}); at the end its input is closed, and it is given `wait_s` to end its processes before it is killed."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, **popen)
    try:
        said = json.loads(proc.stdout.readline() or "null")
        assert said, f"the {what} did not start"
        yield said
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
