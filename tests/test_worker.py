"""The worker counts a bad row of the batch once, however many outputs it is bad in."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from test_vocabulary import load_worker

WORKER = Path(__file__).resolve().parent.parent / "harness" / "worker.py"
NAN_ROWS = [1, 3, 4, 8, 11, 15, 19]  # 7 rows of 20


@pytest.fixture(scope="module")
def worker():
    return load_worker()


def batch() -> np.ndarray:
    x = np.arange(80, dtype=np.float32).reshape(20, 4) + 1
    x[NAN_ROWS, 2] = np.nan
    return x


def test_two_outputs_nan_in_the_same_rows_are_seven_rows_not_fourteen(worker):
    x = batch()
    s = worker.rows_summary(np, {"x": x}, ["a", "b"], [x * 2, x + 1])
    assert s == {"rows": 20, "outputs": ["a", "b"], "nan_rows": 7, "inf_rows": 0, "nonfinite_rows": 7, "zero_rows": 0}


def test_rows_bad_in_different_outputs_are_their_union(worker):
    x = np.ones((6, 3), np.float16)
    a, b, c = x.copy(), x.copy(), x.copy()
    a[0, 0] = np.nan
    b[0, 1] = np.inf  # the NaN row again, now with Inf too
    b[2, 2] = np.inf
    c[4] = 0  # an all-zero row in one output
    c[0] = 0
    s = worker.rows_summary(np, {"x": x}, ["a", "b", "c"], [a, b, c])
    assert (s["nan_rows"], s["inf_rows"], s["nonfinite_rows"], s["zero_rows"]) == (1, 2, 2, 2)


def test_outputs_with_another_first_axis_are_left_to_their_own_counts(worker):
    x = batch()
    pooled = np.full((4,), np.nan, np.float32)  # one value per column: not one row per batch row
    labels = np.zeros((20,), np.int64)  # integers: never NaN, every row all zero
    names = ["y", "pooled", "labels", "text"]
    s = worker.rows_summary(np, {"x": x}, names, [x, pooled, labels, np.array(["a"] * 20)])
    assert s["rows"] == 20 and s["outputs"] == ["y", "labels"]
    assert (s["nan_rows"], s["zero_rows"]) == (7, 20)


def test_batch_rows_prefers_the_inputs_first_axis(worker):
    x = np.zeros((5, 2), np.float32)
    wide = [np.zeros((3, 1)), np.zeros((3, 1)), np.zeros((5, 1))]
    assert worker.batch_rows(np, {"x": x, "mask": x}, wide) == 5  # the inputs say 5, and an output has it
    assert worker.batch_rows(np, {"x": x, "t": np.zeros((7,))}, wide) == 3  # inputs disagree: most outputs
    assert worker.batch_rows(np, {"x": x}, [np.zeros((2,)), np.zeros((4,))]) == 4  # a tie: the larger
    assert worker.batch_rows(np, {"x": x}, [np.float32(1.0)]) is None
    assert worker.rows_summary(np, {"x": x}, ["s"], [np.float32(np.nan)]) is None


def test_the_worker_parses_as_python_3_8():
    ast.parse(WORKER.read_text(), feature_version=(3, 8))  # the oldest Python of a probe environment


# -- one real release --------------------------------------------------------------------

def two_outputs_model() -> onnx.ModelProto:
    """y = 2x and z = x + 1 (NaN in the same 7 rows as x), and t = x transposed (4 rows, NaN in the one of column 2)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", 4]),
            helper.make_tensor_value_info("t", TensorProto.FLOAT, [4, "batch"])]
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [helper.make_node("Mul", ["x", "two"], ["y"], name="mul"),
             helper.make_node("Add", ["x", "one"], ["z"], name="add"),
             helper.make_node("Transpose", ["x"], ["t"], name="transpose", perm=[1, 0])]
    graph = helper.make_graph(nodes, "two_outputs", [x], outs, [two, one])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.release
def test_a_nan_row_in_two_outputs_is_counted_once_on_a_real_release(bisect, tmp_path):
    model = tmp_path / "two_outputs.onnx"
    onnx.save_model(two_outputs_model(), str(model))
    np.savez(tmp_path / "batch.npz", x=batch())
    argv = ("sweep", "--model", str(model), "--inputs", str(tmp_path / "batch.npz"), "--from", "1.20.0", "--to", "1.20.0")
    r = bisect(*argv, "--json")
    assert r.returncode == 3, r.stderr  # one release: no boundary
    (probe,) = r.json()["probes"]
    assert (probe["verdict"], probe["nan_rows"], probe["rows"]) == ("bad", 7, 20), probe
    assert "7 NaN rows, 0 Inf rows of 20" in probe["why"]
    table = bisect(*argv)  # the same probe, reused, as a table
    assert table.returncode == 3, table.stderr
    assert re.search(r"1\.20\.0\W+bad\W+7\W+0\W+20\W", table.stdout), table.stdout  # release verdict NaN Inf rows
    assert "bad     7 NaN rows, 0 Inf rows of 20" in table.stderr
    (stored,) = [json.loads(x) for x in next((tmp_path / "results").rglob("probes.jsonl")).read_text().splitlines()]
    per_output = {o["name"]: o["nan_rows"] for o in stored["result"]["outputs"]}
    assert per_output == {"y": 7, "z": 7, "t": 1}  # per-output counts stay in the record (their sum: 15)
    assert stored["result"]["rows"]["outputs"] == ["y", "z"] and stored["result"]["rows"]["nan_rows"] == 7


@pytest.mark.release
def test_a_worker_held_at_a_gate_ends_when_its_harness_is_gone(cache_dir, tmp_path):
    """A test that gives up kills its harness; the worker it held must not spin at the gate for ever."""
    import os
    import platform
    import subprocess
    import sys
    import time

    import builders

    from harness.releases.versions import Release, Target
    from harness.runners.uv import UvRunner

    version = "1.19.2"
    env = UvRunner(Target(platform.machine(), "3.11"), cache_dir).prepare(
        Release(version, [f"onnxruntime-{version}-cp311-cp311-manylinux_2_27_{platform.machine()}.whl"]))
    builders.save(builders.residual_norm_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "b.npz", **builders.residual_norm_inputs())
    gate = tmp_path / "gate"
    gate.mkdir()
    (tmp_path / "request.json").write_text(json.dumps({
        "model": str(tmp_path / "m.onnx"), "inputs": str(tmp_path / "b.npz"), "outputs": [], "session_options": {},
        "memory_limit_mb": None, "outputs_path": None, "hold_dir": str(gate),
        "result_path": str(tmp_path / "result.json")}))
    # a stand-in harness: starts the worker, waits until it is held, then dies without letting it go
    harness = subprocess.Popen([sys.executable, "-c", (
        "import os, subprocess, sys, time\n"
        f"w = subprocess.Popen([{str(env.path / 'bin' / 'python')!r}, '-I', {str(WORKER)!r}, "
        f"{str(tmp_path / 'request.json')!r}])\n"
        f"while not os.path.exists(os.path.join({str(gate)!r}, 'running-%d' % w.pid)): time.sleep(0.05)\n"
        "print(w.pid, flush=True)\n"
        "os._exit(0)\n")], stdout=subprocess.PIPE, text=True)
    worker_pid = int(harness.stdout.readline())
    harness.wait(timeout=120)
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{worker_pid}") and time.monotonic() < deadline:
        with open(f"/proc/{worker_pid}/stat") as f:
            if f.read().split()[2] == "Z":  # ended, waiting for init to reap it
                break
        time.sleep(0.1)
    alive = os.path.exists(f"/proc/{worker_pid}") and open(f"/proc/{worker_pid}/stat").read().split()[2] != "Z"
    if alive:
        os.kill(worker_pid, 9)
    assert not alive, "the held worker outlived its harness"
    assert not (tmp_path / "result.json").exists()  # it never ran the model
