"""`bisect report RUN`: a paste-ready upstream report of a run, with its repro script."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.markup import escape

from harness.commands.common import (
    bad_if_text,
    err,
    log_to_stderr,
    question_options,
    results_dir_option,
    store_options,
)
from harness.errors import UsageError
from harness.results.store import MANIFEST


@click.command("report")
@click.argument("run", metavar="RUN")
@results_dir_option
@store_options
@question_options
@click.option("--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown", show_default=True,
              help="The report as Markdown to paste upstream, or as one JSON object.")
@click.option("--no-probe", is_flag=True, help="Do not probe the newest release, nor trace to explain.")
@click.option("--embed-limit", type=click.IntRange(min=0), default=64 << 10, show_default=True,
              help="Embed the model in the repro script when it is at most this many bytes.")
@click.option("--attach-limit", type=click.IntRange(min=0), default=None, show_default="20 MiB",
              help="Put the model and its external data files in repro-batch.zip, beside the script, when together "
                   "they are at most this many bytes (0: never; the report then names the files to attach).")
@click.option("--reduce/--no-reduce", "reduce", default=None,
              help="Reduce the run first (bisect reduce), for a repro a maintainer runs in seconds [default: when "
                   "the run has a boundary, no reduction yet, and the pair's probes say it takes about a minute at "
                   "most; never with --no-probe].")
def command(run, results_dir, cache_dir, offline, question, bad_if, fmt, no_probe, embed_limit, attach_limit, reduce):
    """A paste-ready upstream report of a run: environment, verdicts, explanation, repro script.

    RUN is a results/<run-id> directory, or a run id in --results-dir.
    """
    from harness.report import reduction, upstream
    from harness.report.repro_files import ATTACH_LIMIT
    from harness.report.terminal import ProbeLines
    from harness.results.store import RunStore, read_manifest

    run_dir = Path(run)
    if not (run_dir / MANIFEST).exists():
        run_dir = results_dir / run
    if not run or not (run_dir / MANIFEST).exists():
        raise UsageError(f"{run}: no run there (give a results/<run-id> directory or a run id in --results-dir)")
    manifest = read_manifest(run_dir)  # a damaged manifest is refused in one line
    # a run of the node or web binding has no Python of its own (harness.releases.packages.Package.binding)
    python = () if isinstance(manifest.get("key"), dict) and manifest["key"].get("binding") else ("python",)
    lacking = [f"{part}.{k}" for part, keys in (("key", ("arch", "backend", *python)), ("model", ("name", "path")),
                                                ("batch", ("path",)))
               for k in keys if not isinstance(manifest.get(part), dict) or k not in manifest[part]]
    if lacking:
        raise UsageError(f"{run}: the run's {MANIFEST} lacks {', '.join(lacking)}; not a run bisect made")
    if not RunStore(run_dir).records():
        raise UsageError(f"{run}: no probes recorded in this run; nothing to report")
    advice = reduction.advice(run_dir, cache_dir, offline, question, bad_if_text(bad_if), reduce, probe=not no_probe)
    err.print(escape(advice.said))
    if advice.reduce:
        with ProbeLines(err) as progress:
            why_not = reduction.reduce_first(run_dir, cache_dir, offline, question, bad_if_text(bad_if),
                                             explicit=bool(reduce), log=log_to_stderr, observer=progress,
                                             command=sys.argv)
        if why_not:
            err.print(escape(why_not))
    doc = upstream.build(run_dir, cache_dir=cache_dir, offline=offline, probe=not no_probe,
                         embed_limit=embed_limit, log=log_to_stderr, question=question, bad_if=bad_if_text(bad_if),
                         attach_limit=ATTACH_LIMIT if attach_limit is None else attach_limit)
    err.print(f"answering {escape(doc['question']['said'])}")
    saved = upstream.save(run_dir, doc)
    click.echo(json.dumps(doc, indent=1) if fmt == "json" else upstream.markdown(doc))
    js = doc["repro"].get("js")  # a run of the node or web binding: its own repro, and repro.py on the wheel
    err.print(f"repro script: {saved.parent / js['file']} ({escape(doc['binding']['package'])}), "
              f"{saved.parent / doc['repro']['file']} (the Python wheel); report: {saved}" if js else
              f"repro script: {saved.parent / doc['repro']['file']}; report: {saved}")
    return 0
