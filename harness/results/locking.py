"""One inter-process lock for everything the cache shares between runs.

A blocking flock(2) on a lock file next to what it guards: it is released by
the kernel if the holder dies, wakes the next waiter at once (no polling), and
costs no import beyond the standard library.
"""

from __future__ import annotations

import fcntl
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def file_lock(path: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold an exclusive lock on `path` (created if absent); `on_wait` hears when another run holds it."""
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait:
                on_wait(f"waiting for another run ({path})")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
