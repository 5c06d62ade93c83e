"""What the internal fp16 margin keeps between probes and runs, beside its margin model in the cache
(CACHE/margin/<model digest>/, harness.plan.margin_job):

* held-<key>.json: which watched tensors a release holds in fp16 (harness.graphs.margin.held), from the release's
  optimized graph of the unmodified model. It is a fact of (release and its package, model digest, session
  options, providers, the runner's provenance): any change of these is another key, so it is computed again.
* rows-<batch digest>.json: the row of each watched tensor's largest |x| in the batch, read once one row at a time;
  later probes of the batch read only the hottest tensors' rows (harness.graphs.margin.hot_rows).

Like every memo in the cache (model-facts, digests), these live in a cache directory the harness checked is the
user's own (harness.runners.ownership). Read back, a file is still untrusted: its key must be the one asked for
and its content what harness.graphs.margin checks; anything in doubt is None, and the caller computes it again
and writes it over.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from harness.graphs.margin import Watched, held_from_json, rows_from_json
from harness.results.store import write_atomic

SCHEMA = 1


def held_key(model_digest: str, version: str, package: str, session_options: dict, providers: list | None,
             provenance: dict) -> dict:
    """What decides which tensors a release holds in fp16."""
    return {"model": model_digest, "version": version, "package": package, "session_options": session_options,
            "providers": providers, "provenance": provenance}


def _held_path(memo_dir: Path, key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:32]
    return Path(memo_dir) / f"held-{digest}.json"


def _rows_path(memo_dir: Path, batch_digest: str) -> Path:
    return Path(memo_dir) / f"rows-{batch_digest[:32]}.json"


def _read(path: Path) -> dict | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) and doc.get("schema") == SCHEMA else None


def _write(path: Path, doc: dict) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"schema": SCHEMA, **doc}, sort_keys=True))
    except OSError:
        pass  # a read-only cache: computed again next time


def read_held(memo_dir: Path, key: dict, what: Watched) -> dict[str, str] | None:
    doc = _read(_held_path(memo_dir, key))
    if doc is None or doc.get("key") != json.loads(json.dumps(key, default=str)):
        return None
    return held_from_json(doc.get("held"), what)


def write_held(memo_dir: Path, key: dict, held: dict[str, str]) -> None:
    _write(_held_path(memo_dir, key), {"key": key, "held": held})


def read_rows(memo_dir: Path, model_digest: str, batch_digest: str,
              what: Watched) -> dict[str, tuple[int, float]] | None:
    doc = _read(_rows_path(memo_dir, batch_digest))
    if doc is None or doc.get("key") != {"model": model_digest, "batch": batch_digest}:
        return None
    rows = doc.get("rows")
    if type(rows) is not int or rows < 2:
        return None
    return rows_from_json(doc.get("row_of"), what, rows)


def write_rows(memo_dir: Path, model_digest: str, batch_digest: str, rows: int, row_of: dict[str, list]) -> None:
    _write(_rows_path(memo_dir, batch_digest), {"key": {"model": model_digest, "batch": batch_digest}, "rows": rows,
                                                "row_of": row_of})


def every_held(memo_dir: Path, model_digest: str, what: Watched) -> list[dict[str, str]]:
    """What each release kept for the model holds (checked as read_held does, but under any key of the model)."""
    found = []
    for path in sorted(Path(memo_dir).glob("held-*.json")):
        doc = _read(path)
        if doc is not None and isinstance(doc.get("key"), dict) and doc["key"].get("model") == model_digest:
            held = held_from_json(doc.get("held"), what)
            if held is not None:
                found.append(held)
    return found
