"""Wheels for a foreign platform, resolved on the host by uv into a plain directory.

Emulated and container probes import onnxruntime from such a directory,
mounted read-only: the probe itself never needs the network.
"""

from __future__ import annotations

from pathlib import Path

from harness.releases.packages import Package
from harness.releases.uvtool import uv
from harness.releases.versions import Release, Target
from harness.runners.base import Environment, forget_build, locked_build
from harness.runners.uv import require_wheel


def site_dir(cache_dir: Path, target: Target, version: str, package: Package = Package()) -> Path:
    return cache_dir / "sites" / f"{target.arch}-py{target.python}" / package.env_name(version)


def site_install_args(site: str, target: Target, version: str, package: Package = Package()) -> list[str]:
    """`uv` arguments that install the package's `version` and numpy for `target` into the directory `site`
    (a source's credentials are not among them: `package.uv_args()` gives them as uv's environment)."""
    return ["pip", "install", "--target", site, "--python-platform", f"{target.arch}-unknown-linux-gnu",
            "--python-version", target.python, *package.install_args(version)]


def prepare_site(cache_dir: Path, target: Target, release: Release,
                 package: Package = Package()) -> Environment:
    require_wheel(release, target, package.name)

    def build(path: Path) -> dict:
        uv(*site_install_args(str(path / "site"), target, release.version, package), "--quiet",
           "--no-compile-bytecode", what=f"installing {package.name} {release.version} for {target.arch}",
           env=package.uv_args()[1])
        return {"python": target.python, "arch": target.arch, "package": package.name}

    return locked_build(site_dir(cache_dir, target, release.version, package), release.version, build, cache_dir)


def discard_site(env: Environment) -> None:
    forget_build(env.path)
