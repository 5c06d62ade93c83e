"""Where the time went: onnxruntime's own profiler on both releases of a slowdown's boundary pair, lined up per
op type and per node, the largest changes first.

Each release is probed once more with `enable_profiling` over warm runs (series `profile` of the run's store,
never a verdict); the worker keeps each node's median kernel time (harness.worker.profile_summary). The pair's
document is one file of the run (profile.json), read back as untrusted input: `lined_up` takes only rows of the
shape it writes.
"""

from __future__ import annotations

import dataclasses
import json
import math

from harness.metrics import timing_summary
from harness.probe import Prober
from harness.results.evidence import loads
from harness.results.history import latest_by_version, own_records
from harness.results.store import PROFILE, write_atomic

SERIES = "profile"


def nodes_of(record: dict | None) -> dict[str, tuple[str, float]] | None:
    """node -> (op type, median kernel microseconds) of a profiled probe, or None where it has no profile."""
    prof = ((record or {}).get("result") or {}).get("profile")
    if not isinstance(prof, dict) or not isinstance(prof.get("nodes"), list):
        return None
    out: dict[str, tuple[str, float]] = {}
    for row in prof["nodes"][:10000]:
        if (isinstance(row, list) and len(row) == 4 and isinstance(row[0], str) and isinstance(row[1], str)
                and isinstance(row[3], (int, float)) and not isinstance(row[3], bool) and math.isfinite(row[3])
                and row[3] >= 0):
            out[row[0][:200]] = (row[1][:64], float(row[3]))
    return out


def lined_up(old: dict[str, tuple[str, float]], new: dict[str, tuple[str, float]]) -> dict:
    """Per op type and per node: microseconds per run on each release, the change and the ratio, the largest
    increase first; totals of the kernel time. Pure."""
    def table(a: dict[str, float], b: dict[str, float], key: str) -> list[dict]:
        rows = [{key: k, "old_us": a.get(k, 0.0), "new_us": b.get(k, 0.0)} for k in sorted(set(a) | set(b))]
        for r in rows:
            r["change_us"] = r["new_us"] - r["old_us"]
            r["ratio"] = r["new_us"] / r["old_us"] if r["old_us"] > 0 else None
        return sorted(rows, key=lambda r: -r["change_us"])

    def per_op(nodes: dict[str, tuple[str, float]]) -> dict[str, float]:
        sums: dict[str, float] = {}
        for op, us in nodes.values():
            sums[op] = sums.get(op, 0.0) + us
        return sums

    total_old, total_new = sum(us for _, us in old.values()), sum(us for _, us in new.values())
    nodes = table({k: v[1] for k, v in old.items()}, {k: v[1] for k, v in new.items()}, "node")
    ops = {k: v[0] for k, v in {**old, **new}.items()}
    for r in nodes:
        r["op"] = ops[r["node"]]
    return {"old_total_us": total_old, "new_total_us": total_new,
            "ratio": total_new / total_old if total_old > 0 else None,
            "ops": table(per_op(old), per_op(new), "op"), "nodes": nodes}


def sentence(doc: dict) -> str:
    """The one line a report leads with: the op type that gained most, its share of the change; where the runs
    got slower but the kernels did not, that the time went outside them (the session's own work per run)."""
    ops = doc.get("ops") or []
    change = doc["new_total_us"] - doc["old_total_us"]
    run = doc.get("run_us") or {}
    old_run, new_run = run.get(doc["old"]), run.get(doc["new"])
    outside = ""
    if old_run and new_run and new_run - old_run > max(change, 0.0) * 2:
        outside = (f" Timed without the profiler a run took {_time(old_run)} -> {_time(new_run)}: most of "
                   "the increase is outside the kernels (the session's own work per run).")
    if not ops or change <= 0:
        return (f"Kernel time per run {doc['old_total_us'] / 1e3:.2f} ms on {doc['old']} and "
                f"{doc['new_total_us'] / 1e3:.2f} ms on {doc['new']}: no op type got slower.{outside}")
    top = ops[0]
    ratio = f" ({top['ratio']:.2f}x)" if top.get("ratio") else " (new)"
    return (f"Kernel time per run went from {doc['old_total_us'] / 1e3:.2f} ms on {doc['old']} to "
            f"{doc['new_total_us'] / 1e3:.2f} ms on {doc['new']}; {top['op']} took {top['old_us'] / 1e3:.2f} -> "
            f"{top['new_us'] / 1e3:.2f} ms{ratio}, {100 * top['change_us'] / change:.0f}% of the increase.{outside}")


def _time(us: float) -> str:
    return f"{us / 1e3:.3f} ms" if us >= 1000 else f"{us:.1f} us"


def timed_medians_us(store, versions) -> dict[str, float]:
    """Each release's median latency (microseconds) as the search timed it, without the profiler (whose own
    cost per node hides a change in the session's work around the kernels)."""
    newest = latest_by_version(own_records(store.records()))
    out = {}
    for v in versions:
        t = timing_summary((newest.get(v) or {}).get("timing"))
        if t and t.get("candidate_median_s"):
            out[v] = 1e6 * t["candidate_median_s"]
    return out


def profile_pair(plan, old: str, new: str, observer=None) -> dict:
    """Profile both releases (warm runs, the run's model, batch and options) and line them up; kept in the run
    as profile.json. A release that does not run under the profiler is said, not guessed."""
    job = dataclasses.replace(plan.job, profile=True, timing=None, margin=None, repeat=1)
    prober = Prober(plan.runner, plan.store, observer=observer)
    by_version = {r.version: r for r in plan.releases}
    records = {}
    for version in (old, new):
        release = by_version.get(version)
        if release is None:
            raise ValueError(f"{version} is not a release of this run")
        records[version] = prober.probe(release, job, series=SERIES, outputs=None).record
    a, b = nodes_of(records[old]), nodes_of(records[new])
    doc: dict = {"old": old, "new": new, "probes": prober.probes}
    missing = [v for v, n in ((old, a), (new, b)) if n is None]
    if missing:
        doc["error"] = "; ".join(f"{v}: {records[v].get('reason') or 'no profile'}" for v in missing)
    else:
        doc.update(lined_up(a, b))
        doc["runs"] = {v: ((records[v].get("result") or {}).get("profile") or {}).get("runs") for v in (old, new)}
        doc["run_us"] = timed_medians_us(plan.store, (old, new))
        doc["message"] = sentence(doc)
    write_atomic(plan.store.dir / PROFILE, json.dumps(doc, indent=1))
    return doc


def read(run_dir) -> dict | None:
    """The run's profile.json as `profile_pair` wrote it, or None (absent or not of that shape)."""
    try:
        doc = loads((run_dir / PROFILE).read_bytes(), 4 << 20)
    except (OSError, ValueError):  # absent, too big, not JSON: no profile
        return None
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in ("old", "new")):
        return None
    ok = all(isinstance(doc.get(k), (int, float)) for k in ("old_total_us", "new_total_us")) and \
        all(isinstance(doc.get(k), list) for k in ("ops", "nodes"))
    if not ok:
        return {"old": doc["old"], "new": doc["new"], "error": str(doc.get("error") or "no profile")[:300]}
    clean = lambda rows, key: [r for r in rows[:2000] if isinstance(r, dict) and isinstance(r.get(key), str)  # noqa: E731
                               and all(isinstance(r.get(k), (int, float)) for k in ("old_us", "new_us", "change_us"))]
    return {**{k: doc[k] for k in ("old", "new", "old_total_us", "new_total_us")},
            "ratio": doc.get("ratio") if isinstance(doc.get("ratio"), (int, float)) else None,
            "ops": clean(doc["ops"], "op"), "nodes": clean(doc["nodes"], "node"),
            "message": str(doc.get("message") or "")[:500]}
