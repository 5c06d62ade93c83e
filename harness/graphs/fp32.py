"""fp16 graphs computed in fp32, in part or whole: pure operations on an onnx ModelProto.

`fp32_island(model, nodes)` is the patch every fp32 question is answered with:
inside the island every fp16 tensor becomes an fp32 one (renamed with the
suffix /fp32), fp16 weights are converted, Casts to fp16 become Casts to fp32,
and Casts are inserted only at the island's edges, so the interface and every
tensor outside the island keep their names and types. `to_fp32` is the same
with every node in the island; `has_fp16` says whether a model has anything to
convert.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from harness.graphs import surgery

FP16 = TensorProto.FLOAT16
FP32 = TensorProto.FLOAT
SUFFIX = "/fp32"


def elem_types(model: onnx.ModelProto) -> dict[str, int]:
    types = {}
    for vi in [*model.graph.input, *model.graph.output, *model.graph.value_info]:
        types[vi.name] = vi.type.tensor_type.elem_type
    for init in model.graph.initializer:
        types[init.name] = init.data_type
    for info in surgery.intermediates(model):
        types.setdefault(info.name, info.elem_type)
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and a.HasField("t"):
                    types[node.output[0]] = a.t.data_type
    return types


def fp32_island(model: onnx.ModelProto, island: set[str]) -> onnx.ModelProto:
    """A copy of `model` where the nodes named in `island` compute in fp32 (see module doc)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    g = model.graph
    types = elem_types(model)
    nodes = surgery.topological_nodes(g)
    keys = [surgery.node_key(n) for n in nodes]
    unknown = island - set(keys)
    if unknown:
        raise KeyError(f"not nodes of the model: {', '.join(sorted(unknown))}")
    inits = {i.name: i for i in g.initializer}
    graph_outputs = {o.name for o in g.output}
    in_island = {k for k in keys if k in island}
    produced_in = {}
    for n, k in zip(nodes, keys):
        if k in in_island:
            for o in n.output:
                produced_in[o] = k
    consumers_outside = set()
    for n, k in zip(nodes, keys):
        if k not in in_island:
            consumers_outside.update(n.input)
            for a in n.attribute:  # subgraphs read outer tensors implicitly
                if a.HasField("g"):
                    consumers_outside.update(_outer_names(a.g))

    def fp16(name: str) -> bool:
        return types.get(name) == FP16

    new_nodes: list[onnx.NodeProto] = []
    new_inits: dict[str, onnx.TensorProto] = {}
    cast_in: dict[str, str] = {}
    for n, k in zip(nodes, keys):
        if k not in in_island:
            new_nodes.append(n)
            continue
        m = onnx.NodeProto()
        m.CopyFrom(n)
        for idx, t in enumerate(n.input):
            if not t or not fp16(t):
                continue
            if t in produced_in:
                m.input[idx] = t + SUFFIX
            elif t in inits:
                if t + SUFFIX not in new_inits:
                    arr = numpy_helper.to_array(inits[t]).astype(np.float32)
                    new_inits[t + SUFFIX] = numpy_helper.from_array(arr, t + SUFFIX)
                m.input[idx] = t + SUFFIX
            else:
                if t not in cast_in:
                    cast_in[t] = t + SUFFIX
                    new_nodes.append(helper.make_node("Cast", [t], [t + SUFFIX], name=f"{t}/CastToFp32", to=FP32))
                m.input[idx] = t + SUFFIX
        if m.op_type == "Cast":
            for a in m.attribute:
                if a.name == "to" and a.i == FP16:
                    a.i = FP32
        if m.op_type == "Constant":
            for a in m.attribute:
                if a.name == "value" and a.HasField("t") and a.t.data_type == FP16:
                    a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
        back = []
        for idx, o in enumerate(n.output):
            if o and fp16(o):
                m.output[idx] = o + SUFFIX
                if o in consumers_outside or o in graph_outputs:
                    back.append(helper.make_node("Cast", [o + SUFFIX], [o], name=f"{o}/CastToFp16", to=FP16))
        new_nodes.append(m)
        new_nodes.extend(back)
    del g.node[:]
    g.node.extend(new_nodes)
    g.initializer.extend(new_inits.values())
    # value_info of renamed tensors would now lie about their type: drop what the island touched.
    keep = [vi for vi in g.value_info if vi.name not in produced_in]
    del g.value_info[:]
    g.value_info.extend(keep)
    used = {t for n in g.node for t in n.input}
    unused = [i for i in g.initializer if i.name not in used and i.name not in {x.name for x in g.input}]
    for i in unused:
        g.initializer.remove(i)
    return model


def _outer_names(graph: onnx.GraphProto) -> set[str]:
    names = set()
    for n in graph.node:
        names.update(n.input)
        for a in n.attribute:
            if a.HasField("g"):
                names |= _outer_names(a.g)
    return names


def to_fp32(model: onnx.ModelProto) -> onnx.ModelProto:
    """The whole model computed in fp32, interface unchanged (fp16 inputs cast in, outputs cast back)."""
    return fp32_island(model, {surgery.node_key(n) for n in model.graph.node})


def strip(name: str) -> str:
    return name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name


def has_fp16(model: onnx.ModelProto) -> bool:
    """Whether any value or weight of the model is fp16 (else it is its own fp32 version)."""
    g = model.graph
    f16 = TensorProto.FLOAT16
    typed = [*g.input, *g.output, *g.value_info]
    return (any(t.data_type == f16 for t in g.initializer)
            or any(v.type.tensor_type.elem_type == f16 for v in typed)
            or any(a.t.data_type == f16 for n in g.node for a in n.attribute if a.HasField("t"))
            or any(a.i == f16 for n in g.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"))
