"""`bisect ...` run in this process through harness.cli.main, with nothing provisioned.

A subprocess pays the interpreter and the imports on every call (seconds on
a busy machine); the tables of bad input run hundreds of command lines. The
guard makes a request that passes every check end at the provisioning step
(`ProbeStarted`) instead of installing or probing anything: what is tested
is what happens before the first probe.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import platform
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.cli import main
from harness.plan import Plan, make_plan
from harness.request import SearchSpec
from harness.runners import AUTO, REGISTRY, Runner, check_target


class ProbeStarted(Exception):
    """The request passed every check: a runner was about to be provisioned."""


@dataclass
class Result:
    returncode: int | None  # None: the request got as far as provisioning (ProbeStarted)
    stdout: str
    stderr: str

    def json(self) -> dict:
        return json.loads(self.stdout)

    @property
    def lines(self) -> list[str]:
        return [x for x in self.stderr.splitlines() if x.strip()]


@contextlib.contextmanager
def nothing_provisioned(monkeypatch):
    """Every backend's `provision` raises ProbeStarted (so no probe, download or emulator can start)."""

    def refuse(self, log=None):
        raise ProbeStarted(self.backend)

    for cls in REGISTRY.values():
        monkeypatch.setattr(cls, "provision", refuse)
    yield


def refuse(*args, **kwargs):
    """In place of a step that must not be reached (the search, a probe): the request got that far."""
    raise ProbeStarted("reached")


def run(*args) -> Result:
    """`bisect ARGS` in this process; an exception other than ProbeStarted propagates (a traceback)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in args])
        except ProbeStarted:
            rc = None
    return Result(rc, out.getvalue(), err.getvalue())


def snapshot(root: Path) -> dict[str, str]:
    """Every file and directory under `root` with a digest of its bytes: equal snapshots, untouched tree."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): ("dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*"))}


def open_run(model: Path, batch: Path, cache: Path, results: Path, version: str = "1.20.0") -> Plan:
    """A run directory as `bisect run` opens it before its first probe (the native backend provisions nothing)."""
    arch = platform.machine()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(REGISTRY[check_target(AUTO, arch)], "provision", Runner.provision)
        return make_plan(SearchSpec(model=str(model), inputs=batch, from_=version, to=version, arch=arch,
                                    cache_dir=cache, results_dir=results, offline=True), ["test"])
