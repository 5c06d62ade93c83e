"""`bisect doctor`: which backends work on this host, and the command that fixes each gap."""

from __future__ import annotations

import platform
import shutil
import subprocess
from pathlib import Path

from harness.runners import native_arch
from harness.runners.provision import qemu as qp
from harness.runners.provision.binfmt import binfmt_status
from harness.runners.provision.sysroot import SYSROOT_DIRNAME, sysroot_python
from harness.runners.qemu import tools_dir


def _row(what: str, ok: bool, detail: str, fix: str = "") -> dict:
    return {"what": what, "ok": ok, "detail": detail, "fix": fix}


def checks(cache_dir: Path) -> list[dict]:
    rows = [_row("native arch", True, f"{native_arch()} ({platform.platform()})")]
    try:
        from harness.uvtool import uv_bin

        version = subprocess.run([uv_bin(), "--version"], capture_output=True, text=True).stdout.strip()
        rows.append(_row("uv (backend uv)", True, version))
    except Exception as exc:  # any failure here is what the row reports
        rows.append(_row("uv (backend uv)", False, str(exc), "pip install uv"))

    tools = tools_dir(cache_dir)
    q = qp.find_qemu(tools)
    if q is None:
        rows.append(_row("qemu-aarch64", False, "not found in the cache or on PATH", "uv run bisect setup qemu"))
    elif q.version < qp.MIN_QEMU:
        rows.append(_row("qemu-aarch64", False, f"{q.path} is QEMU {q.version}; >= {qp.MIN_QEMU} needed "
                         "(7.2 crashes onnxruntime >= 1.28)", "uv run bisect setup qemu"))
    else:
        rows.append(_row("qemu-aarch64", True, f"QEMU {q.version} at {q.path}"))
    sysroot = tools / SYSROOT_DIRNAME
    have_sysroot = sysroot_python(sysroot).exists()
    rows.append(_row("arm64 sysroot", have_sysroot, str(sysroot) if have_sysroot else "absent", "uv run bisect setup qemu"))

    b = binfmt_status()
    if not b.get("mounted"):
        rows.append(_row("binfmt_misc", False, "not mounted (needed by arm64 containers only)",
                         "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc"))
    else:
        reg = b.get("registered")
        rows.append(_row("binfmt qemu-aarch64", bool(reg),
                         f"interpreter {b.get('interpreter')} flags {b.get('flags')}" if reg else "not registered (arm64 containers only)",
                         "bash .ci/docker-engine.sh binfmt"))

    docker_cli = shutil.which("docker")
    try:
        from harness.runners.docker_engine import engine_status

        ok, reason = engine_status()
    except ImportError:
        ok, reason = False, "the docker SDK for Python is not installed"
    rows.append(_row("docker engine", ok, reason if docker_cli or ok else f"{reason}; no docker client either",
                     "bash .ci/docker-engine.sh start /tmp/ortbisect-docker (Debian: installs docker.io)"))
    return rows
