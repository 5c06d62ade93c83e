"""Shared fixtures: a cache that outlives the test run, and the CLI run as a real subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import builders  # noqa: E402

# Environments and the release listing are kept between test runs (and CI runs on the
# same machine), like a user's cache: the slow part of a real-release test is paid once.
TEST_CACHE = Path(os.environ.get("ORTBISECT_TEST_CACHE", Path.home() / ".cache" / "ortbisect-tests"))


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> dict:
        return json.loads(self.stdout)


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    TEST_CACHE.mkdir(parents=True, exist_ok=True)
    return TEST_CACHE


@pytest.fixture(scope="session")
def fresh_python(cache_dir):
    """`fresh_python(version)`: the python of a uv environment holding only onnxruntime==version and numpy, where
    the repro scripts run as a user's would; made once per cache (under a lock) and shared by every test file."""
    return lambda version: builders.fresh_env(cache_dir / "fresh-envs", version)


@pytest.fixture(scope="session")
def env(cache_dir):
    """(runner, environment) of onnxruntime 1.19.2 on this machine's arch: the worker tests' release."""
    import platform

    from harness.releases.versions import Release, Target
    from harness.runners.uv import UvRunner

    runner = UvRunner(Target(platform.machine(), "3.11"), cache_dir)
    version = "1.19.2"
    release = Release(version, [f"onnxruntime-{version}-cp311-cp311-manylinux_2_27_{platform.machine()}.whl"])
    return runner, runner.prepare(release)


@pytest.fixture
def offline_cli(monkeypatch):
    """`bisect ...` run in this process with nothing provisioned and no release listing fetched (a fetch fails the
    test): for requests refused, or let through, before any of that."""
    import inproc

    from harness.releases.npm import NpmIndex
    from harness.releases.versions import ReleaseIndex

    def fetch(self):
        raise AssertionError("a release listing was fetched")
    monkeypatch.setattr(ReleaseIndex, "_fetch", fetch)
    monkeypatch.setattr(NpmIndex, "_fetch", fetch)
    with inproc.nothing_provisioned(monkeypatch):
        yield inproc.run


@pytest.fixture(scope="session")
def listing(cache_dir) -> Path:
    """The cache's release listing directory, fetched once if this cache has none yet."""
    from harness.request import release_listing

    release_listing(cache_dir)
    return cache_dir / "index"


def cli(cache_dir: Path, results_dir: Path):
    """`bisect ...` as a user would run it: run and sweep write into `results_dir` unless told another."""

    def run(*args: str, results: Path | None = None, timeout: float = 900, env: dict | None = None,
            cwd: Path | None = None) -> Result:
        argv = [sys.executable, "-m", "harness.cli", *args]
        if args and args[0] in ("run", "sweep", "versions"):
            argv += ["--cache-dir", str(cache_dir)]
        if args and args[0] in ("run", "sweep"):
            argv += ["--results-dir", str(results or results_dir)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                              env={**os.environ, "COLUMNS": "200", **(env or {})})
        return Result(proc.returncode, proc.stdout, proc.stderr)

    run.cache_dir = cache_dir
    run.results_dir = results_dir
    return run


@pytest.fixture
def bisect(cache_dir, tmp_path):
    """Run `bisect ...` as a user would, in a fresh results directory."""
    return cli(cache_dir, tmp_path / "results")


@pytest.fixture(scope="module")
def module_bisect(cache_dir, tmp_path_factory):
    """`bisect` with one results directory for a whole test file: for a run its tests read in turn."""
    return cli(cache_dir, tmp_path_factory.mktemp("results"))


@pytest.fixture(scope="session")
def residual_norm(tmp_path_factory) -> tuple[Path, Path]:
    """The SimplifiedLayerNormalization model (finite on 1.19.x, NaN from 1.20.0) and its batch."""
    d = tmp_path_factory.mktemp("residual_norm")
    model = builders.save(builders.residual_norm_model(), d / "residual_norm.onnx")
    np.savez(d / "batch.npz", **builders.residual_norm_inputs())
    return model, d / "batch.npz"


@pytest.fixture(scope="session")
def residual_overflow(tmp_path_factory) -> tuple[Path, Path]:
    """The fp16 residual-Add overflow model (NaN from 1.24.1 on aarch64 with asimdhp) and its batch."""
    d = tmp_path_factory.mktemp("residual_overflow")
    model = builders.save(builders.residual_overflow_model(), d / "residual_overflow.onnx")
    np.savez(d / "batch.npz", **builders.residual_norm_inputs())
    return model, d / "batch.npz"


# Test files by their measured share of the suite (`--durations`, seconds of one full run), longest first.
# With files spread over processes (pytest-xdist, one file per process at a time) the long files must start
# at once and the short ones fill the gaps; a long file handed out last is the suite's tail.
LONGEST_FIRST = ["test_conformance.py", "test_reduce.py", "test_upstream.py", "test_docker_pool.py", "test_gemma300m.py",
                 "test_matrix.py",
                 "test_run.py", "test_embedded_real.py", "test_runners_real.py", "test_fewrows.py", "test_workflow.py",
                 "test_packages_real.py", "test_verdicts_real.py",
                 "test_explain.py", "test_hub.py", "test_triage.py", "test_dashboard.py", "test_trace.py",
                 "test_robustness.py", "test_docker_engine.py"]


def pytest_collection_modifyitems(config, items):
    """Measured long files first, then files with emulated, container or real-release tests, the quick ones last.

    (pyproject's `--no-loadscope-reorder` keeps this order: xdist would otherwise hand out the files with the
    most tests first, whatever their length.)"""
    def weight(item) -> tuple[int, int]:
        name = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
        if name in LONGEST_FIRST:
            return 0, LONGEST_FIRST.index(name)
        slow = item.get_closest_marker("qemu") or item.get_closest_marker("docker")
        return (1 if slow else 2 if item.get_closest_marker("release") else 3), 0

    first: dict[str, tuple[int, int]] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        first[path] = min(first.get(path, (9, 0)), weight(item))
    items.sort(key=lambda item: first[item.nodeid.split("::")[0]])  # stable: each file keeps its own order
