"""Backends that run the probe worker: a registry of Runner classes, used through `Runner`.

Each backend's module declares on its Runner class what it serves (archs,
CPU models), what it records, how `bisect doctor` checks it, whether
`bisect setup <backend>` provisions it and how a report describes a run of
it (harness.runners.base). The functions here answer from those
declarations, so nothing outside this package names a backend.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness.errors import UsageError
from harness.releases.packages import KEYS as PACKAGE_KEYS
from harness.releases.packages import Package
from harness.releases.versions import Target
from harness.runners.base import Check, Environment, Runner, native_arch
from harness.runners.docker.pool import address_problem as engine_problem
from harness.runners.docker.runner import DockerRunner
from harness.runners.node import NodeRunner
from harness.runners.provision import Log, quiet
from harness.runners.qemu import QemuRunner
from harness.runners.uv import UvRunner

# the worker processes' life, for those who run probes: outcome of one, the pool a command's probes share
from harness.runners.workers import (
    ProcessOutcome,
    kill_live_workers,
    retire_early_workers,
    reusing_workers,
)

#: every backend by name, in the order `auto` considers them
REGISTRY: dict[str, type[Runner]] = {cls.backend: cls for cls in (UvRunner, QemuRunner, DockerRunner, NodeRunner)}
AUTO = "auto"
BACKENDS = (AUTO, *REGISTRY)
#: the provenance keys that tell targets apart (the common ones, then each backend's own, then the package's)
PROVENANCE_KEYS = (*Runner.provenance_keys, *(k for cls in REGISTRY.values() for k in cls.provenance_extra),
                   *PACKAGE_KEYS)


def flag(key: str, value: str) -> str:
    """How the command line spells what the user typed: `--arch sparc`."""
    return f"--{key} {value}"


def _spell_backends(names: list[str], spell: Callable[[str, str], str]) -> str:
    return " or ".join(spell("backend", n) for n in names)


def check_target(backend: str, arch: str, cpu: str | None = None,
                 spell: Callable[[str, str], str] = flag, binding: str = "python", host: str | None = None) -> str:
    """The backend that runs `arch` probes of `binding` on a machine of arch `host` (None: this one), on the
    emulated CPU model `cpu` if one is given.

    The one place for "this backend does not serve that arch" and "--cpu is
    only for a backend that emulates": a UsageError blames only what the user
    typed, spelt by `spell(key, value)` (a flag by default; a matrix passes
    its own), never a backend that `auto` picked. Cheap: nothing is provisioned.
    Probes that run on a cluster's nodes are chosen for the nodes of their own
    arch (`host=arch`): `auto` is then the native backend, and emulation is
    only where the backend named asks for it.
    """
    of_binding = {n: c for n, c in REGISTRY.items() if binding in c.bindings}
    serving = [n for n, c in of_binding.items() if c.serves(arch, host)]
    words = "" if binding == "python" else f" of {spell('binding', binding)}"
    where = "here" if host is None else "on the nodes"
    if backend == AUTO:
        cls = next((c for c in of_binding.values() if c.auto and c.serves(arch, host)), None)
        if cls is None:
            if serving:
                raise UsageError(f"{spell('arch', arch)}: {arch} probes need {_spell_backends(serving, spell)} {where}")
            served = "; ".join(f"{n}: {', '.join(c.archs(host)) or 'none'}" for n, c in of_binding.items())
            raise UsageError(f"{spell('arch', arch)}: no backend runs {arch} probes{words} {where} ({served})")
    else:
        cls = REGISTRY.get(backend)
        if cls is None:
            raise UsageError(f"{spell('backend', backend)}: unknown backend (choose from {', '.join(BACKENDS)})")
        if binding not in cls.bindings:
            them = " or ".join(spell("binding", b) for b in cls.bindings)
            raise UsageError(f"{spell('backend', backend)} runs probes of {them}, not {spell('binding', binding)}"
                             + (f" (it runs on {_spell_backends(list(of_binding), spell)})" if of_binding else ""))
        if not cls.serves(arch, host):
            hint = f"; for {arch} use {_spell_backends(serving, spell)}" if serving else ""
            raise UsageError(f"{spell('backend', backend)} runs {', '.join(cls.archs(host))} probes, not {arch}{hint}")
    if cpu:
        if not cls.emulates(arch):
            who = f"{spell('backend', backend)} runs {arch} probes" if backend != AUTO else f"{arch} probes run"
            emulators = [n for n in serving if REGISTRY[n].emulates(arch)]
            hint = f" (to emulate one: {_spell_backends(emulators, spell)})" if emulators else ""
            cpus = "this host's own CPU" if host is None else "the nodes' own CPUs"
            raise UsageError(f"{spell('cpu', cpu)}: {who} on {cpus}, there is no CPU model to choose{hint}")
        problem = cls.cpu_problem(cpu)
        if problem:
            raise UsageError(f"{spell('cpu', cpu)}: {problem}")
    return cls.backend


def emulators(arch: str) -> str:
    """The backends that emulate `arch` on a machine of another arch, as flags ('' where none does)."""
    return _spell_backends([n for n, c in REGISTRY.items() if c.emulates(arch)], flag)


def make_runner(backend: str, target: Target, cache_dir: Path, cpu: str | None = None,
                package: Package | None = None, engines: tuple[str, ...] = (), on_nodes: bool = False) -> Runner:
    """A runner for `target` that installs `package` (default: onnxruntime) and runs probes on `engines` (addresses,
    where the backend takes them), checked but not provisioned: call its `provision` before the first probe.

    `on_nodes`: its probes run on a cluster's nodes of the target's arch (harness.executors), so the backend is
    the one those nodes use (check_target's `host`), and this runner is what the run's key and records say
    of it; each node makes its own from the same backend."""
    name = check_target(backend, target.arch, cpu, binding=(package or Package()).binding,
                        host=target.arch if on_nodes else None)
    if len(engines) > 1:  # several machines are a cluster's work: one scheduler, with retries and placement
        raise UsageError(f"--docker-host {engines[1]}: probes run on one Docker engine; to spread them over "
                         f"several machines, make each a Ray node and give --ray-address (see docs/guide/cluster.md)")
    if engines and not REGISTRY[name].takes_engines:
        takers = [n for n, c in REGISTRY.items() if c.takes_engines]
        raise UsageError(f"--docker-host {engines[0]}: engines run probes with {_spell_backends(takers, flag)} only"
                         + ("" if backend == AUTO else f", not {flag('backend', backend)}"))
    runner = REGISTRY[name](target, cache_dir, cpu)
    if package is not None:
        runner.package = package
    runner.engines = tuple(engines)
    return runner


def describe(provenance: dict, seen_cpu: str | None, version: str, script: str) -> dict:
    """How a probe with this provenance ran: {"how", "cpu_model", "reproduce"} (see Runner.describe)."""
    return REGISTRY.get(provenance.get("backend"), Runner).describe(provenance, seen_cpu, version, script)


def doctor_checks(cache_dir: Path, engines: tuple[str, ...] = ()) -> list[Check]:
    """Every backend's checks of this host, in registry order; with `engines`, those engines too."""
    return [check for cls in REGISTRY.values() for check in cls.doctor(cache_dir, engines if cls.takes_engines else ())]


def setups() -> dict[str, type[Runner]]:
    """The backends that can be provisioned ahead of time (`bisect setup <name>`)."""
    return {name: cls for name, cls in REGISTRY.items() if cls.setup_help}


__all__ = [
    "AUTO", "BACKENDS", "PROVENANCE_KEYS", "REGISTRY", "Check", "Environment", "Log", "ProcessOutcome", "Runner",
    "check_target", "describe", "doctor_checks", "emulators", "engine_problem", "flag", "kill_live_workers",
    "make_runner",
    "native_arch", "quiet", "retire_early_workers", "reusing_workers", "setups",
]
