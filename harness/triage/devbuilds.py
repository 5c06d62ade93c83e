"""Past the release boundary: the development builds between the last good and the first bad release.

A pair of releases spans hundreds of commits. The wheel sources of a run may
hold builds between the two (a development build on the index, the nightly
feed through --index-url, wheels built at commits through --find-links):
`listing` reads them (pre-releases included, from the run's own sources)
before anything is probed, and `search` bisects [L, builds..., B] with the
run's plan: its runner, job, predicate and reference, and its store, so the
records of L and B are reused and each build's probe is one more record of
the run. In --mode fix the pair is the last bad and first good release.

The run's question and boundary stay the releases' (`report`, `reduce` and
`drift` read them from the run document); what the builds show is a section
of that document, `dev_builds`. A build with no wheel for the target is not
probed: it is skipped, with the reason. A build that is probed and cannot be
judged (skip, error, crash, timeout, nondeterministic) is stepped around as
the release search steps around a release: one between the builds' last good
and first bad is named untestable, the change being in it or at the first bad.
"""

from __future__ import annotations

import dataclasses

from harness.errors import UsageError
from harness.probe import Observer, Silent
from harness.releases.versions import Release, builds_between, installable
from harness.request import SearchSpec, package, release_listing
from harness.search import MODES
from harness.session import Search, bisect_over
from harness.summary import boundary_of, build_of, compare_url


def check(strategy: str) -> None:
    """Refuse what the search into builds cannot continue from, before anything runs."""
    if strategy != "all":
        raise UsageError("--into-dev-builds: the fewest-rows search keeps its boundary's probes in runs of "
                         "their own; give --rows all")


def listing(spec: SearchSpec) -> list[Release]:
    """The run's wheel sources listed with their pre-releases and development builds (--offline: the cache)."""
    return release_listing(spec.cache_dir, spec.offline, package(dataclasses.replace(spec.package, pre=True)))


class _BuildsOnly:
    """The run's observer, told only of the builds: the release search has shown the two ends already."""

    def __init__(self, observer: Observer, ends: set[str]):
        self.observer, self.ends = observer, ends

    def probe_started(self, version: str) -> None:
        if version not in self.ends:
            self.observer.probe_started(version)

    def probe_waiting(self, version: str) -> None:
        if version not in self.ends:
            self.observer.probe_waiting(version)

    def probe_finished(self, record: dict, reused: bool) -> None:
        if record["version"] not in self.ends:
            self.observer.probe_finished(record, reused)

    def expect(self, left: int | None, step: str | None = None) -> None:
        self.observer.expect(left, step)


def search(found: Search, listed: list[Release], *, observer: Observer | None = None, jobs: int = 1,
           prefetch: bool = True) -> dict | None:
    """The builds' boundary between the releases' (the section `dev_builds`, also kept in the run document),
    or None when the release search found no boundary to continue from."""
    doc, plan = found.doc, found.plan
    pair = boundary_of(doc)
    if pair is None or doc["mode"] not in MODES:
        return None
    old, new = MODES[doc["mode"]]
    lo, hi = pair
    between = builds_between(listed, lo, hi)
    builds, skipped = installable(between, plan.runner.target)
    section = {"between": [lo, hi], "status": "found", "listed": [r.version for r in between],
               "skipped": [{"version": r.version, "why": why} for r, why in skipped]}
    records, last, first, untestable, monotone = found.outcome.records, lo, hi, [], True
    probed: list[dict] = []
    if not between:
        section["status"] = "none_between"
    elif not builds:
        section["status"] = "none_installable"
    else:
        ends = {r.version: r for r in plan.releases if r.version in (lo, hi)}
        span = [ends[lo], *builds, ends[hi]]
        outcome = bisect_over(plan, span, mode=doc["mode"], observer=_BuildsOnly(observer or Silent(), set(ends)),
                              jobs=jobs, prefetch=prefetch)
        records, step = outcome.records, outcome.step
        section["status"], monotone = step.status, step.monotone
        if step.status == "found":
            last, first = span[step.lo].version, span[step.hi].version
            untestable = [span[i].version for i in step.untestable]
        else:  # the ends are the releases' own verdicts: only a record changed under the run would get here
            last = first = None
        probed = [{"version": r.version, "verdict": records[r.version]["verdict"],
                   "why": records[r.version].get("why"), "commit": build_of(records[r.version])["commit"],
                   "reused": r.version not in outcome.probed_now}
                  for r in builds if r.version in records]
    commits = {v: build_of(records.get(v))["commit"] if v else None for v in (last, first)}
    section.update({"probed": probed, "probes": len(probed), "untestable": untestable, "monotone": monotone,
                    f"last_{old}": last, f"first_{new}": first,
                    "commits": {f"last_{old}": commits[last], f"first_{new}": commits[first],
                                "compare": compare_url(commits[last], commits[first])}})
    doc["dev_builds"] = section
    plan.store.save_summary(doc["cell"]["key"], doc)
    return section
