"""`bisect trace` and `bisect diff`: why a release's outputs went non-finite, and what changed.

Traces are kept with the run they explain (results/<run-id>/traces/), so a diff
reuses them and the dashboard can show them.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape

from harness.errors import UsageError
from harness.options import compose, err, model_options, out, search_spec, store_options, target_options

DEFAULT_BUDGET_MB = 256


def trace_dir(plan) -> Path:
    d = plan.store.dir / "traces"
    d.mkdir(parents=True, exist_ok=True)
    return d


def traced(plan, version: str, *, budget_mb: int = DEFAULT_BUDGET_MB, dump=(), refresh: bool = False):
    """The trace of one release of the plan's model, from the run's store or made now."""
    from harness import trace as tr

    path = trace_dir(plan) / f"{version}.json"
    if path.exists() and not refresh and not dump:
        return tr.trace_from_json(json.loads(path.read_text()))
    releases = {r.version: r for r in plan.releases}
    if version not in releases:
        raise UsageError(f"{version}: not in the releases of this run")
    workdir = plan.runner.cache_dir / "trace-work" / plan.store.run_id / version
    result = tr.trace(plan.runner, releases[version], plan.probe_inputs.model, plan.probe_inputs.batch, workdir,
                      budget_bytes=budget_mb << 20, dump=list(dump), session_options=plan.job.session_options,
                      timeout=plan.job.timeout, predicate=plan.predicate, log=lambda msg: err.print(escape(str(msg))),
                      outputs=plan.job.outputs)
    tr.save_json(result, path)
    return result


def explain_pair(plan, a: str, b: str, *, budget_mb: int = DEFAULT_BUDGET_MB, refresh: bool = False):
    """Diff the traces of two releases; the diff and a headroom chart of both go next to the run."""
    from harness import trace as tr

    ta = traced(plan, a, budget_mb=budget_mb, refresh=refresh)
    tb = traced(plan, b, budget_mb=budget_mb, refresh=refresh)
    result = tr.diff(ta, tb)
    d = trace_dir(plan)
    tr.save_json(result, d / f"diff-{a}-{b}.json")
    chart = _chart([ta, tb], d / f"headroom-{a}-{b}.svg")
    return result, chart


def _chart(traces, path: Path) -> Path | None:
    from harness import trace as tr

    try:
        return tr.headroom_chart(traces, path)
    except ImportError:
        return None


def _plan_for(opts: dict, versions: list[str]):
    """The plan of a run over the releases from the oldest to the newest of `versions`."""
    from harness.plan import make_plan
    from harness.versions import parse_version

    ordered = sorted(versions, key=parse_version)
    return make_plan(search_spec({**opts, "from_": ordered[0], "to": ordered[-1], "resume": None, "bad_if": "nan-or-inf",
                                  "reference": None, "graph_opt": None, "threads": None}))


trace_options = compose(
    click.option("--results-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True),
    click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, help="Seconds per pass."),
    click.option("--budget-mb", type=click.IntRange(min=1), default=DEFAULT_BUDGET_MB, show_default=True,
                 help="Bytes of exposed tensors per pass: bounds the worker's memory above the model's own."),
    click.option("--refresh", is_flag=True, help="Trace again even if the run already holds a trace."),
    click.option("--json", "as_json", is_flag=True),
)


@click.command("trace")
@model_options
@click.option("--version", "version", required=True, metavar="VERSION", help="Release to trace.")
@target_options
@store_options
@trace_options
@click.option("--dump", multiple=True, metavar="NODE", help="Also save this node's output tensors (.npz).")
@click.option("--all-nodes", is_flag=True, help="Every tensor, not only residual Adds, hot and non-finite ones.")
def trace_command(version, dump, all_nodes, budget_mb, refresh, as_json, **opts):
    """Per-node statistics of every intermediate tensor on one release."""
    from harness import trace as tr

    plan = _plan_for(opts, [version])
    result = traced(plan, version, budget_mb=budget_mb, dump=dump, refresh=refresh)
    chart = _chart(result, trace_dir(plan) / f"headroom-{version}.svg")
    if as_json:
        out.print_json(json.dumps(tr.to_json(result)))
        return 0
    out.print(tr.trace_table(result, all_nodes=all_nodes))
    out.print(f"[dim]trace: {trace_dir(plan) / f'{version}.json'}" + (f"; chart: {chart}" if chart else "") + "[/]")
    return 0


@click.command("diff")
@model_options
@click.argument("a", metavar="GOOD")
@click.argument("b", metavar="BAD")
@target_options
@store_options
@trace_options
def diff_command(a, b, budget_mb, refresh, as_json, **opts):
    """What changed between two releases: per-node diff and execution precision."""
    from harness import trace as tr

    plan = _plan_for(opts, [a, b])
    result, chart = explain_pair(plan, a, b, budget_mb=budget_mb, refresh=refresh)
    if as_json:
        out.print_json(json.dumps(tr.to_json(result)))
        return 0
    out.print(tr.diff_table(result))
    out.print(f"[dim]traces and diff: {trace_dir(plan)}" + (f"; chart: {chart}" if chart else "") + "[/]")
    return 0
