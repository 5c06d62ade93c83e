"""One run, several questions: what a reader of a run (report, reduce, drift) answers is the question a search
asked, kept in its run document, never what the manifest last said.

The runs are real run directories (tests/inproc.py opens them as `bisect run` does, nothing installed); their
probes come from a replay runner (tests/replay.py), with outputs saved as a worker saves them.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import builders
import inproc
import numpy as np
import pytest
from replay import ReplayRunner, crash, error, ran

from harness import reference
from harness.cli import main
from harness.errors import UsageError
from harness.report import upstream
from harness.request import release_listing
from harness.session import asked_of_run, probe_releases, run_search
from harness.summary import Question
from harness.verdicts import parse_predicate

VERSIONS = ("1.19.0", "1.19.2", "1.20.0", "1.20.1", "1.21.0", "1.21.1", "1.22.0")
TRUTH = np.array([[1.0, 0.0, 0.5], [0.0, 2.0, 1.0]], np.float32)
WRONG = np.array([[1.0, 0.0, 0.5], [2.0, 0.0, -1.0]], np.float32)


def drifting(first_wrong: str):
    """Outputs equal to TRUTH before `first_wrong`, finite and wrong (one row) from it on."""
    return lambda version, model: {"y": TRUTH if version < first_wrong else WRONG}


@pytest.fixture
def made(tmp_path, listing):
    """(a plan of a fresh run, its cache): the run directory is real, its runner is replaced per search."""
    d = tmp_path / "made"
    d.mkdir()
    builders.save(builders.residual_norm_model(), d / "model.onnx")
    np.savez(d / "batch.npz", **builders.residual_norm_inputs())
    cache = tmp_path / "cache"
    shutil.copytree(listing, cache / "index")
    return inproc.open_run(d / "model.onnx", d / "batch.npz", cache, tmp_path / "results"), cache


def search(plan, cache, runner, predicate: str, ref=None, versions=VERSIONS, **kw):
    listing = {r.version: r for r in release_listing(cache, offline=True)}
    p = dataclasses.replace(plan, runner=runner, releases=[listing[v] for v in versions],
                            predicate=parse_predicate(predicate), reference=ref)
    return run_search(p, **kw).doc


def plans_run_on(monkeypatch, runner) -> None:
    """Every plan made from here on (reduce's own) probes on `runner`: the run directory stays real."""
    import harness.plan

    real_plan = harness.plan.make_plan
    monkeypatch.setattr(harness.plan, "make_plan",
                        lambda spec, command=None, log=None, **kw: dataclasses.replace(real_plan(spec, command, **kw),
                                                                                       runner=runner))


def report(run_dir: Path, cache: Path, **kw) -> dict:
    return upstream.build(run_dir, cache_dir=cache, offline=True, probe=False, **kw)


def trace_like(plan, cache):
    """What `trace` and `diff` do to a run before they trace: open it with the default predicate, no reference."""
    d = Path(plan.job.model).parent
    return inproc.open_run(d / "model.onnx", d / "batch.npz", cache, plan.store.dir.parent)


def test_a_trace_after_a_reference_run_leaves_the_reports_boundary_as_the_run_found_it(made):
    plan, cache = made
    listing = {r.version: r for r in release_listing(cache, offline=True)}
    run = search(plan, cache, ReplayRunner({v: ran() for v in VERSIONS}, arrays=drifting("1.21.0")),
                 "cosine<0.999", reference.from_release(listing["1.19.0"]))
    assert (run["last_good"], run["first_bad"]) == ("1.20.1", "1.21.0")
    trace_like(plan, cache)
    manifest = json.loads((plan.store.dir / "manifest.json").read_text())
    assert "predicate" not in manifest and "reference" not in manifest  # nothing of a question in the manifest
    doc = report(plan.store.dir, cache)
    assert (doc["last_good"], doc["first_bad"]) == (run["last_good"], run["first_bad"])
    assert doc["predicate"] == "cosine<0.999" and doc["question"]["key"] == run["cell"]["key"]
    verdicts = {p["version"]: p["verdict"] for p in doc["probes"]}
    assert (verdicts["1.20.1"], verdicts["1.21.0"]) == ("good", "bad")  # not error: judged against the reference
    assert "the outputs of onnxruntime 1.19.0" in doc["bad_means"]
    md = upstream.markdown(doc)
    assert "No good-to-bad boundary" not in md and "**1.21.0**" in md


def test_a_reference_search_probes_again_the_releases_whose_outputs_the_run_does_not_hold(made, tmp_path):
    """Probes that kept no outputs (a results disk that took no file) cannot be compared with a reference: a
    search that compares probes those releases again, and answers from the new records."""
    plan, cache = made
    plain = search(plan, cache, ReplayRunner({v: ran() for v in VERSIONS}), "nan-or-inf", sweep=True)
    assert plain["probe_count"] == len(VERSIONS) and not any((plan.store.dir / "outputs").glob("*.npz"))
    np.savez(tmp_path / "ref.npz", y=TRUTH)
    from harness.models.inputs import arrays_digest
    runner = ReplayRunner({v: ran() for v in VERSIONS}, arrays=drifting("1.21.0"))
    compared = search(plan, cache, runner, "cosine<0.999",
                      reference.from_file(tmp_path / "ref.npz", {"y": TRUTH}, arrays_digest({"y": TRUTH})))
    assert (compared["last_good"], compared["first_bad"]) == ("1.20.1", "1.21.0"), compared["message"]
    assert runner.calls and not any(p["reused"] for p in compared["probes"])


def test_two_references_are_two_questions_and_neither_judges_with_the_others_numbers(made, tmp_path):
    plan, cache = made
    listing = {r.version: r for r in release_listing(cache, offline=True)}
    runner = ReplayRunner({v: ran() for v in VERSIONS}, arrays=drifting("1.21.0"))
    by_release = search(plan, cache, runner, "cosine<0.999", reference.from_release(listing["1.19.0"]))
    # a reference file equal to the wrong outputs: every release before 1.21.0 differs from it, none after
    np.savez(tmp_path / "ref.npz", y=WRONG)
    from harness.models.inputs import arrays_digest
    by_file = search(plan, cache, runner, "cosine<0.999",
                     reference.from_file(tmp_path / "ref.npz", {"y": WRONG}, arrays_digest({"y": WRONG})), mode="fix")
    assert (by_file["last_bad"], by_file["first_good"]) == ("1.20.1", "1.21.0")
    cells = sorted(p.stem for p in (plan.store.dir / "cells").iterdir())
    assert cells == sorted([by_release["cell"]["key"], by_file["cell"]["key"]]) and len(cells) == 2
    assert all("-vs-" in k for k in cells)
    # the newest question is the file's; each question judges every record against its own reference
    newest = report(plan.store.dir, cache)
    assert newest["question"]["key"] == by_file["cell"]["key"]
    assert {p["version"]: p["verdict"] for p in newest["probes"]}["1.19.0"] == "bad"
    first = report(plan.store.dir, cache, question=by_release["cell"]["key"])
    assert (first["last_good"], first["first_bad"]) == ("1.20.1", "1.21.0")
    assert {p["version"]: p["verdict"] for p in first["probes"]}["1.19.0"] == "good"
    with pytest.raises(UsageError, match="no such run document"):
        report(plan.store.dir, cache, question="regression-nothing")


def test_a_load_failure_boundary_is_a_boundary_in_the_report(made):
    """good, then error from 1.20.1 on, then good again past the run's range: --bad-if error found 1.20.1."""
    plan, cache = made
    outcomes = {v: (error("Fail: Load model failed") if "1.20.1" <= v <= "1.21.1" else ran()) for v in VERSIONS}
    run = search(plan, cache, ReplayRunner(outcomes), "error", versions=VERSIONS[:5])
    assert (run["last_good"], run["first_bad"]) == ("1.20.0", "1.20.1")
    # the report's probe of the newest release (here 1.22.0, good again) adds a record beyond the range
    listing = {r.version: r for r in release_listing(cache, offline=True)}
    wide = dataclasses.replace(plan, runner=ReplayRunner(outcomes), releases=[listing[v] for v in VERSIONS],
                               predicate=parse_predicate("error"))
    assert probe_releases(wide, ["1.22.0"])["1.22.0"]["verdict"] == "good"
    doc = report(plan.store.dir, cache)
    assert (doc["last_good"], doc["first_bad"]) == ("1.20.0", "1.20.1")
    assert doc["predicate"] == "error"


def test_runs_of_other_ranges_and_modes_in_one_directory_keep_their_own_boundaries(made):
    """NaN on 1.21.x, fixed in 1.22.0: a fix search over 1.21.1..1.22.0 and a regression search over
    1.19.0..1.21.1 share the run's probes; the regression's boundary is not lost among the fix's."""
    plan, cache = made
    outcomes = {v: ran(nan_rows=2 if "1.21.0" <= v <= "1.21.1" else 0) for v in VERSIONS}
    fix = search(plan, cache, ReplayRunner(outcomes), "nan-or-inf", versions=("1.21.1", "1.22.0"), mode="fix")
    assert (fix["last_bad"], fix["first_good"]) == ("1.21.1", "1.22.0")
    run = search(plan, cache, ReplayRunner(outcomes), "nan-or-inf", versions=VERSIONS[:6])
    assert (run["last_good"], run["first_bad"]) == ("1.20.1", "1.21.0")
    asked = asked_of_run(plan.store)
    assert asked.key == run["cell"]["key"] and "1 other question" in asked.said
    doc = report(plan.store.dir, cache)
    assert (doc["last_good"], doc["first_bad"]) == ("1.20.1", "1.21.0")
    # another predicate asked on the command line: over the same range, no document of its own
    other = report(plan.store.dir, cache, bad_if="max-abs>0.5")
    assert other["predicate"] == "max-abs>0.5" and other["question"]["key"] is None
    assert (other["last_good"], other["first_bad"]) == (None, None)  # max |x| is 1.0 everywhere: all bad


def test_a_question_reads_back_from_documents_old_and_new():
    q = Question(parse_predicate("rel-diff>0.001"), {"kind": "release", "id": "release:1.19.0", "label": "x"},
                 "regression", "1.19.0", "1.22.0")
    assert q.key == "regression-1.19.0-1.22.0-rel-diff_0.001-vs-release_1.19.0"
    assert Question.of_document({"question": q.document()}) == q
    old = {"predicate": "rel-diff>0.001", "reference": q.reference, "mode": "regression",
           "releases": ["1.19.0", "1.20.0", "1.22.0"]}
    assert Question.of_document(old) == q
    assert q.asking(parse_predicate("error")).reference is None


def test_report_json_names_the_runs_first_bad(made, capsys):
    plan, cache = made
    listing = {r.version: r for r in release_listing(cache, offline=True)}
    run = search(plan, cache, ReplayRunner({v: ran() for v in VERSIONS}, arrays=drifting("1.20.1")),
                 "rel-diff>0.01", reference.from_release(listing["1.19.0"]))
    trace_like(plan, cache)
    rc = main(["report", str(plan.store.dir), "--cache-dir", str(cache), "--offline", "--no-probe", "--format", "json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["first_bad"] == run["first_bad"] == "1.20.1"


# --- reduce answers the run's question, for every predicate (real releases) -------------------------------


def _run_args(model: Path, batch: Path, *more: str) -> tuple[str, ...]:
    return ("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0", "--json", *more)


def _reduced(bisect, run_dir: Path, *more: str) -> dict:
    """`bisect reduce RUN_DIR --json` (exit 0 asserted): its document."""
    red = bisect("reduce", str(run_dir), "--cache-dir", str(bisect.cache_dir), "--json", *more)
    assert red.returncode == 0, red.stderr
    return red.json()


@pytest.mark.release
def test_reduce_against_a_reference_release_compares_each_candidate_with_the_last_good(bisect, tmp_path, residual_norm):
    model, batch = residual_norm
    results = tmp_path / "results"
    plain = bisect(*_run_args(model, batch), results=results)
    assert plain.returncode == 0, plain.stderr
    r = bisect(*_run_args(model, batch, "--reference-release", "1.19.2", "--bad-if", "cosine<0.99"), results=results)
    assert r.returncode == 0, r.stderr
    run = r.json()
    assert (run["last_good"], run["first_bad"]) == ("1.19.2", "1.20.0")
    doc = _reduced(bisect, results / run["run_id"])
    assert doc["verified"] == {"verdicts": {"1.19.2": "good", "1.20.0": "bad"}, "flips": True}
    assert doc["question"]["key"] == run["cell"]["key"] and doc["predicate"] == "cosine<0.99"
    assert doc["reference"]["kind"] == "release" and doc["reference"]["file"] == "reference.npz"
    assert doc["rows"]["after"] == 1
    assert (results / run["run_id"] / "reduced" / "reference.npz").is_file()


@pytest.mark.release
def test_reduce_against_a_reference_file_keeps_the_reference_rows_of_the_rows_it_keeps(bisect, tmp_path, residual_norm):
    model, batch = residual_norm
    results = tmp_path / "results"
    first = bisect(*_run_args(model, batch), results=results)
    assert first.returncode == 0, first.stderr
    run_dir = results / first.json()["run_id"]
    with np.load(run_dir / "outputs" / "1.19.2.npz") as saved:
        truth = {k: saved[k] for k in saved.files}
    np.savez(tmp_path / "truth.npz", **truth)
    r = bisect(*_run_args(model, batch, "--reference", str(tmp_path / "truth.npz"), "--bad-if", "rel-diff>0.01"),
               results=results)
    assert r.returncode == 0, r.stderr
    doc = _reduced(bisect, run_dir)
    assert doc["verified"]["flips"] and doc["predicate"] == "rel-diff>0.01"
    assert doc["nodes"]["kept"] is None  # the file's values are of the model's outputs: only rows are reduced
    kept = doc["rows"]["kept"]
    with np.load(run_dir / "reduced" / "reference.npz") as ref:
        assert all(np.array_equal(ref[k], truth[k][kept]) for k in truth)
    # triage on the reduced repro asks the reduction's question, with the reference rows it kept
    sweep = bisect("sweep", "--reduced", str(run_dir), "--from", "1.19.2", "--to", "1.20.0", "--json", results=results)
    assert sweep.returncode == 0, sweep.stderr
    assert sweep.json()["predicate"] == "rel-diff>0.01" and sweep.json()["reference"]["kind"] == "file"
    assert [p["verdict"] for p in sweep.json()["probes"]] == ["good", "bad"]
    rep = bisect("repeat", "--reduced", str(run_dir), "--version", "1.20.0", "-n", "2", "--cache-dir",
                 str(bisect.cache_dir), "--results-dir", str(results))
    assert rep.returncode == 2 and "compares with nothing: give --bad-if" in rep.stderr, rep.stderr
    # a question that compares with nothing, asked on the command line: the same boundary, by NaN rows
    again = _reduced(bisect, run_dir, "--rows-only", "--bad-if", "nan-or-inf")
    assert again["reference"] is None and again["predicate"] == "nan-or-inf"


@pytest.mark.release
def test_reduce_refuses_before_any_probe_with_status_2(bisect, tmp_path, residual_norm):
    model, batch = residual_norm
    results = tmp_path / "results"
    r = bisect(*_run_args(model, batch), results=results)
    assert r.returncode == 0, r.stderr
    red = bisect("reduce", r.json()["run_id"], "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir),
                 "--bad-if", "zero-rows")
    assert red.returncode == 2 and "no last good and first bad" in red.stderr, red.stderr
    assert not (results / r.json()["run_id"] / "reduced").exists()


def test_reduce_after_probes_found_nothing_exits_3_not_2(made, monkeypatch, capsys):
    """The run saw NaN on 1.20.0; probed again (the replay now says every release is finite), the full model
    does not flip: an answer after probes (3), not a refusal (2), and not a traceback."""
    from harness.triage import reduce as reduce_mod

    plan, cache = made
    outcomes = {v: ran(nan_rows=2 if v >= "1.20.0" else 0) for v in VERSIONS}
    run = search(plan, cache, ReplayRunner(outcomes), "nan-or-inf", versions=("1.19.2", "1.20.0"))
    assert run["first_bad"] == "1.20.0"
    real_run, finite = reduce_mod.reduce_run, ReplayRunner({v: ran() for v in VERSIONS})
    plans_run_on(monkeypatch, finite)
    # the run's own records of the pair are not taken as the full model's verdicts: it is probed again
    monkeypatch.setattr(reduce_mod, "reduce_run", lambda *a, **kw: real_run(*a, **{**kw, "known": None}))
    rc = main(["reduce", str(plan.store.dir), "--cache-dir", str(cache), "--offline", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 3 and out["exit_status"] == 3 and "does not flip" in out["error"]
    assert sorted(finite.calls) == ["1.19.2", "1.20.0"]


@pytest.mark.parametrize("predicate,broken", [("error", error("Fail: Load model failed: no kernel")),
                                              ("crash", crash(11))])
def test_reduce_takes_a_load_failure_or_crash_question(made, monkeypatch, predicate, broken):
    """A boundary of --bad-if error (or crash) is reduced like any other: B fails on every candidate here."""
    from harness.triage.reduce import reduce_saved_run

    plan, cache = made
    outcomes = {v: (broken if v >= "1.20.0" else ran()) for v in VERSIONS}
    run = search(plan, cache, ReplayRunner(outcomes), predicate, versions=("1.19.2", "1.20.0", "1.20.1"))
    assert (run["last_good"], run["first_bad"]) == ("1.19.2", "1.20.0")
    plans_run_on(monkeypatch, ReplayRunner(outcomes))
    doc = reduce_saved_run(plan.store.dir, cache, offline=True)
    assert doc["verified"] == {"verdicts": {"1.19.2": "good", "1.20.0": "bad"}, "flips": True}
    assert doc["predicate"] == predicate and doc["rows"]["after"] == 1 and doc["nodes"]["after"] < doc["nodes"]["before"]


@pytest.mark.release
def test_the_reports_probe_of_the_newest_release_compares_it_with_the_runs_reference(bisect, tmp_path, residual_norm):
    """The report's own probe of the newest release is made against the question's reference: it was made
    without one ("not present (no comparison with the reference)") while the run called that release bad."""
    model, batch = residual_norm
    results = tmp_path / "results"
    r = bisect(*_run_args(model, batch, "--reference-release", "1.19.2", "--bad-if", "rel-diff>0.01"), results=results)
    assert r.returncode == 0, r.stderr
    run = r.json()
    trace = bisect("trace", "--model", str(model), "--inputs", str(batch), "--version", "1.20.0", "--cache-dir",
                   str(bisect.cache_dir), "--results-dir", str(results))
    assert trace.returncode == 0, trace.stderr
    rep = bisect("report", run["run_id"], "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir),
                 "--format", "json")
    assert rep.returncode == 0, rep.stderr
    doc = rep.json()
    assert (doc["last_good"], doc["first_bad"]) == (run["last_good"], run["first_bad"]) == ("1.19.2", "1.20.0")
    assert doc["newest"]["verdict"] == "bad" and "no comparison" not in doc["newest"]["why"], doc["newest"]
    assert f"answering question {run['cell']['key']}" in rep.stderr


def test_a_batch_with_a_scalar_and_a_state_input_is_reduced_along_each_inputs_batch_axis(tmp_path, listing,
                                                                                         monkeypatch):
    """silero-vad's batch: input [N, 512], state [2, N, 128], sr a scalar. Its inputs share no axis 0, so the
    rows are cut along the axis the model's dims name N on (cutting axis 0 of each raised IndexError on the
    scalar), the scalar kept whole, and nodes still reduce."""
    from onnx import TensorProto, helper

    from harness.models.inputs import batch_rows
    from harness.triage.reduce import reduce_saved_run

    graph = helper.make_graph(
        [helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT),
         helper.make_node("Add", ["input", "srf"], ["s"]), helper.make_node("Relu", ["s"], ["output"]),
         helper.make_node("Identity", ["state"], ["stateN"])], "vad",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("state", TensorProto.FLOAT, [2, "N", 3]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [2, "N", 3])])
    d = tmp_path / "made"
    d.mkdir()
    builders.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), d / "vad.onnx")
    batch = {"input": np.ones((3, 4), np.float32), "state": np.zeros((2, 3, 3), np.float32), "sr": np.array(16000)}
    np.savez(d / "batch.npz", **batch)
    assert batch_rows(batch) is None and batch_rows({"input": batch["input"]}) == 3
    cache = tmp_path / "cache"
    shutil.copytree(listing, cache / "index")
    plan = inproc.open_run(d / "vad.onnx", d / "batch.npz", cache, tmp_path / "results")
    outcomes = {v: (error("Fail: Load model failed: no kernel") if v >= "1.20.0" else ran()) for v in VERSIONS}
    run = search(plan, cache, ReplayRunner(outcomes), "error", versions=("1.19.2", "1.20.0"))
    assert (run["last_good"], run["first_bad"]) == ("1.19.2", "1.20.0")
    plans_run_on(monkeypatch, ReplayRunner(outcomes))
    doc = reduce_saved_run(plan.store.dir, cache, offline=True)
    assert doc["verified"] == {"verdicts": {"1.19.2": "good", "1.20.0": "bad"}, "flips": True}
    assert doc["rows"]["before"] == 3 and doc["rows"]["after"] == 1
    assert doc["rows"]["axes"] == {"input": 0, "state": 1, "sr": None}
    assert doc["nodes"]["after"] < doc["nodes"]["before"]
