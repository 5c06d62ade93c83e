"""Real release wheels, and development builds made from them, for tests of wheel sources.

A release wheel is downloaded once from the index uv is configured with (its
PEP 691 page gives the file's URL and sha256) into the shared test cache. A
development build is a release wheel re-versioned with the `wheel` tool
(`wheel unpack`, the dist-info's version and directory renamed, the
package's `__version__` set to the build's base release as a nightly built
from main reports it, `wheel pack`): the same binary under another version
number, as a nightly or a wheel built at a commit would be. Both are kept in the cache, so a warm run
makes neither again.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urljoin

import httpx
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from harness.releases.uvtool import uv_bin
from harness.releases.versions import (
    Release,
    Target,
    configured_index_url,
    fetch_project,
)

# Bumped when what reversioned() makes changes, so no build made the old way is served from the cache.
REVERSIONED = "reversioned-2"


def release_wheel(cache_dir: Path, package: str, version: str, target: Target) -> Path:
    """The release's wheel for `target`, as a file in the test cache."""
    index = configured_index_url(uv_bin())
    doc = fetch_project(index, package)
    files = [f for f in doc["files"] if not f.get("yanked") and f["filename"].endswith(".whl")
             and str(parse_wheel_filename(f["filename"])[1]) == version]
    name = Release(version, [f["filename"] for f in files]).wheel_for(target)
    if name is None:
        raise LookupError(f"no {package} {version} wheel for {target}")
    dest = cache_dir / "test-wheels" / name
    if dest.exists():
        return dest
    entry = next(f for f in files if f["filename"] == name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{name}.{os.getpid()}.tmp")
    digest = hashlib.sha256()
    with httpx.stream("GET", urljoin(f"{index}/{package}/", entry["url"]), timeout=300, follow_redirects=True) as resp:
        resp.raise_for_status()
        with open(tmp, "wb") as f:
            for chunk in resp.iter_bytes(1 << 20):
                digest.update(chunk)
                f.write(chunk)
    want = (entry.get("hashes") or {}).get("sha256")
    if want and digest.hexdigest() != want:
        tmp.unlink()
        raise AssertionError(f"{name}: sha256 {digest.hexdigest()} is not the index's {want}")
    os.replace(tmp, dest)
    return dest


def reversioned(wheel: Path, version: str, cache_dir: Path) -> Path:
    """`wheel` as the build `version` (1.20.0.dev3), made with the wheel tool once and kept in the cache."""
    dist, old, _, _ = parse_wheel_filename(wheel.name)
    dist_dir = dist.replace("-", "_")
    out = cache_dir / "test-wheels" / REVERSIONED / f"{wheel.stem}-as-{version}"
    made = list(out.glob("*.whl"))
    if made:
        return made[0]
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        tmp = Path(tmp)
        _wheel("unpack", str(wheel), "-d", str(tmp))
        unpacked = tmp / f"{dist_dir}-{old}"
        info = unpacked / f"{dist_dir}-{old}.dist-info"
        meta = info / "METADATA"
        lines = meta.read_text().splitlines(keepends=True)
        lines = [f"Version: {version}\n" if ln.startswith("Version:") else ln for ln in lines]
        meta.write_text("".join(lines))
        init = unpacked / dist_dir / "__init__.py"
        if init.exists():  # a nightly of 1.20.0 says 1.20.0: the worker's check compares the release part
            base = Version(version).base_version
            init.write_text(re.sub(r'^__version__ = ".*"$', f'__version__ = "{base}"', init.read_text(),
                                   count=1, flags=re.M))
        info.rename(unpacked / f"{dist_dir}-{version}.dist-info")
        renamed = unpacked.rename(tmp / f"{dist_dir}-{version}")
        packed = tmp / "packed"
        packed.mkdir()
        _wheel("pack", str(renamed), "-d", str(packed))
        (result,) = packed.glob("*.whl")
        out.mkdir(parents=True, exist_ok=True)
        final = out / result.name
        shutil.move(result, final)
    return final


def _wheel(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "wheel", *args], check=True, capture_output=True, text=True)


def find_links_dir(dest: Path, wheels: list[Path]) -> Path:
    """A --find-links directory holding `wheels` (hard links into the cache where the filesystem allows)."""
    dest.mkdir(parents=True, exist_ok=True)
    for w in wheels:
        target = dest / w.name
        if not target.exists():
            try:
                os.link(w, target)
            except OSError:
                shutil.copy2(w, target)
    return dest


def simple_index(root: Path, project: str, wheels: list[Path]) -> Path:
    """A PEP 503 simple index on disk: root/<project>/index.html linking the wheels kept in root/files/."""
    files = find_links_dir(root / "files", wheels)
    page = root / project
    page.mkdir(parents=True, exist_ok=True)
    links = "\n".join(f'<a href="../files/{w.name}">{w.name}</a><br/>' for w in sorted(files.glob("*.whl")))
    (page / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}\n</body></html>\n")
    (root / "index.html").write_text(f'<!DOCTYPE html>\n<html><body><a href="{project}/">{project}</a></body></html>\n')
    return root


def dev_builds(cache_dir: Path, target: Target) -> dict:
    """1.19.2 as 1.20.0.dev1 and dev2, 1.20.0 as dev3 and dev4, with the two releases themselves: the wheels,
    a --find-links directory and a simple index of them, at stable paths of the test cache (their environments
    are reused by the next run)."""
    good = release_wheel(cache_dir, "onnxruntime", "1.19.2", target)
    bad = release_wheel(cache_dir, "onnxruntime", "1.20.0", target)
    made = {f"1.20.0.dev{i}": reversioned(good if i <= 2 else bad, f"1.20.0.dev{i}", cache_dir) for i in (1, 2, 3, 4)}
    wheels = [good, bad, *made.values()]
    here = cache_dir / "test-wheels" / REVERSIONED
    return {"wheels": wheels, "made": made, "good": good, "bad": bad,
            "links": find_links_dir(here / "find-links", wheels),
            "index": simple_index(here / "simple", "onnxruntime", wheels)}


def made_wheel(dest: Path, dist: str, version: str, files: dict[str, bytes], tag: str = "py3-none-any") -> Path:
    """A wheel of `dist` `version` holding `files` (path in the wheel -> bytes), with the `tag` given, packed by
    the wheel tool (which writes its RECORD): what anyone can put in a --find-links folder."""
    dist_dir = dist.replace("-", "_")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / f"{dist_dir}-{version}"
        info = root / f"{dist_dir}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\nRequires-Dist: numpy\n")
        pys, abis, plats = (part.split(".") for part in tag.split("-"))
        tags = "".join(f"Tag: {p}-{a}-{o}\n" for p in pys for a in abis for o in plats)
        (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: "
                                    f"{'true' if plats == ['any'] else 'false'}\n{tags}")
        for rel, data in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        dest.mkdir(parents=True, exist_ok=True)
        _wheel("pack", str(root), "-d", str(dest))
    (made,) = dest.glob(f"{dist_dir}-{version}-*.whl")
    return made
