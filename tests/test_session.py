"""The life of a search (harness.session) over a replay runner: no environment, no process."""

from __future__ import annotations

import json

import pytest

from harness.plan import Plan
from harness.probe import ProbeJob
from harness.results import RunStore
from harness.session import probe_releases, run_search
from harness.verdicts import parse_predicate
from replay import SKIP, ReplayRunner, commit_of, crash, ran, releases

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
