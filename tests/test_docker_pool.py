"""Probes run on one Docker engine: several machines are a Ray cluster's work (--ray-address, tests/test_ray.py).

The tool's own scheduler over several engines is gone: a second --docker-host is refused in one line, before any
engine is asked anything, and the line says where multi-machine work goes.
"""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("backend", ["docker", "auto"])
def test_a_second_docker_host_is_refused_in_one_line_pointing_to_ray(bisect, tmp_path, backend):
    r = bisect("sweep", "--model", "gemma-tiny-fused", "--from", "1.19.0", "--to", "1.21.1", "--offline",
               "--backend", backend, "--docker-host", "tcp://127.0.0.1:9", "--docker-host", "tcp://127.0.0.1:10=2",
               results=tmp_path / "res")
    assert r.returncode == 2, r.stderr
    line, = r.stderr.strip().splitlines()
    assert "--docker-host tcp://127.0.0.1:10=2" in line and "one Docker engine" in line and "--ray-address" in line
    assert line.endswith("(see docs/guide/cluster.md)"), line
    assert not (tmp_path / "res").exists() or not list((tmp_path / "res").glob("*/probes.jsonl"))
