"""The history (`bisect merge`, history_frame): a record that cannot be read never vanishes without a word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_matrix import KEY, fake_run, ob, rec

from harness.errors import HarnessError
from harness.results import history
from harness.results.store import RunStore

RUN = "m-x86_64-1"


def source(tmp_path: Path, damage: bytes | None = None, line: int = 3, torn: bytes | None = None) -> Path:
    """A run of six probes from another machine; line `line` replaced by `damage`, `torn` appended."""
    d = fake_run(tmp_path / "src", RUN, KEY, [rec(f"1.{i}", 0, f"2025-01-0{i + 1}T00:00:00Z") for i in range(6)])
    p = d / "probes.jsonl"
    lines = p.read_bytes().split(b"\n")
    if damage is not None:
        lines[line - 1] = damage
    p.write_bytes(b"\n".join(lines) + (torn or b""))
    return tmp_path / "src"


def failure(r, status: int) -> str:
    assert r.returncode == status, (r.stdout, r.stderr)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_merge_refuses_a_corrupt_line_naming_file_and_line(tmp_path):
    src = source(tmp_path, b'{"finished": "2025-01-03T00:00:00Z", "pr')  # truncated, with records after it
    root = tmp_path / "root"
    line = failure(ob("merge", root, src), 1)
    assert f"{src / RUN / 'probes.jsonl'} line 3: not JSON" in line and "--quarantine" in line
    assert not root.exists()  # refused before anything was written
    r = ob("merge", root, src, "--json")
    failure(r, 1)
    assert r.json() == {"error": line.removeprefix("error: "), "exit_status": 1}


def test_merge_quarantine_sets_the_line_aside_and_counts_it(tmp_path):
    raw = b'{"finished": "2025-01-03T00:00:00Z", "pr'
    src = source(tmp_path, raw)
    root = tmp_path / "root"
    r = ob("merge", root, src, "--quarantine")
    assert r.returncode == 0, r.stderr
    aside = root / RUN / "quarantine.jsonl"
    assert f"5 probe records added, 0 already there, 1 unreadable line set aside in {aside}" in r.stdout
    assert "5 records added" in r.stdout and "1 unreadable line set aside" in r.stdout.splitlines()[-1]
    (entry,) = [json.loads(x) for x in aside.read_text().splitlines()]
    assert entry["source"] == str(src / RUN / "probes.jsonl") and entry["line"] == 3
    assert entry["raw"].encode() == raw and not entry["torn"]
    assert len(RunStore(root / RUN).records()) == 5
    again = ob("merge", root, src, "--quarantine", "--json")
    assert again.returncode == 0, again.stderr
    (doc,) = again.json()
    assert (doc["added"], doc["already"], doc["quarantined"], doc["quarantine"]) == (0, 5, 1, str(aside))
    assert len(aside.read_text().splitlines()) == 1  # set aside once


def test_merge_of_a_torn_last_line_warns_and_merges_the_rest(tmp_path):
    src = source(tmp_path, torn=b'{"version": "1.6", "st')
    root = tmp_path / "root"
    r = ob("merge", root, src, "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = r.json()
    assert (doc["added"], doc["torn"], doc["quarantined"]) == (6, 1, 0)
    (warning,) = [x for x in r.stderr.splitlines() if x.strip()]
    assert warning.startswith(f"warning: {src / RUN / 'probes.jsonl'} line 7: cut off mid-write")
    q = ob("merge", tmp_path / "root2", src, "--quarantine", "--json")
    (doc,) = q.json()
    assert (doc["added"], doc["torn"], doc["quarantined"]) == (6, 1, 1)
    (entry,) = [json.loads(x) for x in (tmp_path / "root2" / RUN / "quarantine.jsonl").read_text().splitlines()]
    assert entry["torn"] and entry["line"] == 7 and entry["raw"] == '{"version": "1.6", "st'


def test_a_corrupt_line_in_the_root_stops_readers_and_merge_repairs_it(tmp_path):
    root = tmp_path / "root"
    assert ob("merge", root, source(tmp_path)).returncode == 0
    p = root / RUN / "probes.jsonl"
    p.write_bytes(p.read_bytes() + b"\x00" * 12 + b"\n")  # the root's own damage
    with pytest.raises(HarnessError) as exc:
        history.history_frame(root)  # pandas reader: no silent skip either
    assert f"{p} line 7" in str(exc.value)
    other = source(tmp_path / "other")
    line = failure(ob("merge", root, other), 1)  # the destination is read too
    assert f"{p} line 7" in line
    suggested = str(exc.value).split("`")[1].split()  # bisect merge ROOT RUN --quarantine
    assert suggested[:2] == ["bisect", "merge"]
    r = ob(*suggested[1:])
    assert r.returncode == 0, r.stderr
    assert "1 unreadable line set aside" in r.stdout
    assert len(RunStore(root / RUN).records()) == 6 and len(p.read_text().splitlines()) == 6
    (entry,) = [json.loads(x) for x in (root / RUN / "quarantine.jsonl").read_text().splitlines()]
    assert entry["source"] == str(p) and entry["line"] == 7 and entry["raw"] == "\x00" * 12
    assert len(history.history_frame(root)) == 6
