"""`bisect reduce RUN`: the fewest rows and nodes that still flip between a run's pair (a fix's too)."""

from __future__ import annotations

import sys

import click

from harness.commands.common import (
    bad_if_text,
    err,
    json_option,
    log_to_stderr,
    out,
    print_json,
    question_options,
    say_stopped,
    ray_option,
    results_dir_option,
    run_dir_of,
    store_options,
)


@click.command("reduce")
@click.argument("run", metavar="RUN")
@results_dir_option
@store_options
@question_options
@click.option("--rows-only", is_flag=True, help="Reduce the batch's rows, keep the whole model.")
@ray_option
@json_option
def command(run, results_dir, cache_dir, offline, question, bad_if, rows_only, ray_address, as_json):
    """The smallest repro of a run's regression or fix: fewest rows, then fewest nodes, verified on both releases.

    It reduces the pair of the run's question (its newest run document, or --question KEY): last good and
    first bad, a fix's last bad and first good; judged as that question judges, with its reference. Writes
    results/<run>/reduced/ (model.onnx, inputs.npz, reference.npz when the question compares with one,
    reduce.json); resumable. Exit status: 0 a verified reduction, 4 nothing could be reduced (the full pair
    flips; it says why no row and no node could be dropped), 3 none (the pair does not flip here, or the
    reduction does not verify), 2 refused before any probe, 1 a failure.
    """
    from harness.report.terminal import ProbeLines, reduction_summary
    from harness.results.store import REDUCED
    from harness.summary import EXIT_FOUND, EXIT_NO_BOUNDARY, EXIT_NOTHING_REDUCED
    from harness.triage.reduce import NoFlip, reduce_saved_run

    run_dir = run_dir_of(run, results_dir)
    try:
        with ProbeLines(err) as progress:
            doc = reduce_saved_run(run_dir, cache_dir, offline, log=log_to_stderr, nodes=not rows_only,
                                   command=sys.argv, question=question, bad_if=bad_if_text(bad_if), observer=progress,
                                   ray_address=ray_address)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (harness.errors.Terminated)
        return say_stopped(exc, f"the finished probes are saved in {run_dir / REDUCED}")
    except NoFlip as exc:  # probes ran: not a refusal
        if as_json:
            print_json({"error": str(exc), "exit_status": EXIT_NO_BOUNDARY})
        err.print(f"no reduction: {exc}")
        return EXIT_NO_BOUNDARY
    if as_json:
        print_json(doc)
    else:
        out.print(reduction_summary(doc))
    if not doc["verified"]["flips"]:
        return EXIT_NO_BOUNDARY
    return EXIT_FOUND if doc["reduced"] else EXIT_NOTHING_REDUCED
