"""Matrices (`bisect matrix`), the results history (`--refresh`) and `bisect merge`."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import builders
import numpy as np
import pytest

from harness.errors import UsageError
from harness.nightly import matrix
from harness.releases.versions import Release
from harness.results import history
from harness.results.store import RunStore

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"

# The commands as `bisect` runs them (registered in harness.cli; registered here too if not yet).
ENTRY = """\
import sys
from harness.cli import cli, main
from harness.commands import dashboard, matrix, merge
for m in (matrix, merge, dashboard):
    if m.command.name not in cli.commands:
        cli.add_command(m.command)
sys.exit(main(sys.argv[1:]))
"""


class Result:
    def __init__(self, proc):
        self.returncode, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr

    def json(self):
        return json.loads(self.stdout)


def ob(*args, timeout: float = 900) -> Result:
    proc = subprocess.run([sys.executable, "-c", ENTRY, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
    return Result(proc)


def one_line_error(r: Result) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """Two test-built models and their batch, next to where the matrices are written."""
    d = tmp_path_factory.mktemp("tiny")
    builders.save(builders.residual_overflow_model(), d / "residual_overflow.onnx")
    builders.save(builders.residual_norm_model(), d / "residual_norm.onnx")
    np.savez(d / "batch.npz", **builders.residual_norm_inputs())
    return d


def write_matrix(d: Path, name: str, models=("residual_overflow", "residual_norm"), targets=None,
                 releases='{ from = "1.23.2", to = "1.24.1" }', head: str = "", tail: str = "") -> Path:
    """A matrix next to the models (paths in it are relative to the file)."""
    targets = targets or [("x86_64", "auto")]
    text = f'{head}mode = "sweep"\nreleases = {releases}\n'
    for m in models:
        text += f'[[models]]\npath = "{m}.onnx"\ninputs = "batch.npz"\n'
    for arch, backend in targets:
        text += f'[[targets]]\narch = "{arch}"\nbackend = "{backend}"\n'
    text += tail
    path = d / f"{name}.toml"
    path.write_text(text)
    return path


# -- validation (no probes) ---------------------------------------------------------------

def test_shipped_matrices_load():
    nightly = matrix.load(ROOT / "matrices" / "nightly.toml")
    assert {c.model for c in nightly.cells} == {"gemma-tiny-fused", "gemma-tiny-decomposed"}
    assert {c.arch for c in nightly.cells} == {"x86_64", "aarch64"}
    assert all(c.releases == {"since": "1.19.0"} for c in nightly.cells)
    hub = matrix.load(ROOT / "matrices" / "embeddinggemma.toml")
    assert {c.model for c in hub.cells} == {"embeddinggemma"}


def test_cells_json_is_a_ci_job_matrix():
    r = ob("matrix", "cells", ROOT / "matrices" / "nightly.toml", "--json")
    assert r.returncode == 0, r.stderr
    cells = r.json()["include"]
    assert [c["index"] for c in cells] == list(range(len(cells)))
    assert {c["arch"]: c["runner"] for c in cells} == {"x86_64": "ubuntu-latest", "aarch64": "ubuntu-24.04-arm"}
    assert len({c["key"] for c in cells}) == len(cells)


@pytest.mark.parametrize("edit, message", [
    ('frobnicate = 1\n', "unknown key 'frobnicate' in the matrix"),
    ('[[options]]\nthreads = 2\n', "unknown key 'threads' in [[options]] #1"),
    ('[[options]]\ngraph_optimization_level = "max"\n', "graph_optimization_level 'max'"),
    ('[[models]]\nname = "no-such-model"\n', "unknown model 'no-such-model'"),
])
def test_bad_matrix_is_one_line_exit_2(tiny, edit, message):
    table = edit.startswith("[[")
    path = write_matrix(tiny, f"bad-{abs(hash(edit))}", head="" if table else edit, tail=edit if table else "")
    line = one_line_error(ob("matrix", "cells", path))
    assert message in line, line


NATIVE = platform.machine()
FOREIGN = "aarch64" if NATIVE == "x86_64" else "x86_64"
ALIAS = {"x86_64": "amd64", "aarch64": "arm64"}.get(NATIVE, NATIVE)

ONE_MODEL = '[[models]]\npath = "residual_norm.onnx"\ninputs = "batch.npz"\n'
NATIVE_TARGET = f'[[targets]]\narch = "{NATIVE}"\n'


@pytest.mark.parametrize("text, message", [
    (f'mode = []\nreleases = {{ since = "1.19.0" }}\n{ONE_MODEL}{NATIVE_TARGET}', "mode = []: no cells"),
    (f'python = "3.11/../.."\nreleases = {{ since = "1.19.0" }}\n{ONE_MODEL}{NATIVE_TARGET}',
     "python '3.11/../..': not a Python version (MAJOR.MINOR, e.g. 3.11)"),
    (f'python = 3.10\nreleases = {{ since = "1.19.0" }}\n{ONE_MODEL}{NATIVE_TARGET}', "python 3.1: give the version as a string"),
    (f'releases = {{ since = "1.19.0" }}\n{ONE_MODEL}outputs = ["y", "nope"]\n{NATIVE_TARGET}',
     "[[models]] #1: output 'nope': the model has no such output (its outputs: y)"),
    (f'releases = {{ since = "1.19.0" }}\n{ONE_MODEL}{NATIVE_TARGET}[[targets]]\narch = "{ALIAS}"\n',
     f"cells 0 and 1 are the same search (residual_norm/{NATIVE}/auto/bisect)"),
    (f'mode = ["sweep", "sweep"]\nreleases = {{ since = "1.19.0" }}\n{ONE_MODEL}{NATIVE_TARGET}',
     "cells 0 and 1 are the same search"),
], ids=["no-mode", "python-path", "python-float", "unknown-output", "arch-alias", "mode-twice"])
def test_a_matrix_that_asks_nothing_or_the_same_twice_or_a_bad_name_is_refused(tiny, text, message):
    """`matrix cells` refuses what would make no cell, a cell twice, an environment path that is not a Python
    version or an output the model has not got: one line, exit 2, before any cell is listed."""
    path = tiny / "refused.toml"
    path.write_text(text)
    line = one_line_error(ob("matrix", "cells", path))
    assert message in line, line


def test_outputs_of_a_registered_model_are_said_to_be_checked_when_the_cell_runs(tiny):
    path = tiny / "registered.toml"
    path.write_text(f'releases = {{ since = "1.19.0" }}\n[[models]]\nname = "gemma-tiny-fused"\noutputs = ["nope"]\n'
                    f'{NATIVE_TARGET}')
    r = ob("matrix", "cells", path, "--json")
    assert r.returncode == 0, r.stderr
    assert len(r.json()["include"]) == 1
    assert "note: [[models]] #1 outputs nope: checked when the cell runs" in r.stderr, r.stderr


@pytest.mark.parametrize("target, message", [
    (f'arch = "{NATIVE}"\ncpus = ["neoverse-n1"]', f"cpu 'neoverse-n1': {NATIVE} probes run on this host's own CPU"),
    (f'arch = "{NATIVE}"\nbackend = "podman"', "backend 'podman': unknown backend (choose from auto, "),
    (f'arch = "{FOREIGN}"\nbackend = "uv"', f"backend 'uv' runs {NATIVE} probes, not {FOREIGN}"),
    ('arch = "aarch64"\nbackend = "qemu"\ncpus = ["graviton"]', "cpu 'graviton': not a CPU model of qemu-aarch64"),
], ids=["cpus-native", "unknown-backend", "foreign-uv", "unknown-cpu"])
def test_targets_are_checked_by_the_rules_of_run(tiny, target, message):
    path = tiny / "target.toml"
    path.write_text(f'releases = {{ since = "1.19.0" }}\n[[models]]\npath = "residual_norm.onnx"\n'
                    f'inputs = "batch.npz"\n[[targets]]\n{target}\n')
    with pytest.raises(UsageError, match="target.toml: \\[\\[targets\\]\\] #1: ") as err:
        matrix.load(path)
    assert message in str(err.value)


def test_empty_range_is_refused(tiny, tmp_path):
    path = write_matrix(tiny, "empty", releases='{ from = "1.24.1", to = "1.23.2" }')
    assert "empty range" in one_line_error(ob("matrix", "cells", path))
    # "since" past the newest release: empty in the current listing
    path = write_matrix(tiny, "future", releases='{ since = "99.0" }')
    line = one_line_error(ob("matrix", "run", path, "--cache-dir", tmp_path / "cache", "--offline",
                             "--results-dir", tmp_path / "res"))
    assert "empty range" in line or "release listing" in line, line


def test_since_picks_up_a_new_release_with_no_edit():
    cell_range = {"since": "1.23.2"}
    today = [Release(v, [f"onnxruntime-{v}-cp311-cp311-manylinux_2_27_x86_64.whl"]) for v in
             ("1.22.1", "1.23.2", "1.24.1")]
    assert matrix.resolve_range(cell_range, today) == ("1.23.2", "1.24.1")
    tomorrow = today + [Release("1.25.0", ["onnxruntime-1.25.0-cp311-cp311-manylinux_2_27_x86_64.whl"])]
    assert matrix.resolve_range(cell_range, tomorrow) == ("1.23.2", "1.25.0")
    with pytest.raises(UsageError, match="empty range"):
        matrix.resolve_range({"from": "1.19.0", "to": "1.19.1"}, today)


def test_workflow_file_is_a_valid_github_workflow():
    try:
        import check_jsonschema  # noqa: F401
    except ImportError:
        pytest.skip("check-jsonschema is not installed (dev dependency; or: uv run --with check-jsonschema pytest)")
    proc = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(WORKFLOW)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = WORKFLOW.read_text()
    for needle in ("matrix cells", "CELL_INDEX: ${{ matrix.index }}", '--cell "$CELL_INDEX"',
                   "runs-on: ${{ matrix.runner }}", "bisect merge", "bisect dashboard", ".ci/history restore",
                   ".ci/history save", "upload-artifact", "deploy-pages"):
        assert needle in text, needle


# -- history: newest record wins, --refresh appends, merge ----------------------------------

def fake_run(root: Path, run_id: str, key: dict, records: list[dict], name: str = "m") -> Path:
    d = root / run_id
    (d / "outputs").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"run_id": run_id, "key": key, "created": "2025-01-01T00:00:00Z",
                                                 "model": {"name": name, "digest": key["model"]},
                                                 "batch": {"digest": key["batch"]}, "commands": []}))
    store = RunStore(d)
    for r in records:
        store.append(r)
    return d


def rec(version, nan, finished, arch="x86_64"):
    return {"version": version, "status": "ran", "finished": finished, "seconds": 1.0,
            "provenance": {"arch": arch, "backend": "uv", "cpu": None, "python": "3.11"},
            "result": {"outputs": [{"rows": 4, "nan_rows": nan, "inf_rows": 0}]}}


KEY = {"model": "a" * 64, "batch": "b" * 64, "outputs": [], "session_options": {}, "arch": "x86_64",
       "backend": "uv", "python": "3.11", "cpu": None}


def test_newest_record_decides_and_refresh_hides_only_older_ones(tmp_path):
    d = fake_run(tmp_path, "m-x86_64-1", KEY, [rec("1.0", 2, "2025-01-02T00:00:00Z"), rec("1.0", 0, "2025-01-01T00:00:00Z")])
    latest = history.latest_by_version(RunStore(d).records())
    assert latest["1.0"]["finished"] == "2025-01-02T00:00:00Z"  # by time, not by line
    refresh = history.RefreshStore.since_now(d)
    assert refresh.records() == []
    refresh.append(rec("1.0", 0, "2025-01-03T00:00:00Z"))
    assert len(refresh.records()) == 1 and len(RunStore(d).records()) == 3  # appended, nothing deleted


def test_merge_is_idempotent_and_refuses_another_key(tmp_path):
    fake_run(tmp_path / "a", "m-x86_64-1", KEY, [rec("1.0", 0, "2025-01-01T00:00:00Z")])
    fake_run(tmp_path / "b", "m-x86_64-1", KEY, [rec("1.0", 0, "2025-01-01T00:00:00Z"),
                                                    rec("1.1", 3, "2025-01-02T00:00:00Z")])
    root = tmp_path / "root"
    r = ob("merge", root, tmp_path / "a", tmp_path / "b", "--json")
    assert r.returncode == 0, r.stderr
    assert sum(x["added"] for x in r.json()) == 2
    before = (root / "m-x86_64-1" / "probes.jsonl").read_bytes()
    again = ob("merge", root, tmp_path / "a", tmp_path / "b", "--json")
    assert again.returncode == 0 and sum(x["added"] for x in again.json()) == 0
    assert (root / "m-x86_64-1" / "probes.jsonl").read_bytes() == before
    # the same run id made for another model digest: refused, nothing written
    other = fake_run(tmp_path / "c", "m-x86_64-1", {**KEY, "model": "c" * 64}, [rec("1.2", 0, "2025-01-03T00:00:00Z")])
    line = one_line_error(ob("merge", root, other.parent))
    assert "another manifest key" in line and "model" in line
    assert (root / "m-x86_64-1" / "probes.jsonl").read_bytes() == before
    # a manifest whose key disagrees with its own recorded digest: refused
    bad = fake_run(tmp_path / "d", "m-x86_64-2", KEY, [rec("1.0", 0, "2025-01-01T00:00:00Z")])
    man = json.loads((bad / "manifest.json").read_text())
    man["batch"]["digest"] = "e" * 64
    (bad / "manifest.json").write_text(json.dumps(man))
    assert "batch digest" in one_line_error(ob("merge", root, bad))
    assert not (root / "m-x86_64-2").exists()


# -- real releases ------------------------------------------------------------------------

def run_matrix(path: Path, cache_dir: Path, results: Path, *extra) -> dict:
    r = ob("matrix", "run", path, "--cache-dir", cache_dir, "--results-dir", results, "--json", *extra)
    assert r.returncode == 0, r.stderr
    return r.json()


def comparable(root: Path):
    """The probes of a results root without what differs between two runs of the same probe (times)."""
    frame = history.history_frame(root)
    cols = ["run_id", "model_digest", "batch_digest", "version", "status", "verdict", "nan_rows", "inf_rows",
            "rows", "arch", "backend", "cpu", "python", "session_options"]
    return sorted(map(tuple, frame[cols].astype(str).values.tolist()))


@pytest.mark.release
@pytest.mark.qemu
@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 native + aarch64 under QEMU")
def test_matrix_two_models_two_archs_end_to_end_then_reused(tiny, cache_dir, tmp_path):
    path = write_matrix(tiny, "e2e", targets=[("x86_64", "auto"), ("aarch64", "qemu")])
    results = tmp_path / "results"
    t0 = time.perf_counter()
    first = run_matrix(path, cache_dir, results, "-j", "2")
    t1 = time.perf_counter()
    cells = {(c["cell"]["model_label"], c["cell"]["arch"]): c for c in first["cells"]}
    assert len(cells) == 4 and not first["failed"]
    verdicts = {k: {p["version"]: p["verdict"] for p in c["probes"]} for k, c in cells.items()}
    assert verdicts[("residual_overflow", "x86_64")] == {"1.23.2": "good", "1.24.1": "good"}
    assert verdicts[("residual_overflow", "aarch64")] == {"1.23.2": "good", "1.24.1": "bad"}
    assert cells[("residual_overflow", "aarch64")]["first_bad"] == "1.24.1"
    assert verdicts[("residual_norm", "x86_64")] == {"1.23.2": "bad", "1.24.1": "bad"}  # NaN since 1.20.0
    assert cells[("residual_overflow", "aarch64")]["provenance"]["backend"] == "qemu"
    lines = {d.name: (d / "probes.jsonl").read_text() for d in history.run_dirs(results)}
    assert len(lines) == 4

    second = run_matrix(path, cache_dir, results)
    t2 = time.perf_counter()
    assert all(p["reused"] for c in second["cells"] for p in c["probes"])  # every cell reused
    assert {d.name: (d / "probes.jsonl").read_text() for d in history.run_dirs(results)} == lines
    print(f"\nmatrix 2 models x 2 archs x 2 releases: first run {t1 - t0:.1f} s, second (all reused) {t2 - t1:.1f} s")

    # --refresh probes again and appends: the old records stay, the newest decides
    one = run_matrix(path, cache_dir, results, "--cell", "0", "--refresh")
    assert not any(p["reused"] for p in one["cells"][0]["probes"])
    run = results / one["cells"][0]["run_id"] / "probes.jsonl"
    assert run.read_text().startswith(lines[run.parent.name])
    assert len(run.read_text().splitlines()) == 2 * len(lines[run.parent.name].splitlines())


@pytest.mark.release
def test_merge_of_per_cell_results_equals_one_run_of_both(tiny, cache_dir, tmp_path):
    """What CI does: each cell on its own machine, then `merge`; the same as one run of the whole matrix."""
    path = write_matrix(tiny, "split")
    run_matrix(path, cache_dir, tmp_path / "cell0", "--cell", "0")
    run_matrix(path, cache_dir, tmp_path / "cell1", "--cell", "1")
    run_matrix(path, cache_dir, tmp_path / "both")
    merged = tmp_path / "merged"
    r = ob("merge", merged, tmp_path / "cell0", tmp_path / "cell1", "--json")
    assert r.returncode == 0, r.stderr
    assert comparable(merged) == comparable(tmp_path / "both")
    assert sorted(d.name for d in history.run_dirs(merged)) == sorted(d.name for d in history.run_dirs(tmp_path / "both"))
    # idempotent: merging again adds nothing
    again = ob("merge", merged, tmp_path / "cell0", tmp_path / "cell1", "--json")
    assert sum(x["added"] for x in again.json()) == 0
    # the merged root is a results root like any other: a run over it reuses every probe
    reused = run_matrix(path, cache_dir, merged)
    assert all(p["reused"] for c in reused["cells"] for p in c["probes"])
    # pandas reads the whole history in one call
    frame = history.history_frame(merged)
    assert set(frame["verdict"]) == {"good", "bad"} and frame["newest"].all()
