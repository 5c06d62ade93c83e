"""Writers of one run at once: every record another process appends, merges or sets aside survives.

Real processes (multiprocessing, `bisect merge` subprocesses) on one probes.jsonl: the store's lock
is what keeps them apart, so nothing here is simulated.
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from collections import Counter
from pathlib import Path

from test_matrix import ENTRY, KEY, ROOT, fake_run, rec

from harness.results.store import RunStore

WRITERS, EACH, PAD = 4, 1500, 2000  # 6,000 records of about 2 KB
MERGED = 300  # records of the run three merges fold in at once


def _append_many(run_dir: str, writer: int, start) -> None:
    store = RunStore(Path(run_dir))
    start.wait()
    for i in range(EACH):
        store.append({**rec(f"1.{i % 30}", 0, "2025-01-01T00:00:00Z"), "writer": writer, "n": i,
                      "stderr_tail": "x" * PAD})


def test_four_processes_appending_to_one_run_lose_nothing(tmp_path):
    d = fake_run(tmp_path, "m-x86_64-1", KEY, [])
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(WRITERS)
    procs = [ctx.Process(target=_append_many, args=(str(d), w, start)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    assert [p.exitcode for p in procs] == [0] * WRITERS  # every writer was told its records were kept
    lines = (d / "probes.jsonl").read_bytes().split(b"\n")
    assert lines.pop() == b""  # ends with a newline
    found = Counter((r["writer"], r["n"]) for r in map(json.loads, lines))  # every line parses
    ev = RunStore(d).read()
    assert not ev.bad and len(ev.records) == len(lines)
    assert len(lines) == WRITERS * EACH, f"{WRITERS * EACH} records written, {len(lines)} found"
    assert set(found) == {(w, i) for w in range(WRITERS) for i in range(EACH)}  # none lost
    assert max(found.values()) == 1  # none twice


def test_three_merges_of_one_run_at_once_keep_every_record_once(tmp_path):
    # enough records that the merges' appends overlap however their interpreters start
    records = [rec(f"1.{i}", 0, f"2025-01-01T00:{i // 60:02d}:{i % 60:02d}Z") for i in range(MERGED)]
    src = fake_run(tmp_path / "src", "m-x86_64-1", KEY, records)
    root = tmp_path / "root"
    for attempt in range(3):  # the race is in how the merges overlap: give it several chances
        dst = root / f"try{attempt}"
        procs = [subprocess.Popen([sys.executable, "-c", ENTRY, "merge", str(dst), str(src.parent), "--quarantine"],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(3)]
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0, 0], outs
        kept = RunStore(dst / src.name).records()
        found = Counter(r["version"] for r in kept)
        assert len(kept) == MERGED and set(found) == {r["version"] for r in records}, (attempt, len(kept), outs)
        assert not (dst / src.name / "quarantine.jsonl").exists()  # no record was taken for a torn line
