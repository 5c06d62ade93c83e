"""Probes on a pool of Docker engines: the local engine and a second one standing for a remote machine.

The second engine is started on this machine by .ci/docker-engine.sh (its own data root and socket, state under
ORTBISECT_TEST_CACHE so its images and volumes outlive the run) and stopped by the PID the script records, if this
module started it. The harness reaches both only by address: nothing of the client may be mounted, which the
engines' own inspection of every container they make shows.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest
from engines import (
    ContainerWatch,
    root_and_dockerd,
    start_engine,
    stop_engine,
    unique_label,
)

pytestmark = [pytest.mark.docker, pytest.mark.release]

RANGE = ("--from", "1.23.1", "--to", "1.24.1")  # three releases


@pytest.fixture(scope="module")
def engines(cache_dir):
    """(first, second): the addresses of the engine of DOCKER_HOST and of a second engine started here."""
    from harness.runners.docker.pool import engine_status

    ok, reason = engine_status()
    if not ok:
        pytest.skip(f"no docker engine: {reason}")
    why = root_and_dockerd()
    if why:
        pytest.skip(f"no second engine: {why}")
    state = cache_dir / "dockerd-2"
    pid = state / "dockerd.pid"
    running_before = pid.exists() and Path(f"/proc/{pid.read_text().strip()}").exists()
    second = start_engine(state, "second")
    yield os.environ["DOCKER_HOST"], second, state
    if not running_before:
        stop_engine(state)


def records(results: Path, doc: dict) -> list[dict]:
    return [json.loads(x) for x in (results / doc["run_id"] / "probes.jsonl").read_text().splitlines()]


def test_a_sweep_across_two_engines_probes_on_both_and_mounts_nothing(bisect, residual_overflow, engines, tmp_path):
    first, second, _ = engines
    model, batch = residual_overflow
    run, label = unique_label("sweep")
    watches = [ContainerWatch(first, label), ContainerWatch(second, label)]
    try:
        r = bisect("sweep", "--model", str(model), "--inputs", str(batch), *RANGE, "--arch", "x86_64",
                   "--backend", "docker", "--docker-host", f"{first}=1", "--docker-host", f"{second}=1", "-j", "2",
                   "--json", results=tmp_path / "res", env={"ORTBISECT_RUN_LABEL": run})
    finally:
        for w in watches:
            w.stop()
    assert r.returncode in (0, 3), r.stderr
    doc = r.json()
    assert {p["version"]: p["verdict"] for p in doc["probes"]} == {"1.23.1": "good", "1.23.2": "good", "1.24.1": "good"}
    recs = records(tmp_path / "res", doc)
    used = {rec["provenance"]["engine"]["name"] for rec in recs}
    assert used == {first, second}, used
    for rec in recs:
        engine = rec["provenance"]["engine"]
        assert engine["arch"] == "x86_64" and engine["docker"] and engine["id"]
        assert "sse2" in engine["cpu_flags"].split()
    made = [w.inspected for w in watches]
    probes = [[a for a in m.values() if a["Config"]["Labels"].get("org.ortbisect.role") == "probe"] for m in made]
    assert all(probes), "each engine ran a probe container of this sweep"
    assert {a["Config"]["Labels"]["org.ortbisect.release"] for p in probes for a in p} == {"1.23.1", "1.23.2",
                                                                                            "1.24.1"}
    assert watches[0].bind_mounts() + watches[1].bind_mounts() == []


def test_an_engine_that_stops_mid_sweep_skips_its_probe_and_the_sweep_goes_on(bisect, residual_overflow, engines,
                                                                            tmp_path):
    import docker

    first, second, state = engines
    model, batch = residual_overflow
    run, label = unique_label("drop")
    stopped = threading.Event()

    def stop_when_a_probe_runs_there():
        client = docker.DockerClient(base_url=second, timeout=10)
        deadline = time.monotonic() + 600
        try:
            while time.monotonic() < deadline:
                if client.containers.list(filters={"label": ["org.ortbisect.role=probe", label],
                                                   "status": "running"}):
                    stop_engine(state)
                    stopped.set()
                    return
                time.sleep(0.05)
        except Exception:
            return
    watcher = threading.Thread(target=stop_when_a_probe_runs_there, daemon=True)
    watcher.start()
    try:
        # --repeat 3: each probe runs three containers in turn, so the engine stops while one of them runs
        r = bisect("sweep", "--model", str(model), "--inputs", str(batch), *RANGE, "--arch", "x86_64",
                   "--backend", "docker", "--docker-host", f"{first}=1", "--docker-host", f"{second}=1", "-j", "2",
                   "--repeat", "3", "--json", results=tmp_path / "res", env={"ORTBISECT_RUN_LABEL": run})
        watcher.join(timeout=60)
        assert stopped.is_set(), "no probe ran on the second engine"
        assert r.returncode in (0, 3), r.stderr
        doc = r.json()
        verdicts = {p["version"]: p["verdict"] for p in doc["probes"]}
        assert sorted(verdicts) == ["1.23.1", "1.23.2", "1.24.1"]  # the sweep completed
        recs = records(tmp_path / "res", doc)
        skipped = [rec for rec in recs if rec["status"] == "skip"]
        assert len(skipped) == 1 and f"docker engine {second} dropped out" in skipped[0]["reason"], recs
        assert [v for v in verdicts.values() if v != "skip"] == ["good", "good"]
        assert {rec["provenance"]["engine"]["name"] for rec in recs if rec["status"] == "ran"} == {first}
    finally:
        start_engine(state, "second")  # as it was for whatever comes next; the fixture stops it
