"""Triage after the boundary: options matrix, determinism, fp32-island mitigation."""

from __future__ import annotations

from pathlib import Path

import builders
import numpy as np
import onnx
import pytest

from harness.graphs import fp32
from harness.triage import mitigate
from harness.triage import options as triage


def cli(bisect, *args, results: Path):
    return bisect(*args, "--cache-dir", str(bisect.cache_dir), "--results-dir", str(results), "--json")


# --- pure parts -------------------------------------------------------------------------------


def test_dimension_effects_and_option_bisection():
    cs = triage.combos(["disable", "basic", "extended", "all"], ["sequential"], ["1"], [])
    verdicts = {c.id: ("good" if c.level in ("disable", "basic") else "bad") for c in cs}
    effects = triage.dimension_effects(cs, verdicts)
    assert [d for d, e in effects.items() if e] == ["level"]
    probed = []

    def verdict_of(v):
        probed.append(v)
        return "good" if v in ("disable", "basic") else "bad"

    b = triage.bisect_option(["disable", "basic", "extended", "all"], verdict_of)
    assert (b["status"], b["last_good"], b["first_bad"]) == ("found", "basic", "extended")
    assert probed[:2] == ["disable", "all"]  # both ends first, as `run` does with releases
    # bad at the low end: the option fixes it, bisected in "fix" mode
    b = triage.bisect_option(["disable", "all"], lambda v: "bad" if v == "disable" else "good")
    assert (b["mode"], b["last_bad"], b["first_good"]) == ("fix", "disable", "all")


def test_unsupported_options_are_na_not_errors(tmp_path):
    so = tmp_path / "onnxruntime" / "capi" / "onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so"
    so.parent.mkdir(parents=True)
    so.write_bytes(b"\0ORT_DISABLE_ALL\0ORT_ENABLE_BASIC\0ORT_ENABLE_EXTENDED\0ORT_ENABLE_ALL\0session.foo\0")
    sup = triage.release_support(tmp_path)
    assert sup.levels["layout"] is False and sup.levels["all"] is True
    assert sup.keys["mlas.disable_kleidiai"] is False
    assert "layout" in triage.not_applicable(triage.Combo("layout", "sequential", "1"), sup).lower() or \
        "ORT_ENABLE_LAYOUT" in triage.not_applicable(triage.Combo("layout", "sequential", "1"), sup)
    assert "ignored" in triage.not_applicable(triage.Combo("all", "sequential", "1", "kleidiai-off"), sup)
    assert triage.not_applicable(triage.Combo("all", "parallel", "all"), sup) is None
    # no binary: the worker's error says it
    rec = {"status": "error", "reason": "AttributeError: type object 'GraphOptimizationLevel' has no attribute "
                                        "'ORT_ENABLE_LAYOUT' (at session)"}
    assert "ORT_ENABLE_LAYOUT" in triage.worker_says_na(rec)
    assert triage.switches_for("x86_64", "auto") == [] and triage.switches_for("aarch64", "auto") == ["kleidiai-off"]


def _types(model):
    return fp32.elem_types(model)


def test_fp32_island_keeps_interface_and_casts_at_the_edges():
    m = builders.residual_overflow_model()
    island = {"/model/layers.0/Add", "/model/layers.1/Add", "/model/scale/Mul"}
    p = fp32.fp32_island(m, island)
    onnx.checker.check_model(p)
    inferred = onnx.shape_inference.infer_shapes(p, strict_mode=True)
    assert [(i.name, i.type.tensor_type.elem_type) for i in p.graph.input] == [("x", onnx.TensorProto.FLOAT16)]
    assert [(o.name, o.type.tensor_type.elem_type) for o in p.graph.output] == [("y", onnx.TensorProto.FLOAT16)]
    ops = [(n.op_type, n.name) for n in p.graph.node]
    assert ops[0] == ("Cast", "x/CastToFp32")
    # the Div stays fp16: it reads the Mul's result cast back to fp16 under its original name
    div = next(n for n in p.graph.node if n.op_type == "Div")
    assert list(div.input) == ["/model/scale/Mul_output_0"] * 2
    types = {vi.name: vi.type.tensor_type.elem_type for vi in inferred.graph.value_info}
    assert types["/model/layers.1/Add_output_0/fp32"] == onnx.TensorProto.FLOAT
    assert any(i.name == "quarter/fp32" and i.data_type == onnx.TensorProto.FLOAT for i in p.graph.initializer)
    whole = fp32.to_fp32(m)
    onnx.shape_inference.infer_shapes(whole, strict_mode=True)
    assert sum(n.op_type == "Cast" for n in whole.graph.node) == 2  # x in, y out


def test_island_grows_until_values_are_small_again():
    m = builders.residual_overflow_model()
    # fp32 magnitudes of the batch: x 30000, 2x 60000, 3x 90000, /4 22500
    mags = {"/model/layers.0/Add_output_0": 60000.0, "/model/layers.1/Add_output_0": 90000.0,
            "/model/scale/Mul_output_0": 22500.0, "y": 1.0}
    plan = mitigate.choose_island(m, ["/model/norm/Div"], mags)
    assert plan.island == ["/model/layers.0/Add", "/model/layers.1/Add", "/model/scale/Mul", "/model/norm/Div"]
    plan = mitigate.choose_island(m, [], mags)
    assert plan.island == ["/model/layers.0/Add", "/model/layers.1/Add", "/model/scale/Mul"]


# --- real releases (the x86_64 options matrix and mitigation of the embedded model are in
# test_upstream.py, where the report is made from the same results) ---------------------------------


@pytest.mark.release
def test_repeat_classifies_nondeterministic_model(bisect, tmp_path):
    model = builders.save(builders.noisy_model(), tmp_path / "noisy.onnx")
    np.savez(tmp_path / "batch.npz", x=np.ones((2, 4), np.float32))
    r = cli(bisect, "repeat", "--model", str(model), "--inputs", str(tmp_path / "batch.npz"), "--version", "1.20.0",
            "-n", "3", results=tmp_path / "results")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert doc["verdict"] == "nondeterministic" and not doc["identical"] and doc["distinct_outputs"] == 3
    assert len((Path(doc["results"]) / "probes.jsonl").read_text().splitlines()) == 3
    # a deterministic model: the same bits every time
    model, batch = builders.save(builders.residual_norm_model(), tmp_path / "norm.onnx"), tmp_path / "nb.npz"
    np.savez(batch, **builders.residual_norm_inputs())
    r = cli(bisect, "repeat", "--model", str(model), "--inputs", str(batch), "--version", "1.20.0", "-n", "2",
            results=tmp_path / "results")
    doc = r.json()
    assert (doc["verdict"], doc["identical"]) == ("bad", True)


# --- real releases: aarch64 under QEMU --------------------------------------------------------------


@pytest.mark.release
@pytest.mark.qemu
def test_options_matrix_first_bad_aarch64(bisect, residual_overflow, tmp_path):
    model, batch = residual_overflow
    r = cli(bisect, "options", "--model", str(model), "--inputs", str(batch), "--version", "1.24.1",
            "--arch", "aarch64", "--backend", "qemu", "--threads", "1", "-j", "2", results=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert doc["verdicts_seen"] == ["bad"] and doc["changing_dimensions"] == []
    assert {c["level"] for c in doc["combos"] if c["verdict"] == "bad"} == set(triage.LEVELS)  # layout exists in 1.24.1
    # kleidiai-off is tried on aarch64, but 1.24.1 does not read mlas.disable_kleidiai: n/a, said so
    kleidi = [c for c in doc["combos"] if c["switch"] == "kleidiai-off"]
    assert kleidi and {c["verdict"] for c in kleidi} == {"n/a"}
    assert "mlas.disable_kleidiai" in kleidi[0]["why"]
    assert doc["provenance"]["cpu"] == "neoverse-n1"


def test_an_options_row_that_errors_shows_its_error_not_its_empty_rows():
    from rich.console import Console

    from harness.report.terminal import options_table

    combo = {"level": "all", "mode": "sequential", "threads": "1", "switch": "-"}
    doc = {"version": "1.24.1", "provenance": {"arch": "x86_64"}, "combos": [
        {**combo, "verdict": "bad", "status": "error", "why": "Load model failed: no kernel", "nan_rows": 0, "rows": 0},
        {**combo, "level": "basic", "verdict": "bad", "status": "ran", "why": "2 NaN rows", "nan_rows": 2, "rows": 4}]}
    console = Console(width=200, record=True)
    console.print(options_table(doc))
    text = console.export_text()
    assert "Load model failed: no kernel" in text and "0 NaN rows of 0" not in text and "2 NaN rows of 4" in text


def test_the_trace_budget_is_in_megabytes():
    import inproc

    r = inproc.run("trace", "--help")
    assert "Megabytes (MiB) of exposed tensors per pass" in " ".join(r.stdout.split())
