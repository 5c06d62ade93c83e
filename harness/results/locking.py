"""One inter-process lock for everything the cache shares between runs.

A blocking flock(2) on a lock file next to what it guards: it is released by
the kernel if the holder dies, wakes the next waiter at once (no polling), and
costs no import beyond the standard library. A waiter that may be told to stop
(a probe thread on Ctrl-C: only the main thread hears the signal) polls instead.
"""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

#: how often a stoppable waiter tries the lock again: short beside any probe, long beside a syscall
STOPPABLE_POLL_S = 0.05


class LockWaitStopped(Exception):
    """The wait for a lock was given up: its `stop` event was set."""


@contextmanager
def file_lock(path: Path, on_wait: Callable[[str], None] | None = None,
              stop: threading.Event | None = None) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if absent); `on_wait` hears when another run holds it. With
    `stop`, a wait ends in LockWaitStopped once the event is set."""
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait:
                on_wait(f"waiting for another run ({path})")
            if stop is None:
                fcntl.flock(fh, fcntl.LOCK_EX)
            else:
                _wait_stoppable(fh, stop)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _wait_stoppable(fh, stop: threading.Event) -> None:
    while True:
        if stop.wait(STOPPABLE_POLL_S):
            raise LockWaitStopped(fh.name)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue
