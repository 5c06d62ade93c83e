"""onnxruntime releases from the package index uv is configured to use.

The listing comes from the index's standard simple API (PEP 691 JSON), so a
private mirror or a proxy works the same as the public index. Wheel file names
tell which releases can be installed for a target platform and Python; a
release with no such wheel is kept in the list and marked, so the search can
step around it as a *skip* instead of failing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from harness.errors import UsageError

PACKAGE = "onnxruntime"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
LISTING_MAX_AGE_S = 6 * 3600


@dataclass(frozen=True)
class Target:
    """Where a probe runs: CPU architecture and Python version (e.g. "x86_64", "3.11")."""

    arch: str
    python: str

    def accepts(self, tag: Tag, any_python: bool = False) -> bool:
        """A wheel tag installable on manylinux glibc for this arch and CPython version (or any)."""
        cp = "cp" + self.python.replace(".", "")
        if not any_python and tag.interpreter not in (cp, "py3") and not (
            tag.abi == "abi3" and tag.interpreter.startswith("cp")
        ):
            return False
        if tag.platform == "any":
            return True
        return tag.platform.startswith(("manylinux", "linux_")) and tag.platform.endswith(
            "_" + self.arch
        )


@dataclass
class Release:
    version: str
    wheels: list[str] = field(default_factory=list)  # every non-yanked wheel file name
    yanked: bool = False

    def wheel_for(self, target: Target) -> str | None:
        for name in self.wheels:
            try:
                _, _, _, tags = parse_wheel_filename(name)
            except InvalidWheelFilename:
                continue
            if any(target.accepts(t) for t in tags):
                return name
        return None


def parse_version(text: str, flag: str = "version") -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise UsageError(f"{flag}: '{text}' is not a version number") from None


def configured_index_url(uv_bin: str) -> str:
    """The default index of uv's configuration (uv.toml, UV_DEFAULT_INDEX, ...).

    Asking uv keeps one source of truth: the environments are installed by uv
    from the same index the release list is read from.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".in") as empty:
        out = subprocess.run(
            [uv_bin, "pip", "compile", empty.name, "--emit-index-url", "--quiet", "--no-header"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    match = re.search(r"^--index-url\s+(\S+)", out, re.M)
    if not match:
        raise RuntimeError(f"uv did not report its index URL: {out!r}")
    return match.group(1).rstrip("/")


def releases_from_simple_json(doc: dict) -> list[Release]:
    """Final releases in version order from a PEP 691 project page. Pure."""
    by_version: dict[Version, Release] = {}
    for f in doc.get("files", []):
        name = f["filename"]
        if not name.endswith(".whl"):
            continue
        try:
            _, version, _, _ = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        if version.is_prerelease or version.is_devrelease:
            continue
        rel = by_version.setdefault(version, Release(str(version)))
        if f.get("yanked"):
            continue
        rel.wheels.append(name)
    # A release whose every file is yanked is not a release any more.
    for rel in by_version.values():
        rel.yanked = not rel.wheels
    return [by_version[v] for v in sorted(by_version) if not by_version[v].yanked]


class IndexUnavailable(Exception):
    """The package index could not be read."""


class ReleaseIndex:
    """The release listing, fetched once and cached so later runs work offline."""

    def __init__(self, cache_dir: Path, uv_bin: str, offline: bool = False):
        self.cache_file = cache_dir / "index" / f"{PACKAGE}.json"
        self.uv_bin = uv_bin
        self.offline = offline

    def _fetch(self) -> dict:
        import httpx  # only when the listing is fetched: most runs read the cached one

        url = f"{configured_index_url(self.uv_bin)}/{PACKAGE}/"
        try:
            resp = httpx.get(url, headers={"Accept": SIMPLE_JSON}, timeout=30, follow_redirects=True)
            resp.raise_for_status()
            return resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise IndexUnavailable(str(exc)) from None

    def releases(self, refresh: bool = False) -> list[Release]:
        """The listing: the cached one while fresh, else fetched; `offline` never fetches."""
        cached = self._read_cache()
        if self.offline:
            if cached is None:
                raise UsageError(f"--offline: no cached {PACKAGE} release listing in {self.cache_file}; "
                                 "run once without --offline to fetch it")
            return [Release(**r) for r in cached["releases"]]
        fresh = cached is not None and time.time() - cached["fetched_at"] < LISTING_MAX_AGE_S
        if cached is not None and fresh and not refresh:
            return [Release(**r) for r in cached["releases"]]
        try:
            releases = releases_from_simple_json(self._fetch())
        except (IndexUnavailable, subprocess.CalledProcessError, OSError) as exc:
            if cached is not None:  # no network: fall back to the last listing we saw
                return [Release(**r) for r in cached["releases"]]
            why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise UsageError(f"cannot list {PACKAGE} releases from the package index: {why}") from None
        self._write_cache(releases)
        return releases

    def _read_cache(self) -> dict | None:
        try:
            doc = json.loads(self.cache_file.read_text())
            [Release(**r) for r in doc["releases"]], float(doc["fetched_at"])
        except (OSError, ValueError, TypeError, KeyError):
            return None  # absent or damaged: as if never fetched
        return doc

    def _write_cache(self, releases: list[Release]) -> None:
        doc = {"fetched_at": time.time(), "releases": [asdict(r) for r in releases]}
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, self.cache_file)
        except OSError:
            pass  # a read-only cache only costs the next run a fetch


def select_range(releases: list[Release], lo: str, hi: str, flags: tuple[str, str] = ("--from", "--to")) -> list[Release]:
    """Releases in [lo, hi]; both ends must be releases of the index. Pure.

    `flags` spell the two ends as the user gave them (`--version`, `GOOD`...);
    a version is a release when it equals one (1.20 is 1.20.0, as for pip).
    """
    lo_v, hi_v = parse_version(lo, flags[0]), parse_version(hi, flags[1])
    known = {Version(r.version) for r in releases}
    for flag, text, v in ((flags[0], lo, lo_v), (flags[1], hi, hi_v)):
        if v not in known:
            near = ", ".join(str(k) for k in sorted(known, key=lambda k: abs(_ord(k) - _ord(v)))[:3])
            raise UsageError(f"{flag} {text}: no such {PACKAGE} release (nearest: {near or 'none'})")
    if lo_v > hi_v:
        raise UsageError(f"{flags[0]} {lo} is after {flags[1]} {hi}")
    return [r for r in releases if lo_v <= Version(r.version) <= hi_v]


def wheel_pythons(releases: list[Release], arch: str) -> list[str]:
    """The CPython versions (3.11, ...) that some release has a Linux wheel of for `arch`. Pure."""
    found = set()
    for rel in releases:
        for name in rel.wheels:
            try:
                tags = parse_wheel_filename(name)[3]
            except InvalidWheelFilename:
                continue
            for tag in tags:
                m = re.fullmatch(r"cp(\d)(\d+)", tag.interpreter)
                if m and Target(arch, "").accepts(tag, any_python=True):
                    found.add(f"{m.group(1)}.{m.group(2)}")
    return sorted(found, key=lambda p: tuple(int(x) for x in p.split(".")))


def _ord(v: Version) -> float:
    rel = (list(v.release) + [0, 0, 0])[:3]
    return rel[0] * 1e6 + rel[1] * 1e3 + rel[2]
