"""Verdicts beyond NaN on real releases: a model that starts loading, and references the tool makes itself."""

from __future__ import annotations

import numpy as np
import pytest

import builders

pytestmark = pytest.mark.release


def test_the_first_release_that_loads_a_model_is_found_with_bad_if_error(bisect, tmp_path):
    model = builders.save(builders.new_opset_model(23), tmp_path / "opset23.onnx")
    np.savez(tmp_path / "batch.npz", **builders.new_opset_inputs())
    r = bisect("run", "--model", str(model), "--inputs", str(tmp_path / "batch.npz"), "--from", "1.22.1",
               "--to", "1.23.2", "--mode", "fix", "--bad-if", "error", "--json")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_bad"], doc["first_good"]) == ("1.22.1", "1.23.0")
    bad = next(p for p in doc["probes"] if p["version"] == "1.22.1")
    assert bad["decided_by"] == ["error"] and "opset" in bad["why"].lower()
    assert doc["bad_means"] == "the model fails to load or run"
    # without --bad-if error the failures are stepped around: nothing to bisect
    again = bisect("run", "--model", str(model), "--inputs", str(tmp_path / "batch.npz"), "--from", "1.22.1",
                   "--to", "1.23.2", "--mode", "fix", "--json")
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
