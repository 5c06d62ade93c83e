"""The precision each node of the ORIGINAL graph really ran in, read from the
optimized graph onnxruntime saves with the session option
`optimized_model_filepath` (`precision_map`, `tensor_visibility`). Pure: `onnx` only.

What real optimized graphs show (CPUExecutionProvider, saved with
`optimized_model_filepath`, levels "all" and "disable" alike):

* An fp16 node without an fp16 CPU kernel keeps its NAME and OP TYPE; onnxruntime
  feeds it fp32 copies and renames what flows between such nodes. Every tensor
  `T` of the island becomes `InsertedPrecisionFreeCast_T` (fp32), made by a Cast
  (to=1) node that is ALSO named `InsertedPrecisionFreeCast_T` where the island
  starts (graph input, fp16 initializer); neighbours in the island are wired
  directly (the fp32->fp16->fp32 pairs are removed), and a Cast (to=10) back to
  `T` is inserted only where an fp16 consumer or a graph output needs `T`.
  Example x86_64 1.19.2, residual_norm_model: Cast x -> Add -> Add ->
  SimplifiedLayerNormalization -> Cast y, all named as in the original, every
  intermediate tensor prefixed: one fp32 island, `/model/layers.1/Add_output_0`
  never exists in fp16.
* x86_64 1.20.0 (same model): the SimplifiedLayerNormalization consumes the
  real fp16 `/model/layers.1/Add_output_0` and the fp16 weight with no Cast
  around it (native fp16); the Adds are still an island whose result is Cast
  back to fp16 (`InsertedPrecisionFreeCast_/model/layers.1/Add_output_0` ->
  `/model/layers.1/Add_output_0`) for the norm: 90000 becomes Inf there.
  1.32.0 is the same as 1.20.0.
* aarch64 (qemu, neoverse-n1) 1.23.2, residual_overflow_model: Add, Add, Mul,
  Div all in one fp32 island as above; at level "all" the fp16 scalar
  initializer is constant-folded into an fp32 initializer `FusedBack_quarter`
  (no Cast node). 1.24.1: the same four nodes with their original inputs and
  outputs, no Cast anywhere: native fp16, and `/model/layers.1/Add_output_0`
  is Inf.
* Fusion (x86_64 1.19.2 to 1.22.1, torch-style decomposed RMSNorm in fp32):
  Cast/Pow/ReduceMean/Add/Sqrt/Div/Mul disappear; a new node
  `<name of the last Mul>/SimplifiedLayerNormFusion/` of type
  SimplifiedLayerNormalization produces the last Mul's output, fed the fp32
  island copy of the residual; the final Cast to fp16 is removed as well and
  the next residual Add reads the norm's fp32 output. A fused-away node is
  matched to its replacement by walking forward in the original graph to
  the first tensor an optimized node produces: a node absent from the original
  is the fused op; a node present in it means the absent one was only removed
  (a Cast folded into an island, an Identity).
* The saved optimized graph has no value_info: element types are propagated
  here (Cast `to`, initializer types, the `InsertedPrecisionFreeCast_` prefix
  means fp32, otherwise the original graph's inferred types).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import onnx
from onnx import TensorProto

from harness.graphs.surgery import (
    BOOL_OPS,
    FLOAT_TYPES,
    INT64_OPS,
    UNKNOWN,
    intermediates,
    known_types,
    node_key,
    topological_nodes,
)

CAST_PREFIX = "InsertedPrecisionFreeCast_"


@dataclass(frozen=True)
class NodePrecision:
    """How one node of the ORIGINAL graph ran, read from the release's optimized graph.

    precision:
      fp16         present, consumes fp16 values, no inserted Cast: native fp16 kernel
      fp32-island  present, consumes fp32 copies (InsertedPrecisionFreeCast_*) of values
                   the original graph has in fp16: onnxruntime ran it in fp32
      fp32         present, its inputs are fp32 in the original graph too
      other        present, no floating-point input (ints, bools, shapes)
      fused        absent: fused into `optimized_node` (op `ran_as`, which itself ran
                   in `fused_precision`)
      removed      absent, and its outputs flow into nodes of the original graph
                   (an eliminated Cast, Identity, ...)
      folded       absent, its outputs became initializers (constant folding)
      unknown      absent and nothing downstream could be matched
    """

    node: str
    op_type: str
    precision: str
    ran_as: str | None = None  # the op type that computed it (itself or the fused op)
    optimized_node: str | None = None  # its name in the optimized graph, or the fused node's
    fused_precision: str | None = None  # precision class of the fused node
    casts: tuple[str, ...] = ()  # inserted Cast nodes right around it


def _opt_types(original_types: dict, optimized: onnx.ModelProto) -> dict[str, int]:
    """Element types of the optimized graph's tensors (it is saved without value_info)."""
    g = optimized.graph
    types: dict[str, int] = {}
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    for init in g.initializer:
        types[init.name] = init.data_type
    for node in topological_nodes(g):
        first = next((types[t] for t in node.input if t in types and types[t] in FLOAT_TYPES), None)
        for o in node.output:
            if not o or o in types:
                continue
            if node.op_type == "Cast":
                types[o] = next((a.i for a in node.attribute if a.name == "to"), UNKNOWN)
            elif o.startswith(CAST_PREFIX):
                types[o] = TensorProto.FLOAT
            elif o in original_types and original_types[o][0] != UNKNOWN:
                types[o] = original_types[o][0]
            elif node.op_type in INT64_OPS:
                types[o] = TensorProto.INT64
            elif node.op_type in BOOL_OPS:
                types[o] = TensorProto.BOOL
            elif first is not None:
                types[o] = first
    return types


def optimized_types(original: onnx.ModelProto, optimized: onnx.ModelProto) -> dict[str, int]:
    """Element types of the optimized graph's tensors, propagated as `precision_map` does."""
    types = known_types(original)
    for info in intermediates(original):
        if types.get(info.name, (UNKNOWN, None))[0] == UNKNOWN:
            types[info.name] = (info.elem_type, info.shape)
    return _opt_types(types, optimized)


def _float_inputs(node: onnx.NodeProto, types: dict[str, int]) -> list[int]:
    return [types[t] for t in node.input if t and types.get(t) in FLOAT_TYPES]


def _classify_present(node: onnx.NodeProto, opt_types: dict[str, int], orig_in_types: list[int] | None) -> str:
    ins = _float_inputs(node, opt_types)
    islandish = any(t.startswith(CAST_PREFIX) for t in [*node.input, *node.output] if t)
    if orig_in_types is not None:
        declared16 = any(t in (TensorProto.FLOAT16, TensorProto.BFLOAT16) for t in orig_in_types)
        if declared16 and TensorProto.FLOAT in ins:
            return "fp32-island"
    if TensorProto.FLOAT16 in ins or TensorProto.BFLOAT16 in ins:
        return "fp16"
    if TensorProto.FLOAT in ins:
        return "fp32-island" if islandish else "fp32"
    if ins:
        return "fp32"  # double
    return "other"


def precision_map(original: onnx.ModelProto, optimized: onnx.ModelProto) -> dict[str, NodePrecision]:
    """Per ORIGINAL node (by node_key, topological order): the precision it actually ran in.

    `optimized` is the graph a release saved with `optimized_model_filepath`
    for the unmodified model; load both without external data.
    """
    orig_nodes = topological_nodes(original.graph)
    orig_types = known_types(original)
    for info in intermediates(original):  # guessed types for contrib ops' outputs
        if orig_types.get(info.name, (UNKNOWN, None))[0] == UNKNOWN:
            orig_types[info.name] = (info.elem_type, info.shape)
    og = optimized.graph
    opt_types = _opt_types(orig_types, optimized)
    opt_by_name = {n.name: n for n in og.node if n.name}
    opt_producer = {}
    opt_consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in og.node:
        for o in n.output:
            if o:
                opt_producer[o] = n
        for t in n.input:
            if t:
                opt_consumers.setdefault(t, []).append(n)
    opt_inits = {i.name for i in og.initializer}
    orig_names = {node_key(n) for n in orig_nodes}
    orig_consumers: dict[str, list[onnx.NodeProto]] = {}
    for n in orig_nodes:
        for t in n.input:
            if t:
                orig_consumers.setdefault(t, []).append(n)

    def casts_around(node: onnx.NodeProto) -> tuple[str, ...]:
        found = []
        for t in node.input:
            p = opt_producer.get(t)
            if p is not None and p.op_type == "Cast" and p.name.startswith(CAST_PREFIX):
                found.append(p.name)
        for o in node.output:
            for c in opt_consumers.get(o, []):
                if c.op_type == "Cast" and c.name.startswith(CAST_PREFIX):
                    found.append(c.name)
        return tuple(dict.fromkeys(found))

    def inserted_cast(node: onnx.NodeProto | None) -> bool:
        return node is not None and node.op_type == "Cast" and node.name.startswith(CAST_PREFIX)

    def produced(t: str) -> onnx.NodeProto | None:
        """The node that computes `t`: where an inserted Cast turns an island's fp32 copy back into `t`, the node
        that made the copy (x86_64 1.20.0: a Gemm the MatMul and Add were fused into, cast back for an fp16 norm)."""
        p = opt_producer.get(t)
        if p is None or inserted_cast(p):
            return opt_producer.get(CAST_PREFIX + t) or p
        return p

    result: dict[str, NodePrecision] = {}
    for node in orig_nodes:
        key = node_key(node)
        orig_in = [orig_types.get(t, (UNKNOWN, None))[0] for t in node.input if t]
        present = opt_by_name.get(node.name) if node.name else None
        if present is None and not node.name:  # nameless: match by its output
            p = produced(node.output[0]) if node.output else None
            present = p if p is not None and p.op_type == node.op_type and not p.name.startswith(CAST_PREFIX) else None
        if present is not None:
            result[key] = NodePrecision(key, node.op_type, _classify_present(present, opt_types, orig_in),
                                        present.op_type, present.name or None, None, casts_around(present))
            continue
        outs = [o for o in node.output if o]
        if outs and all(o in opt_inits or CAST_PREFIX + o in opt_inits for o in outs):
            result[key] = NodePrecision(key, node.op_type, "folded")
            continue
        # Walk forward to the first tensor an optimized node makes.
        seen, queue, hit = set(), deque(outs), None
        while queue and hit is None and len(seen) < 4096:
            t = queue.popleft()
            if t in seen:
                continue
            seen.add(t)
            p = produced(t)
            if p is not None and not inserted_cast(p):
                hit = p
                break
            for c in orig_consumers.get(t, []):
                queue.extend(o for o in c.output if o)
        if hit is None:
            result[key] = NodePrecision(key, node.op_type, "unknown")
        elif hit.name in orig_names:
            result[key] = NodePrecision(key, node.op_type, "removed", None, hit.name)
        else:
            fused_prec = _classify_present(hit, opt_types, None)
            result[key] = NodePrecision(key, node.op_type, "fused", hit.op_type, hit.name or None, fused_prec,
                                        casts_around(hit))
    return result


def tensor_visibility(original: onnx.ModelProto, optimized: onnx.ModelProto) -> dict[str, str]:
    """Per node output of the original graph: "seen" or "observed-only".

    "seen": the tensor exists under its own name in the optimized graph of the
    unmodified model (made or read by a node there), so it really was
    materialized in its declared dtype, and what a trace reads from it (fp16
    rounding, Inf) is what the next node consumed. This covers a producer
    running natively in fp16 and an fp32 island whose result onnxruntime Casts
    back to fp16 for an fp16 consumer (x86_64 1.20.0: the island's Add output
    is rounded for the native fp16 norm).
    "observed-only": only its fp32 island copy (`InsertedPrecisionFreeCast_<name>`)
    exists, or it was fused away: the trace rounds it to its declared dtype only
    to observe it; an Inf there never reached a consumer.
    """
    og = optimized.graph
    real = {t for n in og.node for t in [*n.input, *n.output] if t}
    real.update(o.name for o in og.output)
    return {info.name: ("seen" if info.name in real else "observed-only") for info in intermediates(original)}
