"""The results store: one directory per run, every probe written the moment it ends.

    results/<run-id>/manifest.json   what was run: command, digests, platform
    results/<run-id>/probes.jsonl    one JSON line per finished probe (append-only)
    results/<run-id>/quarantine.jsonl  lines set aside by `merge --quarantine` (not probe records)
    results/<run-id>/probes.lock     the run's write lock (flock): held by every writer of the two above
    results/<run-id>/probing/        <version>[-<series>].lock: held while a release is probed (probe_lock)
    results/<run-id>/outputs/        each probe's outputs (.npz), for diffs and references
    results/<run-id>/cells/          the latest summary of each search over this run
    results/<run-id>/traces/         traces and diffs (`bisect trace`, `diff`, `--explain`)
    results/<run-id>/explanation.json  what changed at the boundary (trace diff, suspect node)
    results/<run-id>/<name>.json     triage documents (options.json, repeat.json, mitigation.json)
    results/<run-id>/<name>/         files a triage step makes (a patched model, the repro script)
    results/<run-id>/repro-batch.zip  what the report's repro.py reads from beside it, when too big to embed
    results/<run-id>/questions/<key>/  report.md, repro.py (and repro-batch.zip) of a question other than the
                                     one the run answers by default, so that asking it never overwrites those
    results/<run-id>/drift.svg       how the run's numbers move across releases (`bisect drift`)
    results/<compare-run>/compare.json  `bisect compare --from --to`: pairs release by release (a run of its
                                     own, without probes: each pair's probes are in that pair's run)

Only this module decides where those files go; the rest asks the store.

A line of probes.jsonl that is not a probe record is never passed over in
silence: `records()` refuses it (HarnessError naming the file and the line),
`read()` hands it to the caller to judge (merge sets it aside, the dashboard
leaves the run out). The one expected damage is a last line cut off mid-write
(a crash, a full disk), with no newline: it is reported once (TornLineWarning)
and cut off by the next append; a last line that is a whole record and lacks
only its newline is a record.

Writers of one run in several processes at once (a search and a merge, two
merges, the probes of `--jobs` in threads) take the run's lock (`lock()`, a
flock on probes.lock) around each write: the check of the last line and the
append, a line set aside, the rewrite without unreadable lines. Under the lock
a last line without its newline is a write cut off, never another writer's
line still on its way. A caller whose write depends on what it read (merge
adds only the records not there yet) holds `lock()` across both. Readers take
no lock: the last line a reader sees may be a write still under way, reported
as torn and left out of that read.

The run id is derived from what decides a probe's outcome (model and batch
digests, target, backend, session options), so running the same command
again, or another range over the same model, reuses every finished probe.
Two such runs at once do too: a release's probe is looked up, made and
appended under that release's lock in the run (`probe_lock`), so the second
run waits for the first's probe and reuses it; a holder that dies lets go.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shlex
import shutil
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness import __version__
from harness.errors import HarnessError, UsageError
from harness.releases.credentials import redact
from harness.results.evidence import (
    MAX_RECORD_BYTES,
    RUN_ID_RE,
    CellDocument,
    CompareDocument,
    EvidenceError,
    ProbeRecord,
    RunManifest,
    loads,
)
from harness.results.locking import file_lock

MANIFEST = "manifest.json"
PROBES = "probes.jsonl"
QUARANTINE = "quarantine.jsonl"
LOCK = "probes.lock"  # flock'd by every writer of probes.jsonl and quarantine.jsonl
PROBING = "probing"  # <version>[-<series>].lock: flock'd from a probe's look-up to its record's append
EXPLANATION = "explanation"
REPORT = "report.md"  # the upstream report as `bisect report` last wrote it
REPRO = "repro.py"  # the report's repro script
REPRO_JS = "repro.mjs"  # the repro script of a run of the node or web binding, run by Node.js on that binding
REPRO_BATCH = "repro-batch.zip"  # the parts too big for a report, beside the script: an .npz (a zip) named so GitHub takes it as an attachment
OUTPUTS = "outputs"  # <version>[-<series>].npz: each probe's outputs
CELLS = "cells"  # <cell-key>.json: the latest run document of each search over the run
TRACES = "traces"  # <version>.json traces, diff-<a>-<b>.json, headroom charts
REDUCED = "reduced"  # the reduction's own run: model.onnx, inputs.npz, reduce.json and its probes
PROFILE = "profile.json"  # the slowdown boundary pair under onnxruntime's profiler (harness.explain.profile)
BLAME = "blame"  # below the release: its probes, each release's optimized graph and session log, blame.json
COMPARE = "compare"  # compare.json, and the `triage` of its run's key
QUESTIONS = "questions"  # questions/<key>/: the report files of a question the run does not answer by default
WORK = "work"  # where earlier versions kept a probe's scratch space (probes now use the system's temp dir)
SIDE_DIRS = (CELLS, TRACES)  # small JSON files kept next to probes.jsonl (copied by merge and the dashboard)
# remade from the whole evidence (compare.json from its pairs' runs): merge keeps the newer copy (mtime)
SIDE_FILES = (REPORT, REPRO, REPRO_JS, REPRO_BATCH, f"{COMPARE}.json", PROFILE)


def read_manifest(run_dir: Path) -> dict:
    """A run directory's manifest, refused (UsageError) when unreadable or without a run key."""
    try:
        doc = json.loads((Path(run_dir) / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{run_dir}: unreadable {MANIFEST} ({exc})") from None
    try:
        return RunManifest.parse(doc).raw
    except EvidenceError as exc:
        raise UsageError(f"{run_dir}: {MANIFEST}: {exc}; not a results directory") from None


def read_cell_document(path: Path) -> CellDocument:
    """One run document under cells/, refused (EvidenceError) when it cannot be read or is not of its schema's
    shape; OSError when the file cannot be opened."""
    try:
        doc = loads(Path(path).read_bytes())
    except ValueError as exc:
        raise EvidenceError("cell document", "", str(exc)) from None
    return CellDocument.parse(doc)


def read_compare_document(run_dir: Path) -> CompareDocument:
    """The compare document of a run (compare.json), refused (EvidenceError) when it cannot be read or is not of
    its schema's shape; OSError when the file cannot be opened."""
    try:
        doc = loads((Path(run_dir) / f"{COMPARE}.json").read_bytes())
    except ValueError as exc:
        raise EvidenceError("compare document", "", str(exc)) from None
    return CompareDocument.parse(doc)


def run_id_for(name: str, key: dict) -> str:
    """model-arch-digest; a key that names a package or provider other than the default (harness.releases.packages)
    also names them: model-package-ep-arch-digest."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    package = f"{key['package']}-{key.get('ep', 'cpu')}-" if key.get("package") else ""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in f"{name}-{package}")
    return f"{safe}{key.get('arch', 'any')}-{digest}"


def write_atomic(path: Path, content: str | bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb" if isinstance(content, bytes) else "w") as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class TornLineWarning(UserWarning):
    """probes.jsonl ends in a line cut off mid-write: left out, said once."""


@dataclass(frozen=True)
class BadLine:
    """A line of probes.jsonl that is not a probe record."""

    path: Path
    line: int  # 1-based
    raw: str  # the line's text; bytes that are not UTF-8 kept as surrogate escapes
    why: str
    torn: bool = False  # the last line, with no newline: a write cut off

    def entry(self) -> dict:
        """What the quarantine file keeps of it."""
        return {"source": str(self.path), "line": self.line, "raw": self.raw, "why": self.why, "torn": self.torn}

    def __str__(self) -> str:
        return f"{self.path} line {self.line}: {self.why}"


@dataclass
class Evidence:
    """Everything probes.jsonl holds: its records, and the lines that are not records."""

    path: Path
    records: list[dict] = field(default_factory=list)
    corrupt: list[BadLine] = field(default_factory=list)  # complete lines (newline-terminated)
    torn: BadLine | None = None  # the last line, cut off mid-write

    @property
    def bad(self) -> list[BadLine]:
        return self.corrupt + ([self.torn] if self.torn else [])


_reported_torn: set[tuple[str, int]] = set()
_held = threading.local()  # .runs: the run directories whose lock this thread holds


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
            # the command line as typed may hold a source's credentials: kept redacted, as every record holds them
            manifest["commands"].append({"argv": [redact(str(a)) for a in command], "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            write_atomic(store.dir / MANIFEST, json.dumps(manifest, indent=1))
        except OSError as exc:
            raise HarnessError(f"cannot write results to {store.dir}: {exc.strerror or exc}") from None
        return store

    def manifest(self) -> dict | None:
        try:
            return read_manifest(self.dir)
        except UsageError:
            return None

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the run's write lock (probes.lock; other processes and threads wait for it). Every writer
        here takes it; a caller holds it across a read and the writes that depend on it. Reentrant in a thread."""
        runs = _held.__dict__.setdefault("runs", set())
        key = os.path.realpath(self.dir)
        if key in runs:
            yield
            return
        with file_lock(self.dir / LOCK):
            runs.add(key)
            try:
                yield
            finally:
                runs.discard(key)

    @contextmanager
    def probe_lock(self, version: str, series: str | None = None, on_wait: Callable[[str], None] | None = None,
                   stop: threading.Event | None = None) -> Iterator[None]:
        """Hold the lock on probing `version` (in `series`) in this run: other processes and threads wait for it
        (`on_wait` hears when they must; a set `stop` ends the wait in LockWaitStopped). The run directory is the
        rest of a probe's key (model, batch, options, provider, target), so the lock is the record's own key."""
        path = self.dir / PROBING / f"{_probe_name(version, series)}.lock"
        try:
            path.parent.mkdir(exist_ok=True)
        except OSError as exc:
            raise HarnessError(f"cannot write results to {self.dir}: {exc.strerror or exc}") from None
        with file_lock(path, on_wait, stop):
            yield

    def append(self, record: dict) -> None:
        """Append one probe as a single write, flushed to disk before returning, under the run's lock.

        A last line torn by an earlier failure (a full disk, a crash mid-write)
        is cut off first, so it can never swallow the record written after it;
        a last line that is a whole record lacking only its newline gets it. If
        this write fails, what it wrote is taken back (when it is still the end
        of the file: a writer that does not take the lock is never cut).
        A record that readers would refuse (see `read`) is refused here, and nothing is written.
        """
        line = json.dumps(record, sort_keys=True).encode()
        why = _parse(line)[1]
        if why:
            raise HarnessError(f"{self.dir / PROBES}: not appended, a reader would refuse it: {why}")
        with self.lock():
            self._append(line + b"\n")

    def _append(self, line: bytes) -> None:
        fd = os.open(self.dir / PROBES, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _settle_tail(fd)
            written = 0
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(28, os.strerror(28))
                os.fsync(fd)
            except OSError:
                size = os.fstat(fd).st_size
                if written and size >= written and os.pread(fd, written, size - written) == line[:written]:
                    os.ftruncate(fd, size - written)
                raise
        finally:
            os.close(fd)

    def read(self) -> Evidence:
        """probes.jsonl as it is: the records, and every line that is not one (for the caller to judge)."""
        path = self.dir / PROBES
        ev = Evidence(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return ev
        except OSError as exc:
            raise HarnessError(f"cannot read {path}: {exc.strerror or exc}") from None
        lines = data.split(b"\n")
        last = lines.pop()  # b"" when the file ends with a newline
        for n, raw in enumerate(lines, 1):
            if not raw.strip():
                continue  # an empty line holds nothing
            rec, why = _parse(raw)
            if why:
                ev.corrupt.append(BadLine(path, n, raw.decode("utf-8", "surrogateescape"), why))
            else:
                ev.records.append(rec)
        if last:
            rec, why = _parse(last)
            if why:
                ev.torn = BadLine(path, len(lines) + 1, last.decode("utf-8", "surrogateescape"),
                                  f"cut off mid-write ({len(last)} bytes, no newline; {why})", torn=True)
            else:
                ev.records.append(rec)  # a whole record that lacks only its newline
        return ev

    def records(self) -> list[dict]:
        """Every probe record, in file order.

        A complete line that is not a record stops the reader (HarnessError naming
        the file and the line); a last line cut off mid-write is left out and
        reported once (TornLineWarning), since resuming after a crash must work.
        """
        ev = self.read()
        if ev.corrupt:
            bad = ev.corrupt[0]
            more = f" (and {len(ev.corrupt) - 1} more)" if len(ev.corrupt) > 1 else ""
            raise HarnessError(f"{bad}{more}; a record that cannot be read is not skipped: set it aside with "
                               f"`{shlex.join(['bisect', 'merge', str(self.dir.parent), str(self.dir), '--quarantine'])}`")
        if ev.torn and (str(ev.path), len(ev.torn.raw)) not in _reported_torn:
            _reported_torn.add((str(ev.path), len(ev.torn.raw)))
            warnings.warn(TornLineWarning(f"{ev.torn}: left out; the next probe recorded cuts it off"), stacklevel=2)
        return ev.records

    def set_aside(self, bad: list[BadLine]) -> int:
        """Keep lines that are not records in quarantine.jsonl (once each); how many were new."""
        path = self.dir / QUARANTINE
        with self.lock():
            try:
                have = {json.dumps(json.loads(x), sort_keys=True) for x in path.read_text().splitlines() if x.strip()}
            except FileNotFoundError:
                have = set()
            except (OSError, ValueError) as exc:
                raise HarnessError(f"cannot read {path}: {exc}") from None
            new = [e for e in (json.dumps(b.entry(), sort_keys=True) for b in bad) if e not in have]
            if new:
                with open(path, "a") as f:
                    f.write("".join(e + "\n" for e in dict.fromkeys(new)))
                    f.flush()
                    os.fsync(f.fileno())
        return len(dict.fromkeys(new))

    def drop_unreadable(self, ev: Evidence) -> None:
        """Rewrite probes.jsonl without the lines of `ev.bad` (set them aside first): only for `--quarantine`.

        A line is dropped only if it is still the one `ev` read at its place; read `ev` under `lock()`, so that
        a line another writer had not finished is not taken for a torn one."""
        drop = {b.line: b.raw for b in ev.bad}
        with self.lock():
            lines = ev.path.read_bytes().split(b"\n")
            if lines[-1] == b"":
                lines.pop()
            kept = [x + b"\n" for n, x in enumerate(lines, 1) if drop.get(n) != x.decode("utf-8", "surrogateescape")]
            write_atomic(ev.path, b"".join(kept))

    def save_summary(self, key: str, doc: dict) -> Path:
        """The latest summary of one search over this run (a matrix cell, or a `bisect run`), in cells/KEY.json."""
        if len(key) > 200 or not RUN_ID_RE.match(key):  # a key is one file name, as a run id is one directory's
            raise HarnessError(f"{key[:64]!r}: not a summary key (one file name: no /, not . or ..)")
        path = self.dir / CELLS / f"{key}.json"
        path.parent.mkdir(exist_ok=True)
        write_atomic(path, json.dumps(doc, indent=1))
        return path

    def outputs_path(self, version: str, series: str | None = None) -> Path:
        """The saved outputs of one probe (`series` tells apart several probes of one release). The version and
        series may come from evidence read back (a record, a question's reference): their name is one file name
        in outputs/, or refused."""
        return self.dir / OUTPUTS / f"{_probe_name(version, series)}.npz"

    def outputs(self, version: str, series: str | None = None) -> dict | None:
        """The saved outputs of one probe as arrays by name, or None when none were saved."""
        return load_outputs(self.outputs_path(version, series))

    def question_files(self, key: str) -> "RunStore":
        """Where the report files of the question `key` go when it is not the one the run answers by default:
        questions/<key>/ (made), a store of its own for save_file. The key may come from evidence read back (a
        run document's file name): one file name, or refused."""
        if len(key) > 200 or not RUN_ID_RE.match(key):
            raise HarnessError(f"{key[:64]!r}: not a question's key (one file name: no /, not . or ..)")
        return RunStore(self.subdir(f"{QUESTIONS}/{key}"))

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

    def remove_file(self, name: str) -> None:
        """A file made for this run that no longer holds (the attachment of an earlier repro script)."""
        (self.dir / name).unlink(missing_ok=True)

    def chart_path(self, name: str) -> Path:
        """Where a chart of the whole run goes (drift.svg); the caller draws it."""
        return self.dir / name

    def document(self, name: str) -> dict | None:
        try:
            return json.loads((self.dir / f"{name}.json").read_text())
        except (OSError, ValueError):
            return None

    def discard_if_unused(self) -> None:
        """Remove a run directory that this command opened and nothing was written into."""
        manifest = self.manifest() or {}
        if len(manifest.get("commands", [])) > 1 or any(p.name not in (MANIFEST, OUTPUTS, LOCK, PROBING)
                                                        for p in self.dir.iterdir()):
            return
        try:
            (self.dir / LOCK).unlink(missing_ok=True)
            shutil.rmtree(self.dir / PROBING, ignore_errors=True)
            (self.dir / MANIFEST).unlink()
            (self.dir / "outputs").rmdir()
            self.dir.rmdir()
        except OSError:
            pass


def _probe_name(version: str, series: str | None) -> str:
    """The file name (without suffix) of one probe's outputs and lock. The version and series may come from
    evidence read back (a record, a question's reference): the name is one file name, or refused."""
    name = f"{version}-{series}" if series else version
    if len(name) > 250 or not RUN_ID_RE.match(name):
        raise HarnessError(f"{name[:64]!r}: not the name of a probe's outputs (one file name in {OUTPUTS}/)")
    return name


def _parse(raw: bytes) -> tuple[dict | None, str | None]:
    """(record, None), or (None, why the line is not a probe record)."""
    try:
        return ProbeRecord.parse(loads(raw, MAX_RECORD_BYTES)).raw, None
    except (ValueError, EvidenceError) as exc:
        return None, str(exc)


def _settle_tail(fd: int) -> None:
    """Make the file end with a newline: complete a last line that is a whole record, cut off a torn one."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    cut, pos = 0, size
    while pos > 0:  # the start of the last line
        start = max(0, pos - (1 << 16))
        i = os.pread(fd, pos - start, start).rfind(b"\n")
        if i >= 0:
            cut = start + i + 1
            break
        pos = start
    if size - cut <= MAX_RECORD_BYTES and _parse(os.pread(fd, size - cut, cut))[1] is None:
        if os.write(fd, b"\n") != 1:
            raise OSError(28, os.strerror(28))
    else:
        os.ftruncate(fd, cut)


def load_outputs(path: Path) -> dict | None:
    """Arrays by name from a saved outputs .npz, or None when there is no such file, or when it is a link (a
    run's outputs are its own files: none is read through a link an artifact brought)."""
    import numpy as np  # here, not at import: readers of history alone need no numpy

    if path.is_symlink() or not path.is_file():
        return None
    with np.load(path) as data:
        return {k: data[k] for k in data.files}
