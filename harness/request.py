"""The whole request of a search checked in one step, before anything is provisioned or written.

`plan.make_plan` calls `check` before it provisions the runner or opens the
run store, so a request refused here leaves no trace: no run directory, no
line in a manifest, no probe. Every refusal is a UsageError (exit status 2,
one line) that names what the user typed. The checks run cheapest first:

1. numbers and words: --timeout, --bad-if (a bound >= 0), --reference given
   exactly when the predicate needs one;
2. the target, by the runner registry's rules (arch, backend, --cpu, the
   Python a backend runs, --memory-limit): a runner is made, not provisioned;
3. what is named on the command line: --cache-dir and --results-dir are (or
   can become) directories, --model, --inputs and --reference are files,
   --resume names a run in --results-dir;
4. the release listing (the cached one; fetched only when stale, never with
   --offline): both ends of the range, and a wheel for the target in it;
5. the model (a registered hub model is downloaded here unless --offline), the
   batch against its inputs (names, types, ranks, static dims, rows), the
   outputs asked for, the reference against those outputs, the tensors and
   nodes a command names, and the run to resume against all of it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnx

from harness import inputs as inputs_mod
from harness import models
from harness.errors import UsageError
from harness.results import RunStore
from harness.runners import Runner, make_runner
from harness.uvtool import uv_bin
from harness.verdicts import Predicate, parse_predicate
from harness.versions import Release, ReleaseIndex, Target, select_range, wheel_pythons
from harness.vocabulary import canonical_arch

if TYPE_CHECKING:
    from harness.plan import SearchSpec


@dataclass
class ProbeInputs:
    """A checked model and batch: what every probe of a run feeds the worker."""

    model: models.ResolvedModel
    batch: Path
    batch_digest: str
    outputs: tuple[str, ...]
    sizes: dict[str, int] = field(default_factory=dict)  # symbolic dims of the model's inputs in this batch


@dataclass
class Request:
    """A request that passed every check: what a plan is made of (the runner is not provisioned yet)."""

    predicate: Predicate
    reference: dict[str, np.ndarray] | None
    runner: Runner
    releases: list[Release]
    probe_inputs: ProbeInputs


# -- single values, also used by the command line and matrix files -------------------------

def predicate(text: str) -> Predicate:
    """`--bad-if TEXT` as a Predicate; a bound must be a finite number >= 0 (max |x| and differences are)."""
    pred = parse_predicate(text)
    if pred.bound is not None and not (math.isfinite(pred.bound) and pred.bound >= 0):
        raise UsageError(f"--bad-if {text!r}: the bound must be a finite number >= 0")
    return pred


def seconds(value, flag: str = "--timeout") -> float:
    """A timeout: a finite number of seconds >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise UsageError(f"{flag} {value}: give a finite number of seconds >= 1")
    return float(value)


def directory(path: Path, flag: str) -> Path:
    """`path` if it is a directory or can be made one: neither it nor a parent on its way is a file."""
    path = Path(path)
    for p in (path, *path.parents):
        try:
            if not p.exists():
                continue
        except OSError as exc:
            raise UsageError(f"{flag} {path}: cannot look at {p} ({exc.strerror or exc})") from None
        if not p.is_dir():
            raise UsageError(f"{flag} {path}: " + ("is a file, not a directory" if p == path
                                                   else f"{p} is a file, not a directory"))
        break
    return path


def release_listing(cache_dir: Path, offline: bool = False) -> list[Release]:
    """Every onnxruntime release on the index (cached; `offline` reads the cache only, never the network)."""
    return ReleaseIndex(directory(cache_dir, "--cache-dir"), uv_bin(), offline).releases()


# -- the whole request -------------------------------------------------------------------

def check(spec: SearchSpec, *, dump: tuple[str, ...] = (), nodes: tuple[str, ...] = ()) -> Request:
    """Every check of the request `spec`, in the order of the module docstring.

    `dump` and `nodes` are tensor and node names a command will use (`trace
    --dump`, `mitigate --node`); they must be the model's.
    """
    seconds(spec.timeout)
    pred = predicate(spec.bad_if)
    if pred.needs_reference and not spec.reference:
        raise UsageError(f"--bad-if {pred}: give the reference outputs with --reference FILE.npz")
    if spec.reference and not pred.needs_reference:
        raise UsageError("--reference is used only with --bad-if rel-diff>B")

    runner = make_runner(spec.backend, Target(canonical_arch(spec.arch), spec.python), spec.cache_dir, spec.cpu)
    if spec.memory_limit_mb and not runner.supports_memory_limit:
        raise UsageError(f"--memory-limit is not available with --backend {runner.backend}")

    directory(spec.cache_dir, "--cache-dir")
    directory(spec.results_dir, "--results-dir")
    if models.is_path(spec.model):
        models.user_file(Path(spec.model), "--model", ".onnx")
    if spec.inputs:
        models.user_file(Path(spec.inputs), "--inputs", ".npz")
    reference = inputs_mod.load_npz(Path(spec.reference), "--reference") if spec.reference else None
    resumed = _resumed(spec.results_dir, spec.resume)

    releases = select_range(release_listing(spec.cache_dir, spec.offline), spec.from_, spec.to, spec.range_flags)
    _check_wheels(spec, runner.target, releases)

    pi, graph = _model_and_batch(spec)
    if reference is not None:
        inputs_mod.check_reference(graph, pi.sizes, reference, pi.outputs, f"--reference {spec.reference}")
    _check_names(graph, dump, nodes)
    if resumed is not None:
        _check_resumed(spec, resumed, pi, runner)
    return Request(pred, reference, runner, releases, pi)


def _resumed(results_dir: Path, run_id: str | None) -> dict | None:
    """The manifest of the run `--resume` names, which must be a run in `results_dir`."""
    if run_id is None:
        return None
    if not run_id or run_id in (".", "..") or "/" in run_id or os.sep in run_id:
        raise UsageError(f"--resume {run_id!r}: not a run id (the name of a run's directory in --results-dir)")
    run_dir = Path(results_dir) / run_id
    manifest = RunStore(run_dir).manifest()
    if not isinstance(manifest, dict) or not isinstance(manifest.get("key"), dict):
        what = "is not a run (no readable manifest)" if run_dir.exists() else "no such run"
        raise UsageError(f"--resume {run_id}: {what} in {results_dir}")
    return manifest


def _range_words(spec: SearchSpec) -> str:
    lo, hi = spec.range_flags
    return f"{lo} {spec.from_}" if (lo, spec.from_) == (hi, spec.to) else f"{lo} {spec.from_} {hi} {spec.to}"


def _check_wheels(spec: SearchSpec, target: Target, releases: list[Release]) -> None:
    """Some release of the range must install for the target: else every probe would be a skip."""
    if any(r.wheel_for(target) for r in releases):
        return
    pythons = wheel_pythons(releases, target.arch)
    span = releases[0].version if len(releases) == 1 else f"{releases[0].version}..{releases[-1].version}"
    if pythons:
        raise UsageError(f"--python {target.python}: no onnxruntime release of {span} has a wheel for "
                         f"{target.arch} / Python {target.python} (there are wheels for Python {', '.join(pythons)})")
    raise UsageError(f"{_range_words(spec)}: no onnxruntime release of {span} has a Linux wheel for {target.arch}")


def _model_and_batch(spec: SearchSpec) -> tuple[ProbeInputs, onnx.GraphProto]:
    """The model resolved, the batch loaded and checked against it, the outputs to check."""
    resolved = models.resolve(spec.model, spec.cache_dir, spec.offline)
    graph = onnx.load(str(resolved.path), load_external_data=False).graph
    batch = Path(spec.inputs) if spec.inputs else inputs_mod.default_batch(resolved, spec.cache_dir)
    arrays = inputs_mod.load_npz(batch)
    sizes = inputs_mod.check_inputs(graph, arrays, f"--inputs {spec.inputs}" if spec.inputs
                                    else f"the batch of {resolved.name}")
    declared = [o.name for o in graph.output]
    outputs = tuple(spec.outputs) or resolved.spec.outputs
    for name in outputs:
        if name not in declared:
            who = f"--output {name}" if name in spec.outputs else f"model {resolved.name}: registered output {name}"
            raise UsageError(f"{who}: the model has no such output (its outputs: {', '.join(declared)})")
    pi = ProbeInputs(resolved, batch.resolve(), inputs_mod.arrays_digest(arrays), outputs, sizes)
    return pi, graph


def _check_names(graph: onnx.GraphProto, dump: tuple[str, ...], nodes: tuple[str, ...]) -> None:
    from harness.surgery import node_key

    tensors = {o for n in graph.node for o in n.output if o} | {o.name for o in graph.output}
    for name in dump:
        if name not in tensors:
            raise UsageError(f"--dump {name}: the model has no tensor of that name (a node's output)")
    keys = {node_key(n) for n in graph.node}
    for name in nodes:
        if name not in keys:
            raise UsageError(f"--node {name}: the model has no node of that name")


def _check_resumed(spec: SearchSpec, manifest: dict, pi: ProbeInputs, runner: Runner) -> None:
    """The run to resume was made for this model, batch and target (its full key is checked when it is opened)."""
    mine = {"model": pi.model.digest, "batch": pi.batch_digest, "outputs": list(pi.outputs),
            "session_options": spec.session_options, "arch": runner.target.arch, "backend": runner.backend,
            "python": runner.target.python, "cpu": runner.cpu}
    theirs = manifest["key"]
    differ = [k for k, v in mine.items() if k in theirs and theirs[k] != v]
    if theirs.get("repeat", 1) != spec.repeat:
        differ.append("repeat")
    if differ:
        raise UsageError(f"--resume {spec.resume}: that run was made for another {', '.join(differ)}; "
                         "leave out --resume to start a new run")
