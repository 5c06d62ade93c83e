"""Native backend: one uv virtual environment per (release, python, platform)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from filelock import FileLock

from harness.errors import EnvironmentSkip
from harness.runners.base import WORKER, Environment, ProcessOutcome, Runner, run_worker_process
from harness.versions import Release

READY = "ortbisect-ready.json"


def uv_bin() -> str:
    """The uv that ships with the harness (the `uv` package), else the one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise EnvironmentSkip("uv not found: install it (pip install uv)") from None
        return found


def install_error(proc: subprocess.CompletedProcess) -> str:
    """The line of uv's stderr that says why, for the skip reason."""
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith(("×", "error:", "╰─▶")):
            return ln.lstrip("×╰─▶ ").strip()
    return lines[-1] if lines else f"uv exited with status {proc.returncode}"


class UvRunner(Runner):
    backend = "uv"

    def __init__(self, target, cache_dir, cpu=None, numpy_spec: str = "numpy"):
        super().__init__(target, cache_dir, cpu)
        self.numpy_spec = numpy_spec
        self.uv = uv_bin()

    def env_dir(self, version: str) -> Path:
        return self.cache_dir / "envs" / f"{self.target.arch}-py{self.target.python}" / f"onnxruntime-{version}"

    def prepare(self, release: Release) -> Environment:
        if release.wheel_for(self.target) is None:
            raise EnvironmentSkip(
                f"no onnxruntime {release.version} wheel for {self.target.arch} / Python {self.target.python}"
            )
        path = self.env_dir(release.version)
        t0 = time.perf_counter()
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            marker = path / READY
            if marker.exists():
                return Environment(release.version, path, False, time.perf_counter() - t0, json.loads(marker.read_text()))
            shutil.rmtree(path, ignore_errors=True)  # a half-made env from an interrupted run
            self._uv("venv", "--quiet", "--python", self.target.python, str(path))
            proc = self._uv(
                "pip", "install", "--quiet", "--python", str(path / "bin" / "python"),
                f"onnxruntime=={release.version}", self.numpy_spec, check=False,
            )
            if proc.returncode != 0:
                shutil.rmtree(path, ignore_errors=True)
                raise EnvironmentSkip(f"installing onnxruntime {release.version} failed: {install_error(proc)}")
            info = {"version": release.version, "created_s": time.perf_counter() - t0, "python": self.target.python}
            marker.write_text(json.dumps(info))
        return Environment(release.version, path, True, time.perf_counter() - t0, info)

    def discard(self, env: Environment) -> None:
        with FileLock(str(env.path) + ".lock"):
            (env.path / READY).unlink(missing_ok=True)

    def run(self, env: Environment, request: dict, workdir: Path, timeout: float) -> ProcessOutcome:
        # -I: the worker sees only its release's site-packages, nothing from the harness.
        argv = [str(env.path / "bin" / "python"), "-I", str(WORKER)]
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        return run_worker_process(argv, request, workdir, timeout, env=child_env)

    def _uv(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([self.uv, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if check and proc.returncode != 0:
            raise EnvironmentSkip(f"uv {args[0]} failed: {install_error(proc)}")
        return proc
