"""`bisect reduce RUN`: the fewest rows and nodes that still flip between a run's last good and first bad."""

from __future__ import annotations

import sys

import click

from harness.commands.common import (
    json_option,
    log_to_stderr,
    out,
    print_json,
    results_dir_option,
    run_dir_of,
    store_options,
)


@click.command("reduce")
@click.argument("run", metavar="RUN")
@results_dir_option
@store_options
@click.option("--rows-only", is_flag=True, help="Reduce the batch's rows, keep the whole model.")
@json_option
def command(run, results_dir, cache_dir, offline, rows_only, as_json):
    """The smallest repro of a run's regression: fewest rows, then fewest nodes, each verified on both releases.

    Writes results/<run>/reduced/ (model.onnx, inputs.npz, reduce.json); resumable.
    """
    from harness.report.terminal import reduction_summary
    from harness.triage.reduce import reduce_saved_run

    doc = reduce_saved_run(run_dir_of(run, results_dir), cache_dir, offline, log=log_to_stderr,
                           nodes=not rows_only, command=sys.argv)
    if as_json:
        print_json(doc)
    else:
        out.print(reduction_summary(doc))
    return 0 if doc["verified"]["flips"] else 1
