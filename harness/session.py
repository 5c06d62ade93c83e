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
from harness.errors import UsageError
from harness.plan import Plan
from harness.reference import Reference, judged, restored
from harness.releases.versions import Release, parse_version
from harness.request import Request
from harness.results.history import RefreshStore, latest_by_version, own_records
from harness.results.store import RunStore
from harness.summary import Pair, Question, has_boundary, summary
from harness.verdicts import Predicate, not_compared


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
    question = question_of_plan(plan, doc["mode"])
    _keep(plan.store, doc, question, refresh, cell_key, extra)
    return Search(plan, outcome, doc)


def skipped(store: RunStore, request: Request, why: str, *, sweep: bool = False, cell_key: str | None = None,
            extra: dict | None = None) -> dict:
    """The run document of a search that cannot run here (a matrix cell whose provider's device this host
    lacks): its question, nothing probed, and why; kept in the run's store as a search's document is."""
    releases = [r.version for r in request.releases]
    doc = {"run_id": store.run_id, "mode": "sweep" if sweep else "regression", "status": "skipped", "skipped": why,
           "monotone": True, "releases": releases, "probes": [], "probe_count": 0, "release_count": len(releases),
           "provenance": {}, "last_good": None, "first_bad": None, "commits": None, "untestable": [],
           "message": f"Skipped: {why}; nothing was probed."}
    question = question_of(request.predicate, request.reference, doc["mode"], request.releases)
    return _keep(store, doc, question, False, cell_key, extra)


def _keep(store: RunStore, doc: dict, question: Question, refresh: bool, cell_key: str | None,
          extra: dict | None) -> dict:
    """What every run document says of its question and where it was made; saved under cells/."""
    doc["question"] = question.document()
    doc["predicate"] = str(question.predicate)
    doc["bad_means"] = question.words()
    doc["reference"] = question.reference
    doc["refresh"] = refresh
    doc["generated"] = _now()
    doc["host"] = {"machine": platform.machine(), "node": platform.node()}
    doc["cell"] = {"key": cell_key or question.key}  # one document per question
    doc.update(extra or {})
    store.save_summary(cell_key or doc["cell"]["key"], doc)
    return doc


def question_of_plan(plan: Plan, mode: str) -> Question:
    """The question a plan's search asks (`mode`: regression, fix or sweep)."""
    return question_of(plan.predicate, plan.reference, mode, plan.releases)


def question_of(predicate: Predicate, ref: Reference | None, mode: str, releases: list[Release]) -> Question:
    return Question(predicate, ref.identity() if ref else None, mode, releases[0].version, releases[-1].version)


def bisect_over(plan: Plan, releases: list[Release], *, mode: str = "regression", observer: Observer | None = None,
                jobs: int = 1, prefetch: bool = True) -> RunOutcome:
    """The plan's bisection (its runner, job, predicate, reference and store) over other `releases`: what the run
    holds of them is reused, what is probed is appended to the run; no run document is written (the plan's
    question stays the one its run document asks)."""
    return Driver(plan.runner, releases, plan.store, plan.job, plan.predicate, plan.reference,
                  observer=observer, jobs=jobs, prefetch=prefetch).run(mode=mode)


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


def judged_records(store: RunStore, predicate: Predicate, reference: Reference | None = None,
                   uncompared: bool = False) -> dict[str, dict]:
    """The newest record of each release of a run's own search, judged against `reference` (triage series left
    out): records probed against another reference are compared again from their saved outputs. A release the
    question never compared (verdicts.not_compared) is left out, as if never probed, unless `uncompared`."""
    out = {v: judged(r, predicate, reference, store) for v, r in latest_by_version(own_records(store.records())).items()}
    return out if uncompared else {v: r for v, r in out.items() if not not_compared(r, predicate)}


@dataclass(frozen=True)
class Asked:
    """A run's question as a reader takes it: which document it is from (None: asked on the command line, or
    a run with no document) and why that one."""

    question: Question
    key: str | None
    said: str  # "the run's newest question (regression-...)", for the reader to print
    # the run's other questions, newest first: (key, question, whether its run document found a boundary)
    others: tuple[tuple[str, Question, bool], ...] = ()


def run_questions(store: RunStore) -> tuple[list[tuple[str, Question, bool]], list[str]]:
    """([(key, question, whether it found a boundary)] of each run document under cells/, newest first; [why, for
    each one unreadable])."""
    from harness.results.evidence import EvidenceError
    from harness.results.store import CELLS, read_cell_document

    found, unreadable = [], []
    for path in sorted((store.dir / CELLS).glob("*.json")):
        try:
            doc = read_cell_document(path)
            found.append((doc.generated or "", path.stat().st_mtime, path.stem, Question.of_document(doc.raw),
                          has_boundary(doc.raw)))
        except (OSError, EvidenceError, UsageError) as exc:
            unreadable.append(f"{CELLS}/{path.name}: {exc}")
    found.sort(key=lambda f: f[:2], reverse=True)
    return [(k, q, b) for _, _, k, q, b in found], unreadable


def asked_of_run(store: RunStore, key: str | None = None, bad_if: str | None = None) -> Asked:
    """The question a reader of a run asks: the run document `key` names, else the newest one that found its
    boundary (a later question that found none, a one-release range tried in passing, never takes its place),
    else the newest; `bad_if` asks another predicate over the same range and reference. A run with no document
    asks --bad-if (default nan-or-inf) over the releases it probed."""
    from harness.request import predicate as parse_bad_if

    known, unreadable = run_questions(store)
    if key is not None:
        chosen = next(((k, q) for k, q, _ in known if k == key), None)
        if chosen is None:
            raise UsageError(f"--question {key}: no such run document in {store.dir.name} "
                             f"(its questions: {', '.join(k for k, _, _ in known) or 'none'})")
    elif unreadable:  # the newest question may be the one that cannot be read: none is guessed
        raise UsageError(f"{store.dir.name}: {unreadable[0]}; name the question to answer with --question KEY"
                         + (f" (readable: {', '.join(k for k, _, _ in known)})" if known else ""))
    else:
        chosen = next(((k, q) for k, q, found in known if found), known[0][:2] if known else None)
    if chosen is None:
        probed = sorted(latest_by_version(own_records(store.records())), key=parse_version) or [None]
        pred = parse_bad_if(bad_if or str(Predicate()))
        if pred.needs_reference:
            raise UsageError(f"--bad-if {pred}: compares with a reference, and {store.dir.name} has no run "
                             "document naming one; use `bisect run` with the reference")
        return Asked(Question(pred, None, "regression", probed[0], probed[-1]), None,
                     f"--bad-if {pred} over the releases probed (the run has no run document)")
    k, question = chosen
    others = tuple(x for x in known if x[0] != k)
    newer = [o for o, _, _ in known[:[x[0] for x in known].index(k)]]
    why = f", the newest that found its boundary ({len(newer)} newer found none)" if key is None and newer else ""
    more = f"; {len(others)} other question(s): --question KEY picks one" if key is None and others else ""
    said = f"question {k}{why}{more}"
    if bad_if is not None:
        pred = parse_bad_if(bad_if)
        if pred.needs_reference and not question.reference:
            raise UsageError(f"--bad-if {pred}: compares with a reference, and question {k} has none")
        return Asked(question.asking(pred), None, f"--bad-if {pred} over the range of {said}", others)
    return Asked(question, k, said, others)


def asked_with_records(store: RunStore, key: str | None, bad_if: str | None, what: str) -> tuple[Asked, dict[str, dict]]:
    """The question a reader of a saved run answers (`asked_of_run`) and the run's records judged under it; a
    UsageError when the run recorded no probe (`what`: the reader's verb, "reduce", "blame")."""
    asked = asked_of_run(store, key, bad_if)
    records = judged_for(store, asked.question)
    if not records:
        raise UsageError(f"{store.dir.name}: no probes recorded, nothing to {what}")
    return asked, records


def judged_for(store: RunStore, question: Question, uncompared: bool = False) -> dict[str, dict]:
    """The run's records judged as `question` asks: its predicate, against its reference (`judged_records`)."""
    return judged_records(store, question.predicate, restored(question.reference, store), uncompared)


def question_boundary(records: dict[str, dict], listing: list, question: Question) -> Boundary:
    """The pair of the question's range as its judged records show it, in its mode (a regression's last good and
    first bad, a fix's last bad and first good): the boundary the run document names, whatever was probed
    outside the range."""
    lo, hi = parse_version(question.first), parse_version(question.last)
    inside = {v: r for v, r in records.items() if lo <= parse_version(v) <= hi}
    span = [r for r in listing if lo <= parse_version(r.version) <= hi]
    if not inside:
        return Boundary(span, None, [], True)
    return boundary_in(inside, span, question.mode)


@dataclass
class Boundary:
    releases: list  # the releases from the first to the last probed one
    pair: Pair | None  # the releases the mode's verdicts turn between; None when the records show none
    untested: list[str]  # releases between the two that could not be judged or were not probed
    monotone: bool


def boundary_in(records: dict[str, dict], listing: list, mode: str = "regression") -> Boundary:
    """The pair that judged records show, over the span they cover: the last release of the mode's old verdict
    and the first of its new one (a sweep's question reads as a regression's).

    A search cut short still gives the best bracket its probes show.
    """
    mode = mode if mode in search.MODES else "regression"
    old = search.MODES[mode][0]
    probed = sorted(records, key=parse_version)
    span = [r for r in listing if parse_version(probed[0]) <= parse_version(r.version) <= parse_version(probed[-1])]
    known = [records[r.version]["verdict"] if r.version in records else None for r in span]
    step = search.bisect_step(known, mode)
    lo = hi = None
    if step.status == "found":
        lo, hi = step.lo, step.hi
    elif step.status == "probing":
        first = next(((a, b) for a, b in search.transitions(known) if known[a] == old), None)
        if first:
            lo, hi = first
    if lo is None:
        return Boundary(span, None, [], step.monotone)
    return Boundary(span, Pair.of_span(span[lo].version, span[hi].version, mode),
                    [r.version for r in span[lo + 1:hi]], step.monotone)
