"""Native backend: one uv virtual environment per (release, python, platform)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from harness.errors import EnvironmentSkip
from harness.runners.base import WORKER, Environment, ProcessOutcome, Runner, forget_build, locked_build, run_worker_process
from harness.versions import Release

NUMPY = "numpy"


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


def uv(*args: str, what: str) -> subprocess.CompletedProcess:
    """Run uv; a failure becomes a skip whose reason is uv's own explanation.

    Installs pass --no-compile-bytecode: a project's `compile-bytecode` setting
    (this one's included) would otherwise compile ~2,500 files into every
    release environment, 10 s instead of 1 s; the worker writes the few .pyc
    files it needs on its first run.
    """
    proc = subprocess.run([uv_bin(), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise EnvironmentSkip(f"{what} failed: {install_error(proc)}")
    return proc


def install_error(proc: subprocess.CompletedProcess) -> str:
    """The line of uv's stderr that says why, for the skip reason."""
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith(("×", "error:", "╰─▶")):
            return ln.lstrip("×╰─▶ ").strip()
    return lines[-1] if lines else f"uv exited with status {proc.returncode}"


def require_wheel(release: Release, target) -> None:
    if release.wheel_for(target) is None:
        raise EnvironmentSkip(f"no onnxruntime {release.version} wheel for {target.arch} / Python {target.python}")


class UvRunner(Runner):
    backend = "uv"

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
