"""The results store: one directory per run, every probe written the moment it ends.

    results/<run-id>/manifest.json   what was run: command, digests, platform
    results/<run-id>/probes.jsonl    one JSON line per finished probe (append-only)
    results/<run-id>/outputs/        each probe's outputs (.npz), for diffs and references
    results/<run-id>/cells/          the latest summary of each search over this run
    results/<run-id>/traces/         traces and diffs (`bisect trace`, `diff`, `--explain`)
    results/<run-id>/explanation.json  what changed at the boundary (trace diff, suspect node)
    results/<run-id>/<name>.json     triage documents (options.json, repeat.json, mitigation.json)
    results/<run-id>/<name>/         files a triage step makes (a patched model, the repro script)

Only this module decides where those files go; the rest asks the store.

The run id is derived from what decides a probe's outcome (model and batch
digests, target, backend, session options), so running the same command
again, or another range over the same model, reuses every finished probe.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness import __version__
from harness.errors import UsageError

MANIFEST = "manifest.json"
PROBES = "probes.jsonl"
EXPLANATION = "explanation"


def run_id_for(name: str, key: dict) -> str:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
    return f"{safe}-{key.get('arch', 'any')}-{digest}"


def write_atomic(path: Path, content: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb" if isinstance(content, bytes) else "w") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@dataclass
class RunStore:
    dir: Path

    @property
    def run_id(self) -> str:
        return self.dir.name

    @classmethod
    def open(cls, root: Path, run_id: str, key: dict, info: dict, command: list[str]) -> "RunStore":
        """Create the run directory, or reopen it if `key` matches what it was made for."""
        store = cls(root / run_id)
        try:
            store.dir.mkdir(parents=True, exist_ok=True)
            (store.dir / "outputs").mkdir(exist_ok=True)
            manifest = store.manifest()
            if manifest and manifest["key"] != key:
                raise UsageError(f"results {store.dir} were made for another model, batch or target; use another --results-dir")
            manifest = manifest or {
                "run_id": run_id,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "harness_version": __version__,
                "key": key,
                "host": {"platform": platform.platform(), "machine": platform.machine(), "python": sys.version.split()[0]},
                "commands": [],
            }
            manifest.update(info)
            manifest["commands"].append({"argv": command, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            write_atomic(store.dir / MANIFEST, json.dumps(manifest, indent=1))
        except OSError as exc:
            raise UsageError(f"cannot write results to {store.dir}: {exc.strerror or exc}") from None
        return store

    def manifest(self) -> dict | None:
        try:
            return json.loads((self.dir / MANIFEST).read_text())
        except (OSError, ValueError):
            return None

    def append(self, record: dict) -> None:
        """Append one probe as a single write, flushed to disk before returning.

        A line torn by an earlier failure (a full disk, a crash mid-write) is cut
        off first, so it can never swallow the record written after it.
        """
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        fd = os.open(self.dir / PROBES, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _cut_torn_tail(fd)
            written = os.write(fd, line)
            if written != len(line):
                _cut_torn_tail(fd)
                raise OSError(28, os.strerror(28))
            os.fsync(fd)
        except OSError:
            _cut_torn_tail(fd)
            raise
        finally:
            os.close(fd)

    def records(self) -> list[dict]:
        """Every complete probe line; a line torn by a crash mid-write is ignored."""
        try:
            raw = (self.dir / PROBES).read_text()
        except OSError:
            return []
        out = []
        for line in raw.splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return [r for r in out if isinstance(r, dict) and isinstance(r.get("version"), str) and "status" in r]

    def save_summary(self, key: str, doc: dict) -> Path:
        """The latest summary of one search over this run (a matrix cell, or a `bisect run`)."""
        path = self.dir / "cells" / f"{key}.json"
        path.parent.mkdir(exist_ok=True)
        write_atomic(path, json.dumps(doc, indent=1))
        return path

    def outputs_path(self, version: str, series: str | None = None) -> Path:
        """The saved outputs of one probe (`series` tells apart several probes of one release)."""
        return self.dir / "outputs" / (f"{version}-{series}.npz" if series else f"{version}.npz")

    def work_dir(self, name: str) -> Path:
        """Scratch space of one probe, removed by the probe when it ends."""
        return self.dir / "work" / name

    def subdir(self, name: str) -> Path:
        """A directory of files one step makes for this run (traces, a patched model...)."""
        path = self.dir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def save_document(self, name: str, doc: dict) -> Path:
        """A JSON document next to the probes (explanation, options, repeat, mitigation)."""
        path = self.dir / f"{name}.json"
        write_atomic(path, json.dumps(doc, indent=1))
        return path

    def save_file(self, name: str, content: str | bytes) -> Path:
        """A file made for this run (the repro script, a reduced model)."""
        path = self.dir / name
        write_atomic(path, content)
        return path

    def document(self, name: str) -> dict | None:
        try:
            return json.loads((self.dir / f"{name}.json").read_text())
        except (OSError, ValueError):
            return None

    def discard_if_unused(self) -> None:
        """Remove a run directory that this command opened and nothing was written into."""
        manifest = self.manifest() or {}
        if len(manifest.get("commands", [])) > 1 or any(p.name not in (MANIFEST, "outputs") for p in self.dir.iterdir()):
            return
        try:
            (self.dir / MANIFEST).unlink()
            (self.dir / "outputs").rmdir()
            self.dir.rmdir()
        except OSError:
            pass


def _cut_torn_tail(fd: int) -> None:
    """Truncate the file after its last complete line."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    tail = max(0, size - (1 << 20))
    chunk = os.pread(fd, size - tail, tail)
    os.ftruncate(fd, tail + chunk.rfind(b"\n") + 1)
