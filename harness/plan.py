"""From what a user asked for (model, range, target, options) to what a search needs.

Shared by every command that probes (run, sweep, trace, matrices): the model is
resolved and checked, the batch loaded and checked against it, the runner made,
the releases listed, and the results store opened under the run's key.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import inputs as inputs_mod
from harness import models
from harness.errors import UsageError
from harness.probe import ProbeJob
from harness.results import MANIFEST, RunStore, run_id_for
from harness.runners import Log, Runner, make_runner, quiet
from harness.uvtool import uv_bin
from harness.verdicts import Predicate, parse_predicate
from harness.versions import Release, ReleaseIndex, Target, select_range
from harness.vocabulary import DEFAULT_RESULTS_DIR, canonical_arch, default_cache_dir


@dataclass(frozen=True)
class SearchSpec:
    model: str
    from_: str
    to: str
    inputs: Path | None = None
    outputs: tuple[str, ...] = ()
    arch: str = "x86_64"
    backend: str = "auto"
    cpu: str | None = None
    python: str = f"{sys.version_info.major}.{sys.version_info.minor}"
    cache_dir: Path = field(default_factory=default_cache_dir)
    offline: bool = False
    results_dir: Path = DEFAULT_RESULTS_DIR
    resume: str | None = None
    timeout: float = 600.0
    bad_if: str = "nan-or-inf"
    reference: Path | None = None
    session_options: dict = field(default_factory=dict)
    repeat: int = 1
    memory_limit_mb: int | None = None


@dataclass
class ProbeInputs:
    """A checked model and batch: what every probe of a run feeds the worker."""

    model: models.ResolvedModel
    batch: Path
    batch_digest: str
    outputs: tuple[str, ...]


@dataclass
class Plan:
    runner: Runner
    releases: list[Release]
    store: RunStore
    job: ProbeJob
    predicate: Predicate
    reference: dict[str, np.ndarray] | None
    probe_inputs: ProbeInputs


def probe_inputs(model: str, inputs: Path | None, outputs: tuple[str, ...], cache_dir: Path) -> ProbeInputs:
    resolved = models.resolve(model, cache_dir)
    batch = Path(inputs) if inputs else inputs_mod.default_batch(resolved, cache_dir)
    arrays = inputs_mod.load_npz(batch)
    inputs_mod.check_inputs(resolved.path, arrays)
    return ProbeInputs(resolved, batch.resolve(), inputs_mod.arrays_digest(arrays), tuple(outputs) or resolved.spec.outputs)


def release_listing(cache_dir: Path, offline: bool = False) -> list[Release]:
    """Every onnxruntime release on the index (cached; `offline` reads the cache only)."""
    return ReleaseIndex(cache_dir, uv_bin(), offline).releases()


def releases_in(spec: SearchSpec) -> list[Release]:
    return select_range(release_listing(spec.cache_dir, spec.offline), spec.from_, spec.to)


def make_plan(spec: SearchSpec, command: list[str] | None = None, log: Log = quiet) -> Plan:
    """Everything a search needs; the backend is provisioned here, once, before any probe (progress to `log`)."""
    predicate = parse_predicate(spec.bad_if)
    reference = None
    if predicate.needs_reference:
        if not spec.reference:
            raise UsageError(f"--bad-if {predicate}: give the reference outputs with --reference FILE.npz")
        reference = inputs_mod.load_npz(spec.reference)
    elif spec.reference:
        raise UsageError("--reference is used only with --bad-if rel-diff>B")
    runner = make_runner(spec.backend, Target(canonical_arch(spec.arch), spec.python), spec.cache_dir, spec.cpu)
    if spec.memory_limit_mb and not runner.supports_memory_limit:
        raise UsageError(f"--memory-limit is not available with --backend {runner.backend}")
    runner.provision(log)
    releases = releases_in(spec)
    pi = probe_inputs(spec.model, spec.inputs, spec.outputs, spec.cache_dir)
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
            "batch": {"path": str(pi.batch), "digest": pi.batch_digest},
            "predicate": str(predicate),
            "reference": {"path": str(spec.reference), "digest": inputs_mod.arrays_digest(reference)} if reference else None}
    store = RunStore.open(spec.results_dir, run_id, key, info, command or sys.argv)
    job = ProbeJob(pi.model.path, pi.batch, pi.outputs, spec.session_options, spec.timeout, spec.repeat,
                   spec.memory_limit_mb)
    return Plan(runner, releases, store, job, predicate, reference, pi)


def plan_for_release(spec: SearchSpec, version: str, command: list[str] | None = None, log: Log = quiet) -> Plan:
    """The plan of one release (triage of a release already found), refusing one the index does not have.

    The ordinary run store of that release is opened, and removed again if
    nothing is written into it: triage keeps its probes in stores of its own.
    """
    if parse_predicate(spec.bad_if).needs_reference:
        raise UsageError(f"--bad-if {spec.bad_if}: needs a reference; use `bisect run` for that")
    plan = make_plan(dataclasses.replace(spec, from_=version, to=version, resume=None, reference=None), command, log)
    if not plan.releases:
        raise UsageError(f"--version {version}: no such onnxruntime release in the index")
    plan.store.discard_if_unused()
    return plan


def spec_of_run(run_dir: Path, cache_dir: Path, offline: bool, from_: str, to: str) -> SearchSpec:
    """The search that made a run (model, batch, target, options), over another range; it resumes that run."""
    manifest = RunStore(Path(run_dir)).manifest()
    if not manifest:
        raise UsageError(f"{run_dir}: no run there (no {MANIFEST})")
    key, model = manifest["key"], manifest["model"]
    name = model["name"] if model.get("source") in ("generated", "hub") else model["path"]
    return SearchSpec(model=name, from_=from_, to=to, inputs=Path(manifest["batch"]["path"]),
                      outputs=tuple(key.get("outputs") or ()), arch=key["arch"], backend=key["backend"],
                      cpu=key.get("cpu"), python=key["python"], cache_dir=cache_dir, offline=offline,
                      results_dir=Path(run_dir).parent, resume=Path(run_dir).name,
                      session_options=key.get("session_options") or {}, repeat=key.get("repeat", 1))
