"""Typed evidence: the schema files under docs/schema/ and harness.results.evidence say the same, and real records pass."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from harness.errors import HarnessError
from harness.results import evidence
from harness.results.evidence import EvidenceError, ProbeRecord, RunManifest
from harness.results.store import RunStore, read_cell_document, read_manifest

SCHEMAS = Path(__file__).resolve().parent.parent / "docs" / "schema"
JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array",
              type(None): "null"}


def schema(name: str) -> dict:
    doc = json.loads((SCHEMAS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(doc)
    return doc


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema(name))


def _types(prop: dict) -> set[str]:
    if "enum" in prop:
        return {JSON_TYPES[type(v)] for v in prop["enum"]}
    t = prop["type"]
    return set(t) if isinstance(t, list) else {t}


def _py_types(types: tuple[type, ...]) -> set[str]:
    names = {JSON_TYPES[t] for t in types}
    return names - {"integer"} if "number" in names else names  # JSON's number includes its integers


@pytest.mark.parametrize("fields,file,path", [
    ({"version": (str,), "status": (str,), **evidence.RECORD_FIELDS}, "probe-record.v1.json", ()),
    (evidence.PROVENANCE_FIELDS, "probe-record.v1.json", ("provenance",)),
    (evidence.PROVIDERS_FIELDS, "probe-record.v1.json", ("providers",)),
    (evidence.METRICS_FIELDS, "probe-record.v1.json", ("metrics",)),
    (evidence.MARGIN_FIELDS, "probe-record.v1.json", ("margin",)),
    (evidence.TIMING_FIELDS, "probe-record.v1.json", ("timing",)),
    (evidence.RESULT_FIELDS, "probe-record.v1.json", ("result",)),
    (evidence.ROWS_FIELDS, "probe-record.v1.json", ("result", "rows")),
    (evidence.OUTPUT_FIELDS, "probe-record.v1.json", ("result", "outputs", "items")),
    (evidence.MANIFEST_FIELDS, "run-manifest.v1.json", ()),
    (evidence.KEY_FIELDS, "run-manifest.v1.json", ("key",)),
    (evidence.MODEL_FIELDS, "run-manifest.v1.json", ("model",)),
    (evidence.CELL_FIELDS, "cell-document.v1.json", ()),
    (evidence.CELL_PROBE_FIELDS, "cell-document.v1.json", ("probes", "items")),
    (evidence.CELL_KEY_FIELDS, "cell-document.v1.json", ("cell",)),
    (evidence.CELL_QUESTION_FIELDS, "cell-document.v1.json", ("question",)),
    (evidence.COMPARE_FIELDS, "compare-document.v1.json", ()),
    (evidence.COMPARE_PAIR_FIELDS, "compare-document.v1.json", ("pairs", "items")),
    (evidence.COMPARE_PAIR_FIELDS, "compare-document.v1.json", ("reference",)),
    (evidence.COMPARE_ENTRY_FIELDS, "compare-document.v1.json", ("pairs", "items", "releases", "items")),
    (evidence.COMPARE_REFERENCE_ENTRY_FIELDS, "compare-document.v1.json", ("reference", "releases", "items")),
])
def test_the_parser_types_each_key_as_its_schema_does(fields, file, path):
    node = schema(file)
    for step in path:
        node = node["properties"][step] if step != "items" else node["items"]
    props = node["properties"]
    assert set(fields) == set(props), (file, path)
    for key, types in fields.items():
        assert _py_types(types) == _types(props[key]), (file, path, key)


def real_record() -> dict:
    return {"version": "1.19.2", "package": "onnxruntime", "status": "ran", "reason": "ran", "seconds": 0.9,
            "finished": "2026-12-02T23:10:17Z", "repeats": 1, "env_seconds": 1.6, "env_created": True,
            "stderr_tail": "", "provenance": {"arch": "x86_64", "backend": "uv", "cpu": None, "python": "3.11"},
            "providers": {"requested": "CPUExecutionProvider", "used": ["CPUExecutionProvider"]},
            "metrics": {"outputs": {"y": {"dtype": "float32", "max_abs": 0.37, "headroom": None, "zero_rows": 0}},
                        "max_abs": 0.37, "headroom": None},
            "result": {"stage": "done", "error": None, "onnxruntime": {"version": "1.19.2"},
                       "outputs": [{"name": "y", "dtype": "float32", "shape": [20, 8], "sha256": "ab" * 32, "rows": 20,
                                    "nan_rows": 0, "inf_rows": 0, "zero_rows": 0, "nan": 0, "inf": 0, "max_abs": 0.37,
                                    "min": -0.37, "max": 0.2}],
                       "rows": {"rows": 20, "outputs": ["y"], "nan_rows": 0, "inf_rows": 0, "nonfinite_rows": 0,
                                "zero_rows": 0}}}


BROKEN = [
    ("version", lambda r: r.pop("version")),
    ("status", lambda r: r.pop("status")),
    ("version", lambda r: r.update(version="../../etc/passwd")),
    ("version", lambda r: r.update(version=1.19)),
    ("status", lambda r: r.update(status="fine")),
    ("seconds", lambda r: r.update(seconds="0.9")),
    ("seconds", lambda r: r.update(seconds=True)),
    ("provenance", lambda r: r.update(provenance=["x86_64"])),
    ("provenance.backend", lambda r: r["provenance"].update(backend=7)),
    ("result", lambda r: r.update(result="done")),
    ("result.outputs", lambda r: r["result"].update(outputs={"y": 1})),
    ("result.outputs[0].nan_rows", lambda r: r["result"]["outputs"][0].update(nan_rows="0")),
    ("result.outputs[0].name", lambda r: r["result"]["outputs"][0].update(name=None)),
    ("result.onnxruntime.version", lambda r: r["result"]["onnxruntime"].update(version=[1])),
    ("metrics", lambda r: r.update(metrics=None)),
    # a probe that ran without what it is judged from: `{"version": ..., "status": "ran"}` erased a boundary
    ("result", lambda r: r.pop("result")),
    ("result", lambda r: r.update(result=None)),
    ("result.outputs", lambda r: r["result"].pop("outputs")),
    ("result.outputs", lambda r: r["result"].update(outputs=[])),
    ("result.rows", lambda r: (r["result"].update(rows={"nan_rows": 0}), r["result"]["outputs"][0].pop("rows"))),
    ("result.rows", lambda r: (r["result"].pop("rows"), r["result"]["outputs"][0].pop("rows"))),
    # each type exact: what a reader does arithmetic or membership on
    ("result.rows", lambda r: r["result"].update(rows=[20, 0])),
    ("result.rows.nan_rows", lambda r: r["result"]["rows"].update(nan_rows="0")),
    ("result.rows.rows", lambda r: r["result"]["rows"].update(rows=None)),
    ("result.rows.outputs", lambda r: r["result"]["rows"].update(outputs="y")),
    ("result.outputs[0].rows", lambda r: r["result"]["outputs"][0].update(rows="20")),
    ("result.outputs[0].max_abs", lambda r: r["result"]["outputs"][0].update(max_abs="0.37")),
    ("result.outputs[0].shape", lambda r: r["result"]["outputs"][0].update(shape="20x8")),
    ("result.outputs[0].inf_rows", lambda r: r["result"]["outputs"][0].update(inf_rows=False)),
    ("result.outputs[0]", lambda r: r["result"].update(outputs=[["y", 20]])),
    ("result.error", lambda r: r["result"].update(error={"message": "x"})),
    ("metrics.headroom", lambda r: r["metrics"].update(headroom="0.9")),
    ("metrics.max_abs", lambda r: r["metrics"].update(max_abs=[0.37])),
    ("metrics.cosine_min", lambda r: r["metrics"].update(cosine_min=True)),
    ("metrics.outputs", lambda r: r["metrics"].update(outputs=[{"name": "y"}])),
    ("providers.used", lambda r: r["providers"].update(used="CPUExecutionProvider")),
    ("providers", lambda r: r.update(providers=["CPUExecutionProvider"])),
    ("repeats", lambda r: r.update(repeats=1.5)),
    ("finished", lambda r: r.update(finished=20261202)),
]


@pytest.mark.parametrize("where,breaks", BROKEN, ids=[f"{w}-{i}" for i, (w, _) in enumerate(BROKEN)])
def test_a_record_of_the_wrong_shape_is_refused_by_both_with_the_key(where, breaks):
    good = real_record()
    ProbeRecord.parse(good)
    validator("probe-record.v1.json").validate(good)
    bad = copy.deepcopy(good)
    breaks(bad)
    with pytest.raises(EvidenceError) as e:
        ProbeRecord.parse(bad)
    assert e.value.where == where
    assert not validator("probe-record.v1.json").is_valid(bad)


@pytest.mark.parametrize("counted", [
    lambda r: None,  # the worker's count across the outputs
    lambda r: r["result"].pop("rows"),  # a worker from before that count: the outputs' own rows
    lambda r: (r["result"].update(rows=None), [o.pop("rows") for o in r["result"]["outputs"]]),  # no numeric output
], ids=["rows", "outputs-rows", "no-numeric-output"])
def test_a_probe_that_ran_is_a_record_with_its_rows_counted_as_the_worker_counts_them(counted):
    rec = real_record()
    counted(rec)
    assert ProbeRecord.parse(rec).raw == rec
    validator("probe-record.v1.json").validate(rec)


@pytest.mark.parametrize("status", ["error", "crash", "timeout", "skip"])
def test_a_probe_that_did_not_run_needs_no_result(status):
    rec = {"version": "1.20.0", "status": status, "reason": "no result", "result": None}
    ProbeRecord.parse(rec)
    validator("probe-record.v1.json").validate(rec)


def test_a_ran_record_without_its_result_is_set_aside_and_does_not_move_the_boundary(tmp_path):
    from test_matrix import KEY, fake_run, ob, rec

    from harness.report.overview import collect

    d = fake_run(tmp_path / "src", "m-x86_64-1", KEY,
                 [rec("1.19.0", 0, "2025-01-01T00:00:00Z"), rec("1.20.0", 3, "2025-01-02T00:00:00Z")])
    with open(d / "probes.jsonl", "a") as f:  # a later line saying the bad release was fine, with nothing to show
        f.write(json.dumps({"version": "1.20.0", "status": "ran", "finished": "2025-01-03T00:00:00Z"}) + "\n")
    ev = RunStore(d).read()
    assert len(ev.records) == 2 and [b.line for b in ev.corrupt] == [3]
    assert ev.corrupt[0].why == ("not a probe record: result is missing: a probe that ran keeps the worker's result")
    with pytest.raises(HarnessError, match="line 3: not a probe record: result is missing"):
        RunStore(d).records()
    left_out = []
    assert collect(tmp_path / "src", left_out=left_out) == [] and len(left_out) == 1  # not judged good
    q = ob("merge", tmp_path / "root", tmp_path / "src", "--quarantine", "--json")
    assert q.returncode == 0, q.stderr
    (doc,) = q.json()
    assert (doc["added"], doc["quarantined"]) == (2, 1)
    (entry,) = [json.loads(x) for x in Path(doc["quarantine"]).read_text().splitlines()]
    assert entry["source"] == str(d / "probes.jsonl") and entry["line"] == 3
    (row,) = collect(tmp_path / "root")
    assert (row.last_good, row.first_bad) == ("1.19.0", "1.20.0")  # the boundary stands
    with pytest.raises(HarnessError, match="not appended.*result is missing"):
        RunStore(d).append({"version": "1.21.0", "status": "ran"})


def test_a_record_of_a_later_version_keeps_the_keys_this_one_does_not_know():
    rec = {**real_record(), "latency_ms": [1.0, 2.0]}
    parsed = ProbeRecord.parse(rec)
    assert parsed.raw["latency_ms"] == [1.0, 2.0] and parsed.version == "1.19.2"


def test_the_store_sets_aside_a_line_of_the_wrong_shape(tmp_path):
    run = tmp_path / "r"
    store = RunStore.open(tmp_path, "r", {"model": "m"}, {}, ["bisect"])
    store.append(real_record())
    with open(run / "probes.jsonl", "a") as f:
        f.write(json.dumps({**real_record(), "result": "done"}) + "\n")
    ev = store.read()
    assert len(ev.records) == 1 and len(ev.corrupt) == 1
    assert "result is a string" in ev.corrupt[0].why


@pytest.mark.parametrize("breaks,where", [
    (lambda m: m.pop("key"), "key"),
    (lambda m: m["key"].update(outputs="y"), "key.outputs"),
    (lambda m: m.update(run_id="../elsewhere"), "run_id"),
    (lambda m: m["model"].update(path=["/etc/passwd"]), "model.path"),
    (lambda m: m.update(commands=[{"argv": "bisect run"}]), "commands[0].argv"),
])
def test_a_manifest_of_the_wrong_shape_is_refused_by_both(tmp_path, breaks, where):
    store = RunStore.open(tmp_path, "r", {"model": "m", "outputs": ["y"]}, {"model": {"name": "n", "path": "/m"}},
                          ["bisect", "run"])
    good = read_manifest(store.dir)
    validator("run-manifest.v1.json").validate(good)
    bad = copy.deepcopy(good)
    breaks(bad)
    with pytest.raises(EvidenceError) as e:
        RunManifest.parse(bad)
    assert e.value.where == where
    assert not validator("run-manifest.v1.json").is_valid(bad)


@pytest.mark.release
def test_a_real_run_writes_evidence_its_schemas_accept(bisect, residual_norm, tmp_path):
    model, batch = residual_norm
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0", "--json",
               results=tmp_path / "res")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    run = tmp_path / "res" / doc["run_id"]
    records = [json.loads(line) for line in (run / "probes.jsonl").read_text().splitlines()]
    assert {x["version"] for x in records} == {"1.19.2", "1.20.0"}
    for rec in records:
        validator("probe-record.v1.json").validate(rec)
        assert ProbeRecord.parse(rec).raw == rec
    validator("run-manifest.v1.json").validate(json.loads((run / "manifest.json").read_text()))
    cells = sorted((run / "cells").glob("*.json"))
    assert cells
    for cell in cells:
        validator("cell-document.v1.json").validate(json.loads(cell.read_text()))
        assert read_cell_document(cell).raw == json.loads(cell.read_text())
    validator("cell-document.v1.json").validate(doc)


# -- what a line may cost to read: its length and its nesting are bounded -------------------------------

def nested(depth: int) -> str:
    """A record whose `note` nests lists so that the whole line is `depth` objects and arrays deep."""
    return json.dumps({**real_record(), "note": None})[:-1].replace('"note": null', '"note": ' + "[" * (depth - 1)
                                                                   + "]" * (depth - 1)) + "}"


DEEP = nested(100_000).encode()


def test_a_line_nested_deeper_than_the_bound_is_a_bad_line_not_a_recursion_error(tmp_path):
    store = RunStore.open(tmp_path, "r", {"model": "m"}, {}, ["bisect"])
    store.append(real_record())
    with open(store.dir / "probes.jsonl", "ab") as f:
        f.write(nested(evidence.MAX_DEPTH).encode() + b"\n" + nested(evidence.MAX_DEPTH + 1).encode() + b"\n"
                + DEEP + b"\n")
    ev = store.read()
    assert len(ev.records) == 2  # as deep as the bound: a record
    assert [(b.line, b.why) for b in ev.corrupt] == [(n, f"nested deeper than {evidence.MAX_DEPTH} objects and arrays")
                                                      for n in (3, 4)]
    with pytest.raises(HarnessError, match="line 3: nested deeper than"):
        store.records()


def test_a_line_longer_than_the_bound_is_refused_unread_and_never_written(tmp_path):
    store = RunStore.open(tmp_path, "r", {"model": "m"}, {}, ["bisect"])
    big = {**real_record(), "stderr_tail": "x" * evidence.MAX_RECORD_BYTES}
    with pytest.raises(HarnessError, match=f"not appended.*longer than {evidence.MAX_RECORD_BYTES} bytes"):
        store.append(big)
    assert not (store.dir / "probes.jsonl").exists()
    (store.dir / "probes.jsonl").write_text(json.dumps(big) + "\n" + json.dumps(real_record()) + "\n")
    ev = store.read()
    assert len(ev.records) == 1 and ev.corrupt[0].line == 1 and "longer than" in ev.corrupt[0].why


def deep_run(tmp_path: Path) -> Path:
    """A results root of one run whose second line is nested 100,000 deep."""
    from test_matrix import KEY, fake_run, rec

    d = fake_run(tmp_path, "m-x86_64-1", KEY, [rec(f"1.{i}", 0, f"2025-01-0{i + 1}T00:00:00Z") for i in range(3)])
    lines = (d / "probes.jsonl").read_bytes().split(b"\n")
    lines.insert(1, DEEP)
    (d / "probes.jsonl").write_bytes(b"\n".join(lines))
    return d


def test_run_over_a_deeply_nested_line_stops_with_the_file_and_line(tmp_path):
    from replay import ReplayRunner, ran, releases

    from harness.driver import Driver
    from harness.probe import ProbeJob
    from harness.verdicts import parse_predicate

    d = deep_run(tmp_path)
    driver = Driver(ReplayRunner({"1.0": ran(), "1.3": ran()}), releases("1.0", "1.3"), RunStore(d),
                    ProbeJob(Path("m"), Path("b")), parse_predicate("nan"))
    with pytest.raises(HarnessError, match=f"{d / 'probes.jsonl'} line 2: nested deeper than"):
        driver.run()


def test_merge_over_a_deeply_nested_line_refuses_or_sets_it_aside(tmp_path):
    from test_matrix import ob

    d = deep_run(tmp_path / "src")
    r = ob("merge", tmp_path / "root", tmp_path / "src")
    assert r.returncode == 1 and "RecursionError" not in r.stderr, r.stderr
    assert f"{d / 'probes.jsonl'} line 2: nested deeper than" in r.stderr
    q = ob("merge", tmp_path / "root", tmp_path / "src", "--quarantine", "--json")
    assert q.returncode == 0, q.stderr
    (doc,) = q.json()
    assert (doc["added"], doc["quarantined"]) == (3, 1)
    (entry,) = [json.loads(x) for x in Path(doc["quarantine"]).read_text().splitlines()]
    assert entry["line"] == 2 and entry["raw"].encode() == DEEP


def test_dashboard_over_a_deeply_nested_line_leaves_the_run_out(tmp_path):
    from test_matrix import ob

    deep_run(tmp_path / "res")
    r = ob("dashboard", tmp_path / "res", "-o", tmp_path / "site")
    assert r.returncode == 0, r.stderr
    assert "1 run(s) left out" in r.stdout and "line 2: nested deeper than" in r.stderr


# -- cell documents: the run document of each search, as cells/<key>.json keeps it -----------------------

def searched(root: Path, mode: str = "regression", sweep: bool = False) -> Path:
    """A run directory under `root` with the records and the cell document of one replayed search."""
    from replay import ReplayRunner, ran, releases

    from harness.plan import Plan
    from harness.probe import ProbeJob
    from harness.session import run_search
    from harness.verdicts import parse_predicate

    versions = ("1.19.0", "1.19.2", "1.20.0", "1.21.0")
    outcomes = {v: ran(nan_rows=(2 if i >= 2 else 0) if mode == "regression" else (0 if i >= 2 else 2))
                for i, v in enumerate(versions)}
    store = RunStore.open(root, f"replay-{mode}-{sweep}", {"arch": "x86_64", "model": "m", "batch": "b"}, {}, ["test"])
    plan = Plan(ReplayRunner(outcomes), releases(*versions), store, ProbeJob(root / "m.onnx", root / "b.npz"),
                parse_predicate("nan-or-inf"), None, None)
    run_search(plan, mode=mode, sweep=sweep)
    return store.dir


def cell_of(run_dir: Path) -> dict:
    (path,) = sorted((run_dir / "cells").glob("*.json"))
    return json.loads(path.read_text())


@pytest.mark.parametrize("mode,sweep", [("regression", False), ("fix", False), ("regression", True)])
def test_the_cell_documents_a_search_keeps_are_accepted_by_both(tmp_path, mode, sweep):
    from harness.results.evidence import CellDocument

    doc = cell_of(searched(tmp_path, mode, sweep))
    validator("cell-document.v1.json").validate(doc)
    parsed = CellDocument.parse(doc)
    assert parsed.raw == doc and parsed.predicate == "nan-or-inf" and parsed.key == doc["cell"]["key"]
    (path,) = (tmp_path / f"replay-{mode}-{sweep}" / "cells").glob("*.json")
    assert read_cell_document(path).raw == doc


BROKEN_CELLS = [
    ("run_id", lambda d: d.pop("run_id")),
    ("mode", lambda d: d.update(mode="bisect")),
    ("releases", lambda d: d.update(releases="1.19.0..1.21.0")),
    ("probes", lambda d: d.update(probes={"1.19.0": "good"})),
    ("probes[0].verdict", lambda d: d["probes"][0].update(verdict="fine")),
    ("probes[0].version", lambda d: d["probes"][0].pop("version")),
    ("probes[0].nan_rows", lambda d: d["probes"][0].update(nan_rows="2")),
    ("probes[0].reused", lambda d: d["probes"][0].update(reused="no")),
    ("first_bad", lambda d: d.update(first_bad=["1.20.0"])),
    ("generated", lambda d: d.update(generated=20250109)),
    ("predicate", lambda d: d.update(predicate=["nan"])),
    ("cell", lambda d: d.update(cell="k")),
    ("cell.key", lambda d: d["cell"].update(key="../../elsewhere")),
    ("cell.key", lambda d: d["cell"].pop("key")),
    ("explanation", lambda d: d.update(explanation=["fp16"])),
    ("message", lambda d: d.update(message=None)),
    ("skipped", lambda d: d.update(status="skipped", skipped=["no NVIDIA GPU"])),
]


@pytest.mark.parametrize("where,breaks", BROKEN_CELLS, ids=[f"{w}-{i}" for i, (w, _) in enumerate(BROKEN_CELLS)])
def test_a_cell_document_of_the_wrong_shape_is_refused_by_both_with_the_key(tmp_path, where, breaks):
    from harness.results.evidence import CellDocument

    bad = cell_of(searched(tmp_path))
    breaks(bad)
    with pytest.raises(EvidenceError) as e:
        CellDocument.parse(bad)
    assert e.value.where == where
    assert not validator("cell-document.v1.json").is_valid(bad)


@pytest.mark.parametrize("predicate", ["nan-or-whatever", "max-abs", "cosine>0.9", "nan-or-inf; rm -rf /"])
def test_a_cell_document_with_a_predicate_bad_if_does_not_read_is_refused(tmp_path, predicate):
    from harness.results.evidence import CellDocument

    doc = {**cell_of(searched(tmp_path)), "predicate": predicate}
    with pytest.raises(EvidenceError, match="predicate .* is not a predicate") as e:
        CellDocument.parse(doc)
    assert e.value.where == "predicate"


def test_the_dashboard_leaves_out_each_cell_document_it_cannot_read_and_builds_from_the_rest(tmp_path):
    from test_matrix import ob

    root = tmp_path / "res"
    d = searched(root)
    good = cell_of(d)
    cells = d / "cells"
    (cells / "bogus.json").write_text(json.dumps({**good, "cell": {"key": "bogus"}, "predicate": "nan-or-whatever"}))
    (cells / "typed.json").write_text(json.dumps({**good, "cell": {"key": "typed"}, "first_bad": ["1.20.0"]}))
    (cells / "deep.json").write_text('{"cell": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (cells / "junk.json").write_text("{not json")
    r = ob("dashboard", root, "-o", tmp_path / "site")
    assert r.returncode == 0, r.stderr
    assert "4 cell document(s) left out, unreadable" in r.stdout
    for name, why in [("bogus", "predicate 'nan-or-whatever' is not a predicate"), ("typed", "first_bad is an array"),
                      ("deep", "nested deeper than"), ("junk", "not JSON")]:
        assert f"dashboard: leaving out {cells / name}.json: not a cell document: {why}" in r.stderr
    grid = json.loads((tmp_path / "site" / "dashboard.json").read_text())
    (row,) = grid.values()  # the run, judged under the one predicate its readable document names
    assert (row["last_good"], row["first_bad"]) == ("1.19.2", "1.20.0")
    page = (tmp_path / "site" / "index.html").read_text()
    assert '<div class="left-out" data-count="4">' in page and "4 cell document(s) left out" in page
    assert f"{d.name}/cells/bogus.json</span>" in page


def test_merge_over_a_cell_document_it_cannot_read_keeps_the_readable_one(tmp_path):
    from test_matrix import ob

    src = searched(tmp_path / "src")
    root = tmp_path / "root"
    assert ob("merge", root, src.parent).returncode == 0
    (path,) = (src / "cells").glob("*.json")
    kept = (root / src.name / "cells" / path.name).read_text()
    path.write_text('{"generated": "9999", "x": ' + "[" * 100_000 + "]" * 100_000 + "}")  # deep, and "newer"
    r = ob("merge", root, src.parent)
    assert r.returncode == 0, r.stderr
    assert (root / src.name / "cells" / path.name).read_text() == kept
