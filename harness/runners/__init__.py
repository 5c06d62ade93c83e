"""Backends that run the probe worker: pick one by name, use it through `Runner`."""

from __future__ import annotations

from pathlib import Path

from harness.errors import UsageError
from harness.runners.base import Environment, ProcessOutcome, Runner
from harness.versions import Target

BACKENDS = ("uv",)


def make_runner(backend: str, target: Target, cache_dir: Path, cpu: str | None = None) -> Runner:
    if backend == "uv":
        from harness.runners.uv import UvRunner

        return UvRunner(target, cache_dir, cpu)
    raise UsageError(f"--backend {backend}: unknown backend (choose from {', '.join(BACKENDS)})")


__all__ = ["BACKENDS", "Environment", "ProcessOutcome", "Runner", "make_runner"]
