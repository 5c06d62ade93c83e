"""Emulated backend: an aarch64 CPython under QEMU user mode, no container needed.

The release's aarch64 wheels come from a site directory resolved on the host
(`sites`); QEMU >= 10 and an arm64 sysroot with CPython come from
`provision.qemu` and `provision.sysroot`, set up by `provision` before the
first probe (or ahead of time by `bisect setup qemu`). `--cpu` chooses the
emulated CPU model, which decides the kernels onnxruntime picks.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from harness.errors import UsageError
from harness.releases.versions import Release, Target
from harness.runners.base import WORKER, Check, Environment, Runner
from harness.runners.provision import Log, ProvisionError, quiet
from harness.runners.provision import qemu as qp
from harness.runners.provision.sysroot import (
    SYSROOT_DIRNAME,
    setup_sysroot,
    sysroot_python,
)
from harness.runners.sites import discard_site, prepare_site, site_install_args

ARCH = "aarch64"
PYTHON = "3.11"  # the sysroot's CPython


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
    auto = True  # the way to run foreign aarch64 probes that needs nothing but the cache
    cpus = qp.KNOWN_CPUS
    provenance_extra = ("qemu",)
    setup_help = "QEMU >= 10 (user mode) and an arm64 sysroot with CPython, into the cache (no host changes)."
    supports_memory_limit = False  # QEMU user mode reserves the guest's address space up front

    def __init__(self, target, cache_dir, cpu=None):
        if target.python != PYTHON:
            raise UsageError(f"--python {target.python}: aarch64 probes under QEMU run the sysroot's CPython {PYTHON}")
        super().__init__(target, cache_dir, cpu or qp.DEFAULT_CPU)
        self.qemu: qp.QemuBinary | None = None
        self.sysroot: Path | None = None

    @classmethod
    def archs(cls, host: str | None = None) -> tuple[str, ...]:
        return (ARCH,)

    @classmethod
    def emulates(cls, arch: str) -> bool:
        return True

    @classmethod
    def cpu_problem(cls, cpu: str) -> str | None:
        return qp.cpu_problem(cpu, cls.cpus)

    @classmethod
    def doctor(cls, cache_dir: Path, engines: tuple[str, ...] = ()) -> list[Check]:
        fix = cls.setup_command(cache_dir)
        tools = tools_dir(cache_dir)
        q = qp.find_qemu(tools)
        if q is None:
            rows = [Check("qemu-aarch64", False, "not found in the cache or on PATH", fix)]
        elif q.version < qp.MIN_QEMU:
            rows = [Check("qemu-aarch64", False, f"{q.path} is QEMU {q.version}; >= {qp.MIN_QEMU} needed "
                          "(7.2 crashes onnxruntime >= 1.28)", fix)]
        else:
            rows = [Check("qemu-aarch64", True, f"QEMU {q.version} at {q.path}")]
        sysroot = tools / SYSROOT_DIRNAME
        have_sysroot = sysroot_python(sysroot).exists()
        rows.append(Check("arm64 sysroot", have_sysroot, str(sysroot) if have_sysroot else "absent", fix))
        return rows

    @classmethod
    def setup(cls, cache_dir: Path, log: Log = quiet) -> list[str]:
        qemu, sysroot = setup_tools(cache_dir, log)
        return [f"qemu-aarch64 {qemu.version} at {qemu.path}", f"arm64 sysroot at {sysroot}"]

    @classmethod
    def describe(cls, provenance: dict, seen_cpu: str | None, version: str, script: str) -> dict:
        cpu = provenance.get("cpu")
        model = cpu or seen_cpu or "?"
        if seen_cpu:
            model += f" (/proc/cpuinfo under emulation says {seen_cpu})"
        python = provenance.get("python") or PYTHON
        sysroot = Path("$SYSROOT")
        binary = qp.QemuBinary(Path("qemu-aarch64"), qp.MIN_QEMU)
        # values of a record, quoted: the command is for a reader to paste ($SYSROOT is left for the shell)
        run = qp.qemu_command(binary, sysroot, shlex.quote(cpu or qp.DEFAULT_CPU),
                              [sysroot_python(sysroot), shlex.quote(script)])
        reproduce = [f"# QEMU >= {qp.MIN_QEMU} user mode; SYSROOT: an arm64 Debian root with CPython {python}",
                     shlex.join(["uv", *site_install_args("site", Target(ARCH, python), version)]),
                     "PYTHONPATH=site " + " ".join(run)]
        return {"how": f"QEMU {provenance.get('qemu', '?')} user mode, emulated CPU {cpu or 'default'}",
                "cpu_model": model, "reproduce": "\n".join(reproduce)}

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
        return prepare_site(self.cache_dir, self.target, release, self.package)

    def discard(self, env: Environment) -> None:
        discard_site(env)

    def worker_command(self, env: Environment) -> tuple[list[str], dict]:
        qemu, sysroot = self._tools()
        argv = qp.qemu_command(qemu, sysroot, self.cpu, [sysroot_python(sysroot), "-S", "-s", "-B", str(WORKER)])
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "QEMU_"))}
        # as the uv runner's worker (UvRunner.python_command): only the verified site, no .pth, no bytecode
        child_env.update(PYTHONPATH=str(self.site_packages(env)), PYTHONNOUSERSITE="1", PYTHONSAFEPATH="1",
                         PYTHONDONTWRITEBYTECODE="1")
        return argv, child_env
