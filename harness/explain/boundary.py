"""Why a boundary: trace both releases of a pair, diff the traces, keep the evidence with the run.

Traces are kept in the run's store (traces/<version>.json), so a later diff,
report or mitigation reuses them; the explanation of the boundary pair is one
document of the run (explanation.json).
"""

from __future__ import annotations

import json
from pathlib import Path

from packaging.version import Version

from harness.errors import UsageError
from harness.explain import diff as diff_mod
from harness.explain import trace as trace_mod
from harness.explain.chart import headroom_chart
from harness.releases.versions import Release, parse_version
from harness.results.store import EXPLANATION, TRACES
from harness.summary import boundary_of
from harness.vocabulary import DEFAULT_TRACE_BUDGET_MB as DEFAULT_BUDGET_MB


def _quiet(msg: str) -> None:
    pass


def trace_dir(plan) -> Path:
    return plan.store.subdir(TRACES)


def release_of(plan, version: str) -> Release:
    """The plan's release that `version` names (1.20 names 1.20.0, as for pip and `--from`)."""
    wanted = parse_version(version)
    for r in plan.releases:
        if Version(r.version) == wanted:
            return r
    raise UsageError(f"{version}: not in the releases of this run ({plan.releases[0].version}..{plan.releases[-1].version})")


def compared_with(plan, version: str) -> trace_mod.Compared | None:
    """The values the plan's question compares a probe of `version` with (None when it compares with none):
    a file's, the reference release's outputs in the run, the fp32 model's outputs on `version` in the run."""
    from harness.reference import arrays_for, release_outputs

    ref = plan.reference
    if ref is None or not plan.predicate.needs_reference:
        return None
    arrays = ref.arrays
    if arrays is None and ref.kind == "release" and ref.release is not None:
        arrays = release_outputs(plan.store, ref.release.version)
    elif ref.kind != "release":
        arrays = arrays_for(ref, plan.store, version)
    return trace_mod.Compared(ref.id, ref.label, arrays)


def judged_by(plan) -> dict:
    """What a trace's verdict answers: the plan's predicate and the reference it compares with."""
    compares = plan.reference is not None and plan.predicate.needs_reference
    return {"predicate": str(plan.predicate), "reference": plan.reference.id if compares else None}


def traced(plan, version: str, *, budget_mb: int = DEFAULT_BUDGET_MB, dump=(), refresh: bool = False,
           log=_quiet) -> trace_mod.TraceResult:
    """The trace of one release of the plan's model, from the run's store (when its verdict answers the plan's
    question) or made now."""
    release = release_of(plan, version)
    path = trace_dir(plan) / f"{release.version}.json"
    if path.exists() and not refresh and not dump:
        kept = trace_mod.trace_from_json(json.loads(path.read_text()))
        if kept.judged_by == judged_by(plan):
            return kept
    workdir = plan.runner.cache_dir / "trace-work" / plan.store.run_id / release.version
    result = trace_mod.trace(plan.runner, release, plan.probe_inputs.model, plan.probe_inputs.batch, workdir,
                             budget_bytes=budget_mb << 20, dump=list(dump), session_options=plan.job.session_options,
                             timeout=plan.job.timeout, predicate=plan.predicate, log=log, outputs=plan.job.outputs,
                             reference=compared_with(plan, release.version))
    trace_mod.save_json(result, path)
    return result


def chart(traces, path: Path) -> Path | None:
    """The headroom chart of one or more traces, or None where matplotlib is absent."""
    try:
        return headroom_chart(traces, path)
    except ImportError:
        return None


def explain_pair(plan, a: str, b: str, *, budget_mb: int = DEFAULT_BUDGET_MB, refresh: bool = False,
                 log=_quiet) -> tuple[diff_mod.DiffResult, Path | None]:
    """Diff the traces of two releases; the diff and a headroom chart of both go next to the run."""
    ta = traced(plan, a, budget_mb=budget_mb, refresh=refresh, log=log)
    tb = traced(plan, b, budget_mb=budget_mb, refresh=refresh, log=log)
    result = diff_mod.diff(ta, tb, plan.predicate)
    d = trace_dir(plan)
    trace_mod.save_json(result, d / f"diff-{a}-{b}.json")
    return result, chart([ta, tb], d / f"headroom-{a}-{b}.svg")


def explanation(plan, lo: str, hi: str, *, refresh: bool = False, log=_quiet) -> dict:
    """The run's explanation of the pair lo -> hi: kept in the store, made now if absent."""
    doc = plan.store.document(EXPLANATION)
    if doc and doc.get("pair") == [lo, hi] and doc.get("judged_by") == judged_by(plan) and not refresh:
        return doc
    log(f"explaining {lo} -> {hi} (trace and diff)")
    result, chart_path = explain_pair(plan, lo, hi, refresh=refresh, log=log)
    doc = {"text": result.explanation, "suspect": result.suspect, "pair": [lo, hi], "judged_by": judged_by(plan),
           "first_differs": result.first_differs,
           "diff": str(trace_dir(plan) / f"diff-{lo}-{hi}.json"), "chart": str(chart_path) if chart_path else None}
    plan.store.save_document(EXPLANATION, doc)
    return doc


def explain_search(found, log=_quiet) -> dict | None:
    """Explain a search's boundary pair (`run --explain`) into its run document, kept again in the store."""
    doc = found.doc
    if doc["status"] != "found":
        return None
    # the document's pair: a sweep's is its first transition the mode's way, which need not be its first
    lo, hi = boundary_of(doc)
    doc["explanation"] = explanation(found.plan, lo, hi, log=log)
    found.plan.store.save_summary(doc["cell"]["key"], doc)
    return doc["explanation"]
