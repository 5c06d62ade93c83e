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
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import UsageError
from harness.results import MANIFEST, RunStore, write_atomic

SIDE_DIRS = ("cells", "traces")  # small JSON files kept next to probes.jsonl (copied by merge and the dashboard)


def record_id(record: dict) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def newest_key(indexed: tuple[int, dict]) -> tuple[str, int]:
    i, rec = indexed
    return (rec.get("finished") or "", i)


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


def read_manifest(run_dir: Path) -> dict:
    try:
        doc = json.loads((run_dir / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise UsageError(f"{run_dir}: unreadable {MANIFEST} ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("key"), dict):
        raise UsageError(f"{run_dir}: {MANIFEST} has no run key; not a results directory")
    return doc


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


def merge(root: Path, sources: list[Path]) -> list[MergeReport]:
    """Fold the run directories found in `sources` into `root`. All-or-nothing on key conflicts."""
    root = Path(root)
    plan: list[tuple[Path, dict]] = []
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
                continue  # already in the root
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
    root.mkdir(parents=True, exist_ok=True)
    return [_merge_one(root, d, m) for d, m in plan]


def _merge_one(root: Path, src: Path, m: dict) -> MergeReport:
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
    # probes: append the records not there yet, oldest first
    store = RunStore(dst)
    have = {record_id(r) for r in store.records()}
    new = [(i, r) for i, r in enumerate(RunStore(src).records()) if record_id(r) not in have]
    for _, rec in sorted(new, key=newest_key):
        if record_id(rec) in have:
            continue
        store.append(rec)
        have.add(record_id(rec))
        rep.added += 1
    rep.already = len(RunStore(src).records()) - rep.added
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
            elif sub == "cells" and _generated(f) > _generated(target):
                write_atomic(target, f.read_text())
                rep.files.append(f"{sub}/{f.name}")
    return rep


def _generated(path: Path) -> str:
    try:
        return json.loads(path.read_text()).get("generated") or ""
    except (OSError, ValueError):
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
