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


def uv(*args: str, what: str, binary: str | None = None, env: dict[str, str] | None = None
       ) -> subprocess.CompletedProcess:
    """Run uv (`binary`, else uv_bin()); a failure becomes a skip whose reason is uv's own explanation.

    Every call of uv goes through here, so none loses uv's reason (its stderr) to an exit status. Where a
    failure is the tool's environment rather than one release's, the caller turns the skip into a HarnessError.

    Installs pass --no-compile-bytecode: a project's `compile-bytecode` setting
    (this one's included) would otherwise compile ~2,500 files into every
    release environment, 10 s instead of 1 s; and no RECORD lists bytecode, so a
    verified environment holds none (harness.runners.verify; the worker runs
    with -B). `env` is added to the harness's environment (a source's credentials:
    harness.releases.credentials).
    """
    try:
        proc = subprocess.run([binary or uv_bin(), *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              env={**os.environ, **env} if env else None)
    except OSError as exc:  # the binary went away or cannot run
        raise EnvironmentSkip(f"{what} failed: cannot run uv ({exc.strerror or exc})") from None
    if proc.returncode != 0:
        raise EnvironmentSkip(f"{what} failed: {install_error(proc)}")
    return proc


ERROR_MARKS = ("×", "error:", "╰─▶")
CAUSE_MARKS = ("caused by:", "cause:")


def install_error(proc: subprocess.CompletedProcess) -> str:
    """What uv's stderr says is wrong, on one line: its error line and the causes it gives under it (a URL's
    credentials masked: it is recorded)."""
    lines = [redact(ln.strip()) for ln in proc.stderr.splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if ln.startswith(ERROR_MARKS):
            said = [_unmarked(ln)]
            for cause in lines[i + 1:]:
                if cause.startswith("╰─▶"):
                    said.append(_unmarked(cause))
                elif cause.lower().startswith(CAUSE_MARKS):
                    said.append(cause.split(":", 1)[1].strip())
                else:
                    break
            return ": ".join(x.rstrip(":").strip() for x in said if x.rstrip(":").strip())
    return lines[-1] if lines else f"uv exited with status {proc.returncode}"


def _unmarked(line: str) -> str:
    line = line.lstrip("×╰─▶ ").strip()
    return line.removeprefix("error:").strip()
