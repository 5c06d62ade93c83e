"""Fault injection, each for real: the outcome is recorded, no finished probe is lost or
repeated, and the harness ends with one clear line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import builders
import numpy as np
import pytest
from gates import WorkerGate

pytestmark = pytest.mark.release


def harness(*args: str, cache: Path, results: Path) -> list[str]:
    return [sys.executable, "-m", "harness.cli", *args, "--cache-dir", str(cache), "--results-dir", str(results), "--json"]


def probes(results: Path) -> list[dict]:
    (path,) = results.rglob("probes.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def versions(results: Path) -> list[str]:
    return [p["version"] for p in probes(results)]


@pytest.fixture
def fresh_cache(listing, tmp_path) -> Path:
    """An empty environment cache that knows the release listing (no network needed for it)."""
    cache = tmp_path / "cache"
    shutil.copytree(listing, cache / "index")
    return cache


def test_worker_killed_mid_run_is_a_crash_and_the_run_goes_on(cache_dir, tmp_path):
    model = builders.save(builders.spin_model(1_000), tmp_path / "m.onnx")
    np.savez(tmp_path / "m.npz", x=np.zeros(1, np.float32))
    argv = harness("sweep", "--model", str(model), "--inputs", str(tmp_path / "m.npz"), "--from", "1.19.0",
                   "--to", "1.20.0", cache=cache_dir, results=tmp_path / "res")
    gate = WorkerGate(tmp_path / "gate")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **gate.env})
    try:
        victim = gate.next_running(proc)  # held just before run(): it cannot have finished
        os.kill(victim, signal.SIGKILL)
        gate.open()
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 3, stderr  # the model is good everywhere: no boundary
    doc = json.loads(stdout)
    verdicts = {p["version"]: p["verdict"] for p in doc["probes"]}
    assert sorted(verdicts.values()) == ["crash", "good", "good"], verdicts
    crashed = next(p for p in doc["probes"] if p["verdict"] == "crash")
    assert "SIGKILL" in crashed["why"]
    again = subprocess.run(argv, capture_output=True, text=True)
    assert again.returncode == 3
    assert sorted(versions(tmp_path / "res")) == ["1.19.0", "1.19.2", "1.20.0"]  # nothing probed twice


def test_worker_over_its_memory_limit_is_recorded(bisect, tmp_path):
    model = builders.save(builders.big_alloc_model(), tmp_path / "big.onnx")  # wants 4 GiB
    np.savez(tmp_path / "b.npz", x=np.ones(1, np.float32))
    r = bisect("sweep", "--model", str(model), "--inputs", str(tmp_path / "b.npz"), "--from", "1.19.2", "--to", "1.19.2",
               "--memory-limit", "1024", "--json")
    assert r.returncode == 3, r.stderr
    (probe,) = r.json()["probes"]
    assert probe["verdict"] == "error"
    assert "Failed to allocate memory" in probe["why"]


def test_corrupt_environment_is_rebuilt(fresh_cache, residual_norm, tmp_path):
    model, batch = residual_norm
    args = ("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.19.2")
    first = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r1"), capture_output=True, text=True)
    assert first.returncode == 3, first.stderr
    (site,) = fresh_cache.glob("envs/*/onnxruntime-1.19.2/lib/python*/site-packages")
    (site / "onnxruntime" / "__init__.py").unlink()  # a damaged environment
    second = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r2"), capture_output=True, text=True)
    assert second.returncode == 3, second.stderr
    (rec,) = probes(tmp_path / "r2")
    assert rec["status"] == "ran" and "environment rebuilt" in rec["reason"]
    assert (site / "onnxruntime" / "__init__.py").exists()


def _mount(*args: str) -> None:
    r = subprocess.run(["mount", *args], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"mount {' '.join(args)} failed: {r.stderr.strip()}")
        pytest.skip(f"cannot mount here ({r.stderr.strip()})")


def test_read_only_cache_serves_what_it_holds(fresh_cache, residual_norm, tmp_path):
    model, batch = residual_norm
    warm = subprocess.run(harness("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to",
                                  "1.19.2", cache=fresh_cache, results=tmp_path / "r1"), capture_output=True, text=True)
    assert warm.returncode == 3, warm.stderr
    _mount("--bind", str(fresh_cache), str(fresh_cache))
    try:
        _mount("-o", "remount,ro,bind", str(fresh_cache))
        r = subprocess.run(harness("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to",
                                   "1.20.0", cache=fresh_cache, results=tmp_path / "r2"), capture_output=True, text=True)
    finally:
        subprocess.run(["umount", str(fresh_cache)], check=True)
    assert r.returncode == 3, r.stderr  # one good release, one that cannot be installed: no boundary
    got = {p["version"]: (p["verdict"], p["why"]) for p in json.loads(r.stdout)["probes"]}
    assert got["1.19.2"][0] == "good"
    assert got["1.20.0"][0] == "skip" and "Read-only file system" in got["1.20.0"][1]
    assert "Traceback" not in r.stderr


def test_full_results_disk_stops_cleanly_and_loses_nothing(cache_dir, residual_norm, tmp_path):
    model, batch = residual_norm
    results = tmp_path / "res"
    results.mkdir()
    _mount("-t", "tmpfs", "-o", "size=128k", "tmpfs", str(results))
    try:
        filler = results / "filler"
        argv = harness("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.0", "--to", "1.21.1",
                       cache=cache_dir, results=results)
        with open(filler, "wb") as f:  # leave room for the manifest and about two probes
            f.write(b"\0" * (128 - 16) * 1024)
        full = subprocess.run(argv, capture_output=True, text=True)
        assert full.returncode == 1, full.stderr
        lines = full.stderr.strip().splitlines()
        assert "Traceback" not in full.stderr
        assert lines[-1].startswith("error: cannot record the probe of") and "No space left on device" in lines[-1]
        saved = versions(results)
        assert 1 <= len(saved) < 6
        filler.unlink()
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        after = versions(results)
        assert after[: len(saved)] == saved and sorted(after) == sorted(set(after)) and len(after) == 6
    finally:
        subprocess.run(["umount", str(results)], check=True)


def test_two_runs_share_one_cache(fresh_cache, residual_norm, tmp_path):
    model, batch = residual_norm
    other = builders.save(builders.residual_overflow_model(), tmp_path / "overflow.onnx")
    runs = [
        subprocess.Popen(harness("sweep", "--model", str(m), "--inputs", str(batch), "--from", "1.19.0", "--to",
                                 "1.20.0", cache=fresh_cache, results=tmp_path / f"r{i}"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i, m in enumerate((model, other))
    ]
    docs = []
    for proc in runs:
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode in (0, 3), stderr
        docs.append(json.loads(stdout))
    first = {p["version"]: p["verdict"] for p in docs[0]["probes"]}
    second = {p["version"]: p["verdict"] for p in docs[1]["probes"]}
    assert first == {"1.19.0": "good", "1.19.2": "good", "1.20.0": "bad"}
    assert second == {"1.19.0": "good", "1.19.2": "good", "1.20.0": "good"}
    assert len(list(fresh_cache.glob("envs/*/onnxruntime-*/ortbisect-ready.json"))) == 3


def _replace(path: Path, content: bytes) -> None:
    """A new file in place of `path`: uv links an environment's files to its own cache, so writing into one
    would damage every environment of that wheel on this machine."""
    path.unlink()
    path.write_bytes(content)


def _site(cache: Path, version: str) -> Path:
    (site,) = cache.glob(f"envs/*/onnxruntime-{version}/lib/python*/site-packages")
    return site


def test_an_environment_holding_another_release_is_rebuilt_not_judged(fresh_cache, residual_norm, tmp_path):
    """A cached 1.20.0 environment that holds the 1.19.2 package (a cache restored from another machine, a
    hand-made install): the worker's own version is compared with the release asked, the environment rebuilt,
    and 1.20.0 is judged on 1.20.0 (bad), not called good on 1.19.2's behalf."""
    model, batch = residual_norm
    args = ("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0")
    first = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r1"), capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    wrong, right = _site(fresh_cache, "1.20.0"), _site(fresh_cache, "1.19.2")
    shutil.rmtree(wrong)
    shutil.copytree(right, wrong, symlinks=True)  # 1.20.0's environment now holds 1.19.2
    second = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r2"), capture_output=True, text=True)
    assert second.returncode == 0, second.stderr  # the boundary again, not "no boundary" (exit 3)
    rec = next(r for r in probes(tmp_path / "r2") if r["version"] == "1.20.0")
    assert rec["result"]["onnxruntime"]["version"] == "1.20.0"
    assert "environment rebuilt: the environment of 1.20.0 holds onnxruntime 1.19.2" in rec["reason"]


def test_a_damaged_library_that_crashes_the_worker_is_no_verdict(fresh_cache, residual_norm, tmp_path):
    """onnxruntime's compiled module cut short in a cached environment: the worker dies by a signal (or fails
    to import). The installed files are checked against the wheel's RECORD before a crash can be a verdict:
    the environment is rebuilt and the probe runs; with --bad-if crash there is no false boundary."""
    model, batch = residual_norm
    args = ("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.19.2",
            "--bad-if", "crash")
    first = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r1"), capture_output=True, text=True)
    assert first.returncode == 3, first.stderr
    (lib,) = _site(fresh_cache, "1.19.2").glob("onnxruntime/capi/onnxruntime_pybind11_state*.so")
    data = lib.read_bytes()
    _replace(lib, data[: len(data) // 2])
    second = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r2"), capture_output=True, text=True)
    assert second.returncode == 3, second.stderr
    (rec,) = probes(tmp_path / "r2")
    # the worker died by a signal on the cut library; the RECORD check, not the import, caught it
    assert rec["status"] == "ran" and "is damaged: onnxruntime/capi/" in rec["reason"], rec["reason"]
    assert lib.stat().st_size == len(data)


def test_installed_files_are_checked_against_the_wheels_record(fresh_cache, residual_norm, tmp_path):
    from harness.runners.base import installed_files_damaged

    model, batch = residual_norm
    subprocess.run(harness("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.19.2",
                           cache=fresh_cache, results=tmp_path / "r"), capture_output=True, text=True, check=False)
    site = _site(fresh_cache, "1.19.2")
    assert installed_files_damaged(site.parents[2], "onnxruntime") is None
    target = site / "onnxruntime" / "__init__.py"
    _replace(target, target.read_bytes() + b"\n# changed\n")
    said = installed_files_damaged(site.parents[2], "onnxruntime")
    assert said is not None and "onnxruntime/__init__.py" in said
