"""`bisect matrix run FILE [--cell N]` and `bisect matrix cells FILE [--json]`."""

from __future__ import annotations

import json
import sys
import time
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
    say_stopped,
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


@command.command("init")
@click.argument("matrix_file", type=click.Path(path_type=Path), default=None, required=False, metavar="[PATH]")
@click.option("--model", "models", multiple=True, metavar="NAME|FILE.onnx[:BATCH.npz]",
              help="A model of the matrix (repeatable), as [[models]] takes it: a registered name, or a file and its "
                   "batch, relative to the matrix. Default: the embedded gemma-tiny-fused and gemma-tiny-decomposed.")
@click.option("--since", metavar="VERSION", help="Every release from VERSION on, newest included (the default: 1.19.0).")
@click.option("--from", "from_", metavar="VERSION", help="With --to: the range's first release.")
@click.option("--to", "to", metavar="VERSION", help="With --from: the range's last release.")
@click.option("--workflow/--no-workflow", default=True, show_default=True,
              help="Also write .github/workflows/ortbisect.yml in the matrix's directory (a repository's root): a "
                   "reusable workflow (on: workflow_call) that runs the matrix of the models and range a caller gives it.")
@click.option("--force", is_flag=True, help="Overwrite the files if they are there (else refused).")
def init(matrix_file, models, since, from_, to, workflow, force):
    """Write a starter matrix (PATH, default ortbisect.toml) and a reusable GitHub workflow: a nightly of your models
    from a tool install. The matrix is checked as `matrix run` checks it before anything is written."""
    from harness.errors import UsageError
    from harness.nightly import starter

    if since and (from_ or to):
        raise UsageError(f"--since {since}: give --since or a range (--from, --to), not both")
    if bool(from_) != bool(to):
        raise UsageError(f"--from {from_}: give --to too" if from_ else f"--to {to}: give --from too")
    path = Path(matrix_file) if matrix_file else Path(starter.MATRIX_NAME)
    written = starter.write(path, starter.matrix_text(models, since, from_, to),
                            path.parent / starter.WORKFLOW_PATH if workflow else None, force)
    for p in written:
        out.print(f"wrote {escape(str(p))}")
    out.print(f"next: bisect matrix cells {escape(str(path))}; bisect matrix run {escape(str(path))}")
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
        select,
    )
    from harness.nightly.matrix import load, resolve_range
    from harness.report.terminal import ProbeLines, elapsed_text, eta_text

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
    began, cell_s = time.monotonic(), []  # the seconds of each cell run: the pace of the cells' ETA
    try:
        for n, (c, why) in enumerate(ready, 1):
            plan = "; ".join(x for x in (elapsed_text(time.monotonic() - began),
                                         eta_text(cell_s, len(ready) - n + 1)) if x)
            err.print(f"[bold]cell {c.index}[/] ({n} of {len(ready)}; {plan}): {escape(c.name)}")
            cell_began = time.monotonic()
            _one_cell(m, c, why, docs, failed, skips, cache_dir=cache_dir, results_dir=results_dir, offline=offline,
                      refresh=refresh, jobs=jobs, keep_going=keep_going and len(chosen) > 1, report=report,
                      listing=listing[listing_key(c)], observer=ProbeLines(err, f"  [{c.index}]", starts=True),
                      ray_address=ray_address)
            if not why:
                cell_s.append(time.monotonic() - cell_began)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (harness.errors.Terminated)
        return say_stopped(exc, f"{len(docs)} of {len(ready)} cells finished; they and every finished probe are "
                                f"saved in {results_dir}")
    if as_json:
        click.echo(json.dumps({"matrix": str(matrix_file), "cells": docs, "skipped": skips, "failed": failed}))
    else:
        out.print(f"{len(docs) - len(skips)} cells run, {len(skips)} skipped, {len(failed)} not run; results in "
                  f"{escape(str(results_dir))}")
    return 1 if failed else 0  # a skipped cell is no failure: this host cannot run it


def _one_cell(m, c, why, docs: list, failed: list, skips: list, *, cache_dir, results_dir, offline, refresh, jobs,
              keep_going, report, listing, observer, ray_address) -> None:
    """One cell of `matrix run`: skipped (`why`), run, or failed; what it gives goes into docs, failed, skips."""
    from harness.errors import EnvironmentSkip, UsageError
    from harness.nightly.cells import run_cell, skip_cell

    if why:  # this host cannot run it (no GPU for CUDA): its run document says why, for the dashboard
        docs.append(skip_cell(m, c, why, cache_dir, results_dir, offline, listing, sys.argv).doc)
        skips.append({"cell": c.index, "name": c.name, "why": why})
        err.print(f"  [yellow]skipped:[/] {escape(why)}")
        return
    try:
        with observer:  # a spinner on a terminal while a probe runs; elsewhere a line as each one starts
            res = run_cell(m, c, cache_dir, results_dir, offline=offline, refresh=refresh, jobs=jobs,
                           observer=observer, log=log_to_stderr, listing=listing, command=sys.argv,
                           ray_address=ray_address)
    except (UsageError, EnvironmentSkip) as exc:
        if not keep_going:
            raise
        failed.append({"cell": c.index, "name": c.name, "error": str(exc)})
        err.print(f"  [red]cell {c.index} not run:[/] {escape(str(exc))}")
        return
    docs.append(res.doc)
    err.print(f"  {escape(res.doc['message'])}")
    err.print(f"  [dim]{res.probed_now} probed, {res.reused} reused; results: {results_dir / res.run_id}[/]")
    if report and res.doc.get("first_bad"):
        from harness.report import upstream

        doc = upstream.build(results_dir / res.run_id, cache_dir=cache_dir, offline=offline, probe=False,
                             log=log_to_stderr)
        err.print(f"  [dim]report: {escape(str(upstream.save(results_dir / res.run_id, doc)))}[/]")
