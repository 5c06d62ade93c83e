"""Where a probe runs: between the driver (which keeps the search and writes every record) and the runners.

An executor takes one probe (the probe function, the runner, the release, the job, a scratch folder and where
the outputs go) and gives back its record. `Local` runs it here, in this process's threads. `cluster.RayExecutor`
(`--ray-address`) runs it as a Ray task on a node of the right arch, with the node's own runner and cache, and
brings the record and outputs back through Ray's object store. Nothing above this layer names Ray.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from harness.errors import UsageError

#: probe(runner, release, job, workdir, outputs_path) -> record: harness.probe.run_probe, handed down
ProbeFunction = Callable[..., dict]

#: what a missing extra says, in one line
NO_RAY = "--ray-address: Ray is not installed here; install the extra with `uv sync --extra ray`"


class Executor(Protocol):
    #: whether probes run elsewhere: nothing is installed or started here ahead of them
    remote: bool
    #: the threads each probe's session may use (None: a share of this machine's cores)
    cpus_per_probe: int | None

    def probe(self, probe: ProbeFunction, runner, release, job, workdir: Path, outputs_path: Path | None) -> dict: ...
    def stop(self) -> None: ...


class Local:
    """Probes in this process (a thread each), on this machine's runner: what every command does by default."""

    remote = False
    cpus_per_probe = None

    def probe(self, probe: ProbeFunction, runner, release, job, workdir: Path, outputs_path: Path | None) -> dict:
        return probe(runner, release, job, workdir, outputs_path)

    def stop(self) -> None:
        pass  # the caller kills the live workers (harness.runners.kill_live_workers)


LOCAL = Local()


def executor_of(runner) -> Executor:
    """The executor a runner's probes go through (make_plan sets it; default: here)."""
    return getattr(runner, "executor", None) or LOCAL


def connect(address: str | None, runner, model_files: tuple[Path, ...] = ()) -> Executor:
    """The executor for `--ray-address ADDRESS` (None: local), checked against the runner's target before any
    probe: a target no node can run is refused in one line. The runner is the one the nodes use (made with
    `on_nodes`: native on nodes of the target's arch, emulated only where the backend asked for emulates);
    `model_files` are the model's files (the model, then its external data), shipped with it."""
    if not address:
        return LOCAL
    try:
        import ray  # noqa: F401
    except ImportError:
        raise UsageError(NO_RAY) from None
    from harness.executors.cluster import RayExecutor

    return RayExecutor.connect(address, runner, model_files)


__all__ = ["LOCAL", "NO_RAY", "Executor", "Local", "ProbeFunction", "connect", "executor_of"]
