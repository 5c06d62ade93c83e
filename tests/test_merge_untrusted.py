"""Run directories from other machines are untrusted: `bisect merge` and `bisect dashboard` never read or copy
through a symbolic link, never write outside their root, take a site inside the results root for what it is,
and merge a run whole or not at all."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from inproc import run, snapshot
from test_history import failure
from test_matrix import ENTRY, KEY, ROOT, Result, fake_run, rec

from harness.errors import UsageError
from harness.results import history

RUN = "m-x86_64-1"
SECRET = "SECRET-d41d8cd98f00b204"  # what lies outside the artifact: never in a root or a site


def cell_document(run_id: str, generated: str) -> str:
    """The smallest cell document the reader accepts (harness.results.evidence.CellDocument)."""
    return json.dumps({"run_id": run_id, "status": "found", "mode": "regression", "releases": [], "probes": [],
                       "cell": {"key": "c"}, "generated": generated})


def artifact(base: Path, run_id: str = RUN, n: int = 3, day: int = 1) -> Path:
    """A run as CI uploads it: probes, an output, a cell summary, a trace, the report and its repro script."""
    d = fake_run(base, run_id, KEY, [rec(f"1.{i}", 0, f"2025-01-{day + i:02d}T00:00:00Z") for i in range(n)])
    (d / "outputs" / f"1.{n - 1}.npz").write_bytes(b"outputs")
    (d / "cells").mkdir()
    (d / "cells" / "c.json").write_text(cell_document(run_id, f"2025-01-{day:02d}T00:00:00Z"))
    (d / "traces").mkdir()
    (d / "traces" / "1.0.json").write_text(json.dumps({"version": "1.0", "max_headroom": 0.5}))
    (d / "report.md").write_text("# report\n")
    (d / "repro.py").write_text("print('repro')\n")
    return d


def outside(tmp_path: Path) -> Path:
    """A folder beside the artifacts: a secret file, and a folder holding a run and a trace of it."""
    d = tmp_path / "outside"
    (d / "dir").mkdir(parents=True)
    (d / "secret.txt").write_text(SECRET)
    (d / "dir" / "1.0.json").write_text(json.dumps({"version": "1.0", "secret": SECRET}))
    fake_run(d, "elsewhere", KEY, [rec("9.0", 0, "2025-02-01T00:00:00Z") | {"reason": SECRET}])
    return d


def plant(run_dir: Path, rel: str, target: Path) -> Path:
    """Replace `rel` of the run by a symbolic link to `target`."""
    link = run_dir / rel
    if link.is_dir():
        for p in sorted(link.rglob("*"), reverse=True):
            p.rmdir() if p.is_dir() else p.unlink()
        link.rmdir()
    elif link.exists():
        link.unlink()
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def holds_secret(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and SECRET in p.read_text("latin-1")]


def bisect(*args, cwd: Path):
    """`bisect ARGS` as a subprocess started in `cwd`."""
    proc = subprocess.run([sys.executable, "-c", ENTRY, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}, timeout=300)
    return Result(proc)


# -- 1. no symbolic link is followed or copied ----------------------------------------------

LINKS = [("report.md", "secret.txt"), ("repro.py", "secret.txt"), ("outputs/1.2.npz", "secret.txt"),
         ("cells/c.json", "secret.txt"), ("traces", "dir"), ("traces/1.0.json", "secret.txt"),
         ("probes.jsonl", "elsewhere/probes.jsonl"), ("manifest.json", "elsewhere/manifest.json"),
         ("outputs", "dir")]


@pytest.mark.parametrize("rel,target", LINKS, ids=[r for r, _ in LINKS])
def test_merge_refuses_a_run_with_a_link_among_its_files_naming_it(tmp_path, rel, target):
    out = outside(tmp_path)
    link = plant(artifact(tmp_path / "ci"), rel, out / target)
    root = tmp_path / "root"
    before = snapshot(tmp_path / "outside")
    line = failure(run("merge", root, tmp_path / "ci"), 2)
    assert f"{link}: a symbolic link, never followed" in line, line
    assert not root.exists()  # refused before anything was written
    assert snapshot(tmp_path / "outside") == before


def test_merge_refuses_a_link_where_a_run_could_be(tmp_path):
    out = outside(tmp_path)
    artifact(tmp_path / "ci")
    (tmp_path / "ci" / "nested").mkdir()
    link = tmp_path / "ci" / "nested" / "elsewhere"
    link.symlink_to(out / "elsewhere")  # a run outside the artifact, reached through a link
    root = tmp_path / "root"
    line = failure(run("merge", root, tmp_path / "ci"), 2)
    assert f"{link}: a symbolic link, never followed (where a run could be)" in line
    assert not root.exists()


def test_dashboard_leaves_out_a_run_with_a_link_and_publishes_nothing_through_it(tmp_path):
    out = outside(tmp_path)
    results = tmp_path / "results"
    artifact(results, "good-x86_64-1")
    bad = artifact(results)
    report = plant(bad, "report.md", out / "secret.txt")
    plant(bad, "traces", out / "dir")
    (results / "linked").symlink_to(out / "elsewhere")
    site = tmp_path / "site"
    r = run("dashboard", results, "-o", site)
    assert r.returncode == 0, r.stderr
    assert f"dashboard: skipping {bad}: {report}: a symbolic link, never followed" in r.stderr
    assert f"skipping {results / 'linked'}: " in r.stderr
    assert "2 run(s) left out" in r.stdout
    assert sorted(p.name for p in (site / "data").iterdir()) == ["good-x86_64-1"]
    assert holds_secret(site) == []
    assert not any(p.is_symlink() for p in site.rglob("*"))
    grid = json.loads((site / "dashboard.json").read_text())
    assert sorted(grid) == ["good-x86_64-1/nan-or-inf"]


def test_history_frame_refuses_a_linked_run(tmp_path):
    out = outside(tmp_path)
    plant(artifact(tmp_path / "results"), "probes.jsonl", out / "elsewhere" / "probes.jsonl")
    with pytest.raises(UsageError, match="probes.jsonl: a symbolic link, never followed"):
        history.history_frame(tmp_path / "results")


# -- 2. every write stays inside the root; a run is named by its run id ------------------------

def test_a_dotdot_source_merges_into_the_root_not_its_parent(tmp_path):
    d = artifact(tmp_path / "ci")
    (d / "sub").mkdir()
    root = tmp_path / "history" / "root"
    root.mkdir(parents=True)
    r = bisect("merge", root, f"{d}/sub/..", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [x["run_id"] for x in r.json()] == [RUN]
    assert sorted(p.name for p in (tmp_path / "history").iterdir()) == ["root"]  # nothing written beside ROOT
    assert sorted(p.name for p in root.iterdir()) == [RUN]
    assert len((root / RUN / "probes.jsonl").read_text().splitlines()) == 3


def test_a_dot_source_from_inside_a_run_merges_that_run_and_hides_no_other(tmp_path):
    root = tmp_path / "root"
    assert run("merge", root, artifact(tmp_path / "a", "other-x86_64-1")).returncode == 0
    d = artifact(tmp_path / "ci")
    r = bisect("merge", root, ".", "--json", cwd=d)
    assert r.returncode == 0, r.stderr
    assert not (root / "manifest.json").exists() and not (root / "probes.jsonl").exists()
    assert sorted(p.name for p in root.iterdir()) == [RUN, "other-x86_64-1"]
    assert [p.name for p in history.run_dirs(root)] == ["m-x86_64-1", "other-x86_64-1"]
    # the same from inside a run of the root: its own, nothing to copy
    again = bisect("merge", "..", ".", "--json", cwd=root / RUN)
    assert again.returncode == 0 and again.json() == [], again.stderr


def test_a_run_is_named_by_its_manifest_run_id_and_a_bad_one_is_refused(tmp_path):
    d = artifact(tmp_path / "ci")
    d.rename(tmp_path / "ci" / "renamed-by-ci")
    root = tmp_path / "root"
    r = run("merge", root, tmp_path / "ci", "--json")
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in root.iterdir()) == [RUN]
    bad = artifact(tmp_path / "ci2", "x")
    (bad / "manifest.json").write_text(json.dumps({**json.loads((bad / "manifest.json").read_text()),
                                                   "run_id": "../escaped"}))
    line = failure(run("merge", root, tmp_path / "ci2"), 2)
    assert "run_id '../escaped' is not a run id" in line
    assert not (tmp_path / "escaped").exists()


def test_merge_into_a_run_directory_or_through_a_link_in_the_root_is_refused(tmp_path):
    out = outside(tmp_path)
    src = artifact(tmp_path / "ci")
    line = failure(run("merge", out / "elsewhere", src), 2)  # ROOT is a run: the merged one would be hidden
    assert "a run directory, not a results root" in line
    root = tmp_path / "root"
    root.mkdir()
    (root / RUN).symlink_to(out / "dir")  # the run's name in the root leads outside it
    line = failure(run("merge", root, src), 2)
    assert f"{root / RUN}: resolves to {out / 'dir'}, outside {root}" in line
    (root / RUN).unlink()
    (root / ".merging").symlink_to(out / "dir")  # so does the staging area
    line = failure(run("merge", root, src), 2)
    assert "outside" in line and not (out / "dir" / RUN).exists()
    assert sorted(p.name for p in (out / "dir").iterdir()) == ["1.0.json"]


# -- 3. a site inside the results root ------------------------------------------------------

def test_a_site_inside_the_results_root_builds_again_and_is_no_run(tmp_path):
    results = tmp_path / "results"
    artifact(results)
    artifact(results, "other-x86_64-1")
    for _ in range(2):
        r = run("dashboard", results, "-o", results / "site")
        assert r.returncode == 0, r.stderr
    assert (results / "site" / "data" / RUN / "probes.jsonl").is_file()
    assert [p.name for p in history.run_dirs(results)] == [RUN, "other-x86_64-1"]
    r = run("merge", tmp_path / "root", results, "--json")
    assert r.returncode == 0, r.stderr
    assert sorted(x["source"] for x in r.json()) == sorted(str(results / n) for n in (RUN, "other-x86_64-1"))
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == [RUN, "other-x86_64-1"]
    assert "the site would be the results root itself" in failure(run("dashboard", results, "-o", results), 2)
    line = failure(run("dashboard", results, "-o", results / RUN / "site"), 2)
    assert f"inside the run {results / RUN}" in line and not (results / RUN / "site").exists()


# -- 4. all or nothing per run; a write that fails ends in one line ----------------------------

def full_disk(monkeypatch, root: Path, name: str, after: int) -> None:
    """os.write to a file `name` under `root` fails with ENOSPC after `after` such writes succeeded."""
    real, calls = os.write, [0]

    def write(fd, data):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if Path(path).name == name and path.startswith(str(root.resolve())):
            calls[0] += 1
            if calls[0] > after:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def one_line(r, status: int = 1) -> str:
    assert r.returncode == status, (r.stdout, r.stderr)
    assert len(r.lines) == 1 and r.lines[0].startswith("error: "), r.stderr
    return r.lines[0]


def newer_source(tmp_path: Path) -> Path:
    """The same run three days on: three more records, a new output, a newer cell summary and report."""
    d = artifact(tmp_path / "later", n=6)
    (d / "cells" / "c.json").write_text(cell_document(RUN, "2025-02-01T00:00:00Z"))
    later = time.time() + 3600
    os.utime(d / "report.md", (later, later))
    return d


def test_a_disk_full_while_appending_leaves_the_existing_run_as_it_was(tmp_path, monkeypatch):
    root = tmp_path / "root"
    assert run("merge", root, artifact(tmp_path / "ci")).returncode == 0
    src = newer_source(tmp_path)
    before = snapshot(root)
    full_disk(monkeypatch, root, "probes.jsonl", after=1)  # the second record does not fit
    line = one_line(run("merge", root, src))
    assert f"error: cannot merge {src} into {root / RUN}: No space left on device" in line
    assert line.endswith("the run is as it was")
    assert snapshot(root) == before  # records taken back, output, cell and report too; no staging left
    monkeypatch.undo()
    r = run("merge", root, src, "--json")
    assert r.returncode == 0 and r.json()[0]["added"] == 3, r.stderr


def test_a_disk_full_while_staging_leaves_no_new_run(tmp_path, monkeypatch):
    root = tmp_path / "root"
    assert run("merge", root, artifact(tmp_path / "a", "other-x86_64-1")).returncode == 0
    before = snapshot(root)
    full_disk(monkeypatch, root, "probes.jsonl", after=2)
    src = artifact(tmp_path / "ci")
    line = one_line(run("merge", root, src))
    assert "No space left on device" in line and "the run is as it was" in line
    assert snapshot(root) == before and not (root / RUN).exists()


def test_a_file_where_a_folder_is_needed_leaves_the_run_as_it_was(tmp_path):
    root = tmp_path / "root"
    assert run("merge", root, artifact(tmp_path / "ci")).returncode == 0
    cells = root / RUN / "cells"
    for p in cells.iterdir():
        p.unlink()
    cells.rmdir()
    cells.write_text("not a folder")
    src = newer_source(tmp_path)
    before = snapshot(root)
    line = failure(run("merge", root, src), 1)
    assert f"error: cannot merge {src} into {root / RUN}: File exists" in line and "as it was" in line
    assert snapshot(root) == before  # the new output put in place before it was taken back


def test_merge_or_dashboard_that_cannot_write_ends_in_one_line(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / ".merging").write_text("a file where merge stages")
    line = failure(run("merge", root, artifact(tmp_path / "ci")), 1)
    assert "cannot merge" in line and "nothing merged" in line
    assert sorted(p.name for p in root.iterdir()) == [".merging"]
    (tmp_path / "file").write_text("")
    assert "cannot write to" in failure(run("merge", tmp_path / "file" / "root", tmp_path / "ci"), 1)
    site = tmp_path / "site"
    (site / "index.html").mkdir(parents=True)
    line = failure(run("dashboard", tmp_path / "ci", "-o", site), 1)
    assert f"cannot write the dashboard to {site}" in line
