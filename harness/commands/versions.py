"""`bisect versions`: the releases of a range and whether each has a wheel for the target."""

from __future__ import annotations

import json
import platform
import sys

import click

from harness.commands.common import json_option, out, range_options, store_options


@click.command("versions")
@range_options
@click.option("--arch", default=platform.machine(), show_default=True)
@click.option("--python", "python", default=f"{sys.version_info.major}.{sys.version_info.minor}", show_default=True)
@store_options
@json_option
def command(from_, to, arch, python, cache_dir, offline, as_json):
    """The releases in a range, and whether each has a wheel for the target."""
    from harness.request import release_listing
    from harness.runners import AUTO, REGISTRY, check_target
    from harness.versions import Target, select_range
    from harness.vocabulary import canonical_arch

    arch = canonical_arch(arch)
    if not any(cls.serves(arch) for cls in REGISTRY.values()):
        check_target(AUTO, arch)  # the registry's line: no backend runs that arch
    target = Target(arch, python)
    rels = select_range(release_listing(cache_dir, offline), from_, to)
    rows = [{"version": r.version, "wheel": r.wheel_for(target)} for r in rels]
    if as_json:
        out.print_json(json.dumps(rows))
        return 0
    for row in rows:
        out.print(f"{row['version']:<10} {row['wheel'] or '[yellow]no wheel for ' + arch + ' / Python ' + python + ' (skip)[/]'}")
    out.print(f"{len(rows)} releases, {sum(1 for r in rows if r['wheel'])} installable for {arch} / Python {python}")
    return 0
