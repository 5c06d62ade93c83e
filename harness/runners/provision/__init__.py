"""Provisioning: what a backend needs on the host, set up into the cache, never into the system.

Nothing here touches the host's apt configuration (no ``dpkg --add-architecture``,
no new entries in /etc/apt, nothing installed with dpkg -i): packages come from
a private apt configuration (``debian``) and are unpacked into the cache.

Everything is idempotent (an existing good result is reused), atomic (built
in a temp dir next to the target, then renamed) and serialized by a lock file
next to what it builds, so concurrent runs can share one cache.

* ``debian``  - the host's Debian archive, private apt, .deb extraction
* ``qemu``    - a static QEMU >= 10 ``qemu-aarch64``, its CPU models, its command line
* ``sysroot`` - an arm64 Debian tree with CPython 3.11 for QEMU user mode
* ``binfmt``  - is aarch64 emulation registered with the kernel (arm64 containers)
* ``rootfs``  - debootstrap root filesystems for the container images

Progress goes to a ``log`` callable (a message string each); nothing prints.
Stdlib + ``packaging`` only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.results.locking import file_lock

Log = Callable[[str], None]

#: The repository's script that installs and starts a private Docker engine and
#: registers aarch64 binfmt emulation (as root). Not part of an installed wheel.
ENGINE_SCRIPT = Path(__file__).resolve().parents[3] / ".ci" / "docker-engine.sh"


def quiet(msg: str) -> None:
    """A log that drops every message."""


class ProvisionError(RuntimeError):
    """Provisioning failed or the provisioned tool is unusable.

    ``str(err)`` is a one-line, user-facing message.
    """


@contextmanager
def locked(tools_dir: Path, name: str, log: Log) -> Iterator[None]:
    """Serialize one kind of provisioning in ``tools_dir`` across processes."""
    tools_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(tools_dir / f".{name}.lock", on_wait=log):
        yield


@contextmanager
def step(log: Log, what: str) -> Iterator[None]:
    """Log how long ``what`` took."""
    t0 = time.monotonic()
    yield
    log(f"{what}: {time.monotonic() - t0:.1f} s")
