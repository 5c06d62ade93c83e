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

Over a range (`compare_range`, `bisect compare --from A --to B`) the same
comparison is made at each release that the first pair and another both have
a wheel of for the target; a release one of them lacks is said, never probed.
Each pair's releases are probed in its own run as above (made once, reused
after), and the document, the divergence of each pair release by release, is
kept in a run of its own (compare.json) for the dashboard. Its sentence names
where each pair first diverges, where it agrees again, and where its max
|diff| moves by more than CHANGE times the reference's max |x|.
"""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass

import numpy as np

from harness.errors import UsageError
from harness.metrics import REL_FLOOR, cosine_text
from harness.metrics import compare as compare_arrays
from harness.plan import Plan, make_plan
from harness.probe import Ahead
from harness.releases.packages import Package, parse_build_info
from harness.releases.versions import installable, parse_version
from harness.request import SearchSpec
from harness.results.evidence import COMPARE_KIND
from harness.results.store import COMPARE, RunStore
from harness.runners import Log, quiet
from harness.session import probe_outcome
from harness.triage.options import triage_store
from harness.verdicts import bound_text, rows_summary
from harness.vocabulary import binding_of

PAIR = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*):([A-Za-z0-9_-]+)")
DEFAULT_COSINE = 0.999
FAILED = ("error", "crash", "timeout")  # the release cannot run the model with that pair: a difference in itself
# A change of a pair's max |diff| between two releases is named when it exceeds this fraction of the reference's
# max |x|: metrics.REL_FLOOR, the scale under which the harness already judges differences absolutely. It is one
# to two fp16 ulps of the output's largest value (an ulp is 2^-10 of it at most): two builds that round one
# fp16 output differently move that much without computing anything else; an fp32 output's rounding is far below.
CHANGE = REL_FLOOR


def parse_pair(text: str, base: Package) -> Package:
    """PACKAGE:EP (onnxruntime-openvino:openvino) as a Package with `base`'s sources and provider options
    (the options go to every pair whose provider is not the CPU one)."""
    m = PAIR.fullmatch(text.strip())
    if not m:
        raise UsageError(f"{text!r}: expected PACKAGE:EP, e.g. onnxruntime-openvino:openvino")
    name, ep = m.groups()
    return dataclasses.replace(base, name=name, ep=ep, ep_options=base.ep_options if ep != "cpu" else ())


@dataclass
class Probed:
    """One pair's probe of one release: the judged record, the outputs it saved (None unless it ran), its run."""

    package: Package
    record: dict
    outputs: dict | None
    run_id: str


def check_pairs(packages: list[Package]) -> None:
    """Two pairs or more, none twice, each a package and provider the harness runs (before any listing)."""
    from harness import request

    if len(packages) < 2:
        raise UsageError("give two PACKAGE:EP pairs or more, e.g. onnxruntime:cpu onnxruntime-openvino:cpu")
    labels = [p.label for p in packages]
    twice = sorted({x for x in labels if labels.count(x) > 1})
    if twice:
        raise UsageError(f"{twice[0]}: given twice")
    for p in packages:  # every pair's package and provider (a GPU, a directory) before any listing
        request.package(p)


def _pair_spec(spec: SearchSpec, package: Package, from_: str, to: str, flags: tuple[str, str]) -> SearchSpec:
    return dataclasses.replace(spec, package=package, from_=from_, to=to, range_flags=flags, resume=None,
                               reference=None, reference_release=None)


def _probed(plan: Plan, version: str, rec: dict) -> Probed:
    outputs = plan.store.outputs(version) if rec["status"] == "ran" else None
    return Probed(plan.runner.package, rec, outputs, plan.store.run_id)


def compare(spec: SearchSpec, version: str, packages: list[Package], cosine: float = DEFAULT_COSINE,
            observer=None, log: Log = quiet, command: list[str] | None = None) -> dict:
    """Probe `version` of every package of `packages` on the spec's model and batch; the comparison document.

    Every pair's request is checked before the first probe of any.
    """
    from harness import request

    check_pairs(packages)
    specs = [_pair_spec(spec, p, version, version, ("--version", "--version")) for p in packages]
    for s in specs:
        request.check(s)
    started = time.perf_counter()
    probed = []
    for i, s in enumerate(specs):
        plan = make_plan(s, command, log)  # the ordinary run of this package and provider: its probes are reused
        # the bound of every line counts the pairs still to come: one probe each
        seen = Ahead(observer, len(specs) - 1 - i) if observer is not None else None
        probed.append(_probed(plan, version, probe_outcome(plan, [version], seen).records[version]))
    return comparison(version, specs[0].model, probed, cosine, started)


def comparison(version: str, model: str, probed: list[Probed], cosine: float, started: float) -> dict:
    """The comparison document of one release: each pair of `probed` against the first."""
    pairs, first = [], None
    for p in probed:
        row = _row(p.package, p.record, p.run_id)
        if first is None:
            first = (row, p.outputs)
        else:
            row.update(_against(row, p.outputs, *first, cosine))
        pairs.append(row)
    first_row = pairs[0]
    if first_row["status"] != "ran":
        for row in pairs[1:]:
            if not row.get("diverges"):  # one that ran where the first failed diverges already
                row.update(diverges=None, why=f"not compared: {first_row['label']} did not run")
    diverging = [r["label"] for r in pairs[1:] if r.get("diverges")]
    doc = {"version": version, "model": model, "cosine_bound": cosine, "pairs": pairs,
           "reference_pair": first_row["label"], "diverging": diverging,
           "provenance": {k: v for k, v in (pairs[0].get("provenance") or {}).items()
                          if k in ("arch", "backend", "python", "cpu")},
           "seconds": round(time.perf_counter() - started, 3)}
    doc["message"] = sentence(doc)
    return doc


# --- over a range ------------------------------------------------------------------------------


def compare_range(spec: SearchSpec, packages: list[Package], cosine: float = DEFAULT_COSINE, observer=None,
                  log: Log = quiet, command: list[str] | None = None) -> dict:
    """Every release from `spec.from_` to `spec.to` of every pair, each compared with the first; the document,
    kept in a run of its own (compare.json). Every request is checked before anything is provisioned."""
    from harness import request

    check_pairs(packages)
    flags = spec.range_flags
    ranges = request.pair_ranges(spec, packages)
    specs = [_pair_spec(spec, p, rs[0].version, rs[-1].version, flags) for p, rs in zip(packages, ranges)]
    for s in specs:
        request.check(s)
    started = time.perf_counter()
    plans = [make_plan(s, command, log) for s in specs]
    store = triage_store(plans[0], COMPARE, {"session_options": spec.session_options,
                                             "pairs": [{"label": p.label, **p.key()} for p in packages]})
    return compare_over(plans, store, specs[0].model, spec.from_, spec.to, cosine, observer, started)


def compare_over(plans: list[Plan], store: RunStore, model: str, from_: str, to: str,
                 cosine: float = DEFAULT_COSINE, observer=None, started: float | None = None) -> dict:
    """The comparison of every release of the plans (one per pair, the first the reference) release by release,
    saved in `store` as compare.json: each pair's probes are its plan's, made now or reused."""
    started = time.perf_counter() if started is None else started
    wheels = []  # per pair: version -> None (a wheel for the target) or why there is none
    for plan in plans:
        kept, left = installable(plan.releases, plan.runner.target)
        wheels.append({**{r.version: None for r in kept}, **{r.version: why for r, why in left}})
    versions = sorted({v for w in wheels for v in w}, key=parse_version)

    def lacks(i: int, v: str) -> str | None:
        """Why pair `i` cannot be probed at `v` (None: it can), in words that hold for any release."""
        pkg = plans[i].runner.package
        if v not in wheels[i]:
            return f"no such {pkg.name} release"
        return None if wheels[i][v] is None else f"{pkg.name}: {wheels[i][v]}"

    wanted = [[v for v in versions if lacks(0, v) is None and any(lacks(j, v) is None for j in range(1, len(plans)))]]
    wanted += [[v for v in versions if lacks(0, v) is None and lacks(i, v) is None] for i in range(1, len(plans))]
    records, made = [], 0
    for i, (plan, vs) in enumerate(zip(plans, wanted)):
        # the bound of every line counts the probes of the pairs still to come (at most: some may be saved)
        seen = Ahead(observer, sum(len(later) for later in wanted[i + 1:])) if observer is not None else None
        outcome = probe_outcome(plan, vs, seen) if vs else None
        records.append(outcome.records if outcome else {})
        made += len(outcome.probed_now) if outcome else 0
    ref_pkg = plans[0].runner.package
    ref_side = {"label": ref_pkg.label, "package": ref_pkg.name, "ep": ref_pkg.ep, "run_id": plans[0].store.run_id,
                "releases": []}
    sides = [{"label": p.runner.package.label, "package": p.runner.package.name, "ep": p.runner.package.ep,
              "run_id": p.store.run_id, "releases": []} for p in plans[1:]]
    provenance = {}
    for v in versions:
        here = [i for i in range(len(plans)) if v in records[i]]
        one = None
        if 0 in here and len(here) > 1:  # the one-release comparison, over the pairs that have this release
            one = comparison(v, model, [_probed(plans[i], v, records[i][v]) for i in here], cosine, time.perf_counter())
            provenance = provenance or one["provenance"]
        rows = dict(zip(here, one["pairs"])) if one else {}
        r0 = rows.get(0)
        ref_side["releases"].append(
            {"release": v, "status": r0["status"], "nan_rows": r0["nan_rows"], "rows": r0["rows"],
             "max_abs": r0["max_abs"], "commit": r0["commit"], "why": r0["reason"], "bad_rows": _bad_rows(r0),
             "outputs_sha256": r0.get("outputs_sha256")} if r0 else
            {"release": v, "status": None, "nan_rows": None, "rows": None, "max_abs": None, "commit": None,
             "why": lacks(0, v) or "no other pair has it", "bad_rows": None, "outputs_sha256": None})
        for i, side in enumerate(sides, 1):
            row = rows.get(i)
            if row is not None:
                cos = row["cosine_min_finite"] if row.get("cosine_min_finite") is not None else row.get("cosine_min")
                entry = {"release": v, "cosine": cos, "max_abs_diff": row.get("abs_diff_max"),
                         "diverges": row.get("diverges"), "why": row.get("why") or "",
                         "bad_rows": _bad_rows(row), "outputs_sha256": row.get("outputs_sha256")}
            else:
                why = f"{lacks(0, v)} (the reference)" if lacks(0, v) else lacks(i, v)
                entry = {"release": v, "cosine": None, "max_abs_diff": None, "diverges": None,
                         "why": f"not compared: {why}", "bad_rows": None, "outputs_sha256": None}
            side["releases"].append(entry)
    total = sum(len(vs) for vs in wanted)
    doc = {"kind": COMPARE_KIND, "run_id": store.run_id, "model": model, "from": from_, "to": to,
           "releases": versions, "reference": ref_side, "pairs": sides, "cosine_bound": cosine,
           "change_threshold": CHANGE, "provenance": provenance, "probes": {"made": made, "reused": total - made},
           "seconds": round(time.perf_counter() - started, 3),
           "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    doc["origins"] = origins(doc)
    doc["message"] = range_sentence(doc)
    store.save_document(COMPARE, doc)
    return doc


def _outputs_digest(rec: dict) -> str | None:
    """One sha256 of a probe's outputs (of each output's own, in order): equal when every output's bits are."""
    import hashlib

    outs = (rec.get("result") or {}).get("outputs")
    if not isinstance(outs, list) or not outs:
        return None
    parts = [f"{o.get('name')}:{o.get('sha256')}" for o in outs if isinstance(o, dict)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _bad_rows(row: dict) -> int | None:
    """The rows a pair's probe made NaN, Inf or all zero (None where it did not run): what a change is counted in."""
    counts = [row.get(k) for k in ("nan_rows", "inf_rows", "zero_rows")]
    return None if row.get("status") != "ran" or any(c is None for c in counts) else sum(counts)


def origins(doc: dict) -> list[dict]:
    """Core or binding: for each pair of another binding than the reference's (harness.vocabulary.BINDINGS), each
    release where the reference's outputs or the pair's change bits from the release compared before them. Both
    changing at one release, the change is in what the two share: onnxruntime's core. One alone, it is in what
    that one does not share with the other: its binding, or its build of the core (onnxruntime-web's is
    WebAssembly, with kernels of its own). Pure."""
    ref = doc["reference"]
    found = []
    for side in doc["pairs"]:
        if binding_of(side.get("package") or "") == binding_of(ref.get("package") or ""):
            continue
        before = None
        for mine, theirs in zip(ref["releases"], side["releases"]):
            now = (mine.get("outputs_sha256"), theirs.get("outputs_sha256"))
            if None in now or theirs["diverges"] is None:
                continue
            if before is not None and now != before[1]:
                ref_moved, pair_moved = now[0] != before[1][0], now[1] != before[1][1]
                found.append({"pair": side["label"], "release": mine["release"], "after": before[0],
                              "reference_changes": ref_moved, "pair_changes": pair_moved,
                              "in": "core" if ref_moved and pair_moved else "binding"})
            before = (mine["release"], now)
    return found


def origin_sentence(doc: dict) -> str:
    """The origins (`origins`) in words, a release at a time: where each change is, core or binding."""
    ref = doc["reference"]["label"]
    by_release: dict[str, list[dict]] = {}
    for o in doc.get("origins") or []:
        by_release.setdefault(o["release"], []).append(o)
    parts = []
    for v, found in by_release.items():
        core = [o["pair"] for o in found if o["in"] == "core"]
        if core:
            parts.append(f"at {v} {', '.join([ref, *core[:-1]])} and {core[-1]} all change: in onnxruntime's core, "
                         "which the bindings share" if len(core) > 1 else
                         f"at {v} {ref} and {core[0]} both change: in onnxruntime's core, which the bindings share")
        for o in found:
            if o["in"] == "binding":
                who, other = (o["pair"], ref) if o["pair_changes"] else (ref, o["pair"])
                parts.append(f"at {v} {who} changes and {other} does not: in what {who} does not share with "
                             f"{other} (its binding, or its build of the core)")
    return ("Core or binding: " + "; ".join(parts) + ".") if parts else ""


def _moved(before: dict, after: dict, scale: float | None) -> bool:
    """Whether a pair's max |diff| moved by more than CHANGE x the reference's max |x| between two releases."""
    a, b = before.get("max_abs_diff"), after.get("max_abs_diff")
    if a is None or b is None or not scale:
        return False
    return abs(b - a) > CHANGE * scale


def pair_story(side: dict, reference: dict) -> str:
    """Where one pair first diverges from the reference, agrees again, or moves by more than the threshold."""
    scale = {e["release"]: e.get("max_abs") for e in reference["releases"]}
    compared = [e for e in side["releases"] if e["diverges"] is not None]
    label = side["label"]
    if not compared:
        return f"{label} is compared at no release"
    events, prev, seen = [], None, False
    for e in compared:
        v = e["release"]
        if prev is None or e["diverges"] != prev["diverges"]:
            if e["diverges"]:
                word = "first diverges at" if prev is not None and not seen else "diverges from"
                events.append(f"{word} {v} ({e['why']})")
                seen = True
            elif prev is not None:
                events.append(f"agrees from {v}")
        elif _moved(prev, e, scale.get(v)):
            events.append(f"max |diff| {prev['max_abs_diff']:.3g} -> {e['max_abs_diff']:.3g} at {v}")
        prev = e
    n = len(compared)
    if not events:
        return f"{label} agrees at every release compared ({n})"
    if len(events) == 1 and all(e["diverges"] for e in compared):
        return f"{label} diverges at every release compared ({n}), " + events[0].removeprefix("diverges ")
    return f"{label} " + "; ".join(events)


def range_sentence(doc: dict) -> str:
    """What the comparison over the range found, pair by pair, and which releases were not compared."""
    ref = doc["reference"]["label"]
    text = (f"From {doc['from']} to {doc['to']}, against {ref}: "
            + "; ".join(pair_story(s, doc["reference"]) for s in doc["pairs"]) + ".")
    said: dict[tuple[str, str], list[str]] = {}  # (pair, why) -> releases
    for s in doc["pairs"]:
        for e in s["releases"]:
            if e["diverges"] is None:
                said.setdefault((s["label"], e["why"].removeprefix("not compared: ")), []).append(e["release"])
    grouped: dict[tuple[str, tuple[str, ...]], list[str]] = {}  # (why, releases) -> pairs: each reason said once
    for (label, why), vs in said.items():
        grouped.setdefault((why, tuple(vs)), []).append(label)
    if grouped:
        text += " Not compared: " + "; ".join(f"{', '.join(labels)} at {', '.join(vs)} ({why})"
                                              for (why, vs), labels in grouped.items()) + "."
    origin = origin_sentence(doc)
    if origin:
        text += " " + origin
    text += (f" A change of max |diff| is named past {doc['change_threshold']:g} x the reference's max |x| "
             "(one to two fp16 ulps of its largest value: less is rounding, not another computation).")
    return text


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
            "outputs_sha256": _outputs_digest(rec) if ran else None,
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
        why.append(f"worst cosine {cosine_text(worst_finite)} < {bound_text(bound)} over the rows finite in both")
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

