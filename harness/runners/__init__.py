"""Backends that run the probe worker: pick one by name, use it through `Runner`."""

from __future__ import annotations

import platform
from pathlib import Path

from harness.errors import UsageError
from harness.runners.base import Environment, ProcessOutcome, Runner
from harness.runners.provision import Log, quiet
from harness.versions import Target

BACKENDS = ("auto", "uv", "qemu", "docker")


def native_arch() -> str:
    return platform.machine()


def choose_backend(arch: str) -> str:
    """`auto`: native probes run in uv environments, foreign ones under QEMU."""
    return "uv" if arch == native_arch() else "qemu"


def make_runner(backend: str, target: Target, cache_dir: Path, cpu: str | None = None) -> Runner:
    if backend == "auto":
        backend = choose_backend(target.arch)
    if backend == "uv":
        from harness.runners.uv import UvRunner

        if target.arch != native_arch():
            raise UsageError(f"--backend uv runs {native_arch()} probes only; for {target.arch} use --backend qemu")
        if cpu:
            raise UsageError("--cpu chooses an emulated CPU: use it with --backend qemu")
        return UvRunner(target, cache_dir, cpu)
    if backend == "qemu":
        from harness.runners.qemu import QemuRunner

        return QemuRunner(target, cache_dir, cpu)
    if backend == "docker":
        from harness.runners.docker import DockerRunner

        return DockerRunner(target, cache_dir, cpu)
    raise UsageError(f"--backend {backend}: unknown backend (choose from {', '.join(BACKENDS)})")


__all__ = ["BACKENDS", "Environment", "Log", "ProcessOutcome", "Runner", "make_runner", "quiet"]
