"""`bisect run`: last good and first bad release of a range, in few probes."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape

from harness.commands.common import (
    compose,
    err,
    log_to_stderr,
    model_options,
    on_reduced,
    out,
    print_json,
    probe_options,
    ray_option,
    range_options,
    reduced_option,
    say_stopped,
    search_spec,
    store_options,
    target_options,
)
from harness.errors import UsageError

# What run and sweep both take: the model (or a reduced repro), the range, the target, the store, the probes.
search_options = compose(model_options, reduced_option, range_options, target_options, ray_option, store_options,
                         probe_options)


@click.command("run")
@search_options
@click.option("--mode", type=click.Choice(["regression", "fix"]), default="regression", show_default=True,
              help="regression: first bad after good; fix: first good after bad.")
@click.option("--explain", is_flag=True, help="Trace the boundary pair and say which node's numerics changed.")
@click.option("--reduce", "reduce_", is_flag=True,
              help="Then shrink the regression (or fix) to the fewest rows and nodes that still flip (as `bisect reduce`).")
@click.option("--blame", is_flag=True,
              help="Then name the graph transformer, kernel (and, with --repo, commits) below the boundary (as `bisect blame`).")
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="With --blame: a clone of onnxruntime, for the commits between the two builds.")
@click.option("--rows", type=click.Choice(["all", "fewest"]), default="all", show_default=True,
              help="fewest: search on the likeliest rows first (ranked by a native pass when probes run on "
                   "another arch; else the longest), twice as many while no row flips, then verify "
                   "the boundary on the full batch; for emulated probes of big models.")
@click.option("--into-dev-builds", "into_dev_builds", is_flag=True,
              help="Then bisect the pre-releases and development builds that the wheel sources hold between the "
                   "boundary's two releases (the release boundary stays the run's).")
def command(**opts):
    """Bisect the release range: last good and first bad release, in few probes."""
    if opts.get("repo") and not opts.get("blame"):
        raise UsageError(f"--repo {opts['repo']}: it is for --blame (the commits below the boundary); add --blame")
    return search_and_render(opts, sweep=False)


def search_and_render(opts: dict, sweep: bool) -> int:
    """One search per requested architecture, each with its own results; the tables or one JSON object."""
    from harness.vocabulary import canonical_arch

    opts, reduced = on_reduced(opts)
    if opts.get("margin") is None:  # a bisection wants few, quick probes
        # a sweep feeds the nightly page and drift: on, except under emulation (the plan decides: "native")
        opts["margin"] = "native" if sweep else False
    if reduced:
        err.print(escape(f"Running {reduced}."))
    archs = [canonical_arch(a) for a in opts["arch"].split(",") if a.strip()]
    if not archs or len(set(archs)) != len(archs):
        raise UsageError(f"--arch {opts['arch']!r}: give distinct architectures, e.g. x86_64,aarch64")
    if opts.get("resume") and len(archs) > 1:
        raise UsageError(f"--resume {opts['resume']}: a run has one arch; give one --arch, not {opts['arch']}")
    specs = [search_spec({**opts, "arch": arch}) for arch in archs]
    if len(specs) > 1:
        from harness.request import check

        for spec in specs:  # every arch's request is refused before the first probe of any
            check(spec)
    docs = []
    for spec in specs:
        doc = _search_one(spec, opts, sweep)
        if isinstance(doc, int):  # stopped (Ctrl-C or SIGTERM), and said what is saved
            return doc
        docs.append(doc)
    for d in docs:
        d["reduced_repro"] = reduced
    if opts["as_json"]:
        from harness.results.evidence import CELL_SCHEMA

        if len(docs) == 1:
            print_json(docs[0], CELL_SCHEMA)
        else:  # one cell document per arch, each naming its schema
            print_json({"archs": {d["provenance"]["arch"]: {"$schema": CELL_SCHEMA, **d} for d in docs}})
    from harness.summary import exit_status

    return min(exit_status(d) for d in docs)  # a boundary found on any arch is a finding


def _search_one(spec, opts: dict, sweep: bool) -> dict | int:
    from harness.plan import make_plan
    from harness.report.terminal import (
        ProbeLines,
        blame_summary,
        dev_builds_summary,
        profile_table,
        reduction_summary,
        rows_summary,
        run_table,
    )
    from harness.session import run_search
    from harness.summary import boundary_of
    from harness.triage import rows as fewrows

    strategy = opts.get("rows", "all")
    fewrows.check(opts.get("mode", "regression"), sweep, strategy)
    listed = None
    if opts.get("into_dev_builds"):
        from harness.triage import devbuilds

        devbuilds.check(strategy)
        listed = devbuilds.listing(spec)  # read before any probe: --offline without its cache is refused here
    plan = make_plan(spec, log=log_to_stderr)
    for warning in plan.probe_inputs.warnings:
        err.print(f"warning: {escape(warning)}")
    with ProbeLines(err) as progress:
        try:
            if strategy == "fewest":
                found = fewrows.search(spec, plan, observer=progress, jobs=opts["jobs"], prefetch=opts["prefetch"],
                                       log=log_to_stderr)
            else:
                found = run_search(plan, mode=opts.get("mode", "regression"), sweep=sweep, observer=progress,
                                   jobs=opts["jobs"], prefetch=opts["prefetch"])
            if listed is not None and devbuilds.search(found, listed, observer=progress, jobs=opts["jobs"],
                                                       prefetch=opts["prefetch"]) is None:
                err.print("--into-dev-builds: the releases show no boundary to continue from")
            pair = boundary_of(found.doc)
            if plan.job.timing is not None and pair:
                from harness.explain.profile import profile_pair

                log_to_stderr(f"profiling {pair[0]} and {pair[1]}: where the time went")
                found.doc["profile"] = profile_pair(plan, *pair)
            if opts.get("explain"):
                # onnx and the tracer: imported only when asked for
                from harness.explain.boundary import explain_search

                explain_search(found, log=log_to_stderr)
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (harness.errors.Terminated)
            return say_stopped(exc, f"{len(plan.store.records())} finished probes are saved in {plan.store.dir}",
                               f"--resume {plan.store.run_id}")
    doc = found.doc
    try:
        _reduce_and_blame(doc, plan, opts)
    except KeyboardInterrupt as exc:  # the boundary is saved; so are the reduction's or blame's finished probes
        return say_stopped(exc, f"the run and the finished probes of its reduction or blame are saved in "
                                f"{plan.store.dir}")
    if not opts["as_json"]:
        out.print(run_table(doc))
        if "rows" in doc:
            out.print(rows_summary(doc["rows"]))
        out.print(doc["message"])
        out.print(f"Bad means: {escape(doc['bad_means'])}.")
        if "dev_builds" in doc:
            out.print(dev_builds_summary(doc))
        if "explanation" in doc:
            out.print(escape(doc["explanation"]["text"]))
        if "reduced" in doc:
            out.print(reduction_summary(doc["reduced"]))
        if "blame" in doc:
            out.print(blame_summary(doc["blame"]))
        if "profile" in doc:
            out.print(profile_table(doc["profile"]))
        out.print(f"[dim]results: {plan.store.dir}[/]")
    return doc


def _reduce_and_blame(doc: dict, plan, opts: dict) -> None:
    """--reduce and --blame after the search: their documents go into the run's (`doc`)."""
    from harness.report.terminal import ProbeLines

    if opts.get("reduce_") and doc["status"] == "found" and doc["mode"] != "sweep":  # a regression or a fix
        from harness.triage.reduce import NoFlip, reduce_saved_run

        try:
            with ProbeLines(err) as progress:
                doc["reduced"] = reduce_saved_run(plan.store.dir, opts["cache_dir"], opts["offline"],
                                                  log=log_to_stderr, question=doc["cell"]["key"], observer=progress,
                                                  ray_address=opts.get("ray_address"))
        except NoFlip as exc:  # the boundary stands; the reduction says why it has none
            err.print(f"no reduction: {escape(str(exc))}")
    if opts.get("blame") and doc["status"] == "found":
        from harness.blame.pair import NoFlip as Unblamed
        from harness.blame.pair import blame_saved_run

        try:
            with ProbeLines(err) as progress:
                doc["blame"] = blame_saved_run(plan.store.dir, opts["cache_dir"], opts["offline"],
                                               repo=opts.get("repo"), question=doc["cell"]["key"],
                                               log=log_to_stderr, observer=progress,
                                               ray_address=opts.get("ray_address"))
        except Unblamed as exc:
            err.print(f"nothing to blame: {escape(str(exc))}")
