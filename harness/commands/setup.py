"""`bisect setup <backend>`: provision ahead of time what a backend would set up before its first probe.

One subcommand per backend that declares a setup step (harness.runners.setups),
so a new backend brings its own without an edit here.
"""

from __future__ import annotations

import click
from rich.markup import escape

from harness.commands.common import log_to_stderr, out, store_options
from harness.runners import Runner, setups


@click.group("setup")
def command():
    """Provision what a backend needs on this host."""


def _subcommand(name: str, backend: type[Runner]) -> click.Command:
    @click.command(name, help=backend.setup_help)
    @store_options
    def setup_one(cache_dir, offline):
        for line in backend.setup(cache_dir, log=log_to_stderr):
            out.print(escape(line))
        return 0

    return setup_one


for _name, _backend in setups().items():
    command.add_command(_subcommand(_name, _backend))
