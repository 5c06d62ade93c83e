"""Which kernel: how the nodes a regression names ran on each release of the pair, from the optimized graphs
the two releases saved (`optimized_model_filepath`) and their session logs' node placements. Pure: onnx only.

For each named node of the ORIGINAL graph: the op it ran as (itself, or the fused op that took it in), the
op's domain, the execution provider it was placed on, its input and output element types, and its precision
class from harness.graphs.precision (fp16, or fp32 between Casts onnxruntime inserted, ...). The two
optimized graphs are compared by op type and domain: fusions added or removed, contrib ops that appeared,
Casts inserted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

import onnx
from onnx import TensorProto

from harness.blame.session_log import SessionLog
from harness.graphs.precision import CAST_PREFIX, optimized_types, precision_map

ONNX_DOMAIN = "ai.onnx"
TYPE_WORDS = {TensorProto.FLOAT16: "fp16", TensorProto.FLOAT: "fp32", TensorProto.BFLOAT16: "bf16",
              TensorProto.DOUBLE: "fp64", TensorProto.INT64: "int64", TensorProto.INT32: "int32",
              TensorProto.INT8: "int8", TensorProto.UINT8: "uint8", TensorProto.BOOL: "bool"}


@dataclass(frozen=True)
class Kernel:
    """How one node of the original graph ran on one release."""

    node: str
    op_type: str  # the op that computed it (its own, or the fused op's)
    domain: str  # of that op: ai.onnx, com.microsoft, ...
    provider: str | None
    precision: str  # harness.graphs.precision.NodePrecision.precision
    optimized_node: str | None
    inputs: tuple[str, ...]  # element types of the op's inputs ("" for an absent optional one)
    outputs: tuple[str, ...]
    casts: int  # Casts onnxruntime inserted right around it

    def document(self) -> dict:
        return asdict(self)


def domain_of(node: onnx.NodeProto) -> str:
    return node.domain or ONNX_DOMAIN


def kernels(original: onnx.ModelProto, optimized: onnx.ModelProto, log: SessionLog | None,
            nodes: list[str]) -> dict[str, Kernel]:
    """The Kernel of each of `nodes` (original node names) on the release that saved `optimized`."""
    precision = precision_map(original, optimized)
    types = optimized_types(original, optimized)
    by_name = {n.name: n for n in optimized.graph.node if n.name}
    own = {n.name: n for n in original.graph.node if n.name}
    found = {}
    for name in nodes:
        p = precision.get(name)
        if p is None:
            continue
        if p.precision in GONE:  # no op of its own ran: the node its output flows into is not its kernel
            orig = own.get(name)
            found[name] = Kernel(node=name, op_type=p.op_type, domain=domain_of(orig) if orig is not None else ONNX_DOMAIN,
                                 provider=None, precision=p.precision, optimized_node=p.optimized_node, inputs=(),
                                 outputs=(), casts=0)
            continue
        opt = by_name.get(p.optimized_node or "")
        words = (lambda ts: tuple(TYPE_WORDS.get(types.get(t), "?") if t else "" for t in ts))
        found[name] = Kernel(
            node=name, op_type=p.ran_as or p.op_type, domain=domain_of(opt) if opt is not None else ONNX_DOMAIN,
            provider=log.provider_of(opt.name) if (log and opt is not None) else (log.all_on if log else None),
            precision=p.fused_precision if p.precision == "fused" and p.fused_precision else p.precision,
            optimized_node=p.optimized_node, inputs=words(opt.input) if opt is not None else (),
            outputs=words(opt.output) if opt is not None else (), casts=len(p.casts))
    return found


# what a node is when no op of its own ran: removed (its output flows on into a node of the original graph),
# constant-folded, or not matched in the optimized graph at all
GONE = frozenset({"removed", "folded", "unknown"})

# ops that only move or reshape values: a change of their precision follows from their neighbours'
MOVES = frozenset({"Reshape", "Transpose", "Unsqueeze", "Squeeze", "Gather", "Concat", "Slice", "Split", "Shape",
                   "Cast", "Identity", "Flatten", "Expand"})


def changed_nodes(original: onnx.ModelProto, good: onnx.ModelProto, bad: onnx.ModelProto) -> list[str]:
    """Original nodes that ran differently on the two releases (another precision, another op, or fused into a node
    of another name): the residual sums first (where an fp16 stream overflows), then other arithmetic, then ops
    that only move values; topological order within each."""
    from harness.graphs.margin import residual_sums

    a, b = precision_map(original, good), precision_map(original, bad)
    changed = [k for k in b if k in a and (a[k].precision, a[k].ran_as, a[k].fused_precision)
               != (b[k].precision, b[k].ran_as, b[k].fused_precision)]
    _, typed, unsure = residual_sums(original)
    sums = {t.name for t in [*typed, *unsure]}
    makes_sum = {n.name for n in original.graph.node if n.output and n.output[0] in sums}
    return sorted(changed, key=lambda k: (k not in makes_sum, b[k].op_type in MOVES, changed.index(k)))


def graph_changes(good: onnx.ModelProto, bad: onnx.ModelProto) -> dict:
    """The two optimized graphs by op type and domain: counts that changed, and the Casts onnxruntime inserted."""
    def counts(m: onnx.ModelProto) -> Counter:
        return Counter(f"{domain_of(n)}:{n.op_type}" for n in m.graph.node)

    def inserted(m: onnx.ModelProto) -> int:
        return sum(1 for n in m.graph.node if n.op_type == "Cast" and n.name.startswith(CAST_PREFIX))

    a, b = counts(good), counts(bad)
    ops = sorted(set(a) | set(b))
    changed = [{"op": op, "good": a.get(op, 0), "bad": b.get(op, 0)} for op in ops if a.get(op, 0) != b.get(op, 0)]
    return {"ops": changed,
            "appeared": [c["op"] for c in changed if not c["good"]],
            "gone": [c["op"] for c in changed if not c["bad"]],
            "inserted_casts": {"good": inserted(good), "bad": inserted(bad)},
            "nodes": {"good": len(good.graph.node), "bad": len(bad.graph.node)}}


def provider_words(provider: str | None) -> str:
    if not provider:
        return "an unknown provider"
    short = provider.removesuffix("ExecutionProvider")
    return f"the {short} provider"


def how(k: Kernel) -> str:
    """How a node ran, in words: 'as an fp16 Add', 'in fp32 between inserted Casts'."""
    op = k.op_type if k.domain == ONNX_DOMAIN else f"{k.domain} {k.op_type}"
    fused = f" (fused into `{k.optimized_node}`)" if k.optimized_node and k.optimized_node != k.node else ""
    if k.precision == "fp32-island":
        return f"in fp32 between inserted Casts, as {op}{fused}"
    if k.precision in ("fp16", "fp32"):
        article = "an" if k.precision[0] in "aeiouf" else "a"
        return f"as {article} {k.precision} {op}{fused}"
    return {"other": "without floating point", "bf16": "in bf16"}.get(k.precision, f"in {k.precision}") + \
        f", as {op}{fused}"


def _is(k: Kernel, past: bool = False) -> str:
    """What a node does on a release, as a verb phrase: 'runs as an fp16 Add on the CPU provider', 'is removed by
    the optimizer (its output goes on to `/n`)'; `past`: 'ran ...', 'was removed ...'."""
    if k.precision == "removed":
        into = f" (its output goes on to `{k.optimized_node}`)" if k.optimized_node else ""
        return f"{'was' if past else 'is'} removed by the optimizer{into}"
    if k.precision == "folded":
        return f"{'was' if past else 'is'} constant-folded"
    if k.precision == "unknown":
        return f"{'was' if past else 'is'} not found in the optimized graph"
    return f"{'ran' if past else 'runs'} {how(k)}"


def _same(good: Kernel, bad: Kernel) -> bool:
    return (good.precision, good.op_type, good.provider) == (bad.precision, bad.op_type, bad.provider)


def sentence(good_version: str, good: Kernel | None, bad_version: str, bad: Kernel) -> str:
    """'in 1.24.1, `/model/layers.4/Add_1` runs as an fp16 Add on the CPU provider; in 1.23.2 it ran in fp32
    between inserted Casts'."""
    on = "" if bad.precision in GONE else f" on {provider_words(bad.provider)}"
    said = f"in {bad_version}, `{bad.node}` {_is(bad)}{on}"
    if good is None:
        return said + f"; {good_version}'s optimized graph does not show it"
    if _same(good, bad):
        return said + f", as in {good_version}"
    where = "" if good.provider == bad.provider or good.precision in GONE else f" on {provider_words(good.provider)}"
    return said + f"; in {good_version} it {_is(good, past=True)}{where}"


def groups(good_version: str, on_good: dict[str, Kernel], bad_version: str, on_bad: dict[str, Kernel],
           nodes: list[str], shown: int = 3) -> list[dict]:
    """`nodes` that ran differently on the two releases, one entry per way they changed (the same op, precision
    and provider on each side), in the order of their first node: {"nodes": [...], "sentence": ...}. A node that
    ran alike on both is in none. Many nodes changed alike are one sentence with their count, not one each."""
    found: dict[tuple, list[str]] = {}
    for n in nodes:
        bad, good = on_bad.get(n), on_good.get(n)
        if bad is None or (good is not None and _same(good, bad)):
            continue
        key = (bad.op_type, _is(bad), bad.provider, None if good is None else (_is(good, past=True), good.provider))
        found.setdefault(key, []).append(n)
    out = []
    for names in found.values():
        if len(names) == 1:
            out.append({"nodes": names, "sentence": sentence(good_version, on_good.get(names[0]), bad_version,
                                                             on_bad[names[0]])})
            continue
        bad, good = on_bad[names[0]], on_good.get(names[0])
        listed = ", ".join(f"`{n}`" for n in names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown
                                                                 else "")
        verb = _is(bad).replace("runs ", "run ", 1).replace("is ", "are ", 1)
        on = "" if bad.precision in GONE else f" on {provider_words(bad.provider)}"
        said = f"in {bad_version}, {len(names)} {bad.op_type} nodes ({listed}) {verb}{on}"
        if good is None:
            said += f"; {good_version}'s optimized graph does not show them"
        else:
            where = "" if good.provider == bad.provider or good.precision in GONE else \
                f" on {provider_words(good.provider)}"
            said += f"; in {good_version} they {_is(good, past=True).replace('was ', 'were ', 1)}{where}"
        out.append({"nodes": names, "sentence": said})
    return out
