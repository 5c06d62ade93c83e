"""`bisect merge ROOT SOURCE...`: fold run directories from other machines into a results root."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape

from harness.commands.common import out


@click.command("merge")
@click.argument("root", type=click.Path(path_type=Path))
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object: what each run gained.")
def command(root, sources, as_json):
    """Fold results (run directories, or folders of them) into ROOT.

    Append-only and idempotent: a probe record already in ROOT is not added
    again. A run id that exists in ROOT with another model, batch or target
    key is refused, and nothing is written.
    """
    from harness.history import merge

    reports = merge(root, list(sources))
    if as_json:
        click.echo(json.dumps([{"run_id": r.run_id, "source": str(r.source), "added": r.added,
                                "already": r.already, "created": r.created, "files": r.files} for r in reports]))
        return 0
    for r in reports:
        what = "new run" if r.created else "run"
        out.print(f"{escape(r.run_id)}: {what}, {r.added} probe records added, {r.already} already there "
                  f"[dim](from {escape(str(r.source))})[/]")
    out.print(f"{sum(r.added for r in reports)} records added to {escape(str(root))}")
    return 0
