"""`bisect merge ROOT SOURCE...`: fold run directories from other machines into a results root."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape

from harness.commands.common import err, out


@click.command("merge")
@click.argument("root", type=click.Path(path_type=Path))
@click.argument("sources", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--quarantine", is_flag=True,
              help="Set lines that are not probe records aside in the run's quarantine.jsonl and merge the rest "
                   "(without it such a line refuses the merge).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: what each run gained.")
def command(root, sources, quarantine, as_json):
    """Fold results (run directories, or folders of them) into ROOT.

    Append-only and idempotent: a probe record already in ROOT is not added
    again. A run id that exists in ROOT with another model, batch or target
    key is refused, and nothing is written; so is a probes.jsonl line that is
    not a probe record, unless --quarantine (which names the file, line and
    text of each line it sets aside). A last line cut off mid-write is left
    out with a warning.

    SOURCES are untrusted: runs are searched three folders deep, never
    through a symbolic link, and a link among a run's files (or a FIFO and
    the like) refuses the merge, naming it. A run keeps its manifest's run id
    as its name (`merge ROOT .` from inside a run works); every write stays
    inside ROOT. Each run is merged whole or not at all: its files are staged
    in ROOT/.merging and put in place at the end, and a failure (a full disk,
    a read-only ROOT) leaves the run as it was and ends in one line, exit
    status 1. A dashboard's site inside a source (results/site) is not a run.
    """
    from harness.results.history import merge

    reports = merge(root, list(sources), quarantine=quarantine)
    for r in reports:
        for note in r.torn:
            err.print(f"warning: {escape(note)}")
    if as_json:
        click.echo(json.dumps([r.doc() for r in reports]))
        return 0
    for r in reports:
        what = "new run" if r.created else "run"
        aside = (f", {r.quarantined} unreadable line{'s' if r.quarantined != 1 else ''} set aside in "
                 f"{escape(str(r.quarantine))}") if r.quarantined else ""
        torn = f", {len(r.torn)} torn last line left out" if r.torn and not r.quarantined else ""
        out.print(f"{escape(r.run_id)}: {what}, {r.added} probe records added, {r.already} already there{aside}{torn} "
                  f"[dim](from {escape(str(r.source))})[/]")
    quarantined = sum(r.quarantined for r in reports)
    tail = f"; {quarantined} unreadable line{'s' if quarantined != 1 else ''} set aside" if quarantined else ""
    out.print(f"{sum(r.added for r in reports)} records added to {escape(str(root))}{tail}")
    return 0
