"""`bisect sweep`: every release of a range probed, every transition listed."""

from __future__ import annotations

import click

from harness.commands.common import model_options, reduced_option, probe_options, range_options, store_options, target_options
from harness.commands.run import search_and_render


@click.command("sweep")
@model_options
@reduced_option
@range_options
@target_options
@store_options
@probe_options
@click.option("--explain", is_flag=True, help="Trace the first transition's pair and say which node's numerics changed.")
def command(**opts):
    """Probe every release of the range and list each transition."""
    return search_and_render(opts, sweep=True)
