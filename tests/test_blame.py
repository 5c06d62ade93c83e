"""`bisect blame`: below a release pair, the graph transformer, the kernel and the commits."""

from __future__ import annotations

import json
import re

import builders
import numpy as np
import pytest

from harness.blame import session_log
from harness.blame.kernels import Kernel, sentence
from harness.blame.transformers import minimal_set

# --- the session log ---------------------------------------------------------------------------

LOG = """\
2026-12-03 14:34:21.1 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer ConstantSharing modified: 0 with status: OK
2026-12-03 14:34:21.2 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer ReshapeFusion modified: 0 with status: OK
\x1b[1;31m2026-12-03 14:34:21.3 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer ConstantSharing modified: 1 with status: OK\x1b[m
2026-12-03 14:34:21.4 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer $(touch pwned) modified: 1 with status: OK
2026-12-03 14:34:21.5 [I:onnxruntime:, graph_transformer.cc:15 Apply] GraphTransformer QDQFinalCleanupTransformer modified: 0 with status: FAIL
2026-12-03 14:34:21.6 [V:onnxruntime:, session_state.cc:1260 VerifyEachNodeIsAssignedToAnEp] Node placements
2026-12-03 14:34:21.7 [V:onnxruntime:, session_state.cc:1263 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [CUDAExecutionProvider]. Number of nodes: 2
  Add (/model/layers.0/Add)
  MatMul (/model/layers.0/MatMul)

2026-12-03 14:34:21.8 [V:onnxruntime:, session_state.cc:1263 VerifyEachNodeIsAssignedToAnEp]  Node(s) placed on [CPUExecutionProvider]. Number of nodes: 1
  Shape (/model/Shape)
2026-12-03 14:34:21.9 [V:onnxruntime:, session_state.cc:144 CreateGraphInfo] SaveMLValueNameIndexMapping
  Gather (/model/not-a-placement)
"""


def test_the_session_log_names_what_ran_what_changed_the_graph_and_where_each_node_went():
    log = session_log.parse(LOG)
    assert log.ran == ["ConstantSharing", "ReshapeFusion", "QDQFinalCleanupTransformer"]
    assert log.modified == ["ConstantSharing"]  # modified once of its two passes; a non-identifier is no name
    assert log.failed == ["QDQFinalCleanupTransformer"]
    assert log.placements == {"/model/layers.0/Add": "CUDAExecutionProvider",
                              "/model/layers.0/MatMul": "CUDAExecutionProvider", "/model/Shape": "CPUExecutionProvider"}
    assert log.node_counts == {"CUDAExecutionProvider": 2, "CPUExecutionProvider": 1}
    assert log.provider_of("/model/not-a-placement") is None and log.all_on is None
    one = session_log.parse("x [V:onnxruntime:, s.cc:1 V]  All nodes placed on [CPUExecutionProvider]. Number of nodes: 653")
    assert one.all_on == "CPUExecutionProvider" and one.provider_of("anything") == "CPUExecutionProvider"


def test_a_session_log_past_its_limit_is_read_to_the_limit_and_said(tmp_path):
    path = tmp_path / "session.log"
    line = "t t [I:onnxruntime:, g.cc:1 A] GraphTransformer ConstantFolding modified: 1 with status: OK\n"
    path.write_text(line + "x" * (session_log.LOG_LIMIT + 10))
    log = session_log.read(path)
    assert log.truncated and log.modified == ["ConstantFolding"]
    assert session_log.read(tmp_path / "absent.log") is None


# --- which transformers: delta debugging over disabled_optimizers ------------------------------------


def asked_counting(culprits):
    asked = []

    def flips(names):
        asked.append(frozenset(names))
        return culprits(set(names))

    return asked, flips


def test_the_fewest_transformers_that_flip_are_found_and_no_set_is_asked_twice():
    modified = ["A", "B", "C", "D", "E", "F", "G", "H"]
    asked, flips = asked_counting(lambda s: {"B", "G"} <= s)
    found = minimal_set(modified, modified, [], flips)
    assert found.flips and sorted(found.transformers) == ["B", "G"]
    assert len(asked) == len(set(asked)) == found.tried
    assert [s.over for s in found.stages] == ["changed the graph"]


def test_a_transformer_that_changed_nothing_before_the_load_failed_is_found_among_those_that_ran():
    asked, flips = asked_counting(lambda s: "SimplifiedLayerNormFusion" in s)
    found = minimal_set(["ConstantFolding", "ReshapeFusion"], ["ConstantFolding", "SimplifiedLayerNormFusion", "X"],
                        [], flips)
    assert found.transformers == ["SimplifiedLayerNormFusion"]
    assert [(s.over, s.flipped) for s in found.stages] == [("changed the graph", False), ("ran", True)]


def test_a_rule_based_transformer_is_searched_down_to_its_rewrite_rule():
    asked, flips = asked_counting(lambda s: bool({"Level1_RuleBasedTransformer", "GemmTransposeFusion"} & s))
    found = minimal_set(["ConstantFolding", "Level1_RuleBasedTransformer"], [],
                        ["EliminateIdentity", "GemmTransposeFusion", "ConvBNFusion"], flips)
    assert found.transformers == ["GemmTransposeFusion"]
    assert found.stages[-1].over == "rules of Level1_RuleBasedTransformer" and found.stages[-1].flipped


def test_a_rewrite_rule_that_its_rule_based_transformers_name_does_not_reach_is_found_by_its_own():
    # 1.29.0: disabling Level1_RuleBasedTransformer leaves GemmTransposeFusion running
    asked, flips = asked_counting(lambda s: "GemmTransposeFusion" in s)
    found = minimal_set(["Level1_RuleBasedTransformer", "ConstantFolding"], [],
                        ["EliminateIdentity", "GemmSumFusion", "GemmTransposeFusion"], flips)
    assert found.transformers == ["GemmTransposeFusion"]
    assert found.stages[0].names == ["Level1_RuleBasedTransformer", "EliminateIdentity", "GemmSumFusion",
                                     "GemmTransposeFusion", "ConstantFolding"]


def test_when_no_set_flips_none_is_named_and_both_stages_are_said():
    asked, flips = asked_counting(lambda s: False)
    found = minimal_set(["A"], ["A", "B"], ["EliminateIdentity"], flips)
    assert found.transformers is None and not found.flips
    assert [(s.over, s.flipped) for s in found.stages] == [("changed the graph", False), ("ran", False)]
    assert len(asked) == 2


def test_the_kernel_sentence_says_how_the_node_ran_on_each_release():
    bad = Kernel("/model/layers.4/Add_1", "Add", "ai.onnx", "CPUExecutionProvider", "fp16", "/model/layers.4/Add_1",
                 ("fp16", "fp16"), ("fp16",), 0)
    good = Kernel("/model/layers.4/Add_1", "Add", "ai.onnx", "CPUExecutionProvider", "fp32-island",
                  "/model/layers.4/Add_1", ("fp32", "fp32"), ("fp32",), 2)
    assert sentence("1.23.2", good, "1.24.1", bad) == (
        "in 1.24.1, `/model/layers.4/Add_1` runs as an fp16 Add on the CPU provider; in 1.23.2 it ran in fp32 "
        "between inserted Casts, as Add")
    fused = Kernel("/n/Mul", "SimplifiedLayerNormalization", "ai.onnx", "CPUExecutionProvider", "fp32",
                   "/n/Mul/SimplifiedLayerNormFusion/", ("fp32",), ("fp32",), 0)
    assert "fused into `/n/Mul/SimplifiedLayerNormFusion/`" in sentence("1", fused, "2", bad)
    assert sentence("1", bad, "2", bad).endswith(", as in 1")


# --- real releases -----------------------------------------------------------------------------------


def blame_store_records(run_dir):
    return [json.loads(line) for line in (run_dir / "blame" / "probes.jsonl").read_text().splitlines()]


@pytest.mark.release
def test_a_load_error_of_a_fusion_is_blamed_on_the_transformers_onnxruntime_confirms(bisect, tmp_path):
    """1.22.1 -> 1.23.0, a model the test builds (the shape of PP-OCRv4's recognizer converted to fp16)."""
    d = tmp_path / "model"
    d.mkdir()
    model = builders.save(builders.shared_constant_norms_model(), d / "model.onnx")
    np.savez(d / "batch.npz", x=np.random.default_rng(0).random((2, 4, 16), dtype=np.float32))
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model), "--inputs", str(d / "batch.npz"), "--from", "1.22.1", "--to", "1.23.0",
               "--bad-if", "error", "--blame", "--json", results=results)
    assert r.returncode == 0, r.stderr
    doc = r.json()
    blame = doc["blame"]
    assert (blame["last_good"], blame["first_bad"]) == (blame["good"], blame["bad"]) == ("1.22.1", "1.23.0")
    assert blame["flips"] and len(blame["transformers"]) == 1
    assert blame["transformers"][0] in ("ConstantSharing", "SimplifiedLayerNormFusion")
    # B good with the set disabled, bad without: the probes that say so
    probes = {(p["version"], tuple(p["disabled"]), p["level"]): p["verdict"] for p in blame["probes"]}
    assert probes[("1.23.0", (), None)] == "bad" and probes[("1.23.0", tuple(blame["transformers"]), None)] == "good"
    assert probes[("1.22.1", (), None)] == "good"
    # the fusion the error names flips it alone too
    assert {"name": "SimplifiedLayerNormFusion", "flips": True} in blame["named_by_error"] + [
        {"name": blame["transformers"][0], "flips": True}]
    assert blame["on_last_good"]["verdict"] == "good" and blame["on_last_good"]["version"] == "1.22.1"
    assert "1.23.0" in blame["kernels"]["error"]  # a session that fails saves no optimized graph
    run_dir = results / doc["run_id"]
    recs = blame_store_records(run_dir)
    # what the worker was given is what the record says it disabled
    assert all(r["result"]["session_options"].get("disabled_optimizers", []) == r["disabled"] for r in recs)

    again = bisect("blame", doc["run_id"], "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--json")
    assert again.returncode == 0, again.stderr
    assert again.json()["probed_now"] == 0 and again.json()["transformers"] == blame["transformers"]
    assert len(blame_store_records(run_dir)) == len(recs)  # resumed: nothing probed twice


def laid_out_repo(root, tags: tuple[str, str], touching: str, source: str) -> dict:
    """A git repository laid out as onnxruntime's tree: tag tags[0], four commits (one of them changes `touching`,
    which holds `source`), tag tags[1]; one more change to `touching` before the first tag. The shas by role."""
    import os
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "dev", "GIT_AUTHOR_EMAIL": "dev@example.org", "GIT_COMMITTER_NAME": "dev",
           "GIT_COMMITTER_EMAIL": "dev@example.org"}

    def git(*args, date="2025-01-01T00:00:00"):
        out = subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                             env={**env, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        return out.stdout.strip()

    def commit(path, text, subject, date):
        f = root / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
        git("add", path, date=date)
        git("commit", "-q", "-m", subject, date=date)
        return git("rev-parse", "HEAD")

    root.mkdir()
    git("init", "-q", "-b", "main")
    shas = {"before": commit(touching, source + "// first\n", "Add it (#100)", "2025-01-02T00:00:00")}
    git("tag", tags[0])
    shas["other1"] = commit("README.md", "onnxruntime\n", "Docs (#101)", "2025-02-01T00:00:00")
    shas["suspect"] = commit(touching, source + "// changed\n", "Change it (#102)", "2025-02-02T00:00:00")
    shas["other2"] = commit("onnxruntime/core/mlas/lib/sgemm.cpp", "// mlas\n", "MLAS (#103)", "2025-02-03T00:00:00")
    shas["other3"] = commit("onnxruntime/core/providers/cpu/math/gemm.cc", "ONNX_CPU_OPERATOR_KERNEL(Gemm, 13, B, G);\n",
                            "Gemm kernel (#104)", "2025-02-04T00:00:00")
    git("tag", tags[1])
    return shas


@pytest.mark.release
def test_a_fix_is_blamed_on_the_rewrite_rule_it_fixed(bisect, tmp_path):
    """onnxruntime #32228 rebuilt: GemmTransposeFusion ignored `perm` until 1.30.0 (truth: numpy's x @ W)."""
    d = tmp_path / "model"
    d.mkdir()
    model, feeds, truth = builders.identity_transpose_gemm_model()
    builders.save(model, d / "model.onnx")
    np.savez(d / "x.npz", **feeds)
    np.savez(d / "truth.npz", **truth)
    repo = tmp_path / "onnxruntime"
    shas = laid_out_repo(repo, ("v1.29.0", "v1.30.0"), "onnxruntime/core/optimizer/gemm_transpose_fusion.h",
                         'GemmTransposeFusion() noexcept : RewriteRule("GemmTransposeFusion") {}\n')
    r = bisect("run", "--mode", "fix", "--model", str(d / "model.onnx"), "--inputs", str(d / "x.npz"),
               "--reference", str(d / "truth.npz"), "--bad-if", "abs-diff>1e-3", "--from", "1.29.0", "--to", "1.30.0",
               "--blame", "--repo", str(repo), "--json", results=tmp_path / "results")
    assert r.returncode == 0, r.stderr
    doc = r.json()["blame"]
    assert (doc["mode"], doc["last_bad"], doc["first_good"]) == ("fix", "1.29.0", "1.30.0")
    assert doc["transformers"] == ["GemmTransposeFusion"] and doc["flips"]
    probes = {(p["version"], tuple(p["disabled"])): p["verdict"] for p in doc["probes"] if not p["level"]}
    assert probes[("1.29.0", ())] == "bad" and probes[("1.29.0", ("GemmTransposeFusion",))] == "good"
    assert doc["on_last_good"] == {**doc["on_last_good"], "version": "1.30.0", "verdict": "good"}
    rows = {row["node"]: row for row in doc["kernels"]["nodes"]}
    assert rows["t"]["bad"]["op_type"] == "Gemm" and rows["t"]["good"]["op_type"] == "Transpose"
    assert "ai.onnx:Transpose" in doc["kernels"]["graphs"]["gone"]
    # the builds' commits are not in this repository: its tags stand for them, and the range narrows to one
    c = doc["commits"]
    assert (c["good_from"], c["bad_from"], c["older"], c["newer"]) == ("tag v1.29.0", "tag v1.30.0", "1.29.0", "1.30.0")
    assert c["total"] == 4 and [x["sha"] for x in c["suspects"]] == [shas["suspect"]]
    assert c["suspects"][0]["pr"] == 102 and c["suspects"][0]["date"] == "2025-02-02"
    assert "1 of the 4 commits between 1.29.0 and 1.30.0" in doc["text"]
    # the report of the fix names it, and takes the blame of its very pair (last bad, first good)
    rep = bisect("report", r.json()["run_id"], "--results-dir", str(tmp_path / "results"), "--cache-dir",
                 str(bisect.cache_dir), "--no-probe")
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout.splitlines()[0].endswith("fixed in onnxruntime 1.30.0 (last bad 1.29.0)")
    assert "`GemmTransposeFusion`" in rep.stdout.split("### Below the release", 1)[1].split("###", 1)[0]


@pytest.mark.release
def test_a_kernel_change_is_no_transformers_fault_and_the_kernel_is_named(bisect, tmp_path):
    results = tmp_path / "results"
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.2", "--to", "1.20.0", "--json", results=results)
    assert r.returncode == 0, r.stderr
    b = bisect("blame", r.json()["run_id"], "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--json")
    assert b.returncode == 0, b.stderr
    doc = b.json()
    assert not doc["flips"] and doc["transformers"] is None and doc["on_last_good"] is None
    # a line per probe made, with the time elapsed; in a step with a bound (the look, the levels), an ETA of it
    lines = re.findall(r"^probe +\d+(?: of at most \d+)?: .*\((.*)\)$", b.stderr, re.M)
    assert len(lines) == doc["probed_now"] and all(" s elapsed" in how for how in lines), b.stderr
    assert re.search(r"^probe +1 of at most 2: .*; about \d+ s left for the look at both releases\)$", b.stderr,
                     re.M), b.stderr
    assert re.search(r"; about \d+ s left for the checks after\)$", b.stderr, re.M), b.stderr
    assert [s["flipped"] for s in doc["stages"]] == [False, False]
    assert doc["level"]["verdicts"]["disable"] == "bad" and doc["level"]["good_at"] is None
    rows = {row["node"]: row for row in doc["kernels"]["nodes"]}
    norm = rows["/model/norm/SimplifiedLayerNormalization"]
    assert norm["bad"]["precision"] == "fp16" and norm["bad"]["inputs"][0] == "fp16"
    assert norm["good"]["precision"] == "fp32-island" and norm["good"]["casts"] > 0
    assert norm["bad"]["provider"] == "CPUExecutionProvider"
    assert norm["sentence"] == ("in 1.20.0, `/model/norm/SimplifiedLayerNormalization` runs as an fp16 "
                                "SimplifiedLayerNormalization on the CPU provider; in 1.19.2 it ran in fp32 between "
                                "inserted Casts, as SimplifiedLayerNormalization")
    casts = doc["kernels"]["graphs"]["inserted_casts"]
    assert set(casts) == {"good", "bad"} and casts["good"] > 0
    assert "No set of graph transformers flips 1.20.0" in doc["text"]
    assert doc["session_logs"]["1.20.0"]["all_on"] == "CPUExecutionProvider"

    # with a clone: the kernel's registration located, the commits narrowed to the one that touches it
    repo = tmp_path / "onnxruntime"
    shas = laid_out_repo(repo, ("v1.19.2", "v1.20.0"), "onnxruntime/core/providers/cpu/nn/layer_norm.cc",
                         "ONNX_OPERATOR_TYPED_KERNEL_EX(\n    SimplifiedLayerNormalization, kOnnxDomain, 1, MLFloat16,\n"
                         "    kCpuExecutionProvider, KernelDefBuilder(), LayerNorm<true>);\n")
    b = bisect("blame", r.json()["run_id"], "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir),
               "--repo", str(repo), "--json")
    assert b.returncode == 0, b.stderr
    c = b.json()["commits"]
    assert b.json()["probed_now"] == 0  # the probes are the first blame's
    assert c["sources"] == {"kernel SimplifiedLayerNormalization (ai.onnx) on CPUExecutionProvider":
                            ["onnxruntime/core/providers/cpu/nn/layer_norm.cc"]}
    assert c["total"] == 4 and [x["sha"] for x in c["suspects"]] == [shas["suspect"]]

    run_id = r.json()["run_id"]
    report = ("report", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--no-probe")
    rep = bisect(*report)
    assert rep.returncode == 0, rep.stderr
    section = rep.stdout.split("### Below the release", 1)[1].split("###", 1)[0]
    assert norm["sentence"][1:] in section and "No set of graph transformers flips 1.20.0" in section
    assert "(1 of 4; suspects, not a verdict)" in section and f"`{shas['suspect'][:10]}` 2025-02-02 Change it" in section

    # blame.json is read back as untrusted: markup stays text, a value of the wrong shape is left out
    path = results / run_id / "blame" / "blame.json"
    hostile = {**doc, "text": "ok\n## Injected heading\n<img src=x onerror=alert(1)>",
               "commits": {"total": "many", "suspects": [{"sha": 1}]}}
    path.write_text(json.dumps(hostile))
    rep = bisect(*report)
    assert rep.returncode == 0, rep.stderr
    assert "\n## Injected heading" not in rep.stdout and not re.search(r"(?<!\\)<img", rep.stdout)
    assert "\\#\\# Injected heading" in rep.stdout  # shown, as text
    assert "Commits between the two builds" not in rep.stdout


@pytest.mark.release
def test_blame_refuses_a_run_with_no_boundary_and_a_repo_that_is_not_one(bisect, tmp_path):
    results = tmp_path / "results"
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.0", "--to", "1.19.2", "--json", results=results)
    assert r.returncode == 3, r.stderr
    run_id = r.json()["run_id"]
    b = bisect("blame", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir))
    assert b.returncode == 2 and "no last good and first bad release" in b.stderr
    assert not (results / run_id / "blame").exists()
    r2 = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.2", "--to", "1.20.0", "--json", results=results)
    b2 = bisect("blame", r2.json()["run_id"], "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir),
                "--repo", str(tmp_path))
    assert b2.returncode == 2 and "not a git repository" in b2.stderr
    assert not (results / r2.json()["run_id"] / "blame").exists()


@pytest.mark.release
@pytest.mark.qemu
def test_the_aarch64_residual_add_is_blamed_on_its_kernel_under_qemu(bisect, tmp_path, residual_overflow):
    model, batch = residual_overflow
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.23.2", "--to", "1.24.1",
               "--arch", "aarch64", "--backend", "qemu", "--cpu", "neoverse-n1", "--blame", "--json",
               results=tmp_path / "results")
    assert r.returncode == 0, r.stderr
    doc = r.json()["blame"]
    assert not doc["flips"] and doc["level"]["verdicts"]["disable"] == "bad"
    rows = {row["node"]: row for row in doc["kernels"]["nodes"]}
    add = rows["/model/layers.1/Add"]
    assert add["bad"]["precision"] == "fp16" and add["good"]["precision"] == "fp32-island"
    assert add["sentence"].startswith("in 1.24.1, `/model/layers.1/Add` runs as an fp16 Add on the CPU provider; "
                                      "in 1.23.2 it ran in fp32 between inserted Casts")


@pytest.mark.release
@pytest.mark.docker
def test_blame_in_containers_brings_the_optimized_graphs_and_logs_back(bisect, tmp_path):
    from harness.runners.docker.pool import engine_status

    ok, reason = engine_status()
    if not ok:
        pytest.skip(f"no docker engine: {reason}")
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.2", "--to", "1.20.0", "--backend", "docker",
               "--blame", "--json", results=tmp_path / "results")
    assert r.returncode == 0, r.stderr
    doc = r.json()["blame"]
    assert not doc["flips"] and doc["session_logs"]["1.20.0"]["all_on"] == "CPUExecutionProvider"
    assert "SimplifiedLayerNormFusion" in doc["session_logs"]["1.20.0"]["ran"]
    norm = {row["node"]: row for row in doc["kernels"]["nodes"]}["/model/norm/SimplifiedLayerNormalization"]
    assert (norm["good"]["precision"], norm["bad"]["precision"]) == ("fp32-island", "fp16")


def test_a_removed_node_is_said_to_be_removed_and_nodes_changed_alike_are_one_sentence_with_their_count():
    """residual_stack 1.19.2 -> 1.20.0 once read "`/model/layers.39/Add` runs removed (Add (fused into
    `/model/norm/SimplifiedLayerNormalization`))", one sentence per node, for three nodes alike, while the report
    named one suspect. A removed node is said to be removed; nodes that changed the same way are one sentence with
    their count, in the order given (the run's suspect first); a node that ran alike on both is in none."""
    from harness.blame.kernels import groups

    def k(node, precision, op="SimplifiedLayerNormalization", into=None):
        return Kernel(node, op, "ai.onnx", None if precision == "removed" else "CPUExecutionProvider", precision,
                      into or node, ("fp16",), ("fp16",), 0)

    removed = k("/model/layers.39/Identity", "removed", "Identity", "/model/norm/SimplifiedLayerNormalization")
    said = sentence("1.19.2", k("/model/layers.39/Identity", "fp32-island", "Identity"), "1.20.0", removed)
    assert said == ("in 1.20.0, `/model/layers.39/Identity` is removed by the optimizer (its output goes on to "
                    "`/model/norm/SimplifiedLayerNormalization`); in 1.19.2 it ran in fp32 between inserted Casts, "
                    "as Identity on the CPU provider")
    assert "runs removed" not in said and "fused into" not in said
    norms = ["/model/norm/SimplifiedLayerNormalization", "/model/layers.0/ln", "/model/layers.1/ln"]
    on_bad = {n: k(n, "fp16") for n in norms} | {"/model/layers.2/Add": k("/model/layers.2/Add", "fp32-island", "Add")}
    on_good = {n: k(n, "fp32-island") for n in norms} | {"/model/layers.2/Add": on_bad["/model/layers.2/Add"]}
    found = groups("1.19.2", on_good, "1.20.0", on_bad, [*norms, "/model/layers.2/Add"], shown=2)
    assert [g["nodes"] for g in found] == [norms]
    assert found[0]["sentence"] == (
        "in 1.20.0, 3 SimplifiedLayerNormalization nodes (`/model/norm/SimplifiedLayerNormalization`, "
        "`/model/layers.0/ln` and 1 more) run as an fp16 SimplifiedLayerNormalization on the CPU provider; in 1.19.2 "
        "they ran in fp32 between inserted Casts, as SimplifiedLayerNormalization")


@pytest.mark.release
def test_a_run_with_graph_optimizations_disabled_says_so_first_and_blame_searches_no_transformer(bisect, tmp_path,
                                                                                               residual_norm):
    """residual_norm under --graph-opt disable, 1.19.2 -> 1.20.0 (the norm's fp16 kernel is new in 1.20.0, at every
    level). The report's first lines never said the optimizer was off, and blame searched the transformers "that
    ran" (the passes every session applies, which `disabled_optimizers` does not reach) and the levels below
    `disable`. The title and the first sentence say it, the report says what the default options show (a run of
    them beside it), and blame says the transformer search does not apply, probing only the look."""
    model, batch = residual_norm
    results = tmp_path / "results"
    runs = {}
    for name, extra in (("disabled", ("--graph-opt", "disable")), ("defaults", ())):
        r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0", *extra,
                   "--json", results=results)
        assert r.returncode == 0, r.stderr
        runs[name] = r.json()
        assert (runs[name]["last_good"], runs[name]["first_bad"]) == ("1.19.2", "1.20.0")
    run_id = runs["disabled"]["run_id"]
    b = bisect("blame", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--json")
    assert b.returncode == 0, b.stderr  # the norm's kernel is named
    doc = b.json()
    assert doc["searched"] is False and doc["stages"] == [] and doc["level"] is None
    assert sorted((p["version"], p["look"]) for p in doc["probes"]) == [("1.19.2", True), ("1.20.0", True)]
    assert "disabling every one that changed its graph, then every one that ran" not in doc["text"]
    assert doc["text"].startswith("The run's session options disable graph optimizations (`graph_optimization_level` "
                                  "disable): no optimizing graph transformer runs on either release, so none is "
                                  "searched, and there is no lower level to try.")
    assert "`/model/norm/SimplifiedLayerNormalization` runs as an fp16 SimplifiedLayerNormalization" in doc["text"]
    rep = bisect("report", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--no-probe")
    assert rep.returncode == 0, rep.stderr
    lines = rep.stdout.splitlines()
    assert lines[0].endswith("(last good 1.19.2), graph optimizations disabled"), lines[0]
    bug = rep.stdout.split("### Describe the bug", 1)[1].split("###", 1)[0]
    assert "through the CPU execution provider with graph optimizations disabled (`--graph-opt disable`, " \
           "`ORT_DISABLE_ALL`), not onnxruntime's default options, gives" in bug
    assert f"With the default options (run `{runs['defaults']['run_id']}`) 1.19.2 is good and 1.20.0 is bad: the " \
           "defaults show it too." in bug
    assert "no optimizing graph transformer runs" in rep.stdout.split("### Below the release", 1)[1]
