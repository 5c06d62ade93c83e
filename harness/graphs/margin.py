"""The internal fp16 margin: how close a model's hottest fp16 tensors come to 65,504 on a release. Pure: onnx.

The EmbeddingGemma regression was always close: its residual stream sat at 50,000-65,000 until a kernel change
tipped one Add past fp16's ceiling. The outputs (fp32 embeddings) never show that; the tensors inside do.

* Which tensors (`watched`): the residual sums (an Add or Sub of two computed tensors, typed fp16 by onnx or of
  unknown type downstream of a contrib op), then every other fp16 output of an Add, Mul or MatMul; at most LIMIT.
* How they are read (`margin_model`): a copy of the model whose only outputs are each tensor's largest |x|,
  taken after a Cast to fp32, so a value an fp32 island keeps finite past 65,504 reads as its real size rather
  than as a rounded Inf. The probe runs it in a second session after the verdict's, on the same batch: the
  verdict is never taken from a modified model.
* What counts (`margin_of`): only the tensors the release really holds in fp16, as its own optimized graph of
  the unmodified model shows (`held`: harness.graphs.precision.tensor_visibility, the tensor exists under its own
  name). One that onnxruntime keeps only as an fp32 island copy is measured against no ceiling: said to be in
  fp32, with its size beside. What a release holds is a fact of the release and the model, not of the batch: it
  is kept (harness.models.margin_memo) and checked here (`held_from_json`) when read back.
* Which rows (`hot_rows`): the largest |x| of the hottest tensors is held by few rows of a batch; once a probe
  has read the batch one row at a time (`row_of`), later probes read only those rows (and any the verdict's
  outputs show NaN or Inf in), not the whole batch again.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from harness.graphs import precision, surgery
from harness.metrics import FP16_MAX

PREFIX = "ortbisect_margin"
LIMIT = 512  # tensors watched at most: three small nodes each
ARITHMETIC = ("Add", "Mul", "MatMul")
HOT = 1  # the hottest tensors (held in fp16, and apart, in fp32) whose rows a margin on chosen rows reads
HELD = ("seen", "observed-only")  # harness.graphs.precision.tensor_visibility's words
MODEL_FILE = "margin-2.onnx"  # a new name for each change of how the margin model is made: one made before is not used


@dataclass(frozen=True)
class Watched:
    tensors: tuple[str, ...]
    source: str  # "residual sums and fp16 outputs of Add, Mul, MatMul" | "fp16 outputs of Add, Mul, MatMul"

    def output(self, k: int) -> str:
        return f"{PREFIX}/{k}"

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(self.output(k) for k in range(len(self.tensors)))


def residual_sums(model: onnx.ModelProto) -> tuple[object, list, list]:
    """The batch's first-axis dim, and the sums of two computed tensors (a residual stream's Adds; not a bias or
    an epsilon added): those onnx types as fp16 with the batch's first axis, and those it cannot type or shape
    (downstream of onnxruntime's contrib ops) that may be such."""
    feeds = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    dims = [surgery.vi_type(i)[1] for i in feeds]
    batch = next((d[0] for d in dims if d and d[0] is not None), None)
    constant = {t.name for t in model.graph.initializer} | {o for n in model.graph.node if n.op_type == "Constant"
                                                           for o in n.output}
    computed_sums = {n.output[0] for n in model.graph.node
                     if n.op_type in ("Add", "Sub") and len(n.input) == 2 and not set(n.input) & constant}
    typed, unsure = [], []
    for t in surgery.intermediates(model):
        if t.name not in computed_sums:
            continue
        if t.type_guessed or t.shape is None:
            unsure.append(t)
        elif t.elem_type == TensorProto.FLOAT16 and len(t.shape) >= 2 and t.shape[0] == batch:
            typed.append(t)
    return batch, typed, unsure


def watched(model: onnx.ModelProto) -> Watched | None:
    """The tensors a probe of `model` watches, or None for a model with no fp16 arithmetic: the residual sums
    first, then the other fp16 outputs of an Add, Mul or MatMul (where a release keeps every sum in fp32, those
    it holds in fp16 still say how close it runs)."""
    _, typed, unsure = residual_sums(model)
    sums = [t.name for t in typed] + [t.name for t in unsure if t.elem_type in (TensorProto.FLOAT16, 0)]
    makes = {o: n.op_type for n in model.graph.node for o in n.output}
    more = [t.name for t in surgery.intermediates(model)
            if makes.get(t.name) in ARITHMETIC and t.elem_type == TensorProto.FLOAT16 and t.name not in set(sums)]
    found = list(dict.fromkeys(sums + more))[:LIMIT]
    if not found:
        return None
    source = "residual sums and " if sums else ""
    return Watched(tuple(found), f"{source}fp16 outputs of {', '.join(ARITHMETIC)}")


def margin_model(model_path: Path, dest: Path, what: Watched) -> Path:
    """A copy of the graph (in `dest`; its external data stays where it is, neither copied nor linked: the worker
    loads the copy from bytes with the original's directory as its data folder) whose outputs are each watched
    tensor's largest |x| in fp32 (a scalar each)."""
    model = onnx.load(str(model_path), load_external_data=False)
    g = model.graph
    made_at = {o: i for i, n in enumerate(g.node) for o in n.output}
    reads = {}
    for k, name in enumerate(what.tensors):
        p = what.output(k)
        reads[name] = [
            helper.make_node("Cast", [name], [f"{p}/f32"], name=f"{p}/Cast", to=TensorProto.FLOAT),
            helper.make_node("Abs", [f"{p}/f32"], [f"{p}/abs"], name=f"{p}/Abs"),
            helper.make_node("ReduceMax", [f"{p}/abs"], [p], name=f"{p}/ReduceMax", keepdims=0),
        ]
    # onnxruntime orders a graph by a depth-first walk back from its last nodes first: the reads of the latest
    # tensors go first here, so that each tensor is read (and let go) as soon as it is made. In graph order, every
    # watched tensor stayed alive to the end of the run: 19 GB for gemma-300m-synthetic's 20x512 batch.
    for name in sorted(reads, key=lambda t: -made_at.get(t, -1)):
        g.node.extend(reads[name])
    del g.output[:]
    g.output.extend(helper.make_tensor_value_info(p, TensorProto.FLOAT, []) for p in what.outputs)
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / MODEL_FILE
    tmp = dest / f".margin.{os.getpid()}.tmp"  # whole or absent: two runs may make it at once
    tmp.write_bytes(model.SerializeToString())
    os.replace(tmp, out)
    return out


def held(what: Watched, original: onnx.ModelProto, optimized: onnx.ModelProto) -> dict[str, str]:
    """Per watched tensor: "seen" (the release holds it under its own name: in its declared fp16) or
    "observed-only" (only an fp32 island copy), from the release's optimized graph of the unmodified model."""
    visible = precision.tensor_visibility(original, optimized)
    return {t: "seen" if visible.get(t) == "seen" else "observed-only" for t in what.tensors}


def held_from_json(doc: object, what: Watched) -> dict[str, str] | None:
    """A kept `held` read back (untrusted): exactly the watched tensors, each "seen" or "observed-only"; else None."""
    if not isinstance(doc, dict) or set(doc) != set(what.tensors):
        return None
    if not all(isinstance(v, str) and v in HELD for v in doc.values()):
        return None
    return dict(doc)


def rows_from_json(doc: object, what: Watched, rows: int) -> dict[str, tuple[int, float]] | None:
    """A kept `row_of` read back (untrusted): {watched tensor: [row, largest |x| (null: not finite)]} with each row
    inside the batch's `rows`; else None."""
    if not isinstance(doc, dict) or not doc or not set(doc) <= set(what.tensors):
        return None
    out = {}
    for tensor, pair in doc.items():
        if not (isinstance(pair, list) and len(pair) == 2 and type(pair[0]) is int and 0 <= pair[0] < rows):
            return None
        v = pair[1]
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                  and v >= 0):
            return None
        out[tensor] = (pair[0], math.inf if v is None else float(v))
    return out


def learned_rows(raw: dict, what: Watched) -> dict[str, list] | None:
    """What a margin read one row at a time says (its `row_of`), as kept: {tensor: [row, largest |x| or None]}."""
    row_of, values = raw.get("row_of"), raw.get("values")
    if not isinstance(row_of, dict) or not isinstance(values, dict):
        return None
    nonfinite = set(raw.get("nonfinite") or ())
    out = {}
    for k, tensor in enumerate(what.tensors):
        r, v = row_of.get(what.output(k)), values.get(what.output(k))
        if type(r) is int and (what.output(k) in nonfinite or isinstance(v, (int, float))):
            out[tensor] = [r, None if what.output(k) in nonfinite else float(v)]
    return out or None


def hot_rows(row_of: dict[str, tuple[int, float]], what: Watched, held_as: dict[str, str] | None) -> list[int]:
    """The rows that held the largest |x| of the HOT hottest tensors held in fp16 and of the HOT hottest held in
    fp32 (`held_as` None: of the HOT hottest of all), by what a read of every row found."""
    order = {t: k for k, t in enumerate(what.tensors)}
    ranked = sorted(row_of, key=lambda t: (-row_of[t][1], order[t]))
    groups = [ranked] if held_as is None else [[t for t in ranked if held_as.get(t) == h] for h in HELD]
    return sorted({row_of[t][0] for group in groups for t in group[:HOT]})


def margin_of(raw: dict | None, what: Watched, held_as: dict[str, str] | None) -> dict:
    """The margin of one probe from what its worker read (`raw`: {"values": {output: max|x| or None},
    "nonfinite": [outputs]}) and what the release holds in fp16 (`held_as`, from `held`; None: every watched tensor is counted
    as fp16, and said)."""
    if not raw or raw.get("error"):
        return {"error": (raw or {}).get("error") or "the margin was not read", "source": what.source}
    values = raw.get("values") if isinstance(raw.get("values"), dict) else {}
    nonfinite = set(raw.get("nonfinite") or ())
    fp16, fp32 = [], []
    for k, tensor in enumerate(what.tensors):
        out = what.output(k)
        v = math.inf if out in nonfinite else values.get(out)
        if not isinstance(v, (int, float)):
            continue
        # ties (two Infs) go to the earlier tensor: where the overflow starts
        (fp16 if held_as is None or held_as.get(tensor) == "seen" else fp32).append((float(v) / FP16_MAX, -k, tensor))
    doc = {"ceiling": FP16_MAX, "source": what.source, "watched": len(what.tensors),
           "held_in_fp16": len(fp16), "held_in_fp32": len(fp32),
           "precision": "unknown: every watched tensor counted as fp16" if held_as is None else
           "from the release's optimized graph"}
    if fp16:
        top, _, tensor = max(fp16)
        doc.update(fraction=round(top, 6) if math.isfinite(top) else None, overflowed=not math.isfinite(top) or top >= 1,
                   tensor=tensor)
    else:
        doc.update(fraction=None, overflowed=False, tensor=None)
    if fp32:
        top, _, tensor = max(fp32)
        doc["fp32_hottest"] = {"tensor": tensor, "fraction": round(top, 6) if math.isfinite(top) else None}
    return doc
