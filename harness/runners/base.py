"""The runner interface: one small contract for every backend (uv, qemu, docker).

A runner makes (or reuses) the environment of one release for its target and
runs the probe worker in it. Everything above this layer (search, results,
report) sees only `Runner` and `ProcessOutcome`, never a backend's name.

A Runner class also declares what the rest of the harness may ask about its
backend without making one: the archs it serves, whether `--cpu` applies and
which CPU models it knows, its provenance keys, its `bisect doctor` checks,
its `bisect setup` step and how a report describes a run of it. The registry
(harness.runners) answers from these declarations.
"""

from __future__ import annotations

import contextlib
import json
import platform
import shlex
import shutil
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from harness.errors import EnvironmentSkip
from harness.releases.packages import Package
from harness.releases.versions import Release, Target
from harness.results.locking import file_lock
from harness.runners.ownership import check_environment, forget, tighten
from harness.runners.provision import Log, quiet
from harness.runners.verify import MEMO, native_problem, verify_site
from harness.runners.workers import (
    ProcessOutcome,
    end_idle_workers,
    run_worker_process,
    start_early,
)

WORKER = Path(__file__).resolve().parent.parent / "worker.py"

@dataclass
class Environment:
    """A release installed for one target: what the worker runs with."""

    version: str
    path: Path
    created: bool  # made by this call (cold) rather than reused (warm)
    seconds: float  # time spent creating or finding it
    info: dict = field(default_factory=dict)


def native_arch() -> str:
    return platform.machine()


@dataclass(frozen=True)
class Check:
    """One row of `bisect doctor`: what was checked, whether it is fine, and the command that fixes it."""

    what: str
    ok: bool
    detail: str
    fix: str = ""


class Runner(ABC):
    """Create/reuse release environments for one target and run the worker in them.

    Constructing a runner only validates and stores what it was asked for;
    whatever the backend needs on the host (an emulator, an image) is set up
    by `provision`, which session code calls once before the first probe.
    """

    #: the backend's name, as --backend takes it
    backend: ClassVar[str]
    #: whether --backend auto may pick it for an arch it serves (the first in registry order wins)
    auto: ClassVar[bool] = False
    #: the bindings (harness.vocabulary.BINDINGS) whose probes it runs: the Python wheels, unless it says others
    bindings: ClassVar[tuple[str, ...]] = ("python",)
    #: CPU models --cpu may name, where the backend emulates the arch
    cpus: ClassVar[tuple[str, ...]] = ()
    #: provenance keys every backend records, then the ones this backend adds
    provenance_keys: ClassVar[tuple[str, ...]] = ("arch", "backend", "cpu", "python")
    provenance_extra: ClassVar[tuple[str, ...]] = ()
    #: what `bisect setup <backend>` provisions ahead of time; None: the backend has no such step
    setup_help: ClassVar[str | None] = None
    #: whether the worker may cap its own address space (ProbeJob.memory_limit_mb)
    supports_memory_limit = True
    #: the onnxruntime build a release's environment holds (harness.releases.packages); make_runner sets another
    package: Package = Package()
    #: whether the backend runs probes on engines named by address (--docker-host); make_runner sets `engines`
    takes_engines: ClassVar[bool] = False
    engines: tuple[str, ...] = ()
    #: where this runner's probes run (harness.executors; make_plan sets it): None, here
    executor: object | None = None

    def __init__(self, target: Target, cache_dir: Path, cpu: str | None = None):
        self.target = target
        self.cache_dir = cache_dir
        self.cpu = cpu
        self._verified: dict[Path, str | None] = {}  # site -> why it failed verification, or None
        self.rebuilt: dict[str, str] = {}  # release -> why its environment was rebuilt ahead of a probe, until one tells it
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    @classmethod
    @abstractmethod
    def archs(cls, host: str | None = None) -> tuple[str, ...]:
        """The archs this backend runs probes for on a machine of arch `host` (None: this one)."""

    @classmethod
    def serves(cls, arch: str, host: str | None = None) -> bool:
        return arch in cls.archs(host)

    @classmethod
    def emulates(cls, arch: str) -> bool:
        """Whether `arch` probes run on an emulated CPU (so --cpu chooses its model)."""
        return False

    @classmethod
    def cpu_problem(cls, cpu: str) -> str | None:
        """Why `cpu` is not a model this backend emulates, or None; cheap (nothing is provisioned)."""
        return None if cpu in cls.cpus else f"not a CPU model of {cls.backend} (choose one of: {', '.join(cls.cpus)})"

    @classmethod
    def doctor(cls, cache_dir: Path, engines: tuple[str, ...] = ()) -> list[Check]:
        """What this backend needs on the host (and on `engines`, where it takes them), checked without changing
        anything."""
        return []

    @classmethod
    def setup(cls, cache_dir: Path, log: Log = quiet) -> list[str]:
        """Provision ahead of time what `provision` would (only with `setup_help`); lines saying what is ready."""
        raise NotImplementedError(f"{cls.backend} has no setup step")

    @classmethod
    def setup_command(cls, cache_dir: Path) -> str:
        """The `bisect setup` command line for this backend and the user's cache."""
        return f"uv run bisect setup {cls.backend} --cache-dir {shlex.quote(str(cache_dir))}"

    @classmethod
    def describe(cls, provenance: dict, seen_cpu: str | None, version: str, script: str) -> dict:
        """How a probe ran, for a report: "how" it ran, the "cpu_model" to name, and how to
        "reproduce" it on that platform with `script` and onnxruntime `version` (None: plain pip)."""
        return {"how": f"backend {provenance.get('backend') or '?'}", "cpu_model": seen_cpu or "?", "reproduce": None}

    def provision(self, log: Log = quiet) -> None:
        """Set up (or find) what this backend needs on the host; idempotent, progress through `log`."""

    def provenance(self) -> dict:
        """What is recorded with each probe (backend, arch, cpu, emulator/image..., and the package and
        provider unless they are the default ones); after `provision`. A run's key is made of it."""
        return {"backend": self.backend, "arch": self.target.arch, "python": self.target.python, "cpu": self.cpu,
                **self.package.key()}

    @abstractmethod
    def prepare(self, release: Release) -> Environment:
        """Install `release` (or reuse it); raise EnvironmentSkip when it cannot be."""

    def worker_command(self, env: Environment) -> tuple[list[str], dict] | None:
        """The worker's command line and process environment for `env`, where the backend runs the worker as a
        local process (None: it runs elsewhere, e.g. in a container, and `run` is the backend's own)."""
        return None

    def run(self, env: Environment, request: dict, workdir: Path, timeout: float) -> ProcessOutcome:
        """Run the worker on `request` (host paths) with its files under `workdir`."""
        command = self.worker_command(env)
        if command is None:
            raise NotImplementedError(f"{self.backend}: a backend without a local worker command runs its own probes")
        argv, child_env = command
        return run_worker_process(argv, request, workdir, timeout, env=child_env)

    def start_early(self, env: Environment, memory_limit_mb: int | None, tag: str) -> None:
        """Start the worker of `env` now, so that its imports overlap other work and the next request of the
        same command takes it (only within `reusing_workers()`, for a local worker and no memory cap: the cap
        is set before onnxruntime is imported). `tag` names it for `retire_early_workers`."""
        command = self.worker_command(env)
        if command is not None and not memory_limit_mb:
            start_early(*command, tag=tag)

    def end_served(self, env: Environment, side: str) -> None:
        """End the idle serving worker of `env` a timed comparison kept for `side` between its rounds."""
        command = self.worker_command(env)
        if command is not None:
            end_idle_workers(*command, side)

    def discard(self, env: Environment) -> None:
        """Forget a broken environment so the next prepare() rebuilds it."""

    def prepare_verified(self, release: Release, report: bool = True) -> tuple[Environment, str | None]:
        """`prepare`, then the environment verified by content before it gives a verdict (`verify`), and why it
        was rebuilt (None: it was right as found). Rebuilt once; EnvironmentSkip if still not right. One thread
        at a time per release: an install ahead of the probe may be verifying it. A caller that reports no
        rebuild (`report=False`: that install) leaves it to be told by the next call that does."""
        with self.verification_lock(release.version):
            env = self.prepare(release)
            why = self.verify(env)
            if why is None:
                # told once, by the first probe that uses it: later ones used it as found
                return env, self.rebuilt.pop(release.version, None)
            why = f"the environment of {release.version} is not the release's wheels: {why}"
            self.discard(env)
            self.forget_verified(env)
            try:
                env = self.prepare(release)
            except EnvironmentSkip as exc:
                raise EnvironmentSkip(f"{why}; it could not be rebuilt: {exc}") from None
            still = self.verify(env)
            if still:
                raise EnvironmentSkip(f"{why}; after a rebuild: {still}")
            if report:
                return env, why
            self.rebuilt[release.version] = why
            return env, None

    def site_packages(self, env: Environment) -> Path:
        """The folder the worker imports onnxruntime and numpy from (a `--target` site, unless the backend
        makes another kind of environment)."""
        return env.path / "site"

    def verify(self, env: Environment) -> str | None:
        """Why `env` is not exactly what the release's wheels installed (harness.runners.verify), or None.
        Checked once per runner (one command) and environment; again after a worker crash, where the memo
        makes it cheap."""
        site = self.site_packages(env)
        if site not in self._verified:
            self._verified[site] = verify_site(site, self.package.name, env.version, env.path / MEMO)
        return self._verified[site]

    def worker_site(self, env: Environment) -> str:
        """`site_packages(env)` as the worker sees it (a backend that mounts it elsewhere says where)."""
        return str(self.site_packages(env))

    def native_problem(self, env: Environment, native) -> str | None:
        """Why the native library a probe's worker reports loading (`native`, of its result) is not the compiled
        core that `env`'s wheel installed, or None (harness.runners.verify.native_problem)."""
        return native_problem(self.site_packages(env), self.worker_site(env), self.package.name, native)

    def verification_lock(self, version: str) -> threading.Lock:
        """Held while one thread verifies (and maybe rebuilds) the environment of `version`."""
        with self._locks_lock:
            return self._locks.setdefault(version, threading.Lock())

    def forget_verified(self, env: Environment) -> None:
        """Check `env` again before its next use (it was rebuilt, or a worker crashed in it)."""
        self._verified.pop(self.site_packages(env), None)

    def build_info(self, release: Release, install: bool = False) -> str | None:
        """`get_build_info()` of the release's build as a probe of it (or an earlier call) noted it; with
        `install`, read in its environment (installed first); None where this backend cannot tell."""
        return None

    def note_build_info(self, env: Environment, info: str) -> None:
        """Keep what a probe's worker saw of the build (`get_build_info()`), for `build_info`."""


READY = "ortbisect-ready.json"


def locked_build(path: Path, version: str, build, cache_dir: Path) -> Environment:
    """Reuse `path` if a finished build is there, else build it under a per-path lock.

    `build(path)` fills the directory and returns info to record; the ready
    marker is written last, so a build cut short is redone, never used. A
    finished build that another user owns or may change (from `cache_dir` down)
    is refused before it runs (ownership.check_environment).
    """
    t0 = time.perf_counter()
    marker = path / READY
    with contextlib.ExitStack() as held:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            held.enter_context(file_lock(Path(str(path) + ".lock")))
        except OSError as exc:
            if marker.exists():  # a read-only cache still serves what it holds
                check_environment(path, cache_dir)
                return Environment(version, path, False, time.perf_counter() - t0, json.loads(marker.read_text()))
            raise EnvironmentSkip(f"cannot create an environment in {path.parent}: {exc.strerror or exc}") from None
        if marker.exists():
            check_environment(path, cache_dir)
            return Environment(version, path, False, time.perf_counter() - t0, json.loads(marker.read_text()))
        forget(path)
        shutil.rmtree(path, ignore_errors=True)
        try:
            info = build(path)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        tighten(path)
        info = {**info, "version": version, "created_s": round(time.perf_counter() - t0, 3)}
        marker.write_text(json.dumps(info))
    return Environment(version, path, True, time.perf_counter() - t0, info)


def forget_build(path: Path) -> None:
    forget(path)
    with file_lock(Path(str(path) + ".lock")):
        (path / READY).unlink(missing_ok=True)
