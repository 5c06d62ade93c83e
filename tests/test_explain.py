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
