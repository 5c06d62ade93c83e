"""`bisect trace`, `bisect diff` and `run --explain` from the command line, on real releases."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.release


def test_run_explain_names_the_norm(bisect, residual_norm, tmp_path):
    model, batch = residual_norm
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.0", "--to", "1.20.1",
               "--explain", "--json", results=tmp_path / "res")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    exp = doc["explanation"]
    assert exp["pair"] == ["1.19.2", "1.20.0"]
    assert exp["suspect"] == "/model/norm/SimplifiedLayerNormalization"
    assert "fp32 island on 1.19.2 and natively in fp16 on 1.20.0" in exp["text"]
    assert (tmp_path / "res" / doc["run_id"] / "traces" / "1.20.0.json").exists()


def test_trace_and_diff_commands(bisect, residual_norm, tmp_path):
    model, batch = residual_norm
    common = ("--model", str(model), "--inputs", str(batch), "--results-dir", str(tmp_path / "res"),
              "--cache-dir", str(bisect.cache_dir))
    r = bisect("trace", "--version", "1.20.0", *common, "--json")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert doc["verdict"] == "bad"
    assert doc["first_nonfinite"].startswith("/model/layers.1/Add")
    r = bisect("diff", "1.19.2", "1.20.0", *common)
    assert r.returncode == 0, r.stderr
    assert "SimplifiedLayerNormalization" in r.stdout
    assert "1.20.0" in r.stdout


@pytest.mark.parametrize("asked", [("--reference-release", "1.19.2", "--bad-if", "cosine<0.999"),
                                   ("--reference", "fp32", "--bad-if", "cosine<0.999")], ids=["release", "fp32"])
def test_the_explanation_of_a_reference_question_judges_its_traces_as_the_run_did(asked, bisect, tmp_path):
    """norm_rounding is finite on both releases: only a reference tells 1.20.0 bad. The trace of each release
    is compared with the run's reference, so "What changed" gives the run's verdicts, not *error* twice."""
    import numpy as np

    import builders

    model = builders.save(builders.norm_rounding_model(), tmp_path / "norm_rounding.onnx")
    np.savez(tmp_path / "batch.npz", **builders.norm_rounding_inputs())
    results = tmp_path / "res"
    r = bisect("run", "--model", str(model), "--inputs", str(tmp_path / "batch.npz"), "--from", "1.19.2", "--to",
               "1.20.0", *asked, "--explain", "--json", results=results)
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0")
    text = doc["explanation"]["text"]
    assert "1.19.2: good under cosine<0.999" in text and "1.20.0: bad under cosine<0.999" in text, text
    assert "error" not in text and "no comparison" not in text, text
    assert doc["explanation"]["first_differs"]["text"] in text
    rep = bisect("report", doc["run_id"], "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir),
                 "--no-probe")
    assert rep.returncode == 0, rep.stderr
    changed = rep.stdout.split("### What changed", 1)[1]
    assert "1.20.0: bad under cosine" in changed and ": error" not in changed, changed
