"""The graph builder of the generated models: named nodes and initializers, large weights streamed to a file."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Graph:
    def __init__(self, np_dtype, onnx_dtype, external=None):
        self.np_dtype = np_dtype
        self.dt = onnx_dtype
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._init_names: set[str] = set()
        self.external = external  # an ExternalData: large weights go to its file, not into the proto

    def init(self, name: str, arr: np.ndarray) -> str:
        if name not in self._init_names:
            self._init_names.add(name)
            arr = np.ascontiguousarray(arr)
            if self.external is not None and arr.nbytes >= self.external.threshold:
                self.inits.append(self.external.tensor(name, arr))
            else:
                self.inits.append(numpy_helper.from_array(arr, name))
        return name

    def const(self, name: str, value, dtype=None) -> str:
        if dtype is None:  # a model-dtype constant: fp16 value, so the fp32 twin matches exactly
            return self.init(name, np.array(value, dtype=np.float16).astype(self.np_dtype))
        return self.init(name, np.array(value, dtype=dtype))

    def ints(self, name: str, values) -> str:
        return self.init(name, np.array(values, dtype=np.int64))

    def node(self, op: str, name: str, inputs: list[str], n_out: int = 1,
             domain: str | None = None, out: str | None = None, **attrs) -> list[str] | str:
        outs = [out] if out else [f"{name}_output_{k}" for k in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, domain=domain, **attrs))
        return outs[0] if n_out == 1 else outs


def sentence_embedding_head(g: _Graph, x: str, mask: str, weight) -> None:
    """Mean pooling over the mask, the dense projections dense.0 and dense.1, and L2 normalisation to
    `sentence_embedding`, as sentence-transformers exports them. `weight(name)` names a weight's initializer.

    The normalisation runs in float32: onnxruntime 1.19.x returns zeros from an fp16 Clip that has only a
    min (measured), which would poison every row.
    """
    m3 = g.node("Unsqueeze", "/pooling/Unsqueeze", [mask, g.ints("/model/axes_last", [-1])])
    xs = g.node("Mul", "/pooling/Mul", [x, m3])
    tot = g.node("ReduceSum", "/pooling/ReduceSum", [xs, g.ints("/pooling/axes", [1])], keepdims=0)
    cnt = g.node("ReduceSum", "/pooling/ReduceSum_1", [m3, g.ints("/pooling/axes", [1])], keepdims=0)
    x = g.node("Div", "/pooling/Div", [tot, cnt])
    x = g.node("MatMul", "/dense.0/MatMul", [x, weight("dense.0.weight")])
    x = g.node("MatMul", "/dense.1/MatMul", [x, weight("dense.1.weight")])
    x = g.node("Cast", "/Cast", [x], to=TensorProto.FLOAT)
    nrm = g.node("ReduceL2", "/normalize/ReduceL2", [x, g.ints("/model/axes_last", [-1])], keepdims=1)
    nrm = g.node("Clip", "/normalize/Clip", [nrm, g.const("/normalize/eps", 1e-12, np.float32)])
    g.nodes.append(helper.make_node("Div", [x, nrm], ["sentence_embedding"], name="/normalize/Div"))


class ExternalData:
    """Initializers of `threshold` bytes or more written one by one into one data file beside the model.

    A model of hundreds of MB never has its weights in the protobuf (whose
    ceiling is 2 GB) nor twice in memory; offsets are 64-byte aligned, as
    onnx's own writer aligns them.
    """

    def __init__(self, fh, location: str, threshold: int = 1024):
        self.fh, self.location, self.threshold = fh, location, threshold
        self.offset = 0

    def tensor(self, name: str, arr: np.ndarray) -> onnx.TensorProto:
        pad = -self.offset % 64
        self.fh.write(b"\0" * pad)
        self.offset += pad
        raw = arr.tobytes()
        self.fh.write(raw)
        t = onnx.TensorProto(name=name, data_type=helper.np_dtype_to_tensor_dtype(arr.dtype), dims=arr.shape)
        t.data_location = onnx.TensorProto.EXTERNAL
        for key, value in (("location", self.location), ("offset", str(self.offset)), ("length", str(len(raw)))):
            entry = t.external_data.add()
            entry.key, entry.value = key, value
        self.offset += len(raw)
        return t
