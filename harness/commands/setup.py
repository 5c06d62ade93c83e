"""`bisect setup BACKEND`: provision what a backend needs on this host."""

from __future__ import annotations

import click

from harness.commands.common import log_to_stderr, out, store_options


@click.group("setup")
def command():
    """Provision what a backend needs on this host."""


@command.command("qemu")
@store_options
def setup_qemu(cache_dir, offline):
    """QEMU >= 10 (user mode) and an arm64 sysroot with CPython, into the cache (no host changes)."""
    from harness.runners.qemu import provision

    qemu, sysroot = provision(cache_dir, log=log_to_stderr)
    out.print(f"qemu-aarch64 {qemu.version} at {qemu.path}")
    out.print(f"arm64 sysroot at {sysroot}")
