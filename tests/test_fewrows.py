"""The fewest-rows search: rows longest first (or as a native pass ranks them), doubled while no row flips, the
boundary held to every row."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from harness.models import embedded, inputs
from harness.models.embedded import LOREM
from harness.models.embedded.generator import TRIGGER_WORD
from harness.plan import make_plan
from harness.request import SearchSpec
from harness.triage import rows as fewrows
from harness.triage import scout

pytestmark = pytest.mark.release


def test_rows_longest_first_and_groups_of_similar_length():
    mask = np.zeros((6, 10), np.int64)
    for row, n in enumerate([3, 10, 7, 3, 1, 6]):
        mask[row, :n] = 1
    arrays = {"input_ids": mask * 5, "attention_mask": mask}
    assert inputs.rows_by_length(arrays) == [1, 2, 5, 0, 3, 4]  # ties keep row order
    assert inputs.length_chunks(arrays) == [[1, 2], [5], [0, 3], [4]]  # 7 >= 2/3 of 10, 6 < 2/3 of 10 ...
    assert sorted(r for c in inputs.length_chunks(arrays) for r in c) == list(range(6))
    flat = {"x": np.ones((4, 3), np.float32)}  # no padding mask: one group, rows in order
    assert inputs.rows_by_length(flat) == [0, 1, 2, 3] and inputs.length_chunks(flat) == [[0, 1, 2, 3]]


def test_rows_past_the_ceiling_come_first_shortest_first_then_the_nearest():
    inf, nan = float("inf"), float("nan")
    peaks = [70000.0, 10.0, inf, 60000.0, nan, 60000.0]
    lengths = [100, 5, 300, 40, 50, 30]
    assert scout.order_rows(peaks, lengths) == [4, 0, 2, 5, 3, 1]


@pytest.mark.parametrize("model, onnx_types_all", [("gemma-tiny-decomposed", True), ("gemma-tiny-fused", False)])
def test_a_native_pass_of_the_scout_ranks_the_trigger_rows_first(cache_dir, tmp_path, model, onnx_types_all):
    # the decomposed variant's residual Adds are standard ops, typed fp16 by onnx; the fused variant's follow
    # onnxruntime's contrib ops, which onnx cannot type: a session's outputs tell
    spec = SearchSpec(model, "1.19.2", "1.19.2", cache_dir=cache_dir, results_dir=tmp_path / "res")
    plan = make_plan(spec)
    arrays = inputs.load_npz(plan.job.inputs)
    found = scout.host_order(plan, inputs.length_chunks(arrays), lambda rows: fewrows.subset_batch(plan, arrays, rows),
                             lambda msg: None)
    assert found["on"]["version"] == "1.19.2" and found["on"]["tensors"] > 0
    assert (found["on"]["typed_by_a_session"] == 0) == onnx_types_all
    tokenizer = embedded.build_tokenizer()
    trigger = {r for r, ids in enumerate(arrays["input_ids"]) if tokenizer.token_to_id(TRIGGER_WORD) in ids}
    assert len(trigger) == 7
    # the residual stream passes 65504 in the trigger rows alone (finite in x86's fp32 island, or Inf once in fp16)
    assert {r for r, p in enumerate(found["peaks"]) if p >= scout.FP16_MAX} == trigger
    order = scout.order_rows(found["peaks"], inputs.row_lengths(arrays))
    lengths = inputs.row_lengths(arrays)
    assert set(order[:7]) == trigger and [lengths[r] for r in order[:7]] == sorted(lengths[r] for r in trigger)
    assert plan.job.model.exists() and (plan.store.dir / "rows" / "scout" / "scout.onnx").exists()


def test_the_longest_row_decides_and_every_row_holds_on_the_last_good_release(bisect, tmp_path):
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.0", "--to", "1.20.0", "--rows", "fewest",
               "-j", "2", "--json", results=tmp_path / "results")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0")
    rows = doc["rows"]
    assert [s["rows"] for s in rows["searches"]] == [[12]]  # 4621 characters: the longest row
    held = rows["verified_on_full_batch"]
    assert held["last_good"]["version"] == "1.19.2" and held["last_good"]["rows"] == 20
    assert sorted(r for g in held["last_good"]["groups"] for r in g["rows"]) == list(range(20))
    assert {g["verdict"] for g in held["last_good"]["groups"]} == {"good"}
    assert held["rows_independent"]["same"], held["rows_independent"]
    assert doc["probe_count"] == rows["subset_probes"] + len(held["last_good"]["groups"])
    assert "every row of the batch is good on 1.19.2" in doc["message"]
    # two groups at once, each on its share of the cores (not two workers of all cores each)
    share = max(1, (os.cpu_count() or 1) // 2)
    for group in held["last_good"]["groups"]:
        recs = [json.loads(line) for line in (tmp_path / "results" / group["run_id"] / "probes.jsonl").open()]
        threads = [r["result"]["session_options"].get("intra_op_num_threads") for r in recs if r["version"] == "1.19.2"]
        assert threads[-1:] == [share], group


def test_rows_double_while_the_endpoints_agree(bisect, tmp_path):
    no_trigger = LOREM.replace("laborum", "laboris") * 8  # the longest row: 512 tokens, never overflows
    texts = [no_trigger, LOREM[:700], LOREM[:90], LOREM[:60]]  # row 1 holds the trigger word
    ids, mask = embedded.encode_batch(texts)
    np.savez(tmp_path / "batch.npz", input_ids=ids, attention_mask=mask)
    r = bisect("run", "--model", "gemma-tiny-fused", "--inputs", str(tmp_path / "batch.npz"), "--from", "1.19.2",
               "--to", "1.20.0", "--rows", "fewest", "--json")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    searches = doc["rows"]["searches"]
    assert [(s["rows"], s["status"]) for s in searches] == [([0], "endpoints_agree"), ([0, 1], "found")]
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0")
    assert doc["rows"]["verified_on_full_batch"]["first_bad"]["bad_rows"] == [1]


def test_a_fix_cannot_be_searched_on_fewer_rows(bisect):
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.0", "--to", "1.20.0", "--rows", "fewest",
               "--mode", "fix")
    assert r.returncode == 2 and "--rows fewest" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
