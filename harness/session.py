"""The life of a search, written once: plan -> driver loop -> run document.

`bisect run` and `sweep`, matrix cells, mitigation sweeps and the upstream
report all search through `run_search`; the run document it returns is also
kept in the run's store (cells/<key>.json), where the dashboard reads it.
"""

from __future__ import annotations

import platform
import resource
import time
from dataclasses import dataclass

from harness import search
from harness.driver import Driver, Observer, RunOutcome
from harness.plan import Plan
from harness.releases.versions import parse_version
from harness.results.history import RefreshStore, latest_by_version, own_records
from harness.results.store import RunStore
from harness.summary import summary
from harness.verdicts import Predicate, judge


@dataclass
class Search:
    plan: Plan
    outcome: RunOutcome
    doc: dict


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def run_search(plan: Plan, *, mode: str = "regression", sweep: bool = False, observer: Observer | None = None,
               jobs: int = 1, prefetch: bool = True, refresh: bool = False, cell_key: str | None = None,
               extra: dict | None = None) -> Search:
    """Search the plan's releases (bisect, or every release with `sweep`) and keep the run document.

    `refresh` probes every release again (new records are appended, none
    deleted); `extra` keys go into the
    document (a matrix cell's description); `cell_key` names the document in
    the store (default: mode, range and predicate).
    """
    started = time.perf_counter()
    store = RefreshStore.since_now(plan.store.dir) if refresh else plan.store
    driver = Driver(plan.runner, plan.releases, store, plan.job, plan.predicate, plan.reference,
                    observer=observer, jobs=jobs, prefetch=prefetch)
    outcome = driver.run(mode=mode, sweep=sweep)
    return finish(plan, outcome, started, mode=mode, sweep=sweep, refresh=refresh, cell_key=cell_key, extra=extra)


def finish(plan: Plan, outcome: RunOutcome, started: float, *, mode: str = "regression", sweep: bool = False,
           refresh: bool = False, cell_key: str | None = None, extra: dict | None = None) -> Search:
    """The run document of a search's outcome, kept in the run's store (harness.explain adds its explanation)."""
    doc = summary(outcome, mode, plan.store.run_id, sweep=sweep)
    doc["harness"] = {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "wall_s": round(time.perf_counter() - started, 3)}
    doc["predicate"] = str(plan.predicate)
    ref = plan.reference
    doc["bad_means"] = plan.predicate.words(ref.label if ref else "the reference")
    doc["reference"] = {"kind": ref.kind, "id": ref.id, "label": ref.label} if ref else None
    doc["refresh"] = refresh
    doc["generated"] = _now()
    doc["host"] = {"machine": platform.machine(), "node": platform.node()}
    default_key = f"{doc['mode']}-{plan.releases[0].version}-{plan.releases[-1].version}-{plan.predicate}"
    # one document per predicate: no `>` or `<` in file names
    doc["cell"] = {"key": cell_key or default_key.replace(">", "_").replace("<", "_")}
    doc.update(extra or {})
    plan.store.save_summary(cell_key or doc["cell"]["key"], doc)
    return Search(plan, outcome, doc)


def probe_releases(plan: Plan, versions: list[str], observer: Observer | None = None,
                   jobs: int = 1) -> dict[str, dict]:
    """Judged records of `versions` (probed now, `jobs` at once, unless the run already holds them)."""
    return probe_outcome(plan, versions, observer, jobs).records


def probe_outcome(plan: Plan, versions: list[str], observer: Observer | None = None, jobs: int = 1) -> RunOutcome:
    """The driver's outcome over just `versions`: their judged records and which were probed now."""
    wanted = [r for r in plan.releases if r.version in set(versions)]
    return Driver(plan.runner, wanted, plan.store, plan.job, plan.predicate, plan.reference,
                  observer=observer, jobs=jobs, prefetch=False).run(sweep=True)


# --- reading a search back ---------------------------------------------------------------------


def judged_records(store: RunStore, predicate: Predicate) -> dict[str, dict]:
    """The newest record of each release of a run's own search, judged (triage series left out)."""
    return {v: judge(r, predicate) for v, r in latest_by_version(own_records(store.records())).items()}


@dataclass
class Boundary:
    releases: list  # the releases from the first to the last probed one
    last_good: str | None
    first_bad: str | None
    untested: list[str]  # releases between the two that could not be judged or were not probed
    monotone: bool


def boundary_in(records: dict[str, dict], listing: list) -> Boundary:
    """Last good and first bad release that judged records show, over the span they cover.

    A search cut short still gives the best bracket its probes show.
    """
    probed = sorted(records, key=parse_version)
    span = [r for r in listing if parse_version(probed[0]) <= parse_version(r.version) <= parse_version(probed[-1])]
    known = [records[r.version]["verdict"] if r.version in records else None for r in span]
    step = search.bisect_step(known, "regression")
    lo = hi = None
    if step.status == "found":
        lo, hi = step.lo, step.hi
    elif step.status == "probing":
        first = next(((a, b) for a, b in search.transitions(known) if known[a] == "good"), None)
        if first:
            lo, hi = first
    if lo is None:
        return Boundary(span, None, None, [], step.monotone)
    return Boundary(span, span[lo].version, span[hi].version, [r.version for r in span[lo + 1:hi]], step.monotone)
