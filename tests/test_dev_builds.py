"""`bisect run --into-dev-builds`: past the release boundary, into the development builds between the two releases.

The pure part (which builds lie between, which can be installed) and the search's logic over a replay runner
run in milliseconds; the real-release tests bisect real wheels: 1.19.2 (good on gemma-tiny-fused) re-versioned
as 1.20.0.dev1 and dev2, 1.20.0 (bad: 7 NaN rows of 20) as dev3 and dev4, in a --find-links directory of the
test cache (tests/wheelhouse.py).
"""

from __future__ import annotations

import json
import platform
import sys
from collections import Counter
from pathlib import Path

import jsonschema
import pytest
import wheelhouse
from replay import ReplayRunner, commit_of, error, ran, releases

from harness.plan import Plan
from harness.probe import ProbeJob
from harness.releases.versions import Release, Target, builds_between, installable
from harness.results.store import RunStore
from harness.session import run_search
from harness.triage import devbuilds
from harness.verdicts import parse_predicate

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
X86 = pytest.mark.skipif(platform.machine() != "x86_64", reason="the development builds here are made of x86_64 wheels")
RANGE = ["--from", "1.19.2", "--to", "1.20.0"]


# -- the pure part -------------------------------------------------------------------------------------


def test_builds_between_are_the_pre_releases_strictly_inside_in_pep440_order():
    listing = releases("1.19.2", "1.20.0.dev10", "1.20.0.dev2", "1.20.0rc1", "1.20.0a1", "1.19.3", "1.20.0",
                       "1.20.1.dev1", "1.19.2.post1", "1.19.0.dev5")
    got = [r.version for r in builds_between(listing, "1.19.2", "1.20.0")]
    # dev2 < dev10 (not as text), devN < a1 < rc1; a final or post release between is no build; the ends are
    # not inside, nor 1.19.0.dev5 (before 1.19.2) or 1.20.1.dev1 (after 1.20.0)
    assert got == ["1.20.0.dev2", "1.20.0.dev10", "1.20.0a1", "1.20.0rc1"]
    assert [r.version for r in builds_between(listing, "1.20.0", "1.21.0")] == ["1.20.1.dev1"]
    assert builds_between(listing, "1.19.2", "1.19.3") == []
    assert [r.version for r in builds_between(listing, "1.20.0.dev2", "1.20.0rc1")] == ["1.20.0.dev10", "1.20.0a1"]


def test_a_build_with_no_wheel_for_the_target_is_left_out_with_the_reason():
    x86 = Release("1.24.0.dev1", ["onnxruntime-1.24.0.dev1-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"])
    arm = Release("1.24.0.dev2", ["onnxruntime-1.24.0.dev2-cp311-cp311-manylinux_2_27_aarch64.whl"])
    py312 = Release("1.24.0.dev3", ["onnxruntime-1.24.0.dev3-cp312-cp312-manylinux_2_27_x86_64.whl"])
    kept, left = installable([x86, arm, py312], Target("x86_64", "3.11"))
    assert kept == [x86]
    assert [(r.version, why) for r, why in left] == [("1.24.0.dev2", "no wheel for x86_64 / Python 3.11"),
                                                     ("1.24.0.dev3", "no wheel for x86_64 / Python 3.11")]
    kept, left = installable([x86, arm], Target("aarch64", "3.11"))
    assert kept == [arm] and [(r.version, why) for r, why in left] == [("1.24.0.dev1", "no wheel for aarch64 / Python 3.11")]


def test_the_fewest_rows_search_is_refused_before_anything_runs(bisect, tmp_path):
    r = bisect("run", "--model", "gemma-tiny-fused", *RANGE, "--rows", "fewest", "--into-dev-builds",
               results=tmp_path / "results")
    assert r.returncode == 2, r.stderr
    assert "--into-dev-builds: the fewest-rows search keeps its boundary's probes in runs of their own" in r.stderr
    assert not (tmp_path / "results").exists()


# -- the search's logic, over a replay runner ---------------------------------------------------------------

RELEASES = ("1.19.0", "1.19.2", "1.20.0", "1.20.1")
BUILDS = tuple(f"1.20.0.dev{i}" for i in range(1, 8))


def replayed(tmp_path, outcomes: dict, mode: str = "regression"):
    store = RunStore.open(tmp_path, "replay", {"arch": "x86_64"}, {}, ["test"])
    plan = Plan(ReplayRunner(outcomes), releases(*RELEASES), store, ProbeJob(tmp_path / "m.onnx", tmp_path / "b.npz"),
                parse_predicate("nan-or-inf"), None, None)
    return plan, run_search(plan, mode=mode)


def test_a_build_that_cannot_be_judged_is_stepped_around_and_named_untestable(tmp_path):
    good, bad = ran(), ran(nan_rows=2)
    outcomes = {"1.19.0": good, "1.19.2": good, "1.20.0": bad, "1.20.1": bad,
                **{v: good for v in BUILDS[:3]}, BUILDS[3]: error(), **{v: bad for v in BUILDS[4:]}}
    plan, found = replayed(tmp_path, outcomes)
    released = Counter(plan.runner.calls)
    section = devbuilds.search(found, releases(*RELEASES, *BUILDS))
    assert (section["last_good"], section["first_bad"]) == ("1.20.0.dev3", "1.20.0.dev5"), section
    assert section["untestable"] == ["1.20.0.dev4"]
    assert {p["version"]: p["verdict"] for p in section["probed"]}["1.20.0.dev4"] == "error"
    assert section["probes"] == len(section["probed"]) == len(plan.runner.calls) - sum(released.values())
    assert Counter(plan.runner.calls)["1.19.2"] == released["1.19.2"] == 1  # the ends are reused, never probed again
    assert Counter(plan.runner.calls)["1.20.0"] == released["1.20.0"] == 1
    assert section["commits"] == {"last_good": commit_of("1.20.0.dev3"), "first_bad": commit_of("1.20.0.dev5"),
                                  "compare": f"https://github.com/microsoft/onnxruntime/compare/"
                                             f"{commit_of('1.20.0.dev3')}...{commit_of('1.20.0.dev5')}"}
    # the run's question and boundary are the releases'; the builds' are a section of the same run document
    stored = json.loads((plan.store.dir / "cells" / f"{found.doc['cell']['key']}.json").read_text())
    assert stored["question"]["range"] == ["1.19.0", "1.20.1"]
    assert (stored["last_good"], stored["first_bad"]) == ("1.19.2", "1.20.0")
    assert stored["dev_builds"] == section


def test_in_fix_mode_the_builds_between_last_bad_and_first_good_are_searched(tmp_path):
    good, bad = ran(), ran(nan_rows=2)
    outcomes = {"1.19.0": bad, "1.19.2": bad, "1.20.0": good, "1.20.1": good,
                **{v: bad for v in BUILDS[:5]}, **{v: good for v in BUILDS[5:]}}
    plan, found = replayed(tmp_path, outcomes, mode="fix")
    assert (found.doc["last_bad"], found.doc["first_good"]) == ("1.19.2", "1.20.0")
    section = devbuilds.search(found, releases(*RELEASES, *BUILDS))
    assert (section["last_bad"], section["first_good"]) == ("1.20.0.dev5", "1.20.0.dev6"), section
    assert "last_good" not in section and section["between"] == ["1.19.2", "1.20.0"]


def test_no_boundary_between_the_releases_leaves_nothing_to_continue_from(tmp_path):
    plan, found = replayed(tmp_path, {v: ran() for v in (*RELEASES, *BUILDS)})
    assert devbuilds.search(found, releases(*RELEASES, *BUILDS)) is None
    assert "dev_builds" not in found.doc


# -- real releases and builds ---------------------------------------------------------------------------------


def records(results: Path, run_id: str) -> list[dict]:
    return [json.loads(x) for x in (results / run_id / "probes.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def builds(cache_dir) -> dict:
    return wheelhouse.dev_builds(cache_dir, Target("x86_64", PYTHON))


@pytest.mark.release
@X86
def test_into_dev_builds_names_the_first_bad_build_and_reuses_the_releases(bisect, builds, cache_dir, tmp_path):
    results = tmp_path / "results"
    args = ["run", "--model", "gemma-tiny-fused", *RANGE, "--find-links", str(builds["links"]), "--into-dev-builds"]
    r = bisect(*args, "--json", results=results)
    assert r.returncode == 0, r.stderr
    doc = r.json()
    # the run's own boundary and question are the releases'
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0"), doc["message"]
    assert doc["question"]["range"] == ["1.19.2", "1.20.0"] and doc["releases"] == ["1.19.2", "1.20.0"]
    section = doc["dev_builds"]
    assert section["between"] == ["1.19.2", "1.20.0"] and section["status"] == "found"
    assert section["listed"] == [f"1.20.0.dev{i}" for i in (1, 2, 3, 4)] and section["skipped"] == []
    assert (section["last_good"], section["first_bad"]) == ("1.20.0.dev2", "1.20.0.dev3"), section
    assert section["probes"] == 2 and [p["version"] for p in section["probed"]] == ["1.20.0.dev2", "1.20.0.dev3"]
    recs = records(results, doc["run_id"])
    assert Counter(rec["version"] for rec in recs) == {"1.19.2": 1, "1.20.0": 1, "1.20.0.dev2": 1, "1.20.0.dev3": 1}
    by_version = {rec["version"]: rec for rec in recs}
    assert by_version["1.20.0.dev3"]["result"]["rows"]["nan_rows"] == 7
    assert by_version["1.20.0.dev2"]["result"]["rows"]["nan_rows"] == 0
    # the builds are the two releases' binaries: each reports its base release and carries that binary's commit
    assert by_version["1.20.0.dev2"]["result"]["onnxruntime"]["version"] == "1.20.0"
    commit = {p["version"]: p["commit"] for p in doc["probes"]}
    assert section["commits"]["last_good"] == commit["1.19.2"] and section["commits"]["first_bad"] == commit["1.20.0"]
    assert section["commits"]["compare"].endswith(f"/compare/{commit['1.19.2']}...{commit['1.20.0']}")
    assert (results / doc["run_id"] / "outputs" / "1.20.0.dev3.npz").is_file()
    # kept in the run document; its readers (report, reduce, drift) still answer the releases' question
    from harness.request import release_listing
    from harness.session import asked_of_run, judged_for, question_boundary

    store = RunStore(results / doc["run_id"])
    stored = json.loads((store.dir / "cells" / f"{doc['cell']['key']}.json").read_text())
    assert stored["dev_builds"] == section
    schema = json.loads((Path(__file__).parent.parent / "docs" / "schema" / "cell-document.v1.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(stored)
    asked = asked_of_run(store)
    assert (asked.question.first, asked.question.last) == ("1.19.2", "1.20.0")
    found = question_boundary(judged_for(store, asked.question), release_listing(cache_dir), asked.question)
    assert (found.pair.good, found.pair.bad) == ("1.19.2", "1.20.0")
    # the same command again: every probe reused, and the terminal says the builds' boundary in a line
    r = bisect(*args, results=results)
    assert r.returncode == 0, r.stderr
    assert ("Into development builds between 1.19.2 and 1.20.0: last good 1.20.0.dev2, first bad 1.20.0.dev3 "
            "(2 probes of 4 builds; 0 skipped).") in r.stdout, r.stdout
    assert f"commits {commit['1.19.2']} .. {commit['1.20.0']}" in r.stdout
    assert len(records(results, doc["run_id"])) == 4


@pytest.fixture(scope="module")
def builds_one_for_arm(cache_dir, builds) -> Path:
    """The builds of `builds`, but 1.20.0.dev2 only as an aarch64 wheel (the 1.19.2 aarch64 binary)."""
    arm = wheelhouse.release_wheel(cache_dir, "onnxruntime", "1.19.2", Target("aarch64", PYTHON))
    made = {**builds["made"], "1.20.0.dev2": wheelhouse.reversioned(arm, "1.20.0.dev2", cache_dir)}
    return wheelhouse.find_links_dir(cache_dir / "test-wheels" / wheelhouse.REVERSIONED / "find-links-dev2-aarch64",
                                     [builds["good"], builds["bad"], *made.values()])


@pytest.mark.release
@X86
def test_a_build_with_no_wheel_for_the_target_is_skipped_and_said(bisect, builds_one_for_arm, tmp_path):
    results = tmp_path / "results"
    args = ["run", "--model", "gemma-tiny-fused", *RANGE, "--find-links", str(builds_one_for_arm), "--into-dev-builds"]
    r = bisect(*args, results=results)
    assert r.returncode == 0, r.stderr
    assert ("Into development builds between 1.19.2 and 1.20.0: last good 1.20.0.dev1, first bad 1.20.0.dev3 "
            "(2 probes of 3 builds; 1 skipped).") in r.stdout, r.stdout
    assert f"skipped: 1.20.0.dev2: no wheel for x86_64 / Python {PYTHON}" in r.stdout, r.stdout
    r = bisect(*args, "--json", results=results)
    section = r.json()["dev_builds"]
    assert section["skipped"] == [{"version": "1.20.0.dev2", "why": f"no wheel for x86_64 / Python {PYTHON}"}]
    assert (section["last_good"], section["first_bad"]) == ("1.20.0.dev1", "1.20.0.dev3")
    assert "1.20.0.dev2" not in {rec["version"] for rec in records(results, r.json()["run_id"])}  # never probed


@pytest.mark.release
@X86
def test_no_builds_between_the_releases_is_said_and_the_exit_status_stays(bisect, tmp_path):
    results = tmp_path / "results"
    r = bisect("run", "--model", "gemma-tiny-fused", *RANGE, "--into-dev-builds", results=results)
    assert r.returncode == 0, r.stderr  # the releases' boundary was found, as without --into-dev-builds
    assert "Last good: 1.19.2, first bad: 1.20.0" in r.stdout, r.stdout
    assert "No development builds between 1.19.2 and 1.20.0 in the run's wheel sources" in r.stdout, r.stdout
    doc = bisect("run", "--model", "gemma-tiny-fused", *RANGE, "--into-dev-builds", "--json", results=results).json()
    assert doc["dev_builds"]["status"] == "none_between" and doc["dev_builds"]["probes"] == 0
    assert (doc["dev_builds"]["last_good"], doc["dev_builds"]["first_bad"]) == ("1.19.2", "1.20.0")
    assert len(records(results, doc["run_id"])) == 2
    # no boundary among the releases: nothing to continue from, and the run's exit status is its own
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.0", "--to", "1.19.2", "--into-dev-builds",
               results=results)
    assert r.returncode == 3, r.stderr
    assert "--into-dev-builds: the releases show no boundary to continue from" in r.stderr, r.stderr
