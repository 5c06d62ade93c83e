"""Search on the fewest rows that decide, then hold the boundary to the user's full batch.

An emulated probe of a full-size model costs minutes per row of 512 tokens
(QEMU runs onnxruntime's kernels two orders of magnitude slower than the host),
so probing the whole batch at every step of a bisection takes hours. Rows of
a batch are independent in the models this tool bisects (each row's outputs
depend on that row alone), so a row that is bad on a release makes the whole
batch bad there. The search therefore:

1. orders the rows by how likely they are to flip and how cheap they are:
   when probes run on another arch than the host's, a native pass of the
   model's scout copy (harness.triage.scout) puts first the rows whose fp16 values
   reach 65504, shortest first; otherwise the longest rows come first. It
   searches the range on the first row; while both endpoints agree on those
   rows (no row flips), it doubles the rows and tries again;
2. once the rows show a boundary, probes the last good and first bad release
   on the full batch, exactly as the user gave it;
3. if the full batch is already bad at that last good release, another row
   flips earlier: its bad rows join the searched ones and the search goes on;
   if the full batch is not bad at the first bad release (rows were not
   independent), the plain search on the full batch decides.

Each search on a subset is an ordinary run of its own (its batch is the
subset, kept in the user's run under rows/), so it is resumable and its
probes are evidence like any other; the user's run holds the full-batch
probes and a document that says which rows decided each probe.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time

import numpy as np

from harness.driver import Observer, RunOutcome
from harness.errors import UsageError
from harness.models import inputs
from harness.plan import Plan, make_plan
from harness.request import SearchSpec
from harness.search import MODES, Step
from harness.session import Search, finish, probe_outcome, run_search
from harness.summary import sentence

STRATEGIES = ("all", "fewest")


def subset_batch(plan: Plan, arrays: dict[str, np.ndarray], rows: list[int]):
    """The batch cut to `rows` (padding trimmed to the longest kept row), kept in the user's run."""
    cut = inputs.take_rows(arrays, sorted(rows))
    tag = hashlib.sha256(",".join(map(str, sorted(rows))).encode()).hexdigest()[:10]
    path = plan.store.subdir("rows") / f"rows-{len(rows)}-{tag}.npz"
    if not path.exists():
        tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
        np.savez(tmp, **cut)
        os.replace(tmp, path)
    return path


def search(spec: SearchSpec, plan: Plan, *, observer: Observer | None = None, jobs: int = 1, prefetch: bool = True,
           log=None, cell_key: str | None = None, extra: dict | None = None) -> Search:
    """The boundary of `plan`'s range, found on the fewest rows and verified on the full batch; `cell_key` and
    `extra` name and add to the user's run document as `session.run_search` takes them (a matrix cell)."""
    started = time.perf_counter()
    kept = {"cell_key": cell_key, "extra": extra}
    say = log or (lambda msg: None)
    old, new = MODES["regression"]
    arrays = inputs.load_npz(plan.job.inputs)
    order, ranked = _order(plan, arrays, say)
    rows, searches = order[:1], []
    while True:
        say(f"searching on {_rows(rows)} of {len(order)} ({ranked['order'] if len(rows) < len(order) else 'all'})")
        sub_spec = dataclasses.replace(spec, inputs=subset_batch(plan, arrays, rows), resume=None)
        sub = run_search(make_plan(sub_spec), observer=observer, jobs=jobs, prefetch=prefetch)
        d = sub.doc
        searches.append({"rows": sorted(rows), "run_id": d["run_id"], "status": d["status"],
                         "probes": [{"version": p["version"], "verdict": p["verdict"], "nan_rows": p.get("nan_rows")}
                                    for p in d["probes"]]})
        ends = [p["verdict"] for p in d["probes"] if p["version"] in (d["releases"][0], d["releases"][-1])]
        if d["status"] == "endpoints_agree" and set(ends) == {old} and len(rows) < len(order):
            rows = order[:min(len(order), 2 * len(rows))]  # no row flipped: take in twice as many
            continue
        if d["status"] != "found":
            return _full_search(plan, searches, "the rows searched did not bracket a boundary", observer, jobs,
                                prefetch, log, started, ranked, **kept)
        lo, hi = d[f"last_{old}"], d[f"first_{new}"]
        chunks = inputs.length_chunks(arrays)
        say(f"verifying {lo} on every row of the batch: {len(order)} rows in {len(chunks)} probes of similar length")
        held = _every_row(spec, plan, arrays, chunks, lo, observer, jobs)
        bad_at_lo = sorted(set(r for c in held for r in c["bad_rows"]) - set(rows))
        if not bad_at_lo and all(c["verdict"] == old for c in held):
            return _finish(plan, sub, searches, held, rows, lo, hi, started, ranked, **kept)
        if bad_at_lo:
            say(f"rows {bad_at_lo} are bad at {lo} already: they flip earlier; searching on them too")
            rows = sorted(set(rows) | set(bad_at_lo), key=order.index)
            continue
        return _full_search(plan, searches, f"the batch's rows at {lo} were " +
                            ", ".join(sorted({c['verdict'] for c in held})), observer, jobs, prefetch,
                            log, started, ranked, **kept)


def _order(plan: Plan, arrays: dict, say) -> tuple[list[int], dict]:
    """The rows in the order the search takes them in, and how that order was made (for the run document).

    Probes on another arch than the host's (emulated, or on a remote engine) cost far more than a native pass,
    so the rows are ranked by a native pass of the model's scout copy (harness.triage.scout): first the rows whose
    fp16 values reach 65504, shortest first, then the others, nearest the ceiling first. Otherwise, and when
    no such pass can be had: longest first."""
    from harness.runners import native_arch

    if plan.runner.target.arch != native_arch():
        from harness.triage import scout

        found = scout.host_order(plan, inputs.length_chunks(arrays), lambda rows: subset_batch(plan, arrays, rows),
                                 say)
        if found:
            lengths = inputs.row_lengths(arrays)
            peaks = found["peaks"]
            return scout.order_rows(peaks, lengths), {
                "order": "rows reaching fp16's ceiling natively first, shortest first; then nearest it",
                "ranked_on": found["on"], "host_peaks": [p if math.isfinite(p) else None for p in peaks]}
    return inputs.rows_by_length(arrays), {"order": "longest first"}


def _every_row(spec: SearchSpec, plan: Plan, arrays: dict, chunks: list[list[int]], version: str, observer,
               jobs: int) -> list[dict]:
    """Every row of the batch on `version`, one probe per group of rows (a run of its own each), `jobs` at once."""
    from harness.probe import serving

    def probe(chunk: list[int]) -> dict:
        cplan = make_plan(dataclasses.replace(spec, inputs=subset_batch(plan, arrays, chunk), resume=None))
        # jobs: each of the `jobs` probes at once runs on its share of the cores, as in the search
        rec = probe_outcome(cplan, [version], observer, jobs=jobs).records[version]
        bad = inputs.bad_rows(cplan.store.outputs(version) or {}, list(cplan.job.outputs) or None)
        return {"rows": sorted(chunk), "run_id": cplan.store.run_id, "verdict": rec["verdict"],
                "bad_rows": [sorted(chunk)[i] for i in bad], "why": rec.get("why"),
                "outputs": cplan.store.outputs(version) or {}}

    # one release and model: its workers serve every group, on one session when the batch alone changes
    with serving(jobs) as pool:
        return list(pool.map(probe, chunks))


def check(mode: str, sweep: bool, strategy: str) -> None:
    """Refuse what the fewest-rows search cannot answer, before anything runs."""
    if strategy == "all":
        return
    if sweep:
        raise UsageError("--rows fewest: a sweep probes every release; it applies to `bisect run`")
    if mode != "regression":
        raise UsageError("--rows fewest: a row that is good on a release says nothing of the others, so only "
                         "--mode regression can be searched on fewer rows")


def _rows(rows: list[int]) -> str:
    return f"row {rows[0]}" if len(rows) == 1 else f"rows {', '.join(map(str, sorted(rows)))}"


def _keep(found: Search, searches: list[dict], verified: dict | None, fallback: str | None, started: float,
          ranked: dict) -> Search:
    """The user's run document with the rows that decided each probe, counting every probe made."""
    plan, doc = found.plan, found.doc
    n = len(inputs.rows_by_length(inputs.load_npz(plan.job.inputs)))
    doc["rows"] = {"strategy": "fewest", "batch_rows": n, **ranked, "searches": searches,
                   "subset_probes": sum(len(s["probes"]) for s in searches), "verified_on_full_batch": verified,
                   "fallback": fallback}
    # every probe made: on the rows searched, and (when verified) one per group of rows on the last good release
    doc["probe_count"] = doc["rows"]["subset_probes"] + (len(verified["last_good"]["groups"]) if verified
                                                          else doc["probe_count"])
    doc["message"] = sentence(doc, found.outcome, "regression")
    if verified:
        lo, hi, groups = verified["last_good"]["version"], verified["first_bad"]["version"], verified["last_good"]["groups"]
        doc["message"] = (f"Last good: {lo}, first bad: {hi} ({doc['rows']['subset_probes']} probes on "
                          f"{_rows(searches[-1]['rows'])} of {n}, then {len(groups)} on every row; "
                          f"{doc['release_count']} releases); every row of the batch is good on {lo}.")
    doc["harness"]["wall_s"] = round(time.perf_counter() - started, 3)
    plan.store.save_summary(doc["cell"]["key"], doc)
    return found


def _finish(plan: Plan, sub: Search, searches: list[dict], held: list[dict], rows: list[int], lo: str, hi: str,
            started: float, ranked: dict, cell_key: str | None = None, extra: dict | None = None) -> Search:
    """The user's run document: the boundary of the rows searched, held to every row of the batch."""
    i, j = (next(k for k, r in enumerate(plan.releases) if r.version == v) for v in (lo, hi))
    outcome = RunOutcome(plan.releases, Step("found", lo=i, hi=j), sub.outcome.records, sub.outcome.probed_now)
    agree = _same_rows(sub.plan.store.outputs(lo) or {}, sorted(rows), held)
    verified = {"last_good": {"version": lo, "rows": len(inputs.rows_by_length(inputs.load_npz(plan.job.inputs))),
                              "groups": [{k: c[k] for k in ("rows", "run_id", "verdict", "why")} for c in held]},
                "first_bad": {"version": hi, "rows_searched": sorted(rows), "nan_rows": sub.outcome.records[hi].get("nan_rows"),
                              "bad_rows": [sorted(rows)[k] for k in inputs.bad_rows(
                                  sub.plan.store.outputs(hi) or {}, list(plan.job.outputs) or None)]},
                "rows_independent": agree}
    return _keep(finish(plan, outcome, started, cell_key=cell_key, extra=extra), searches, verified, None, started,
                 ranked)


def _same_rows(searched: dict, rows: list[int], held: list[dict]) -> dict:
    """Whether the searched rows gave the same outputs alone as among the rest of the batch (row independence):
    the largest difference per output whose rows have one shape in both probes."""
    diffs = {}
    for name, alone in searched.items():
        for pos, r in enumerate(rows):
            group = next(c for c in held if r in c["rows"])
            among = group["outputs"].get(name)
            if among is None or among.shape[1:] != alone.shape[1:] or alone.dtype.kind not in "fc":
                continue
            d = float(np.max(np.abs(alone[pos].astype(np.float64) - among[group["rows"].index(r)].astype(np.float64))))
            diffs[name] = max(diffs.get(name, 0.0), d)
    return {"max_abs_diff": diffs, "same": bool(diffs) and all(v == 0.0 for v in diffs.values())}


def _full_search(plan: Plan, searches: list[dict], why: str, observer, jobs, prefetch, log,
                 started: float, ranked: dict, cell_key: str | None = None, extra: dict | None = None) -> Search:
    (log or (lambda msg: None))(f"{why}: searching on the full batch")
    found = run_search(plan, observer=observer, jobs=jobs, prefetch=prefetch, cell_key=cell_key, extra=extra)
    return _keep(found, searches, None, why, started, ranked)
