"""`bisect models`: every registered model."""

from __future__ import annotations

import click
from rich.markup import escape

from harness.commands.common import json_option, out, print_json, store_options


@click.command("models")
@store_options
@json_option
def command(cache_dir, offline, as_json):
    """Every registered model: source, size, inputs and outputs, default batch."""
    from harness.models.registry import describe, registered

    rows = [describe(spec, cache_dir) for spec in registered().values()]
    if as_json:
        print_json(rows)
        return 0
    for row in rows:
        size = f"{row['size_bytes'] / 1e6:.1f} MB" if row["size_bytes"] else "not downloaded"
        out.print(f"[bold]{row['name']}[/]  ({row['source']}, {size})  {escape(row['description'])}")
        out.print(f"    from     {escape(row['origin'])}")
        if row["inputs"]:
            out.print(f"    inputs   {escape(', '.join(row['inputs']))}")
            out.print(f"    outputs  {escape(', '.join(row['outputs']))}")
        out.print(f"    batch    {row['batch'] or 'none: give --inputs'} (checks {', '.join(row['outputs_checked']) or 'all outputs'})")
    return 0
