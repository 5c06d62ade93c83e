"""Graph surgery for tracing a numerical regression. Pure: `onnx` only, no onnxruntime.

What is here: the intermediate tensors of a model in topological order
(`intermediates`), a copy of a model with some of them exposed as graph
outputs (`expose`, external data stays external and is never read), passes of
exposed tensors bounded in bytes (`chunk`), the transformer layer of a node
(`layer_of`, `residual_nodes`). What the optimized graph says about how each
node ran is `harness.graphs.precision`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from harness.graphs.external import external_tensors, location_problem

FLOAT_TYPES = {TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.BFLOAT16}
UNKNOWN = TensorProto.UNDEFINED
# Size counted for a tensor whose shape cannot be resolved when nothing better is known.
DEFAULT_UNKNOWN_BYTES = 64 << 20

# Output element type of ops that do not take it from their first input.
INT64_OPS = {"Shape", "Size", "ArgMax", "ArgMin", "NonZero"}
BOOL_OPS = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor",
             "IsNaN", "IsInf"}
# Contrib ops whose first output has the shape of their first input.
_SAME_SHAPE_OPS = {"SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "LayerNormalization",
                   "SkipLayerNormalization", "RotaryEmbedding", "FastGelu", "BiasGelu", "Gelu", "QuickGelu",
                   "BiasAdd", "BiasSplitGelu"}


@dataclass(frozen=True)
class TensorInfo:
    """One node output: who makes it, its element type and (possibly symbolic) shape."""

    name: str
    node: str  # producer's key: its name, or "<op>:<first output>" when it has none
    op_type: str
    index: int  # which output of the producer
    order: int  # producer's position in topological order
    elem_type: int  # TensorProto enum; 0 = unknown
    shape: tuple | None  # ints, dim_param strings, None for an unknown dim; None = rank unknown
    type_guessed: bool = False  # shape inference did not know it: taken from the first input

    @property
    def dtype(self) -> str:
        if self.elem_type == UNKNOWN:
            return "unknown"
        return str(helper.tensor_dtype_to_np_dtype(self.elem_type))

    @property
    def is_float(self) -> bool:
        return self.elem_type in FLOAT_TYPES

    def nbytes(self, dim_values: dict[str, int] | None = None) -> int | None:
        """Bytes of the tensor with symbolic dims resolved by `dim_values`; None if unknown."""
        if self.shape is None or self.elem_type == UNKNOWN:
            return None
        n = 1
        for d in self.shape:
            if isinstance(d, int) and d >= 0:
                n *= d
            elif isinstance(d, str) and d in (dim_values or {}):
                n *= int(dim_values[d])
            else:
                return None
        return n * helper.tensor_dtype_to_np_dtype(self.elem_type).itemsize


def node_key(node: onnx.NodeProto) -> str:
    """A node's name, or a stable stand-in for nameless nodes (output names are unique)."""
    return node.name or f"{node.op_type}:{node.output[0] if node.output else ''}"


def topological_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """Nodes in topological order (stable: keeps the file's order where it already is one)."""
    produced_by = {}
    for i, n in enumerate(graph.node):
        for o in n.output:
            if o:
                produced_by[o] = i
    deps = [{produced_by[t] for t in n.input if t in produced_by and produced_by[t] != i} for i, n in enumerate(graph.node)]
    users: list[list[int]] = [[] for _ in graph.node]
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].append(i)
    waiting = [len(ds) for ds in deps]
    import heapq

    ready = [i for i, w in enumerate(waiting) if w == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(graph.node):  # a cycle (invalid model): keep the file's order
        return list(graph.node)
    return [graph.node[i] for i in order]


def vi_type(vi: onnx.ValueInfoProto) -> tuple[int, tuple | None]:
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return tt.elem_type, None
    dims = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param"):
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tt.elem_type, tuple(dims)


def _infer(model: onnx.ModelProto, data_prop: bool = False) -> onnx.ModelProto:
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=data_prop)
    except Exception:  # a >2 GB proto, a bad model: go on with what is declared
        return model


def _collect(g: onnx.GraphProto) -> dict[str, tuple[int, tuple | None]]:
    types: dict[str, tuple[int, tuple | None]] = {}
    for init in g.initializer:
        types[init.name] = (init.data_type, tuple(int(d) for d in init.dims))
    for vi in [*g.input, *g.value_info, *g.output]:
        et, shape = vi_type(vi)
        if et != UNKNOWN or vi.name not in types:
            types[vi.name] = (et, shape)
    return types


def pin_input_dims(model: onnx.ModelProto, dim_values: dict[str, int]) -> onnx.ModelProto:
    """A copy whose graph inputs have the symbolic dims of `dim_values` set to those values."""
    work = onnx.ModelProto()
    work.CopyFrom(model)
    for vi in work.graph.input:
        if vi.type.tensor_type.HasField("shape"):
            for d in vi.type.tensor_type.shape.dim:
                if d.HasField("dim_param") and d.dim_param in dim_values:
                    d.dim_value = int(dim_values[d.dim_param])
    return work


def known_types(model: onnx.ModelProto, max_rounds: int = 256,
                dim_values: dict[str, int] | None = None) -> dict[str, tuple[int, tuple | None]]:
    """name -> (elem_type, shape) from onnx shape inference, inputs, outputs, initializers.

    onnx stops inferring at an op it does not know (onnxruntime's contrib ops),
    and everything downstream stays unknown. For the ops of _SAME_SHAPE_OPS the
    output is declared (type and shape of input 0) and inference runs again,
    so the shapes after each norm are known too (one round per such op depth).
    With `dim_values`, the graph inputs' symbolic dims are pinned to them and
    onnx's data propagation computes shape arithmetic (Shape -> Gather ->
    Slice), so sizes come out concrete: use this to estimate bytes only.
    """
    if dim_values:
        work = pin_input_dims(model, dim_values)
    else:
        work = onnx.ModelProto()
        work.CopyFrom(model)
    prop = bool(dim_values)
    inferred = _infer(work, prop)
    types = _collect(inferred.graph)
    for _ in range(max_rounds):
        added = 0
        for node in work.graph.node:
            if node.op_type not in _SAME_SHAPE_OPS or not node.output or not node.input:
                continue
            out, src = node.output[0], node.input[0]
            if types.get(out, (UNKNOWN, None))[0] != UNKNOWN or types.get(src, (UNKNOWN, None))[0] == UNKNOWN:
                continue
            et, shape = types[src]
            work.graph.value_info.append(helper.make_tensor_value_info(out, et, None if shape is None else list(shape)))
            types[out] = (et, shape)
            added += 1
        if not added:
            break
        inferred = _infer(work, prop)
        types = {**types, **{k: v for k, v in _collect(inferred.graph).items() if v[0] != UNKNOWN or k not in types}}
    return types


def intermediates(model: onnx.ModelProto, dim_values: dict[str, int] | None = None) -> list[TensorInfo]:
    """Every node output in topological order, typed by onnx shape inference.

    onnx does not know onnxruntime's contrib ops (SimplifiedLayerNormalization,
    SkipSimplifiedLayerNormalization, RotaryEmbedding...), so outputs it could
    not type take the type of the node's first typed input (`type_guessed`),
    with a few ops that make ints or bools handled; a shape not inferred stays
    unknown, except for the normalizations and activations of _SAME_SHAPE_OPS.
    With `dim_values` (e.g. {"batch": 20, "sequence": 512}) the shapes are those
    of that batch, as concrete as onnx can make them (for `chunk`; expose with
    the symbolic ones).
    """
    types = known_types(model, dim_values=dim_values)
    out = []
    for order, node in enumerate(topological_nodes(model.graph)):
        first_in = next((types[t] for t in node.input if t and t in types and types[t][0] != UNKNOWN), (UNKNOWN, None))
        for idx, name in enumerate(node.output):
            if not name:
                continue
            et, shape = types.get(name, (UNKNOWN, None))
            guessed = False
            if et == UNKNOWN:
                guessed = True
                if node.op_type == "Cast":
                    et = next((a.i for a in node.attribute if a.name == "to"), UNKNOWN)
                elif node.op_type in INT64_OPS:
                    et = TensorProto.INT64
                elif node.op_type in BOOL_OPS:
                    et = TensorProto.BOOL
                else:
                    et = first_in[0]
            if shape is None and idx == 0 and node.op_type in _SAME_SHAPE_OPS:
                shape = first_in[1]
            types[name] = (et, shape)  # downstream guesses build on this one
            out.append(TensorInfo(name, node_key(node), node.op_type, idx, order, et, shape, guessed))
    return out


# --- exposing tensors --------------------------------------------------------------------


def external_locations(model: onnx.ModelProto) -> list[str]:
    """Relative locations of the external data files the model refers to."""
    return sorted({x.location for x in external_tensors(model)})


def link_external_data(model_dir: Path, locations: list[str], dest: Path, mode: str = "auto") -> list[tuple[Path, str]]:
    """Make each external data file visible in `dest` at the same relative location.

    mode "auto" hard-links the file (same filesystem) and falls back to a
    symlink; "hardlink" / "symlink" force one. Hard links, because onnxruntime
    from 1.24.1 on (checked up to 1.32.0) refuses external data whose resolved
    path escapes the model's directory ("External data path validation
    failed"), which a symlink to the original's directory does; a hard link
    is a file of `dest`. Neither copies nor rewrites a byte: the original's
    inode is only read. Returns (path in dest, "hardlink" | "symlink" | "same").
    """
    done = []
    same_dir = Path(dest).resolve() == Path(model_dir).resolve()
    for loc in locations:
        if location_problem(loc):  # a link made at it would be one outside `dest`
            raise ValueError(f"external data location {loc!r} {location_problem(loc)}")
        src = (Path(model_dir) / loc).resolve()
        link = Path(dest) / loc
        if same_dir:  # the model's own directory: its files are never touched
            done.append((link, "same"))
            continue
        if link.exists() and os.path.samefile(link, src):
            kind = "symlink" if link.is_symlink() else "hardlink"
            if mode in (kind, "auto") and not (mode == "auto" and kind == "symlink"):
                done.append((link, kind))
                continue
            link.unlink()  # a link of ours of the other kind: only this directory entry goes
        elif link.is_symlink():
            link.unlink()  # a stale symlink of ours
        elif link.exists():
            raise FileExistsError(f"{link} exists and is not the model's data file {src}")
        link.parent.mkdir(parents=True, exist_ok=True)
        kind = None
        if mode in ("auto", "hardlink"):
            try:
                os.link(src, link)
                kind = "hardlink"
            except OSError:
                if mode == "hardlink":
                    raise
        if kind is None:
            link.symlink_to(src)
            kind = "symlink"
        done.append((link, kind))
    return done


def expose(model_path: Path, names: list[str], dest: Path, infos: list[TensorInfo] | None = None,
           filename: str | None = None, link: str = "auto") -> Path:
    """Write a copy of the model whose outputs are its own plus `names`; return its path.

    The model is read without its external data and the copy is serialized as
    is, so weights are never loaded or rewritten: the copy (in directory
    `dest`) still refers to its external data files by relative location, and
    those are linked into `dest`. The original files are only read.
    Each added output is declared with its element type (and shape when shape
    inference gave one); a name already an output is not added twice.
    External data files are hard-linked into `dest` when they are on the same
    filesystem, else symlinked (`link`, see link_external_data: onnxruntime
    1.24.1 and later reject a symlink that leaves the model's directory).
    """
    model_path = Path(model_path)
    dest = Path(dest)
    model = onnx.load(str(model_path), load_external_data=False)
    by_name = {i.name: i for i in (infos if infos is not None else intermediates(model))}
    present = {o.name for o in model.graph.output}
    for name in names:
        if name in present:
            continue
        info = by_name.get(name)
        if info is None:
            raise KeyError(f"{name}: not the output of any node of {model_path.name}")
        shape = None if info.type_guessed or info.shape is None else list(info.shape)
        model.graph.output.append(helper.make_tensor_value_info(name, info.elem_type, shape))
        present.add(name)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / (filename or f"{model_path.stem}.exposed.onnx")
    if out.resolve() == model_path.resolve():
        raise ValueError(f"expose would overwrite the original model {model_path}")
    link_external_data(model_path.parent, external_locations(model), dest, link)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, out)
    return out


# --- passes bounded in bytes -------------------------------------------------------------


def dim_values_from_inputs(model: onnx.ModelProto, shapes: dict[str, tuple[int, ...]]) -> dict[str, int]:
    """Symbolic dims of the graph inputs resolved by the shapes of the arrays fed to them."""
    values: dict[str, int] = {}
    for vi in model.graph.input:
        if vi.name not in shapes:
            continue
        _, dims = vi_type(vi)
        for d, n in zip(dims or (), shapes[vi.name]):
            if isinstance(d, str):
                values.setdefault(d, int(n))
    return values


def chunk(infos: list[TensorInfo], budget_bytes: int, dim_values: dict[str, int] | None = None,
          unknown_bytes: int | None = None) -> list[list[TensorInfo]]:
    """Split the tensors to expose into passes, in order, of at most `budget_bytes` each.

    A tensor's size comes from its shape with symbolic dims resolved by
    `dim_values` (e.g. {"batch": 20, "sequence": 512}, see
    dim_values_from_inputs); a size that cannot be resolved counts as
    `unknown_bytes` (default: the largest resolved size, at least 1 MiB, or
    DEFAULT_UNKNOWN_BYTES when none resolves), or less when its rank is known
    and its unresolved dims, each taken as the largest value of `dim_values`,
    bound it lower. Give it infos from `intermediates(model, dim_values)`,
    whose shapes are as concrete as onnx can make them. A single tensor above
    the budget gets a pass of its own.

    This is what bounds the probe worker's memory in a pass: roughly
        model size (weights) + onnxruntime's arena for the activations it would
        need anyway + budget_bytes (the exposed outputs, held until returned)
        + a few times the largest single exposed tensor (the worker's per-output
        statistics make a float64 copy of the finite values, NaN/Inf masks and a
        bytes copy for the sha256, one output at a time).
    """
    sizes = [i.nbytes(dim_values) for i in infos]
    if unknown_bytes is None:
        known = [s for s in sizes if s is not None]
        unknown_bytes = max(max(known), 1 << 20) if known else DEFAULT_UNKNOWN_BYTES
    sizes = [s if s is not None else min(unknown_bytes, _upper_bound(i, dim_values) or unknown_bytes)
             for s, i in zip(sizes, infos)]
    passes: list[list[TensorInfo]] = []
    current: list[TensorInfo] = []
    used = 0
    for info, size in zip(infos, sizes):
        if current and used + size > budget_bytes:
            passes.append(current)
            current, used = [], 0
        current.append(info)
        used += size
    if current:
        passes.append(current)
    return passes


def _upper_bound(info: TensorInfo, dim_values: dict[str, int] | None) -> int | None:
    """Bytes with every unresolved dim taken as the largest known dim value (None if rank unknown)."""
    if info.shape is None or info.elem_type == UNKNOWN or not dim_values:
        return None
    big = max(dim_values.values())
    n = 1
    for d in info.shape:
        n *= d if isinstance(d, int) and d >= 0 else int(dim_values.get(d, big)) if isinstance(d, str) else big
    return n * helper.tensor_dtype_to_np_dtype(info.elem_type).itemsize


def pass_bytes(infos: list[TensorInfo], dim_values: dict[str, int] | None = None, unknown_bytes: int = DEFAULT_UNKNOWN_BYTES) -> int:
    sizes = (i.nbytes(dim_values) for i in infos)
    return sum(unknown_bytes if s is None else s for s in sizes)


# --- transformer layers ------------------------------------------------------------------

_LAYER = re.compile(r"/layers\.(\d+)/")
_RESIDUAL = re.compile(r"/model/layers\.(\d+)/Add(?:_\d+)?")


def layer_of(node_name: str) -> int | None:
    """The layer index of a node named `/model/layers.<i>/...` (also `/<prefix>/layers.<i>/`)."""
    m = _LAYER.search(node_name or "")
    return int(m.group(1)) if m else None


def residual_nodes(model_or_nodes) -> dict[int, list[str]]:
    """layer -> names of its residual Adds, in topological order.

    The residual Adds are the Add nodes directly under `/model/layers.<i>/`,
    named `/model/layers.<i>/Add` or `/model/layers.<i>/Add_<k>`: Adds inside a
    sub-block (self_attn, mlp, input_layernorm...) are not the residual stream.
    Accepts a ModelProto, a GraphProto, NodeProtos or TensorInfos.
    """
    if isinstance(model_or_nodes, onnx.ModelProto):
        items = [(node_key(n), n.op_type) for n in topological_nodes(model_or_nodes.graph)]
    elif isinstance(model_or_nodes, onnx.GraphProto):
        items = [(node_key(n), n.op_type) for n in topological_nodes(model_or_nodes)]
    else:
        items = []
        for x in model_or_nodes:
            if isinstance(x, TensorInfo):
                if x.index == 0:
                    items.append((x.node, x.op_type))
            elif isinstance(x, onnx.NodeProto):
                items.append((node_key(x), x.op_type))
            else:
                items.append((x[0], x[1]))
    layers: dict[int, list[str]] = {}
    for name, op in items:
        m = _RESIDUAL.fullmatch(name)
        if op == "Add" and m:
            layers.setdefault(int(m.group(1)), []).append(name)
    return dict(sorted(layers.items()))
