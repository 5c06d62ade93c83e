"""One release, one batch, several PACKAGE:EP pairs: where do the builds' outputs part?

Each pair is probed as its own run (the run of that package and provider,
kept in the results directory like any other, so a pair probed before is
reused), on the same model, batch, release and target. Per pair: NaN, Inf
and all-zero rows, max |x|, and the worst row's cosine with the first pair's
outputs, and the largest |difference| over the values finite in both. A pair
*diverges* from the first when one fails to load or run (error, crash,
timeout) and the other ran, when its bad-row counts differ or, over the rows
finite in both, a row's cosine is below the bound. A pair whose probe did not
run on its provider (a fallback is a skip), or that fails as the first does,
is not compared, and says why.
"""

from __future__ import annotations

import dataclasses
import re
import time

import numpy as np

from harness.errors import UsageError
from harness.metrics import compare as compare_arrays
from harness.metrics import cosine_text
from harness.plan import make_plan
from harness.releases.packages import Package, parse_build_info
from harness.request import SearchSpec
from harness.runners import Log, quiet
from harness.session import probe_releases
from harness.verdicts import rows_summary

PAIR = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*):([A-Za-z0-9_-]+)")
DEFAULT_COSINE = 0.999
FAILED = ("error", "crash", "timeout")  # the release cannot run the model with that pair: a difference in itself


def parse_pair(text: str, base: Package) -> Package:
    """PACKAGE:EP (onnxruntime-openvino:openvino) as a Package with `base`'s sources and provider options
    (the options go to every pair whose provider is not the CPU one)."""
    m = PAIR.fullmatch(text.strip())
    if not m:
        raise UsageError(f"{text!r}: expected PACKAGE:EP, e.g. onnxruntime-openvino:openvino")
    name, ep = m.groups()
    return dataclasses.replace(base, name=name, ep=ep, ep_options=base.ep_options if ep != "cpu" else ())


def compare(spec: SearchSpec, version: str, packages: list[Package], cosine: float = DEFAULT_COSINE,
            observer=None, log: Log = quiet, command: list[str] | None = None) -> dict:
    """Probe `version` of every package of `packages` on the spec's model and batch; the comparison document.

    Every pair's request is checked before the first probe of any.
    """
    from harness import request

    if len(packages) < 2:
        raise UsageError("give two PACKAGE:EP pairs or more, e.g. onnxruntime:cpu onnxruntime-openvino:cpu")
    labels = [p.label for p in packages]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise UsageError(f"{twice[0]}: given twice")
    specs = [dataclasses.replace(spec, package=p, from_=version, to=version, range_flags=("--version", "--version"),
                                 resume=None, reference=None, reference_release=None) for p in packages]
    for p in packages:  # every pair's package and provider (a GPU, a directory) before any listing
        request.package(p)
    for s in specs:
        request.check(s)
    started = time.perf_counter()
    pairs, first = [], None
    for s in specs:
        plan = make_plan(s, command, log)  # the ordinary run of this package and provider: its probes are reused
        rec = probe_releases(plan, [version], observer)[version]
        outputs = plan.store.outputs(version) if rec["status"] == "ran" else None
        row = _row(s.package, rec, plan.store.run_id)
        if first is None:
            first = (row, outputs)
        else:
            row.update(_against(row, outputs, *first, cosine))
        pairs.append(row)
    first_row = pairs[0]
    if first_row["status"] != "ran":
        for row in pairs[1:]:
            if not row.get("diverges"):  # one that ran where the first failed diverges already
                row.update(diverges=None, why=f"not compared: {first_row['label']} did not run")
    diverging = [r["label"] for r in pairs[1:] if r.get("diverges")]
    doc = {"version": version, "model": specs[0].model, "cosine_bound": cosine, "pairs": pairs,
           "reference_pair": first_row["label"], "diverging": diverging,
           "provenance": {k: v for k, v in (pairs[0].get("provenance") or {}).items()
                          if k in ("arch", "backend", "python", "cpu")},
           "seconds": round(time.perf_counter() - started, 3)}
    doc["message"] = sentence(doc)
    return doc


def _row(package: Package, rec: dict, run_id: str) -> dict:
    s = rows_summary(rec.get("result"))
    ran = rec["status"] == "ran"
    build = parse_build_info(((rec.get("result") or {}).get("onnxruntime") or {}).get("build_info"))
    return {"label": package.label, "package": package.name, "ep": package.ep, "status": rec["status"],
            "verdict": rec.get("verdict"), "reason": None if ran else rec.get("reason"),
            "nan_rows": s["nan_rows"] if ran else None, "inf_rows": s["inf_rows"] if ran else None,
            "zero_rows": s["zero_rows"] if ran else None, "rows": s["rows"] if ran else None,
            "max_abs": s["max_abs"] if ran else None, "providers": rec.get("providers"),
            "commit": build["commit"], "branch": build["branch"], "run_id": run_id,
            "provenance": rec.get("provenance"), "cosine_min": None, "cosine_min_finite": None, "abs_diff_max": None}


def _against(row: dict, outputs, first: dict, first_outputs, bound: float) -> dict:
    """How a pair's outputs stand against the first pair's."""
    if row["status"] in FAILED and first["status"] == "ran":
        return {"diverges": True, "why": f"{row['status']} where {first['label']} ran: {row['reason']}"}
    if row["status"] == "ran" and first["status"] in FAILED:
        return {"diverges": True, "why": f"ran where {first['label']} did not ({first['status']}: {first['reason']})"}
    if row["status"] != "ran":
        return {"diverges": None, "why": f"not compared: {row['reason']}"}
    if first["status"] != "ran" or outputs is None or first_outputs is None:
        return {"diverges": None, "why": "not compared: no outputs of both"}
    worst = worst_finite = biggest = None
    for name in outputs:
        if name not in first_outputs:
            continue
        c = compare_arrays(outputs[name], first_outputs[name])
        if "error" in c:
            return {"diverges": True, "why": f"{name}: {c['error']}"}
        worst = c["cosine_min"] if worst is None else min(worst, c["cosine_min"])
        biggest = c["abs_diff_max"] if biggest is None else max(biggest, c["abs_diff_max"])
        f = _finite_cosine(outputs[name], first_outputs[name])
        if f is not None:
            worst_finite = f if worst_finite is None else min(worst_finite, f)
    why = [f"{word} rows {row[k]} vs {first[k]}" for k, word in (("nan_rows", "NaN"), ("inf_rows", "Inf"),
                                                                  ("zero_rows", "all-zero")) if row[k] != first[k]]
    if worst_finite is not None and worst_finite < bound:
        why.append(f"worst cosine {cosine_text(worst_finite)} < {bound:g} over the rows finite in both")
    return {"cosine_min": worst, "cosine_min_finite": worst_finite, "abs_diff_max": biggest, "diverges": bool(why),
            "why": "; ".join(why) if why else "agrees"}


def _finite_cosine(a: np.ndarray, b: np.ndarray) -> float | None:
    """The worst row cosine over the rows finite in both (None when no row is)."""
    a = np.asarray(a, np.float64).reshape(len(a), -1) if np.ndim(a) else np.asarray(a, np.float64).reshape(1, 1)
    b = np.asarray(b, np.float64).reshape(len(b), -1) if np.ndim(b) else np.asarray(b, np.float64).reshape(1, 1)
    keep = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
    if not keep.any():
        return None
    c = compare_arrays(a[keep], b[keep])
    return c.get("cosine_min")


def sentence(doc: dict) -> str:
    first = doc["reference_pair"]
    v = doc["version"]
    if doc["diverging"]:
        parts = [f"{r['label']} ({r['why']})" for r in doc["pairs"][1:] if r.get("diverges")]
        text = f"At {v}, diverging from {first}: " + "; ".join(parts) + "."
    else:
        text = f"At {v}, every pair compared agrees with {first}."
    skipped = [f"{r['label']} ({r['why'].removeprefix('not compared: ')})" for r in doc["pairs"][1:]
               if r.get("diverges") is None]
    if skipped:
        text += " Not compared: " + "; ".join(skipped) + "."
    return text

