"""Emulated backend: an aarch64 CPython under QEMU user mode, no container needed.

The release's aarch64 wheels come from a site directory resolved on the host
(`sites`); QEMU >= 10 and an arm64 sysroot with CPython come from
`provision.qemu` and `provision.sysroot`, set up by `provision` before the
first probe (or ahead of time by `bisect setup qemu`). `--cpu` chooses the
emulated CPU model, which decides the kernels onnxruntime picks.
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.errors import UsageError
from harness.runners.base import WORKER, Environment, ProcessOutcome, Runner, run_worker_process
from harness.runners.provision import Log, ProvisionError, quiet
from harness.runners.provision import qemu as qp
from harness.runners.provision.sysroot import setup_sysroot, sysroot_python
from harness.runners.sites import discard_site, prepare_site
from harness.versions import Release

ARCH = "aarch64"


def tools_dir(cache_dir: Path) -> Path:
    return cache_dir / "tools"


def setup_tools(cache_dir: Path, log: Log = quiet) -> tuple[qp.QemuBinary, Path]:
    """QEMU >= 10 and the arm64 sysroot, found or set up (idempotent, locked)."""
    tools = tools_dir(cache_dir)
    try:
        found = qp.find_qemu(tools)
        qemu = found if found is not None and found.version >= qp.MIN_QEMU else qp.setup_qemu(tools, log=log)
        sysroot = setup_sysroot(tools, log=log)
        return qp.check_qemu(qemu), sysroot
    except ProvisionError as exc:
        raise UsageError(str(exc)) from None


class QemuRunner(Runner):
    backend = "qemu"
    supports_memory_limit = False  # QEMU user mode reserves the guest's address space up front

    def __init__(self, target, cache_dir, cpu=None):
        if target.arch != ARCH:
            raise UsageError(f"--backend qemu runs {ARCH} probes, not {target.arch}")
        if target.python != "3.11":
            raise UsageError(f"--backend qemu has CPython 3.11 in its sysroot, not {target.python}")
        super().__init__(target, cache_dir, cpu or qp.DEFAULT_CPU)
        self.qemu: qp.QemuBinary | None = None
        self.sysroot: Path | None = None

    def provision(self, log: Log = quiet) -> None:
        if self.qemu is not None:
            return
        qemu, sysroot = setup_tools(self.cache_dir, log)
        try:
            qp.check_cpu(qemu, self.cpu)  # the binary's own list is the authority
        except ProvisionError as exc:
            raise UsageError(str(exc)) from None
        self.qemu, self.sysroot = qemu, sysroot

    def _tools(self) -> tuple[qp.QemuBinary, Path]:
        if self.qemu is None or self.sysroot is None:
            raise RuntimeError("the qemu runner is used before provision()")
        return self.qemu, self.sysroot

    def provenance(self) -> dict:
        return {**super().provenance(), "qemu": str(self._tools()[0].version)}

    def prepare(self, release: Release) -> Environment:
        return prepare_site(self.cache_dir, self.target, release)

    def discard(self, env: Environment) -> None:
        discard_site(env)

    def run(self, env: Environment, request: dict, workdir: Path, timeout: float) -> ProcessOutcome:
        qemu, sysroot = self._tools()
        argv = qp.qemu_command(qemu, sysroot, self.cpu, [sysroot_python(sysroot), "-s", str(WORKER)])
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "QEMU_"))}
        child_env.update(PYTHONPATH=str(env.path / "site"), PYTHONNOUSERSITE="1", PYTHONSAFEPATH="1")
        return run_worker_process(argv, request, workdir, timeout, env=child_env)
