"""A fix (`run --mode fix`) read by everything after the search: report, repro, reduce, blame and drift.

The run: a model of opset 23, which onnxruntime 1.22.1 refuses to load and 1.23.0 loads (builders.new_opset_model),
asked with --bad-if error. Its pair is last bad 1.22.1 (the OLDER release is the bad side) and first good 1.23.0.
"""

from __future__ import annotations

import json

import builders
import numpy as np
import pytest

pytestmark = pytest.mark.release

LAST_BAD, FIRST_GOOD = "1.22.1", "1.23.0"


def _reader(bisect, verb: str, run_id: str, *args: str):
    return bisect(verb, run_id, "--results-dir", str(bisect.results_dir), "--cache-dir", str(bisect.cache_dir), *args)


@pytest.fixture(scope="module")
def fixed(module_bisect, tmp_path_factory) -> dict:
    """The fix run, its reduction and its report (in that order: the report's repro embeds the reduction)."""
    d = tmp_path_factory.mktemp("new_opset")
    model = builders.save(builders.new_opset_model(23), d / "new_opset.onnx")
    np.savez(d / "batch.npz", **builders.new_opset_inputs())
    r = module_bisect("run", "--model", str(model), "--inputs", str(d / "batch.npz"), "--from", LAST_BAD, "--to",
                      FIRST_GOOD, "--mode", "fix", "--bad-if", "error", "--json")
    assert r.returncode == 0, r.stderr
    run = r.json()
    assert (run["mode"], run["last_bad"], run["first_good"]) == ("fix", LAST_BAD, FIRST_GOOD)
    reduced = _reader(module_bisect, "reduce", run["run_id"], "--json")
    markdown = _reader(module_bisect, "report", run["run_id"], "--no-probe")
    as_json = _reader(module_bisect, "report", run["run_id"], "--no-probe", "--format", "json")
    return {"run": run, "reduced": reduced, "markdown": markdown, "report": as_json,
            "dir": module_bisect.results_dir / run["run_id"]}


def test_a_fix_is_reduced_between_its_last_bad_and_first_good_release(fixed):
    red = fixed["reduced"]
    assert red.returncode == 0, red.stderr
    doc = red.json()
    assert doc["pair"] == [FIRST_GOOD, LAST_BAD]  # [good, bad]: the bad side is the older release
    assert doc["verified"] == {"verdicts": {FIRST_GOOD: "good", LAST_BAD: "bad"}, "flips": True}
    assert doc["rows"]["after"] == 1 and doc["question"]["mode"] == "fix"


def test_the_report_of_a_fix_is_titled_as_the_fix_with_the_commit_range_that_fixed_it(fixed):
    md, rep = fixed["markdown"], fixed["report"]
    assert md.returncode == 0 and rep.returncode == 0, md.stderr + rep.stderr
    title = md.stdout.splitlines()[0]
    assert title.endswith(f"load or run failures on x86_64 CPU fixed in onnxruntime {FIRST_GOOD} (last bad {LAST_BAD})")
    assert "No good-to-bad boundary" not in md.stdout
    assert f"up to onnxruntime **{LAST_BAD}**, the last bad release; **{FIRST_GOOD}** is the first good one" in md.stdout
    assert f"Last bad: **{LAST_BAD}**, first good: **{FIRST_GOOD}**." in md.stdout
    doc = rep.json()
    assert (doc["mode"], doc["last_bad"], doc["first_good"]) == ("fix", LAST_BAD, FIRST_GOOD)
    assert (doc["good"], doc["bad"]) == (FIRST_GOOD, LAST_BAD) and "last_good" not in doc
    # the commit range is the run's own: its builds' commits as the run document recorded them, older first
    c, built = doc["commits"], fixed["run"]["commits"]
    assert c == built and c["last_bad"] and c["first_good"] and c["last_bad"] != c["first_good"]
    assert c["compare"].endswith(f"/compare/{c['last_bad']}...{c['first_good']}")
    section = md.stdout.split("### Commit range", 1)[1].split("###", 1)[0]
    assert f"`{c['last_bad']}` ({LAST_BAD}, bad) .. `{c['first_good']}` ({FIRST_GOOD}, good)" in section
    assert c["compare"] in section
    # the repro is installed on the bad side, and the good side is named as the fix
    assert doc["environment"]["requirement"] == f"onnxruntime=={LAST_BAD}"
    assert f"pip install onnxruntime=={FIRST_GOOD} numpy   # {FIRST_GOOD}, the first good release" in md.stdout
    assert f"exits 1 (bad) on {LAST_BAD} and 0 (good) on {FIRST_GOOD}" in md.stdout
    assert doc["repro"]["reduced"]["pair"] == [FIRST_GOOD, LAST_BAD]
    assert json.loads((fixed["dir"] / "cells" / f"{fixed['run']['cell']['key']}.json").read_text())["mode"] == "fix"


@pytest.mark.parametrize("full", [False, True], ids=["reduced", "full"])
def test_the_repro_of_a_fix_is_bad_on_the_last_bad_release_and_good_on_the_first_good(fixed, fresh_python, full):
    assert fixed["report"].returncode == 0, fixed["report"].stderr
    args = ("--full",) if full else ()
    what = "full model" if full else "reduced model"
    for version, rc, said in ((LAST_BAD, 1, "bad (fails: "), (FIRST_GOOD, 0, "good")):
        out = builders.run_script(fresh_python(version), fixed["dir"] / "repro.py", *args)
        assert out.returncode == rc and f"onnxruntime {version}, {what}: {said}" in out.stdout, out.stdout + out.stderr


def test_blame_of_a_fix_pair_that_flips_says_it_flips_and_what_it_could_not_name(fixed, module_bisect):
    b = _reader(module_bisect, "blame", fixed["run"]["run_id"], "--json")
    assert b.returncode == 4, b.stdout + b.stderr  # not 3: "the pair does not flip"
    doc = b.json()
    assert (doc["mode"], doc["last_bad"], doc["first_good"], doc["named"]) == ("fix", LAST_BAD, FIRST_GOOD, False)
    looks = {p["version"]: p["verdict"] for p in doc["probes"] if p["look"]}
    assert looks == {LAST_BAD: "bad", FIRST_GOOD: "good"}
    assert f"{LAST_BAD} is bad even with graph optimizations disabled" in doc["text"]
    assert "no optimized graph was saved" in doc["text"]


def test_drift_follows_a_fix_run(fixed, module_bisect):
    d = module_bisect("drift", fixed["run"]["run_id"], "--results-dir", str(module_bisect.results_dir), "--json")
    assert d.returncode == 0, d.stderr
    rows = {row["version"]: row for row in d.json()["rows"]}
    assert set(rows) == {LAST_BAD, FIRST_GOOD}
    assert rows[LAST_BAD]["verdict"] == "bad" and rows[FIRST_GOOD]["verdict"] == "good"
