"""Native backend: one uv virtual environment per (release, python, platform)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from harness.errors import EnvironmentSkip
from harness.runners.base import (
    WORKER, Check, Environment, ProcessOutcome, Runner, forget_build, locked_build, native_arch, run_worker_process,
)
from harness.uvtool import uv, uv_bin
from harness.versions import Release

NUMPY = "numpy"


def require_wheel(release: Release, target) -> None:
    if release.wheel_for(target) is None:
        raise EnvironmentSkip(f"no onnxruntime {release.version} wheel for {target.arch} / Python {target.python}")


class UvRunner(Runner):
    backend = "uv"
    auto = True

    @classmethod
    def archs(cls) -> tuple[str, ...]:
        return (native_arch(),)

    @classmethod
    def doctor(cls, cache_dir: Path) -> list[Check]:
        try:
            version = subprocess.run([uv_bin(), "--version"], capture_output=True, text=True).stdout.strip()
        except Exception as exc:  # any failure here is what the row reports
            return [Check("uv (backend uv)", False, str(exc), "pip install uv")]
        return [Check("uv (backend uv)", True, version)]

    @classmethod
    def describe(cls, provenance: dict, seen_cpu: str | None, version: str, script: str) -> dict:
        return {"how": "native (uv environment)", "cpu_model": seen_cpu or "?", "reproduce": None}

    def env_dir(self, version: str) -> Path:
        return self.cache_dir / "envs" / f"{self.target.arch}-py{self.target.python}" / f"onnxruntime-{version}"

    def prepare(self, release: Release) -> Environment:
        require_wheel(release, self.target)

        def build(path: Path) -> dict:
            uv("venv", "--quiet", "--python", self.target.python, str(path), what="uv venv")
            uv("pip", "install", "--quiet", "--no-compile-bytecode", "--python", str(path / "bin" / "python"),
               f"onnxruntime=={release.version}", NUMPY, what=f"installing onnxruntime {release.version}")
            return {"python": self.target.python}

        return locked_build(self.env_dir(release.version), release.version, build)

    def discard(self, env: Environment) -> None:
        forget_build(env.path)

    def run(self, env: Environment, request: dict, workdir: Path, timeout: float) -> ProcessOutcome:
        # -I: the worker sees only its release's site-packages, nothing from the harness.
        argv = [str(env.path / "bin" / "python"), "-I", str(WORKER)]
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        return run_worker_process(argv, request, workdir, timeout, env=child_env)
