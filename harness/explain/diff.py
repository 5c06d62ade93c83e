"""Line up the traces of two releases by node and say, in words, where and why they part.

The suspect is the node whose execution precision changed where a value a
consumer really read turned non-finite (see `harness.explain.trace` on what "seen"
means), else the first precision change, else the first node whose output differs.

"The first node that differs" has one source: the first node, in topological
order, whose traced output is not bit-identical on the two releases (sha256 of
each tensor). Its difference is then judged under the run's own tolerance (the
bound of its question's rel-diff, abs-diff or cosine condition, read on the
tensors' statistics; a question of non-finite values tolerates any finite
difference), and the sentence says both.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from harness.explain.trace import TensorStat, TraceResult
from harness.graphs import precision
from harness.verdicts import Predicate, bound_text


@dataclass
class DiffResult:
    a: str  # versions
    b: str
    a_verdict: str
    b_verdict: str
    a_nan_rows: int
    b_nan_rows: int
    rows: int
    first_divergent: dict | None = None  # first tensor beyond the run's tolerance (stats proxy)
    first_bits_differ: dict | None = None  # first tensor whose sha256 differs
    first_differs: dict | None = None  # the first node that differs (first_bits_differ), judged and said
    tolerance: str = ""  # the run's own tolerance, in words
    first_nonfinite_flip: dict | None = None  # first tensor non-finite and "seen" on one side only
    first_nonfinite_flip_any: dict | None = None  # same, ignoring visibility
    precision_changes: list[dict] = field(default_factory=list)
    suspect: str | None = None  # node the explanation names as most likely cause
    explanation: str = ""
    failed: list[dict] = field(default_factory=list)  # a release that does not run the model: version, status, reason


def _rel(x, y) -> float:
    if x is None and y is None:
        return 0.0
    if x is None or y is None:
        return math.inf
    d = abs(x - y)
    return 0.0 if d == 0 else d / max(abs(x), abs(y), 1e-30)


def _stats_abs(a: TensorStat, b: TensorStat) -> float:
    if (a.nan, a.inf) != (b.nan, b.inf) or a.shape != b.shape:
        return math.inf
    pairs = [(a.min, b.min), (a.max, b.max), (a.max_abs, b.max_abs)]
    return max((abs(x - y) for x, y in pairs if x is not None and y is not None), default=0.0)


def _stats_rel(a: TensorStat, b: TensorStat) -> float:
    if (a.nan, a.inf) != (b.nan, b.inf) or a.shape != b.shape:
        return math.inf
    return max(_rel(a.max_abs, b.max_abs), _rel(a.min, b.min), _rel(a.max, b.max))


def _prec_key(p: precision.NodePrecision | None):
    if p is None:
        return None
    return (p.precision, p.ran_as, p.fused_precision)


def _prec_doc(p: precision.NodePrecision | None) -> dict | None:
    return asdict(p) if p is not None else None


def describe(p: precision.NodePrecision | dict | None) -> str:
    """Plain words for how a node ran."""
    if p is None:
        return "in an unknown precision"
    d = asdict(p) if isinstance(p, precision.NodePrecision) else p
    prec = d["precision"]
    if prec == "fused":
        inner = {"fp16": "natively in fp16", "fp32-island": "in fp32", "fp32": "in fp32"}.get(d.get("fused_precision"), "")
        return f"fused into {d.get('ran_as')} `{d.get('optimized_node')}`" + (f" ({inner})" if inner else "")
    return {"fp16": "natively in fp16", "fp32-island": "in an fp32 island", "fp32": "in fp32",
            "other": "without floating point", "removed": "removed by the optimizer",
            "folded": "constant-folded", "unknown": "in an unknown way"}.get(prec, prec)


def _tensor_doc(t: TensorStat | None) -> dict | None:
    if t is None:
        return None
    return {k: getattr(t, k) for k in ("dtype", "min", "max", "max_abs", "nan", "inf", "nan_rows", "inf_rows",
                                       "headroom", "visibility", "sha256")}


@dataclass(frozen=True)
class Tolerance:
    """How far two traced tensors may part before the run's question would care: `kind` rel (relative, of the
    statistics), abs (absolute, of the statistics) or nonfinite (only a non-finite value on one side)."""

    kind: str
    bound: float | None
    words: str

    def beyond(self, ta: TensorStat, tb: TensorStat) -> float | None:
        """The measure of the difference when it is beyond this tolerance, else None."""
        if ta.nonfinite != tb.nonfinite or ta.shape != tb.shape:
            return math.inf
        if self.kind == "rel":
            rel = _stats_rel(ta, tb)
            return rel if rel > self.bound else None
        if self.kind == "abs":
            d = _stats_abs(ta, tb)
            return d if d > self.bound else None
        return None


def tolerance(predicate: Predicate | None) -> Tolerance:
    """The run's own tolerance: the tightest bound its question compares outputs with."""
    conds = list((predicate or Predicate()).conditions)
    for kind, read in (("rel-diff", "rel"), ("abs-diff", "abs")):
        bounds = [c.bound for c in conds if c.kind == kind and c.bound is not None]
        if bounds:
            return Tolerance(read, min(bounds), f"{kind}>{bound_text(min(bounds))}")
    cosines = [c.bound for c in conds if c.kind == "cosine" and c.bound is not None]
    if cosines:
        b = max(cosines)
        return Tolerance("rel", max(1.0 - b, 0.0), f"cosine<{bound_text(b)}, read as a relative difference of {1.0 - b:.3g}")
    return Tolerance("nonfinite", None, f"{predicate or Predicate()}: only a value non-finite on one release counts")


def diff(a: TraceResult, b: TraceResult, predicate: Predicate | None = None) -> DiffResult:
    """Line up two traces by node name and say where and why they part, judged under `predicate` (the run's
    question: its tolerance)."""
    tol = tolerance(predicate)
    res = DiffResult(a.version, b.version, a.verdict, b.verdict, a.nan_rows, b.nan_rows, max(a.rows, b.rows))
    res.tolerance = tol.words
    res.failed = [{"version": t.version, "status": t.status, "reason": t.reason} for t in (a, b) if t.status != "ran"]
    if res.failed:
        # a release that cannot run the model has no precision map and no tensors: its failure is the
        # difference (node by node, every node of the other would read "in an unknown precision")
        res.explanation = _failure(a, b)
        return res
    b_nodes = {n.name: n for n in b.nodes}
    for na in a.nodes:
        nb = b_nodes.get(na.name)
        if nb is None:
            continue
        tb_by = {t.name: t for t in nb.outputs}
        for ta in na.outputs:
            tb = tb_by.get(ta.name)
            if tb is None or not ta.available or not tb.available:
                continue
            where = {"node": na.name, "op_type": na.op_type, "tensor": ta.name, "a": _tensor_doc(ta), "b": _tensor_doc(tb)}
            if res.first_bits_differ is None and ta.sha256 != tb.sha256:
                res.first_bits_differ = {**where, "rel": _stats_rel(ta, tb), "abs": _stats_abs(ta, tb)}
            if res.first_divergent is None and ta.sha256 != tb.sha256:
                beyond = tol.beyond(ta, tb)
                if beyond is not None:
                    res.first_divergent = {**where, "rel": _stats_rel(ta, tb), "abs": _stats_abs(ta, tb)}
            if res.first_nonfinite_flip_any is None and ta.nonfinite != tb.nonfinite:
                res.first_nonfinite_flip_any = where
            seen_a = ta.nonfinite and ta.visibility == "seen"
            seen_b = tb.nonfinite and tb.visibility == "seen"
            if res.first_nonfinite_flip is None and seen_a != seen_b:
                res.first_nonfinite_flip = {**where, "side": b.version if seen_b else a.version}
        pa, pb = a.precision.get(na.name), b.precision.get(na.name)
        if (pa is not None or pb is not None) and _prec_key(pa) != _prec_key(pb):
            res.precision_changes.append({"node": na.name, "op_type": na.op_type, "layer": na.layer,
                                          "a": _prec_doc(pa), "b": _prec_doc(pb)})
    res.first_differs = _first_differs(res, tol)
    res.suspect, res.explanation = _explain(a, b, res)
    return res


def _first_differs(res: DiffResult, tol: Tolerance) -> dict | None:
    """The first node that differs (the first not bit-identical), judged under the run's tolerance, in words."""
    first = res.first_bits_differ
    if first is None:
        return None
    beyond = res.first_divergent is not None and res.first_divergent["tensor"] == first["tensor"]
    # measured as the tolerance reads it: an abs-diff question by the statistics' absolute difference
    size, kind = (first["abs"], "an absolute") if tol.kind == "abs" else (first["rel"], "a relative")
    said = (f"`{first['node']}` ({first['op_type']}) is the first node whose output differs: the first, in "
            f"topological order, whose traced output `{first['tensor']}` is not bit-identical on {res.a} and "
            f"{res.b} (sha256 of each tensor)")
    if not math.isfinite(size):
        said += (", with a value non-finite on one release only, or another shape, "
                 + ("beyond" if beyond else "within") + f" the run's tolerance ({res.tolerance}).")
    elif size == 0:
        # a difference the statistics do not show is no difference "of 0": the bits moved, by less than they tell
        said += (f"; its statistics (min, max, largest |x|) are the same on both releases: it moved by less than "
                 "they show.")
    else:
        said += (f", with {kind} difference of {size:.3g} in its statistics (min, max, largest |x|), "
                 + ("beyond" if beyond else "within") + f" the run's tolerance ({res.tolerance}).")
    later = res.first_divergent
    tolerance = f" the run's tolerance ({res.tolerance})" if size == 0 else " it"  # said already where it is not 0
    if later is not None and not beyond:
        said += f" The first beyond{tolerance} is `{later['node']}`'s output `{later['tensor']}`."
    elif later is None and not beyond:
        said += f" No traced output parts beyond{tolerance}."
    return {"node": first["node"], "op_type": first["op_type"], "tensor": first["tensor"], "how": "bit-exact",
            "beyond_tolerance": beyond, "tolerance": res.tolerance, "text": said}


def _failure(a: TraceResult, b: TraceResult) -> str:
    """The difference when one release (or both) does not run the model: its status and message."""
    def failed(t: TraceResult) -> str:
        return f"{t.version} does not run the model ({t.status}): {str(t.reason).rstrip('.')}"

    if a.status != "ran" and b.status != "ran":
        return f"Neither release runs the model, so nothing is compared node by node. {failed(a)}. {failed(b)}."
    bad, ran = (a, b) if a.status != "ran" else (b, a)
    return (f"{failed(bad)}. {ran.version} runs it: {ran.verdict} ({ran.nan_rows} NaN rows of {ran.rows}). "
            "That failure is the difference; nothing is compared node by node.")


def _verdict(t: TraceResult) -> str:
    """A trace's verdict as its question judged it: NaN rows, and what it was compared with."""
    c = t.compared or {}
    seen = [f"{t.nan_rows} NaN rows of {t.rows}"]
    if c.get("comparison_error"):
        seen.append(f"not compared: {c['comparison_error']}")
    elif c.get("identical"):
        seen.append("identical bits to the reference")
    else:
        for key, words in (("cosine_min", "worst row's cosine"), ("rel_diff_max", "max relative difference"),
                           ("abs_diff_max", "max absolute difference")):
            if c.get(key) is not None:
                seen.append(f"{words} {c[key]:.3g}")
    under = (t.judged_by or {}).get("predicate")
    return f"{t.version}: {t.verdict}" + (f" under {under}" if under else "") + f" ({', '.join(seen)})"


def _explain(a: TraceResult, b: TraceResult, res: DiffResult) -> tuple[str | None, str]:
    changes = {c["node"]: c for c in res.precision_changes}
    verdicts = f"{_verdict(a)}; {_verdict(b)}."
    flip = res.first_nonfinite_flip
    if flip:
        bad, good = (b, a) if flip["side"] == b.version else (a, b)
        node, tensor = flip["node"], flip["tensor"]
        tb = bad.tensor(tensor)
        kind = "Inf" if tb and tb.inf else "NaN"
        over = "its output exceeds 65504 there (Inf)" if kind == "Inf" else "its output is NaN there"
        if node in changes:
            pg, pb = good.precision.get(node), bad.precision.get(node)
            return node, (f"`{node}` ran {describe(pg)} on {good.version} and {describe(pb)} on {bad.version}; "
                          f"{over}, the first value a consumer really read as non-finite. {verdicts}")
        consumers = [n for n in bad.nodes if tensor in n.inputs]
        changed = [n.name for n in consumers if n.name in changes]
        tg = good.tensor(tensor)
        if changed:
            c = changed[0]
            # the trace reads a tensor out in its declared dtype: an fp32 island's value reads Inf there too, though
            # the good release's own run never rounded it
            also = (f" The trace reads `{tensor}` as {'Inf' if tg.inf else 'NaN'} on {good.version} too, only because "
                    f"tracing reads it out in fp16: {good.version}'s own run never rounds it.") \
                if tg and tg.nonfinite else ""
            return c, (f"`{c}` ran {describe(good.precision.get(c))} on {good.version} and "
                       f"{describe(bad.precision.get(c))} on {bad.version}. Its input `{tensor}` (from `{node}`) is "
                       f"beyond the fp16 range (65504): on {good.version} it stays in fp32 for `{c}`; on "
                       f"{bad.version} it is rounded to fp16 for `{c}`, becomes {kind}, and the rows turn NaN.{also} "
                       f"{verdicts}")
        if res.precision_changes:
            first = res.precision_changes[0]
            return first["node"], (f"`{node}` is the first node whose output a consumer read as {kind} on "
                                   f"{bad.version} and not on {good.version}; its own precision did not change. The "
                                   f"first precision change is `{first['node']}`: {describe(first['a'])} on {a.version}, "
                                   f"{describe(first['b'])} on {b.version}. {verdicts}")
        return node, (f"`{node}` is the first node whose output is {kind} on {bad.version} and finite on "
                      f"{good.version}, with the same precision on both: a kernel's arithmetic changed. {verdicts}")
    said = f" {res.first_differs['text']}" if res.first_differs else ""
    if res.precision_changes:
        first = res.precision_changes[0]
        return first["node"], (f"No value a consumer read turns non-finite on one release only. The first precision "
                               f"change is `{first['node']}`: {describe(first['a'])} on {a.version}, "
                               f"{describe(first['b'])} on {b.version}.{said} {verdicts}")
    if res.first_differs:
        return res.first_differs["node"], (f"Same precision everywhere.{said} A kernel's arithmetic changed. "
                                           f"{verdicts}")
    return None, (f"Every traced output is bit-identical on {a.version} and {b.version} (sha256 of each tensor); "
                  f"what differs is not among the traced tensors. {verdicts}")
