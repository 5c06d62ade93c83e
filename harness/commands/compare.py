"""`bisect compare`: one release, one batch, several PACKAGE:EP pairs side by side; which diverge from the first."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from harness.commands.common import (
    arch_options,
    err,
    graph_opt_option,
    json_option,
    log_to_stderr,
    model_options,
    out,
    package_of,
    print_json,
    results_dir_option,
    search_spec,
    source_options,
    store_options,
    timeout_option,
)


@click.command("compare")
@model_options
@click.option("--version", "version", required=True, metavar="VERSION", help="The release every pair runs.")
@click.argument("pairs", nargs=-1, required=True, metavar="PACKAGE:EP...")
@source_options
@arch_options
@store_options
@results_dir_option
@timeout_option
@graph_opt_option
@click.option("--cosine", type=click.FloatRange(-1, 1), default=0.999, show_default=True,
              help="A pair diverges when a row finite in both has a cosine with the first pair's below this.")
@json_option
def command(version, pairs, cosine, as_json, **opts):
    """Run one release of several packages and providers (PACKAGE:EP, the first is the reference) on one batch."""
    from harness.report.terminal import ProbeLines, compare_table
    from harness.triage.compare import compare, parse_pair

    opts = {**opts, "from_": version, "to": version, "range_flags": ("--version", "--version")}
    spec = search_spec(opts)
    packages = [parse_pair(p, package_of(opts)) for p in pairs]
    with ProbeLines(err) as progress:
        doc = compare(spec, version, packages, cosine, observer=progress, log=log_to_stderr, command=sys.argv)
    if as_json:
        print_json(doc)
        return 0
    out.print(compare_table(doc))
    out.print(escape(doc["message"]))
    return 0
