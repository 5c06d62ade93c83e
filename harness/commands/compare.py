"""`bisect compare`: one release (or every release of a range), one batch, several PACKAGE:EP pairs side by side;
which diverge from the first."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from harness.commands.common import (
    arch_options,
    ray_option,
    err,
    graph_opt_option,
    json_option,
    log_to_stderr,
    model_options,
    out,
    package_of,
    print_json,
    results_dir_option,
    say_stopped,
    search_spec,
    source_options,
    store_options,
    timeout_option,
)


@click.command("compare")
@model_options
@click.option("--version", "version", metavar="VERSION", help="The release every pair runs.")
@click.option("--from", "from_", metavar="VERSION",
              help="With --to: compare at every release of the range that the first pair and another both have.")
@click.option("--to", "to", metavar="VERSION", help="The last release of the range (with --from).")
@click.argument("pairs", nargs=-1, required=True, metavar="PACKAGE:EP...")
@source_options
@arch_options
@ray_option
@store_options
@results_dir_option
@timeout_option
@graph_opt_option
@click.option("--cosine", type=click.FloatRange(-1, 1), default=0.999, show_default=True,
              help="A pair diverges when a row finite in both has a cosine with the first pair's below this.")
@json_option
def command(version, from_, to, pairs, cosine, as_json, **opts):
    """Run one release (--version) or every release of a range (--from, --to) of several packages and providers
    (PACKAGE:EP, the first is the reference) on one batch."""
    from harness.errors import UsageError
    from harness.report.terminal import ProbeLines, compare_range_table, compare_table
    from harness.triage.compare import compare, compare_range, parse_pair

    if version and (from_ or to):
        raise UsageError(f"--version {version}: give one release (--version) or a range (--from, --to), not both")
    if not version and not (from_ and to):
        raise UsageError(f"--from {from_}: give --to too" if from_ else f"--to {to}: give --from too" if to
                         else "give a release (--version V) or a range (--from A --to B)")
    ranged = not version
    opts = {**opts, "from_": from_ or version, "to": to or version,
            "range_flags": ("--from", "--to") if ranged else ("--version", "--version")}
    spec = search_spec(opts)
    packages = [parse_pair(p, package_of(opts)) for p in pairs]
    try:
        with ProbeLines(err) as progress:
            if ranged:
                doc = compare_range(spec, packages, cosine, observer=progress, log=log_to_stderr, command=sys.argv)
            else:
                doc = compare(spec, version, packages, cosine, observer=progress, log=log_to_stderr, command=sys.argv)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (harness.errors.Terminated)
        # each pair's probes are those of its ordinary run of the range: kept, and reused
        return say_stopped(exc, f"the finished probes of each pair are saved in {spec.results_dir}")
    if as_json:
        from harness.results.evidence import COMPARE_SCHEMA

        print_json(doc, COMPARE_SCHEMA if ranged else None)  # one release's compare is of no schema
        return 0
    out.print(compare_range_table(doc) if ranged else compare_table(doc))
    out.print(escape(doc["message"]))
    return 0
