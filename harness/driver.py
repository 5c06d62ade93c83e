"""The loop that ties search, runner and results together.

search step -> probe the releases it asks for (K at a time) -> record each
probe the moment it ends -> judge it -> search step ... Environments of the
releases the next round may ask for are installed in the background meanwhile.
Progress goes to an observer; this module prints nothing.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np

from harness.errors import EnvironmentSkip, HarnessError
from harness.executors import executor_of
from harness.metrics import probe_metrics
from harness.probe import Observer, ProbeJob, Probed, Prober, Silent, lacks, serving
from harness.reference import (
    FP32_SERIES,
    RELEASE_SERIES,
    Reference,
    arrays_for,
    fp32_record,
    judged,
    release_outputs,
)
from harness.releases.versions import Release
from harness.results.history import latest_by_version, own_records, saved_probe
from harness.results.store import RunStore, load_outputs
from harness.runners import kill_live_workers, retire_early_workers
from harness.runners.base import Runner
from harness.search import Step, bisect_step, probes_left, sweep_step
from harness.verdicts import Predicate

__all__ = ["Driver", "Observer", "RunOutcome", "Silent"]


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
                 predicate: Predicate, reference: Reference | None = None,
                 observer: Observer | None = None, jobs: int = 1, prefetch: bool = True):
        self.runner = runner
        self.releases = releases
        self.store = store
        self.job = job
        self.predicate = predicate
        self.reference = reference
        self.observer = observer or Silent()
        # a timed probe pins its two workers to one CPU and runs them in turn: one probe at a time
        self.jobs = 1 if job.timing is not None else max(1, jobs)
        # probes on a cluster are installed on their nodes: nothing is installed or started here ahead of them
        self.executor = executor_of(runner)
        self.prefetch = prefetch and not self.executor.remote
        self._prefetched: set[str] = set()  # installed in the background
        self._started: set[str] = set()  # their workers started early
        self._lock = threading.Lock()
        self.prober = Prober(runner, store, predicate)

    def judge(self, record: dict) -> dict:
        """The record with its verdict under this run's predicate (compared again if it was against another reference)."""
        return judged(record, self.predicate, self.reference, self.store)

    def run(self, mode: str = "regression", sweep: bool = False) -> RunOutcome:
        index = {r.version: i for i, r in enumerate(self.releases)}
        self._reference_release()
        records: dict[str, dict] = {}
        # The newest record of each release decides (a merge or --refresh may have appended older ones later);
        # one that lacks what this search measures (its margin, its timed rounds) is probed again
        for version, rec in latest_by_version(own_records(self.store.records())).items():
            if version in index and self.answers(rec):
                if self._needs_fp32(rec):
                    self._probe_fp32(self.releases[index[version]])
                records[version] = self.judge(rec)
                self.observer.probe_finished(records[version], reused=True)
        outcome = RunOutcome(self.releases, Step("probing"), records)
        installs = ThreadPoolExecutor(1, thread_name_prefix="prefetch")
        try:
            # workers of the likely next probes start (import) while the current ones run; one probe each
            with serving(self.jobs, keep=False) as probes:
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
            self.observer.expect(probes_left(known, mode, self.jobs, sweep))
            futures = []
            # a Ctrl-C anywhere from the first submit on stops the probes: one may be waiting for another
            # run's probe of its release, and only a stopped prober ends that wait
            try:
                for i in step.next:
                    self.observer.probe_started(self.releases[i].version)
                    futures.append(probes.submit(self._probe, self.releases[i], job))
                if self.prefetch:
                    # The likely next releases are installed in the background; a worker starts early (imports, at
                    # idle priority) only for a probe sure to run, queued behind this round's first `jobs`: importing
                    # for every way a round can end took more from the running probes than it hid, natively and
                    # under QEMU.
                    queued, likely = step.next[self.jobs:], step.prefetch
                    # an early worker whose install thread came after its probe had started is not needed
                    retire_early_workers({self.releases[i].version for i in step.next})
                    for i in (*queued, *likely):
                        self._prefetch(installs, self.releases[i], start=i in queued)
                pending = set(futures)
                while pending:
                    # never an unbounded wait: a Ctrl-C that lands while this thread sleeps in a lock is
                    # raised within a second, not when the probe ends (a held worker may never end)
                    done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
                    for fut in done:
                        probed = fut.result()  # on disk already (its fp32 reference's probe before it)
                        version = probed.record["version"]
                        records[version] = self.judge(probed.record)
                        if not probed.reused:  # else another run probed it while this one waited
                            outcome.probed_now.append(version)
                        self.observer.probe_finished(records[version], reused=probed.reused)
            except BaseException:
                # Interrupted: what finished is on disk; what still runs is stopped and not recorded
                self.prober.stop()
                for fut in futures:
                    fut.cancel()
                kill_live_workers()
                raise

    def _probe(self, release: Release, job: ProbeJob, series: str | None = None) -> Probed:
        """The probe of `release` with its metrics, recorded; with an fp32 reference, the reference's probe
        (recorded) before it. A record another run saved meanwhile (it held the probe's lock) is reused."""
        fp32 = fp32_arrays = None
        if self._fp32_missing(release.version):
            fp32, fp32_arrays = self._probe_fp32(release)
        ref = self.reference

        def measure(rec: dict) -> dict:
            arrays = outputs = None
            if ref is not None:
                arrays = fp32_arrays if fp32 is not None else self._reference_arrays(release.version)
                outputs = self.store.outputs(release.version, series) if arrays is not None else None
            m = probe_metrics(rec.get("result"), outputs, arrays, ref.id if arrays is not None else None)
            if ref is not None and arrays is None:
                m["comparison_error"] = (
                    f"the model in fp32 did not run on {release.version}: {fp32.get('reason')}" if fp32
                    else f"no outputs of {ref.label} to compare with")
            return m

        def saved() -> dict | None:
            rec = saved_probe(self.store.records(), release.version, series)
            return rec if rec is not None and self.answers(rec, series) else None

        return self.prober.probe_once(release, job, saved, series=series, measure=measure,
                                      on_wait=self._waiting(release))

    def answers(self, rec: dict, series: str | None = None) -> bool:
        """Whether a stored record holds what this search's probes measure (probe.lacks), and, where the search
        compares with a reference the record was not compared with, the outputs to compare."""
        if lacks(rec, self.job) is not None:
            return False
        ref = self.reference
        return (ref is None or rec.get("status") != "ran" or (rec.get("metrics") or {}).get("reference") == ref.id
                or self.store.outputs_path(rec["version"], series).exists())

    def _waiting(self, release: Release):
        return lambda: self.observer.probe_waiting(release.version)

    # --- references ------------------------------------------------------------------------------

    def _reference_release(self) -> None:
        """The reference release's outputs, from the run or probed now (inside the range: as its own probe)."""
        ref = self.reference
        if ref is None or ref.kind != "release" or ref.arrays is not None:
            return
        version = ref.release.version
        ref.arrays = release_outputs(self.store, version)
        if ref.arrays is not None:
            return
        inside = next((r for r in self.releases if r.version == version), None)
        series = None if inside else RELEASE_SERIES
        release = inside or ref.release
        self.observer.probe_started(version)
        saved_ref, self.reference = self.reference, None  # the reference's own probe compares with nothing
        try:
            rec = self._probe(release, self.job, series).record
        finally:
            self.reference = saved_ref
        if rec["status"] != "ran":
            raise HarnessError(f"--reference-release {version}: the reference did not run ({rec['status']}: "
                               f"{rec.get('reason')}); choose another release")
        ref.arrays = self.store.outputs(version, series)

    def _fp32_missing(self, version: str) -> bool:
        if self.reference is None or self.reference.kind != "fp32":
            return False
        return self._fp32_record(version) is None

    def _needs_fp32(self, rec: dict) -> bool:
        """A stored probe compared with no fp32 run of its release yet: that run is made now."""
        return (rec.get("status") == "ran" and self._fp32_missing(rec["version"])
                and (rec.get("metrics") or {}).get("reference") != self.reference.id)

    def _fp32_record(self, version: str) -> dict | None:
        return fp32_record(self.store, self.reference, version)

    def _probe_fp32(self, release: Release) -> tuple[dict, dict[str, np.ndarray] | None]:
        """The fp32 model on `release`: its record (series reference-fp32) and its outputs."""
        job = dataclasses.replace(self._job_for_parallel(), model=self.reference.model, repeat=1, margin=None,
                                  timing=None)
        rec = self.prober.probe_once(release, job, lambda: self._fp32_record(release.version), series=FP32_SERIES,
                                     tags={"reference": self.reference.id}, on_wait=self._waiting(release)).record
        path = self.store.outputs_path(release.version, FP32_SERIES)
        return rec, (load_outputs(path) if rec["status"] == "ran" else None)

    def _reference_arrays(self, version: str) -> dict[str, np.ndarray] | None:
        return arrays_for(self.reference, self.store, version)

    def _prefetch(self, pool: ThreadPoolExecutor, release: Release, start: bool) -> None:
        """Install `release` in the background and, with `start`, start its worker early (imports overlap)."""
        with self._lock:
            if release.version in (self._started if start else self._prefetched):
                return
            self._prefetched.add(release.version)
            if start:
                self._started.add(release.version)

        def install():
            try:
                env, _ = self.runner.prepare_verified(release, report=False)  # nothing runs in it before it is verified
            except EnvironmentSkip:
                return  # the probe itself will record the skip
            if start:
                self.runner.start_early(env, self.job.memory_limit_mb, release.version)

        pool.submit(install)

    def _job_for_parallel(self) -> ProbeJob:
        """With K probes at once, give each its share of the cores unless told otherwise; a probe on a cluster
        gets the CPUs its task asked Ray for."""
        if "intra_op_num_threads" in self.job.session_options or (self.jobs == 1 and not self.executor.remote):
            return self.job
        share = self.executor.cpus_per_probe or max(1, (os.cpu_count() or 1) // self.jobs)
        return dataclasses.replace(self.job, session_options={**self.job.session_options, "intra_op_num_threads": share})

