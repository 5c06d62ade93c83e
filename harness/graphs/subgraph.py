"""Subgraphs of an ONNX model: the nodes a tensor depends on, the tensors crossing a cut, and a
model made of kept nodes alone (crossing tensors become its inputs). Pure: `onnx` only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import helper

from harness.graphs import surgery


@dataclass
class Graph:
    """The original model in topological order, with what the cuts need to know."""

    model: onnx.ModelProto
    nodes: list[onnx.NodeProto]
    producer: dict[str, int]  # tensor -> index of the node that makes it
    infos: dict[str, surgery.TensorInfo]
    initializers: dict[str, onnx.TensorProto]
    reads: list[list[str]] = None  # per node: its inputs, then the outer tensors its subgraphs (If, Loop) read

    def __post_init__(self):
        if self.reads is None:
            self.reads = [node_reads(n) for n in self.nodes]

    @classmethod
    def load(cls, path: Path) -> "Graph":
        model = onnx.load(str(path))  # external data read in: a reduced model embeds what it keeps
        nodes = surgery.topological_nodes(model.graph)
        producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
        infos = {i.name: i for i in surgery.intermediates(model)}
        for vi in model.graph.input:
            tt = vi.type.tensor_type
            dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim) \
                if tt.HasField("shape") else None
            infos[vi.name] = surgery.TensorInfo(vi.name, "", "", 0, -1, tt.elem_type, dims)
        return cls(model, nodes, producer, infos, {t.name: t for t in model.graph.initializer})

    def float_output(self, i: int) -> str | None:
        for o in self.nodes[i].output:
            info = self.infos.get(o)
            if o and info is not None and info.elem_type in surgery.FLOAT_TYPES:
                return o
        return None

    def ancestors(self, tensor: str, start: int = 0) -> list[int]:
        """Indices (>= start) of the nodes `tensor` depends on, itself included, in topological order."""
        seen, stack = set(), [tensor]
        while stack:
            t = stack.pop()
            i = self.producer.get(t)
            if i is None or i < start or i in seen:
                continue
            seen.add(i)
            stack.extend(self.reads[i])
        return sorted(seen)

    def crossing(self, keep: list[int]) -> list[str]:
        """Tensors the kept nodes read but do not make (and that are not weights): the cut's inputs."""
        made = {o for i in keep for o in self.nodes[i].output}
        out = []
        for i in keep:
            for t in self.reads[i]:
                if t not in made and t not in self.initializers and t not in out:
                    out.append(t)
        return out

    def sub(self, keep: list[int], output: str) -> onnx.ModelProto:
        """The kept nodes as a model of their own: crossing tensors become inputs, `output` the output.

        The original model's outputs that the kept nodes make stay outputs too: whether a tensor is
        an output decides whether onnxruntime materializes it in fp16, and so the verdict.
        """
        nodes = [self.nodes[i] for i in keep]
        made = {o for n in nodes for o in n.output}
        outputs = [output] + [o.name for o in self.model.graph.output if o.name in made and o.name != output]
        inits = []
        for i in keep:
            for t in self.reads[i]:
                if t in self.initializers and t not in made and all(x.name != t for x in inits):
                    inits.append(self.initializers[t])
        inputs = [self._value_info(t) for t in self.crossing(keep)]
        graph = helper.make_graph(nodes, f"{self.model.graph.name}-reduced", inputs,
                                  [helper.make_tensor_value_info(o, self.infos[o].elem_type, None) for o in outputs],
                                  inits)
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import), ir_version=self.model.ir_version,
                                  producer_name="ortbisect reduce")
        for key in ("domain", "model_version"):
            setattr(model, key, getattr(self.model, key))
        return model

    def _value_info(self, name: str) -> onnx.ValueInfoProto:
        info = self.infos[name]
        shape = None if info.shape is None or info.type_guessed else \
            [d if isinstance(d, int) and d >= 0 else (d or None) for d in info.shape]
        return helper.make_tensor_value_info(name, info.elem_type, shape)


def model_bytes(model: onnx.ModelProto) -> bytes:
    return model.SerializeToString()


def fed(model: onnx.ModelProto, arrays: dict) -> dict:
    """The arrays the model takes as inputs, in its inputs' order: a subgraph's inputs are the tensors it reads
    (Graph.sub), and onnxruntime refuses a run fed one it does not declare ("Invalid input name")."""
    return {i.name: arrays[i.name] for i in model.graph.input if i.name in arrays}


def needed(graph: Graph, keep: list[int], output: str, fed: set[str]) -> list[int]:
    """The kept nodes `output` still depends on when the tensors in `fed` are given."""
    allowed, seen, stack = set(keep), set(), [output]
    while stack:
        t = stack.pop()
        i = graph.producer.get(t)
        if t in fed or i is None or i not in allowed or i in seen:
            continue
        seen.add(i)
        stack.extend(graph.reads[i])
    return sorted(seen)


def node_reads(node: onnx.NodeProto) -> list[str]:
    """The tensors a node reads: its inputs, then those its subgraphs (an If's branches, a Loop's body) take
    from the enclosing graph without making them (a cut that feeds them makes them inputs of its model)."""
    found = [t for t in node.input if t]
    for attr in node.attribute:
        for g in ([attr.g] if attr.type == onnx.AttributeProto.GRAPH else
                  list(attr.graphs) if attr.type == onnx.AttributeProto.GRAPHS else []):
            for t in _outer(g):
                if t not in found:
                    found.append(t)
    return found


def _outer(graph: onnx.GraphProto) -> list[str]:
    """Names `graph` reads that neither it nor its own subgraphs define: the enclosing graph's tensors."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer} | \
        {t.name for t in graph.sparse_initializer}
    for n in graph.node:
        defined.update(o for o in n.output if o)
    return [t for n in graph.node for t in node_reads(n) if t not in defined]
