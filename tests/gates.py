"""Hold probe workers at run() so a test can signal one that is known to be running.

The harness passes ORTBISECT_HOLD_DIR to each worker's request; a worker then
writes `running-PID` there just before the model runs and waits for `go-PID`
(or `go`). No test depends on how fast the machine is.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness.probe import HOLD_DIR_ENV


class WorkerGate:
    def __init__(self, directory: Path):
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.seen: list[int] = []

    @property
    def env(self) -> dict[str, str]:
        return {HOLD_DIR_ENV: str(self.directory)}

    def next_running(self, harness: subprocess.Popen, timeout: float = 600) -> int:
        """The pid of the next worker that reached run(); fails if the harness ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for marker in sorted(self.directory.glob("running-*")):
                pid = int(marker.name.split("-", 1)[1])
                if pid not in self.seen:
                    self.seen.append(pid)
                    return pid
            if harness.poll() is not None:
                raise AssertionError(f"the harness ended (status {harness.returncode}) before another worker ran: "
                                     f"{harness.stderr.read() if harness.stderr else ''}")
            time.sleep(0.01)
        raise AssertionError(f"no worker reached run() in {timeout:.0f} s")

    def let_go(self, pid: int) -> None:
        (self.directory / f"go-{pid}").touch()

    def open(self) -> None:
        """Let every worker, present and future, run without waiting."""
        (self.directory / "go").touch()


def wait_for(condition, what: str, timeout: float = 120) -> None:
    """Poll `condition` until it holds; for states that are certain to come, not races."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.01)


def foreground(argv: list[str]) -> list[str]:
    """`argv` with SIGINT at its default, as a terminal's foreground job has it. A suite started in the background
    by a non-interactive shell inherits SIGINT ignored, and Python then keeps ignoring it (POSIX's rule for
    background jobs), so without this a test's Ctrl-C would never arrive."""
    return [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
            "os.execv(sys.argv[1], sys.argv[1:])", *argv]


def interrupted(argv: list[str], gate: WorkerGate, held: Callable[[subprocess.Popen], None], timeout: float = 60,
                **popen) -> tuple[int, str]:
    """`argv` run as a terminal's foreground job under `gate`, sent SIGINT (Ctrl-C) once `held(proc)` returns
    (it holds a probe inside its worker): the exit status and stderr. A harness still running `timeout` s after
    Ctrl-C fails the test with every thread's stack (SIGUSR1); the gate is opened and the process ended whatever
    happens."""
    proc = subprocess.Popen(foreground(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200", **gate.env}, **popen)
    try:
        held(proc)
        proc.send_signal(signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # every thread's stack, on stderr: where it hangs
            time.sleep(2)
            proc.kill()
            raise AssertionError(f"the harness did not end {timeout} s after Ctrl-C:\n"
                                 f"{proc.communicate()[1][-8000:]}") from None
    finally:
        gate.open()
        proc.kill()
    return proc.returncode, stderr
