"""`bisect mitigate`: keep the culprit nodes in fp32 and check every release of the range."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from harness.commands.common import (
    FiniteFloatRange,
    jobs_option,
    log_to_stderr,
    model_options,
    on_reduced,
    out,
    print_json,
    range_options,
    reduced_option,
    search_spec,
    store_options,
    target_options,
    triage_options,
)
from harness.errors import UsageError


@click.command("mitigate")
@model_options
@reduced_option
@range_options
@target_options
@store_options
@triage_options
@click.option("--node", "nodes", multiple=True, metavar="NODE", help="Also keep this node in fp32 (repeatable).")
@click.option("--reference-model", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="fp32 model to compare with (default: the embedded fp32 twin, or the model converted to fp32).")
@click.option("--hot", type=FiniteFloatRange(min=0.01, max=1.0), default=0.5, show_default=True,
              help="A value past this fraction of 65504 in the fp32 reference must stay in fp32.")
@jobs_option
def command(nodes, reference_model, hot, jobs, as_json, **opts):
    """Keep the culprit nodes (and the residual stream around them) in fp32; is every release clean then?"""
    from harness.models.registry import load_onnx
    from harness.plan import make_plan
    from harness.report.terminal import mitigation_table
    from harness.triage import mitigate

    opts, reduced = on_reduced(opts)
    if reference_model:
        load_onnx(reference_model, "--reference-model")
    spec = search_spec(opts)
    plan = make_plan(spec, log=log_to_stderr, nodes=tuple(nodes))
    log = (lambda msg: None) if as_json else log_to_stderr
    try:
        doc = mitigate.check(plan, spec, reference=reference_model, nodes=nodes, hot=hot, jobs=jobs, log=log)
    except (KeyError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if not as_json:
        if reduced:
            out.print(escape(f"Ran {reduced}."))
        out.print(mitigation_table(doc))
        out.print(escape(doc["message"]))
        out.print(f"patched model: {doc['patched']['path']}")
        out.print(f"[dim]results: {plan.store.dir / (mitigate.MITIGATION + '.json')}[/]")
    else:
        print_json({**doc, "reduced_repro": reduced})
    return 0 if doc["all_clean"] else 3
