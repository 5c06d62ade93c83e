"""Verdicts beyond NaN on real releases: a model that starts loading, and references the tool makes itself."""

from __future__ import annotations

import builders
import numpy as np
import pytest

pytestmark = pytest.mark.release


def run_on(bisect, tmp_path, model, inputs: dict, *args: str):
    """`bisect run` of a test-built model and batch (saved under tmp_path), as --json."""
    path = builders.save(model, tmp_path / "model.onnx")
    np.savez(tmp_path / "batch.npz", **inputs)
    return bisect("run", "--model", str(path), "--inputs", str(tmp_path / "batch.npz"), *args, "--json")


def test_the_first_release_that_loads_a_model_is_found_with_bad_if_error(bisect, tmp_path):
    r = run_on(bisect, tmp_path, builders.new_opset_model(23), builders.new_opset_inputs(), "--from", "1.22.1",
               "--to", "1.23.2", "--mode", "fix", "--bad-if", "error")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_bad"], doc["first_good"]) == ("1.22.1", "1.23.0")
    bad = next(p for p in doc["probes"] if p["version"] == "1.22.1")
    assert bad["decided_by"] == ["error"] and "opset" in bad["why"].lower()
    assert doc["bad_means"] == "the model fails to load or run"
    # without --bad-if error the failures are stepped around: nothing to bisect
    again = run_on(bisect, tmp_path, builders.new_opset_model(23), builders.new_opset_inputs(), "--from", "1.22.1",
                   "--to", "1.23.2", "--mode", "fix")
    assert again.json()["status"] != "found" and {p["verdict"] for p in again.json()["probes"]} >= {"error"}


def test_the_fp32_reference_finds_the_x86_boundary_of_the_fused_model_by_cosine(bisect):
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.2", "--to", "1.20.0", "--reference", "fp32",
               "--bad-if", "cosine<0.999", "--json")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0")
    good, bad = doc["probes"]
    assert good["metrics"]["cosine_min"] > 0.9999 and bad["metrics"]["cosine_min"] < 0.999
    assert good["metrics"]["max_abs"] > 0  # this model's outputs are fp32: no fp16 headroom
    assert doc["reference"]["kind"] == "fp32" and "fp32 twin" in doc["reference"]["label"]


def test_a_model_that_stops_loading_is_bisected_with_bad_if_error(bisect, tmp_path, fresh_python):
    r = run_on(bisect, tmp_path, builders.layer_norm_cast_model(), builders.layer_norm_cast_inputs(), "--from",
               "1.19.2", "--to", "1.20.0", "--bad-if", "nan-or-inf", "--bad-if", "error")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0")
    assert "bound to different types" in doc["probes"][-1]["why"] and doc["probes"][-1]["decided_by"] == ["error"]
    # the report says what bad meant, and its repro judges a load failure the same way
    results = tmp_path / "results"
    rep = bisect("report", doc["run_id"], "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir),
                 "--no-probe")
    assert rep.returncode == 0, rep.stderr
    assert "load or run failures on x86_64 CPU since onnxruntime 1.20.0" in rep.stdout
    assert "A release counts as bad when an output row holds NaN or Inf, or the model fails to load or run" in rep.stdout
    script = results / doc["run_id"] / "repro.py"
    for version, rc, said in (("1.19.2", 0, "good"), ("1.20.0", 1, "bad (fails: ")):
        out = builders.run_script(fresh_python(version), script)
        assert out.returncode == rc and said in out.stdout, out.stdout + out.stderr


def test_a_finite_but_wrong_release_is_found_only_against_the_fp32_model(bisect, tmp_path):
    model = builders.save(builders.norm_rounding_model(), tmp_path / "norm_rounding.onnx")
    np.savez(tmp_path / "batch.npz", **builders.norm_rounding_inputs())
    common = ("--model", str(model), "--inputs", str(tmp_path / "batch.npz"), "--from", "1.19.2", "--to", "1.20.0",
              "--json")
    plain = bisect("run", *common)
    assert plain.returncode == 3 and {p["verdict"] for p in plain.json()["probes"]} == {"good"}  # never NaN
    r = bisect("run", *common, "--reference", "fp32", "--bad-if", "cosine<0.999")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0")
    good, bad = doc["probes"]
    assert good["metrics"]["cosine_min"] > 0.9999 and bad["metrics"]["cosine_min"] < 0.5
    assert bad["nan_rows"] == 0 and bad["inf_rows"] == 0
    assert "converted to fp32" in doc["reference"]["label"]


def test_drift_names_the_release_where_a_never_nan_model_moved_against_fp32(bisect, tmp_path):
    """gemma-tiny-decomposed is finite on x86_64 in every release; 1.29.0 alone moves its outputs away
    from the fp32 twin's (measured: max relative difference 0.022 -> 0.219 -> 0.022)."""
    results = tmp_path / "results"
    r = bisect("sweep", "--model", "gemma-tiny-decomposed", "--from", "1.28.0", "--to", "1.30.0", "--reference", "fp32",
               "--json", results=results)
    assert r.returncode == 3, r.stderr  # nothing is bad
    run_id = r.json()["run_id"]
    d = bisect("drift", run_id, "--results-dir", str(results), "--json")
    assert d.returncode == 0, d.stderr
    doc = d.json()
    steps = {(s["metric"], s["from"], s["to"]) for s in doc["steps"]}
    assert ("rel_diff_max", "1.28.0", "1.29.0") in steps and ("rel_diff_max", "1.29.0", "1.30.0") in steps
    assert not any(s["metric"] == "verdict" for s in doc["steps"])
    assert [row["outputs_changed"] for row in doc["rows"]][1:] == [True, True]
    assert (results / run_id / "drift.svg").read_text().lstrip().startswith(("<?xml", "<svg"))


def test_the_release_that_stops_a_crash_is_found_with_bad_if_crash(bisect, tmp_path):
    r = run_on(bisect, tmp_path, builders.expand_dims_crash_model(),
               {"x": np.linspace(-2, 2, 8, dtype=np.float32).reshape(2, 4)}, "--from", "1.27.0", "--to", "1.28.0",
               "--mode", "fix", "--bad-if", "crash")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_bad"], doc["first_good"]) == ("1.27.0", "1.28.0")
    assert doc["probes"][0]["decided_by"] == ["crash"] and "SIGSEGV" in doc["probes"][0]["why"]
