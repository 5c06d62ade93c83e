"""The `bisect` command line. Options shared by several commands are defined once."""

from __future__ import annotations

import json
import resource
import time
import platform
import sys

import click
from rich.console import Console
from rich.markup import escape

from harness import __version__
from harness.errors import EnvironmentSkip, HarnessError, UsageError

from harness.options import (  # noqa: F401  (option groups are shared with harness.commands)
    ARCH_ALIASES, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, default_cache_dir, err, model_options, out, probe_options, range_options,
    search_spec, store_options, target_options,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ortbisect")
def cli():
    """Find the onnxruntime release where a model's outputs went wrong."""


@cli.command()
@model_options
@range_options
@target_options
@store_options
@probe_options
@click.option("--mode", type=click.Choice(["regression", "fix"]), default="regression", show_default=True,
              help="regression: first bad after good; fix: first good after bad.")
@click.option("--explain", is_flag=True, help="Trace the boundary pair and say which node's numerics changed.")
def run(**opts):
    """Bisect the release range: last good and first bad release, in few probes."""
    return _search(opts, sweep=False)


@cli.command()
@model_options
@range_options
@target_options
@store_options
@probe_options
@click.option("--explain", is_flag=True, help="Trace the first transition's pair and say which node's numerics changed.")
def sweep(**opts):
    """Probe every release of the range and list each transition."""
    return _search({**opts, "mode": "regression"}, sweep=True)


@cli.command()
@range_options
@click.option("--arch", default=platform.machine(), show_default=True)
@click.option("--python", "python", default=f"{sys.version_info.major}.{sys.version_info.minor}", show_default=True)
@store_options
@click.option("--json", "as_json", is_flag=True)
def versions(from_, to, arch, python, cache_dir, offline, as_json):
    """The releases in a range, and whether each has a wheel for the target."""
    from harness.uvtool import uv_bin
    from harness.versions import ReleaseIndex, Target, select_range

    target = Target(arch, python)
    rels = select_range(ReleaseIndex(cache_dir, uv_bin(), offline).releases(), from_, to)
    rows = [{"version": r.version, "wheel": r.wheel_for(target)} for r in rels]
    if as_json:
        out.print_json(json.dumps(rows))
        return
    for row in rows:
        out.print(f"{row['version']:<10} {row['wheel'] or '[yellow]no wheel for ' + arch + ' / Python ' + python + ' (skip)[/]'}")
    out.print(f"{len(rows)} releases, {sum(1 for r in rows if r['wheel'])} installable for {arch} / Python {python}")


@cli.command("models")
@store_options
@click.option("--json", "as_json", is_flag=True)
def list_models(cache_dir, offline, as_json):
    """Every registered model: source, size, inputs and outputs, default batch."""
    from harness.models import describe, registered

    rows = [describe(spec, cache_dir) for spec in registered().values()]
    if as_json:
        out.print_json(json.dumps(rows))
        return 0
    for row in rows:
        size = f"{row['size_bytes'] / 1e6:.1f} MB" if row["size_bytes"] else "not downloaded"
        out.print(f"[bold]{row['name']}[/]  ({row['source']}, {size})  {escape(row['description'])}")
        out.print(f"    from     {escape(row['origin'])}")
        if row["inputs"]:
            out.print(f"    inputs   {escape(', '.join(row['inputs']))}")
            out.print(f"    outputs  {escape(', '.join(row['outputs']))}")
        out.print(f"    batch    {row['batch'] or 'none: give --inputs'} (checks {', '.join(row['outputs_checked']) or 'all outputs'})")
    return 0


class Progress:
    """One line per probe on stderr, with a spinner for the probes in flight."""

    def __init__(self, console: Console, total: int):
        from rich.progress import Progress as RichProgress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = console
        self.count = 0
        self.total = total
        self.bar = RichProgress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                console=console, transient=True)
        self.tasks = {}

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        return self.bar.__exit__(*exc)

    def probe_started(self, version: str) -> None:
        self.tasks[version] = self.bar.add_task(f"probing onnxruntime {version}", total=None)

    def probe_finished(self, record: dict, reused: bool) -> None:
        from harness.report import VERDICT_STYLE

        self.count += 1
        task = self.tasks.pop(record["version"], None)
        if task is not None:
            self.bar.remove_task(task)
        style = VERDICT_STYLE.get(record["verdict"], "")
        how = "saved" if reused else f"{record.get('seconds') or 0:.1f} s"
        self.bar.console.print(
            f"probe {self.count:>2}: onnxruntime {record['version']:<8} [{style}]{record['verdict']:<7}[/] "
            f"{escape(record.get('why') or '')} ({how})"
        )


def _search(opts: dict, sweep: bool) -> int:
    """One search per requested architecture, each with its own results."""
    archs = [ARCH_ALIASES.get(a.strip(), a.strip()) for a in opts["arch"].split(",") if a.strip()]
    if not archs or len(set(archs)) != len(archs):
        raise UsageError(f"--arch {opts['arch']!r}: give distinct architectures, e.g. x86_64,aarch64")
    docs = []
    for arch in archs:
        rc, doc = _search_one({**opts, "arch": arch}, sweep)
        if doc is None:
            return rc
        docs.append((rc, doc))
    if opts["as_json"]:
        out.print_json(json.dumps(docs[0][1] if len(docs) == 1 else {"archs": {d["provenance"]["arch"]: d for _, d in docs}}))
    return min(rc for rc, _ in docs)  # a boundary found on any arch is a finding


def _search_one(opts: dict, sweep: bool) -> tuple[int, dict | None]:
    from harness.driver import Driver
    from harness.report import exit_status, summary, table

    from harness.plan import make_plan

    started = time.perf_counter()
    plan = make_plan(search_spec(opts))
    with Progress(err, len(plan.releases)) as progress:
        driver = Driver(plan.runner, plan.releases, plan.store, plan.job, plan.predicate, plan.reference,
                        observer=progress, jobs=opts["jobs"], prefetch=opts["prefetch"])
        try:
            outcome = driver.run(mode=opts["mode"], sweep=sweep)
        except KeyboardInterrupt:
            done = len(plan.store.records())
            err.print(f"interrupted: {done} finished probes are saved in {plan.store.dir}; "
                      f"run the same command again (or --resume {plan.store.run_id}) to continue")
            return EXIT_INTERRUPTED, None
    doc = summary(outcome, opts["mode"], plan.store.run_id, sweep=sweep)
    if opts.get("explain") and doc["status"] == "found":
        from harness.commands.explain import explain_pair

        lo, hi = plan.releases[outcome.step.lo].version, plan.releases[outcome.step.hi].version
        result, chart = explain_pair(plan, lo, hi)
        doc["explanation"] = {"text": result.explanation, "suspect": result.suspect, "pair": [lo, hi],
                              "diff": str(plan.store.dir / "traces" / f"diff-{lo}-{hi}.json"),
                              "chart": str(chart) if chart else None}
        (plan.store.dir / "explanation.json").write_text(json.dumps(doc["explanation"], indent=1))
    doc["harness"] = {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                      "wall_s": round(time.perf_counter() - started, 3)}
    doc["predicate"] = str(plan.predicate)
    doc["generated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    doc["cell"] = {"key": f"{doc['mode']}-{plan.releases[0].version}-{plan.releases[-1].version}"}
    plan.store.save_summary(doc["cell"]["key"], doc)  # what the dashboard shows of this run
    if not opts["as_json"]:
        out.print(table(doc))
        out.print(doc["message"])
        if "explanation" in doc:
            out.print(escape(doc["explanation"]["text"]))
        out.print(f"[dim]results: {plan.store.dir}[/]")
    return exit_status(doc), doc


def _register_commands() -> None:
    from harness.commands.explain import diff_command, trace_command

    cli.add_command(trace_command)
    cli.add_command(diff_command)
    from harness.commands import dashboard, doctor, matrix, merge, setup

    for module in (matrix, merge, dashboard, setup, doctor):
        cli.add_command(module.command)
    from harness.commands.triage import mitigate_command, options_command, repeat_command, report_command

    for command in (options_command, repeat_command, mitigate_command, report_command):
        cli.add_command(command)


_register_commands()


def main(argv: list[str] | None = None) -> int:
    try:
        rc = cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        err.print("interrupted")
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        err.print(f"error: {escape(exc.format_message())}")
        return EXIT_USAGE
    except (UsageError, EnvironmentSkip) as exc:
        err.print(f"error: {escape(str(exc))}")
        return EXIT_USAGE
    except HarnessError as exc:
        err.print(f"error: {escape(str(exc))}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        err.print("interrupted")
        return EXIT_INTERRUPTED
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
