"""`bisect report`: the upstream report, and its repro script run in fresh environments."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import builders
import onnx
import pytest
from builders import run_script

from harness.releases.uvtool import uv_bin
from harness.releases.versions import ReleaseIndex


def cli(bisect, *args, results: Path):
    return bisect(*args, "--cache-dir", str(bisect.cache_dir), "--results-dir", str(results), "--json")


@pytest.fixture(scope="module")
def x86_story(tmp_path_factory, cache_dir):
    """gemma-tiny-fused on x86_64: options matrix of the first bad release, then the mitigation
    (which bisects and explains the range on its way), all in one results directory."""
    import sys

    tmp = tmp_path_factory.mktemp("x86_story")
    results = tmp / "results"
    # Rows 6 (clean) and 7 (the trigger word) of the model's own batch: the same regression, island and report
    # as the 20 x 512 batch at a fraction of each of the story's ~30 probes; the whole batch is bisected in
    # test_embedded_real and test_fewrows, and reduced in test_reduce.
    builders.embedded_rows("gemma-tiny-fused", cache_dir, tmp / "batch.npz")
    batch = ("--inputs", str(tmp / "batch.npz"))

    def bisect(*args):
        argv = [sys.executable, "-m", "harness.cli", *args, "--cache-dir", str(cache_dir), "--results-dir", str(results), "--json"]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=900, env={**os.environ, "COLUMNS": "200"})
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    options = bisect("options", "--model", "gemma-tiny-fused", *batch, "--version", "1.20.0", "-j", "2")
    mitigation = bisect("mitigate", "--model", "gemma-tiny-fused", *batch, "--from", "1.19.2", "--to", "1.20.1", "-j", "2")
    return {"tmp": tmp, "results": results, "options": options, "mitigation": mitigation, "batch": batch}


@pytest.mark.release
def test_options_matrix_first_bad_x86(x86_story, bisect):
    doc = x86_story["options"]
    assert doc["verdicts_seen"] == ["bad"] and doc["changing_dimensions"] == []
    assert "depends on no session option" in doc["message"]
    levels = {c["level"] for c in doc["combos"] if c["verdict"] == "bad"}
    assert levels == {"disable", "basic", "extended", "all"}  # 1.20.0 has no ORT_ENABLE_LAYOUT
    assert {c["verdict"] for c in doc["combos"] if c["level"] == "layout"} == {"n/a"}
    assert doc["support"]["levels"]["layout"] is False
    assert {c["mode"] for c in doc["combos"]} == {"sequential", "parallel"}
    assert {c["threads"] for c in doc["combos"]} == {"1", "all"}
    lines = (Path(doc["results"]) / "probes.jsonl").read_text().splitlines()
    assert len(lines) == 16 and len({json.loads(x)["combo_id"] for x in lines}) == 16
    again = cli(bisect, "options", "--model", "gemma-tiny-fused", *x86_story["batch"], "--version", "1.20.0",
                results=x86_story["results"])
    assert again.json()["combos"] == doc["combos"]  # every probe reused
    assert len((Path(doc["results"]) / "probes.jsonl").read_text().splitlines()) == 16


@pytest.mark.release
def test_mitigation_makes_every_release_clean_x86(x86_story):
    doc = x86_story["mitigation"]
    assert len(doc["releases"]) == 3 and doc["all_clean"]
    assert [row["patched"] for row in doc["releases"]] == ["good"] * 3
    assert doc["boundary"] == {"status": "found", "last_good": "1.19.2", "first_bad": "1.20.0"}
    assert "/model/norm/SimplifiedLayerNormalization" in doc["island"]
    assert "/model/layers.3/Add_1" in doc["island"]
    assert all(row["reference"] == "good" for row in doc["releases"])
    assert doc["worst_cosine"] > 0.9999 and doc["worst_max_abs"] < 1e-2
    assert {row["original"] for row in doc["releases"] if row["original"]} == {"good", "bad"}
    patched = Path(doc["patched"]["path"])
    assert patched.is_file() and patched.is_relative_to(x86_story["results"])
    m = onnx.load(str(patched))
    assert [o.name for o in m.graph.output] == ["sentence_embedding", "last_hidden_state"]


@pytest.mark.release
def test_report_x86_repro_reproduces_both_verdicts(x86_story, bisect, fresh_python):
    results, tmp = x86_story["results"], x86_story["tmp"]
    run_id = x86_story["mitigation"]["run_id"]
    rep = bisect("report", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir))
    assert rep.returncode == 0, rep.stderr
    md = rep.stdout
    (tmp / "issue.md").write_text(md)
    assert "first bad: **1.20.0**" in md and "Last good: **1.19.2**" in md
    newest = ReleaseIndex(bisect.cache_dir, uv_bin()).releases()[-1].version
    assert f"still present** in the newest release, {newest}" in md
    assert "`/model/norm/SimplifiedLayerNormalization` ran in an fp32 island on 1.19.2 and natively in fp16 on 1.20.0" in md
    assert "depends on no session option" in md and "### Workaround" in md and "clean on all 3 releases" in md
    for field in ("| OS |", "| CPU model |", "| CPU flags |", "| Python |", "| numpy |", "| How it ran | native"):
        assert field in md
    doc = json.loads(bisect("report", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir),
                            "--format", "json").stdout)
    assert (doc["last_good"], doc["first_bad"], doc["newest"]["verdict"]) == ("1.19.2", "1.20.0", "bad")
    script = results / run_id / doc["repro"]["file"]
    # the run had no reduction: the report made one (the pair's probes say it is cheap), and said so
    assert "reducing first" in rep.stderr and doc["repro"]["reduced"]["pair"] == ["1.19.2", "1.20.0"], rep.stderr
    # the model (468 kB, over the embed limit) travels in the attachment: --full needs nothing else
    told = md.split("<details>")[0]  # the report's words, not the pasted script's
    assert doc["repro"]["model_attached"] and "by path" not in told and "| ? |" not in told
    model = bisect.cache_dir / "models" / "gemma-tiny-fused" / "model.onnx"
    for version, verdict, rc in (("1.20.0", "bad", 1), ("1.19.2", "good", 0)):
        assert run_script(fresh_python(version), script).returncode == rc  # the reduced repro
        for given in ((), (str(model),)):
            out = run_script(fresh_python(version), script, "--full", *given)
            assert out.returncode == rc, out.stderr
            assert out.stdout.startswith(f"onnxruntime {version}, full model: {verdict}")
            if verdict == "bad":
                assert "1 NaN rows, 0 Inf rows of 2" in out.stdout  # row 7, the one with the trigger word


def test_every_predicate_bad_if_takes_has_a_symptom_in_the_report():
    """The report names the symptom of every condition `--bad-if` reads (abs-diff once had none: a KeyError)."""
    from harness.report.upstream import SYMPTOMS
    from harness.verdicts import CONDITIONS

    assert set(CONDITIONS) - set(SYMPTOMS) == set()
