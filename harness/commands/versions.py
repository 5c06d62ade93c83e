"""`bisect versions`: the builds of a package in a range, whether each has a wheel for the target, and its commit."""

from __future__ import annotations

import platform
import sys

import click
from rich.markup import escape

from harness.commands.common import (
    json_option,
    out,
    package_of,
    package_options,
    print_json,
    store_options,
)


@click.command("versions")
@click.option("--from", "from_", default=None, metavar="VERSION", help="First build of the range (default: the oldest).")
@click.option("--to", "to", default=None, metavar="VERSION", help="Last build of the range (default: the newest).")
@click.option("--arch", default=platform.machine(), show_default=True,
              help="CPU architecture of the target whose wheels are looked for.")
@click.option("--python", "python", default=f"{sys.version_info.major}.{sys.version_info.minor}", show_default=True,
              help="Python version of the target whose wheels are looked for.")
@package_options
@click.option("--commits", is_flag=True,
              help="Install each build with a wheel for the target (in the cache) to read its commit; without it, "
                   "commits are shown for builds already installed.")
@store_options
@json_option
def command(from_, to, arch, python, cache_dir, offline, as_json, commits, **opts):
    """The builds of a package in a range, whether each has a wheel for the target, and the commit it was built from."""
    from harness.errors import EnvironmentSkip
    from harness.releases.packages import parse_build_info
    from harness.releases.versions import Target, select_range
    from harness.request import package, release_listing
    from harness.runners import AUTO, REGISTRY, check_target, make_runner
    from harness.vocabulary import canonical_arch

    arch = canonical_arch(arch)
    if not any(cls.serves(arch) for cls in REGISTRY.values()):
        check_target(AUTO, arch)  # the registry's line: no backend runs that arch
    pkg = package(package_of(opts))
    target = Target(arch, python)
    listing = release_listing(cache_dir, offline, pkg)
    if from_ is None or to is None:
        if not listing:
            from harness.errors import UsageError

            raise UsageError(f"--package {pkg.name}: no release on the index or in the sources given")
        from_, to = from_ or listing[0].version, to or listing[-1].version
    rels = select_range(listing, from_, to, package=pkg.name)
    runner = make_runner(AUTO, target, cache_dir, None, pkg)
    rows = []
    for r in rels:
        wheel = r.wheel_for(target)
        info = None
        if wheel:
            try:
                info = runner.build_info(r, install=commits)
            except EnvironmentSkip as exc:
                info, wheel = None, f"{wheel} (cannot install: {exc})"
        build = parse_build_info(info)
        rows.append({"version": r.version, "wheel": wheel, "commit": build["commit"], "branch": build["branch"],
                     "source": r.source or "index"})
    if as_json:
        print_json(rows)
        return 0
    width = max((len(r["version"]) for r in rows), default=10)
    for row in rows:
        where = "" if row["source"] == "index" else f"  [dim]from {escape(row['source'])}[/]"
        commit = row["commit"] or "-"
        if row["wheel"]:
            out.print(f"{row['version']:<{width}}  {commit:<12} {escape(row['wheel'])}{where}")
        else:
            out.print(f"{row['version']:<{width}}  {'-':<12} [yellow]no wheel for {arch} / Python {python} (skip)[/]{where}")
    out.print(f"{len(rows)} {pkg.name} builds, {sum(1 for r in rows if r['wheel'])} installable for {arch} / "
              f"Python {python}" + ("" if commits or all(r["commit"] for r in rows if r["wheel"])
                                    else "; commits of installed builds only (--commits installs the others)"))
    return 0
