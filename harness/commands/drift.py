"""`bisect drift RUN`: how a run's graded numbers move from release to release, and where they step."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from harness.commands.common import (
    FiniteFloatRange,
    bad_if_text,
    err,
    json_option,
    out,
    print_json,
    question_options,
    results_dir_option,
    run_dir_of,
)
from harness.errors import HarnessError, UsageError
from harness.report.drift import DEFAULT_THRESHOLD

CHART_SUFFIXES = (".svg", ".png")


@click.command("drift")
@click.argument("run", metavar="RUN")
@results_dir_option
@question_options
@click.option("--threshold", type=FiniteFloatRange(min=0, min_open=True), default=DEFAULT_THRESHOLD, show_default=True,
              help="Relative change of a number between two releases that counts as a step.")
@click.option("--chart", "chart", type=click.Path(path_type=Path), default=None,
              help="Where to write the chart (.svg or .png). Default: drift.svg in the run directory.")
@json_option
def command(run, results_dir, question, bad_if, threshold, chart, as_json):
    """Max |x|, fp16 headroom, worst cosine and relative difference per release of a run, and the steps between them.

    RUN is a results/<run-id> directory, or a run id in --results-dir. Nothing is probed: the numbers are the
    ones each probe recorded, compared with the reference of the run's question (its newest run document, or
    --question KEY).
    """
    from harness.report import drift
    from harness.results.store import RunStore, read_manifest
    from harness.session import asked_of_run, judged_for

    run_dir = run_dir_of(run, results_dir)
    if chart is not None:
        chart = _chart_target(chart)
    read_manifest(run_dir)  # a damaged manifest is refused in one line
    store = RunStore(run_dir)
    asked = asked_of_run(store, question, bad_if_text(bad_if))
    predicate = asked.question.predicate
    if not as_json:
        err.print(f"answering {escape(asked.said)}")
    # the records judged as the question asks, against its reference (never another's numbers)
    ref_id = (asked.question.reference or {}).get("id")
    rows = drift.rows(list(judged_for(store, asked.question, uncompared=True).values()), predicate, ref_id)
    if not rows:
        raise UsageError(f"{run}: no probes of the run's own search recorded; nothing to follow")
    steps = drift.steps(rows, threshold)
    target = chart or store.chart_path("drift.svg")
    title = f"{store.run_id} · {len(rows)} releases · --bad-if {predicate}"
    try:
        from harness.report.charts import drift_chart

        written = drift_chart(rows, steps, target, title)
    except ImportError:
        written = None  # matplotlib absent: the table and the steps still stand
    except OSError as exc:
        raise HarnessError(f"cannot write the chart to {target}: {exc.strerror or exc}") from None
    if as_json:
        print_json(drift.document(store.run_id, threshold, rows, steps, str(written) if written else None))
        return 0
    from harness.report.terminal import drift_steps, drift_table

    out.print(drift_table(rows, steps, escape(f"drift · {store.run_id} · --bad-if {predicate}")))
    out.print(drift_steps(rows, steps, threshold))
    out.print(f"[dim]chart: {escape(str(written))}[/]" if written else "[dim]no chart: matplotlib is not installed[/]")
    return 0


def _chart_target(path: Path) -> Path:
    """--chart as given, refused before anything is read when it cannot be a chart file."""
    if path.suffix.lower() not in CHART_SUFFIXES:
        raise UsageError(f"--chart {path}: give a file ending in .svg or .png")
    if path.is_dir():
        raise UsageError(f"--chart {path}: is a directory")
    if not path.parent.is_dir():
        raise UsageError(f"--chart {path}: no directory {path.parent}")
    return path
