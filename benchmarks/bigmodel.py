"""A big fp16 model for the trace-memory benchmark, written with the onnx package.

A residual chain of LAYERS blocks, each `x = x + x @ W_i` with a DIM x DIM fp16
weight: 16 x 4096 x 4096 x 2 bytes = 512 MiB of weights, all in one external
data file next to the model. The weights are streamed to the data file one at a
time, so building it never holds more than one layer in memory. Deterministic
(seeded); rebuilt only when missing or when its parameters change.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

LAYERS = 16
DIM = 4096
ROWS = 8
SEED = 20240601
OPSET = 17
IR_VERSION = 8  # readable by every onnxruntime release from 1.19 on


def build(out_dir: Path, layers: int = LAYERS, dim: int = DIM, rows: int = ROWS, log=print) -> tuple[Path, Path, int]:
    """(model path, input batch .npz, bytes of weights); reuses a previous build with the same parameters."""
    out_dir = Path(out_dir)
    model_path, data_name, batch_path = out_dir / "bigmodel.onnx", "bigmodel.onnx.data", out_dir / "batch.npz"
    params = {"layers": layers, "dim": dim, "rows": rows, "seed": SEED, "opset": OPSET, "ir": IR_VERSION}
    stamp = out_dir / "params.json"
    weight_bytes = layers * dim * dim * 2
    if stamp.exists() and json.loads(stamp.read_text()) == params and model_path.exists() \
            and (out_dir / data_name).stat().st_size == weight_bytes and batch_path.exists():
        log(f"big model: reusing {model_path} ({weight_bytes / 2**20:.0f} MiB of weights)")
        return model_path, batch_path, weight_bytes
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    rng = np.random.default_rng(SEED)
    scale = 0.5 / np.sqrt(dim)  # each block adds a quarter of the variance: values stay far below 65504
    inits, nodes = [], []
    offset = 0
    with open(out_dir / data_name, "wb") as data:
        for i in range(layers):
            w = (rng.standard_normal((dim, dim), dtype=np.float32) * scale).astype(np.float16)
            raw = w.tobytes()
            data.write(raw)
            t = TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT16, dims=[dim, dim])
            t.data_location = TensorProto.EXTERNAL
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(len(raw)))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            offset += len(raw)
            inits.append(t)
            x = "x" if i == 0 else f"h{i - 1}"
            nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"layer{i}/matmul"))
            nodes.append(helper.make_node("Add", [x, f"m{i}"], ["y" if i == layers - 1 else f"h{i}"], name=f"layer{i}/add"))
            log(f"big model: layer {i + 1}/{layers} written")
    graph = helper.make_graph(
        nodes, "bigmodel",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, ["rows", dim])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["rows", dim])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="ortbisect-bench")
    model.ir_version = IR_VERSION
    onnx.save_model(model, str(model_path))
    onnx.checker.check_model(str(model_path))  # by path: the external data file is found, not loaded
    x = rng.standard_normal((rows, dim), dtype=np.float32).astype(np.float16)
    np.savez(batch_path, x=x)
    stamp.write_text(json.dumps(params))
    return model_path, batch_path, weight_bytes
