"""Releases of the JavaScript bindings (onnxruntime-node, onnxruntime-web) from the npm registry.

npm itself is the client: `npm view PACKAGE versions --json` against the registry npm is configured for (a
mirror or a proxy works as it does for npm), so the listing and the installs (harness.runners.node) come from
one source. The listing is cached as the wheels' is (`index/<package>.json`, final releases; with --pre,
`index/<package>.pre.json`).

npm numbers builds by semver, the harness by PEP 440 (its order is what the search and the development builds
between two releases go by). A release is the same number in both. A development build,
`1.24.0-dev.20260114-c343143a49`, is `1.24.0.dev20260114+c343143a49` here: it sorts before 1.24.0 and after
1.23.x, and its commit is its local label. Any other pre-release tag (`1.22.0-rev`) is a development build of
its release with the tag as its label, never a release. The npm spelling travels in the release's one file,
`<package>-<npm version>.tgz`, from which `npm_version` reads it back.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess

from packaging.version import InvalidVersion, Version

from harness.errors import HarnessError
from harness.releases.packages import Package
from harness.releases.versions import IndexUnavailable, Release, ReleaseIndex, Target

#: the archs whose native library an onnxruntime-node tarball carries for Linux (onnxruntime-web's WebAssembly
#: runs on any)
ARCHS = ("x86_64", "aarch64")
_SEMVER = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?")
_DEV = re.compile(r"dev\.(\d{8})-([0-9a-f]{7,40})")
NPM_TIMEOUT_S = 120


def pep440(npm_version: str) -> str | None:
    """The harness's number of an npm build (module docstring), or None for one that is no version. Pure."""
    m = _SEMVER.fullmatch(npm_version.strip())
    if not m:
        return None
    base, tag = ".".join(m.group(1, 2, 3)), m.group(4)
    if tag is None:
        return base
    dev = _DEV.fullmatch(tag)
    text = f"{base}.dev{dev.group(1)}+{dev.group(2)}" if dev else f"{base}.dev0+{re.sub(r'[^0-9A-Za-z]+', '.', tag)}"
    try:
        return str(Version(text))
    except InvalidVersion:
        return None


def archive_name(package: str, npm_version: str) -> str:
    return f"{package}-{npm_version}.tgz"


def npm_version(release: Release, package: str) -> str | None:
    """How npm spells `release` of `package` (from its archive's name), or None when it has no npm archive."""
    prefix = f"{package}-"
    for name in release.wheels:
        if name.startswith(prefix) and name.endswith(".tgz"):
            return name[len(prefix):-len(".tgz")]
    return None


def releases_of_versions(package: str, versions: list[str], pre: bool = False) -> list[Release]:
    """Releases in PEP 440 order from npm's version list; development builds only with `pre`. Pure."""
    by_version: dict[Version, Release] = {}
    for text in versions:
        if not isinstance(text, str):
            continue
        ours = pep440(text)
        if ours is None:
            continue
        v = Version(ours)
        if v.is_prerelease and not pre:
            continue
        by_version.setdefault(v, Release(ours, [archive_name(package, text)]))
    return [by_version[v] for v in sorted(by_version)]


def npm_bin() -> str:
    """The npm executable, or HarnessError (the tool's environment, exit 1) in one line."""
    found = shutil.which("npm")
    if found is None:
        raise HarnessError("npm is not on PATH: the node and web bindings install onnxruntime-node and "
                           "onnxruntime-web with it (Debian: apt-get install nodejs npm)")
    return found


def first_line(text: str) -> str:
    """npm's own reason, without its log-file chatter: the first line that says an error."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    said = [ln for ln in lines if "ERR!" in ln and "A complete log" not in ln and "log of this run" not in ln]
    return (said or lines or ["(npm said nothing)"])[0].removeprefix("npm error ").removeprefix("npm ERR! ")[:300]


class NpmIndex(ReleaseIndex):
    """The listing of an npm package, cached like the wheels' (harness.releases.versions.ReleaseIndex)."""

    def __init__(self, cache_dir, offline: bool = False, package: Package | None = None):
        super().__init__(cache_dir, "", offline, package)

    def _listing(self) -> list[Release]:
        return releases_of_versions(self.package.name, self._fetch(), pre=self.package.pre)

    def _fetch(self) -> list:
        """npm's list of the package's versions, asked now."""
        name = self.package.name
        try:
            proc = subprocess.run([npm_bin(), "view", name, "versions", "--json"], capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=NPM_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise IndexUnavailable(f"npm view {name} gave no answer in {NPM_TIMEOUT_S} s") from None
        if proc.returncode != 0:
            raise IndexUnavailable(f"npm view {name}: {first_line(proc.stderr + proc.stdout)}")
        try:
            versions = json.loads(proc.stdout)
        except ValueError:
            raise IndexUnavailable(f"npm view {name} did not answer with JSON") from None
        if isinstance(versions, str):  # npm answers one version as a string
            versions = [versions]
        if not isinstance(versions, list):
            raise IndexUnavailable(f"npm view {name} answered with no list of versions")
        return versions

    def _sources(self) -> list[tuple[str, dict]]:
        return []  # npm's registry is its configuration's (harness.request refuses wheel sources for it)

    def where(self) -> str:
        return "the npm registry"


def installable_archive(release: Release, target: Target, package: str) -> str | None:
    """The npm archive of `release` that serves `target` (its arch), or None. Pure."""
    if target.arch not in ARCHS:
        return None
    version = npm_version(release, package)
    return archive_name(package, version) if version else None
