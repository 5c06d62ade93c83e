"""The results history: append-only probe records across nights and machines.

Rules (results/<run-id>/probes.jsonl is the history; nothing here deletes or rewrites a line):

* A record's identity is the sha256 of its canonical JSON (sorted keys). Two
  probes of the same release never share it (they differ at least in
  `finished` and `seconds`), and the same probe copied twice always does: that
  is what makes `merge` idempotent.
* The verdict of a release is read from its NEWEST record: the greatest
  (`finished`, position in the file). `--refresh` re-probes and appends, so
  the older records stay as history and the newest one decides.
* `merge` folds run directories from other machines into a results root: a run
  directory whose run id exists there must carry the same manifest key (model
  and batch digests, outputs, session options, runner provenance); otherwise
  the whole merge is refused before anything is written.
* A line of a source's (or the root's) probes.jsonl that is not a probe record
  refuses the merge too (HarnessError naming the file and the line), unless
  `quarantine`: then it is set aside in the root run's quarantine.jsonl (source
  file, line number, raw text) and counted, and a root run's own such lines are
  moved there out of its probes.jsonl. A last line cut off mid-write is not
  refused: it is counted as torn (and set aside under `quarantine`).

Run directories from other machines are untrusted evidence; what of them is
read, and never through a link, is harness.results.runs. Merge also:

* names a merged run by its manifest's run id (else its directory's resolved
  name), which must be a run id (evidence.RUN_ID_RE): `merge ROOT .` and
  `merge ROOT ci/sub/..` name the run they resolve to; every path it writes
  lies inside ROOT once resolved (runs.inside).
* merges a run whole or not at all: its new files are written in
  ROOT/.merging (runs.STAGING) first; a new run is then renamed into place in
  one step, an existing one gets its files renamed into place and its records
  appended last. A failure on the way (a full disk, a read-only root) takes
  back what was put in place, and the run is as it was (HarnessError).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError, UsageError
from harness.results.evidence import RUN_ID_RE
from harness.results.runs import (
    EVIDENCE_DIRS,
    STAGING,
    copy_file,
    copy_into,
    files_in,
    inside,
    is_run,
    refusal,
    run_dirs,
    why,
)
from harness.results.store import (
    CELLS,
    MANIFEST,
    OUTPUTS,
    PROBES,
    QUARANTINE,
    SIDE_FILES,
    Evidence,
    RunStore,
    read_cell_document,
    read_manifest,
    write_atomic,
)


def record_id(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def newest_key(indexed: tuple[int, dict]) -> tuple[str, int]:
    i, rec = indexed
    return (rec.get("finished") or "", i)


def own_records(records: list[dict]) -> list[dict]:
    """A run's own search probes: triage combos and series (repeats, references) left out."""
    return [r for r in records if not (r.get("combo_id") or r.get("series"))]


def saved_probe(records: list[dict], version: str, series: str | None = None) -> dict | None:
    """The newest search probe of `version` in `series` (None: the run's own), the record a run reuses."""
    return latest_by_version([r for r in records if r["version"] == version and not r.get("combo_id")
                              and r.get("series") == series]).get(version)


def latest_by_version(records: list[dict]) -> dict[str, dict]:
    """version -> its newest record (greatest `finished`, then the later line)."""
    best: dict[str, tuple[tuple[str, int], dict]] = {}
    for i, rec in enumerate(records):
        k = newest_key((i, rec))
        cur = best.get(rec["version"])
        if cur is None or k >= cur[0]:
            best[rec["version"]] = (k, rec)
    return {v: rec for v, (_, rec) in best.items()}


@dataclass
class RefreshStore(RunStore):
    """A run store that hides the records written before a `--refresh`.

    The Driver sees only what this invocation probes, so every release is probed
    again; the new records are appended after the old ones (nothing is deleted).
    """

    skip: int = 0

    @classmethod
    def since_now(cls, run_dir: Path) -> "RefreshStore":
        return cls(run_dir, len(RunStore(run_dir).records()))

    def records(self) -> list[dict]:
        return super().records()[self.skip:]


def check_consistent(run_dir: Path, manifest: dict) -> None:
    """The manifest's key agrees with the model and batch digests it records."""
    key = manifest["key"]
    for part in ("model", "batch"):
        recorded = (manifest.get(part) or {}).get("digest")
        if recorded is not None and recorded != key.get(part):
            raise UsageError(f"{run_dir}: {part} digest {recorded[:12]} differs from the run key's "
                             f"{str(key.get(part))[:12]}; refusing to merge")


def _key_difference(a: dict, b: dict) -> str:
    fields = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    parts = []
    for k in fields[:3]:
        va, vb = a.get(k), b.get(k)
        if isinstance(va, str) and isinstance(vb, str) and len(va) > 16:
            va, vb = va[:12], vb[:12]
        parts.append(f"{k} {va} vs {vb}")
    return "; ".join(parts)


@dataclass
class MergeReport:
    run_id: str
    source: Path
    added: int = 0
    already: int = 0
    created: bool = False
    files: list[str] = field(default_factory=list)
    quarantined: int = 0  # lines that are not records, set aside in `quarantine`
    torn: list[str] = field(default_factory=list)  # last lines cut off mid-write, one sentence each
    quarantine: Path | None = None

    def doc(self) -> dict:
        return {"run_id": self.run_id, "source": str(self.source), "added": self.added, "already": self.already,
                "created": self.created, "files": self.files, "quarantined": self.quarantined,
                "torn": len(self.torn), "quarantine": str(self.quarantine) if self.quarantine else None}


def merge(root: Path, sources: list[Path], quarantine: bool = False) -> list[MergeReport]:
    """Fold the run directories found in `sources` into `root`.

    All-or-nothing on key conflicts, on links and run ids and, unless
    `quarantine`, on a line that is not a probe record; each run is then merged
    whole or not at all (see the module's rules).
    """
    root = Path(root).resolve()
    if is_run(root):
        raise UsageError(f"{root}: a run directory, not a results root; merge into the folder that holds it")
    plan: list[tuple[Path, str, dict]] = []  # (source run, its run id in the root, its manifest)
    own: list[Path] = []  # runs of the root named as sources: only their own lines are checked
    by_id: dict[str, dict] = {}
    for src in sources:
        src = Path(src)
        if not src.is_dir():
            raise UsageError(f"{src}: no such directory")
        dirs = run_dirs(src)
        if not dirs:
            raise UsageError(f"{src}: no run directories (with {MANIFEST}) in it")
        for d in dirs:
            if d.parent == root:
                own.append(d)  # already in the root
                continue
            if root.is_relative_to(d):
                raise UsageError(f"{root} lies inside the run {d}; refusing to merge a run into itself")
            m = read_manifest(d)
            check_consistent(d, m)
            run_id = _run_id(d, m)
            dst = inside(root, root / run_id)
            other = by_id.get(run_id)
            if other is None and os.path.lexists(dst):
                if not is_run(dst):
                    raise UsageError(f"{dst} exists and is not a run directory (no {MANIFEST}); refusing to merge")
                if (link := refusal(dst)):
                    raise UsageError(f"{link[0]}: {link[1]}; refusing to merge into {dst}")
                other = read_manifest(dst)
            if other is not None and other["key"] != m["key"]:
                raise UsageError(f"{d}: run {run_id} exists with another manifest key "
                                 f"({_key_difference(other['key'], m['key'])}); refusing to merge")
            by_id[run_id] = m
            plan.append((d, run_id, m))
    evidence = {d: RunStore(d).read() for d, _, _ in plan}
    targets = list(dict.fromkeys([*own, *(root / i for _, i, _ in plan if (root / i / PROBES).is_file())]))
    checked = list(evidence.values()) + [RunStore(t).read() for t in targets]
    corrupt = [b for ev in checked for b in ev.corrupt]
    if corrupt and not quarantine:
        more = f" (and {len(corrupt) - 1} more)" if len(corrupt) > 1 else ""
        raise HarnessError(f"{corrupt[0]}{more}; nothing merged (--quarantine sets such lines aside "
                           f"in the run's {QUARANTINE} and merges the rest)")
    repaired: set[Path] = set()
    try:
        root.mkdir(parents=True, exist_ok=True)
        reports = [_repair(RunStore(t), MergeReport(t.name, t), quarantine, repaired) for t in own]
    except OSError as exc:
        raise HarnessError(f"cannot write to {root}: {why(exc)}; nothing merged") from None
    reports = [r for r in reports if r.quarantined or r.torn]
    for d, run_id, m in plan:
        try:
            reports.append(_merge_one(root, d, run_id, m, evidence[d], quarantine, repaired))
        except HarnessError as exc:
            done = sum(1 for r in reports if r.added or r.files or r.created)
            raise HarnessError(f"{exc}" + (f" ({done} run(s) merged before it stay merged)" if done else "")) from None
    return reports


def _run_id(run_dir: Path, manifest: dict) -> str:
    """The name of a source run in the root: its manifest's run id, else its directory's; refused unless a run id."""
    run_id = manifest.get("run_id") or run_dir.name
    if len(run_id) > 200 or not RUN_ID_RE.match(run_id) or run_id == STAGING:
        raise UsageError(f"{run_dir}: {run_id[:64]!r} is not a run id; refusing to merge")
    return run_id


def _repair(store: RunStore, rep: MergeReport, quarantine: bool, repaired: set[Path]) -> MergeReport:
    """A root run's own lines that are not records: moved to its quarantine file (`quarantine`), or
    reported; once per run."""
    if store.dir in repaired:
        return rep
    repaired.add(store.dir)
    with store.lock():  # read under the lock: a line another writer is still writing is not torn
        ev = store.read()
        if _set_aside(store, ev, rep, quarantine):
            store.drop_unreadable(ev)
        elif ev.corrupt:  # refused before anything was written; only a concurrent writer gets here
            raise HarnessError(f"{ev.corrupt[0]}; merge stopped")
    return rep


def _set_aside(store: RunStore, ev: Evidence, rep: MergeReport, quarantine: bool, shown: Path | None = None) -> bool:
    """Note a torn last line of `ev`; under `quarantine`, keep every line of `ev` that is not a
    record in `store`'s quarantine file (reported as `shown`'s, where `store` stages it). Whether any line
    was set aside."""
    if ev.torn:
        rep.torn.append(f"{ev.torn}: {'set aside' if quarantine else 'left out'}")
    if not (quarantine and ev.bad):
        return False
    store.set_aside(ev.bad)
    rep.quarantined += len(ev.bad)
    rep.quarantine = (shown or store.dir) / QUARANTINE
    return True


def _merge_one(root: Path, src: Path, run_id: str, m: dict, ev: Evidence, quarantine: bool,
               repaired: set[Path]) -> MergeReport:
    """Merge one run whole, or leave it as it was (HarnessError): its files are written in a staging area
    under ROOT/STAGING first, then a new run is renamed into place, an existing one gets them put in place
    and its records appended; a failure takes back what was put in place."""
    dst = inside(root, root / run_id)
    rep = MergeReport(run_id, src, created=not is_run(dst))
    staging = inside(root, root / STAGING)
    try:
        staging.mkdir(exist_ok=True)
        area = Path(tempfile.mkdtemp(prefix=f"{run_id[:64]}.", dir=staging))
    except OSError as exc:
        raise HarnessError(f"cannot merge {src} into {dst}: {why(exc)}; nothing merged") from None
    undone: list[str] = []  # why what was put in place could not be taken back
    try:
        try:
            if rep.created and not _merge_new(root, src, dst, m, ev, quarantine, rep, area):
                # another merge made the run meanwhile: merge into it as into any run the root has
                shutil.rmtree(area / "run", ignore_errors=True)
                rep = MergeReport(run_id, src, created=False)
            if not rep.created:
                _merge_existing(root, src, dst, m, ev, quarantine, repaired, rep, area, undone)
        except OSError as exc:
            left = (f"the run may be half merged: taking it back failed ({undone[0]}); its former files are "
                    f"kept in {area}" if undone else "the run is as it was")
            raise HarnessError(f"cannot merge {src} into {dst}: {why(exc)}; {left}") from None
    finally:
        if not undone:
            shutil.rmtree(area, ignore_errors=True)
        try:
            staging.rmdir()  # unless another merge is staging there too
        except OSError:
            pass
    return rep


def _new_records(have: set[str], ev: Evidence) -> list[dict]:
    """The records of `ev` not in `have` (record ids), oldest first, each once."""
    new, seen = [], set(have)
    for _, rec in sorted(enumerate(ev.records), key=newest_key):
        if record_id(rec) not in seen:
            seen.add(record_id(rec))
            new.append(rec)
    return new


def _files_to_copy(src: Path, dst: Path) -> list[str]:
    """What of `src` (relative paths) `dst` gains: outputs and side files it lacks, a cell summary newer
    than its own (`generated`), a report or repro script newer than its own (mtime). Subfolders of those
    folders are not merged."""
    rels = [rel for sub in EVIDENCE_DIRS for rel in files_in(src, sub) if not (dst / rel).exists()
            or (sub == CELLS and _generated(src / rel) > _generated(dst / rel))]
    for name in SIDE_FILES:
        f, target = src / name, dst / name
        if f.is_file() and (not target.is_file() or f.stat().st_mtime > target.stat().st_mtime):
            rels.append(name)
    return rels


def _merge_new(root: Path, src: Path, dst: Path, m: dict, ev: Evidence, quarantine: bool, rep: MergeReport,
               area: Path) -> bool:
    """A run the root lacks: made whole in the staging area, then renamed into place in one step. False when
    the name was taken meanwhile (another merge of the same run), with nothing changed."""
    work = area / "run"
    (work / OUTPUTS).mkdir(parents=True)
    write_atomic(work / MANIFEST, json.dumps(m, indent=1))
    store = RunStore(work)
    _set_aside(store, ev, rep, quarantine, shown=dst)
    new = _new_records(set(), ev)
    for rec in new:
        store.append(rec)
    rep.added, rep.already = len(new), len(ev.records) - len(new)
    rep.files = _files_to_copy(src, dst)
    copy_into(src, work, rep.files, root)
    try:
        os.rename(work, dst)  # fails, and changes nothing, if the name was taken meanwhile
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ENOTEMPTY) and is_run(dst):
            return False
        raise
    return True


def _merge_existing(root: Path, src: Path, dst: Path, m: dict, ev: Evidence, quarantine: bool,
                    repaired: set[Path], rep: MergeReport, area: Path, undone: list[str]) -> None:
    """A run the root has: its new files staged, put in place, then its new records appended, all under the
    run's lock. On a failure what was put in place is taken back (`undone` hears why that failed, if it did)."""
    store = RunStore(dst)
    # the run's lock across reading what it has and putting in what it gains: a writer (a probe, another merge)
    # at the same time neither loses its line nor gets a record added twice
    with store.lock():
        _repair(store, rep, quarantine, repaired)
        work = area / "run"
        work.mkdir()
        staged: list[str] = []
        # manifest: union of the commands, earliest creation
        cur = read_manifest(dst)
        cmds = list(cur.get("commands", []))
        for c in m.get("commands", []):
            if c not in cmds:
                cmds.append(c)
        merged = {**m, **cur, "commands": sorted(cmds, key=lambda c: (c.get("time", ""), json.dumps(c)))}
        merged["created"] = min(cur.get("created") or "~", m.get("created") or "~")
        # quarantine: the root run's file with the source's lines that are not records added
        if quarantine and ev.bad and (dst / QUARANTINE).is_file():
            copy_file(dst / QUARANTINE, work / QUARANTINE)
        if _set_aside(RunStore(work), ev, rep, quarantine, shown=dst):
            staged.append(QUARANTINE)
        rep.files = _files_to_copy(src, dst)
        copy_into(src, work, rep.files, root)
        staged += rep.files
        if merged != cur:
            write_atomic(work / MANIFEST, json.dumps(merged, indent=1))
            staged.append(MANIFEST)
        new = _new_records({record_id(r) for r in store.read().records}, ev)
        rep.added, rep.already = len(new), len(ev.records) - len(new)
        targets = [inside(root, dst / rel) for rel in staged]
        placed: list[tuple[Path, Path | None]] = []  # (target, its former file kept in the area, or None: new)
        made: list[Path] = []  # folders made in dst
        appended: list[dict] = []
        try:
            for rel, target in zip(staged, targets):
                if not target.parent.is_dir():
                    target.parent.mkdir()
                    made.append(target.parent)
                old = None
                if os.path.lexists(target):
                    old = area / "old" / rel
                    old.parent.mkdir(parents=True, exist_ok=True)
                    try:
                        os.link(target, old)  # the former file stays in place until the new one replaces it
                    except OSError:
                        os.rename(target, old)
                os.replace(work / rel, target)
                placed.append((target, old))
            for rec in new:
                store.append(rec)
                appended.append(rec)
        except BaseException:
            try:
                if appended and not _take_back(store.dir / PROBES, appended):
                    undone.append(f"{len(appended)} record(s) appended are no longer the last lines of {PROBES}")
                for target, old in reversed(placed):
                    if old is None:
                        target.unlink()
                    else:
                        os.replace(old, target)
                for d in reversed(made):
                    d.rmdir()
            except OSError as exc:
                undone.append(why(exc))
            raise


def _take_back(path: Path, ours: list[dict]) -> bool:
    """Cut the records `ours` off the end of probes.jsonl `path`, if they are still its last lines (no other
    writer appended after them): a merge that failed takes back what it appended, as `RunStore.append`
    takes back a write cut short. Whether they were."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines[-1]:  # not ended by a newline: something else was written after them
        return False
    lines.pop()
    tail = lines[-len(ours):]
    try:
        if len(tail) != len(ours) or [record_id(json.loads(x)) for x in tail] != [record_id(r) for r in ours]:
            return False
    except ValueError:
        return False
    with open(path, "r+b") as f:
        f.truncate(len(data) - sum(len(x) + 1 for x in tail))
        os.fsync(f.fileno())
    return True


def _generated(path: Path) -> str:
    try:
        return read_cell_document(path).generated or ""
    except (OSError, HarnessError):  # not a cell document: any other replaces it, and it replaces none
        return ""


def history_frame(root: Path, predicate: str = "nan-or-inf"):
    """Every probe record under `root` as one pandas DataFrame, judged under `predicate`,
    with `newest` marking the record that decides each (run, release)."""
    import pandas as pd

    from harness.verdicts import judge, parse_predicate

    pred = parse_predicate(predicate)
    rows = []
    for d in run_dirs(root):
        man = read_manifest(d)
        recs = RunStore(d).records()
        newest = {id(r) for r in latest_by_version(recs).values()}
        for r in recs:
            prov = r.get("provenance") or {}
            j = judge(r, pred)
            verdict, why = (None, None) if pred.needs_reference else (j["verdict"], j["why"])  # no reference here
            rows.append({
                "run_id": d.name, "model": (man.get("model") or {}).get("name"),
                "model_digest": man["key"].get("model"), "batch_digest": man["key"].get("batch"),
                "version": r["version"], "status": r.get("status"), "verdict": verdict, "why": why,
                "nan_rows": j["nan_rows"], "inf_rows": j["inf_rows"], "rows": j["rows"],
                "arch": prov.get("arch"), "backend": prov.get("backend"), "cpu": prov.get("cpu"),
                "python": prov.get("python"), "session_options": json.dumps(man["key"].get("session_options") or {},
                                                                             sort_keys=True),
                "seconds": r.get("seconds"), "finished": r.get("finished"), "record_id": record_id(r),
                "newest": id(r) in newest,
            })
    return pd.DataFrame(rows)
