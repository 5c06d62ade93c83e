"""Probes as Ray tasks (--ray-address) on real local clusters, on loopback only.

Every node is started by these tests on 127.0.0.1 (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`: on Linux, Ray would
otherwise give nodes the machine's interface address) with its session files under a scratch RAY_TMPDIR, and
is stopped by PID (or by Ray's cluster utilities' own shutdown) even when a test fails. The nodes probe with
the test cache's environments (ORTBISECT_NODE_CACHE).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed here (the extra: uv sync --extra ray)")

import raylocal  # noqa: E402
from raylocal import ray_env  # noqa: E402, F401  (a fixture)

pytestmark = pytest.mark.release

SWEPT = ["1.19.0", "1.19.2", "1.20.0", "1.20.1", "1.21.0", "1.21.1"]  # 1.19.0..1.21.1 with wheels for py3.11


@pytest.fixture(scope="module")
def head(ray_env):
    """One head on loopback (two CPUs), started by `ray start`, as a user would; stopped by PID."""
    with raylocal.started_head(ray_env, cpus=2) as address:
        yield address


class LocalCluster:
    """tests/raycluster.py's cluster: a head and named worker nodes on 127.0.0.1; `kill(name)` ends a node."""

    def __init__(self, head_cpus: int, *workers: str):
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "raycluster.py"), str(head_cpus),
                                      *workers], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        said = json.loads(self.proc.stdout.readline() or "null")
        assert said, "the cluster did not start"
        self.address, self.nodes, self.addresses = said["address"], said["nodes"], said["addresses"]

    def kill(self, name: str) -> None:
        self.proc.stdin.write(f"kill {name}\n")
        self.proc.stdin.flush()
        assert json.loads(self.proc.stdout.readline()) == {"killed": name}

    def shutdown(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def cluster(ray_env, head):
    """A head and two worker nodes from Ray's cluster utilities, all on 127.0.0.1: the head (one CPU, no label
    of ours: asked what it is), a worker labelled x86_64 and a worker labelled aarch64 (which no x86_64 probe
    may reach). After the `ray start` head's tests: one cluster at a time on two cores."""
    raylocal.end_processes_under(ray_env["RAY_TMPDIR"])  # the `ray start` head is done with
    c = LocalCluster(1, "x86=1:x86_64", "arm=1:aarch64")
    try:
        yield c
    finally:
        c.shutdown()


def test_a_sweep_on_a_head_without_labels_lands_every_release_once(bisect, head):
    assert set(raylocal.node_addresses(head)) == {"127.0.0.1"}
    res = bisect("sweep", "--model", "gemma-tiny-fused", "--from", "1.19.0", "--to", "1.21.1", "--offline",
                 "--ray-address", head, "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    recs = raylocal.records(bisect.results_dir)
    assert sorted(r["version"] for r in recs) == SWEPT  # each release once
    assert all(r["status"] == "ran" for r in recs), [(r["version"], r.get("reason")) for r in recs]
    nodes = {r["provenance"]["node"]["id"] for r in recs}
    assert len(nodes) == 1
    node = recs[0]["provenance"]["node"]
    assert node["arch"] == "x86_64" and node["hostname"] == socket.gethostname() and node["cpu_flags"]
    doc = res.json()
    assert doc["first_bad"] == "1.20.0" and doc["last_good"] == "1.19.2"


def test_a_bisection_on_the_cluster_finds_the_local_boundary(bisect, head):
    res = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.0", "--to", "1.30.0", "--offline",
                 "--ray-address", head, "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    doc = res.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0")
    assert all("node" in r["provenance"] for r in raylocal.records(bisect.results_dir))


@pytest.mark.parametrize("backend", ["auto", "qemu"])
def test_a_target_no_node_runs_is_refused_in_one_line_before_any_probe(bisect, head, backend):
    """An x86_64 head without labels: aarch64 probes run natively on no node, nor emulated where --backend qemu
    asks (a node serves a foreign arch only when labelled with it)."""
    res = bisect("sweep", "--model", "gemma-tiny-fused", "--from", "1.19.0", "--to", "1.21.1", "--offline",
                 "--ray-address", head, "--arch", "aarch64", "--backend", backend)
    assert res.returncode == 2, res.stderr[-3000:]
    line, = res.stderr.strip().splitlines()
    how = "natively" if backend == "auto" else "under emulation"
    assert f"no node of the cluster runs aarch64 probes {how}" in line and "ortbisect/arch=aarch64" in line
    assert ("--backend qemu" in line) == (backend == "auto")  # the way to emulate, where it was not asked
    assert not bisect.results_dir.exists() or not list(bisect.results_dir.glob("*/probes.jsonl"))


@contextlib.contextmanager
def _sweeping(bisect, address: str, *args: str):
    """The sweep of SWEPT on the cluster at `address` in a process of its own, handed over once its first record
    is on disk (its tasks are running); ended whatever the test does with it."""
    results = bisect.results_dir
    argv = [sys.executable, "-m", "harness.cli", "sweep", "--model", "gemma-tiny-fused", "--from", "1.19.0",
            "--to", "1.21.1", "--offline", "--ray-address", address, *args, "--cache-dir", str(bisect.cache_dir),
            "--results-dir", str(results)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            if any(results.glob("*/probes.jsonl")) and raylocal.records(results):
                break
            time.sleep(0.1)
        assert proc.poll() is None, "the sweep ended before its first record could be acted on"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_ctrl_c_cancels_the_tasks_in_flight_and_keeps_what_finished(bisect, head):
    results = bisect.results_dir
    with _sweeping(bisect, head) as proc:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    recs = raylocal.records(results)
    kept = [r["version"] for r in recs]
    assert 1 <= len(kept) < len(SWEPT) and len(set(kept)) == len(kept)
    assert all(r["status"] == "ran" for r in recs)  # a cancelled task is never a record
    assert f"{len(kept)} finished probes are saved" in err


def test_a_sweep_over_labelled_nodes_goes_only_to_nodes_of_its_arch(bisect, cluster):
    assert set(cluster.addresses) == {"127.0.0.1"} and len(cluster.addresses) == 3
    res = bisect("sweep", "--model", "gemma-tiny-fused", "--from", "1.19.0", "--to", "1.21.1", "--offline",
                 "--ray-address", cluster.address, "-j", "2", "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    recs = raylocal.records(bisect.results_dir)
    assert sorted(r["version"] for r in recs) == SWEPT
    assert all(r["status"] == "ran" for r in recs), [(r["version"], r.get("reason")) for r in recs]
    ran_on = {r["provenance"]["node"]["id"] for r in recs}
    assert cluster.nodes["arm"] not in ran_on  # the aarch64-labelled node takes no x86_64 probe
    assert ran_on <= {cluster.nodes["head"], cluster.nodes["x86"]}


@pytest.mark.qemu
def test_an_aarch64_sweep_runs_under_qemu_on_the_node_labelled_aarch64(bisect, cluster):
    """--backend qemu asks for emulation: the aarch64 probes go to the node labelled aarch64 (an x86_64 machine),
    which runs them with its own QEMU runner and cache."""
    res = bisect("sweep", "--model", "gemma-tiny-fused", "--from", "1.23.2", "--to", "1.24.1", "--offline",
                 "--arch", "aarch64", "--backend", "qemu", "--ray-address", cluster.address, "-j", "2", "--json")
    assert res.returncode in (0, 3), res.stderr[-3000:]
    recs = raylocal.records(bisect.results_dir)
    assert sorted(r["version"] for r in recs) == ["1.23.2", "1.24.1"]
    assert all(r["status"] == "ran" for r in recs), [(r["version"], r.get("reason")) for r in recs]
    assert {r["provenance"]["node"]["id"] for r in recs} == {cluster.nodes["arm"]}
    assert all(r["provenance"]["backend"] == "qemu" and r["provenance"]["arch"] == "aarch64"
               and r["provenance"]["node"]["arch"] == "x86_64" for r in recs)


def test_a_worker_killed_mid_sweep_loses_no_release(bisect, cluster, ray_env):
    """The labelled x86_64 worker is killed while the sweep's tasks run: Ray retries its task on the head,
    and every release lands once, as a probe that ran."""
    results = bisect.results_dir
    # the first record is on disk: the sweep's tasks are running on both nodes
    with _sweeping(bisect, cluster.address, "-j", "2", "--json") as proc:
        cluster.kill("x86")
        out, err = proc.communicate(timeout=600)
    print(err)
    assert proc.returncode == 0, err[-3000:]
    recs = raylocal.records(results)
    assert sorted(r["version"] for r in recs) == SWEPT  # none lost, none twice
    assert all(r["status"] == "ran" for r in recs), [(r["version"], r.get("reason")) for r in recs]
    assert out.strip(), err[-3000:]
    doc = json.loads(out)
    assert doc["first_bad"] == "1.20.0"
