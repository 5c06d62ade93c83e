"""What a probe reads, shipped to an engine through the Docker API into named volumes.

An engine may be another machine's (``DOCKER_HOST=ssh://...``), so no path of
the client is ever mounted. Instead:

* a release's site directory (onnxruntime + numpy for the target) goes into a
  volume keyed by release, arch, Python and the directory's content digest,
  made once per engine and reused by every later probe and run;
* the model (with its external data files) and the batch go into a volume
  keyed by their digests.

A volume is filled through a helper container that is created, never started:
``put_archive`` extracts a tarball into the volume, and a marker file written
last says it is complete. A volume without the marker (a copy cut short) is
removed and made again. Fills of one volume are serialized per engine (a lock
file under the cache, named by the engine's ID), so parallel probes and runs
ship each volume once.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness.models.registry import settled_identity
from harness.results.locking import file_lock

MARKER = ".ortbisect-complete"
LABEL = "org.ortbisect.volume"
SITE_DIGEST = "site.sha256"  # next to a site directory: its content digest, computed once

_digests: dict[tuple, str] = {}
_digests_lock = threading.Lock()


@dataclass
class Shipped:
    """What shipping one volume cost: nothing when it was there already."""

    name: str
    created: bool
    seconds: float = 0.0
    bytes: int = 0


@dataclass
class VolumeCache:
    """The volumes one engine is known to hold complete (asked once per process), and its lock directory."""

    engine_id: str
    lock_dir: Path
    ready: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)


def volume_name(*parts: str) -> str:
    """A volume name from parts (docker allows [a-zA-Z0-9][a-zA-Z0-9_.-]*)."""
    return "-".join(re.sub(r"[^a-zA-Z0-9_.-]", "_", p) for p in ("ortbisect", *parts))


def file_digest(path: Path) -> str:
    """sha256 of a file, remembered for its path and identity (inode, size, mtime, ctime) in this process."""
    identity = settled_identity(path)
    key = (str(path), *identity) if identity is not None else None
    with _digests_lock:
        if key in _digests:
            return _digests[key]
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    if key is not None:
        with _digests_lock:
            _digests[key] = digest
    return digest


def tree_digest(root: Path) -> str:
    """sha256 over a directory's relative paths, modes and contents, kept in `root`/../site.sha256 once made."""
    kept = root.parent / SITE_DIGEST
    try:
        return kept.read_text().strip()
    except OSError:
        pass
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            h.update(f"L {rel} {os.readlink(path)}\n".encode())
            continue
        h.update(f"F {rel} {path.stat().st_mode & 0o111:o}\n".encode())
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    digest = h.hexdigest()
    try:
        tmp = kept.with_name(f".{SITE_DIGEST}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(digest)
        os.replace(tmp, kept)
    except OSError:
        pass  # a read-only cache: computed again next time
    return digest


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _tarball(entries: list[tuple[Path, str]], compress: bool) -> tempfile.SpooledTemporaryFile:
    """A tarball of (host path, name in the volume) entries, directories recursively, the marker last."""
    spool = tempfile.SpooledTemporaryFile(max_size=32 << 20)
    with tarfile.open(fileobj=spool, mode="w:gz" if compress else "w", **({"compresslevel": 1} if compress else {})) as tar:
        for path, arcname in entries:
            tar.add(str(path), arcname=arcname, recursive=True, filter=_owned_by_root)
        stamp = json.dumps({"made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}).encode()
        info = _owned_by_root(tarfile.TarInfo(MARKER))
        info.size, info.mtime = len(stamp), int(time.time())
        tar.addfile(info, io.BytesIO(stamp))
    spool.seek(0)
    return spool


def ensure_volume(client, cache: VolumeCache, image: str, name: str, entries: list[tuple[Path, str]],
                  labels: dict, compress: bool = False) -> Shipped:
    """The named volume `name` on the engine of `client`, filled with `entries` unless it is already complete."""
    if name in cache.ready:
        return Shipped(name, False)
    cache.lock_dir.mkdir(parents=True, exist_ok=True)
    with cache.lock, file_lock(cache.lock_dir / f"{re.sub(r'[^a-zA-Z0-9_.-]', '_', cache.engine_id)}.{name}.lock"):
        if name in cache.ready:
            return Shipped(name, False)
        helper = _helper(client, image, name, labels)
        try:
            if _complete(helper):
                cache.ready.add(name)
                return Shipped(name, False)
        finally:
            helper.remove(force=True)
        _remove_volume(client, name)  # a copy cut short, or none yet
        t0 = time.monotonic()
        helper = _helper(client, image, name, labels)
        try:
            data = _tarball(entries, compress)
            size = data.seek(0, io.SEEK_END)
            data.seek(0)
            helper.put_archive("/v", data)
        finally:
            helper.remove(force=True)
        cache.ready.add(name)
        return Shipped(name, True, time.monotonic() - t0, size)


def _helper(client, image: str, name: str, labels: dict):
    """A container that is never started, with volume `name` (made if absent) at /v: a door for the archive API."""
    import docker.errors
    from docker.types import Mount

    try:
        client.volumes.get(name)
    except docker.errors.NotFound:
        client.volumes.create(name, labels={LABEL: "1", **labels})
    return client.containers.create(image, ["true"], mounts=[Mount("/v", name, type="volume")],
                                    network_mode="none", labels={LABEL: "fill"})


def _complete(helper) -> bool:
    import docker.errors

    try:
        stream, _ = helper.get_archive(f"/v/{MARKER}")
        for _ in stream:
            pass
        return True
    except docker.errors.NotFound:
        return False


def _remove_volume(client, name: str) -> None:
    import docker.errors

    try:
        client.volumes.get(name).remove(force=True)
    except docker.errors.NotFound:
        pass


def model_files(model: Path) -> list[Path]:
    """The model file and the external data files it names (next to it), as onnxruntime will open them."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    identity = settled_identity(model)
    key = ("model-files", str(model), *identity) if identity is not None else None
    with _digests_lock:
        if key in _digests:
            return [Path(p) for p in json.loads(_digests[key])]
    proto = onnx.load(str(model), load_external_data=False)
    tensors = [*proto.graph.initializer, *(a.t for n in proto.graph.node for a in n.attribute if a.HasField("t"))]
    data = sorted({model.parent / ExternalDataInfo(t).location for t in tensors if uses_external_data(t)})
    files = [model, *data]
    if key is not None:
        with _digests_lock:
            _digests[key] = json.dumps([str(p) for p in files])
    return files


def site_volume(client, cache: VolumeCache, image: str, site: Path, arch: str, python: str, env_name: str,
                compress: bool = False) -> Shipped:
    """A release's site directory in a volume keyed by release, arch, Python and content digest (mount at /site)."""
    digest = tree_digest(site)
    name = volume_name("site", arch, f"py{python}", env_name, digest[:16])
    return ensure_volume(client, cache, image, name, [(p, p.name) for p in sorted(site.iterdir())],
                         {f"{LABEL}.kind": "site", f"{LABEL}.digest": digest}, compress)


def inputs_volume(client, cache: VolumeCache, image: str, model: Path, inputs: Path,
                  compress: bool = False) -> tuple[Shipped, str, str]:
    """The model, its data files and the batch in a volume keyed by their digests (mount at /in); with the model's
    and the batch's paths inside."""
    files = model_files(model)
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(model.parent).as_posix()} {file_digest(f)}\n".encode())
    h.update(f"inputs {file_digest(inputs)}\n".encode())
    name = volume_name("inputs", h.hexdigest()[:24])
    entries = [(f, f"model/{f.relative_to(model.parent).as_posix()}") for f in files] + [(inputs, "inputs.npz")]
    shipped = ensure_volume(client, cache, image, name, entries, {f"{LABEL}.kind": "inputs"}, compress)
    return shipped, f"/in/model/{model.name}", "/in/inputs.npz"
