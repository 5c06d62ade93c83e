"""`bisect doctor`: what backends work on this host, and how to fix what does not."""

from __future__ import annotations

import click
from rich.markup import escape

from harness.commands.common import engines_option, out, print_json, store_options


@click.command("doctor")
@store_options
@engines_option
@click.option("--json", "as_json", is_flag=True,
              help="Print the checks as one JSON array, one object per check, instead of lines.")
def command(cache_dir, offline, engines, as_json):
    """What backends work on this host (and on the engines named), and how to fix what does not."""
    from harness.runners.doctor import checks

    rows = checks(cache_dir, tuple(engines))
    if as_json:
        print_json(rows)
        return 0
    for row in rows:
        mark = "[green]ok[/]  " if row["ok"] else "[red]no[/]  "
        out.print(f"{mark}{row['what']:<22} {escape(row['detail'])}")
        if not row["ok"] and row.get("fix"):
            out.print(f"      fix: {escape(row['fix'])}")
    return 0
