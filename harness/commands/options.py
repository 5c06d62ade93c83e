"""`bisect options`: one release under every combination of session options."""

from __future__ import annotations

import click
from rich.markup import escape

from harness.commands.common import (
    err,
    jobs_option,
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
from harness.errors import UsageError


def csv_choice(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise UsageError(f"{flag} {text!r}: choose from {', '.join(allowed)}")
    return values


@click.command("options")
@model_options
@reduced_option
@click.option("--version", "version", required=True, metavar="VERSION", help="Release to probe (e.g. the first bad one).")
@target_options
@store_options
@triage_options
@click.option("--levels", default="disable,basic,extended,layout,all", show_default=True,
              help="Graph optimization levels, in order (layout only where the release has it).")
@click.option("--modes", default="sequential,parallel", show_default=True, help="Execution modes.")
@click.option("--threads", "threads_", default="1,all", show_default=True, help="intra-op threads: 1, all, or numbers.")
@click.option("--switches", default="auto", show_default=True,
              help="CPU-specific session config switches: auto (those for --arch), none, or names (kleidiai-off).")
@jobs_option
def command(version, levels, modes, threads_, switches, jobs, as_json, **opts):
    """Verdict of one release under every combination of session options; bisect a dimension that matters."""
    from harness.plan import plan_for_release
    from harness.report.terminal import VERDICT_STYLE, options_table
    from harness.triage import options as triage
    from harness.vocabulary import canonical_arch

    lv = csv_choice(levels, triage.LEVELS, "--levels")
    md = csv_choice(modes, triage.MODES, "--modes")
    th = [t.strip() for t in threads_.split(",") if t.strip()]
    if not th or any(t != "all" and not t.isdigit() for t in th):
        raise UsageError(f"--threads {threads_!r}: give 1, all or numbers, comma separated")
    opts, reduced = on_reduced(opts)
    triage.switches_for(canonical_arch(opts["arch"]), switches)  # refused before the plan, not after provisioning
    plan = plan_for_release(search_spec({**opts, "from_": version, "to": version}), version, log=log_to_stderr)

    def show(combo, rec, reused):
        if not as_json:
            style = VERDICT_STYLE.get(rec["verdict"], "dim")
            err.print(f"{combo.id:<58} [{style}]{rec['verdict']:<7}[/] {escape(rec.get('why') or '')}"
                      + (" (saved)" if reused else f" ({rec.get('seconds') or 0:.1f} s)"))

    doc = triage.options_matrix(plan, plan.releases[0], levels=lv, modes=md, threads=th, switches=switches,
                                jobs=jobs, observer=show)
    if as_json:
        print_json({**doc, "reduced_repro": reduced})
    else:
        if reduced:
            out.print(escape(f"Ran {reduced}."))
        out.print(options_table(doc))
        out.print(escape(doc["message"]))
        if doc["support"]["module"] is None:
            out.print(escape(doc["support"]["how"]))
        out.print(f"[dim]results: {doc['results']}[/]")
    return 0 if doc["verdicts_seen"] else 3
