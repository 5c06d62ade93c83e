"""An environment verified by content: exactly what the wheels installed, and nothing else on `sys.path`.

A release's environment is a folder on disk, so it can hold something else
than the release asked for: another release's package with `__version__`
edited, a file changed after the install, a `.pth` or a module planted beside
the packages. None of that may become a verdict about the release. Before an
environment's first probe in a run, `verify_site` checks its site-packages:

- the package's `*.dist-info` says the version asked for;
- every file a wheel's RECORD lists has the size and sha256 it lists;
- every file there is one a RECORD lists (what uv itself writes aside);
- bytecode is removed, not trusted: no RECORD lists it, and the worker runs
  with `-B`, so none is written back.

What the worker then loaded is checked too (`native_problem`): the compiled
core of onnxruntime it reports must be a compiled extension, a shared object
the package's own RECORD lists (so hashed above), and the build information
the probe judges by must be that core's own `get_build_info`. A package that
loads no native library (a stub that answers in Python) is no build of
onnxruntime, whatever its version and build information say. What a worker
reports comes from the package's own code: this catches a stub or a wheel
made of another release's core, not a package written to lie to it.

Hashing is memoised per file by (inode, size, mtime_ns, ctime_ns) together
with the digest RECORD gives: `touch -r` and `cp -p` restore an mtime but not
a ctime, so a changed file is always hashed again.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import posixpath
import shutil
import stat
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from harness.results.store import write_atomic

MEMO = "ortbisect-verified.json"
# what uv itself writes at the top of site-packages: `uv venv`'s two, inert since the worker runs without the
# `site` module (-S), and the lock of a `--target` install (a dot name: never importable)
INSTALLER_FILES = frozenset({"_virtualenv.py", "_virtualenv.pth", ".lock"})


def verify_site(site: Path, dist: str, version: str, memo_path: Path | None = None) -> str | None:
    """Why `site` is not exactly what the wheels of `dist` `version` (and its dependencies) installed, or None.
    `memo_path`: where to keep the per-file hash memo (None: hash every file)."""
    if not site.is_dir():
        return f"{site} is missing"
    infos = [p for p in site.glob("*.dist-info") if _dist_name(p.name) == canonicalize_name(dist)]
    if len(infos) != 1:
        return f"it holds {len(infos)} installs of {dist}" if infos else f"no {dist} is installed in it"
    installed = _metadata_version(infos[0] / "METADATA")
    if not _same_version(installed, version):
        return f"it holds {dist} {installed or '(no version)'}, not {version}"
    claimed: set[str] = set()
    hashed: list[tuple[str, str, str]] = []
    for record in sorted(site.glob("*.dist-info/RECORD")):
        try:
            rows = _record_rows(record)
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            return f"{record.relative_to(site)} is unreadable ({exc})"
        for name, sha256, size in rows:
            if name.startswith(("../", "/")):
                continue  # installed outside site-packages (scripts): never on sys.path
            claimed.add(name)
            if sha256 is not None:
                hashed.append((name, sha256, size))
    unclaimed = _unclaimed(site, claimed)
    if unclaimed:
        return f"{unclaimed} is on its sys.path but in no installed wheel's RECORD"
    return _check_hashes(site, hashed, memo_path)


NATIVE_MODULE = "onnxruntime.capi.onnxruntime_pybind11_state"
ELF = b"\x7fELF"


def native_problem(site: Path, seen_site: str, dist: str, native) -> str | None:
    """Why the native library a worker reports loading (its `native`: file, extension) is not the compiled core
    the wheels of `dist` installed in `site`, or None. `seen_site`: `site` as the worker sees it (in a container,
    its mount point). Read back from the worker: anything of another shape is no native library."""
    path = native.get("file") if isinstance(native, dict) else None
    if not isinstance(path, str) or not path:
        return f"it loaded no native library (no {NATIVE_MODULE})"
    shown = path[:200]
    if native.get("extension") is not True:
        return f"its {NATIVE_MODULE} is {shown!r}, not a compiled extension"
    if native.get("own_build_info") is not True:
        return "its get_build_info() is not its compiled core's"
    rel = posixpath.relpath(posixpath.normpath(path), posixpath.normpath(seen_site))
    if rel == ".." or rel.startswith("../"):
        return f"its native library {shown!r} is not in its environment"
    if rel not in _recorded(site, dist):
        return f"its native library {rel[:200]!r} is in no RECORD of {dist} (no file its wheel installed)"
    try:
        with open(site / rel, "rb") as fh:
            magic = fh.read(len(ELF))
    except OSError as exc:
        return f"its native library {rel[:200]!r}: {exc.strerror or exc}"
    return None if magic == ELF else f"its native library {rel[:200]!r} is not a shared object"


def _recorded(site: Path, dist: str) -> set[str]:
    """The files (under `site`, with a sha256: hashed by verify_site) the RECORD of `dist`'s own dist-info lists."""
    files: set[str] = set()
    for info in site.glob("*.dist-info"):
        if _dist_name(info.name) != canonicalize_name(dist):
            continue
        try:
            rows = _record_rows(info / "RECORD")
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
        files.update(name for name, sha256, _ in rows if sha256 is not None)
    return files


def record_tree(root: Path, sub: str, manifest: Path) -> None:
    """Write into `manifest` every file under `root/sub` with its sha256 and size, in a wheel RECORD's format
    (path from `root`), for `verify_tree` to check against later. Links are left out (npm's `.bin` entry points,
    which no worker runs)."""
    rows = []
    for dirpath, dirnames, filenames in os.walk(root / sub):
        dirnames.sort()
        for f in sorted(filenames):
            path = Path(dirpath) / f
            if path.is_symlink():
                continue
            with open(path, "rb") as fh:
                digest = base64.urlsafe_b64encode(hashlib.file_digest(fh, "sha256").digest()).rstrip(b"=").decode()
            rows.append([path.relative_to(root).as_posix(), f"sha256={digest}", str(path.stat().st_size)])
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    manifest.write_text(out.getvalue())


def verify_tree(root: Path, sub: str, manifest: Path, memo_path: Path | None = None) -> str | None:
    """Why the files under `root/sub` are not exactly those `manifest` lists (a RECORD's format: path from `root`,
    sha256, size), or None: every file listed, of its size and sha256, and no other file. Links only in npm's
    `.bin` folders (its scripts' entry points, which no worker runs); the manifest is the one `root` was made
    with (harness.runners.node), so this says what changed since."""
    try:
        hashed = [row for row in _record_rows(manifest) if row[1] is not None]
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        return f"{manifest.name} is unreadable ({exc})"
    claimed = {name for name, _, _ in hashed}
    if any(name.startswith(("../", "/")) or not name.startswith(sub + "/") for name in claimed):
        return f"{manifest.name} names a file outside {sub}/"
    for dirpath, dirnames, filenames in os.walk(root / sub):
        here = Path(dirpath)
        for name in [*dirnames, *filenames]:
            full = here / name
            rel = full.relative_to(root).as_posix()
            if full.is_symlink():
                if here.name != ".bin":
                    return f"{rel} is a link the install did not make"
                if name in dirnames:
                    dirnames.remove(name)
                continue
            if name in filenames and rel not in claimed:
                return f"{rel} is in no file the install made"
    return _check_hashes(root, hashed, memo_path)


def _record_rows(path: Path) -> list[tuple[str, str | None, str]]:
    """The rows of a file in a wheel RECORD's format: (path, normalised; its sha256, None where the row gives none;
    its size). Rows of another length are left out. Raises what reading or parsing it raises."""
    rows = csv.reader(path.read_text(encoding="utf-8").splitlines())
    return [(posixpath.normpath(r[0]), r[1][len("sha256="):] if r[1].startswith("sha256=") else None, r[2])
            for r in rows if len(r) == 3]


def _dist_name(folder: str) -> str:
    return canonicalize_name(folder[: -len(".dist-info")].rsplit("-", 1)[0])


def _metadata_version(path: Path) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
                if not line.strip():
                    break  # the headers end at the first blank line
    except OSError:
        return None
    return None


def _same_version(installed: str | None, asked: str) -> bool:
    try:
        return installed is not None and Version(installed) == Version(asked)
    except InvalidVersion:
        return installed == asked


def _unclaimed(site: Path, claimed: set[str]) -> str | None:
    """The first file under `site` that no RECORD lists (bytecode caches are removed on the way), or None."""
    for dirpath, dirnames, filenames in os.walk(site):
        rel_dir = Path(dirpath).relative_to(site).as_posix()
        if rel_dir == "bin":
            dirnames.clear()  # a --target install's scripts: not importable
            continue
        for d in list(dirnames):
            full = Path(dirpath) / d
            rel = posixpath.join(rel_dir, d) if rel_dir != "." else d
            if d == "__pycache__" and not full.is_symlink():
                shutil.rmtree(full, ignore_errors=True)
                if full.exists():
                    return f"{rel} (bytecode no RECORD lists, and it cannot be removed)"
                dirnames.remove(d)
            elif full.is_symlink():  # a wheel never installs a link: os.walk would not look behind it
                return rel
        for f in filenames:
            rel = posixpath.join(rel_dir, f) if rel_dir != "." else f
            if rel in claimed or (rel_dir == "." and f in INSTALLER_FILES):
                continue
            return rel
    return None


def _check_hashes(site: Path, hashed: list[tuple[str, str, str]], memo_path: Path | None) -> str | None:
    memo = _read_memo(memo_path)
    seen: dict[str, list] = {}
    for name, digest, size in hashed:
        path = site / name
        try:
            st = os.lstat(path)
        except OSError as exc:
            return f"{name}: {exc.strerror or exc}"
        if not stat.S_ISREG(st.st_mode):
            return f"{name} is not the regular file the wheel installed"
        key = [digest, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        if memo.get(name) == key:
            seen[name] = key
            continue
        if size.isdigit() and st.st_size != int(size):
            return f"{name} is {st.st_size} bytes, the wheel installed {size}"
        try:
            with open(path, "rb") as fh:
                got = hashlib.file_digest(fh, "sha256").digest()
        except OSError as exc:
            return f"{name}: {exc.strerror or exc}"
        if base64.urlsafe_b64encode(got).rstrip(b"=").decode() != digest:
            return f"{name} differs from the file the wheel installed (sha256)"
        seen[name] = key
    if memo_path is not None and seen != memo:
        try:
            write_atomic(memo_path, json.dumps({"files": seen}))
        except OSError:
            pass  # a read-only cache: hashed again next time
    return None


def _read_memo(path: Path | None) -> dict[str, list]:
    """The memo as written, or nothing: read back from disk, so anything malformed is ignored, never trusted."""
    if path is None:
        return {}
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(files, dict):
        return {}
    return {k: v for k, v in files.items()
            if isinstance(k, str) and isinstance(v, list) and len(v) == 5 and isinstance(v[0], str)
            and all(isinstance(x, int) and not isinstance(x, bool) for x in v[1:])}
