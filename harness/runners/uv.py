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

NUMPY = "numpy"
BUILD_INFO = "ortbisect-build-info.json"  # get_build_info() of an environment's build, read once


def require_wheel(release: Release, target, package: str = "onnxruntime") -> None:
    if release.wheel_for(target) is None:
        raise EnvironmentSkip(f"no {package} {release.version} wheel for {target.arch} / Python {target.python}")


class UvRunner(Runner):
    backend = "uv"
    auto = True

    @classmethod
    def archs(cls) -> tuple[str, ...]:
        return (native_arch(),)

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
            sources, secrets = pkg.uv_args()
            uv("pip", "install", "--quiet", "--no-compile-bytecode", "--python", str(path / "bin" / "python"),
               *sources, pkg.requirement(release.version), NUMPY,
               what=f"installing {pkg.name} {release.version}", env=secrets)
            return {"python": self.target.python, "package": pkg.name}

        return locked_build(self.env_dir(release.version), release.version, build)

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
        proc = subprocess.run([str(env.path / "bin" / "python"), "-I", "-c",
                               "import onnxruntime as o; print(getattr(o, 'get_build_info', lambda: '')())"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
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

    def worker_command(self, env: Environment) -> tuple[list[str], dict]:
        # -I: the worker sees only its release's site-packages, nothing from the harness.
        argv = [str(env.path / "bin" / "python"), "-I", str(WORKER)]
        return argv, {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
