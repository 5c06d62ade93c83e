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
def listing(cache_dir) -> Path:
    """The cache's release listing directory, fetched once if this cache has none yet."""
    from harness.request import release_listing

    release_listing(cache_dir)
    return cache_dir / "index"


@pytest.fixture
def bisect(cache_dir, tmp_path):
    """Run `bisect ...` as a user would, in a fresh results directory."""

    def run(*args: str, results: Path | None = None, timeout: float = 900, env: dict | None = None) -> Result:
        argv = [sys.executable, "-m", "harness.cli", *args]
        if args and args[0] in ("run", "sweep", "versions"):
            argv += ["--cache-dir", str(cache_dir)]
        if args and args[0] in ("run", "sweep"):
            argv += ["--results-dir", str(results or tmp_path / "results")]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "COLUMNS": "200", **(env or {})})
        return Result(proc.returncode, proc.stdout, proc.stderr)

    run.cache_dir = cache_dir
    return run


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


def pytest_collection_modifyitems(config, items):
    """Files with emulated, then real-release tests first, the quick ones after: with test files spread over
    processes (pytest-xdist, one file per process at a time) the long files start at once and the short ones
    fill the gaps, instead of one long file starting last."""
    def weight(item) -> int:
        slow_first = item.get_closest_marker("qemu") or item.get_closest_marker("docker")
        return 0 if slow_first else 1 if item.get_closest_marker("release") else 2

    first: dict[str, int] = {}
    for item in items:
        first[item.nodeid.split("::")[0]] = min(first.get(item.nodeid.split("::")[0], 2), weight(item))
    items.sort(key=lambda item: first[item.nodeid.split("::")[0]])  # stable: each file keeps its own order
