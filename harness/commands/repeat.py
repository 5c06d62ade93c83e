"""`bisect repeat`: one probe N times in fresh processes; same bits, or *nondeterministic*."""

from __future__ import annotations

import click
from rich.markup import escape

from harness.commands.common import (
    err,
    graph_opt_option,
    log_to_stderr,
    model_options,
    on_reduced,
    out,
    print_json,
    reduced_option,
    search_spec,
    store_options,
    target_options,
    triage_options,
)


@click.command("repeat")
@model_options
@reduced_option
@click.option("--version", "version", required=True, metavar="VERSION", help="The release to probe N times.")
@click.option("-n", "n", type=click.IntRange(min=2), default=5, show_default=True, help="Identical probes (fresh processes).")
@target_options
@store_options
@triage_options
@graph_opt_option
@click.option("--threads", type=click.IntRange(min=0), default=None, help="intra_op_num_threads.")
def command(version, n, as_json, **opts):
    """Run one probe N times in fresh processes: same bits every time, or *nondeterministic*."""
    from harness.plan import plan_for_release
    from harness.triage import options as triage

    opts, reduced = on_reduced(opts)
    plan = plan_for_release(search_spec({**opts, "from_": version, "to": version}), version, log=log_to_stderr)

    def show(i, rec):
        if not as_json:
            hashes = ", ".join(h[:12] for h in (triage.output_hashes(rec) or []))
            err.print(f"run {i + 1}/{n}: {rec['verdict']:<7} {escape(rec.get('why') or '')} sha256 {hashes} "
                      f"({rec.get('seconds') or 0:.1f} s)")

    doc = triage.repeat_probe(plan, plan.releases[0], n, observer=show)
    if as_json:
        print_json({**doc, "reduced_repro": reduced})
    else:
        if reduced:
            out.print(escape(f"Ran {reduced}."))
        for name, hashes in doc["per_output"].items():
            out.print(f"{name}: {len(hashes)} distinct sha256 in {n} runs" +
                      ("" if len(hashes) == 1 else ": " + ", ".join(h[:16] for h in hashes)))
        out.print(f"onnxruntime {version}: [bold]{doc['verdict']}[/] ({escape(doc['why'])})")
        out.print(f"[dim]results: {doc['results']}[/]")
    return 0
