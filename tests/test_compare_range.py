"""`bisect compare --from A --to B`: pairs compared release by release, above the runner.

The comparison's logic runs on tests/replay.py (recorded outcomes, outputs the
test writes); the refusals run `bisect compare` in this process with nothing
provisioned (tests/inproc.py) on listings the test writes. The real releases
are in tests/test_packages_real.py.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
from replay import ReplayRunner, outputs

from harness.plan import Plan
from harness.probe import ProbeJob
from harness.releases.packages import Package
from harness.releases.versions import Release, Target
from harness.report import dashboard, numbers
from harness.results.evidence import CompareDocument, EvidenceError
from harness.results.store import RunStore, read_compare_document
from harness.runners.workers import ProcessOutcome
from harness.triage.compare import CHANGE, compare_over, pair_story
from harness.verdicts import parse_predicate

X86 = "cp311-cp311-manylinux_2_28_x86_64"
ARM = "cp311-cp311-manylinux_2_28_aarch64"
CPU = Package()
OPENVINO = Package("onnxruntime-openvino", "openvino")
EVIL = "<script>window.__pwned = 1</script>"


SCHEMA = Path(__file__).resolve().parent.parent / "docs" / "schema" / "compare-document.v1.json"


def schema(doc: dict) -> None:
    """`doc` is valid against docs/schema/compare-document.v1.json."""
    import jsonschema

    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(json.loads(json.dumps(doc)))


def wheels(name: str, versions: dict[str, str]) -> list[Release]:
    """Releases of `name`, each with a wheel of the tag given (an aarch64 one has none for this target)."""
    return [Release(v, [f"{name.replace('-', '_')}-{v}-{tag}.whl"]) for v, tag in versions.items()]


def ran(nan_rows: int) -> ProcessOutcome:
    return ProcessOutcome(0, None, False, 0.01, "", {"stage": "done", "outputs": [outputs(4, nan_rows)],
                                                     "rows": {"rows": 4, "outputs": ["y"], "nan_rows": nan_rows,
                                                              "inf_rows": 0, "nonfinite_rows": nan_rows,
                                                              "zero_rows": 0}})


BASE = np.arange(32, dtype=np.float32).reshape(4, 8) / 32


def pair_plan(root: Path, run_id: str, package: Package, releases: list[Release], nan: dict[str, int],
              shift: dict[str, float]) -> Plan:
    """A pair's plan on a replay runner: each release's NaN rows, its outputs BASE moved by `shift`."""
    def arrays(version, _model):
        y = BASE + np.float32(shift.get(version, 0.0))
        y[: nan.get(version, 0)] = np.nan
        return {"y": y}

    runner = ReplayRunner({v: ran(n) for v, n in nan.items()}, Target("x86_64", "3.11"), arrays)
    runner.package = package
    store = RunStore.open(root, run_id, {"model": "m" * 64, "batch": "b" * 64, "outputs": [], "arch": "x86_64",
                                         "backend": "replay", "python": "3.11", "cpu": None, **package.key()},
                          {"model": {"name": "tiny"}}, ["test"])
    return Plan(runner, releases, store, ProbeJob(root / "m.onnx", root / "b.npz"), parse_predicate("nan-or-inf"),
                None, None)


def compare_store(root: Path) -> RunStore:
    return RunStore.open(root, "tiny-compare-x86_64-0", {"model": "m" * 64, "batch": "b" * 64, "outputs": [],
                                                           "arch": "x86_64", "backend": "replay", "python": "3.11",
                                                           "cpu": None, "triage": "compare"},
                         {"model": {"name": "tiny"}}, ["test"])


@pytest.fixture
def lacking(tmp_path):
    """The reference has 1.20.0, 1.20.1, 1.21.0 and an aarch64-only 1.22.0; the other pair lacks 1.20.1 and has a
    1.19.0 the reference lacks. It agrees at 1.20.0 and has a NaN row fewer at 1.21.0."""
    ref = pair_plan(tmp_path, "tiny-x86_64-0", CPU,
                    wheels("onnxruntime", {"1.20.0": X86, "1.20.1": X86, "1.21.0": X86, "1.22.0": ARM}),
                    {"1.20.0": 0, "1.20.1": 0, "1.21.0": 1, "1.22.0": 0}, {})
    ov = pair_plan(tmp_path, "tiny-onnxruntime-openvino-openvino-x86_64-0", OPENVINO,
                   wheels("onnxruntime-openvino", {"1.19.0": X86, "1.20.0": X86, "1.21.0": X86, "1.22.0": X86}),
                   {"1.19.0": 0, "1.20.0": 0, "1.21.0": 0, "1.22.0": 0}, {"1.20.0": 1e-6})
    return [ref, ov], compare_store(tmp_path)


def test_a_release_one_side_lacks_is_said_not_probed_nor_failed(lacking):
    plans, store = lacking
    doc = compare_over(plans, store, "tiny", "1.19.0", "1.22.0")
    assert doc["releases"] == ["1.19.0", "1.20.0", "1.20.1", "1.21.0", "1.22.0"]
    (ov,) = doc["pairs"]
    assert ov["label"] == "onnxruntime-openvino:openvino" and doc["reference"]["label"] == "onnxruntime:cpu"
    rows = {e["release"]: (e["diverges"], e["why"]) for e in ov["releases"]}
    assert rows == {
        "1.19.0": (None, "not compared: no such onnxruntime release (the reference)"),
        "1.20.0": (False, "agrees"),
        "1.20.1": (None, "not compared: no such onnxruntime-openvino release"),
        "1.21.0": (True, "NaN rows 0 vs 1"),
        "1.22.0": (None, "not compared: onnxruntime: no wheel for x86_64 / Python 3.11 (the reference)"),
    }
    at = {e["release"]: e for e in ov["releases"]}
    assert at["1.20.0"]["max_abs_diff"] == pytest.approx(1e-6, rel=0.2) and at["1.20.0"]["cosine"] > 0.9999
    assert at["1.20.1"]["cosine"] is None and at["1.20.1"]["max_abs_diff"] is None
    # only what both sides have is probed: nothing of 1.19.0, 1.20.1 or 1.22.0, on either side
    assert sorted(plans[0].runner.calls) == ["1.20.0", "1.21.0"] and sorted(plans[1].runner.calls) == ["1.20.0", "1.21.0"]
    ref = {e["release"]: e for e in doc["reference"]["releases"]}
    assert ref["1.21.0"]["nan_rows"] == 1 and ref["1.20.1"]["status"] is None
    assert ref["1.20.1"]["why"] == "no other pair has it"
    assert doc["probes"] == {"made": 4, "reused": 0}
    assert doc["message"].startswith("From 1.19.0 to 1.22.0, against onnxruntime:cpu: onnxruntime-openvino:openvino "
                                     "first diverges at 1.21.0 (NaN rows 0 vs 1).")
    assert ("Not compared: onnxruntime-openvino:openvino at 1.19.0 (no such onnxruntime release (the reference)); "
            "onnxruntime-openvino:openvino at 1.20.1 (no such onnxruntime-openvino release)") in doc["message"]
    # kept as a document of its own run, of its schema's shape
    assert read_compare_document(store.dir).raw == json.loads(json.dumps(doc))
    schema(doc)


def test_comparing_again_probes_nothing(lacking):
    plans, store = lacking
    first = compare_over(plans, store, "tiny", "1.19.0", "1.22.0")
    calls = [list(p.runner.calls) for p in plans]
    lines = [len(p.store.records()) for p in plans]
    again = compare_over(plans, store, "tiny", "1.19.0", "1.22.0")
    assert again["probes"] == {"made": 0, "reused": 4}
    assert [p.runner.calls for p in plans] == calls and [len(p.store.records()) for p in plans] == lines
    assert again["pairs"] == first["pairs"]


def test_the_progress_lines_count_every_pair_s_probes(lacking):
    """"probe i of at most N" of the whole comparison (N: every pair's probes, not the pair's at hand), with the time
    elapsed and an ETA at the pace of the probes made so far."""
    from io import StringIO

    from rich.console import Console

    from harness.report.terminal import ProbeLines

    plans, store = lacking
    text = StringIO()
    with ProbeLines(Console(file=text, width=200)) as progress:
        compare_over(plans, store, "tiny", "1.19.0", "1.22.0", observer=progress)
    lines = re.findall(r"^probe +(\d+) of at most (\d+): \S+ (\S+) .*\((.*)\)$", text.getvalue(), re.M)
    assert [(int(i), int(n), v) for i, n, v, _ in lines] == [(1, 4, "1.20.0"), (2, 4, "1.21.0"), (3, 4, "1.20.0"),
                                                            (4, 4, "1.21.0")], text.getvalue()
    assert all(re.fullmatch(r"0\.0 s; 0 s elapsed; about 0 s left", how) for *_, how in lines), lines


def entry(v, d, diverges=False, why="agrees"):
    return {"release": v, "cosine": 1.0, "max_abs_diff": d, "diverges": diverges, "why": why}


def test_a_max_diff_that_moves_past_the_threshold_is_named_and_one_below_it_is_not():
    reference = {"releases": [{"release": v, "max_abs": 0.5} for v in ("1", "2", "3", "4")]}
    below = 0.9 * CHANGE * 0.5
    side = {"label": "p", "releases": [entry("1", 1e-4), entry("2", 1e-4 + below), entry("3", 1e-4 + below + 3 * below),
                                       entry("4", 1e-4, True, "NaN rows 0 vs 7")]}
    story = pair_story(side, reference)
    assert story == "p max |diff| 0.00055 -> 0.0019 at 3; first diverges at 4 (NaN rows 0 vs 7)", story
    assert "at 2" not in story
    steady = {"label": "p", "releases": [entry("1", 1e-4), entry("2", 1e-4 + below)]}
    assert pair_story(steady, reference) == "p agrees at every release compared (2)"
    always = {"label": "p", "releases": [entry(v, 1e-4, True, "NaN rows 0 vs 7") for v in ("1", "2")]}
    assert pair_story(always, reference) == "p diverges at every release compared (2), from 1 (NaN rows 0 vs 7)"
    back = {"label": "p", "releases": [entry("1", 1e-4, True, "NaN rows 0 vs 7"), entry("2", 1e-4)]}
    assert pair_story(back, reference) == "p diverges from 1 (NaN rows 0 vs 7); agrees from 2"


# -- the dashboard's rows ---------------------------------------------------------------------------------


def test_the_dashboard_draws_a_row_per_pair_and_a_cell_per_release(lacking, tmp_path):
    plans, store = lacking
    doc = compare_over(plans, store, "tiny", "1.19.0", "1.22.0")
    doc["pairs"][0]["label"] = EVIL  # evidence read back is text, never markup
    store.save_document("compare", doc)
    site = tmp_path / "site"
    left_out: list = []
    html = dashboard.build(tmp_path, site, left_out=left_out).read_text()
    assert left_out == []
    section = html[html.index('<section id="divergence">'):]
    section = section[:section.index("</section>")]
    assert "<h2>Package and provider divergence</h2>" in section
    assert EVIL not in html and "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in section
    assert section.count('<tr class="pair"') == 1
    cells = section.split('<tr class="pair"')[1].split("<td ")[1:]
    assert [c.split('data-version="')[1].split('"')[0] for c in cells] == doc["releases"]
    assert [c.split('class="')[1].split('"')[0] for c in cells] == ["v skip", "v good", "v skip", "v bad", "v skip"]
    diff = doc["pairs"][0]["releases"][1]["max_abs_diff"]
    assert 0 < diff < 2e-6 and f">{numbers.human(diff)}<" in cells[1], cells[1]  # the max |diff| of 1.20.0, for people
    assert (site / "data" / store.run_id / "compare.json").is_file()
    grid = html[html.index('<section id="overview">'):html.index('<section id="history">')]
    assert store.run_id not in grid  # the compare run holds no probes: no row of the verdict grid
    assert "tiny-onnxruntime-openvino-openvino-x86_64-0" in grid  # the pairs' own runs are rows as ever


@pytest.mark.parametrize("damage, where", [
    (lambda d: d.pop("releases"), "releases is missing"),
    (lambda d: d["pairs"][0]["releases"].pop(), "pairs[0].releases does not hold one entry per release"),
    (lambda d: d["pairs"][0]["releases"][1].update(diverges="no"), "pairs[0].releases[1].diverges is a string"),
    (lambda d: d["reference"]["releases"][0].update(release="../x"), "reference.releases does not hold one entry"),
    (lambda d: d.update(releases=["../../etc"] * 5), "releases[0] is not a release version"),
    (lambda d: d.update(kind="options"), "kind 'options' is not 'compare-range'"),
])
def test_a_compare_document_of_the_wrong_shape_is_left_out_with_a_word(lacking, tmp_path, damage, where):
    plans, store = lacking
    doc = compare_over(plans, store, "tiny", "1.19.0", "1.22.0")
    CompareDocument.parse(doc)
    damage(doc)
    with pytest.raises(EvidenceError, match=f"not a compare document: {where}".replace("[", r"\[").replace("]", r"\]")):
        CompareDocument.parse(doc)
    (store.dir / "compare.json").write_text(json.dumps(doc))
    left_out: list = []
    html = dashboard.build(tmp_path, tmp_path / "site", left_out=left_out).read_text()
    assert [(p.name, why.split(": ", 1)[0]) for p, why in left_out] == [(store.run_id, "compare.json")]
    assert 'id="divergence"' not in html and store.run_id in html  # named among what was left out


# -- refusals, before any listing or probe ----------------------------------------------------------------


def listing(cache: Path, name: str, versions: list[str]) -> None:
    (cache / "index").mkdir(parents=True, exist_ok=True)
    (cache / "index" / f"{name}.json").write_text(json.dumps({"fetched_at": time.time(), "releases": [
        {"version": v, "wheels": [f"{name.replace('-', '_')}-{v}-{X86}.whl"]} for v in versions]}))


@pytest.fixture
def argv(residual_norm, tmp_path):
    cache = tmp_path / "cache"
    listing(cache, "onnxruntime", ["1.23.0", "1.23.1", "1.23.2", "1.24.1"])
    listing(cache, "onnxruntime-openvino", ["1.22.0", "1.23.0", "1.24.1"])
    model, batch = residual_norm
    return ["compare", "--model", model, "--inputs", batch, "--cache-dir", cache, "--results-dir",
            tmp_path / "results"]


@pytest.mark.parametrize("args, message", [
    (["--from", "1.24.1", "--to", "1.23.0"], "--from 1.24.1 is after --to 1.23.0"),
    (["--from", "1.23.0", "--to", "1.99.0"], "--to 1.99.0: no such onnxruntime or onnxruntime-openvino release "
                                             "(nearest: "),
    (["--from", "1.22.1", "--to", "1.23.0"], "--from 1.22.1: no such onnxruntime or onnxruntime-openvino release"),
    (["--from", "1.22.0", "--to", "1.22.0"], "onnxruntime:cpu: onnxruntime has no release from 1.22.0 to 1.22.0; "
                                             "nothing to compare it on"),
    (["--from", "1.23.0", "--to", "1.24.1", "onnxruntime-silicon:cpu"],
     "--package onnxruntime-silicon: not an onnxruntime package this harness knows"),
    (["--from", "1.23.0", "--to", "1.24.1", "onnxruntime-openvino:tpu"],
     "--ep tpu: onnxruntime-openvino runs cpu, openvino, not tpu"),
    (["--from", "1.23.0", "--to", "1.24.1", "onnxruntime-openvino"], "expected PACKAGE:EP"),
    (["--from", "1.23.0"], "--from 1.23.0: give --to too"),
    (["--to", "1.23.0"], "--to 1.23.0: give --from too"),
    (["--version", "1.23.0", "--from", "1.23.0", "--to", "1.24.1"], "--version 1.23.0: give one release (--version) "
                                                                     "or a range (--from, --to), not both"),
    ([], "give a release (--version V) or a range (--from A --to B)"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_bad_range_or_pair_is_one_line_and_exit_2_before_any_probe(offline_cli, argv, tmp_path, args, message):
    pairs = [] if any(":" in a or a == "onnxruntime-openvino" for a in args) else ["onnxruntime-openvino:openvino"]
    r = offline_cli(*argv, *args, "onnxruntime:cpu", *pairs)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.lines) == 1 and r.lines[0].startswith("error: "), r.stderr
    assert message in r.lines[0], r.lines[0]
    assert not (tmp_path / "results").exists()


def test_a_good_range_gets_as_far_as_provisioning(offline_cli, argv, tmp_path):
    """The refusals above are of the range and the pairs: the same command with a good one passes every check."""
    r = offline_cli(*argv, "--from", "1.23.0", "--to", "1.24.1", "onnxruntime:cpu", "onnxruntime-openvino:openvino")
    assert r.returncode is None, r.stderr  # stopped at the first provisioning, where a probe would begin
