"""`bisect drift`: a run's graded numbers per release (harness.report.drift) and the command that shows them.

Runs are built from hand-written probe records (RunStore.open + append):
nothing is installed or probed.
"""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import inproc
import numpy as np
import pytest

from harness.metrics import FP16_MAX, probe_metrics
from harness.report import drift
from harness.results.store import RunStore
from harness.verdicts import parse_predicate

NAN_OR_INF = parse_predicate("nan-or-inf")


# -- records as the driver writes them ---------------------------------------------------------

def stats(max_abs: float | None = 1.0, sha: str = "a", nan_rows: int = 0, dtype: str = "float16", name: str = "y") -> dict:
    """The worker's statistics of one output (4 rows of 8)."""
    return {"name": name, "dtype": dtype, "shape": [4, 8], "sha256": sha, "rows": 4, "nan_rows": nan_rows,
            "inf_rows": 0, "zero_rows": 0, "max_abs": max_abs}


def record(version: str, *outputs: dict, status: str = "ran", metrics: dict | None = None,
           finished: str = "2025-01-01T00:00:00Z", **extra) -> dict:
    """A probe record; `metrics` None leaves the key out (a record made before metrics were stored)."""
    rec = {"version": version, "status": status, "finished": finished, "seconds": 0.1,
           "result": {"stage": "done", "outputs": list(outputs)} if status == "ran" else {"stage": "run"}, **extra}
    if status != "ran":
        rec["reason"] = f"{status} at the run stage"
    if metrics is not None:
        rec["metrics"] = metrics
    return rec


def headroom_record(version: str, headroom: float, sha: str | None = None) -> dict:
    return record(version, stats(headroom * FP16_MAX, sha or f"{version}"))


REFERENCE = np.random.default_rng(0).standard_normal((4, 8))


def compared(version: str, output: np.ndarray, sha: str | None = None) -> dict:
    """A record whose metrics were made against REFERENCE, as the driver makes them."""
    finite = output[np.isfinite(output)]
    s = stats(float(np.abs(finite).max()) if finite.size else None, sha or version,
              nan_rows=int((~np.isfinite(output)).any(axis=1).sum()), dtype="float32")
    result = {"stage": "done", "outputs": [s]}
    return record(version, s, metrics=probe_metrics(result, {"y": output}, {"y": REFERENCE}, "fp32"))


def near(scale: float, seed: int = 1) -> np.ndarray:
    """REFERENCE plus noise of relative size `scale` on every row."""
    return REFERENCE + scale * np.random.default_rng(seed).standard_normal(REFERENCE.shape) * np.abs(REFERENCE).max()


def by_metric(steps: list[drift.Step]) -> dict[str, list[drift.Step]]:
    found: dict[str, list[drift.Step]] = {}
    for s in steps:
        found.setdefault(s.metric, []).append(s)
    return found


# -- rows ----------------------------------------------------------------------------------

def test_rows_are_the_newest_own_record_of_each_release_in_version_order():
    records = [
        headroom_record("1.10.0", 0.5),
        headroom_record("1.9.0", 0.1),
        record("1.9.0", stats(0.2 * FP16_MAX, "old"), finished="2024-01-01T00:00:00Z"),  # older: loses
        headroom_record("1.9.1", 0.3),
        record("1.9.1", stats(0.3 * FP16_MAX, "newer"), finished="2025-06-01T00:00:00Z"),  # newest: wins
        record("1.9.2", stats(60000.0, "series"), series="fp32-island"),  # triage: left out
        record("1.9.2", stats(60000.0, "combo"), combo_id="c1"),
    ]
    rows = drift.rows(records, NAN_OR_INF)
    assert [r.version for r in rows] == ["1.9.0", "1.9.1", "1.10.0"]  # 1.10 after 1.9: versions, not strings
    assert rows[0].headroom == pytest.approx(0.1)
    assert rows[1].digests == ("newer",)


def test_old_records_without_metrics_get_them_from_the_worker_result():
    old = record("1.19.0", stats(32752.0, "x"), stats(3.0, "z", dtype="float32", name="logits"))
    assert "metrics" not in old
    (row,) = drift.rows([old], NAN_OR_INF)
    assert row.max_abs == 32752.0
    assert row.headroom == pytest.approx(0.5)  # the fp16 output's; the fp32 one has none
    assert row.cosine_min is None and row.rel_diff_max is None
    assert (row.verdict, row.status) == ("good", "ran")


def test_stored_metrics_win_over_the_worker_result():
    rec = compared("1.20.0", near(1e-3))
    (row,) = drift.rows([rec], NAN_OR_INF)
    assert row.cosine_min == pytest.approx(rec["metrics"]["cosine_min"])
    assert 0.99 < row.cosine_min < 1.0
    assert row.rel_diff_max == pytest.approx(rec["metrics"]["rel_diff_max"]) and row.rel_diff_max > 0


def test_outputs_changed_compares_bits_with_the_previous_release_that_ran():
    rows = drift.rows([headroom_record("1.19.0", 0.5, "same"), headroom_record("1.19.2", 0.5, "same"),
                       record("1.20.0", status="crash"), headroom_record("1.20.1", 0.5, "same"),
                       headroom_record("1.21.0", 0.5, "other")], NAN_OR_INF)
    assert [r.outputs_changed for r in rows] == [None, False, None, False, True]
    crashed = rows[2]
    assert (crashed.verdict, crashed.max_abs, crashed.headroom) == ("crash", None, None)


def test_a_predicate_that_needs_a_reference_labels_verdicts_not_statuses():
    rows = drift.rows([headroom_record("1.19.0", 0.5), record("1.20.0", status="timeout"),
                       compared("1.21.0", near(1e-6)), compared("1.22.0", near(3e-2))],
                      parse_predicate("rel-diff>1e-3"))
    # probed before the reference existed: never compared, so no verdict at all (neither good nor an error)
    assert [(r.verdict, r.status) for r in rows] == [("", "ran"), ("timeout", "timeout"), ("good", "ran"),
                                                     ("bad", "ran")]
    assert rows[0].why == "not compared with the reference"


def test_a_number_that_was_never_measured_is_not_a_step():
    before = headroom_record("1.19.0", 0.5, "same")  # probed before a reference existed: no cosine
    made = drift.rows([before, compared("1.20.0", REFERENCE.copy(), "same")], parse_predicate("cosine<0.999"))
    assert (made[0].cosine_min, made[1].cosine_min) == (None, pytest.approx(1.0))
    assert not [s for s in drift.steps(made) if s.metric in ("cosine_min", "rel_diff_max")]
    # a comparison made against another reference is no comparison with the run's
    other = compared("1.21.0", near(3e-2))
    other["metrics"]["reference"] = "another"
    made = drift.rows([compared("1.20.0", REFERENCE.copy()), other], parse_predicate("cosine<0.999"), "fp32")
    assert made[1].cosine_min is None and made[1].verdict == ""  # never compared with the run's: blank
    assert not [s for s in drift.steps(made) if s.metric == "cosine_min"]


def test_the_run_predicate_judges_the_rows():
    records = [headroom_record("1.19.0", 0.2), headroom_record("1.20.0", 0.9)]
    assert [r.verdict for r in drift.rows(records, parse_predicate("max-abs>30000"))] == ["good", "bad"]
    assert [r.verdict for r in drift.rows(records, NAN_OR_INF)] == ["good", "good"]


# -- steps ---------------------------------------------------------------------------------

def test_a_headroom_step_is_named_with_its_releases_and_size():
    rows = drift.rows([headroom_record("1.19.0", 0.713), headroom_record("1.19.2", 0.713),
                       headroom_record("1.20.0", 0.936)], NAN_OR_INF)
    found = by_metric(drift.steps(rows))
    (step,) = found["headroom"]
    assert (step.from_version, step.to_version) == ("1.19.2", "1.20.0")
    assert step.before == pytest.approx(0.713) and step.after == pytest.approx(0.936)
    assert step.change == pytest.approx(0.936 / 0.713 - 1)
    assert step.description == "headroom 0.713 -> 0.936 (+31.3%) between 1.19.2 and 1.20.0"
    assert [s.to_version for s in found["max_abs"]] == ["1.20.0"]  # the same move in max |x|
    assert set(found) == {"headroom", "max_abs"}


def test_a_change_under_the_threshold_is_not_a_step_and_a_lower_threshold_finds_it():
    rows = drift.rows([headroom_record("1.19.0", 0.500), headroom_record("1.20.0", 0.503)], NAN_OR_INF)  # +0.6%
    assert drift.steps(rows) == []
    assert {s.metric for s in drift.steps(rows, threshold=0.005)} == {"headroom", "max_abs"}


def test_a_fall_is_a_step_with_a_negative_change():
    rows = drift.rows([headroom_record("1.19.0", 0.8), headroom_record("1.20.0", 0.4)], NAN_OR_INF)
    step = by_metric(drift.steps(rows))["headroom"][0]
    assert step.change == pytest.approx(-0.5)
    assert "(-50.0%)" in step.description


def test_noise_near_a_perfect_match_is_below_the_floor():
    # 1 - cosine goes 1e-7 -> 3e-7 (x3) and the relative difference 1e-7 -> 5e-7: both under 1e-5
    base = record("1.19.0", stats(2.0, "p"), metrics={"outputs": {}, "max_abs": 2.0, "headroom": None,
                                                       "cosine_min": 1 - 1e-7, "rel_diff_max": 1e-7})
    moved = record("1.20.0", stats(2.0, "q"), metrics={"outputs": {}, "max_abs": 2.0, "headroom": None,
                                                        "cosine_min": 1 - 3e-7, "rel_diff_max": 5e-7})
    rows = drift.rows([base, moved], NAN_OR_INF)
    assert rows[1].outputs_changed is True  # the bits moved, the numbers did not
    assert drift.steps(rows) == []


def test_the_floor_does_not_hide_a_real_cosine_or_relative_step():
    rows = drift.rows([compared("1.19.0", near(1e-2)), compared("1.20.0", near(1e-1))], NAN_OR_INF)
    assert 1 - rows[0].cosine_min > drift.ABS_FLOOR
    found = by_metric(drift.steps(rows))
    (cos,) = found["cosine_min"]
    assert cos.after < cos.before < 1
    assert cos.change == pytest.approx(((1 - cos.after) - (1 - cos.before)) / (1 - cos.before))
    assert cos.description.startswith("worst cosine ") and "1 - cosine" in cos.description
    assert cos.description.endswith("between 1.19.0 and 1.20.0")
    assert found["rel_diff_max"][0].change > 1


def test_a_step_away_from_a_match_within_the_floor_has_no_relative_size():
    rows = drift.rows([compared("1.19.0", near(1e-4)), compared("1.20.0", near(1e-1))], NAN_OR_INF)
    assert 1 - rows[0].cosine_min < drift.ABS_FLOOR  # the base is noise: no ratio to it means anything
    (cos,) = by_metric(drift.steps(rows))["cosine_min"]
    assert cos.change is None and cos.after < 0.999


def test_a_metric_that_turns_non_finite_is_a_step():
    nan = near(1e-4).copy()
    nan[2] = np.nan
    rows = drift.rows([compared("1.19.0", near(1e-4)), compared("1.20.0", nan),
                       compared("1.21.0", np.full_like(REFERENCE, np.nan))], NAN_OR_INF)
    assert rows[1].rel_diff_max is None and rows[1].cosine_min == -1.0  # a NaN row is as far as a row can be
    assert rows[2].max_abs is None  # no finite value at all
    found = by_metric(drift.steps(rows))
    (rel,) = found["rel_diff_max"]
    assert (rel.from_version, rel.to_version, rel.after, rel.change) == ("1.19.0", "1.20.0", None, None)
    assert rel.description.startswith("max rel diff ") and " -> none between 1.19.0 and 1.20.0" in rel.description
    assert [(s.to_version, s.after) for s in found["max_abs"]] == [("1.21.0", None)]
    assert [(s.before, s.after, s.to_version) for s in found["verdict"]] == [("good", "bad", "1.20.0")]


def test_a_stored_non_finite_number_is_none():
    rec = record("1.20.0", stats(1.0), metrics={"outputs": {}, "max_abs": float("inf"), "headroom": float("nan")})
    (row,) = drift.rows([rec], NAN_OR_INF)
    assert (row.max_abs, row.headroom) == (None, None)


def test_a_verdict_change_is_a_step_even_where_no_number_moves():
    rows = drift.rows([record("1.19.0", stats(1.0, "a")), record("1.20.0", stats(1.0, "b", nan_rows=2))],
                      NAN_OR_INF)
    (step,) = drift.steps(rows)
    assert (step.metric, step.before, step.after, step.change) == ("verdict", "good", "bad", None)
    assert step.description == "verdict good -> bad between 1.19.0 and 1.20.0"


def test_numbers_are_compared_across_a_release_that_did_not_run():
    rows = drift.rows([headroom_record("1.19.0", 0.4), record("1.20.0", status="crash"),
                       headroom_record("1.21.0", 0.8)], NAN_OR_INF)
    found = by_metric(drift.steps(rows))
    assert [(s.from_version, s.to_version) for s in found["headroom"]] == [("1.19.0", "1.21.0")]
    assert [(s.before, s.after) for s in found["verdict"]] == [("good", "crash"), ("crash", "good")]


@pytest.mark.parametrize("threshold", [0, -0.1, math.nan, math.inf, True])
def test_a_threshold_must_be_a_finite_number_above_zero(threshold):
    with pytest.raises(ValueError):
        drift.steps([], threshold)


def test_the_document_is_plain_json():
    rows = drift.rows([headroom_record("1.19.0", 0.5), headroom_record("1.20.0", 0.9)], NAN_OR_INF)
    doc = drift.document("r", 0.01, rows, drift.steps(rows), None)
    again = json.loads(json.dumps(doc, allow_nan=False))
    assert again["rows"][0] == {"version": "1.19.0", "status": "ran", "verdict": "good", "why": rows[0].why,
                                "max_abs": 0.5 * FP16_MAX, "headroom": 0.5, "cosine_min": None,
                                "rel_diff_max": None, "outputs_changed": None, "margin": None, "margin_tensor": None,
                                "margin_past": False, "latency": None, "latency_low": None, "latency_high": None}
    assert {s["metric"] for s in again["steps"]} == {"headroom", "max_abs"}
    assert set(again["steps"][0]) == {"metric", "from", "to", "before", "after", "change", "description"}


# -- the command ---------------------------------------------------------------------------

def make_run(root, records, run_id="tiny-x86_64-0123456789", predicate="nan-or-inf") -> RunStore:
    store = RunStore.open(root, run_id, {"arch": "x86_64", "backend": "uv", "python": "3.11"},
                          {"predicate": predicate}, ["test"])
    for rec in records:
        store.append(rec)
    return store


DRIFTING = [headroom_record("1.19.0", 0.713, "s"), headroom_record("1.19.2", 0.713, "s"),
            headroom_record("1.20.0", 0.936, "t"), record("1.20.1", status="crash"),
            record("1.21.0", stats(None, "u", nan_rows=4))]


@pytest.fixture
def results(tmp_path, monkeypatch):
    from harness.commands import common

    # the console's width is fixed when it is made (at import, maybe by another test of this process)
    monkeypatch.setattr(common.out, "width", 200)
    return tmp_path / "results"


def is_svg(path) -> bool:
    return ET.parse(path).getroot().tag == "{http://www.w3.org/2000/svg}svg"


def test_drift_shows_the_rows_the_steps_and_writes_the_chart(results):
    store = make_run(results, DRIFTING)
    r = inproc.run("drift", store.run_id, "--results-dir", results)
    assert r.returncode == 0, r.stderr
    for heading in ("release", "verdict", "max |x|", "headroom", "worst cosine", "max rel diff", "outputs changed"):
        assert heading in r.stdout
    lines = r.stdout.splitlines()
    row = next(x for x in lines if x.strip("│ ").startswith("1.20.0 "))
    assert "0.936" in row and "yes" in row
    assert "headroom 0.713 -> 0.936 (+31.3%) between 1.19.2 and 1.20.0" in r.stdout
    assert "verdict good -> crash between 1.20.0 and 1.20.1" in r.stdout
    assert "verdict crash -> bad between 1.20.1 and 1.21.0" in r.stdout
    assert "max |x| 61312 -> none between 1.20.0 and 1.21.0" in r.stdout
    chart = store.dir / "drift.svg"
    assert f"chart: {chart}" in r.stdout
    assert is_svg(chart)


def test_drift_takes_a_run_directory_and_says_when_nothing_stepped(results):
    store = make_run(results, [headroom_record(v, 0.5, "s") for v in ("1.19.0", "1.19.2", "1.20.0")])
    r = inproc.run("drift", store.dir)  # a path: no --results-dir needed
    assert r.returncode == 0, r.stderr
    assert "no step above 1% between 3 probed releases" in r.stdout
    assert is_svg(store.dir / "drift.svg")


def test_drift_json_holds_rows_steps_and_the_chart(results, tmp_path):
    store = make_run(results, DRIFTING)
    chart = tmp_path / "elsewhere.png"
    r = inproc.run("drift", store.run_id, "--results-dir", results, "--threshold", "0.5", "--chart", chart, "--json")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["run_id"], doc["threshold"], doc["chart"]) == (store.run_id, 0.5, str(chart))
    assert [x["version"] for x in doc["rows"]] == ["1.19.0", "1.19.2", "1.20.0", "1.20.1", "1.21.0"]
    assert [x["outputs_changed"] for x in doc["rows"]] == [None, False, True, None, True]
    # +31% is under 50%: only the verdicts and the numbers that went non-finite remain
    assert [(s["metric"], s["from"], s["to"]) for s in doc["steps"]] == [
        ("verdict", "1.20.0", "1.20.1"), ("verdict", "1.20.1", "1.21.0"), ("max_abs", "1.20.0", "1.21.0"),
        ("headroom", "1.20.0", "1.21.0")]
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not (store.dir / "drift.svg").exists()  # --chart replaces the default, it does not add to it


def test_drift_of_a_run_with_a_reference_draws_the_cosine(results):
    store = make_run(results, [compared("1.19.0", near(1e-4)), compared("1.20.0", REFERENCE.copy()),
                               compared("1.21.0", near(3e-2))])
    r = inproc.run("drift", store.run_id, "--results-dir", results, "--json")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert doc["rows"][1]["cosine_min"] == pytest.approx(1.0)
    assert {s["metric"] for s in doc["steps"]} >= {"cosine_min", "rel_diff_max"}
    svg = (store.dir / "drift.svg").read_text()
    assert is_svg(store.dir / "drift.svg") and "1 - worst cosine" in svg


@pytest.mark.parametrize("args, message", [
    (["no-such-run"], "no-such-run: no run there"),
    (["RUN", "--threshold", "0"], "--threshold"),
    (["RUN", "--threshold", "-1"], "--threshold"),
    (["RUN", "--threshold", "nan"], "--threshold"),
    (["RUN", "--threshold", "abc"], "--threshold"),
    (["RUN", "--chart", "{tmp}/drift.pdf"], "--chart {tmp}/drift.pdf: give a file ending in .svg or .png"),
    (["RUN", "--chart", "{tmp}/missing/drift.svg"], "--chart {tmp}/missing/drift.svg: no directory {tmp}/missing"),
    (["RUN", "--chart", "{tmp}/a-dir.svg"], "--chart {tmp}/a-dir.svg: is a directory"),
])
def test_drift_refuses_bad_input_in_one_line(results, tmp_path, args, message):
    store = make_run(results, DRIFTING)
    (tmp_path / "a-dir.svg").mkdir()
    message = message.replace("{tmp}", str(tmp_path))
    argv = [a.replace("RUN", store.run_id).replace("{tmp}", str(tmp_path)) for a in args]
    before = inproc.snapshot(results)
    r = inproc.run("drift", *argv, "--results-dir", results)
    assert r.returncode == 2
    assert len(r.lines) == 1 and r.lines[0].startswith("error: ") and message in r.lines[0], r.stderr
    assert inproc.snapshot(results) == before  # no chart written


def test_drift_refuses_a_run_without_probes_of_its_own(results):
    empty = make_run(results, [], run_id="empty-run")
    triage_only = make_run(results, [record("1.20.0", stats(), series="fp32-island")], run_id="triage-run")
    for store in (empty, triage_only):
        r = inproc.run("drift", store.run_id, "--results-dir", results, "--json")
        assert r.returncode == 2
        assert r.json() == {"error": f"{store.run_id}: no probes of the run's own search recorded; nothing to follow",
                            "exit_status": 2}
        assert not (store.dir / "drift.svg").exists()


def test_drift_refuses_an_empty_run_name_and_a_damaged_manifest(results, monkeypatch):
    store = make_run(results, DRIFTING)
    monkeypatch.chdir(store.dir)  # "" must not be taken for the current directory, a run
    r = inproc.run("drift", "", "--results-dir", results)
    said = "error: : no run there (give a results/<run-id> directory or a run id in --results-dir)"
    assert r.returncode == 2 and r.lines == [said], r.stderr
    (store.dir / "manifest.json").write_text("{")
    r = inproc.run("drift", store.dir)
    assert r.returncode == 2 and len(r.lines) == 1 and "unreadable manifest.json" in r.lines[0], r.stderr
    assert not (store.dir / "drift.svg").exists()


def test_drift_stops_at_a_line_of_the_run_that_is_not_a_record(results):
    store = make_run(results, DRIFTING[:2])
    with open(store.dir / "probes.jsonl", "a") as f:
        f.write("not json\n")
    r = inproc.run("drift", store.dir)
    assert r.returncode == 1  # the store's rule: a record that cannot be read is not skipped
    assert len(r.lines) == 1 and "line 3" in r.lines[0] and "--quarantine" in r.lines[0], r.stderr


def test_drift_refuses_a_run_whose_question_it_does_not_know(results):
    """The question is the run document's (cells/KEY.json): one whose predicate bisect does not read is refused,
    naming it, rather than answering another question in its place."""
    store = make_run(results, DRIFTING)
    (store.dir / "cells").mkdir()
    (store.dir / "cells" / "k.json").write_text(json.dumps({
        "run_id": store.run_id, "status": "found", "mode": "regression", "releases": ["1.19.0", "1.21.0"],
        "probes": [], "predicate": "sometimes", "cell": {"key": "k"}}))
    r = inproc.run("drift", store.run_id, "--results-dir", results)
    assert r.returncode == 2 and len(r.lines) == 1, r.stderr
    assert r.lines[0].startswith(f"error: {store.run_id}: cells/k.json: ") and "'sometimes'" in r.lines[0]
    assert "--question KEY" in r.lines[0]
