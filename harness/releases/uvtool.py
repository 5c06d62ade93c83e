"""The uv executable: it lists releases, makes environments and resolves foreign wheels.

uv is the harness's package tool before it is a backend (the native backend
merely runs probes in the environments it makes), so finding and calling it
lives here, apart from harness.runners.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from harness.errors import EnvironmentSkip
from harness.releases.credentials import redact


def uv_bin() -> str:
    """The uv that ships with the harness (the `uv` package), else the one on PATH."""
    try:
        from uv import find_uv_bin

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if not found:
            raise EnvironmentSkip("uv not found: install it (pip install uv)") from None
        return found


def uv(*args: str, what: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run uv; a failure becomes a skip whose reason is uv's own explanation.

    Installs pass --no-compile-bytecode: a project's `compile-bytecode` setting
    (this one's included) would otherwise compile ~2,500 files into every
    release environment, 10 s instead of 1 s; the worker writes the few .pyc
    files it needs on its first run. `env` is added to the harness's environment (a source's credentials:
    harness.releases.credentials).
    """
    proc = subprocess.run([uv_bin(), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, **env} if env else None)
    if proc.returncode != 0:
        raise EnvironmentSkip(f"{what} failed: {install_error(proc)}")
    return proc


def install_error(proc: subprocess.CompletedProcess) -> str:
    """The line of uv's stderr that says why, for the skip reason (a URL's credentials masked: it is recorded)."""
    lines = [redact(ln.strip()) for ln in proc.stderr.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith(("×", "error:", "╰─▶")):
            return ln.lstrip("×╰─▶ ").strip()
    return lines[-1] if lines else f"uv exited with status {proc.returncode}"
