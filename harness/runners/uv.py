"""Native backend: one uv virtual environment per (release, python, platform)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from harness.errors import EnvironmentSkip
from harness.releases.uvtool import uv, uv_bin
from harness.releases.versions import Release
from harness.results.store import write_atomic
from harness.runners.base import (
    WORKER,
    Check,
    Environment,
    Runner,
    forget_build,
    locked_build,
    native_arch,
)

BUILD_INFO = "ortbisect-build-info.json"  # get_build_info() of an environment's build, read once


def require_wheel(release: Release, target, package: str = "onnxruntime") -> None:
    if release.wheel_for(target) is None:
        raise EnvironmentSkip(f"no {package} {release.version} wheel for {target.arch} / Python {target.python}")


class UvRunner(Runner):
    backend = "uv"
    auto = True

    @classmethod
    def archs(cls, host: str | None = None) -> tuple[str, ...]:
        return (host or native_arch(),)  # the machine's own: nothing is emulated

    @classmethod
    def doctor(cls, cache_dir: Path, engines: tuple[str, ...] = ()) -> list[Check]:
        try:
            version = subprocess.run([uv_bin(), "--version"], capture_output=True, text=True).stdout.strip()
        except Exception as exc:  # any failure here is what the row reports
            return [Check("uv (backend uv)", False, str(exc), "pip install uv")]
        return [Check("uv (backend uv)", True, version)]

    @classmethod
    def describe(cls, provenance: dict, seen_cpu: str | None, version: str, script: str) -> dict:
        return {"how": "native (uv environment)", "cpu_model": seen_cpu or "?", "reproduce": None}

    def env_dir(self, version: str) -> Path:
        return self.cache_dir / "envs" / f"{self.target.arch}-py{self.target.python}" / self.package.env_name(version)

    def prepare(self, release: Release) -> Environment:
        pkg = self.package
        require_wheel(release, self.target, pkg.name)

        def build(path: Path) -> dict:
            uv("venv", "--quiet", "--python", self.target.python, str(path), what="uv venv")
            uv("pip", "install", "--quiet", "--no-compile-bytecode", "--python", str(path / "bin" / "python"),
               *pkg.install_args(release.version),
               what=f"installing {pkg.name} {release.version}", env=pkg.uv_args()[1])
            return {"python": self.target.python, "package": pkg.name}

        return locked_build(self.env_dir(release.version), release.version, build, self.cache_dir)

    def discard(self, env: Environment) -> None:
        forget_build(env.path)

    def build_info(self, release: Release, install: bool = False) -> str | None:
        path = self.env_dir(release.version)
        try:
            return json.loads((path / BUILD_INFO).read_text())["build_info"]
        except (OSError, ValueError, KeyError):
            pass
        if not install:
            return None
        env = self.prepare(release)
        if self.verify(env):
            return None  # never read from an environment that is not the release's
        argv, child_env = self.python_command(env)
        proc = subprocess.run([*argv, "-c", "import onnxruntime as o; print(getattr(o, 'get_build_info', lambda: '')())"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300, env=child_env)
        if proc.returncode != 0:
            return None
        info = proc.stdout.strip()
        self.note_build_info(env, info)
        return info

    def note_build_info(self, env: Environment, info: str) -> None:
        try:
            write_atomic(env.path / BUILD_INFO, json.dumps({"build_info": info}))
        except OSError:
            pass  # a read-only cache: read again next time

    def site_packages(self, env: Environment) -> Path:
        return env.path / "lib" / f"python{self.target.python}" / "site-packages"

    def python_command(self, env: Environment) -> tuple[list[str], dict]:
        """The environment's interpreter as the worker runs it, and its process environment: it sees only the
        release's verified site-packages. -S: no `site` module, so no `.pth` file runs; -s, PYTHONSAFEPATH:
        neither the user's site nor the script's folder; -B: no bytecode is written beside the packages."""
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        child_env.update(PYTHONPATH=str(self.site_packages(env)), PYTHONNOUSERSITE="1", PYTHONSAFEPATH="1",
                         PYTHONDONTWRITEBYTECODE="1")
        return [str(env.path / "bin" / "python"), "-S", "-s", "-B"], child_env

    def worker_command(self, env: Environment) -> tuple[list[str], dict]:
        argv, child_env = self.python_command(env)
        return [*argv, str(WORKER)], child_env
