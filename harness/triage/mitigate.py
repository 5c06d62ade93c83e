"""Mitigation check: keep the culprit nodes (and the residual stream around them) in fp32.

The patch is what a careful exporter writes (cf. the mobius RMSNorm fix: Cast to
fp32 before the arithmetic that overflows, compute in fp32, cast back where the
values are small again). Here it is done on the graph:

1. Culprits: the explanation's suspect (`run --explain` / `bisect diff`), the
   first node whose output a consumer read as non-finite on the first bad release
   (`TraceResult.first_nonfinite`), and nodes given with --node.
2. Magnitudes: the fp32 reference model (an embedded model's fp32 twin, else the
   fp16 model converted here: `to_fp32`) is traced on a release; every fp16
   tensor of the original whose fp32 value passes `hot` x 65504 (default 50 %)
   is "hot".
3. The island: the culprits, the producers of hot tensors, and, closed forward,
   every consumer of a hot tensor an island node produces, so no value past the
   fp16 range is ever rounded back. The island stops where values are small
   again (a norm's output, a scaled-down product).
4. The patch (`fp32_island`): inside the island every fp16 tensor becomes an
   fp32 copy named `<name>/fp32`; fp16 initializers are converted exactly; other
   fp16 inputs get a Cast to fp32; an island output needed outside it (or a
   graph output) gets a Cast back to fp16 under its original name; a Cast to
   fp16 inside the island casts to fp32 instead. The graph's interface
   (inputs, outputs, dtypes) does not change, so the same batch feeds it.

The patch and `to_fp32` (every node in the island) are graph operations of
harness/graphs/fp32.py.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from harness import metrics
from harness.graphs import surgery
from harness.graphs.fp32 import FP16, elem_types, fp32_island, strip

HOT = 0.5  # of 65504


@dataclass
class IslandPlan:
    culprits: list[str]
    hot: dict[str, float]  # tensor -> fp32 max |x| (past the threshold)
    island: list[str]  # node names, topological order
    reasons: dict[str, str] = field(default_factory=dict)


def choose_island(model: onnx.ModelProto, culprits: list[str], magnitudes: dict[str, float],
                  hot: float = HOT) -> IslandPlan:
    """Culprits + producers of hot fp16 tensors, closed over consumers of hot island outputs."""
    limit = hot * metrics.FP16_MAX
    types = elem_types(model)
    nodes = surgery.topological_nodes(model.graph)
    keys = [surgery.node_key(n) for n in nodes]
    hot_t = {t: v for t, v in magnitudes.items() if types.get(t) == FP16 and v is not None and v > limit}
    reasons: dict[str, str] = {}
    island: set[str] = set()
    for c in culprits:
        if c in keys:
            island.add(c)
            reasons.setdefault(c, "culprit")
    for n, k in zip(nodes, keys):
        for o in n.output:
            if o in hot_t:
                island.add(k)
                reasons.setdefault(k, f"produces `{o}` (max |x| {hot_t[o]:.6g} in fp32)")
    changed = True
    while changed:
        changed = False
        hot_out = {o for n, k in zip(nodes, keys) if k in island for o in n.output if o in hot_t}
        # a culprit's fp16 inputs that are hot come from a producer already in; its outputs may be hot too
        for n, k in zip(nodes, keys):
            if k not in island and any(t in hot_out for t in n.input):
                island.add(k)
                reasons[k] = "reads a hot value of the island: " + ", ".join(f"`{t}`" for t in n.input if t in hot_out)
                changed = True
    order = [k for k in keys if k in island]
    return IslandPlan([c for c in culprits if c in keys], hot_t, order, reasons)


def magnitudes_from_trace(trace_result) -> dict[str, float]:
    """max |x| per tensor of a trace of the fp32 reference (names of a converted model mapped back)."""
    out = {}
    for n in trace_result.nodes:
        for t in n.outputs:
            if not t.available:
                continue
            v = t.max_abs if not t.nonfinite else float("inf")
            if v is not None:
                out[strip(t.name)] = v
    return out


def save_model(model: onnx.ModelProto, path: Path) -> tuple[Path, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = model.SerializeToString()
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path, hashlib.sha256(data).hexdigest()


def load_outputs(path: Path) -> dict[str, np.ndarray] | None:
    if not Path(path).exists():
        return None
    with np.load(path) as d:
        return {k: d[k] for k in d.files}


def describe_island(plan: IslandPlan) -> str:
    return json.dumps({"culprits": plan.culprits, "island": plan.island, "hot": plan.hot}, indent=1)


# --- the check: patch, sweep the range, compare with fp32 ------------------------------------


MITIGATION = "mitigation"  # the run document that holds the result


def culprits_of(plan, mode: str = "regression", jobs: int = 1, log=None) -> dict:
    """The boundary of the plan's range and the nodes the explanation names (reusing the run's evidence)."""
    from harness.explain.boundary import explanation, traced
    from harness.session import run_search

    log = log or (lambda msg: None)
    found = run_search(plan, mode=mode, jobs=jobs)
    step, records = found.outcome.step, found.outcome.records
    info = {"status": step.status, "last_good": None, "first_bad": None, "suspect": None,
            "first_nonfinite": None, "explanation": None,
            "original": {v: r["verdict"] for v, r in records.items()}}
    if step.status == "found":
        lo, hi = plan.releases[step.lo].version, plan.releases[step.hi].version
        info.update(last_good=lo, first_bad=hi)
        expl = explanation(plan, lo, hi, log=log)
        bad = traced(plan, hi)
        info.update(suspect=expl.get("suspect"), explanation=expl.get("text"), first_nonfinite=bad.first_nonfinite)
    else:
        last = plan.releases[-1].version
        if records.get(last, {}).get("verdict") == "bad":
            bad = traced(plan, last)
            info.update(first_bad=last, first_nonfinite=bad.first_nonfinite)
    return info


def reference_model(plan, given: Path | None) -> tuple[Path, str]:
    """(path, how) of the fp32 reference: --reference-model, else the model in fp32 (harness.reference)."""
    if given:
        return Path(given), "given with --reference-model"
    from harness.models.fp32 import fp32_model

    return fp32_model(plan.probe_inputs.model, plan.runner.cache_dir)


def _sweep(spec, jobs: int = 1):
    from harness.plan import make_plan
    from harness.session import run_search

    found = run_search(make_plan(spec), sweep=True, jobs=jobs)
    return found.plan, found.outcome


def check(plan, spec, *, reference: Path | None = None, nodes: tuple[str, ...] = (), hot: float = HOT,
          jobs: int = 1, log=None) -> dict:
    """Patch the model at the culprits, sweep the plan's range with it and with the fp32 reference."""
    import dataclasses

    from harness.explain import trace as tr

    log = log or (lambda msg: None)
    out_dir = plan.store.subdir("mitigation")
    found = culprits_of(plan, jobs=jobs, log=log)
    culprits = [c for c in (found.get("suspect"), found.get("first_nonfinite"), *nodes) if c]
    culprits = list(dict.fromkeys(culprits))
    ref_path, ref_how = reference_model(plan, reference)
    by_version = {r.version: r for r in plan.releases}
    at = found.get("first_bad") or plan.releases[-1].version
    log(f"fp32 magnitudes: tracing the reference model on {at}")
    ref_trace = tr.trace(plan.runner, by_version[at], ref_path, plan.probe_inputs.batch,
                         plan.runner.cache_dir / "trace-work" / plan.store.run_id / f"reference-{at}",
                         outputs=plan.job.outputs, timeout=plan.job.timeout)
    original = onnx.load(str(plan.probe_inputs.model.path))
    island = choose_island(original, culprits, magnitudes_from_trace(ref_trace), hot)
    if not island.island:
        raise ValueError("nothing to keep in fp32: no culprit node and no fp16 value near the fp16 range")
    patched = fp32_island(original, set(island.island))
    patched_path, patched_sha = save_model(patched, out_dir / f"{plan.probe_inputs.model.name}.fp32-island.onnx")
    log(f"patched model: {patched_path} ({len(island.island)} nodes in fp32)")
    base = dataclasses.replace(spec, inputs=plan.probe_inputs.batch, outputs=plan.job.outputs, resume=None,
                               bad_if="nan-or-inf", reference=None)
    log(f"sweeping {len(plan.releases)} releases with the patched model")
    pplan, pout = _sweep(dataclasses.replace(base, model=str(patched_path)), jobs)
    log(f"sweeping {len(plan.releases)} releases with the fp32 reference")
    rplan, rout = _sweep(dataclasses.replace(base, model=str(ref_path)), jobs)
    rows = []
    for r in plan.releases:
        v = r.version
        prec, rrec = pout.records.get(v, {}), rout.records.get(v, {})
        dist = None
        a, b = load_outputs(pplan.store.outputs_path(v)), load_outputs(rplan.store.outputs_path(v))
        if a is not None and b is not None:
            names = [n for n in (list(plan.job.outputs) or sorted(a)) if n in a and n in b]
            dist = {n: metrics.compare(a[n], b[n]) for n in names}
        rows.append({"version": v, "original": found["original"].get(v), "patched": prec.get("verdict"),
                     "patched_why": prec.get("why"), "reference": rrec.get("verdict"), "distance": dist})
    judged = [row for row in rows if row["patched"] in ("good", "bad")]
    doc = {
        "kind": "mitigation",
        "run_id": plan.store.run_id,
        "model": plan.probe_inputs.model.name,
        "provenance": plan.runner.provenance(),
        "range": [plan.releases[0].version, plan.releases[-1].version],
        "boundary": {k: found.get(k) for k in ("status", "last_good", "first_bad")},
        "culprits": island.culprits,
        "suspect": found.get("suspect"),
        "first_nonfinite": found.get("first_nonfinite"),
        "hot_threshold": hot * metrics.FP16_MAX,
        "hot": island.hot,
        "island": island.island,
        "reasons": island.reasons,
        "reference": {"path": str(ref_path), "how": ref_how, "traced_on": at, "run_id": rplan.store.run_id},
        "patched": {"path": str(patched_path), "sha256": patched_sha, "run_id": pplan.store.run_id},
        "releases": rows,
        "all_clean": bool(judged) and len(judged) == len(rows) and all(row["patched"] == "good" for row in rows),
    }
    worst = [d["cosine_min"] for row in rows for d in (row["distance"] or {}).values()
             if isinstance(d, dict) and d.get("cosine_min") is not None]
    maxabs = [d["max_abs_diff"] for row in rows for d in (row["distance"] or {}).values()
              if isinstance(d, dict) and d.get("max_abs_diff") is not None]
    doc["worst_cosine"] = min(worst) if worst else None
    doc["worst_max_abs"] = max(maxabs) if maxabs else None
    bad = [row["version"] for row in rows if row["patched"] != "good"]
    doc["message"] = (
        f"Keeping {len(island.island)} nodes in fp32 ({', '.join(island.culprits) or 'hot values only'} and the "
        f"residual stream around them): " +
        (f"clean on all {len(rows)} releases" if not bad else f"still not clean on {', '.join(bad)}") +
        (f"; against the fp32 reference the worst row cosine is {metrics.cosine_text(doc['worst_cosine'])}, the largest |difference| "
         f"{doc['worst_max_abs']:.3g}." if doc["worst_cosine"] is not None else ".")
    )
    plan.store.save_document(MITIGATION, doc)
    return doc
