"""A parameterless fp16 RMS norm over values whose squares pass 65504: the shape of the second seed's case.

mobius PR 253 (Gemma4's scale-free V norm, `v / sqrt(mean(v*v) + eps)`): V
projection outputs reach about 888, 888 * 888 = 788,544 is past the fp16
ceiling (65504), so a Mul computed in fp16 gives Inf, the mean Inf, the root
Inf and v / Inf = 0: an all-zero row ("all-zero V outputs on CUDA").
Onnxruntime's CPU provider has no fp16 kernel for most of these ops on x86_64
and runs them as an fp32 island ("CPU uses FP32 internally"): the row stays
finite and non-zero. The CUDA provider computes them in fp16.

The batch has rows whose largest value is 888 (the report's), 300 (squares to
90,000, past the ceiling too), 200 (40,000: fits) and 1: rows 0 and 1 go to
zero where the square is taken in fp16, rows 2 and 3 never do. Measured on the
CUDA provider (onnxruntime-gpu 1.31.1, an H200), row 2 goes to zero as well:
the ReduceMean there sums its 64 squares (about 870,000) in fp16. The model and
its fp32 twin (the same graph in fp32) are generated here, deterministically.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from .names import RMSNORM

NAME = RMSNORM
WIDTH = 64
EPS = 1e-6
ROW_PEAKS = (888.0, 300.0, 200.0, 1.0)


def build_model(dtype: str = "float16") -> onnx.ModelProto:
    """y = x / sqrt(mean(x * x, last axis) + eps), every op in `dtype` (float16 or float32)."""
    elem = TensorProto.FLOAT16 if dtype == "float16" else TensorProto.FLOAT
    np_dtype = np.float16 if dtype == "float16" else np.float32
    eps = helper.make_tensor("eps", elem, [], np.array(EPS, np_dtype).tobytes(), raw=True)
    nodes = [
        helper.make_node("Mul", ["x", "x"], ["squared"], name="square"),
        helper.make_node("ReduceMean", ["squared"], ["mean"], name="mean", axes=[-1], keepdims=1),
        helper.make_node("Add", ["mean", "eps"], ["mean_eps"], name="add_eps"),
        helper.make_node("Sqrt", ["mean_eps"], ["rms"], name="root"),
        helper.make_node("Div", ["x", "rms"], ["y"], name="normalize"),
    ]
    graph = helper.make_graph(nodes, NAME, [helper.make_tensor_value_info("x", elem, ["batch", WIDTH])],
                              [helper.make_tensor_value_info("y", elem, ["batch", WIDTH])], initializer=[eps])
    # opset 17: ReduceMean still takes `axes` as an attribute; every release from 1.19 runs it
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="ortbisect")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def batch(dtype: str = "float16") -> dict[str, np.ndarray]:
    """Four rows, one per peak of ROW_PEAKS: a ramp from -peak to peak (so each row's max |x| is its peak)."""
    ramp = np.linspace(-1.0, 1.0, WIDTH)
    x = np.stack([peak * ramp for peak in ROW_PEAKS]).astype(np.float16)
    return {"x": x.astype(np.float16 if dtype == "float16" else np.float32)}


def files() -> dict[str, bytes]:
    """What `harness.models.embedded.materialize` writes for this model: the fp16 model, its fp32 twin, the batch."""
    import io

    buf = io.BytesIO()
    np.savez(buf, **batch())
    return {"model.onnx": build_model("float16").SerializeToString(),
            "model_fp32.onnx": build_model("float32").SerializeToString(),
            "batch.npz": buf.getvalue()}
