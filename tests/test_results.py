"""The results store: a probes.jsonl line that is not a record is never passed over in silence."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.results.store import QUARANTINE, RunStore, TornLineWarning


def rec(version: str, nan: int = 0) -> dict:
    return {"version": version, "status": "ran", "finished": f"2025-01-01T00:00:0{version[-1]}Z", "seconds": 1.0,
            "result": {"outputs": [{"name": "y", "rows": 4, "nan_rows": nan, "inf_rows": 0}]}}


@pytest.fixture
def store(tmp_path) -> RunStore:
    d = tmp_path / "run-x86_64-1"
    d.mkdir()
    s = RunStore(d)
    for v in ("1.0", "1.1", "1.2"):
        s.append(rec(v))
    return s


def probes(store: RunStore) -> Path:
    return store.dir / "probes.jsonl"


def replace_line(store: RunStore, n: int, raw: bytes) -> None:
    lines = probes(store).read_bytes().split(b"\n")
    lines[n - 1] = raw
    probes(store).write_bytes(b"\n".join(lines))


@pytest.mark.parametrize("raw, why", [
    (b'{"version": "1.1", "status": "ra', "not JSON"),  # truncated, then the next record was written after it
    (b"\x00\x00\x00\x00", "not JSON"),  # a block of zeros after a crash
    (b'{"version": "1.1", "status": "ran", "note": "\xff"}', "not UTF-8"),
    (b"[1, 2, 3]", "not a probe record"),
    (b'{"status": "ran"}', "not a probe record"),
])
def test_a_complete_line_that_is_not_a_record_stops_the_reader(store, raw, why):
    replace_line(store, 2, raw)
    with pytest.raises(HarnessError) as exc:
        store.records()
    message = str(exc.value)
    assert f"{probes(store)} line 2: {why}" in message
    assert f"bisect merge {store.dir.parent} {store.dir} --quarantine" in message  # how to get past it
    assert "\n" not in message
    ev = store.read()  # the evidence, as it is, for a caller that decides
    assert [r["version"] for r in ev.records] == ["1.0", "1.2"]
    assert [(b.line, b.raw.encode("utf-8", "surrogateescape")) for b in ev.corrupt] == [(2, raw)]
    assert ev.torn is None


def test_an_empty_line_holds_nothing_and_is_not_an_error(store):
    probes(store).write_bytes(probes(store).read_bytes() + b"\n")
    assert [r["version"] for r in store.records()] == ["1.0", "1.1", "1.2"]


def test_a_torn_last_line_is_left_out_and_reported_once(store):
    probes(store).write_bytes(probes(store).read_bytes() + b'{"version": "1.3", "sta')
    with pytest.warns(TornLineWarning) as seen:
        assert [r["version"] for r in store.records()] == ["1.0", "1.1", "1.2"]
    (w,) = seen
    assert f"{probes(store)} line 4: cut off mid-write" in str(w.message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store.records()  # said once: no second warning
    store.append(rec("1.4"))  # the next record cuts it off, and is not swallowed by it
    assert [r["version"] for r in store.records()] == ["1.0", "1.1", "1.2", "1.4"]
    assert probes(store).read_bytes().endswith(b"\n")


def test_a_last_record_that_lacks_only_its_newline_is_kept(store):
    probes(store).write_bytes(probes(store).read_bytes() + json.dumps(rec("1.3")).encode())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not torn: no warning
        assert [r["version"] for r in store.records()] == ["1.0", "1.1", "1.2", "1.3"]
    store.append(rec("1.4"))
    assert [r["version"] for r in store.records()] == ["1.0", "1.1", "1.2", "1.3", "1.4"]
    assert len(probes(store).read_text().splitlines()) == 5


def test_set_aside_keeps_each_line_once_and_drop_moves_them_out(store):
    replace_line(store, 2, b"garbage")
    probes(store).write_bytes(probes(store).read_bytes() + b'{"version"')
    ev = store.read()
    assert [b.line for b in ev.bad] == [2, 4] and ev.torn.torn
    assert store.set_aside(ev.bad) == 2
    assert store.set_aside(ev.bad) == 0  # again: nothing new
    store.drop_unreadable(ev)
    kept = [json.loads(x) for x in (store.dir / QUARANTINE).read_text().splitlines()]
    assert [(k["line"], k["raw"], k["torn"]) for k in kept] == [(2, "garbage", False), (4, '{"version"', True)]
    assert all(k["source"] == str(probes(store)) for k in kept)
    assert [r["version"] for r in store.records()] == ["1.0", "1.2"]
    assert probes(store).read_bytes().endswith(b"\n")


def test_a_failed_append_takes_back_only_what_it_wrote(store, monkeypatch):
    before = probes(store).read_bytes()
    real_write = os.write

    def half(fd, data):  # a full disk: part of the line reaches the file
        return real_write(fd, data[: len(data) // 2])

    monkeypatch.setattr(os, "write", half)
    with pytest.raises(OSError):
        store.append(rec("1.3"))
    monkeypatch.setattr(os, "write", real_write)
    assert probes(store).read_bytes() == before

    def fsync_fails(fd):  # the whole line was written, but it is not known to be on disk
        raise OSError(5, os.strerror(5))

    monkeypatch.setattr(os, "fsync", fsync_fails)
    with pytest.raises(OSError):
        store.append(rec("1.3"))
    assert probes(store).read_bytes() == before

    def another_run_appends_then_fsync_fails(fd):
        with open(probes(store), "ab") as f:
            f.write((json.dumps(rec("1.4")) + "\n").encode())
        raise OSError(5, os.strerror(5))

    monkeypatch.setattr(os, "fsync", another_run_appends_then_fsync_fails)
    with pytest.raises(OSError):
        store.append(rec("1.3"))
    monkeypatch.undo()
    assert [r["version"] for r in store.records()][-1] == "1.4"  # the other run's record is never cut


@pytest.mark.parametrize("key", ["../../x", "a/b", "..", ".", "", "x\0y"])
def test_a_summary_key_is_one_file_name_in_the_run(store, key):
    """What names a summary's file (a matrix cell's key, a search's mode-range-predicate) cannot put it, or a
    link to it, anywhere but cells/ of its run."""
    before = sorted(store.dir.parent.rglob("*"))
    with pytest.raises(HarnessError, match="not a summary key"):
        store.save_summary(key, {"cell": {"key": key}})
    assert sorted(store.dir.parent.rglob("*")) == before
    assert store.save_summary("sweep-1.19.0-1.25.0.dev20250101-max-abs_1e4", {}).parent == store.dir / "cells"


@pytest.mark.parametrize("version", ["../../../elsewhere/x", "a/b", "x\0y"])
def test_outputs_named_by_evidence_are_files_of_the_runs_own_outputs(store, tmp_path, version):
    """A version read back (a record's, a question's `release:VERSION` reference) names a probe's outputs: one
    file in outputs/, never a path out of it; and an outputs file that is a link is not read through."""
    import numpy as np

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    np.savez(elsewhere / "x.npz", y=np.ones(2))
    with pytest.raises(HarnessError, match="not the name of a probe's outputs"):
        store.outputs(version)
    (store.dir / "outputs").mkdir(exist_ok=True)
    (store.dir / "outputs" / "1.20.0.npz").symlink_to(elsewhere / "x.npz")
    assert store.outputs("1.20.0") is None
    np.savez(store.dir / "outputs" / "1.19.2.npz", y=np.zeros(2))
    assert list(store.outputs("1.19.2")["y"]) == [0.0, 0.0]
