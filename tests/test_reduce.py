"""The reduction's search helpers (pure), and reductions of real models on real releases."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.search import ddmin
from harness.triage.reduce import bad_rows, first_true, last_true, take_rows


@given(st.integers(1, 40), st.data())
@settings(max_examples=200, deadline=None)
def test_ddmin_finds_a_one_minimal_failing_subset(n, data):
    culprits = data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=min(3, n)))
    calls = []

    def fails(subset):
        calls.append(subset)
        return culprits <= set(subset)  # fails when every culprit is in

    found = ddmin(list(range(n)), fails)
    assert set(found) == culprits  # 1-minimal: here exactly the culprits
    assert len(calls) <= 4 * len(culprits) * max(1, n).bit_length() ** 2 + 4


def test_ddmin_single_culprit_takes_about_log2_steps():
    calls = []
    found = ddmin(list(range(64)), lambda s: calls.append(s) or 37 in s)
    assert found == [37] and len(calls) <= 2 * 6


@pytest.mark.parametrize("n, boundary", [(n, b) for n in (1, 2, 3, 8, 13) for b in range(n)])
def test_first_and_last_true_bisect(n, boundary):
    assert first_true(0, n - 1, lambda i: i >= boundary) == boundary
    assert last_true(0, n - 1, lambda i: i <= boundary) == boundary


def test_take_rows_trims_padding_to_the_longest_kept_row():
    ids = np.arange(4 * 6).reshape(4, 6)
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]])
    cut = take_rows({"input_ids": ids, "attention_mask": mask, "scale": np.ones(4)}, [1, 2])
    assert cut["attention_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert cut["input_ids"].tolist() == [ids[1, :3].tolist(), ids[2, :3].tolist()]
    assert cut["scale"].shape == (2,)


def test_bad_rows_counts_a_row_once_across_outputs():
    a = np.zeros((5, 3), np.float16)
    b = np.zeros((5,), np.float32)
    a[1, 0] = np.nan
    a[3, 2] = np.inf
    b[1] = np.nan
    b[4] = -np.inf
    assert bad_rows({"a": a, "b": b}) == [1, 3, 4]
    assert bad_rows({"a": a, "b": b}, ["a"]) == [1, 3]
    assert bad_rows({"ids": np.zeros((5, 3), np.int64)}) == []


# --- real releases -------------------------------------------------------------------------------

import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

import builders  # noqa: E402
from builders import run_script  # noqa: E402

from harness.vocabulary import default_cache_dir  # noqa: E402

KB64 = 64 << 10


def no_machine_paths(text: str, *paths: Path) -> list[str]:
    """Absolute paths of this machine found in a report: home, cache, results, temp, any /root or /tmp."""
    found = [str(p) for p in (Path.home(), default_cache_dir(), *paths) if str(p) in text]
    return found + re.findall(r"(?<![\w.+/])/(?:root|tmp|home)/[\w./-]+", text)


@pytest.mark.release
def test_fused_x86_reduces_to_a_few_nodes_and_the_report_travels(bisect, tmp_path, fresh_python):
    results = tmp_path / "results"
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.2", "--to", "1.20.0", "--reduce", "--json",
               results=results)
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert doc["commits"]["last_good"] and doc["commits"]["first_bad"]
    assert doc["commits"]["last_good"] != doc["commits"]["first_bad"]
    red = doc["reduced"]
    assert red["verified"] == {"verdicts": {"1.19.2": "good", "1.20.0": "bad"}, "flips": True}
    assert red["nodes"]["after"] <= 10 and red["rows"]["after"] == 1
    assert "/model/norm/SimplifiedLayerNormalization" in red["nodes"]["kept"]
    run_dir = results / doc["run_id"]
    assert (run_dir / "reduced" / "model.onnx").stat().st_size + (run_dir / "reduced" / "inputs.npz").stat().st_size < KB64

    rep = bisect("report", doc["run_id"], "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir),
                 "--no-probe")
    assert rep.returncode == 0, rep.stderr
    script = (run_dir / "repro.py").read_text()
    as_json = bisect("report", doc["run_id"], "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir),
                     "--no-probe", "--format", "json").stdout
    for text in (rep.stdout, script, as_json):
        assert no_machine_paths(text, results, bisect.cache_dir) == []
    assert f"{red['nodes']['after']} of the model's {red['nodes']['before']} nodes" in rep.stdout
    assert f"compare/{doc['commits']['last_good']}...{doc['commits']['first_bad']}" in rep.stdout

    model = next(Path(bisect.cache_dir, "models", "gemma-tiny-fused").glob("model.onnx"))
    for version, verdict, rc in (("1.19.2", "good", 0), ("1.20.0", "bad", 1)):
        python = fresh_python(version)
        out = run_script(python, run_dir / "repro.py")
        assert (out.returncode, out.stdout.split(":")[1].split()[0]) == (rc, verdict), out.stdout + out.stderr
        assert "reduced model" in out.stdout
        full = run_script(python, run_dir / "repro.py", "--full", str(model))
        assert full.returncode == rc, full.stdout + full.stderr
        assert "full model" in full.stdout

    # triage on the reduced repro, which says so
    opts = bisect("options", "--reduced", str(run_dir), "--version", "1.20.0", "--levels", "all,disable", "--modes",
                  "sequential", "--threads", "1", "--cache-dir", str(bisect.cache_dir), "--results-dir", str(results),
                  "--json")
    assert opts.returncode == 0, opts.stderr
    assert opts.json()["reduced_repro"].startswith(f"on the reduced repro of {doc['run_id']}: {red['nodes']['after']} of")
    assert {c["verdict"] for c in opts.json()["combos"]} == {"bad"}
    sweep = bisect("sweep", "--reduced", str(run_dir), "--from", "1.19.2", "--to", "1.20.0", "--json", results=results)
    assert sweep.returncode == 0, sweep.stderr
    assert [p["verdict"] for p in sweep.json()["probes"]] == ["good", "bad"] and sweep.json()["reduced_repro"]


@pytest.mark.release
def test_a_500_node_model_with_external_data_reduces_below_64_kb(bisect, tmp_path, fresh_python):
    d = tmp_path / "model"
    d.mkdir()
    model = builders.save(builders.residual_stack_model(), d / "model.onnx", external=True)
    np.savez(d / "batch.npz", **builders.residual_stack_inputs())
    assert len(builders.residual_stack_model().graph.node) >= 500 and (d / "model.onnx_data").exists()
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model), "--inputs", str(d / "batch.npz"), "--from", "1.19.2", "--to", "1.20.0",
               "--reduce", "--json", results=results)
    assert r.returncode == 0, r.stderr
    red = r.json()["reduced"]
    assert red["verified"]["flips"] and red["nodes"]["after"] < 20
    assert red["model"]["bytes"] + red["inputs"]["bytes"] < KB64
    run_dir = results / r.json()["run_id"]
    # the reduction starts from the run's own probes of the whole model and batch (6 rows): none made again
    made = [json.loads(x) for x in (run_dir / "reduced" / "probes.jsonl").read_text().splitlines()]
    assert made and all(o["rows"] < 6 for rec in made for o in (rec.get("result") or {}).get("outputs", []))
    rep = bisect("report", r.json()["run_id"], "--results-dir", str(results), "--no-probe", "--format", "json",
                 "--cache-dir", str(bisect.cache_dir))
    assert rep.returncode == 0, rep.stderr
    assert json.loads(rep.stdout)["repro"]["reduced"]["nodes"] == red["nodes"]["after"]
    # the full model is a file with external data beside it: the repro loads it by path
    for version, rc in (("1.19.2", 0), ("1.20.0", 1)):
        python = fresh_python(version)
        assert run_script(python, run_dir / "repro.py").returncode == rc
        full = run_script(python, run_dir / "repro.py", "--full", str(model))
        assert full.returncode == rc, full.stdout + full.stderr


@pytest.mark.release
@pytest.mark.qemu
def test_aarch64_reduction_mitigation_and_their_repro_under_qemu(bisect, tmp_path):
    """One emulated bisection serves the reduction and the mitigation: `mitigate` on the same model, batch and
    target finds the run `run --reduce` made and reuses its probes."""
    from harness.releases.versions import Release, Target
    from harness.runners import make_runner
    from harness.runners.provision import qemu as qp
    from harness.runners.provision.sysroot import sysroot_python

    d = tmp_path / "model"
    d.mkdir()
    model = builders.save(builders.residual_overflow_model(), d / "model.onnx", external=True)
    np.savez(d / "batch.npz", **builders.residual_norm_inputs())
    results = tmp_path / "results"
    target = ("--from", "1.23.2", "--to", "1.24.1", "--arch", "aarch64", "--backend", "qemu", "--cpu", "neoverse-n1")
    r = bisect("run", "--model", str(model), "--inputs", str(d / "batch.npz"), *target, "--reduce", "--json",
               results=results)
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.23.2", "1.24.1")
    red = doc["reduced"]
    assert red["verified"]["flips"] and red["nodes"]["after"] <= 10 and red["rows"]["after"] == 1

    m = bisect("mitigate", "--model", str(model), "--inputs", str(d / "batch.npz"), *target, "--cache-dir",
               str(bisect.cache_dir), "--results-dir", str(results), "--json")
    assert m.returncode == 0, m.stderr
    mit = m.json()
    assert mit["run_id"] == doc["run_id"]  # the same run: its two probes were not made again
    assert mit["boundary"]["first_bad"] == "1.24.1" and mit["all_clean"]
    assert [row["original"] for row in mit["releases"]] == ["good", "bad"]
    assert [row["patched"] for row in mit["releases"]] == ["good", "good"]
    assert {"/model/layers.1/Add", "/model/scale/Mul"} <= set(mit["island"])
    assert "converted to fp32" in mit["reference"]["how"]
    assert mit["worst_max_abs"] == 0.0 or mit["worst_max_abs"] < 1e-3

    # --no-probe: the newest release under emulation adds minutes; the x86 report tests probe it
    rep = bisect("report", doc["run_id"], "--results-dir", str(results), "--no-probe", "--cache-dir",
                 str(bisect.cache_dir))
    assert rep.returncode == 0, rep.stderr
    md = rep.stdout
    assert "neoverse-n1" in md.split("### To reproduce")[1].split("###")[0]
    assert "| CPU model | neoverse-n1" in md
    assert "asimdhp" in md.split("| CPU flags |")[1].splitlines()[0]
    assert "QEMU" in md and "first bad: **1.24.1**" in md and "### Workaround" in md
    assert "MODEL_B64 = \"\"\"" in md  # the reduced model is embedded in the script
    # the emitted script, as written, under QEMU user mode with each release's aarch64 wheels: the reduced
    # repro on both releases, and the full model (external data, by path) on the bad one. (Its good verdict
    # is the bisection's own probe above; --full on both releases is test_a_500_node_model_with_external_data's.)
    runner = make_runner("qemu", Target("aarch64", "3.11"), bisect.cache_dir, "neoverse-n1")
    runner.provision()
    script = results / doc["run_id"] / "repro.py"
    for version, rc in (("1.23.2", 0), ("1.24.1", 1)):
        site = runner.prepare(Release(version, [f"onnxruntime-{version}-cp311-cp311-manylinux_2_27_aarch64.whl"]))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "QEMU_"))}
        env["PYTHONPATH"] = str(site.path / "site")
        for args in ((), ("--full", str(model))) if rc else ((),):
            argv = qp.qemu_command(runner.qemu, runner.sysroot, "neoverse-n1",
                                   [sysroot_python(runner.sysroot), str(script), *args])
            out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
            assert out.returncode == rc, (version, args, out.stdout, out.stderr)


# --- a recurrent state whose batch is axis 1, with If subgraphs (silero-vad's shape) -------------------------


def _recurrent_run(bisect, tmp_path, rows: int, big: tuple[int, ...]):
    d = tmp_path / "made"
    d.mkdir()
    model = builders.save(builders.recurrent_state_model(), d / "recurrent.onnx")
    np.savez(d / "batch.npz", **builders.recurrent_state_inputs(rows, big=big))
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model), "--inputs", str(d / "batch.npz"), "--from", "1.19.2", "--to", "1.20.0",
               "--json", results=results)
    assert r.returncode == 0, r.stderr
    assert (r.json()["last_good"], r.json()["first_bad"]) == ("1.19.2", "1.20.0")
    return results, r.json()["run_id"]


@pytest.mark.release
def test_a_state_input_whose_batch_is_axis_1_is_cut_along_that_axis(bisect, tmp_path):
    results, run_id = _recurrent_run(bisect, tmp_path, 8, (5,))
    red = bisect("reduce", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--json")
    assert red.returncode == 0, red.stderr
    doc = red.json()
    assert doc["verified"]["flips"] and doc["reduced"] is True
    assert doc["rows"] == {"before": 8, "after": 1, "kept": [5], "axes": {"input": 0, "state": 1, "sr": None}}
    # a line per probe made, with the time elapsed; in a step with a bound (the bad row alone), an ETA of it
    lines = re.findall(r"^probe +\d+(?: of at most \d+)?: .*\((.*)\)$", red.stderr, re.M)
    assert len(lines) == doc["probes"]["made"] and all(" s elapsed" in how for how in lines), red.stderr
    assert re.search(r"^probe +1 of at most 2: .*; about \d+ s left for the bad rows alone\)$", red.stderr, re.M), \
        red.stderr
    reduced = results / run_id / "reduced"
    with np.load(reduced / "inputs.npz") as kept:
        shapes = {k: kept[k].shape for k in kept.files}
    if doc["model"]["file"] is None:  # the whole graph: the batch itself, one row of each input along its axis
        assert shapes == {"input": (1, 8), "state": (2, 1, 8), "sr": ()}
    else:  # a cut: what it is fed is of the one row
        assert all(s[0] == 1 for s in shapes.values() if s), shapes


@pytest.mark.release
def test_reduce_says_it_reduced_nothing_and_why_with_its_own_exit_status(bisect, tmp_path):
    results, run_id = _recurrent_run(bisect, tmp_path, 1, (0,))
    red = bisect("reduce", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--rows-only")
    assert red.returncode == 4, red.stdout + red.stderr
    assert "nothing reduced" in red.stdout and "verified" not in red.stdout, red.stdout
    assert "the batch has one row" in red.stdout and "--rows-only" in red.stdout, red.stdout
    doc = json.loads((results / run_id / "reduced" / "reduce.json").read_text())
    assert doc["reduced"] is False and doc["verified"]["flips"]
    assert doc["not_reduced"] == {"rows": "the batch has one row", "nodes": "only rows were asked (--rows-only)"}


# --- cuts fed what they read; candidates no release judged said rejected -------------------------------------


@pytest.mark.release
def test_a_cut_that_leaves_the_attention_mask_unused_is_fed_without_it(bisect, tmp_path, fresh_python):
    """A BERT-shaped encoder whose embeddings' norm flips (builders.masked_encoder_model): the cuts that flip read
    input_ids alone. Fed the whole batch, onnxruntime refused each of them on both releases ("Invalid input name:
    attention_mask") and the reduction stopped at the first node reading both inputs (6 nodes); fed what it
    reads, a cut reaches the two nodes that flip, and the reduced repro keeps only what they read."""
    d = tmp_path / "model"
    d.mkdir()
    model = builders.save(builders.masked_encoder_model(), d / "encoder.onnx")
    np.savez(d / "batch.npz", **builders.masked_encoder_inputs())
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model), "--inputs", str(d / "batch.npz"), "--from", "1.19.2", "--to", "1.20.0",
               "--json", results=results)
    assert r.returncode == 0, r.stderr
    assert (r.json()["last_good"], r.json()["first_bad"]) == ("1.19.2", "1.20.0")
    run_id = r.json()["run_id"]
    red = bisect("reduce", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--json")
    assert red.returncode == 0, red.stderr
    doc = red.json()
    assert doc["verified"]["flips"] and doc["rows"]["kept"] == [2]
    assert doc["nodes"]["kept"] == ["/embeddings/Add_1", "/embeddings/norm/SimplifiedLayerNormalization"]
    assert doc["positions"] == {"before": 4, "after": 1}
    assert "Invalid input name" not in red.stderr and doc["candidates"]["rejected"] == 0, red.stderr
    with np.load(results / run_id / "reduced" / "inputs.npz") as kept:
        assert sorted(kept.files) == sorted(doc["model"]["inputs"]) and "attention_mask" not in kept.files
    # the report's repro.py runs that reduced model on its inputs: good on the last good release, bad on the first bad
    rep = bisect("report", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--no-probe")
    assert rep.returncode == 0, rep.stderr
    for version, rc in (("1.19.2", 0), ("1.20.0", 1)):
        out = run_script(fresh_python(version), results / run_id / "repro.py")
        assert out.returncode == rc and "reduced model" in out.stdout, out.stdout + out.stderr


@pytest.mark.release
def test_candidates_no_release_judges_are_said_rejected_and_counted(bisect, tmp_path, cache_dir):
    """The onnx package's own backend test of an fp16 Attention written out op by op: its outputs change bits at
    1.29.0 (measured against 1.28.0: 0.000488). Its inputs' dims are fixed at 2 rows, so the one-row batches the
    rows' delta debugging tries do not run on either release: those candidates are said rejected, never as an
    error of the release, and counted in the summary and reduce.json. A capture is said as one, not judged. The
    cut that flips reads two of Q, K and V: fed all three it was refused, and the reduction stopped at 3 nodes."""
    model_dir = builders.real_package(cache_dir, "onnx") / "onnx/backend/test/data/node/test_attention_4d_fp16_expanded"
    batch = builders.pb_batch(model_dir, tmp_path / "batch.npz")
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model_dir / "model.onnx"), "--inputs", str(batch), "--from", "1.28.0", "--to",
               "1.29.0", "--bad-if", "abs-diff>0", "--reference-release", "1.28.0", "--json", results=results)
    assert r.returncode == 0, r.stderr
    assert (r.json()["last_good"], r.json()["first_bad"]) == ("1.28.0", "1.29.0")
    run_id = r.json()["run_id"]
    red = bisect("reduce", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir))
    assert red.returncode == 0, red.stdout + red.stderr
    said = " ".join(red.stderr.split())  # a long line wraps at the console's width
    refused = re.findall(r"onnxruntime (1\.2[89]\.0) +candidate rejected: it does not run on \1 \(InvalidArgument", said)
    assert sorted(refused) == ["1.28.0", "1.28.0", "1.29.0", "1.29.0"], red.stderr
    assert not re.search(r"onnxruntime 1\.2[89]\.0 +error", said), red.stderr
    assert "captured the values a cut is fed" in said and "no comparison with the reference" not in said, red.stderr
    doc = json.loads((results / run_id / "reduced" / "reduce.json").read_text())
    tried = doc["candidates"]
    assert tried["rejected"] == 2 and tried["tried"] > 2 and [w["count"] for w in tried["reasons"]] == [2]
    assert tried["reasons"][0]["why"].startswith("it does not run on either release (InvalidArgument")
    assert f"{tried['tried']} candidates tried, 2 rejected" in red.stdout, red.stdout
    assert doc["verified"]["flips"] and doc["nodes"]["after"] == 2


def test_what_a_rejected_candidate_s_probes_say():
    from harness.triage.reduce import candidates_tried, probe_said, rejected_why

    def rec(version, status, verdict, why, stage=None, **tag):
        return {"version": version, "status": status, "verdict": verdict, "why": why,
                "result": {"stage": stage} if stage else None, **(tag or {"candidate": "c1"})}

    loads_not = [rec(v, "error", "error", "Fail: no kernel (at session)", "session") for v in ("1.19.2", "1.20.0")]
    assert rejected_why(loads_not) == "it does not load on either release (Fail: no kernel)"
    assert probe_said(loads_not[1]) == "candidate rejected: it does not load on 1.20.0 (Fail: no kernel)"
    one = [rec("1.19.2", "ran", "good", "0 NaN rows"), rec("1.20.0", "crash", "crash", "worker killed by SIGSEGV")]
    assert rejected_why(one) == "it crashes the worker on 1.20.0 (worker killed by SIGSEGV)"
    unjudged = rec("1.20.0", "ran", "error", "no comparison with the reference")
    assert probe_said(unjudged) == "candidate rejected: it cannot be judged on 1.20.0 (no comparison with the reference)"
    assert rejected_why([rec("1.19.2", "ran", "good", "x"), rec("1.20.0", "ran", "bad", "y")]) is None
    # a capture is judged by nothing: it ran, or the cuts it feeds are rejected
    assert probe_said(rec("1.19.2", "ran", "error", "no comparison", capture="k")) == "captured the values a cut is fed"
    assert probe_said(rec("1.19.2", "error", "bad", "Fail: x (at run)", "run", capture="k")) == \
        "candidate rejected: its inner tensors cannot be captured (the model exposing them does not run on 1.19.2: Fail: x)"
    # a probe of no candidate (a search's) keeps its verdict
    assert probe_said({"version": "1.20.0", "status": "error", "verdict": "error", "why": "x"}) is None
    assert candidates_tried({"a": None, "b": "w1", "c": "w2", "d": "w1"}) == {
        "tried": 4, "rejected": 3, "reasons": [{"why": "w1", "count": 2}, {"why": "w2", "count": 1}]}
