"""`bisect matrix run FILE [--cell N]` and `bisect matrix cells FILE [--json]`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.markup import escape

from harness.commands.common import (
    err,
    jobs_option,
    ray_option,
    log_to_stderr,
    out,
    results_dir_option,
    store_options,
)


@click.group("matrix")
def command():
    """Many searches from one TOML file (matrices/*.toml): models x targets x providers x options x modes."""


@command.command("cells")
@click.argument("matrix_file", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object: {\"include\": [cell, ...]} (a CI job matrix).")
def cells(matrix_file, as_json):
    """The cells of a matrix, numbered as --cell takes them."""
    from harness.nightly.matrix import load

    m = load(matrix_file)
    for note in m.notes:
        err.print(f"note: {escape(note)}")
    docs = [c.as_json() for c in m.cells]
    if as_json:
        click.echo(json.dumps({"include": docs}, separators=(",", ":")))
        return 0
    for c in m.cells:
        rng = " .. ".join(c.releases.values()) if "from" in c.releases else f"since {c.releases['since']}"
        out.print(f"{c.index:>3}  {escape(c.name)}  [dim]({rng}; {c.key})[/]")
    out.print(f"{len(m.cells)} cells in {escape(str(matrix_file))}")
    return 0


@command.command("run")
@click.argument("matrix_file", type=click.Path(path_type=Path))
@click.option("--cell", "cell", type=int, multiple=True, help="Run only this cell (repeatable); see `matrix cells`.")
@results_dir_option
@store_options
@click.option("--refresh", is_flag=True, help="Probe every release again; the new records are appended, none deleted.")
@jobs_option
@ray_option
@click.option("--keep-going/--fail-fast", default=True, show_default=True,
              help="A cell that cannot run (no qemu here, model not reachable) is reported and the others still run.")
@click.option("--report", is_flag=True,
              help="Write the upstream report (results/<run>/report.md, as `bisect report --no-probe`) of each cell "
                   "that found a boundary; the dashboard links to it.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with every cell's summary.")
def run(matrix_file, cell, results_dir, cache_dir, offline, refresh, jobs, ray_address, keep_going, report, as_json):
    """Run the cells of a matrix (all, or --cell N). Resumable: finished probes are reused. A cell whose provider
    needs a device this host lacks (CUDA without a GPU) is skipped with the reason, not failed."""
    from harness.errors import EnvironmentSkip, UsageError
    from harness.nightly.cells import (
        check_cell,
        listing_key,
        listings,
        run_cell,
        select,
        skip_cell,
    )
    from harness.nightly.matrix import load, resolve_range
    from harness.report.terminal import ProbeLines

    m = load(matrix_file)
    chosen = select(m, tuple(cell))
    listing = listings(chosen, cache_dir, offline)
    for c in chosen:  # an empty range is a mistake in the file: refuse before any probe
        resolve_range(c.releases, listing[listing_key(c)])
    docs, failed, ready, skips = [], [], [], []
    for c in chosen:  # every cell's request is checked before the first probe of any
        try:
            ready.append((c, check_cell(c, listing[listing_key(c)], cache_dir, results_dir, offline, refresh)))
        except (UsageError, EnvironmentSkip) as exc:
            if not keep_going or len(chosen) == 1:
                raise
            failed.append({"cell": c.index, "name": c.name, "error": str(exc)})
            err.print(f"[red]cell {c.index} not run:[/] {escape(str(exc))}")
    for c, why in ready:
        err.print(f"[bold]cell {c.index}[/]: {escape(c.name)}")
        if why:  # this host cannot run it (no GPU for CUDA): its run document says why, for the dashboard
            docs.append(skip_cell(m, c, why, cache_dir, results_dir, offline, listing[listing_key(c)], sys.argv).doc)
            skips.append({"cell": c.index, "name": c.name, "why": why})
            err.print(f"  [yellow]skipped:[/] {escape(why)}")
            continue
        try:
            res = run_cell(m, c, cache_dir, results_dir, offline=offline, refresh=refresh, jobs=jobs,
                           observer=ProbeLines(err, f"  [{c.index}]", spinner=False),
                           log=log_to_stderr, listing=listing[listing_key(c)], command=sys.argv,
                           ray_address=ray_address)
        except (UsageError, EnvironmentSkip) as exc:
            if not keep_going or len(chosen) == 1:
                raise
            failed.append({"cell": c.index, "name": c.name, "error": str(exc)})
            err.print(f"  [red]cell {c.index} not run:[/] {escape(str(exc))}")
            continue
        docs.append(res.doc)
        err.print(f"  {escape(res.doc['message'])}")
        err.print(f"  [dim]{res.probed_now} probed, {res.reused} reused; results: {results_dir / res.run_id}[/]")
        if report and res.doc.get("first_bad"):
            from harness.report import upstream

            doc = upstream.build(results_dir / res.run_id, cache_dir=cache_dir, offline=offline, probe=False,
                                 log=log_to_stderr)
            err.print(f"  [dim]report: {escape(str(upstream.save(results_dir / res.run_id, doc)))}[/]")
    if as_json:
        click.echo(json.dumps({"matrix": str(matrix_file), "cells": docs, "skipped": skips, "failed": failed}))
    else:
        out.print(f"{len(docs) - len(skips)} cells run, {len(skips)} skipped, {len(failed)} not run; results in "
                  f"{escape(str(results_dir))}")
    return 1 if failed else 0  # a skipped cell is no failure: this host cannot run it
