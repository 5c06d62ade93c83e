"""The loop that ties search, runner and results together.

search step -> probe the releases it asks for (K at a time) -> record each
probe the moment it ends -> judge it -> search step ... Environments of the
releases the next round may ask for are installed in the background meanwhile.
Progress goes to an observer; this module prints nothing.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.errors import EnvironmentSkip, HarnessError
from harness.history import latest_by_version
from harness.probe import ProbeJob, run_probe
from harness.results import RunStore
from harness.runners.base import Runner, kill_live_workers
from harness.search import Step, bisect_step, sweep_step
from harness.verdicts import Predicate, judge
from harness.versions import Release


class Observer(Protocol):
    def probe_started(self, version: str) -> None: ...
    def probe_finished(self, record: dict, reused: bool) -> None: ...


class Silent:
    def probe_started(self, version: str) -> None:
        pass

    def probe_finished(self, record: dict, reused: bool) -> None:
        pass


@dataclass
class RunOutcome:
    releases: list[Release]
    step: Step
    records: dict[str, dict]  # version -> record (with verdict)
    probed_now: list[str] = field(default_factory=list)  # probes this invocation ran (not reused)

    def verdict(self, i: int) -> str | None:
        rec = self.records.get(self.releases[i].version)
        return rec["verdict"] if rec else None


class Driver:
    def __init__(self, runner: Runner, releases: list[Release], store: RunStore, job: ProbeJob,
                 predicate: Predicate, reference: dict[str, np.ndarray] | None = None,
                 observer: Observer | None = None, jobs: int = 1, prefetch: bool = True):
        self.runner = runner
        self.releases = releases
        self.store = store
        self.job = job
        self.predicate = predicate
        self.reference = reference
        self.observer = observer or Silent()
        self.jobs = max(1, jobs)
        self.prefetch = prefetch
        self._prefetched: set[str] = set()
        self._lock = threading.Lock()

    def judge(self, record: dict) -> dict:
        """The record with its verdict under this run's predicate."""
        outputs = None
        path = self.store.outputs_path(record["version"])
        if self.predicate.needs_reference and path.exists():
            with np.load(path) as data:
                outputs = {k: data[k] for k in data.files}
        return judge(record, self.predicate, self.reference, outputs)

    def run(self, mode: str = "regression", sweep: bool = False) -> RunOutcome:
        index = {r.version: i for i, r in enumerate(self.releases)}
        records: dict[str, dict] = {}
        # The newest record of each release decides (a merge or --refresh may have appended older ones later).
        for version, rec in latest_by_version(self.store.records()).items():
            if version in index:
                records[version] = self.judge(rec)
                self.observer.probe_finished(records[version], reused=True)
        outcome = RunOutcome(self.releases, Step("probing"), records)
        installs = ThreadPoolExecutor(1, thread_name_prefix="prefetch")
        try:
            with ThreadPoolExecutor(self.jobs, thread_name_prefix="probe") as probes:
                return self._loop(outcome, records, probes, installs, mode, sweep)
        finally:
            installs.shutdown(wait=False, cancel_futures=True)

    def _loop(self, outcome: RunOutcome, records: dict, probes: ThreadPoolExecutor,
              installs: ThreadPoolExecutor, mode: str, sweep: bool) -> RunOutcome:
        job = self._job_for_parallel()
        while True:
            known = [records[r.version]["verdict"] if r.version in records else None for r in self.releases]
            step = sweep_step(known, self.jobs) if sweep else bisect_step(known, mode, self.jobs)
            if step.done:
                outcome.step = step
                return outcome
            if self.prefetch:
                for i in step.prefetch:
                    self._prefetch(installs, self.releases[i])
            futures = []
            for i in step.next:
                self.observer.probe_started(self.releases[i].version)
                futures.append(probes.submit(self._probe, self.releases[i], job))
            try:
                for fut in as_completed(futures):
                    rec = fut.result()
                    try:
                        self.store.append(rec)  # on disk before anything else happens
                    except OSError as exc:
                        kill_live_workers()
                        raise HarnessError(
                            f"cannot record the probe of {rec['version']} in {self.store.dir}: {exc.strerror or exc}; "
                            f"{len(self.store.records())} earlier probes are saved, this one is not"
                        ) from None
                    records[rec["version"]] = self.judge(rec)
                    outcome.probed_now.append(rec["version"])
                    self.observer.probe_finished(records[rec["version"]], reused=False)
            except BaseException:
                # Interrupted: what finished is on disk; stop what is still running.
                for fut in futures:
                    fut.cancel()
                kill_live_workers()
                raise

    def _probe(self, release: Release, job: ProbeJob) -> dict:
        # Scratch files live outside the results: a full results disk must not fail the probe itself.
        with tempfile.TemporaryDirectory(prefix=f"ortbisect-{release.version}-") as scratch:
            return run_probe(self.runner, release, job, Path(scratch), self.store.outputs_path(release.version))

    def _prefetch(self, pool: ThreadPoolExecutor, release: Release) -> None:
        with self._lock:
            if release.version in self._prefetched:
                return
            self._prefetched.add(release.version)

        def install():
            try:
                self.runner.prepare(release)
            except EnvironmentSkip:
                pass  # the probe itself will record the skip

        pool.submit(install)

    def _job_for_parallel(self) -> ProbeJob:
        """With K probes at once, give each its share of the cores unless told otherwise."""
        if self.jobs == 1 or "intra_op_num_threads" in self.job.session_options:
            return self.job
        share = max(1, (os.cpu_count() or 1) // self.jobs)
        return dataclasses.replace(self.job, session_options={**self.job.session_options, "intra_op_num_threads": share})
