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
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import HarnessError, UsageError
from harness.results.store import (
    CELLS,
    MANIFEST,
    PROBES,
    QUARANTINE,
    SIDE_DIRS,
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


def run_dirs(root: Path) -> list[Path]:
    """Run directories under `root` (or `root` itself if it is one), in name order."""
    root = Path(root)
    if (root / MANIFEST).is_file():
        return [root]
    found = []
    for manifest in sorted(root.glob(f"*/{MANIFEST}")) + sorted(root.glob(f"*/*/{MANIFEST}")) \
            + sorted(root.glob(f"*/*/*/{MANIFEST}")):
        found.append(manifest.parent)
    # a run directory is not searched inside for more runs
    out, seen = [], set()
    for d in found:
        if any(p in seen for p in d.parents):
            continue
        seen.add(d)
        out.append(d)
    return sorted(out, key=lambda d: (d.name, str(d)))


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

    All-or-nothing on key conflicts and, unless `quarantine`, on a line that is
    not a probe record (see the module's rules).
    """
    root = Path(root)
    plan: list[tuple[Path, dict]] = []
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
            if d.resolve().parent == root.resolve():
                own.append(root / d.name)  # already in the root
                continue
            m = read_manifest(d)
            check_consistent(d, m)
            other = by_id.get(d.name)
            if other is None and (root / d.name / MANIFEST).is_file():
                other = read_manifest(root / d.name)
            if other is not None and other["key"] != m["key"]:
                raise UsageError(f"{d}: run {d.name} exists with another manifest key "
                                 f"({_key_difference(other['key'], m['key'])}); refusing to merge")
            by_id[d.name] = m
            plan.append((d, m))
    evidence = {d: RunStore(d).read() for d, _ in plan}
    targets = list(dict.fromkeys([*own, *(root / d.name for d, _ in plan if (root / d.name / PROBES).is_file())]))
    checked = list(evidence.values()) + [RunStore(t).read() for t in targets]
    corrupt = [b for ev in checked for b in ev.corrupt]
    if corrupt and not quarantine:
        more = f" (and {len(corrupt) - 1} more)" if len(corrupt) > 1 else ""
        raise HarnessError(f"{corrupt[0]}{more}; nothing merged (--quarantine sets such lines aside "
                           f"in the run's {QUARANTINE} and merges the rest)")
    root.mkdir(parents=True, exist_ok=True)
    repaired: set[Path] = set()
    reports = [_repair(RunStore(t), MergeReport(t.name, t), quarantine, repaired) for t in own]
    return [r for r in reports if r.quarantined or r.torn] + \
        [_merge_one(root, d, m, evidence[d], quarantine, repaired) for d, m in plan]


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


def _set_aside(store: RunStore, ev: Evidence, rep: MergeReport, quarantine: bool) -> bool:
    """Note a torn last line of `ev`; under `quarantine`, keep every line of `ev` that is not a
    record in `store`'s quarantine file. Whether any line was set aside."""
    if ev.torn:
        rep.torn.append(f"{ev.torn}: {'set aside' if quarantine else 'left out'}")
    if not (quarantine and ev.bad):
        return False
    store.set_aside(ev.bad)
    rep.quarantined += len(ev.bad)
    rep.quarantine = store.dir / QUARANTINE
    return True


def _merge_one(root: Path, src: Path, m: dict, ev: Evidence, quarantine: bool, repaired: set[Path]) -> MergeReport:
    dst = root / src.name
    rep = MergeReport(src.name, src, created=not (dst / MANIFEST).is_file())
    (dst / "outputs").mkdir(parents=True, exist_ok=True)
    # manifest: union of the commands, earliest creation
    if rep.created:
        write_atomic(dst / MANIFEST, json.dumps(m, indent=1))
    else:
        cur = read_manifest(dst)
        cmds = list(cur.get("commands", []))
        for c in m.get("commands", []):
            if c not in cmds:
                cmds.append(c)
        merged = {**m, **cur, "commands": sorted(cmds, key=lambda c: (c.get("time", ""), json.dumps(c)))}
        merged["created"] = min(cur.get("created") or "~", m.get("created") or "~")
        if merged != cur:
            write_atomic(dst / MANIFEST, json.dumps(merged, indent=1))
    # probes: the root run's own unreadable lines first, then the records not there yet, oldest first
    store = RunStore(dst)
    _repair(store, rep, quarantine, repaired)
    _set_aside(store, ev, rep, quarantine)
    with store.lock():  # what is there already and what is added: one step, so merges at once add each once
        have = {record_id(r) for r in store.read().records}
        new = [(i, r) for i, r in enumerate(ev.records) if record_id(r) not in have]
        for _, rec in sorted(new, key=newest_key):
            if record_id(rec) in have:
                continue
            store.append(rec)
            have.add(record_id(rec))
            rep.added += 1
    rep.already = len(ev.records) - rep.added
    # outputs and side files: copy what is missing; a cell summary is replaced by a newer one
    for sub in ("outputs", *SIDE_DIRS):
        for f in sorted((src / sub).glob("*")) if (src / sub).is_dir() else []:
            if not f.is_file():
                continue
            target = dst / sub / f.name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, target)
                rep.files.append(f"{sub}/{f.name}")
            elif sub == CELLS and _generated(f) > _generated(target):
                write_atomic(target, f.read_text())
                rep.files.append(f"{sub}/{f.name}")
    for name in SIDE_FILES:
        f, target = src / name, dst / name
        if f.is_file() and (not target.is_file() or f.stat().st_mtime > target.stat().st_mtime):
            shutil.copy2(f, target)
            rep.files.append(name)
    return rep


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
