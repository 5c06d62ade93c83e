"""`bisect diff GOOD BAD`: what changed between two releases, node by node."""

from __future__ import annotations

import click

from harness.commands.common import (
    log_to_stderr,
    model_options,
    out,
    print_json,
    store_options,
    target_options,
)
from harness.commands.trace import plan_over, trace_options
from harness.errors import UsageError


@click.command("diff")
@model_options
@click.argument("a", metavar="GOOD")
@click.argument("b", metavar="BAD")
@target_options
@store_options
@trace_options
def command(a, b, budget_mb, refresh, as_json, **opts):
    """What changed between two releases: per-node diff and execution precision."""
    from harness.explain import boundary as explain
    from harness.explain import trace
    from harness.releases.versions import parse_version
    from harness.report.terminal import diff_table

    if parse_version(a, "GOOD") == parse_version(b, "BAD"):
        raise UsageError(f"GOOD {a} and BAD {b} are the same release: a diff needs two different ones")
    plan = plan_over(opts, [("GOOD", a), ("BAD", b)])
    a, b = explain.release_of(plan, a).version, explain.release_of(plan, b).version  # as the index spells them
    result, chart = explain.explain_pair(plan, a, b, budget_mb=budget_mb, refresh=refresh, log=log_to_stderr)
    if as_json:
        print_json(trace.to_json(result))
        return 0
    out.print(diff_table(result))
    out.print(f"[dim]traces and diff: {explain.trace_dir(plan)}" + (f"; chart: {chart}" if chart else "") + "[/]")
    return 0
