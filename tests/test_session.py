"""The life of a search (harness.session) over a replay runner: no environment, no process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from replay import SKIP, ReplayRunner, commit_of, crash, error, ran, releases

from harness import reference
from harness.plan import Plan
from harness.probe import ProbeJob
from harness.results.store import RunStore
from harness.session import probe_releases, run_search
from harness.verdicts import parse_predicate

VERSIONS = ("1.19.0", "1.19.2", "1.20.0", "1.20.1", "1.21.0", "1.21.1", "1.22.0", "1.22.1")


def plan_for(tmp_path, outcomes, versions=VERSIONS, run_id="replay") -> Plan:
    store = RunStore.open(tmp_path, run_id, {"arch": "x86_64"}, {}, ["test"])
    job = ProbeJob(tmp_path / "m.onnx", tmp_path / "b.npz")
    return Plan(ReplayRunner(outcomes), releases(*versions), store, job, parse_predicate("nan-or-inf"), None, None)


def regression_at(first_bad: str, versions=VERSIONS) -> dict:
    i = versions.index(first_bad)
    return {v: ran(nan_rows=0 if k < i else 2) for k, v in enumerate(versions)}


@pytest.mark.parametrize("first_bad", VERSIONS[1:])
def test_bisection_names_the_boundary_and_keeps_the_document(tmp_path, first_bad):
    plan = plan_for(tmp_path, regression_at(first_bad))
    found = run_search(plan)
    doc = found.doc
    i = VERSIONS.index(first_bad)
    assert (doc["last_good"], doc["first_bad"]) == (VERSIONS[i - 1], first_bad)
    assert doc["probe_count"] == len(plan.runner.calls) <= 5  # ceil(log2 8) + 2
    stored = json.loads((plan.store.dir / "cells" / f"regression-{VERSIONS[0]}-{VERSIONS[-1]}-nan-or-inf.json").read_text())
    assert stored["first_bad"] == first_bad and stored["predicate"] == "nan-or-inf"
    assert len(plan.store.records()) == doc["probe_count"]
    commits = doc["commits"]
    assert (commits["last_good"], commits["first_bad"]) == (commit_of(VERSIONS[i - 1]), commit_of(first_bad))
    assert commits["compare"].endswith(f"/compare/{commit_of(VERSIONS[i - 1])}...{commit_of(first_bad)}")


def test_a_second_search_reuses_every_probe(tmp_path):
    plan = plan_for(tmp_path, regression_at("1.21.0"))
    first = run_search(plan).doc
    again = run_search(plan_for(tmp_path, regression_at("1.21.0"))).doc
    assert again["first_bad"] == first["first_bad"]
    assert all(p["reused"] for p in again["probes"])
    assert len(plan.store.records()) == first["probe_count"]


def test_refresh_probes_again_and_appends(tmp_path):
    run_search(plan_for(tmp_path, regression_at("1.21.0")))
    plan = plan_for(tmp_path, regression_at("1.20.0"))  # the world changed: a refresh sees it
    doc = run_search(plan, refresh=True).doc
    assert doc["first_bad"] == "1.20.0" and doc["refresh"] is True
    assert not any(p["reused"] for p in doc["probes"])


def test_sweep_lists_every_transition(tmp_path):
    outcomes = regression_at("1.20.0")
    outcomes["1.22.0"] = ran(nan_rows=0)  # fixed once, broken again: not monotone
    doc = run_search(plan_for(tmp_path, outcomes), sweep=True).doc
    assert doc["probe_count"] == len(VERSIONS)
    assert [(t["from"], t["to"]) for t in doc["transitions"]] == [("1.19.2", "1.20.0"), ("1.21.1", "1.22.0"),
                                                                  ("1.22.0", "1.22.1")]
    assert doc["monotone"] is False


def test_a_fix_shaped_sweep_says_fixed_and_finds_no_regression(tmp_path):
    from harness.summary import EXIT_NO_BOUNDARY, exit_status

    versions = ("1.25.0", "1.26.0", "1.27.0", "1.28.0")
    outcomes = {v: ran(nan_rows=2) for v in versions[:3]} | {"1.28.0": ran(nan_rows=0)}  # bad, bad, bad, good
    doc = run_search(plan_for(tmp_path, outcomes, versions), sweep=True).doc
    assert doc["message"].startswith("bad until 1.27.0, good from 1.28.0: fixed at 1.28.0 (4 probes out of 4 releases).")
    assert "Last good" not in doc["message"] and "no regression in this range" in doc["message"]
    assert (doc["last_good"], doc["first_bad"], doc["status"]) == (None, None, "wrong_direction")
    assert exit_status(doc) == EXIT_NO_BOUNDARY


def test_a_sweep_names_its_first_regression_among_its_transitions(tmp_path):
    from harness.summary import EXIT_FOUND, exit_status

    outcomes = {v: ran(nan_rows=2) for v in VERSIONS}
    outcomes["1.20.0"] = outcomes["1.20.1"] = ran(nan_rows=0)  # bad, fixed at 1.20.0, broken again at 1.21.0
    doc = run_search(plan_for(tmp_path, outcomes), sweep=True).doc
    assert doc["message"].startswith("bad until 1.19.2, good from 1.20.0 to 1.20.1, bad from 1.21.0: "
                                     "fixed at 1.20.0, broken at 1.21.0 (8 probes out of 8 releases). Last good: 1.20.1, "
                                     "first bad: 1.21.0")
    assert (doc["last_good"], doc["first_bad"]) == ("1.20.1", "1.21.0") and exit_status(doc) == EXIT_FOUND


def test_skips_and_crashes_are_stepped_around(tmp_path):
    outcomes = regression_at("1.21.0")
    outcomes["1.20.1"] = SKIP
    outcomes["1.21.0"] = crash()
    doc = run_search(plan_for(tmp_path, outcomes)).doc
    assert (doc["last_good"], doc["first_bad"]) == ("1.20.0", "1.21.1")
    assert doc["untestable"] == ["1.20.1", "1.21.0"]
    verdicts = {p["version"]: p["verdict"] for p in doc["probes"]}
    assert verdicts["1.20.1"] == "skip" and verdicts["1.21.0"] == "crash"


def test_a_recorded_run_replays_to_the_same_boundary(tmp_path):
    plan = plan_for(tmp_path / "a", regression_at("1.20.1"))
    first = run_search(plan).doc
    replayed = plan_for(tmp_path / "b", {})
    replayed.runner = ReplayRunner.from_probes(plan.store.dir / "probes.jsonl")
    again = run_search(replayed).doc
    assert (again["last_good"], again["first_bad"]) == (first["last_good"], first["first_bad"])


def test_probe_releases_probes_only_what_is_missing(tmp_path):
    plan = plan_for(tmp_path, regression_at("1.20.0"))
    run_search(plan)
    before = list(plan.runner.calls)
    records = probe_releases(plan, ["1.22.1", "1.21.0"])
    assert records["1.21.0"]["verdict"] == "bad" and records["1.22.1"]["verdict"] == "bad"
    assert sorted(plan.runner.calls[len(before):]) == sorted({"1.21.0", "1.22.1"} - set(before))


def test_each_predicate_keeps_its_own_cell_document_and_reuses_the_probes(tmp_path):
    """A rerun with another --bad-if judges the same probes again; the first predicate's result stays."""
    first = run_search(plan_for(tmp_path, regression_at("1.21.0"))).doc
    plan = plan_for(tmp_path, regression_at("1.21.0"))
    plan.predicate = parse_predicate("max-abs>1e4")
    again = run_search(plan).doc
    probed = {p["version"] for p in first["probes"]}
    assert all(p["reused"] for p in again["probes"] if p["version"] in probed)
    cells = sorted(p.name for p in (plan.store.dir / "cells").iterdir())
    assert cells == [f"regression-{VERSIONS[0]}-{VERSIONS[-1]}-max-abs_10000.json",
                     f"regression-{VERSIONS[0]}-{VERSIONS[-1]}-nan-or-inf.json"]
    kept = json.loads((plan.store.dir / "cells" / cells[1]).read_text())
    assert (kept["predicate"], kept["first_bad"]) == ("nan-or-inf", "1.21.0")


# --- verdicts beyond NaN: load failures, crashes, references --------------------------------------


def test_a_load_failure_is_bisected_with_bad_if_error_and_stepped_around_without(tmp_path):
    outcomes = {v: (ran() if v < "1.21.0" else error("Fail: Load model failed: no kernel for SimplifiedLayerNorm(fp16)"))
                for v in VERSIONS}
    plan = plan_for(tmp_path, outcomes)
    plan.predicate = parse_predicate(["nan-or-inf", "error"])
    doc = run_search(plan).doc
    assert (doc["last_good"], doc["first_bad"]) == ("1.20.1", "1.21.0")
    bad = next(p for p in doc["probes"] if p["version"] == "1.21.0")
    assert bad["decided_by"] == ["error"] and "no kernel for SimplifiedLayerNorm" in bad["why"]
    assert doc["bad_means"] == "an output row holds NaN or Inf, or the model fails to load or run"
    plan = plan_for(tmp_path / "default", outcomes)
    assert run_search(plan).doc["first_bad"] is None  # errors are stepped around by default


def test_the_first_release_that_loads_again_is_found_in_fix_mode(tmp_path):
    outcomes = {v: (crash(11) if v < "1.20.1" else ran()) for v in VERSIONS}
    plan = plan_for(tmp_path, outcomes)
    plan.predicate = parse_predicate("crash")
    doc = run_search(plan, mode="fix").doc
    assert (doc["last_bad"], doc["first_good"]) == ("1.20.0", "1.20.1")


def drifting_outputs(first_wrong: str):
    """Outputs that match the truth up to `first_wrong`, then one row points elsewhere (finite, wrong)."""
    truth = np.array([[1.0, 0.0, 0.5], [0.0, 2.0, 1.0]], np.float32)

    def arrays(version, model):
        if "fp32" in model.name or version < first_wrong:
            return {"y": truth}
        return {"y": np.array([[1.0, 0.0, 0.5], [2.0, 0.0, -1.0]], np.float32)}
    return arrays


def test_a_finite_but_wrong_release_is_found_against_a_reference_release(tmp_path):
    runner = ReplayRunner({v: ran() for v in VERSIONS}, arrays=drifting_outputs("1.21.1"))
    plan = plan_for(tmp_path, {})
    plan.runner, plan.predicate = runner, parse_predicate("cosine<0.999")
    plan.reference = reference.from_release(releases("1.19.0")[0])
    doc = run_search(plan).doc
    assert (doc["last_good"], doc["first_bad"]) == ("1.21.0", "1.21.1")
    assert runner.calls.count("1.19.0") == 1  # the reference is the search's own probe of 1.19.0
    bad = next(p for p in doc["probes"] if p["version"] == "1.21.1")
    assert bad["metrics"]["cosine_min"] < 0.5 and "worst row's cosine" in bad["why"]
    assert doc["reference"]["label"] == "the outputs of onnxruntime 1.19.0"
    # a reference release outside the range is probed once, as its own series
    plan = plan_for(tmp_path / "outside", {}, versions=VERSIONS[2:])
    plan.runner, plan.predicate = ReplayRunner({v: ran() for v in VERSIONS}, arrays=drifting_outputs("1.21.1")), \
        parse_predicate("cosine<0.999")
    plan.reference = reference.from_release(releases("1.19.0")[0])
    doc = run_search(plan).doc
    assert doc["first_bad"] == "1.21.1" and "1.19.0" not in [p["version"] for p in doc["probes"]]
    assert [r["series"] for r in plan.store.records() if r["version"] == "1.19.0"] == ["reference"]


def test_the_fp32_reference_runs_beside_each_probe_and_is_reused(tmp_path):
    (tmp_path / "m.fp32.onnx").write_bytes(b"fp32 twin")
    runner = ReplayRunner({v: ran() for v in VERSIONS}, arrays=drifting_outputs("1.20.1"))
    plan = plan_for(tmp_path, {})
    plan.runner, plan.predicate = runner, parse_predicate("cosine<0.999")
    plan.reference = reference.from_fp32(tmp_path / "m.fp32.onnx", "a twin")
    doc = run_search(plan).doc
    assert (doc["last_good"], doc["first_bad"]) == ("1.20.0", "1.20.1")
    probed = [p["version"] for p in doc["probes"]]
    fp32 = [r["version"] for r in plan.store.records() if r.get("series") == "reference-fp32"]
    assert sorted(fp32) == sorted(probed) and runner.models.count("m.fp32.onnx") == len(probed)
    calls = len(runner.calls)
    again = run_search(plan).doc
    assert len(runner.calls) == calls and again["first_bad"] == "1.20.1"  # probes and references reused
    # the same run judged with a predicate that needs no reference keeps its metrics
    plan.predicate, plan.reference = parse_predicate("headroom>0.5"), None
    assert run_search(plan).doc["status"] == "endpoints_agree"


def test_probes_made_without_a_reference_are_compared_when_one_is_given_later(tmp_path):
    (tmp_path / "m.fp32.onnx").write_bytes(b"fp32 twin")
    runner = ReplayRunner({v: ran() for v in VERSIONS}, arrays=drifting_outputs("1.20.1"))
    plan = plan_for(tmp_path, {})
    plan.runner = runner
    first = run_search(plan).doc
    assert first["status"] == "endpoints_agree" and "m.fp32.onnx" not in runner.models
    plan.predicate = parse_predicate("cosine<0.999")
    plan.reference = reference.from_fp32(tmp_path / "m.fp32.onnx", "a twin")
    doc = run_search(plan).doc
    assert doc["first_bad"] == "1.20.1"
    assert runner.models.count("m.onnx") == len({p["version"] for p in doc["probes"]})  # no probe made twice


def test_a_release_whose_fp32_model_fails_is_an_error_that_says_so(tmp_path):
    (tmp_path / "m.fp32.onnx").write_bytes(b"fp32 twin")
    outcomes = {v: ran() for v in VERSIONS}

    class Fp32Fails(ReplayRunner):
        def run(self, env, request, workdir, timeout):
            if Path(request["model"]).name == "m.fp32.onnx" and env.version == "1.20.0":
                return error("Fail: no fp32 kernel")
            return super().run(env, request, workdir, timeout)

    plan = plan_for(tmp_path, {}, versions=("1.19.2", "1.20.0", "1.20.1"))
    plan.runner = Fp32Fails(outcomes, arrays=drifting_outputs("1.20.1"))
    plan.predicate, plan.reference = parse_predicate("cosine<0.999"), reference.from_fp32(tmp_path / "m.fp32.onnx", "t")
    doc = run_search(plan).doc
    middle = next(p for p in doc["probes"] if p["version"] == "1.20.0")
    assert middle["verdict"] == "error" and middle["why"].startswith("the model in fp32 did not run on 1.20.0: Fail: no fp32 kernel")
    assert (doc["last_good"], doc["first_bad"], doc["untestable"]) == ("1.19.2", "1.20.1", ["1.20.0"])


@pytest.mark.parametrize("emulated", [False, True])
def test_no_worker_is_started_early_for_a_release_never_probed(tmp_path, emulated):
    versions = tuple(f"1.{m}.0" for m in range(10, 32))  # 22 releases
    started: list[str] = []

    class Recording(ReplayRunner):
        @classmethod
        def emulates(cls, arch):
            return emulated

        def start_early(self, env, memory_limit_mb, tag):
            started.append(tag)

        def run(self, env, request, workdir, timeout):
            import time

            time.sleep(0.05)  # the background installs (and early starts) run while a round's probes do
            return super().run(env, request, workdir, timeout)

    plan = plan_for(tmp_path, {}, versions=versions)
    plan.runner = Recording(regression_at("1.23.0", versions))
    doc = run_search(plan, jobs=1).doc
    probed = {p["version"] for p in doc["probes"]}
    assert doc["first_bad"] == "1.23.0"
    # only probes sure to run, natively and emulated alike: the endpoint queued behind the first
    assert started == [versions[-1]] and set(started) <= probed
