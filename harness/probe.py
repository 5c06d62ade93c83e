"""One probe: install (or reuse) a release, run the worker on the batch, say how it ended.

`Prober` owns a probe's whole life for every caller (the search, reduce,
options, repeat, rows, trace, scout): job -> runner -> metrics -> append ->
judge -> observer; `serving()` is the one pool of live workers and threads
that serves many probes. Callers say what to run and how to tag its record;
none of them appends, makes a pool or picks scratch paths itself. The module
holds one concept, a probe's life (its timed rounds and margin included), and
grew past 500 lines with them.

A probe whose session did not run on the execution provider asked for (the
worker reports `get_providers()`; onnxruntime falls back to the CPU provider
when the requested one cannot be made, with only a line in its log) ends as
*skip* with the reason: what ran is not what was asked about.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from packaging.version import InvalidVersion, Version

from harness.errors import EnvironmentSkip, HarnessError
from harness.executors import executor_of
from harness.metrics import probe_metrics, timing_summary
from harness.releases.builds import build_mismatch
from harness.releases.versions import Release
from harness.results.locking import LockWaitStopped
from harness.results.store import RunStore
from harness.runners import ProcessOutcome, kill_live_workers, reusing_workers
from harness.runners.base import Environment, Runner
from harness.verdicts import Condition, Predicate, judge, timing_decides

if TYPE_CHECKING:  # onnx is imported only by a probe that reads a margin
    from harness.graphs.margin import Watched

#: a directory where each worker announces itself before run() and waits to be let go
#: (see worker.hold); set by tests that must signal a worker known to be running
HOLD_DIR_ENV = "ORTBISECT_HOLD_DIR"

@dataclass(frozen=True)
class ProbeJob:
    """What every probe of a run feeds the worker."""

    model: Path
    inputs: Path
    outputs: tuple[str, ...] = ()
    session_options: dict = field(default_factory=dict)
    timeout: float = 600.0
    repeat: int = 1  # identical runs (fresh processes) whose outputs must agree bit for bit
    memory_limit_mb: int | None = None  # the worker's address-space cap
    margin: MarginJob | None = None  # the fp16 tensors watched, read in a second session after the verdict's
    timing: TimingJob | None = None  # time (and memory) against a baseline release, interleaved
    profile: bool = False  # onnxruntime's profiler over warm, timed runs: the kernel time of each node


@dataclass(frozen=True)
class TimingJob:
    """A slowdown question's measurement: after the probe's own run, rounds in which the baseline release and the
    probed one run the batch in turn, in two live workers pinned to one CPU (the order alternating, so that a
    noisy neighbour hits both): `min_rounds` always, then more until every bound's interval is clear of it or
    `budget_s` is spent.

    `fresh_processes` (a memory question): each round's two runs are new processes, so that each one's peak
    resident memory is that round's."""

    baseline: Release
    conditions: tuple[Condition, ...]  # the question's timed conditions (slower, rss): measured until decided
    budget_s: float = 60.0
    warmup: int = 3
    round_s: float = 0.2  # seconds of runs per side and round (at least runs_min, at most runs_max runs)
    runs_min: int = 3
    runs_max: int = 400
    min_rounds: int = 6  # the fewest that give the median a 95% interval
    max_rounds: int = 60
    fresh_processes: bool = False
    pin_cpu: int | None = None


@dataclass(frozen=True)
class MarginJob:
    """The internal fp16 margin a probe measures (harness.graphs.margin): the margin model and what it watches."""

    model: Path
    watched: Watched
    memo_dir: Path | None = None  # where what later probes reuse is kept (harness.models.margin_memo); None: nothing
    model_digest: str = ""
    batch_digest: str = ""


def lacks(record: dict, job: ProbeJob) -> str | None:
    """What `job` asks a probe to measure that the stored `record` did not (None: the record answers the job), so
    that a command asking more of a release than an earlier one did measures it again instead of reusing what
    does not hold it: the fp16 margin of the same watched tensors, the timed rounds against the same baseline.
    A margin read and found wanting (its error said) is an answer; a skip ran nothing and measured nothing."""
    status = record.get("status")
    if job.margin is not None and status != "skip":
        got = record.get("margin")
        what = job.margin.watched
        if not isinstance(got, dict):
            return "the fp16 margin"
        if got.get("source") != what.source or ("error" not in got and got.get("watched") != len(what.tensors)):
            return f"the fp16 margin of {len(what.tensors)} {what.source}"
    if job.timing is not None and status == "ran":
        timing = record.get("timing")
        if not isinstance(timing, dict) or timing.get("baseline") != job.timing.baseline.version:
            return f"the timed rounds against {job.timing.baseline.version}"
    return None


class Observer(Protocol):
    """Who hears of probes as they start and end (the terminal's progress lines)."""

    def probe_started(self, version: str) -> None: ...
    def probe_finished(self, record: dict, reused: bool) -> None: ...
    def probe_waiting(self, version: str) -> None: ...  # another run is probing it: its record will be reused
    # before a round or a step: the most probes still to come (search.probes_left), None where nothing bounds them
    # (delta debugging); `step`: what the bound is of, when it is one step's of several (a reduction's rows)
    def expect(self, left: int | None, step: str | None = None) -> None: ...


class Silent:
    def probe_started(self, version: str) -> None:
        pass

    def expect(self, left: int | None, step: str | None = None) -> None:
        pass

    def probe_waiting(self, version: str) -> None:
        pass

    def probe_finished(self, record: dict, reused: bool) -> None:
        pass


class Ahead:
    """An observer whose bounds count `later` more probes, to come after this driver's (the pairs of a comparison
    still to probe): "probe 3 of at most 12" is of the whole command."""

    def __init__(self, observer: Observer, later: int):
        self.observer, self.later = observer, later

    def expect(self, left: int | None, step: str | None = None) -> None:
        self.observer.expect(None if left is None else left + self.later, step)

    def probe_started(self, version: str) -> None:
        self.observer.probe_started(version)

    def probe_waiting(self, version: str) -> None:
        self.observer.probe_waiting(version)

    def probe_finished(self, record: dict, reused: bool) -> None:
        self.observer.probe_finished(record, reused)


#: `outputs=` of Prober.probe: the outputs go where the store keeps this release's (and series') outputs
IN_STORE = "in-store"


@dataclass(frozen=True)
class Probed:
    """A finished probe: the record as stored, and the record judged (None without a predicate)."""

    record: dict
    judged: dict | None
    reused: bool = False  # a saved record (probe_once found it), not a probe made now

    @property
    def verdict(self) -> str | None:
        return self.judged["verdict"] if self.judged else None


class Prober:
    """A probe's life, the same for every caller: run the job on a release through the runner, attach the
    metrics, append the record to the store (when there is one), judge it and tell the observer.

    `judge` replaces the plain `verdicts.judge(record, predicate)` where a caller judges against a reference;
    `stop()` (an interrupt) makes every probe still running end unrecorded: a worker killed on the way out
    is not evidence about its release.
    """

    def __init__(self, runner: Runner, store: RunStore | None = None, predicate: Predicate | None = None, *,
                 judge: Callable[[dict], dict] | None = None, observer: Observer | None = None):
        self.runner = runner
        self.store = store
        self.predicate = predicate
        self._judge = judge
        self.observer = observer
        self.probes = 0  # probes run (not reused) by this prober
        self.seconds = 0.0  # their worker time
        self._stopped = threading.Event()
        self._count = threading.Lock()

    def probe(self, release: Release, job: ProbeJob, *, series: str | None = None, tags: dict | None = None,
              outputs: str | Path | None = IN_STORE,
              measure: Callable[[dict], dict] | None = None) -> Probed:
        """Probe `release` with `job`. `series` and `tags` go into the record (and `series` names its outputs
        file in the store); `outputs` is where the outputs are saved: in the store (default), at a path, or
        nowhere (None). `measure(record)` gives the metrics of a probe that ran (default: the worker's own)."""
        if self.observer:
            self.observer.probe_started(release.version)
        saved = self._outputs_path(release, series, outputs)
        # Scratch lives outside the results: a full results disk must not fail the probe itself.
        with tempfile.TemporaryDirectory(prefix=f"ortbisect-{release.version}-") as scratch:
            rec = executor_of(self.runner).probe(run_probe, self.runner, release, job, Path(scratch), saved)
        if self._stopped.is_set():
            raise ProbeStopped(release.version)
        if series:
            rec["series"] = series
        rec.update(tags or {})
        if rec["status"] == "ran":
            rec["metrics"] = measure(rec) if measure else probe_metrics(rec.get("result"))
        with self._count:
            self.probes += 1
            self.seconds += rec.get("seconds") or 0.0
        if self.store is not None:
            self.append(rec)
        judged = self.judge(rec)
        if self.observer and judged is not None:
            self.observer.probe_finished(judged, reused=False)
        return Probed(rec, judged)

    def probe_once(self, release: Release, job: ProbeJob, saved: Callable[[], dict | None], *,
                   series: str | None = None, on_wait: Callable[[], None] | None = None, **probe) -> Probed:
        """`saved()`'s record of `release` if it finds one, else `probe(release, job, series=series, **probe)`:
        looked up, probed and appended under the store's lock on that release and series, so that a run at once
        over the same store waits (`on_wait` hears it) for this probe and reuses it. A crash lets the lock go
        with the process; `stop()` ends a wait in ProbeStopped."""
        try:
            with self.store.probe_lock(release.version, series, on_wait=on_wait and (lambda _: on_wait()),
                                       stop=self._stopped):
                rec = saved()
                if rec is None:
                    return self.probe(release, job, series=series, **probe)
        except LockWaitStopped:
            raise ProbeStopped(release.version) from None
        judged = self.judge(rec)
        if self.observer and judged is not None:
            self.observer.probe_finished(judged, reused=True)
        return Probed(rec, judged, reused=True)

    def judge(self, record: dict) -> dict | None:
        if self._judge is not None:
            return self._judge(record)
        return judge(record, self.predicate) if self.predicate is not None else None

    def append(self, rec: dict) -> None:
        """The record on disk before anything else happens; a results directory that cannot take it ends the
        run (with every worker) in one line that says what is saved."""
        try:
            self.store.append(rec)
        except OSError as exc:
            kill_live_workers()
            raise HarnessError(
                f"cannot record the probe of {rec['version']} in {self.store.dir}: {exc.strerror or exc}; "
                f"{len(self.store.records())} earlier probes are saved, this one is not"
            ) from None

    def stop(self) -> None:
        """No probe still running is recorded from now on (call before killing the workers); probes on a
        cluster are cancelled."""
        self._stopped.set()
        executor_of(self.runner).stop()

    def _outputs_path(self, release: Release, series: str | None, outputs: str | Path | None) -> Path | None:
        if outputs != IN_STORE:
            return outputs
        return self.store.outputs_path(release.version, series) if self.store is not None else None


class ProbeStopped(Exception):
    """A probe that ended after its prober was stopped: not recorded."""


@contextmanager
def serving(jobs: int = 1, keep: bool = True, stop: Prober | None = None) -> Iterator[ThreadPoolExecutor]:
    """`jobs` probes at once on live workers that serve one request after another (a worker's start is most of
    a small model's probe, many times so under emulation); `keep=False` ends each worker after its probe and
    lets only the early-started ones wait (the search: each release is probed once).

    `stop`: the prober of the pool's probes, stopped and its workers killed when the block is left by an
    exception (Ctrl-C): else the pool would wait for a probe still running, minutes under emulation, and what
    a killed worker leaves is no evidence to record."""
    with reusing_workers(keep=keep), ThreadPoolExecutor(max(1, jobs), thread_name_prefix="probe") as pool:
        try:
            yield pool
        except BaseException:
            if stop is not None:
                stop.stop()
                kill_live_workers()
            raise


def default_timeout(weight_bytes: int, emulated: bool) -> float:
    """Seconds a probe may take when --timeout is not given: long enough for a slow probe, short enough to end a hang.

    Ten minutes for a small model, ten more per 100 MB of weights (a 600 MB model's full 20x512 batch took
    3 to 26 minutes natively on 2 shared cores), twenty times that under emulation (QEMU ran one of its
    114-token rows in 11 minutes).
    """
    minutes = 10 + 10 * weight_bytes / 100e6
    return 60.0 * minutes * (20 if emulated else 1)


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def outcome_status(out: ProcessOutcome) -> tuple[str, str]:
    """(status, reason) of a finished worker process: ran / error / crash / timeout."""
    if out.timed_out:
        return "timeout", f"no result after {out.seconds:.0f} s"
    res = out.result
    if res is not None and res.get("error"):
        return "error", f"{res['error']} (at {res.get('stage', '?')})".splitlines()[0]
    if out.out_of_memory:
        return "crash", "worker killed: out of memory"
    if out.signal is not None:
        return "crash", f"worker killed by {signal_name(out.signal)}"
    if res is None or res.get("stage") != "done":
        last = out.stderr_tail.strip().splitlines()[-1:] or [""]
        return "crash", f"worker exited with status {out.returncode} and no result {last[0][:200]}".strip()
    return "ran", "ran"


def run_probe(runner: Runner, release: Release, job: ProbeJob, workdir: Path, outputs_path: Path | None) -> dict:
    """Probe one release; always returns a record, whatever happened."""
    t0 = time.perf_counter()
    record = {"version": release.version, "package": runner.package.name, "provenance": runner.provenance(),
              "finished": None}
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        env, rebuilt = runner.prepare_verified(release)
    except EnvironmentSkip as exc:
        return {**record, "status": "skip", "reason": str(exc), "seconds": time.perf_counter() - t0,
                "finished": _now()}
    providers, asked = runner.package.providers_request(), runner.package.provider
    # what the release holds in fp16, kept from an earlier probe: no optimized graph to save then
    held_key = _held_key(runner, release, job, providers)
    held_as = _read_held(job, held_key)
    request = {
        "model": str(job.model),
        "inputs": str(job.inputs),
        "outputs": list(job.outputs),
        "session_options": job.session_options,
        "memory_limit_mb": job.memory_limit_mb,
        # written to scratch first: a full results disk must not turn into a model error
        "outputs_path": str(workdir / "outputs.npz") if outputs_path else None,
        "hold_dir": os.environ.get(HOLD_DIR_ENV),
        # the runner's package names the provider every probe through it runs on (trace, triage, reduce too);
        # the default package sends none, so a default probe's request is what it always was
        **({"providers": providers} if providers else {}),
        # the optimized graph says which tensors the release holds in fp16; a provider that compiles nodes
        # (OpenVINO, TensorRT) cannot save one, so only the CPU provider's is asked for
        **({"margin": {"model": str(job.margin.model), "outputs": list(job.margin.watched.outputs),
                       "data_dir": str(Path(job.model).parent),
                       **({} if providers or held_as is not None else
                          {"optimized_path": str(workdir / "optimized" / "optimized.onnx")}),
                       **_margin_rows(job.margin, held_as)}}
           if job.margin else {}),
    }
    if job.margin:
        (workdir / "optimized").mkdir(exist_ok=True)
    if job.profile:
        (workdir / "profile").mkdir(exist_ok=True)
        request.update(profile_prefix=str(workdir / "profile" / "onnxruntime"),
                       timing={"warmup": 3, "seconds": 2.0, "runs_min": 10, "runs_max": 200})
    try:
        out, env, status, reason, hashes = _run(runner, release, env, job, request, workdir)
    except EnvironmentSkip as exc:  # where the worker runs went away (a remote engine dropped out)
        shutil.rmtree(workdir, ignore_errors=True)
        return {**record, "status": "skip", "reason": str(exc), "seconds": time.perf_counter() - t0,
                "finished": _now()}
    if rebuilt and status == "ran" and "environment rebuilt" not in reason:
        reason = f"ran (environment rebuilt: {rebuilt})"
    if out.engine:
        record["provenance"] = {**record["provenance"], "engine": out.engine}
    used = (out.result or {}).get("providers_used")
    record.update(
        providers={"requested": asked, "used": used},
        status=status,
        reason=reason,
        result=out.result,
        seconds=out.seconds,
        repeats=len(hashes),
        env_seconds=env.seconds if env else None,
        env_created=env.created if env else None,
        stderr_tail=out.stderr_tail[-500:] if status != "ran" else "",
        finished=_now(),
    )
    if job.margin is not None and status != "skip":
        record["margin"] = _margin(job, out.result, workdir / "optimized" / "optimized.onnx", held_as, held_key)
    if job.timing is not None and status == "ran":
        record["timing"] = timed_rounds(runner, release, env, job, request, workdir / "timing")
        record["seconds"] += record["timing"].get("seconds") or 0.0
    # a fallback's outputs are not the provider's: a skipped probe keeps none
    if outputs_path and status != "skip" and (workdir / "outputs.npz").exists():
        try:
            shutil.move(workdir / "outputs.npz", outputs_path)
        except OSError as exc:
            record["outputs_saved"] = f"not saved: {exc.strerror or exc}"
    shutil.rmtree(workdir, ignore_errors=True)
    return record


def timed_rounds(runner: Runner, release: Release, env: Environment, job: ProbeJob, request: dict,
                 workdir: Path) -> dict:
    """The interleaved rounds of a timed probe (TimingJob): every run's latency of both sides kept, and each
    side's peak memory where the rounds ran in fresh processes. A side that stops running ends the rounds (said
    in `error`); what was measured before is kept."""
    t = job.timing
    doc: dict = {"baseline": t.baseline.version, "rounds": [], "threads": job.session_options.get("intra_op_num_threads"),
                 "pinned_cpu": None, "warmup": t.warmup, "fresh_processes": t.fresh_processes,
                 "budget_s": t.budget_s, "stopped": "rounds"}
    if same_release(t.baseline.version, release.version):
        base_env = env  # the baseline probed: compared with itself (what an A/A comparison is)
    else:
        try:
            base_env, _ = runner.prepare_verified(t.baseline)
        except EnvironmentSkip as exc:
            return {**doc, "stopped": "error", "error": f"the baseline {t.baseline.version}: {exc}"}
    timed = {**request, "outputs_path": None, "margin": None, "hold_dir": None,
             "timing": {"warmup": t.warmup, "seconds": t.round_s, "runs_min": t.runs_min, "runs_max": t.runs_max,
                        "pin_cpu": t.pin_cpu},
             **({"fresh_process": True} if t.fresh_processes else {})}
    sides = {"baseline": base_env, "candidate": env}
    t0 = time.perf_counter()
    try:
        while True:
            rnd = {}
            order = ("baseline", "candidate") if len(doc["rounds"]) % 2 == 0 else ("candidate", "baseline")
            for side in order:
                asked = timed if t.fresh_processes else {**timed, "serve_again": side}  # its own worker each
                out = runner.run(sides[side], asked, workdir / side, job.timeout)
                status, reason = outcome_status(out)
                res = out.result or {}
                if status != "ran" or not isinstance(res.get("timing"), dict):
                    version = t.baseline.version if side == "baseline" else release.version
                    doc.update(stopped="error", error=f"the {side} ({version}) stopped running: {reason}")
                    return doc
                rnd[f"{side}_s"] = res["timing"].get("latencies_s")
                rnd[f"{side}_rss_mb"] = res.get("peak_rss_mb") if t.fresh_processes else None
                doc["pinned_cpu"] = res.get("pinned_cpu")
            doc["rounds"].append(rnd)
            if len(doc["rounds"]) < t.min_rounds:
                continue  # the fewest rounds an interval needs are always run; the budget buys more
            if timing_decides(t.conditions, timing_summary(doc)):
                doc["stopped"] = "decided"
                break
            if time.perf_counter() - t0 >= t.budget_s:
                doc["stopped"] = "budget"
                break
            if len(doc["rounds"]) >= t.max_rounds:
                break
    finally:
        doc["seconds"] = round(time.perf_counter() - t0, 3)
        if not t.fresh_processes:  # the two workers were kept for the rounds: nothing more is asked of them
            for side, side_env in sides.items():
                runner.end_served(side_env, side)
    return doc


def _held_key(runner: Runner, release: Release, job: ProbeJob, providers: list | None) -> dict | None:
    """The key of what `release` holds in fp16 of the model (harness.models.margin_memo), or None where it is not
    kept: no margin, no memo, or a provider that compiles nodes (no optimized graph says it)."""
    if job.margin is None or job.margin.memo_dir is None or providers:
        return None
    from harness.models import margin_memo

    return margin_memo.held_key(job.margin.model_digest, release.version, runner.package.name, job.session_options,
                                providers, runner.provenance())


def _read_held(job: ProbeJob, held_key: dict | None) -> dict | None:
    if held_key is None:
        return None
    from harness.models import margin_memo  # onnx comes with it: only a probe that reads a margin imports it

    return margin_memo.read_held(job.margin.memo_dir, held_key, job.margin.watched)


def _margin_rows(margin: MarginJob, held_as: dict | None) -> dict:
    """The rows the margin reads: those that held the hottest tensors' largest |x| when every row was read (under
    what this release holds, or where that is not known yet, under what each release kept holds); every row, one
    at a time, where the batch's rows are not known yet."""
    if margin.memo_dir is None:
        return {}
    from harness.graphs.margin import hot_rows
    from harness.models import margin_memo

    row_of = margin_memo.read_rows(margin.memo_dir, margin.model_digest, margin.batch_digest, margin.watched)
    if row_of is None:
        return {"learn_rows": True}
    known = [held_as] if held_as is not None else [None, *margin_memo.every_held(margin.memo_dir, margin.model_digest,
                                                                                 margin.watched)]
    return {"rows": sorted({r for h in known for r in hot_rows(row_of, margin.watched, h)})}


def _margin(job: ProbeJob, result: dict | None, optimized_path: Path, held_as: dict | None,
            held_key: dict | None) -> dict:
    """The probe's internal fp16 margin: what the worker read, counted as the release holds it (kept, or from the
    optimized graph it saved, then kept); the rows a read of every row found kept for later probes."""
    import onnx

    from harness.graphs.margin import held, learned_rows, margin_of
    from harness.models import margin_memo

    raw = (result or {}).get("margin")
    if raw is None:
        return {"error": "not measured: " + ((result or {}).get("margin_skipped") or "the worker read no margin"),
                "source": job.margin.watched.source}

    def graph(path: Path) -> onnx.ModelProto | None:
        try:
            return onnx.load(str(path), load_external_data=False) if path.is_file() else None
        except Exception:  # noqa: BLE001 - an unreadable graph only loses the fp16/fp32 split
            return None

    what, memo = job.margin.watched, job.margin.memo_dir
    if held_as is None:
        original, optimized = graph(Path(job.model)), graph(optimized_path)
        if original is not None and optimized is not None:
            held_as = held(what, original, optimized)
            if held_key is not None:
                margin_memo.write_held(memo, held_key, held_as)
    doc = margin_of(raw, what, held_as)
    learned = learned_rows(raw, what) if memo is not None and not raw.get("error") else None
    if learned and type(raw.get("batch_rows")) is int:
        margin_memo.write_rows(memo, job.margin.model_digest, job.margin.batch_digest, raw["batch_rows"], learned)
    if isinstance(raw.get("rows"), list) and type(raw.get("batch_rows")) is int:
        doc["rows"] = {"read": len(raw["rows"]), "of": raw["batch_rows"]}  # the rows that held the hottest before
    if isinstance(raw.get("seconds"), (int, float)):
        doc["seconds"] = round(raw["seconds"], 3)
    return doc


def _run(runner: Runner, release: Release, env: Environment, job: ProbeJob, request: dict, workdir: Path):
    """The worker run (again on a rebuilt environment when it would not import, and `repeat` times): the outcome,
    the environment, status, reason and the output hashes of each run; EnvironmentSkip when it could not run."""
    asked = runner.package.provider
    out = runner.run(env, request, workdir, job.timeout)
    status, reason = outcome_status(out)
    why = _environment_at_fault(runner, release, env, out, status)
    if why:
        # What ran is not the release as published: rebuilt once, and never a verdict about the release.
        runner.discard(env)
        runner.forget_verified(env)
        try:
            env, _ = runner.prepare_verified(release)
        except EnvironmentSkip as exc:
            raise EnvironmentSkip(f"{why}; after a rebuild: {exc}") from None
        out = runner.run(env, request, workdir, job.timeout)
        status, reason = outcome_status(out)
        still = _environment_at_fault(runner, release, env, out, status)
        if still and still != "onnxruntime would not import":
            raise EnvironmentSkip(f"{still}, after a rebuild")
        reason = f"{reason} (environment rebuilt: {why})" if status != "ran" else f"ran (environment rebuilt: {why})"
    info = ((out.result or {}).get("onnxruntime") or {}).get("build_info")
    if info is not None and env is not None:
        runner.note_build_info(env, info)  # `bisect versions` shows the commit of a build probed once
    used = (out.result or {}).get("providers_used")
    if status == "ran" and used is not None and asked not in used:
        status, reason = "skip", provider_fallback(asked, used, out.stderr_tail)
    hashes = [_output_hashes(out.result)]
    if status == "ran" and job.repeat > 1:
        for _ in range(job.repeat - 1):
            again = runner.run(env, {**request, "outputs_path": None}, workdir, job.timeout)
            hashes.append(_output_hashes(again.result) if outcome_status(again)[0] == "ran" else None)
        distinct = len({h for h in hashes})
        if distinct > 1:
            status, reason = "nondeterministic", f"{distinct} different outputs in {job.repeat} identical runs"
    return out, env, status, reason, hashes


def _environment_at_fault(runner: Runner, release: Release, env: Environment, out: ProcessOutcome,
                          status: str) -> str | None:
    """Why this outcome says nothing about `release`, or None: the environment would not import, holds another
    version than the one asked for (the worker's own `onnxruntime.__version__`), a build that names another
    release's commit or none, a package that loaded no native library of its wheel's, or crashed the worker with
    files that differ from what the wheel installed."""
    res = out.result or {}
    if status == "error" and res.get("stage") == "import":
        return "onnxruntime would not import"
    got = (res.get("onnxruntime") or {}).get("version")
    if got is not None and not same_release(got, release.version):
        return f"the environment of {release.version} holds onnxruntime {got}"
    seen = res.get("onnxruntime")
    mismatch = build_mismatch(runner.package.name, release.version, (seen or {}).get("build_info"))
    if mismatch:
        return f"the environment of {release.version} is not the release's build: {mismatch}"
    if isinstance(seen, dict) and env is not None:  # it imported: what it loaded is the build's proof
        native = runner.native_problem(env, seen.get("native"))
        if native:
            return f"the environment of {release.version} is not a build of {runner.package.name}: {native}"
    if status == "crash" and out.signal is not None and env is not None:
        runner.forget_verified(env)  # a crash may come from a file changed since the run began
        damaged = runner.verify(env)
        if damaged:
            return f"the environment of {release.version} is damaged: {damaged}"
    return None


def same_release(reported: str, asked: str) -> bool:
    """Whether the worker's `onnxruntime.__version__` is the release asked for (a build may report it without a
    pre-release or local suffix: 1.24.0 for 1.24.0.dev20251201)."""
    try:
        return Version(reported).release == Version(asked).release
    except InvalidVersion:
        return reported == asked


def _output_hashes(result: dict | None) -> tuple | None:
    if not result or "outputs" not in result:
        return None
    return tuple(o.get("sha256") for o in result["outputs"])


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def provider_fallback(asked: str, used: list, stderr: str) -> str:
    """Why a probe whose session ran without the provider asked for is a skip: what ran, and onnxruntime's own
    error line (the reason it gave for falling back), when its log has one."""
    said = [ln for ln in _ANSI.sub("", stderr).splitlines() if "[E:" in ln or "ERROR" in ln or "Failed to create" in ln]
    why = ""
    if said:
        line = said[0]
        line = line.split("] ", 1)[-1] if "[ERROR]" not in line else line[line.index("[ERROR]"):]
        why = f"; onnxruntime said: {line.strip()[:300]}"
    return f"{asked} was asked for but the session ran on {', '.join(used) or 'no provider'}{why}"
