"""The internal fp16 margin: the hottest fp16 tensors a probe reads, counted only where the release holds them in
fp16."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import builders
import numpy as np
import onnx
import pytest

from harness.graphs.fp32 import to_fp32
from harness.graphs.margin import held, margin_model, margin_of, watched


def test_the_residual_sums_are_watched_first_then_the_other_fp16_arithmetic():
    what = watched(builders.residual_overflow_model())
    assert what.tensors == ("/model/layers.0/Add_output_0", "/model/layers.1/Add_output_0", "/model/scale/Mul_output_0")
    assert what.source.startswith("residual sums and ")
    assert watched(to_fp32(builders.residual_overflow_model())) is None  # no fp16 arithmetic: nothing to watch


def test_the_margin_model_reads_one_scalar_per_watched_tensor(tmp_path):
    path = builders.save(builders.residual_overflow_model(), tmp_path / "m.onnx")
    what = watched(onnx.load(str(path)))
    made = onnx.load(str(margin_model(path, tmp_path / "margin", what)))
    assert [o.name for o in made.graph.output] == list(what.outputs)
    assert all(not o.type.tensor_type.shape.dim for o in made.graph.output)
    onnx.checker.check_model(made)


def test_a_tensor_held_only_in_fp32_is_measured_against_no_ceiling():
    """Without the release's optimized graph every watched tensor counts; with it, an island copy does not."""
    model = builders.residual_overflow_model()
    what = watched(model)
    raw = {"values": {what.output(0): 60000.0, what.output(1): 90000.0, what.output(2): 22500.0}, "nonfinite": []}
    blind = margin_of(raw, what, None)
    assert blind["overflowed"] and blind["tensor"] == "/model/layers.1/Add_output_0" and "unknown" in blind["precision"]
    # an optimized graph where both Adds are an fp32 island (their tensors renamed InsertedPrecisionFreeCast_*)
    # and only the Mul's output is cast back to fp16 under its own name
    island = onnx.helper.make_graph([
        onnx.helper.make_node("Cast", ["x"], ["InsertedPrecisionFreeCast_x"], name="InsertedPrecisionFreeCast_x", to=1),
        onnx.helper.make_node("Add", ["InsertedPrecisionFreeCast_x"] * 2, ["InsertedPrecisionFreeCast_a0"], name="a0"),
        onnx.helper.make_node("Mul", ["InsertedPrecisionFreeCast_a0", "q"], ["InsertedPrecisionFreeCast_m"], name="m"),
        onnx.helper.make_node("Cast", ["InsertedPrecisionFreeCast_m"], ["/model/scale/Mul_output_0"], name="c", to=10),
    ], "opt", [], [])
    seen = margin_of(raw, what, held(what, model, onnx.helper.make_model(island)))
    assert (seen["held_in_fp16"], seen["held_in_fp32"]) == (1, 2)
    assert seen["tensor"] == "/model/scale/Mul_output_0" and seen["fraction"] == round(22500 / 65504, 6)
    assert not seen["overflowed"] and seen["fp32_hottest"]["tensor"] == "/model/layers.1/Add_output_0"
    inf = margin_of({**raw, "nonfinite": [what.output(2)]}, what, held(what, model, onnx.helper.make_model(island)))
    assert inf["overflowed"] and inf["fraction"] is None
    assert margin_of({"error": "boom"}, what, None)["error"] == "boom"


def records(results: Path) -> dict[str, dict]:
    (run,) = [p for p in results.iterdir() if (p / "probes.jsonl").exists()]
    return {r["version"]: r for r in map(json.loads, (run / "probes.jsonl").read_text().splitlines())}


@pytest.mark.release
def test_each_probe_reads_the_margin_the_release_holds_in_fp16(bisect, tmp_path):
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.2", "--to", "1.20.0", "--margin", "--json",
               results=tmp_path / "on")
    assert r.returncode == 0, r.stderr
    recs = records(tmp_path / "on")
    good, bad = recs["1.19.2"]["margin"], recs["1.20.0"]["margin"]
    # 1.19.2 keeps the residual sums in an fp32 island: past 65504 there, yet no fp16 value comes near it
    assert good["fraction"] < 0.9 and not good["overflowed"] and good["tensor"]
    assert good["fp32_hottest"]["fraction"] > 1 and good["fp32_hottest"]["tensor"].startswith("/model/layers.3/Add")
    # 1.20.0 casts that sum back to fp16 for its fp16 norm: past the ceiling
    assert bad["overflowed"] and bad["tensor"] == good["fp32_hottest"]["tensor"] and bad["fraction"] > 1
    assert good["precision"] == "from the release's optimized graph" and good["seconds"] > 0

    off = bisect("sweep", "--model", "gemma-tiny-fused", "--from", "1.19.2", "--to", "1.20.0", "--no-margin",
                 "--json", results=tmp_path / "off")
    assert off.returncode == 0 and all("margin" not in rec for rec in records(tmp_path / "off").values())
    assert [p["verdict"] for p in off.json()["probes"]] == [p["verdict"] for p in r.json()["probes"]]


@pytest.mark.release
def test_a_sweep_with_the_margin_measures_again_the_probes_a_run_made_without_it(bisect, residual_norm, tmp_path):
    """`run` (no margin) then `sweep --margin` over the same results: the sweep's records of every release, the
    boundary pair included, carry the margin; a sweep again reuses them, with or without the margin."""
    model, batch = residual_norm
    common = ("--model", str(model), "--inputs", str(batch), "--from", "1.19.0", "--to", "1.20.1", "--json")
    run = bisect("run", *common, results=tmp_path / "res")
    assert run.returncode == 0 and (run.json()["last_good"], run.json()["first_bad"]) == ("1.19.2", "1.20.0")
    assert all("margin" not in rec for rec in records(tmp_path / "res").values())
    sweep = bisect("sweep", *common, "--margin", results=tmp_path / "res")
    assert sweep.returncode == 0, sweep.stderr
    assert sweep.json()["run_id"] == run.json()["run_id"]
    newest = records(tmp_path / "res")  # the later line of a release is its newest record
    assert set(newest) == {"1.19.0", "1.19.2", "1.20.0", "1.20.1"}
    good, bad = newest["1.19.2"]["margin"], newest["1.20.0"]["margin"]
    assert not good["overflowed"] and good["fp32_hottest"]["tensor"] == "/model/layers.1/Add_output_0"
    assert bad["overflowed"] and bad["tensor"] == "/model/layers.1/Add_output_0"
    assert not any(p["reused"] for p in sweep.json()["probes"])
    for margin in ("--margin", "--no-margin"):
        again = bisect("sweep", *common, margin, results=tmp_path / "res")
        assert again.returncode == 0 and all(p["reused"] for p in again.json()["probes"]), again.stderr


@pytest.mark.release
def test_a_margin_that_cannot_be_read_never_changes_the_probe(cache_dir, tmp_path):
    from harness.plan import make_plan
    from harness.probe import MarginJob, Prober
    from harness.request import SearchSpec

    plan = make_plan(SearchSpec(model="gemma-tiny-fused", from_="1.20.0", to="1.20.0", cache_dir=cache_dir,
                                results_dir=tmp_path / "results", margin=True))
    broken = dataclasses.replace(plan.job, margin=MarginJob(tmp_path / "absent.onnx", plan.job.margin.watched))
    rec = Prober(plan.runner, None, plan.predicate).probe(plan.releases[0], broken, outputs=None)
    assert rec.record["status"] == "ran" and rec.verdict == "bad"
    assert "absent.onnx" in rec.record["margin"]["error"] or "NoSuchFile" in rec.record["margin"]["error"]


@pytest.mark.release
@pytest.mark.qemu
def test_on_aarch64_the_margin_stays_below_the_ceiling_until_the_adds_run_in_fp16(bisect, tmp_path,
                                                                                   residual_overflow):
    model, batch = residual_overflow
    r = bisect("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.23.2", "--to", "1.24.1",
               "--arch", "aarch64", "--backend", "qemu", "--cpu", "neoverse-n1", "--margin", "--json",
               results=tmp_path / "r")
    assert r.returncode in (0, 3), r.stderr
    recs = records(tmp_path / "r")
    before, after = recs["1.23.2"]["margin"], recs["1.24.1"]["margin"]
    assert not before["overflowed"] and (before["fraction"] is None or before["fraction"] < 1)
    assert before["held_in_fp32"] >= 2  # the residual Adds: an fp32 island up to 1.23.2
    assert after["overflowed"] and after["tensor"] == "/model/layers.1/Add_output_0"


# --- on the page and in drift ------------------------------------------------------------------------------


def margin_rec(version, fraction, finished, nan=0, tensor="/model/layers.3/Add_output_0", overflowed=None):
    from test_dashboard import _rec

    rec = _rec(version, nan, finished, "x86_64")
    rec["margin"] = {"fraction": fraction, "tensor": tensor, "ceiling": 65504.0, "source": "residual sums",
                     "watched": 4, "held_in_fp16": 2, "held_in_fp32": 2, "precision": "from the release's optimized graph",
                     "overflowed": bool(overflowed if overflowed is not None else fraction is None or fraction >= 1)}
    return rec


def test_the_page_draws_the_margin_names_its_tensor_and_marks_a_row_close_to_the_ceiling(tmp_path):
    from test_dashboard import _key, make_run

    from harness.report import dashboard

    night1 = [margin_rec("1.19.0", 0.5, "2025-01-01T03:00:00Z"), margin_rec("1.19.2", 0.55, "2025-01-01T03:01:00Z")]
    night2 = [margin_rec("1.20.0", 0.93, "2025-01-02T03:00:00Z"),
              margin_rec("1.21.0", None, "2025-01-02T03:01:00Z", nan=7, tensor='<b onclick="x">hot</b>')]
    make_run(tmp_path / "results", "run-1", "m", _key("a" * 64, "x86_64"), night1 + night2)
    page = dashboard.build(tmp_path / "results", tmp_path / "site").read_text()
    assert "close to the ceiling" in page and "1.20.0: 0.93 · hottest fp16 tensor /model/layers.3/Add_output_0" in page
    assert '<b onclick' not in page and "&lt;b onclick" in page  # a tensor name is data
    grid = json.loads((tmp_path / "site" / "dashboard.json").read_text())
    (row,) = grid.values()
    assert row["close_to_ceiling"] == ["1.20.0"] and row["margins"]["1.21.0"]["margin"] is None  # past: no finite size
    assert row["margins"]["1.21.0"]["past_ceiling"] is True and "past_ceiling" not in row["margins"]["1.20.0"]
    moves = json.loads((tmp_path / "site" / "changes.json").read_text())["margin_moves"]
    assert [(m[1], m[2]) for m in moves] == [("1.19.2", "1.20.0"), ("1.20.0", "1.21.0")]
    # above the threshold the same row is not marked
    page = dashboard.build(tmp_path / "results", tmp_path / "site2", threshold=0.95).read_text()
    assert "close to the ceiling</span>" not in page


def test_drift_names_a_margin_that_reaches_the_ceiling_and_ignores_one_never_measured():
    from harness.report import drift
    from harness.verdicts import Predicate

    recs = [margin_rec("1.19.0", 0.5, "t1"), margin_rec("1.19.2", 0.5004, "t2"), margin_rec("1.20.0", 0.8, "t3"),
            margin_rec("1.21.0", None, "t4", nan=3)]
    del recs[1]["margin"]  # made with --no-margin
    rows = drift.rows(recs, Predicate())
    said = [s.description for s in drift.steps(rows) if s.metric == "margin"]
    assert said == ["internal fp16 margin 0.5 -> 0.8 (+60.0%) between 1.19.0 and 1.20.0",
                    "internal fp16 margin 0.8 -> past the ceiling (/model/layers.3/Add_output_0) between 1.20.0 and 1.21.0"]


@pytest.mark.release
def test_a_model_with_external_data_is_read_in_place_and_its_data_file_gets_no_link(bisect, tmp_path):
    import os

    d = tmp_path / "model"
    d.mkdir()
    model = builders.save(builders.residual_overflow_model(), d / "model.onnx", external=True)
    np.savez(d / "batch.npz", **builders.residual_norm_inputs())
    r = bisect("sweep", "--model", str(model), "--inputs", str(d / "batch.npz"), "--from", "1.22.1", "--to", "1.23.0",
               "--json", results=tmp_path / "r")
    assert r.returncode in (0, 3), r.stderr
    assert os.stat(d / "model.onnx_data").st_nlink == 1  # onnx refuses a data file with several links
    for rec in records(tmp_path / "r").values():
        assert rec["margin"]["held_in_fp16"] + rec["margin"]["held_in_fp32"] == 3, rec["margin"]


# --- what later probes reuse: the release's fp16 tensors and the batch's hot rows ----------------------------------


def _same_answer(a: dict, b: dict) -> None:
    """The margin's answer: its hottest fp16 tensor, its fraction of 65504 to 3 significant digits, the fp32 split."""
    assert a.get("error") is None and b.get("error") is None, (a, b)
    assert a["tensor"] == b["tensor"] and a["overflowed"] == b["overflowed"]
    assert (a["fraction"] is None) == (b["fraction"] is None)
    if a["fraction"] is not None:
        assert f"{a['fraction']:.3g}" == f"{b['fraction']:.3g}"
    assert (a["held_in_fp16"], a["held_in_fp32"]) == (b["held_in_fp16"], b["held_in_fp32"])
    assert (a.get("fp32_hottest") or {}).get("tensor") == (b.get("fp32_hottest") or {}).get("tensor")


def _margin_plan(cache_dir, tmp_path, model: str, version: str, memo: Path | None, **spec):
    from harness.plan import make_plan
    from harness.request import SearchSpec

    plan = make_plan(SearchSpec(model=model, from_=version, to=version, cache_dir=cache_dir,
                                results_dir=tmp_path / "results", margin=True, **spec))
    return plan, dataclasses.replace(plan.job, margin=dataclasses.replace(plan.job.margin, memo_dir=memo))


def _probe_margin(plan, job) -> dict:
    from harness.probe import Prober

    rec = Prober(plan.runner, None, plan.predicate).probe(plan.releases[0], job, outputs=None).record
    assert rec["status"] == "ran", rec.get("reason")
    return rec["margin"]


@pytest.mark.release
@pytest.mark.parametrize("model,version", [("gemma-tiny-fused", "1.19.2"), ("gemma-tiny-fused", "1.20.0"),
                                           ("gemma-tiny-decomposed", "1.20.0"), ("rmsnorm-fp16-overflow", "1.20.0")])
def test_the_kept_margin_gives_the_fresh_answer_on_the_embedded_models(cache_dir, tmp_path, model, version):
    """Read fresh (the whole batch, the optimized graph saved), read while keeping (each row once), read again from
    what was kept (the hot rows, no optimized graph): one answer."""
    plan, fresh_job = _margin_plan(cache_dir, tmp_path, model, version, None)
    memo = tmp_path / "memo"
    kept_job = dataclasses.replace(plan.job, margin=dataclasses.replace(plan.job.margin, memo_dir=memo))
    fresh = _probe_margin(plan, fresh_job)
    learning = _probe_margin(plan, kept_job)
    assert "rows" not in fresh and "rows" not in learning  # both read every row
    assert len(list(memo.glob("held-*.json"))) == 1
    reused = _probe_margin(plan, kept_job)
    _same_answer(fresh, learning)
    _same_answer(fresh, reused)
    if model.startswith("gemma"):  # a batch of 20 rows: the reuse reads fewer
        assert reused["rows"]["of"] == 20 and reused["rows"]["read"] < 20, reused["rows"]


@pytest.mark.release
def test_a_tampered_or_foreign_kept_margin_is_refused_and_computed_again(cache_dir, tmp_path):
    from harness.graphs.margin import watched
    from harness.models import margin_memo

    memo = tmp_path / "memo"
    plan, job = _margin_plan(cache_dir, tmp_path, "gemma-tiny-fused", "1.20.0", memo)
    first = _probe_margin(plan, job)
    (held_file,), (rows_file,) = memo.glob("held-*.json"), memo.glob("rows-*.json")
    good_held, good_rows = json.loads(held_file.read_text()), json.loads(rows_file.read_text())
    what = job.margin.watched
    tampered = [
        lambda h, r: (h["held"].update({"/not/in/the/model": "seen"}), r["row_of"].update({"/not/in/the/model": [0, 1.0]})),
        lambda h, r: (h["held"].update({what.tensors[0]: "fp16"}), r["row_of"].update({what.tensors[0]: [99, 1.0]})),
        lambda h, r: (h["held"].pop(what.tensors[0]), r["row_of"].update({what.tensors[0]: [0, "1e309"]})),
        lambda h, r: (h.update(schema=2), r.update(rows=True)),
        lambda h, r: (h["key"].update(version="1.19.2"), r["key"].update(batch="0" * 64)),
    ]
    for tamper in tampered:
        h, r = json.loads(json.dumps(good_held)), json.loads(json.dumps(good_rows))
        tamper(h, r)
        held_file.write_text(json.dumps(h))
        rows_file.write_text(json.dumps(r))
        key = h["key"] if "key" in h else good_held["key"]
        assert margin_memo.read_held(memo, good_held["key"], what) is None
        assert margin_memo.read_rows(memo, key["model"], good_rows["key"]["batch"], what) is None
        again = _probe_margin(plan, job)
        assert "rows" not in again  # every row read again
        _same_answer(first, again)
        assert json.loads(held_file.read_text()) == good_held  # computed again and written over
        assert json.loads(rows_file.read_text())["row_of"].keys() == good_rows["row_of"].keys()
    held_file.write_bytes(b"\x00not json")
    assert margin_memo.read_held(memo, good_held["key"], watched(onnx.load(str(plan.job.model)))) is None


@pytest.mark.release
def test_other_session_options_or_another_model_compute_what_the_release_holds_again(cache_dir, tmp_path):
    from harness.models import margin_memo

    memo = tmp_path / "memo"
    plan, job = _margin_plan(cache_dir, tmp_path, "gemma-tiny-fused", "1.20.0", memo)
    _probe_margin(plan, job)
    (held_file,) = memo.glob("held-*.json")
    key = json.loads(held_file.read_text())["key"]
    assert margin_memo.read_held(memo, key, job.margin.watched) is not None
    for changed in ({"session_options": {"graph_optimization_level": "basic"}}, {"model": "0" * 64},
                    {"version": "1.19.2"}, {"provenance": {**key["provenance"], "arch": "aarch64"}}):
        assert margin_memo.read_held(memo, {**key, **changed}, job.margin.watched) is None
    # a probe under other session options computes it (the optimized graph saved again) and keeps it apart
    basic = dataclasses.replace(job, session_options={"graph_optimization_level": "basic"})
    _probe_margin(plan, basic)
    assert len(list(memo.glob("held-*.json"))) == 2
    # another model (its bytes changed: another digest) keeps its own, beside its own margin model
    from harness.plan import margin_job
    from harness.models.registry import resolve

    model = onnx.load(str(plan.job.model))
    model.doc_string = "another model"
    other = tmp_path / "other" / "model.onnx"
    other.parent.mkdir()
    onnx.save(model, str(other))
    resolved = resolve(str(other), cache_dir)
    assert resolved.digest != job.margin.model_digest
    assert margin_job(resolved, tmp_path / "cache").memo_dir != job.margin.memo_dir


@pytest.mark.release
@pytest.mark.qemu
def test_a_sweep_reads_the_margin_natively_and_under_qemu_only_when_asked(cache_dir, tmp_path):
    """Under emulation the margin's second session costs more than the probe's own run (README): off unless asked."""
    from harness.plan import make_plan
    from harness.request import SearchSpec

    def job(**spec):
        return make_plan(SearchSpec(model="gemma-tiny-fused", from_="1.23.2", to="1.23.2", cache_dir=cache_dir,
                                    results_dir=tmp_path / "results", **spec)).job

    assert job(margin=None).margin is not None  # a sweep's default on the host's own CPU
    assert job(margin=None, arch="aarch64", backend="qemu").margin is None
    assert job(margin=True, arch="aarch64", backend="qemu").margin is not None
    assert job(margin=False).margin is None


def test_the_hot_rows_are_those_of_the_hottest_tensors_held_in_fp16_and_apart_in_fp32():
    from harness.graphs.margin import HOT, Watched, hot_rows, rows_from_json

    what = Watched(tuple(f"t{k}" for k in range(12)), "test")
    row_of = {f"t{k}": (k, float(100 - k)) for k in range(12)}  # t0 hottest, each in its own row
    held_as = {f"t{k}": "seen" if k % 2 else "observed-only" for k in range(12)}
    assert hot_rows(row_of, what, None) == list(range(HOT))
    assert hot_rows(row_of, what, held_as) == sorted([1, 3, 5, 7][:HOT] + [0, 2, 4, 6][:HOT])
    row_of["t11"] = (11, float("inf"))  # not finite: the hottest of all
    assert 11 in hot_rows(row_of, what, held_as)
    assert rows_from_json({"t0": [0, None], "t1": [19, 3.5]}, what, 20) == {"t0": (0, float("inf")), "t1": (19, 3.5)}
    for bad in ({"t0": [20, 1.0]}, {"t0": [-1, 1.0]}, {"t0": [True, 1.0]}, {"t0": [0, -1.0]}, {"t0": [0, "1"]},
                {"nope": [0, 1.0]}, {}, [], {"t0": [0]}):
        assert rows_from_json(bad, what, 20) is None, bad
