"""From what a user asked for (model, range, target, options) to what a search needs.

Shared by every command that probes (run, sweep, trace, matrices): the whole
request is checked first (harness.request: model, batch, outputs, reference,
options, target, range), then the runner is provisioned and the results store
opened under the run's key.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import request
from harness.errors import UsageError
from harness.executors import connect
from harness.models.fp32 import fp32_model
from harness.probe import MarginJob, ProbeJob, TimingJob, default_timeout
from harness.reference import FP32, Reference, from_fp32
from harness.releases.packages import of_key
from harness.releases.versions import Release
from harness.request import ProbeInputs, SearchSpec
from harness.results.store import MANIFEST, RunStore, run_id_for
from harness.runners import Log, Runner, quiet
from harness.summary import Question
from harness.verdicts import Predicate, parse_predicate


@dataclass
class Plan:
    runner: Runner
    releases: list[Release]
    store: RunStore
    job: ProbeJob
    predicate: Predicate
    reference: Reference | None
    probe_inputs: ProbeInputs


def make_plan(spec: SearchSpec, command: list[str] | None = None, log: Log = quiet, *,
              dump: tuple[str, ...] = (), nodes: tuple[str, ...] = ()) -> Plan:
    """Everything a search needs; the backend is provisioned here, once, before any probe (progress to `log`).

    The request is checked as a whole first (harness.request), so a refused
    one provisions nothing and leaves the results directory as it was;
    `dump` and `nodes` are tensor and node names the command will use.
    """
    spec = timed_spec(spec)
    req = request.check(spec, dump=dump, nodes=nodes)
    runner, pi, reference = req.runner, req.probe_inputs, req.reference
    if reference is not None and reference.kind == FP32 and reference.model is None:  # made here, not when checked
        reference = from_fp32(*fp32_model(pi.model, spec.cache_dir))
    if spec.ray_address and req.predicate.timed:
        raise UsageError(f"--bad-if {req.predicate.timed[0]} measures on this machine, two workers pinned to one "
                         f"CPU: leave out --ray-address")
    # the cluster is asked which of its nodes serve the target before anything is provisioned or probed
    runner.executor = connect(spec.ray_address, runner, (pi.model.path, *pi.model.data_files))
    runner.provision(log)
    store = open_store(spec, req, command)
    timeout = spec.timeout
    emulated = runner.emulates(runner.target.arch)
    if timeout is None:
        weights = sum(p.stat().st_size for p in (pi.model.path, *pi.model.data_files))
        timeout = default_timeout(weights, emulated)
    margin = spec.margin if spec.margin is not None else not emulated
    job = ProbeJob(pi.model.path, pi.batch, pi.outputs, spec.session_options, timeout, spec.repeat,
                   spec.memory_limit_mb, margin_job(pi.model, spec.cache_dir, pi.batch_digest) if margin else None,
                   timing_job(spec, req))
    return Plan(runner, req.releases, store, job, req.predicate, reference, pi)


def timed_spec(spec: SearchSpec) -> SearchSpec:
    """A slowdown question runs on one intra-op thread unless --threads says otherwise (said in each record):
    a thread pool on a shared machine measures the neighbours more than the release."""
    try:
        timed = parse_predicate(spec.bad_if).timed
    except UsageError:
        return spec  # the check says what is wrong with it
    if not timed or "intra_op_num_threads" in spec.session_options:
        return spec
    return dataclasses.replace(spec, session_options={**spec.session_options, "intra_op_num_threads": 1})


def timing_job(spec: SearchSpec, req: request.Request) -> TimingJob | None:
    """What a slowdown question measures each probe against: --reference-release, else the range's good end."""
    timed = req.predicate.timed
    if not timed:
        return None
    if req.reference is not None and req.reference.kind == "release":
        baseline = req.reference.release
    else:
        baseline = req.releases[-1] if spec.mode == "fix" else req.releases[0]
    try:
        pin = max(os.sched_getaffinity(0))  # the last CPU: the one an OS gives other work last
    except (AttributeError, OSError, ValueError):
        pin = None
    return TimingJob(baseline, timed, budget_s=spec.time_budget,
                     fresh_processes=any(c.kind == "rss" for c in timed), pin_cpu=pin)


def open_store(spec: SearchSpec, req: request.Request, command: list[str] | None = None) -> RunStore:
    """The run's store, opened under its key: the model, batch, outputs and options of the checked request and
    the provenance of its runner (a matrix cell skipped here opens it unprovisioned, to keep why)."""
    runner, pi = req.runner, req.probe_inputs
    key = {
        "model": pi.model.digest,
        "batch": pi.batch_digest,
        "outputs": list(pi.outputs),
        "session_options": spec.session_options,
        **runner.provenance(),
        **({"repeat": spec.repeat} if spec.repeat > 1 else {}),  # a k-fold probe is not a single one
    }
    run_id = spec.resume or run_id_for(pi.model.name, key)
    info = {"model": {"name": pi.model.name, "source": pi.model.spec.source, "path": str(pi.model.path),
                      "digest": pi.model.digest, "data_files": [str(p) for p in pi.model.data_files]},
            "batch": {"path": str(pi.batch), "digest": pi.batch_digest}}
    # what is asked (predicate, reference, range) is no part of the manifest: it is each search's own, kept in
    # its run document, and a trace or diff of the run asks nothing
    return RunStore.open(spec.results_dir, run_id, key, info, command or sys.argv)


def margin_job(resolved, cache_dir: Path, batch_digest: str = "") -> MarginJob | None:
    """The internal fp16 margin of the model's probes (harness.graphs.margin): its margin model, made once into
    the cache, beside what later probes reuse (harness.models.margin_memo); None for a model with no fp16
    arithmetic."""
    import onnx

    from harness.graphs.margin import MODEL_FILE, margin_model, watched

    what = watched(onnx.load(str(resolved.path), load_external_data=False))
    if what is None:
        return None
    dest = Path(cache_dir) / "margin" / resolved.digest[:16]
    made = dest / MODEL_FILE
    if not made.exists():
        made = margin_model(resolved.path, dest, what)
    return MarginJob(made, what, dest, resolved.digest, batch_digest)


def plan_for_release(spec: SearchSpec, version: str, command: list[str] | None = None, log: Log = quiet) -> Plan:
    """The plan of one release (triage of a release already found), refusing one the index does not have.

    The ordinary run store of that release is opened, and removed again if
    nothing is written into it: triage keeps its probes in stores of its own.
    """
    if request.predicate(spec.bad_if).needs_reference:
        raise UsageError(f"--bad-if {spec.bad_if}: needs a reference; use `bisect run` for that")
    plan = make_plan(dataclasses.replace(spec, from_=version, to=version, resume=None, reference=None,
                                         reference_release=None,
                                         range_flags=("--version", "--version")), command, log)
    plan.store.discard_if_unused()
    return plan


def spec_of_run(run_dir: Path, cache_dir: Path, offline: bool, from_: str, to: str,
                question: Question | None = None, ray_address: str | None = None) -> SearchSpec:
    """The search that made a run (model, batch, target, options), over another range; it resumes that run.

    With `question`, the spec asks it: its predicate and its reference (the file, the release, fp32)."""
    manifest = RunStore(Path(run_dir)).manifest()
    if not manifest:
        raise UsageError(f"{run_dir}: no run there (no {MANIFEST})")
    key, model = manifest["key"], manifest["model"]
    name = model["name"] if model.get("source") in ("generated", "hub") else model["path"]
    spec = SearchSpec(model=name, from_=from_, to=to, inputs=Path(manifest["batch"]["path"]),
                      outputs=tuple(key.get("outputs") or ()), arch=key["arch"], backend=key["backend"],
                      cpu=key.get("cpu"), python=key.get("python") or SearchSpec.python, cache_dir=cache_dir, offline=offline,
                      results_dir=Path(run_dir).parent, resume=Path(run_dir).name,
                      session_options=key.get("session_options") or {}, repeat=key.get("repeat", 1),
                      package=of_key(key, pre=_has_pre(from_, to)), ray_address=ray_address)
    if question is None:
        return spec
    ref = question.reference or {}
    kind, ref_id = ref.get("kind"), str(ref.get("id"))
    if kind == "file" and not (isinstance(ref.get("path"), str) and Path(ref["path"]).is_file()):
        raise UsageError(f"{Path(run_dir).name}: its question compares with {ref.get('label')}, and that file "
                         f"({ref.get('path') or 'no path kept'}) is not here")
    # a fix's good end is its newer one: a slowdown's baseline (timing_job) is that end
    return dataclasses.replace(spec, bad_if=str(question.predicate),
                               mode="fix" if question.mode == "fix" else "regression",
                               reference=ref["path"] if kind == "file" else FP32 if kind == FP32 else None,
                               reference_release=ref_id.removeprefix("release:") if kind == "release" else None)


def _has_pre(*versions: str) -> bool:
    """Whether a range names a pre-release or development build (then the listing must hold them)."""
    from harness.releases.versions import parse_version

    return any(parse_version(v).is_prerelease for v in versions if v)
