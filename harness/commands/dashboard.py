"""`bisect dashboard RESULTS -o SITE`: a static page of every run's verdicts."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.markup import escape

from harness.commands.common import directory_option, err, out
from harness.vocabulary import DEFAULT_RESULTS_DIR


@click.command("dashboard")
@click.argument("results", type=click.Path(path_type=Path), default=DEFAULT_RESULTS_DIR)
@click.option("-o", "--out", "out_dir", type=click.Path(path_type=Path), default=Path("site"), show_default=True,
              callback=directory_option, metavar="SITE",
              help="The directory of the page: index.html, dashboard.json, changes.json and the runs' raw JSON.")
@click.option("--title", default="ortbisect dashboard", show_default=True, help="The page's title and heading.")
@click.option("--margin-threshold", type=click.FloatRange(min=0, min_open=True), default=0.9, show_default=True,
              help="Mark a row close to the fp16 ceiling when a good release's internal margin reaches this fraction of 65504.")
def command(results, out_dir, title, margin_threshold):
    """One self-contained HTML page (opens from disk, no network) with the raw JSON next to it.

    SITE may lie inside RESULTS (-o results/site) and be rebuilt there: it is
    marked as a site (.ortbisect-site) and merge and every reader of runs
    pass over it. It may not be RESULTS itself nor inside a run. A run with a
    symbolic link among its files is left out (the link is never read
    through) and named on the page; a site that cannot be written ends in one
    line, exit status 1.
    """
    from harness.errors import UsageError
    from harness.report.dashboard import build
    from harness.report.overview import left_out_words

    if not results.is_dir():
        raise UsageError(f"{results}: no such results directory")
    t0 = time.perf_counter()
    left_out: list = []
    page = build(results, out_dir, title, warn=lambda msg: err.print(f"dashboard: {escape(msg)}"), left_out=left_out,
                 threshold=margin_threshold)
    note = f"; {left_out_words(left_out)} left out, unreadable (see above)" if left_out else ""
    out.print(f"{escape(str(page))} ({time.perf_counter() - t0:.2f} s){note}")
    return 0
