"""--ray-address without a cluster: the flag on every command that probes a range, the line that says how to get
the extra, and the node a record names read as evidence (tests/test_ray.py runs the real clusters)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from harness.cli import cli
from harness.results.evidence import EvidenceError, ProbeRecord

COMMANDS = (["run"], ["sweep"], ["compare"], ["reduce"], ["blame"], ["matrix", "run"])


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_that_fans_out_takes_ray_address(command):
    res = CliRunner().invoke(cli, [*command, "--help"])
    assert res.exit_code == 0 and "--ray-address" in res.output and "RAY_ADDRESS" in res.output


def test_without_the_extra_ray_address_says_how_to_get_it_in_one_line(cache_dir, tmp_path):
    """The process runs as if Ray were not installed (its import fails), whether or not it is here."""
    started = ("import sys; sys.modules['ray'] = None; from harness.cli import main; sys.exit(main())")
    proc = subprocess.run([sys.executable, "-c", started, "sweep", "--model", "gemma-tiny-fused", "--from", "1.19.0",
                           "--to", "1.21.1", "--offline", "--cache-dir", str(cache_dir), "--results-dir",
                           str(tmp_path / "results"), "--ray-address", "127.0.0.1:1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line, = proc.stderr.strip().splitlines()
    assert "Ray is not installed" in line and "uv sync --extra ray" in line
    assert not list((tmp_path / "results").glob("*/probes.jsonl"))


def test_the_node_a_record_names_is_read_as_evidence():
    ran = {"version": "1.20.0", "status": "skip", "reason": "r",
           "provenance": {"arch": "x86_64", "backend": "uv", "cpu": None, "python": "3.11",
                          "node": {"id": "ab12", "hostname": "h", "arch": "x86_64", "cpu_model": "m",
                                   "cpu_flags": "sse avx"}}}
    assert ProbeRecord.parse(ran).raw["provenance"]["node"]["id"] == "ab12"
    for bad in ({"id": 7}, {"cpu_flags": ["avx"]}, {"hostname": None}):
        hostile = {**ran, "provenance": {**ran["provenance"], "node": {**ran["provenance"]["node"], **bad}}}
        with pytest.raises(EvidenceError):
            ProbeRecord.parse(hostile)
    with pytest.raises(EvidenceError):
        ProbeRecord.parse({**ran, "provenance": {**ran["provenance"], "node": "somewhere"}})


@pytest.mark.release
@pytest.mark.parametrize("command", ["reduce", "blame"])
def test_reduce_and_blame_hand_ray_address_on(command, cache_dir, tmp_path, residual_norm):
    """`reduce` and `blame` took --ray-address and dropped it (the call that passed it sat after a return): they
    probed here. With Ray absent, the flag is refused in one line before any probe, as `run` refuses it."""
    model, batch = residual_norm
    results = tmp_path / "results"
    argv = [sys.executable, "-m", "harness.cli", "run", "--model", str(model), "--inputs", str(batch), "--from",
            "1.19.2", "--to", "1.20.0", "--cache-dir", str(cache_dir), "--results-dir", str(results), "--json"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    run_dir = results / __import__("json").loads(run.stdout)["run_id"]
    started = "import sys; sys.modules['ray'] = None; from harness.cli import main; sys.exit(main())"
    proc = subprocess.run([sys.executable, "-c", started, command, str(run_dir), "--cache-dir", str(cache_dir),
                           "--ray-address", "127.0.0.1:1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    line, = proc.stderr.strip().splitlines()
    assert "Ray is not installed" in line
    assert not (run_dir / ("reduced" if command == "reduce" else "blame") / "probes.jsonl").exists()
