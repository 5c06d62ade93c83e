"""The whole request of a search checked in one step, before anything is provisioned or written.

`plan.make_plan` calls `check` before it provisions the runner or opens the
run store, so a request refused here leaves no trace: no run directory, no
line in a manifest, no probe. Every refusal is a UsageError (exit status 2,
one line) that names what the user typed. The checks run cheapest first:

1. numbers and words: --timeout, --bad-if (a bound >= 0), one reference at
   most (--reference FILE.npz or fp32, --reference-release), given whenever
   the predicate compares with one;
2. the package and provider (harness.releases.packages: a package the harness knows,
   a provider it runs, --ep-option only for a provider other than the CPU one,
   the device that provider needs visible on this host, --find-links
   directories that exist), then the target, by the runner
   registry's rules (arch, backend, --cpu, the Python a backend runs,
   --memory-limit): a runner is made, not provisioned;
3. what is named on the command line: --cache-dir and --results-dir are (or
   can become) directories, --model, --inputs and --reference are files,
   --resume names a run in --results-dir;
4. the release listing (the cached one; fetched only when stale, never with
   --offline): both ends of the range, and a wheel for the target in it (a
   compare over a range, `pair_ranges`: each end a release of some pair's
   package, and a release of every pair's in between);
5. the model (a registered hub model is downloaded here unless --offline), the
   batch against its inputs (names, types, ranks, static dims, rows), the
   outputs asked for, the reference against those outputs, the tensors and
   nodes a command names, and the run to resume against all of it.
"""

from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import reference as reference_mod
from harness.errors import EnvironmentSkip, HarnessError, UsageError
from harness.models import inputs as inputs_mod
from harness.models import registry as models
from harness.reference import Reference
from harness.releases.credentials import has_secret, redact
from harness.releases.packages import Package, known_eps, of_key
from harness.releases.uvtool import uv_bin
from harness.releases.versions import (
    Release,
    ReleaseIndex,
    Target,
    parse_version,
    select_range,
    wheel_pythons,
)
from harness.results.store import RunStore
from harness.runners import Runner, make_runner
from harness.verdicts import TIMED, Predicate, parse_predicate
from harness.vocabulary import (
    DEFAULT_EP,
    DEFAULT_RESULTS_DIR,
    DEVICE_CHECKS,
    OLDEST_RELEASE,
    PACKAGES,
    canonical_arch,
    default_cache_dir,
)


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
    timeout: float | None = None  # None: probe.default_timeout, by the model's size and the backend
    bad_if: str = "nan-or-inf"
    reference: Path | str | None = None  # FILE.npz, or "fp32"
    reference_release: str | None = None
    session_options: dict = field(default_factory=dict)
    repeat: int = 1
    memory_limit_mb: int | None = None
    range_flags: tuple[str, str] = ("--from", "--to")  # how the user spelt the two ends (--version, GOOD, BAD)
    package: Package = field(default_factory=Package)  # which onnxruntime build, from where, on which provider
    engines: tuple[str, ...] = ()  # where a backend that takes engines runs probes (addresses, context names)
    ray_address: str | None = None  # a Ray cluster whose nodes run the probes (harness.executors.cluster)
    # each probe reads the internal fp16 margin (harness.graphs.margin): sweeps, matrices; None: on, except on an
    # emulated CPU (QEMU), where its second session costs more than the probe's own run
    margin: bool | None = False
    mode: str = "regression"  # which end is good: a slowdown's baseline (without --reference-release)
    time_budget: float = 60.0  # seconds a timed probe (slower, rss) may spend measuring against its baseline


@dataclass
class ProbeInputs:
    """A checked model and batch: what every probe of a run feeds the worker."""

    model: models.ResolvedModel
    batch: Path
    batch_digest: str
    outputs: tuple[str, ...]
    sizes: dict[str, int] = field(default_factory=dict)  # symbolic dims of the model's inputs in this batch
    warnings: tuple[str, ...] = ()  # what the batch does that onnxruntime runs but a user may not mean


@dataclass
class Request:
    """A request that passed every check: what a plan is made of (the runner is not provisioned yet)."""

    predicate: Predicate
    reference: Reference | None
    runner: Runner
    releases: list[Release]
    probe_inputs: ProbeInputs


# -- single values, also used by the command line and matrix files -------------------------

def predicate(text: str) -> Predicate:
    """`--bad-if TEXT` as a Predicate; a bound must be a finite number >= 0 (max |x| and differences are)."""
    pred = parse_predicate(text)
    for c in pred.conditions:
        if c.bound is not None and not (math.isfinite(c.bound) and c.bound >= 0):
            raise UsageError(f"--bad-if '{c}': the bound must be a finite number >= 0")
        if c.kind == "cosine" and c.bound > 1:
            raise UsageError(f"--bad-if {c}: a cosine is at most 1")
        if c.kind in TIMED and c.bound is not None and c.bound <= 1:  # a ratio to the baseline's: <= 1 means nothing
            raise UsageError(f"--bad-if {c}: the bound is a ratio to the baseline's and must be above 1 (at or below "
                             f"1 every release would be bad; e.g. {c.kind}>1.15)")
    return pred


def question(bad_if: str, reference=None, reference_release: str | None = None) -> Predicate:
    """The predicate of `--bad-if`, with one reference at most, given whenever the predicate compares with one."""
    pred = predicate(bad_if)
    given = [f for f, v in (("--reference", reference), ("--reference-release", reference_release)) if v]
    if len(given) > 1:
        raise UsageError("give one reference: --reference FILE.npz, --reference fp32 or --reference-release V")
    if pred.needs_reference and not given:
        raise UsageError(f"--bad-if {pred}: compares with a reference; give --reference fp32, "
                         "--reference-release V or --reference FILE.npz")
    return pred


def seconds(value, flag: str = "--timeout") -> float:
    """A timeout: a finite number of seconds >= 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise UsageError(f"{flag} {value}: give a finite number of seconds >= 1")
    return float(value)


def python_version(text: str, flag: str = "--python") -> str:
    """A Python version as MAJOR.MINOR (3.11): it names the probe environments' directories and goes to uv."""
    if not re.fullmatch(r"[0-9]+\.[0-9]+", str(text)):
        raise UsageError(f"{flag} {text!r}: not a Python version (MAJOR.MINOR, e.g. 3.11)")
    return str(text)


def directory(path: Path, flag: str) -> Path:
    """`path` if it is a directory or can be made one: neither it nor a parent on its way is a file."""
    path = models.text_name(path, flag)
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


def release_listing(cache_dir: Path, offline: bool = False, package: Package | None = None) -> list[Release]:
    """Every release of the package on the index and its sources (the index's listing is cached; `offline`
    reads the cache only, never the network)."""
    cache_dir = directory(cache_dir, "--cache-dir")
    if package is not None and package.from_npm:
        from harness.releases.npm import NpmIndex

        return NpmIndex(cache_dir, offline, package).releases()
    try:
        uv = uv_bin()
    except EnvironmentSkip as exc:  # no uv: the tool's environment (exit 1), not the request
        raise HarnessError(str(exc)) from None
    return ReleaseIndex(cache_dir, uv, offline, package).releases()


def pair_ranges(spec: SearchSpec, packages: list[Package]) -> list[list[Release]]:
    """The releases of each package from `spec.from_` to `spec.to` (`bisect compare --from --to`): both ends must be
    releases of some package's listing, the first not after the last, and every package must have a release in
    between. A release that one package has and another lacks is no refusal: the comparison says it."""
    listings = [release_listing(spec.cache_dir, spec.offline, p) for p in packages]
    names = " or ".join(dict.fromkeys(p.name for p in packages))
    union = list({r.version: r for rs in listings for r in rs}.values())
    select_range(union, spec.from_, spec.to, spec.range_flags, names)  # refuses an end no package has, or ends reversed
    lo, hi = parse_version(spec.from_), parse_version(spec.to)
    ranges = [[r for r in rs if lo <= parse_version(r.version) <= hi] for rs in listings]
    for p, rs in zip(packages, ranges):
        if not rs:
            raise UsageError(f"{p.label}: {p.name} has no release from {spec.from_} to {spec.to}; nothing to compare "
                             "it on")
    return ranges


def package(pkg: Package, device: bool = True) -> Package:
    """The package and provider a request names, checked before anything is listed or installed; `device`:
    the device the provider needs must be visible here (`device_missing`)."""
    eps = known_eps(pkg.name)
    if eps is None:
        raise UsageError(f"--package {pkg.name}: not an onnxruntime package this harness knows "
                         f"(known: {', '.join(PACKAGES)})")
    if pkg.ep not in eps:
        runs = [n for n, e in PACKAGES.items() if pkg.ep in e]
        hint = f"; {pkg.ep} is in {', '.join(runs)}" if runs else f" (providers: {', '.join(sorted({e for v in PACKAGES.values() for e in v}))})"
        raise UsageError(f"--ep {pkg.ep}: {pkg.name} runs {', '.join(eps)}, not {pkg.ep}{hint}")
    if pkg.ep == DEFAULT_EP and pkg.ep_options:  # the worker would hand them to the CPU provider, which reads none
        k, v = pkg.ep_options[0]
        raise UsageError(f"--ep-option {k}={v}: the CPU provider takes no provider options ({pkg.name} runs "
                         f"{', '.join(eps)}; options are for another provider)")
    if pkg.from_npm and (pkg.index_urls or pkg.find_links):
        flag, value = ("--index-url", pkg.index_urls[0]) if pkg.index_urls else ("--find-links", pkg.find_links[0])
        raise UsageError(f"{flag} {redact(value)}: a source of wheels; --binding {pkg.binding} installs {pkg.name} from "
                         "npm's registry (npm config set registry URL names another)")
    for link in pkg.find_links:
        models.text_name(Path(link), "--find-links")
        if "://" not in link and not Path(link).is_dir():
            raise UsageError(f"--find-links {link}: no such directory")
    for url in pkg.index_urls:
        if url.startswith("file://") and not Path(url.removeprefix("file://")).is_dir():
            raise UsageError(f"--index-url {redact(url)}: no such directory")
    for flag, sep, values in (("--index-url", " ", pkg.index_urls), ("--find-links", ",", pkg.find_links)):
        # uv takes these through one environment variable when one holds a secret, its values split at `sep`
        if any(has_secret(v) for v in values) and any(sep in v for v in values):
            bad = next(v for v in values if sep in v)
            raise UsageError(f"{flag} {redact(bad)}: a source with {sep!r} in it cannot go beside one that carries "
                             "credentials; quote it as %2C or %20")
    problem = device_missing(pkg) if device else None
    if problem:
        raise UsageError(f"--ep {pkg.ep}: {problem}; nothing was installed")
    return pkg


def device_missing(pkg: Package) -> str | None:
    """Why the device the package's provider needs (vocabulary.DEVICE_CHECKS) is not visible here, or None."""
    device = DEVICE_CHECKS.get(pkg.ep)
    return device_problem(*device) if device else None


def device_problem(command: str, missing: str) -> str | None:
    """Why the device a provider needs is not usable here (`command` fails or is absent), or None."""
    import shutil
    import subprocess

    found = shutil.which(command)
    if found is None:
        return f"{missing} ({command} is not installed)"
    try:
        proc = subprocess.run([found], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{missing} ({command} failed: {exc})"
    if proc.returncode != 0:
        said = (proc.stdout + proc.stderr).strip().splitlines()[:1]
        return f"{missing} ({command} exited with status {proc.returncode}" + (f": {said[0]}" if said else "") + ")"
    return None


# -- the whole request -------------------------------------------------------------------

def check(spec: SearchSpec, *, dump: tuple[str, ...] = (), nodes: tuple[str, ...] = (),
          device: bool = True) -> Request:
    """Every check of the request `spec`, in the order of the module docstring.

    `dump` and `nodes` are tensor and node names a command will use (`trace
    --dump`, `mitigate --node`); they must be the model's. `device=False`
    checks all but the device the provider needs (a matrix skips a cell whose
    device is missing, after checking the rest of it).
    """
    if spec.timeout is not None:
        seconds(spec.timeout)
    pred = question(spec.bad_if, spec.reference, spec.reference_release)
    if pred.timed:
        seconds(spec.time_budget, "--time-budget")

    package(spec.package, device)
    python_version(spec.python)
    if spec.ray_address and spec.package.from_npm:
        raise UsageError(f"--binding {spec.package.binding} runs its probes on this machine: a job ships the harness "
                         f"and Python packages to Ray nodes, not Node.js or npm; leave out --ray-address")
    # with --ray-address, the backend is the one the nodes of the target's arch use, not this machine's
    runner = make_runner(spec.backend, Target(canonical_arch(spec.arch), spec.python), spec.cache_dir, spec.cpu,
                         spec.package, spec.engines, on_nodes=bool(spec.ray_address))
    if spec.memory_limit_mb and not runner.supports_memory_limit:
        where = f"--binding {spec.package.binding}" if spec.package.from_npm else f"--backend {runner.backend}"
        raise UsageError(f"--memory-limit is not available with {where}")

    directory(spec.cache_dir, "--cache-dir")
    directory(spec.results_dir, "--results-dir")
    if models.is_path(spec.model):
        models.user_file(Path(spec.model), "--model", ".onnx")
    if spec.inputs:
        models.user_file(Path(spec.inputs), "--inputs", ".npz")
    by_file = spec.reference is not None and str(spec.reference) != reference_mod.FP32
    if by_file:
        models.user_file(Path(spec.reference), "--reference", ".npz")
    reference = inputs_mod.load_npz(Path(spec.reference), "--reference") if by_file else None
    resumed = _resumed(spec.results_dir, spec.resume)

    releases = select_range(release_listing(spec.cache_dir, spec.offline, spec.package), spec.from_, spec.to,
                            spec.range_flags, spec.package.name)
    _check_wheels(spec, runner.target, releases)
    ref_release = _reference_release(spec, runner.target) if spec.reference_release else None

    pi = _model_and_batch(spec)
    facts = pi.model.facts
    if reference is not None:
        inputs_mod.check_reference(facts, pi.sizes, reference, pi.outputs, f"--reference {spec.reference}")
    _check_names(facts, dump, nodes)
    if resumed is not None:
        _check_resumed(spec, resumed, pi, runner)
    return Request(pred, _reference(spec, reference, ref_release, pi), runner, releases, pi)


def _reference(spec: SearchSpec, arrays: dict[str, np.ndarray] | None, release: Release | None,
               pi: ProbeInputs) -> Reference | None:
    if arrays is not None:
        return reference_mod.from_file(Path(spec.reference), arrays, inputs_mod.arrays_digest(arrays))
    if release is not None:
        return reference_mod.from_release(release)
    if spec.reference is None:
        return None
    if not pi.model.facts.fp16:
        raise UsageError(f"--reference fp32: {pi.model.name} has no fp16 value or weight: it is its own fp32 version")
    return reference_mod.pending_fp32()


def _reference_release(spec: SearchSpec, target: Target) -> Release:
    """The reference release is a release of the index with a wheel for the target (inside the range or not)."""
    listing = {r.version: r for r in release_listing(spec.cache_dir, spec.offline, spec.package)}
    release = listing.get(spec.reference_release)
    if release is None:
        raise UsageError(f"--reference-release {spec.reference_release}: no such {spec.package.name} release "
                         f"(releases: {', '.join(list(listing)[:3])} ... {', '.join(list(listing)[-3:])})")
    if parse_version(release.version) < parse_version(OLDEST_RELEASE):  # the worker fails on it, after the probes
        raise UsageError(f"--reference-release {spec.reference_release}: older than the releases probes run on "
                         f"({OLDEST_RELEASE} and later)")
    if not release.wheel_for(target):
        raise UsageError(f"--reference-release {spec.reference_release}: no wheel for {target.arch} / "
                         f"Python {target.python}")
    return release


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
        raise UsageError(f"--python {target.python}: no {spec.package.name} release of {span} has a wheel for "
                         f"{target.arch} / Python {target.python} (there are wheels for Python {', '.join(pythons)})")
    raise UsageError(f"{_range_words(spec)}: no {spec.package.name} release of {span} has a Linux wheel for {target.arch}")


def _model_and_batch(spec: SearchSpec) -> ProbeInputs:
    """The model resolved, the batch loaded and checked against it, the outputs to check."""
    resolved = models.resolve(spec.model, spec.cache_dir, spec.offline)
    batch = Path(spec.inputs) if spec.inputs else inputs_mod.default_batch(resolved, spec.cache_dir)
    arrays = inputs_mod.load_npz(batch)
    warned: list[str] = []
    sizes = inputs_mod.check_inputs(resolved.facts, arrays, f"--inputs {spec.inputs}" if spec.inputs
                                    else f"the batch of {resolved.name}", warned)
    declared = [o.name for o in resolved.facts.outputs]
    outputs = tuple(spec.outputs) or resolved.spec.outputs
    for name in outputs:
        if name not in declared:
            who = f"--output {name}" if name in spec.outputs else f"model {resolved.name}: registered output {name}"
            raise UsageError(f"{who}: the model has no such output (its outputs: {', '.join(declared)})")
    return ProbeInputs(resolved, batch.resolve(), inputs_mod.arrays_digest(arrays), outputs, sizes, tuple(warned))


def _check_names(facts: models.Facts, dump: tuple[str, ...], nodes: tuple[str, ...]) -> None:
    for name in dump:
        if name not in facts.tensors:
            raise UsageError(f"--dump {name}: the model has no tensor of that name (a node's output)")
    for name in nodes:
        if name not in facts.nodes:
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
    if of_key(theirs, spec.package.pre) != spec.package.redacted():
        differ.append("package or provider")
    if differ:
        raise UsageError(f"--resume {spec.resume}: that run was made for another {', '.join(differ)}; "
                         "leave out --resume to start a new run")
