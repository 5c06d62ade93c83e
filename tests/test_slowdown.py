"""Slowdowns and memory growth as regressions: `--bad-if slower>R` and `rss>R`, judged from interleaved rounds
against a baseline release with a distribution-free interval; *inconclusive* is stepped around like skip.

The statistics and the search over them run on stored rounds and a replay runner; the worker's timed runs, the
two live workers and the pinning run real releases."""

from __future__ import annotations

import json

import builders
import numpy as np
import pytest
from replay import ReplayRunner, ran, releases

from harness.driver import Driver
from harness.errors import UsageError
from harness.metrics import median_interval, timing_summary
from harness.probe import ProbeJob, TimingJob
from harness.results.evidence import EvidenceError, ProbeRecord
from harness.results.store import RunStore
from harness.search import bisect_step
from harness.verdicts import judge, parse_predicate


def timed_record(ratio: float, rounds: int = 8, spread: float = 0.02, rss: tuple[float, float] | None = None,
                 seed: int = 0) -> dict:
    """A probe record whose rounds ran the candidate `ratio` times slower than the baseline (10 ms)."""
    rng = np.random.default_rng(seed)
    doc = []
    for _ in range(rounds):
        base = list(0.010 * rng.lognormal(0, spread, 5))
        doc.append({"baseline_s": base, "candidate_s": [x * ratio * rng.lognormal(0, spread) for x in base],
                    "baseline_rss_mb": rss[0] if rss else None, "candidate_rss_mb": rss[1] if rss else None})
    out = {"name": "y", "dtype": "float32", "shape": [2, 2], "sha256": "x", "rows": 2, "nan_rows": 0, "inf_rows": 0,
           "zero_rows": 0, "nan": 0, "inf": 0, "max_abs": 1.0, "min": 0.0, "max": 1.0}
    return {"version": "1.2", "status": "ran", "result": {"stage": "done", "outputs": [out]},
            "timing": {"baseline": "1.0", "rounds": doc, "threads": 1, "pinned_cpu": 1, "warmup": 3,
                       "fresh_processes": rss is not None, "budget_s": 60.0, "stopped": "decided", "seconds": 1.0}}


def test_the_sign_test_interval_needs_six_rounds_at_95_percent_and_narrows_with_more():
    assert median_interval([1.0, 1.1, 1.2, 1.3, 1.4]) is None  # 2/32 = 6.25% outside: too few
    low, high, coverage = median_interval([1.3, 1.0, 1.2, 1.1, 1.5, 1.4])
    assert (low, high) == (1.0, 1.5) and coverage == pytest.approx(1 - 2 / 64)
    xs = [float(i) for i in range(20)]
    low, high, coverage = median_interval(xs)
    assert (low, high) == (5.0, 14.0) and coverage >= 0.95  # the 6th smallest and largest of 20
    # the interval covers the true median at least as often as it says (samples of a known median)
    rng = np.random.default_rng(1)
    covered = sum(lo <= 1.0 <= hi for lo, hi, _ in (median_interval(list(rng.lognormal(0, 0.3, 9))) for _ in range(400)))
    assert covered / 400 >= 0.94


@pytest.mark.parametrize("ratio, verdict", [(1.40, "bad"), (1.00, "good"), (1.15, "inconclusive")])
def test_a_timed_probe_is_bad_or_good_only_when_the_whole_interval_is_past_or_below_the_bound(ratio, verdict):
    judged = judge(timed_record(ratio), parse_predicate("slower>1.15"))
    assert judged["verdict"] == verdict, judged["why"]
    t = judged["metrics"]["timing"]
    assert t["ratio"] == pytest.approx(ratio, rel=0.05) and t["rounds"] == 8 and t["runs"] == 40
    assert t["low"] <= t["ratio"] <= t["high"]
    assert "the baseline's of 1.0" in judged["why"] and "8 rounds, 40 runs" in judged["why"]


def test_the_same_rounds_are_judged_again_under_another_bound_without_probing():
    rec = timed_record(1.30)
    assert judge(rec, parse_predicate("slower>1.15"))["verdict"] == "bad"
    assert judge(rec, parse_predicate("slower>1.5"))["verdict"] == "good"
    assert judge({**rec, "timing": {**rec["timing"], "rounds": rec["timing"]["rounds"][:5]}},
                 parse_predicate("slower>1.15"))["verdict"] == "inconclusive"  # five rounds give no 95% interval


def test_memory_is_judged_from_rounds_in_fresh_processes_only():
    grown = timed_record(1.0, rss=(400.0, 560.0))
    assert judge(grown, parse_predicate("rss>1.3"))["verdict"] == "bad"
    assert judge(grown, parse_predicate("rss>1.5"))["verdict"] == "good"
    j = judge(timed_record(1.0), parse_predicate("rss>1.3"))  # served workers: no peak per round
    assert j["verdict"] == "error" and "no peak memory measured" in j["why"]
    assert judge(grown, parse_predicate("slower>1.15,rss>1.3"))["decided_by"] == ["rss>1.3"]


def test_rounds_that_cannot_be_read_are_left_out_not_guessed():
    rec = timed_record(1.3)
    rounds = rec["timing"]["rounds"]
    hostile = [*rounds, {"baseline_s": ["1"], "candidate_s": [0.1]}, {"baseline_s": [float("nan")], "candidate_s": [1]},
               {"baseline_s": [-1.0], "candidate_s": [1.0]}, {"baseline_s": [True], "candidate_s": [1.0]}, "x",
               {"baseline_s": [1e-3] * 30000, "candidate_s": [1.0]}]
    t = timing_summary({**rec["timing"], "rounds": hostile})
    assert t["rounds"] == len(rounds) and t["runs"] == 40
    assert timing_summary({"rounds": "no"}) is None and timing_summary(None) is None


def test_a_record_whose_timing_has_the_wrong_type_is_refused_where_it_is_read():
    rec = timed_record(1.3)
    ProbeRecord.parse(rec)
    with pytest.raises(EvidenceError, match="timing.rounds"):
        ProbeRecord.parse({**rec, "timing": {**rec["timing"], "rounds": "many"}})


def test_inconclusive_is_stepped_around_like_skip():
    step = bisect_step(["good", None, "inconclusive", None, "bad"])
    assert step.next in ((1,), (3,))
    done = bisect_step(["good", "good", "inconclusive", "bad", "bad"])
    assert (done.status, done.lo, done.hi, done.untestable) == ("found", 1, 3, (2,))


@pytest.mark.parametrize("text, said", [
    ("slower", "needs a bound"), ("slower<1.1", "bad above its bound"), ("rss", "needs a bound"),
])
def test_a_timed_predicate_needs_its_bound_above(text, said):
    with pytest.raises(UsageError, match=said):
        parse_predicate(text)


def search(tmp_path, latency: dict[str, float], bad_if: str, budget: float = 30.0, rss=None, mode="regression",
           exist_ok: bool = False):
    versions = sorted(latency, key=lambda v: tuple(map(int, v.split("."))))
    runner = ReplayRunner({v: ran() for v in versions}, latency=latency, rss=rss)
    baseline = releases(versions[-1] if mode == "fix" else versions[0])[0]
    pred = parse_predicate(bad_if)
    timing = TimingJob(baseline, pred.timed, budget_s=budget,
                       fresh_processes=rss is not None, min_rounds=6, max_rounds=40)
    (tmp_path / "run").mkdir(exist_ok=exist_ok)
    store = RunStore(tmp_path / "run")
    driver = Driver(runner, releases(*versions), store, ProbeJob(tmp_path / "m.onnx", tmp_path / "b.npz", timing=timing),
                    pred, jobs=4)
    return driver, driver.run(mode=mode), runner, store


def test_a_bisection_over_latency_finds_the_release_that_got_slower(tmp_path):
    latency = {f"1.{i}": (0.010 if i < 5 else 0.013) for i in range(9)}  # 1.3x from 1.5 on
    driver, out, runner, store = search(tmp_path, latency, "slower>1.15")
    assert driver.jobs == 1  # two workers pinned to one CPU, in turn: one probe at a time
    assert (out.step.status, out.releases[out.step.lo].version, out.releases[out.step.hi].version) == ("found", "1.4", "1.5")
    recs = [json.loads(x) for x in (store.dir / "probes.jsonl").read_text().splitlines()]
    assert all(r["timing"]["baseline"] == "1.0" and len(r["timing"]["rounds"]) >= 6 for r in recs)
    # baseline and candidate alternate inside each probe, the order turning every round
    assert runner.calls[1:5] in (["1.0", "1.0", "1.0", "1.0"],)  # the baseline's own probe: 1.0 against 1.0
    first_other = next(i for i, v in enumerate(runner.calls) if v != "1.0")
    assert runner.calls[first_other:first_other + 5] == ["1.8", "1.0", "1.8", "1.8", "1.0"]


def test_a_timed_search_measures_again_what_an_untimed_one_probed_and_reuses_its_own(tmp_path):
    """Probes made without timed rounds (a plain sweep over the same run) hold no latency: a slowdown question
    measures those releases again, against its baseline, and the newest records are the timed ones."""
    latency = {f"1.{i}": (0.010 if i < 5 else 0.013) for i in range(9)}
    (tmp_path / "run").mkdir()
    plain = Driver(ReplayRunner({v: ran() for v in latency}), releases(*latency), RunStore(tmp_path / "run"),
                   ProbeJob(tmp_path / "m.onnx", tmp_path / "b.npz"), parse_predicate("nan-or-inf"))
    assert len(plain.run(sweep=True).probed_now) == 9
    driver, out, runner, store = search(tmp_path, latency, "slower>1.15", exist_ok=True)
    assert out.step.status == "found", out.step  # the untimed records reused would judge no release slower
    assert (out.releases[out.step.lo].version, out.releases[out.step.hi].version) == ("1.4", "1.5")
    assert out.probed_now and all(out.records[v]["timing"]["baseline"] == "1.0" for v in out.probed_now)
    again = Driver(runner, releases(*latency), store, driver.job, driver.predicate).run()
    assert again.probed_now == [] and again.step.status == "found"


def test_a_release_that_straddles_the_bound_is_inconclusive_and_stepped_around(tmp_path):
    latency = {"1.0": 0.010, "1.1": 0.010, "1.2": 0.0115, "1.3": 0.014, "1.4": 0.014}
    _, out, _, _ = search(tmp_path, latency, "slower>1.15", budget=0.0)  # no time to re-measure it
    assert out.records["1.2"]["verdict"] == "inconclusive"
    assert out.step.status == "found" and out.step.untestable == (2,)
    assert [out.releases[i].version for i in (out.step.lo, out.step.hi)] == ["1.1", "1.3"]


def replayed_probes(tmp_path, ratio: float, bound: float, probes: int) -> list[str]:
    """The verdicts of `probes` timed probes of a release `ratio` times as slow as its baseline under `slower>bound`,
    on latencies replayed with a loaded machine's noise: the rounds as a probe runs them (timed_rounds: six at
    least, then more until decided, at most 60; no clock involved), judged as a run judges them."""
    from harness.probe import timed_rounds
    from harness.verdicts import judge

    runner = ReplayRunner({"1.0": ran(), "1.1": ran()}, latency={"1.0": 0.010, "1.1": 0.010 * ratio}, noise=0.05,
                          load=0.3)
    base, cand = releases("1.0", "1.1")
    pred = parse_predicate(f"slower>{bound}")
    job = ProbeJob(tmp_path / "m.onnx", tmp_path / "b.npz",
                   timing=TimingJob(base, pred.timed, budget_s=float("inf"), runs_min=5, max_rounds=60))
    env = runner.prepare(cand)
    verdicts = []
    for _ in range(probes):
        doc = timed_rounds(runner, cand, env, job, {"model": str(job.model)}, tmp_path)
        verdicts.append(judge({"version": "1.1", "status": "ran", "result": ran().result, "timing": doc}, pred)["verdict"])
    return verdicts


@pytest.mark.parametrize("bound", [1.05, 1.15, 1.5])
def test_a_release_against_itself_under_load_is_called_slower_no_more_often_than_the_interval_allows(tmp_path, bound):
    """The statistics' false-alarm rate, on replayed latencies (no timing: the machine's own load cannot move it):
    a release timed against an identical one, with a neighbour on the CPU a third of the time, is called slower
    in at most 2.5% of probes (the share of a 95% interval's misses on its one side), however near 1 the bound;
    and most of its probes are called good, not left inconclusive."""
    verdicts = replayed_probes(tmp_path, 1.0, bound, probes=200)
    assert verdicts.count("bad") <= 0.025 * len(verdicts), verdicts
    assert verdicts.count("good") >= 0.5 * len(verdicts), verdicts


def test_a_slowdown_made_by_construction_is_called_slower_under_load_every_time(tmp_path):
    """The other side: three times the work per run is called slower in every probe under the same load."""
    verdicts = replayed_probes(tmp_path, 3.0, 2.0, probes=100)
    assert set(verdicts) == {"bad"}, verdicts


def test_memory_growth_is_found_from_fresh_processes(tmp_path):
    latency = {f"1.{i}": 0.010 for i in range(5)}
    rss = {"1.0": 300.0, "1.1": 302.0, "1.2": 450.0, "1.3": 455.0, "1.4": 460.0}
    _, out, _, store = search(tmp_path, latency, "rss>1.3", rss=rss)
    assert [out.releases[i].version for i in (out.step.lo, out.step.hi)] == ["1.1", "1.2"]
    assert out.records["1.2"]["metrics"]["timing"]["rss_ratio"] == pytest.approx(1.5, rel=0.02)


def test_the_fix_mode_baseline_is_the_good_end(tmp_path):
    latency = {"1.0": 0.020, "1.1": 0.020, "1.2": 0.010, "1.3": 0.010}
    _, out, _, store = search(tmp_path, latency, "slower>1.15", mode="fix")
    assert [out.releases[i].version for i in (out.step.lo, out.step.hi)] == ["1.1", "1.2"]
    assert {json.loads(x)["timing"]["baseline"] for x in (store.dir / "probes.jsonl").read_text().splitlines()} == {"1.3"}


# --- real releases --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("timed")
    builders.save(builders.residual_norm_model(), d / "norm.onnx")
    np.savez(d / "norm.npz", **builders.residual_norm_inputs())
    return d


def timed_request(files, **extra) -> dict:
    return {"model": str(files / "norm.onnx"), "inputs": str(files / "norm.npz"), "outputs": [],
            "session_options": {"intra_op_num_threads": 1}, "memory_limit_mb": None, "outputs_path": None,
            "timing": {"warmup": 2, "seconds": 0.05, "runs_min": 4, "runs_max": 50, "pin_cpu": 0}, **extra}


@pytest.mark.release
def test_the_worker_times_warm_runs_pinned_and_warms_a_new_session_only(env, files, tmp_path):
    from harness.runners.workers import reusing_workers

    runner, e = env
    with reusing_workers(keep=False):
        first = runner.run(e, timed_request(files, serve_again="baseline"), tmp_path / "a", 120)
        again = runner.run(e, timed_request(files, serve_again="baseline"), tmp_path / "b", 120)
        other = runner.run(e, timed_request(files, serve_again="candidate"), tmp_path / "c", 120)
        fresh = [runner.run(e, timed_request(files, fresh_process=True), tmp_path / f"f{i}", 120) for i in range(2)]
    for o in (first, again, other, *fresh):
        assert o.returncode == 0, o.stderr_tail
        assert 4 <= len(o.result["timing"]["latencies_s"]) <= 50 and all(x > 0 for x in o.result["timing"]["latencies_s"])
        assert o.result["timing"]["threads"] == 1 and o.result["pinned_cpu"] == 0
    # kept between requests of one side in a pool that keeps none; the other side is a worker of its own
    assert (first.result.get("served"), again.result.get("served"), other.result.get("served")) == (None, 1, None)
    assert (first.result["timing"]["warmup"], again.result["timing"]["warmup"]) == (2, 0)  # warm already
    assert all("served" not in o.result for o in fresh)  # a new process each: its peak memory is its own


@pytest.mark.release
def test_an_a_a_run_over_real_releases_flags_nothing_and_keeps_every_latency(bisect, files, tmp_path):
    r = bisect("run", "--model", str(files / "norm.onnx"), "--inputs", str(files / "norm.npz"), "--from", "1.19.2",
               "--to", "1.20.0", "--bad-if", "slower>1.5", "--time-budget", "10", "--json", results=tmp_path / "res")
    assert r.returncode == 3, r.stderr  # both ends good: nothing to find
    doc = r.json()
    assert doc["status"] == "endpoints_agree" and {p["verdict"] for p in doc["probes"]} == {"good"}, doc["message"]
    runs = {}
    for p in doc["probes"]:
        t = p["metrics"]["timing"]
        assert t["baseline"] == "1.19.2" and t["low"] <= t["ratio"] <= t["high"] < 1.5 and t["runs"] >= 18
        runs[p["version"]] = t["runs"]
    recs = [json.loads(x) for x in (tmp_path / "res" / doc["run_id"] / "probes.jsonl").read_text().splitlines()]
    assert {r["version"] for r in recs} == {"1.19.2", "1.20.0"}
    for rec in recs:  # one intra-op thread unless --threads says otherwise, said in the record
        assert rec["timing"]["threads"] == 1 and rec["result"]["session_options"]["intra_op_num_threads"] == 1
        assert sum(len(x["candidate_s"]) for x in rec["timing"]["rounds"]) == runs[rec["version"]]


def test_a_timed_question_refuses_parallel_probes(bisect, files):
    r = bisect("run", "--model", str(files / "norm.onnx"), "--inputs", str(files / "norm.npz"), "--from", "1.19.2",
               "--to", "1.20.0", "--bad-if", "slower>1.2", "-j", "2")
    assert r.returncode == 2 and "measures one probe at a time" in r.stderr and "Traceback" not in r.stderr


# --- where the time went --------------------------------------------------------------------------------------

def test_the_profiles_of_a_pair_are_lined_up_per_op_type_and_node_largest_increase_first():
    from harness.explain.profile import lined_up, sentence

    old = {"n1": ("LRN", 5000.0), "n2": ("Conv", 18000.0), "n3": ("Relu", 100.0)}
    new = {"n1": ("LRN", 17000.0), "n2": ("Conv", 17700.0), "n4": ("Cast", 50.0)}
    doc = {"old": "1.20.1", "new": "1.21.0", **lined_up(old, new)}
    assert [r["op"] for r in doc["ops"]] == ["LRN", "Cast", "Relu", "Conv"]
    assert doc["ops"][0]["ratio"] == pytest.approx(3.4) and doc["ops"][1]["ratio"] is None  # only in the new one
    assert [r["node"] for r in doc["nodes"]][:1] == ["n1"] and doc["nodes"][0]["op"] == "LRN"
    assert "LRN took 5.00 -> 17.00 ms (3.40x)" in sentence(doc)


def test_a_hostile_profile_document_is_read_as_what_it_may_hold(tmp_path):
    from harness.explain.profile import nodes_of, read

    (tmp_path / "profile.json").write_text(json.dumps({
        "old": "1.0", "new": "1.1", "old_total_us": 1.0, "new_total_us": 2.0, "message": "x" * 10000,
        "ops": [{"op": "<script>", "old_us": 1, "new_us": 2, "change_us": 1}, {"op": 3}, "no"],
        "nodes": [{"node": "n", "old_us": "1", "new_us": 2, "change_us": 1}]}))
    doc = read(tmp_path)
    assert [r["op"] for r in doc["ops"]] == ["<script>"] and doc["nodes"] == [] and len(doc["message"]) == 500
    (tmp_path / "profile.json").write_text("[" * 100000)
    assert read(tmp_path) is None
    rec = {"result": {"profile": {"nodes": [["a", "Conv", "CPU", 10.0], ["b", "X", "CPU", float("nan")], ["c"], 5]}}}
    assert nodes_of(rec) == {"a": ("Conv", 10.0)}


@pytest.mark.release
def test_the_worker_profiles_warm_runs_per_node_and_leaves_no_profile_file(env, files, tmp_path):
    runner, e = env
    prefix = tmp_path / "prof" / "onnxruntime"
    prefix.parent.mkdir()
    out = runner.run(e, timed_request(files, profile_prefix=str(prefix)), tmp_path / "w", 120)
    assert out.returncode == 0, out.stderr_tail
    prof = out.result["profile"]
    n_runs = len(out.result["timing"]["latencies_s"]) + out.result["timing"]["warmup"] + 1
    assert prof["runs"] == n_runs and prof["node_count"] == len(prof["nodes"]) > 0
    ops = {op for _, op, _, _ in prof["nodes"]}
    assert "Add" in ops or "SimplifiedLayerNormalization" in ops, ops
    assert list(prefix.parent.iterdir()) == []  # summed up by the worker, then removed


def test_the_nightly_follows_latency_as_the_ratio_to_its_baseline_and_names_only_steps_outside_the_noise():
    from types import SimpleNamespace

    from harness.report.overview import cost_of, cost_steps

    recs = {"1.0": timed_record(1.0, seed=1), "1.1": timed_record(1.02, seed=2), "1.2": timed_record(1.5, seed=3),
            "1.3": timed_record(1.52, seed=4)}
    for v, rec in recs.items():
        rec["result"]["peak_rss_mb"] = {"1.0": 300.0, "1.1": 301.0, "1.2": 302.0, "1.3": 420.0}[v]
    row = SimpleNamespace(margins={v: cost_of(r) for v, r in recs.items()})
    assert row.margins["1.2"]["latency_ratio"] == pytest.approx(1.5, rel=0.03)
    assert row.margins["1.2"]["latency_ms"] == pytest.approx(15.0, rel=0.05)
    assert [(a, b) for a, b, _ in cost_steps(row, "latency_ratio")] == [("1.1", "1.2")]  # 1.5 vs 1.52: one level
    assert [(a, b) for a, b, _ in cost_steps(row, "rss_mb")] == [("1.2", "1.3")]
    noisy = SimpleNamespace(margins={**row.margins, "1.2": {**row.margins["1.2"], "latency_low": 0.9}})
    assert cost_steps(noisy, "latency_ratio") == []  # intervals that overlap make no step
    assert cost_of({"status": "ran", "result": {"peak_rss_mb": "lots"}}) == {}


def test_a_slowdown_outside_the_kernels_is_said_so():
    from harness.explain.profile import lined_up, sentence

    same = {"n1": ("Add", 3.0), "n2": ("Mul", 3.0)}
    doc = {"old": "1.19.2", "new": "1.20.0", **lined_up(same, same), "run_us": {"1.19.2": 4.9, "1.20.0": 6.2}}
    assert sentence(doc).endswith("a run took 4.9 us -> 6.2 us: most of the increase is outside the kernels "
                                  "(the session's own work per run).")
    assert "outside" not in sentence({**doc, "run_us": {}})


@pytest.mark.release
def test_a_real_slowdown_is_found_profiled_reported_and_reproduced_by_the_script(bisect, tmp_path, fresh_python):
    """A model slower by construction on the releases whose norm gives NaN (a Loop spins 3000 times instead of
    50: measured 33x, 1.19.2 -> 1.20.0) against a bound of 2: an effect the interleaved rounds separate on a
    loaded machine too (a 1.25x effect against 1.1 turned inconclusive there). Found, profiled to the Loop, said
    in the report, and the repro script agrees when timed against 1.19.2."""
    from harness.report.repro import SCRIPT

    model = builders.save(builders.slowed_by_nan_model(), tmp_path / "slowed.onnx")
    np.savez(tmp_path / "norm.npz", **builders.residual_norm_inputs())
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model), "--inputs", str(tmp_path / "norm.npz"), "--from", "1.19.2", "--to",
               "1.20.0", "--bad-if", "slower>2", "--time-budget", "20", "--json", results=results)
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0"), doc["message"]
    assert doc["profile"]["ops"][0]["op"] == "Loop" and "Loop took" in doc["profile"]["message"], doc["profile"]
    run_dir = results / doc["run_id"]
    rep = bisect("report", str(run_dir), "--cache-dir", str(bisect.cache_dir))
    assert rep.returncode == 0, rep.stderr
    md = (run_dir / "report.md").read_text()
    assert "### Where the time went" in md and "latency x baseline (95% interval)" in md
    assert "python repro.py --baseline good/bin/python --full" in md
    script = run_dir / SCRIPT
    bad = builders.run_script(fresh_python("1.20.0"), script, "--baseline", str(fresh_python("1.19.2")), "--full")
    assert bad.returncode == 1 and "against 1.19.2: bad (latency" in bad.stdout, bad.stdout + bad.stderr
    same = builders.run_script(fresh_python("1.19.2"), script, "--baseline", str(fresh_python("1.19.2")), "--full")
    assert same.returncode == 0 and ": good (latency" in same.stdout, same.stdout + same.stderr
    alone = builders.run_script(fresh_python("1.20.0"), script, "--full")
    assert alone.returncode == 2 and "--baseline PYTHON" in alone.stderr


def test_a_baseline_that_does_not_run_is_no_verdict_and_says_why(tmp_path):
    from replay import error

    latency = {"1.0": 0.010, "1.1": 0.010, "1.2": 0.013}
    versions = list(latency)
    runner = ReplayRunner({"1.0": error("ValueError: opset 25 is not supported"), "1.1": ran(), "1.2": ran()},
                          latency=latency)
    (tmp_path / "run").mkdir()
    timing = TimingJob(releases("1.0")[0], parse_predicate("slower>1.15").timed, budget_s=5)
    driver = Driver(runner, releases(*versions), RunStore(tmp_path / "run"),
                    ProbeJob(tmp_path / "m.onnx", tmp_path / "b.npz", timing=timing), parse_predicate("slower>1.15"))
    out = driver.run()
    rec = out.records["1.2"]
    assert rec["verdict"] == "error", rec["why"]
    assert rec["why"].startswith("no latency measured against the baseline: the baseline (1.0) stopped running: "
                                 "ValueError: opset 25 is not supported")


def test_drift_names_a_latency_step_only_where_the_intervals_part():
    from harness.report import drift

    recs = []
    for i, (v, ratio) in enumerate((("1.0", 1.0), ("1.1", 1.03), ("1.2", 1.45), ("1.3", 1.47))):
        recs.append({**timed_record(ratio, seed=i), "version": v, "finished": f"2026-01-01T00:00:0{i}Z"})
    made = drift.rows(recs, parse_predicate("slower>1.15"))
    assert [r.latency for r in made] == pytest.approx([1.0, 1.03, 1.45, 1.47], rel=0.03)
    latency = [s for s in drift.steps(made) if s.metric == "latency"]
    assert [(s.from_version, s.to_version) for s in latency] == [("1.1", "1.2")]
    assert latency[0].description.startswith("latency x baseline 1.0") and "between 1.1 and 1.2" in latency[0].description
    assert drift.document("r", 0.01, made, latency, None)["rows"][2]["latency_low"] > 1.3
