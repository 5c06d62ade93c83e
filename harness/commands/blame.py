"""`bisect blame RUN`: below the release pair, the graph transformer, the kernel and the commits."""

from __future__ import annotations

import sys
from pathlib import Path

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

EXIT_NOTHING_NAMED = 4  # the pair flips, and no transformer, level or kernel is named below it


@click.command("blame")
@click.argument("run", metavar="RUN")
@results_dir_option
@store_options
@question_options
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="A clone of onnxruntime: list the commits between the two builds that touch what is blamed.")
@ray_option
@json_option
def command(run, results_dir, cache_dir, offline, question, bad_if, repo, ray_address, as_json):
    """Which graph transformer, kernel and commits: below a run's release pair (last good and first bad; a fix's
    last bad and first good).

    On the bad release B (a fix's last bad one): the transformers its session log says changed the graph,
    delta-debugged with the session option `disabled_optimizers` to the fewest whose disabling makes B good
    again (then the same on the good release); else the optimization level that does; how the nodes the run
    names ran on each release (op, domain, provider, types); with --repo, the commits between the two builds
    that touch the source of what is blamed. Judged as the run's question judges (--question, --bad-if).
    Writes results/<run>/blame/. Exit status: 0 something named (a transformer set that flips B, an
    optimization level B is good at, or the kernels its nodes ran as), 4 the pair flips and nothing below it
    is named (e.g. B does not load the model: no transformer ran, no optimized graph was saved), 3 nothing to
    blame (the pair does not flip here), 2 refused before any probe, 1 a failure.
    """
    from harness.blame.pair import NoFlip, blame_saved_run
    from harness.report.terminal import ProbeLines, blame_summary
    from harness.results.store import BLAME
    from harness.summary import EXIT_FOUND, EXIT_NO_BOUNDARY

    run_dir = run_dir_of(run, results_dir)
    try:
        with ProbeLines(err) as progress:
            doc = blame_saved_run(run_dir, cache_dir, offline, repo=repo, question=question,
                                  bad_if=bad_if_text(bad_if), command=sys.argv, log=log_to_stderr, observer=progress,
                                  ray_address=ray_address)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (harness.errors.Terminated)
        return say_stopped(exc, f"the finished probes are saved in {run_dir / BLAME}")
    except NoFlip as exc:
        if as_json:
            print_json({"error": str(exc), "exit_status": EXIT_NO_BOUNDARY})
        err.print(f"nothing to blame: {exc}")
        return EXIT_NO_BOUNDARY
    if as_json:
        print_json(doc)
    else:
        out.print(blame_summary(doc))
    return EXIT_FOUND if doc["named"] else EXIT_NOTHING_NAMED
