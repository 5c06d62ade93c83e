"""Triage after the boundary: `bisect options`, `bisect repeat`, `bisect mitigate`, `bisect report`."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.markup import escape

from harness.errors import UsageError
from harness.options import (ARCH_ALIASES, compose, err, model_options, out, range_options, search_spec,
                             store_options, target_options)

common = compose(
    click.option("--results-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True),
    click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, help="Seconds per probe."),
    click.option("--bad-if", "bad_if", default="nan-or-inf", show_default=True,
                 help="nan-or-inf | nan | zero-rows | max-abs>B (rel-diff is not offered here)."),
    click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
)


def _csv(text: str, allowed: tuple[str, ...], flag: str) -> list[str]:
    values = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise UsageError(f"{flag} {text!r}: choose from {', '.join(allowed)}")
    return values


def _plan_one(opts: dict, version: str, session_options: dict | None = None, repeat: int = 1):
    """The plan of one release (the ordinary run store is opened, and dropped again if it stays empty)."""
    import dataclasses

    from harness.plan import make_plan

    if opts["bad_if"].startswith("rel-diff"):
        raise UsageError("--bad-if rel-diff needs a reference; use `bisect run` for that")
    opts = {**opts, "arch": ARCH_ALIASES.get(opts["arch"], opts["arch"]), "from_": version, "to": version,
            "resume": None, "reference": None, "graph_opt": opts.get("graph_opt"), "threads": opts.get("threads")}
    spec = search_spec(opts)
    if session_options is not None:
        spec = dataclasses.replace(spec, session_options=session_options)
    plan = make_plan(spec)
    if not plan.releases:
        raise UsageError(f"--version {version}: no such onnxruntime release in the index")
    _drop_if_empty(plan.store)
    return plan


def _drop_if_empty(store) -> None:
    man = store.manifest() or {}
    if (store.dir / "probes.jsonl").exists() or len(man.get("commands", [])) > 1 or (store.dir / "traces").exists():
        return
    try:
        (store.dir / "manifest.json").unlink()
        (store.dir / "outputs").rmdir()
        store.dir.rmdir()
    except OSError:
        pass


# --- options -------------------------------------------------------------------------------


@click.command("options")
@model_options
@click.option("--version", "version", required=True, metavar="VERSION", help="Release to probe (e.g. the first bad one).")
@target_options
@store_options
@common
@click.option("--levels", default="disable,basic,extended,layout,all", show_default=True,
              help="Graph optimization levels, in order (layout only where the release has it).")
@click.option("--modes", default="sequential,parallel", show_default=True, help="Execution modes.")
@click.option("--threads", "threads_", default="1,all", show_default=True, help="intra-op threads: 1, all, or numbers.")
@click.option("--switches", default="auto", show_default=True,
              help="CPU-specific session config switches: auto (those for --arch), none, or names (kleidiai-off).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Probes at once.")
def options_command(version, levels, modes, threads_, switches, jobs, as_json, **opts):
    """Verdict of one release under every combination of session options; bisect a dimension that matters."""
    from harness import triage

    lv = _csv(levels, triage.LEVELS, "--levels")
    md = _csv(modes, triage.MODES, "--modes")
    th = [t.strip() for t in threads_.split(",") if t.strip()]
    if not th or any(t != "all" and not t.isdigit() for t in th):
        raise UsageError(f"--threads {threads_!r}: give 1, all or numbers, comma separated")
    plan = _plan_one(opts, version)

    def show(combo, rec, reused):
        if as_json:
            return
        from harness.report import VERDICT_STYLE

        style = VERDICT_STYLE.get(rec["verdict"], "dim")
        err.print(f"{combo.id:<58} [{style}]{rec['verdict']:<7}[/] {escape(rec.get('why') or '')}"
                  + (" (saved)" if reused else f" ({rec.get('seconds') or 0:.1f} s)"))

    doc = triage.options_matrix(plan, plan.releases[0], levels=lv, modes=md, threads=th, switches=switches,
                                jobs=jobs, observer=show)
    if as_json:
        out.print_json(json.dumps(doc))
    else:
        out.print(options_table(doc))
        out.print(escape(doc["message"]))
        if doc["support"]["module"] is None:
            out.print(escape(doc["support"]["how"]))
        out.print(f"[dim]results: {doc['results']}[/]")
    return 0 if doc["verdicts_seen"] else 3


def options_table(doc: dict):
    from rich.table import Table

    from harness.report import VERDICT_STYLE, target_label

    prov = doc["provenance"]
    t = Table(title=f"session options · onnxruntime {doc['version']} · {target_label(prov)}", title_justify="left")
    for col in ("level", "mode", "threads", "switch", "verdict", "note"):
        t.add_column(col)
    for c in doc["combos"]:
        style = VERDICT_STYLE.get(c["verdict"], "dim")
        note = "" if c["verdict"] in ("good", "bad") else (c.get("why") or "")
        if c["verdict"] in ("good", "bad") and c.get("nan_rows") is not None:
            note = f"{c['nan_rows']} NaN rows of {c['rows']}"
        t.add_row(c["level"], c["mode"], c["threads"], c["switch"], f"[{style}]{c['verdict']}[/]", escape(note))
    return t


# --- repeat --------------------------------------------------------------------------------


@click.command("repeat")
@model_options
@click.option("--version", "version", required=True, metavar="VERSION")
@click.option("-n", "n", type=click.IntRange(min=2), default=5, show_default=True, help="Identical probes (fresh processes).")
@target_options
@store_options
@common
@click.option("--graph-opt", type=click.Choice(["disable", "basic", "extended", "layout", "all"]), default=None)
@click.option("--threads", type=click.IntRange(min=0), default=None, help="intra_op_num_threads.")
def repeat_command(version, n, as_json, **opts):
    """Run one probe N times in fresh processes: same bits every time, or *nondeterministic*."""
    from harness import triage

    plan = _plan_one(opts, version)

    def show(i, rec):
        if not as_json:
            hashes = ", ".join(h[:12] for h in (triage._hashes(rec) or []))
            err.print(f"run {i + 1}/{n}: {rec['verdict']:<7} {escape(rec.get('why') or '')} sha256 {hashes} "
                      f"({rec.get('seconds') or 0:.1f} s)")

    doc = triage.repeat_probe(plan, plan.releases[0], n, observer=show)
    if as_json:
        out.print_json(json.dumps(doc))
    else:
        for name, hashes in doc["per_output"].items():
            out.print(f"{name}: {len(hashes)} distinct sha256 in {n} runs" +
                      ("" if len(hashes) == 1 else ": " + ", ".join(h[:16] for h in hashes)))
        out.print(f"onnxruntime {version}: [bold]{doc['verdict']}[/] ({escape(doc['why'])})")
        out.print(f"[dim]results: {doc['results']}[/]")
    return 0


# --- mitigate ------------------------------------------------------------------------------


@click.command("mitigate")
@model_options
@range_options
@target_options
@store_options
@common
@click.option("--node", "nodes", multiple=True, metavar="NODE", help="Also keep this node in fp32 (repeatable).")
@click.option("--reference-model", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="fp32 model to compare with (default: the embedded fp32 twin, or the model converted to fp32).")
@click.option("--hot", type=click.FloatRange(min=0.01, max=1.0), default=0.5, show_default=True,
              help="A value past this fraction of 65504 in the fp32 reference must stay in fp32.")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=1, show_default=True, help="Probes at once.")
def mitigate_command(nodes, reference_model, hot, jobs, as_json, **opts):
    """Keep the culprit nodes (and the residual stream around them) in fp32; is every release clean then?"""
    from harness import mitigate
    from harness.plan import make_plan

    opts = {**opts, "arch": ARCH_ALIASES.get(opts["arch"], opts["arch"]), "resume": None, "reference": None,
            "graph_opt": None, "threads": None}
    spec = search_spec(opts)
    plan = make_plan(spec)
    log = (lambda msg: None) if as_json else (lambda msg: err.print(escape(str(msg))))
    try:
        doc = mitigate.check(plan, spec, reference=reference_model, nodes=nodes, hot=hot, jobs=jobs, log=log)
    except (KeyError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if as_json:
        out.print_json(json.dumps(doc))
        return 0 if doc["all_clean"] else 3
    out.print(mitigation_table(doc))
    out.print(escape(doc["message"]))
    out.print(f"patched model: {doc['patched']['path']}")
    out.print(f"[dim]results: {plan.store.dir / mitigate.MITIGATION}[/]")
    return 0 if doc["all_clean"] else 3


def mitigation_table(doc: dict):
    from rich.table import Table

    from harness.report import VERDICT_STYLE, target_label

    prov = doc["provenance"]
    t = Table(title=f"fp32 island · {doc['model']} · {target_label(prov)}", title_justify="left")
    for col, just in (("release", "left"), ("original", "left"), ("patched", "left"), ("fp32 ref", "left"),
                      ("min cosine", "right"), ("max |diff|", "right")):
        t.add_column(col, justify=just)
    for row in doc["releases"]:
        d = next(iter((row["distance"] or {}).values()), {}) if row["distance"] else {}
        cells = [row["version"]]
        for key in ("original", "patched", "reference"):
            v = row[key] or "-"
            cells.append(f"[{VERDICT_STYLE.get(v, 'dim')}]{v}[/]")
        cells.append(f"{d['min_cosine']:.8f}" if d.get("min_cosine") is not None else "-")
        cells.append(f"{d['max_abs_diff']:.3g}" if d.get("max_abs_diff") is not None else "-")
        t.add_row(*cells)
    return t


# --- report --------------------------------------------------------------------------------


@click.command("report")
@click.argument("run", metavar="RUN")
@click.option("--results-dir", type=click.Path(path_type=Path), default=Path("results"), show_default=True,
              help="Where RUN is looked up when it is a run id.")
@store_options
@click.option("--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown", show_default=True)
@click.option("--no-probe", is_flag=True, help="Do not probe the newest release, nor trace to explain.")
@click.option("--embed-limit", type=click.IntRange(min=0), default=64 << 10, show_default=True,
              help="Embed the model in the repro script when it is at most this many bytes.")
def report_command(run, results_dir, cache_dir, offline, fmt, no_probe, embed_limit):
    """A paste-ready upstream report of a run: environment, verdicts, explanation, repro script."""
    from harness import upstream

    run_dir = Path(run)
    if not (run_dir / "manifest.json").exists():
        run_dir = results_dir / run
    if not (run_dir / "manifest.json").exists():
        raise UsageError(f"{run}: no run there (give a results/<run-id> directory or a run id in --results-dir)")
    log = lambda msg: err.print(escape(str(msg)))  # noqa: E731
    doc = upstream.build(run_dir, cache_dir=cache_dir, offline=offline, probe=not no_probe,
                         embed_limit=embed_limit, log=log)
    if fmt == "json":
        click.echo(json.dumps(doc, indent=1))
    else:
        click.echo(upstream.markdown(doc))
    err.print(f"repro script: {doc['repro']['path']}")
    return 0
