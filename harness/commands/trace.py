"""`bisect trace`: per-node statistics of every intermediate tensor on one release."""

from __future__ import annotations

import click

from harness.commands.common import (
    FiniteFloatRange,
    compose,
    json_option,
    log_to_stderr,
    model_options,
    out,
    print_json,
    results_dir_option,
    search_spec,
    store_options,
    target_options,
)
from harness.vocabulary import DEFAULT_TRACE_BUDGET_MB

trace_options = compose(
    results_dir_option,
    click.option("--timeout", type=FiniteFloatRange(min=1), default=600.0, show_default=True, help="Seconds per pass."),
    click.option("--budget-mb", type=click.IntRange(min=1), default=DEFAULT_TRACE_BUDGET_MB, show_default=True,
                 help="Megabytes (MiB) of exposed tensors per pass: bounds the worker's memory above the model's own."),
    click.option("--refresh", is_flag=True, help="Trace again even if the run already holds a trace."),
    # a run's question, so that its traces are judged as the run judged the releases
    click.option("--bad-if", "bad_if", multiple=True, metavar="WHEN",
                 help="Judge the traced outputs as this question does (default nan-or-inf), as `bisect run` takes it."),
    click.option("--reference", metavar="FILE.npz|fp32", help="The question's reference: reference outputs, or fp32."),
    click.option("--reference-release", metavar="V", help="The question's reference: the outputs of release V."),
    json_option,
)


def plan_over(opts: dict, given: list[tuple[str, str]], dump: tuple[str, ...] = ()):
    """The plan of a run over the releases from the oldest to the newest of `given` (traces live with it).

    `given` pairs how the user named each release with the version typed:
    [("--version", "1.20.0")] or [("GOOD", a), ("BAD", b)]; a refusal names them so.
    """
    from harness.plan import make_plan
    from harness.releases.versions import parse_version

    ordered = sorted(given, key=lambda fv: parse_version(fv[1], fv[0]))
    (lo_flag, lo), (hi_flag, hi) = ordered[0], ordered[-1]
    spec = search_spec({**opts, "from_": lo, "to": hi, "range_flags": (lo_flag, hi_flag)})
    return make_plan(spec, log=log_to_stderr, dump=dump)


@click.command("trace")
@model_options
@click.option("--version", "version", required=True, metavar="VERSION", help="Release to trace.")
@target_options
@store_options
@trace_options
@click.option("--dump", multiple=True, metavar="NODE", help="Also save this node's output tensors (.npz).")
@click.option("--all-nodes", is_flag=True, help="Every tensor, not only residual Adds, hot and non-finite ones.")
def command(version, dump, all_nodes, budget_mb, refresh, as_json, **opts):
    """Per-node statistics of every intermediate tensor on one release."""
    from harness.explain import boundary as explain
    from harness.explain import trace
    from harness.report.terminal import trace_table

    plan = plan_over(opts, [("--version", version)], dump=tuple(dump))
    version = explain.release_of(plan, version).version  # as the index spells it: 1.20 is 1.20.0
    result = explain.traced(plan, version, budget_mb=budget_mb, dump=dump, refresh=refresh, log=log_to_stderr)
    chart = explain.chart(result, explain.trace_dir(plan) / f"headroom-{version}.svg")
    if as_json:
        print_json(trace.to_json(result))
        return 0
    out.print(trace_table(result, all_nodes=all_nodes))
    out.print(f"[dim]trace: {explain.trace_dir(plan) / f'{version}.json'}" + (f"; chart: {chart}" if chart else "") + "[/]")
    return 0
