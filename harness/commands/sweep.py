"""`bisect sweep`: every release of a range probed, every transition listed."""

from __future__ import annotations

import click

from harness.commands.run import search_and_render, search_options


@click.command("sweep")
@search_options
@click.option("--explain", is_flag=True, help="Trace the first transition's pair and say which node's numerics changed.")
def command(**opts):
    """Probe every release of the range and list each transition."""
    return search_and_render(opts, sweep=True)
