"""Cross-architecture probes: aarch64 under QEMU user mode, against native x86_64."""

from __future__ import annotations

import platform

import pytest


def verdicts(doc: dict) -> dict[str, tuple[str, int]]:
    return {p["version"]: (p["verdict"], p["nan_rows"]) for p in doc["probes"]}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """One results directory for this module's QEMU sweeps and bisection of residual_overflow: the bisection
    reuses the sweep's neoverse-n1 probes of 1.23.2 and 1.24.1 (neoverse-n1 is the default CPU, so the same run)
    and probes the rest of its range itself; alone, it probes everything."""
    return tmp_path_factory.mktemp("emulated")


@pytest.mark.release
@pytest.mark.qemu
@pytest.mark.parametrize("cpu, expected", [
    ("neoverse-n1", {"1.23.2": ("good", 0), "1.24.1": ("bad", 2)}),  # asimdhp: Add runs in fp16 from 1.24.1
    ("cortex-a72", {"1.23.2": ("good", 0), "1.24.1": ("good", 0)}),  # no fp16 arithmetic: fp32 path throughout
])
def test_qemu_cpu_model_decides_the_verdict(bisect, residual_overflow, emulated, cpu, expected):
    model, batch = residual_overflow
    r = bisect("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.23.2", "--to", "1.24.1",
               "--arch", "aarch64", "--backend", "qemu", "--cpu", cpu, "--json", results=emulated)
    assert r.returncode in (0, 3), r.stderr
    doc = r.json()
    assert verdicts(doc) == expected
    prov = doc["provenance"]
    assert (prov["arch"], prov["backend"], prov["cpu"]) == ("aarch64", "qemu", cpu)
    assert int(prov["qemu"].split(".")[0]) >= 10


@pytest.mark.release
@pytest.mark.skipif(platform.machine() != "x86_64", reason="compares with native x86_64")
def test_native_x86_is_finite_on_both(bisect, residual_overflow):
    model, batch = residual_overflow
    r = bisect("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.23.2", "--to", "1.24.1", "--json")
    assert r.returncode == 3, r.stderr
    assert verdicts(r.json()) == {"1.23.2": ("good", 0), "1.24.1": ("good", 0)}


@pytest.mark.release
@pytest.mark.qemu
def test_qemu_run_names_1_24_1(bisect, residual_overflow, emulated):
    model, batch = residual_overflow
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.22.1", "--to", "1.25.1",
               "--arch", "aarch64", "--backend", "qemu", "--json", results=emulated)
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.23.2", "1.24.1")
    assert doc["probe_count"] <= 6  # 10 releases: ceil(log2 10) + 2
    # every probe records what the worker saw of the emulated CPU
    import json
    assert not any(p["reused"] for p in doc["probes"] if p["version"] not in ("1.23.2", "1.24.1"))
    records = [json.loads(x) for x in (emulated / doc["run_id"] / "probes.jsonl").read_text().splitlines()]
    for rec in records:
        cpu = rec["result"]["cpu"]
        assert cpu["machine"] == "aarch64"
        assert "asimdhp" in cpu["flags"]


@pytest.mark.release
@pytest.mark.qemu
def test_qemu_runs_a_release_from_1_28_on(bisect, residual_overflow):
    """QEMU 7.2 crashes importing onnxruntime >= 1.28; the provisioned QEMU 10 runs it."""
    model, batch = residual_overflow
    r = bisect("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.28.0", "--to", "1.28.0",
               "--arch", "aarch64", "--json")  # --backend auto picks qemu for a foreign arch
    assert r.returncode == 3, r.stderr
    doc = r.json()
    assert doc["provenance"]["backend"] == "qemu"
    assert verdicts(doc) == {"1.28.0": ("bad", 2)}


@pytest.mark.release
@pytest.mark.docker
@pytest.mark.parametrize("arch, expected", [
    ("x86_64", {"1.23.2": ("good", 0), "1.24.1": ("good", 0)}),
    ("aarch64", {"1.23.2": ("good", 0), "1.24.1": ("bad", 2)}),  # QEMU_CPU=neoverse-n1 inside the container
])
def test_docker_gives_the_native_and_qemu_verdicts(bisect, residual_overflow, arch, expected):
    from harness.runners.docker.pool import engine_status

    ok, reason = engine_status()
    if not ok:
        print(f"docker backend test skipped: {reason}")
        pytest.skip(f"no docker engine: {reason}")
    model, batch = residual_overflow
    r = bisect("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.23.2", "--to", "1.24.1",
               "--arch", arch, "--backend", "docker", "--json")
    assert r.returncode in (0, 3), r.stderr
    doc = r.json()
    assert verdicts(doc) == expected
    prov = doc["provenance"]
    assert prov["backend"] == "docker" and prov["image"].startswith("sha256:")
