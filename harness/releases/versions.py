"""Releases of an onnxruntime package from the package index uv is configured to use, and from the user's sources.

The listing comes from the index's standard simple API (PEP 691 JSON), so a
private mirror or a proxy works the same as the public index. Wheel file names
tell which releases can be installed for a target platform and Python; a
release with no such wheel is kept in the list and marked, so the search can
step around it as a *skip* instead of failing.

Sources the user adds (harness.releases.packages: `--index-url`, a PEP 691 or PEP 503
simple index, http(s) or file://; `--find-links`, a directory of wheels or a
page of links) are read on every listing, never cached: wheels come and go
there. The index's listing is cached per package (`index/<package>.json`, final
releases, the format every version of the harness reads; with `--pre` in
`index/<package>.pre.json`). Versions are ordered by PEP 440, so a development build 1.25.0.devN
sorts between 1.24.x and 1.25.0; pre-releases and development builds are left
out unless `--pre` asks for them.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from harness.errors import EnvironmentSkip, HarnessError, UsageError
from harness.releases.credentials import redact
from harness.releases.packages import Package
from harness.releases.uvtool import uv

PACKAGE = "onnxruntime"  # the default package's name, as a word in messages
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
LISTING_MAX_AGE_S = 6 * 3600
NPM_ARCHS = ("x86_64", "aarch64")  # the Linux archs an onnxruntime-node archive has a native library for


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
    source: str = ""  # where the user's own source has it (a --find-links directory, an --index-url); "" the index

    @property
    def is_pre(self) -> bool:
        return Version(self.version).is_prerelease  # development builds (1.25.0.dev1) included

    def wheel_for(self, target: Target) -> str | None:
        """The file of this release that installs for `target`: a wheel of its platform and Python, or an npm
        archive (harness.releases.npm), which carries the native library of every Linux arch it serves."""
        for name in self.wheels:
            if name.endswith(".tgz"):
                if target.arch in NPM_ARCHS:
                    return name
                continue
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
        out = uv("pip", "compile", empty.name, "--emit-index-url", "--quiet", "--no-header",
                 what="asking uv for its index", binary=uv_bin).stdout
    match = re.search(r"^--index-url\s+(\S+)", out, re.M)
    if not match:
        raise IndexUnavailable(f"uv did not report its index URL: {redact(out[:200])!r}")
    return match.group(1).rstrip("/")


def releases_from_simple_json(doc: dict, pre: bool = False, project: str | None = None,
                              source: str = "") -> list[Release]:
    """Releases in version order from a PEP 691 project page (`files`: filename, yanked). Pure.

    Pre-releases and development builds only with `pre`; only wheels of
    `project` when it is given (a find-links directory may hold others).
    """
    by_version: dict[Version, Release] = {}
    for f in doc.get("files", []):
        name = f["filename"]
        if not name.endswith(".whl"):
            continue
        try:
            dist, version, _, _ = parse_wheel_filename(name)
        except InvalidWheelFilename:
            continue
        if project is not None and dist != canonicalize_name(project):
            continue
        if not pre and (version.is_prerelease or version.is_devrelease):
            continue
        rel = by_version.setdefault(version, Release(str(version), source=source))
        if f.get("yanked"):
            continue
        rel.wheels.append(name)
    # A release whose every file is yanked is not a release any more.
    for rel in by_version.values():
        rel.yanked = not rel.wheels
    return [by_version[v] for v in sorted(by_version) if not by_version[v].yanked]


def merge_releases(*listings: list[Release]) -> list[Release]:
    """One listing of several sources, in PEP 440 order; a version's wheels are the union (first source named). Pure."""
    by_version: dict[Version, Release] = {}
    for listing in listings:
        for rel in listing:
            have = by_version.setdefault(Version(rel.version), Release(rel.version, [], source=rel.source))
            have.wheels += [w for w in rel.wheels if w not in have.wheels]
            have.source = have.source or rel.source
    return [by_version[v] for v in sorted(by_version)]


class _Links(HTMLParser):
    """The links of a PEP 503 page (or any page of wheel links): (href, yanked)."""

    def __init__(self):
        super().__init__()
        self.links: list[tuple[str, bool]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            a = dict(attrs)
            if a.get("href"):
                self.links.append((a["href"], "data-yanked" in a))


def files_of_page(html: str) -> dict:
    """A page of links as a PEP 691 document (file names from the links' paths). Pure."""
    parser = _Links()
    parser.feed(html)
    files = [{"filename": unquote(urlparse(href).path.rsplit("/", 1)[-1]), "yanked": yanked}
             for href, yanked in parser.links]
    return {"files": files}


def files_of_directory(path: Path) -> dict:
    """The wheels of a local directory as a PEP 691 document."""
    return {"files": [{"filename": p.name, "yanked": False} for p in sorted(Path(path).glob("*.whl"))]}


class IndexUnavailable(Exception):
    """The package index could not be read."""


class ReleaseIndex:
    """The listing of one package: the configured index's (fetched once and cached, so later runs work
    offline) merged with the user's sources (read every time)."""

    def __init__(self, cache_dir: Path, uv_bin: str, offline: bool = False, package: Package | None = None):
        self.package = package or Package()
        # Final releases in <package>.json (the format every version of the harness reads); with --pre, the
        # listing with pre-releases and development builds in <package>.pre.json beside it.
        suffix = ".pre.json" if self.package.pre else ".json"
        self.cache_file = cache_dir / "index" / f"{self.package.name}{suffix}"
        self.uv_bin = uv_bin
        self.offline = offline

    def _fetch(self) -> dict:
        return fetch_project(configured_index_url(self.uv_bin), self.package.name)

    def _listing(self) -> list[Release]:
        """The index's releases of the package, fetched now (IndexUnavailable when it cannot be read)."""
        return releases_from_simple_json(self._fetch(), pre=self.package.pre)

    def where(self) -> str:
        """Where the listing comes from, as an error says it."""
        return "the package index"

    def releases(self, refresh: bool = False) -> list[Release]:
        """The listing: the index's (cached while fresh, else fetched; `offline` never fetches) and the sources'."""
        pre = self.package.pre
        listing = self._index_releases(refresh)
        extra = [releases_from_simple_json(doc, pre, self.package.name, source) for source, doc in self._sources()]
        return merge_releases(listing, *extra) if extra else listing

    def _index_releases(self, refresh: bool) -> list[Release]:
        name = self.package.name
        cached = self._read_cache()
        if self.offline:
            if cached is None:
                raise UsageError(f"--offline: no cached {name} release listing in {self.cache_file}; "
                                 "run once without --offline to fetch it")
            return [Release(**r) for r in cached["releases"]]
        fresh = cached is not None and time.time() - cached["fetched_at"] < LISTING_MAX_AGE_S
        if cached is not None and fresh and not refresh:
            return [Release(**r) for r in cached["releases"]]
        try:
            releases = self._listing()
        except (IndexUnavailable, EnvironmentSkip, OSError) as exc:
            if cached is not None:  # no network: fall back to the last listing we saw
                return [Release(**r) for r in cached["releases"]]
            # uv failing, the configured index unreachable: the tool's environment, not the request (exit 1)
            why = redact((str(exc).strip().splitlines() or [type(exc).__name__])[0])
            raise HarnessError(f"cannot list {name} releases from {self.where()}: {why}") from None
        self._write_cache(releases)
        return releases

    def _sources(self) -> list[tuple[str, dict]]:
        """(source, PEP 691 document) of each --index-url and --find-links location (the source redacted:
        a release's source is shown and recorded)."""
        docs = []
        for url in self.package.index_urls:
            docs.append((redact(url), self._read_source(url, index=True)))
        for link in self.package.find_links:
            docs.append((redact(link), self._read_source(link, index=False)))
        return docs

    def _read_source(self, where: str, index: bool) -> dict:
        flag = "--index-url" if index else "--find-links"
        parsed = urlparse(where)
        try:
            if parsed.scheme in ("http", "https"):
                if self.offline:
                    raise UsageError(f"{flag} {redact(where)}: --offline reads no URL")
                return fetch_project(where, self.package.name) if index else fetch_page(where)
            path = Path(unquote(parsed.path)) if parsed.scheme == "file" else Path(where)
            if index:
                page = path / canonicalize_name(self.package.name)
                for candidate in (page / "index.html", page / "index.htm"):
                    if candidate.is_file():
                        return files_of_page(candidate.read_text())
                return files_of_directory(page)
            return files_of_directory(path)
        except (IndexUnavailable, OSError) as exc:
            raise UsageError(f"{flag} {redact(where)}: cannot list {self.package.name} wheels there: "
                             f"{redact((str(exc).strip().splitlines() or [type(exc).__name__])[0])}") from None

    def _read_cache(self) -> dict | None:
        try:
            doc = json.loads(self.cache_file.read_text())
            [Release(**r) for r in doc["releases"]], float(doc["fetched_at"])
        except (OSError, ValueError, TypeError, KeyError):
            return None  # absent or damaged: as if never fetched
        return doc

    def _write_cache(self, releases: list[Release]) -> None:
        # the index's own releases have no source: the entries keep the fields every version reads
        doc = {"fetched_at": time.time(), "releases": [{k: v for k, v in asdict(r).items() if k != "source"}
                                                       for r in releases]}
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc))
            os.replace(tmp, self.cache_file)
        except OSError:
            pass  # a read-only cache only costs the next run a fetch


def fetch_project(index_url: str, project: str) -> dict:
    """A project's page of a simple index, as a PEP 691 document (a PEP 503 HTML page is read too)."""
    import httpx  # only when a listing is fetched: most runs read the cached one

    url = f"{index_url.rstrip('/')}/{canonicalize_name(project)}/"
    try:
        resp = httpx.get(url, headers={"Accept": f"{SIMPLE_JSON}, text/html;q=0.1"}, timeout=30,
                         follow_redirects=True)
        resp.raise_for_status()
        if "json" in resp.headers.get("content-type", ""):
            return resp.json()
        return files_of_page(resp.text)
    except (httpx.HTTPError, ValueError) as exc:
        raise IndexUnavailable(str(exc)) from None


def fetch_page(url: str) -> dict:
    """A --find-links page of wheel links, as a PEP 691 document."""
    import httpx

    try:
        resp = httpx.get(url, timeout=30, follow_redirects=True)
        resp.raise_for_status()
        return files_of_page(resp.text)
    except httpx.HTTPError as exc:
        raise IndexUnavailable(str(exc)) from None


def select_range(releases: list[Release], lo: str, hi: str, flags: tuple[str, str] = ("--from", "--to"),
                 package: str = PACKAGE) -> list[Release]:
    """Releases in [lo, hi]; both ends must be releases of the listing (of `package`). Pure.

    `flags` spell the two ends as the user gave them (`--version`, `GOOD`...);
    a version is a release when it equals one (1.20 is 1.20.0, as for pip).
    """
    lo_v, hi_v = parse_version(lo, flags[0]), parse_version(hi, flags[1])
    known = {Version(r.version) for r in releases}
    for flag, text, v in ((flags[0], lo, lo_v), (flags[1], hi, hi_v)):
        if v not in known:
            near = ", ".join(str(k) for k in sorted(known, key=lambda k: abs(_ord(k) - _ord(v)))[:3])
            raise UsageError(f"{flag} {text}: no such {package} release (nearest: {near or 'none'})")
    if lo_v > hi_v:
        raise UsageError(f"{flags[0]} {lo} is after {flags[1]} {hi}")
    return [r for r in releases if lo_v <= Version(r.version) <= hi_v]


def builds_between(releases: list[Release], lo: str, hi: str) -> list[Release]:
    """The pre-releases and development builds strictly between `lo` and `hi`, in PEP 440 order (1.20.0.dev2
    before 1.20.0.dev10, both before 1.20.0rc1). Pure."""
    lo_v, hi_v = Version(lo), Version(hi)
    return sorted((r for r in releases if lo_v < Version(r.version) < hi_v and r.is_pre), key=lambda r: Version(r.version))


def installable(releases: list[Release], target: Target) -> tuple[list[Release], list[tuple[Release, str]]]:
    """(the releases with a wheel for `target`, [(each other one, why)]), in the order given. Pure."""
    kept, left = [], []
    for r in releases:
        if r.wheel_for(target):
            kept.append(r)
        else:
            left.append((r, f"no wheel for {target.arch} / Python {target.python}"))
    return kept, left


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
