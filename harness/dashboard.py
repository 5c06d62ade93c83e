"""The nightly dashboard: one self-contained static HTML page from a results root.

    site/index.html                 the page: inline CSS and inline SVG charts, no script, no network
    site/data/<run-id>/...          copies of each run's manifest.json, probes.jsonl, cells/, traces/
                                    (the page links to them relatively, so the site can be moved or published)

Per model: a grid of release x target (arch · backend · CPU · session options),
each cell coloured by the verdict of the release's NEWEST probe record, with its
NaN rows; the first bad release of each row is marked, a verdict that differs
from the previous release of the same row is flagged, and the explanation of a
boundary is shown when the cell's summary has one (`explanation`, written by
--explain). Charts (matplotlib, rendered to inline SVG): the fp16 headroom per
release where traces exist (results/<run-id>/traces/<version>.json, the JSON of
harness.trace.save_json), and a history strip of when each verdict first
appeared (probe timestamps `finished`).

Every string that comes from results is escaped with html.escape.
"""

from __future__ import annotations

import html
import io
import json
import math
import re
import shutil
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

from packaging.version import InvalidVersion, Version

from harness.errors import UsageError
from harness.history import SIDE_DIRS, latest_by_version, read_manifest, run_dirs
from harness.results import MANIFEST, PROBES, RunStore
from harness.runners import PROVENANCE_KEYS

DEFAULT_PREDICATE = "nan-or-inf"
VERDICT_COLOURS = {"good": "#2e7d32", "bad": "#c62828", "skip": "#f9a825", "error": "#8e24aa",
                   "crash": "#6a1b9a", "timeout": "#ad1457"}
JUDGED = ("good", "bad")


def e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _vkey(v: str):
    try:
        return (0, Version(v))
    except InvalidVersion:
        return (1, v)


@dataclass
class Row:
    run_id: str
    run_dir: Path
    model: str
    model_digest: str
    target: str
    provenance: dict
    options: dict
    predicate: str
    cells: dict[str, dict]  # version -> {verdict, why, nan_rows, inf_rows, rows, finished, records}
    history: list[dict] = field(default_factory=list)  # {version, verdict, first_seen}
    summary: dict | None = None
    first_bad: str | None = None
    last_good: str | None = None
    flips: dict[str, str] = field(default_factory=dict)  # version -> previous verdict
    headroom: dict[str, float] = field(default_factory=dict)


def _target_label(prov: dict, options: dict) -> str:
    from harness.summary import target_label

    parts = [target_label(prov)]
    if prov.get("python"):
        parts.append(f"py{prov['python']}")
    if options:
        parts.append(", ".join(f"{k}={v}" for k, v in sorted(options.items())))
    return " · ".join(parts)


def _cell_docs(run_dir: Path) -> list[dict]:
    docs = []
    for f in sorted((run_dir / "cells").glob("*.json")):
        try:
            docs.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue
    return docs


def _headroom(run_dir: Path) -> dict[str, float]:
    """version -> the largest fp16 headroom (max |x| / 65504; inf when non-finite) of its trace."""
    out = {}
    for f in sorted((run_dir / "traces").glob("*.json")):
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        version = doc.get("version") or f.stem
        vals = []
        for r in doc.get("residual") or []:
            vals.append(math.inf if r.get("nonfinite") else (r.get("headroom") or 0.0))
        if not vals:
            for n in doc.get("nodes") or []:
                for t in n.get("outputs") or []:
                    if t.get("dtype") == "float16" and t.get("headroom") is not None:
                        vals.append(t["headroom"])
        if not vals and isinstance(doc.get("max_headroom"), (int, float)):
            vals.append(doc["max_headroom"])
        if vals:
            out[str(version)] = max(vals)
    return out


def _judge(records: list[dict], predicate: str, summary: dict | None):
    from harness.verdicts import judge, parse_predicate

    pred = parse_predicate(predicate)
    by_summary = {p["version"]: p for p in (summary or {}).get("probes", [])}
    judged = []
    for rec in records:
        j = judge(rec, pred)
        verdict, why = j["verdict"], j["why"]
        if pred.needs_reference:  # the reference outputs are not here: trust the run's own summary
            p = by_summary.get(rec["version"])
            verdict, why = (p["verdict"], p.get("why")) if p else ("error", "no summary for a rel-diff run")
        judged.append((rec, verdict, why, j))
    return judged


def collect(root: Path, warn=lambda msg: None, left_out: list | None = None) -> list[Row]:
    """A row per (run, predicate) under `root`.

    A run whose manifest cannot be read, or whose probes.jsonl holds a complete
    line that is not a probe record, is left out: `warn` hears why and
    `left_out` gets (run directory, reason). A last line cut off mid-write is
    only warned about.
    """
    rows = []
    left_out = [] if left_out is None else left_out
    for d in run_dirs(root):
        try:
            man = read_manifest(d)
        except UsageError as exc:  # an unreadable run is left out of the page, with a note on stderr
            warn(f"skipping {d}: {exc}")
            left_out.append((d, str(exc)))
            continue
        evidence = RunStore(d).read()
        if evidence.corrupt:
            more = f" (and {len(evidence.corrupt) - 1} more)" if len(evidence.corrupt) > 1 else ""
            reason = f"{evidence.corrupt[0]}{more}"
            warn(f"skipping {d}: {reason}")
            left_out.append((d, reason))
            continue
        if evidence.torn:
            warn(f"{evidence.torn}: left out")
        records = evidence.records
        key = man["key"]
        prov = {k: key.get(k) for k in PROVENANCE_KEYS}
        options = key.get("session_options") or {}
        docs = _cell_docs(d)
        predicates = sorted({doc.get("predicate") or DEFAULT_PREDICATE for doc in docs}) or [DEFAULT_PREDICATE]
        headroom = _headroom(d)
        for predicate in predicates:
            mine = [doc for doc in docs if (doc.get("predicate") or DEFAULT_PREDICATE) == predicate]
            summary = max(mine, key=lambda doc: doc.get("generated") or "", default=None)
            judged = _judge(records, predicate, summary)
            newest = {id(r) for r in latest_by_version(records).values()}
            cells, first_seen = {}, {}
            counts = defaultdict(int)
            for rec, verdict, why, s in judged:
                counts[rec["version"]] += 1
                k = (rec["version"], verdict)
                t = rec.get("finished") or ""
                if k not in first_seen or (t and t < first_seen[k]):
                    first_seen[k] = t
                if id(rec) in newest:
                    cells[rec["version"]] = {"verdict": verdict, "why": why, "nan_rows": s["nan_rows"],
                                             "inf_rows": s["inf_rows"], "rows": s["rows"],
                                             "finished": rec.get("finished"), "status": rec.get("status")}
            for v, c in cells.items():
                c["records"] = counts[v]
            row = Row(d.name, d, (man.get("model") or {}).get("name") or d.name, key.get("model") or "",
                      _target_label(prov, options), prov, options, predicate, cells,
                      history=sorted(({"version": v, "verdict": vd, "first_seen": t} for (v, vd), t in first_seen.items()),
                                     key=lambda h: (h["first_seen"], _vkey(h["version"]))),
                      summary=summary, headroom=headroom)
            _boundaries(row)
            rows.append(row)
    return rows


def _boundaries(row: Row) -> None:
    versions = sorted(row.cells, key=_vkey)
    prev = None
    last_good = None
    for v in versions:
        verdict = row.cells[v]["verdict"]
        if verdict != "skip":  # no wheel for the target: says nothing about the release's numerics
            if prev is not None and verdict != prev:
                row.flips[v] = prev
            prev = verdict
        if verdict == "good":
            last_good = v
        elif verdict == "bad" and last_good is not None and row.first_bad is None:
            row.first_bad, row.last_good = v, last_good
    s = row.summary or {}
    if s.get("first_bad") and s["first_bad"] in row.cells and row.cells[s["first_bad"]]["verdict"] == "bad":
        row.first_bad, row.last_good = s["first_bad"], s.get("last_good")


# -- charts -------------------------------------------------------------------------------

def _svg(fig, salt: str) -> str:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    with plt.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    start = text.find("<svg")
    text = text[start:] if start >= 0 else ""
    return re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)  # RDF boilerplate with a date


def _figure(width: float, height: float):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height), dpi=96)


def headroom_chart(model: str, rows: list[Row], salt: str) -> str | None:
    series = [(r, r.headroom) for r in rows if r.headroom]
    if not series:
        return None
    versions = sorted({v for _, h in series for v in h}, key=_vkey)
    fig, ax = _figure(max(4.0, 0.45 * len(versions) + 2), 2.8)
    finite = [x for _, h in series for x in h.values() if math.isfinite(x)]
    top = max([1.2, *[x * 1.1 for x in finite]])
    for r, h in series:
        xs = [i for i, v in enumerate(versions) if v in h]
        ys = [min(h[versions[i]], top) for i in xs]
        ax.plot(xs, ys, marker="o", label=r.target)
        for i in xs:
            if not math.isfinite(h[versions[i]]):
                ax.annotate("Inf", (i, top), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=7)
    ax.axhline(1.0, color="#c62828", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(versions)), versions, rotation=60, fontsize=7)
    ax.set_ylabel("max |x| / 65504")
    ax.set_title(f"fp16 headroom per release · {model}", fontsize=9)
    ax.legend(fontsize=6, loc="upper left")
    return _svg(fig, salt)


def history_chart(model: str, rows: list[Row], salt: str) -> str | None:
    """When each (row, release, verdict) was first seen: x = time, y = release."""
    pts = [(r, h) for r in rows for h in r.history if h["first_seen"]]
    if not pts:
        return None
    versions = sorted({h["version"] for _, h in pts}, key=_vkey)
    vi = {v: i for i, v in enumerate(versions)}
    fig, ax = _figure(7.5, max(1.6, 0.16 * len(versions) + 1.2))
    markers = "osD^v<>ph*"
    targets = sorted({r.target for r, _ in pts})
    for verdict in sorted({h["verdict"] for _, h in pts}):
        for ti, target in enumerate(targets):
            sel = [(r, h) for r, h in pts if h["verdict"] == verdict and r.target == target]
            if not sel:
                continue
            xs = [datetime.strptime(h["first_seen"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc) for _, h in sel]
            ys = [vi[h["version"]] for _, h in sel]
            ax.scatter(xs, ys, s=18, c=VERDICT_COLOURS.get(verdict, "#757575"), marker=markers[ti % len(markers)],
                       label=f"{verdict} · {target}")
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))
    ax.set_yticks(range(len(versions)), versions, fontsize=6)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_title(f"when each verdict first appeared · {model}", fontsize=9)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _svg(fig, salt)


# -- page ---------------------------------------------------------------------------------

CSS = """
body{font:14px/1.4 system-ui,-apple-system,"DejaVu Sans",sans-serif;margin:1.5em;color:#222}
h1{font-size:1.4em} h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table.grid{border-collapse:collapse;margin:.5em 0;font-size:12px}
.grid th,.grid td{border:1px solid #ccc;padding:3px 5px;text-align:center;white-space:nowrap}
.grid th.target{text-align:left;font-weight:normal}
.grid td.v{color:#fff;min-width:3.2em}
.grid td.none{background:#f3f3f3;color:#999}
.v.good{background:#2e7d32}.v.bad{background:#c62828}.v.skip{background:#f9a825;color:#222}
.v.error{background:#8e24aa}.v.crash{background:#6a1b9a}.v.timeout{background:#ad1457}
td.first-bad{outline:3px solid #111;outline-offset:-3px;font-weight:bold}
td.flip::after{content:" \\25B2";font-size:9px}
.nan{display:block;font-size:10px;opacity:.9}
.legend span{display:inline-block;padding:1px 6px;margin-right:4px;color:#fff;font-size:11px}
.note{color:#666;font-size:12px} .explanation{background:#fffbe6;border-left:3px solid #f9a825;padding:.4em .8em;white-space:pre-wrap}
.chart svg{max-width:100%;height:auto}
code,.mono{font-family:"DejaVu Sans Mono",monospace;font-size:12px}
details{margin:.4em 0}
"""


def _cell_html(version: str, c: dict | None, row: Row) -> str:
    if c is None:
        return f'<td class="v none" data-version="{e(version)}" data-verdict="">·</td>'
    classes = ["v", c["verdict"]]
    if version == row.first_bad:
        classes.append("first-bad")
    if version in row.flips:
        classes.append("flip")
    title = f"{version}: {c['verdict']} — {c.get('why') or ''}; newest probe {c.get('finished') or '?'}; {c['records']} record(s)"
    if version in row.flips:
        title += f"; changed from {row.flips[version]} at the previous release"
    label = "first bad" if version == row.first_bad else c["verdict"]
    nan = ""
    if c.get("status") == "ran" and (c.get("nan_rows") or c.get("inf_rows")):
        nan = f'<span class="nan">{e(c.get("nan_rows") or 0)} NaN / {e(c.get("rows") or 0)}</span>'
    return (f'<td class="{e(" ".join(classes))}" data-version="{e(version)}" data-verdict="{e(c["verdict"])}" '
            f'title="{e(title)}">{e(label)}{nan}</td>')


def _href(site_rel: str) -> str:
    return e(quote(site_rel))


def _model_section(model: str, rows: list[Row], n: int) -> str:
    versions = sorted({v for r in rows for v in r.cells}, key=_vkey)
    out = [f'<section class="model" data-model="{e(model)}">', f"<h2>{e(model)}</h2>"]
    digests = sorted({r.model_digest[:12] for r in rows if r.model_digest})
    out.append(f'<p class="note">model digest {e(", ".join(digests))} · {len(rows)} row(s) · '
               f"{len(versions)} release(s). outlined = first bad release of the row; ▲ = verdict differs "
               "from the previous release of the row (a release without a wheel, skip, is stepped over).</p>")
    out.append('<table class="grid"><thead><tr><th>target</th><th>bad if</th>')
    out += [f"<th>{e(v)}</th>" for v in versions]
    out.append("<th>first bad</th><th>raw</th></tr></thead><tbody>")
    for r in rows:
        out.append(f'<tr class="row" data-run="{e(r.run_id)}" data-target="{e(r.target)}" '
                   f'data-first-bad="{e(r.first_bad or "")}">')
        out.append(f'<th class="target">{e(r.target)}</th><td>{e(r.predicate)}</td>')
        out += [_cell_html(v, r.cells.get(v), r) for v in versions]
        fb = f"{e(r.first_bad)} <span class=\"note\">(last good {e(r.last_good)})</span>" if r.first_bad else "—"
        out.append(f'<td class="first-bad-col">{fb}</td>')
        base = f"data/{r.run_id}/"
        links = [f'<a href="{_href(base + PROBES)}">probes.jsonl</a>',
                 f'<a href="{_href(base + MANIFEST)}">manifest.json</a>']
        if r.summary and r.summary.get("cell", {}).get("key"):
            links.append(f'<a href="{_href(base + "cells/" + r.summary["cell"]["key"] + ".json")}">summary</a>')
        out.append(f'<td>{" · ".join(links)}</td></tr>')
    out.append("</tbody></table>")
    # explanations of the boundaries
    for r in rows:
        expl = (r.summary or {}).get("explanation")
        if expl:
            text = expl if isinstance(expl, str) else json.dumps(expl, indent=1, default=str)
            out.append(f'<div class="explanation" data-run="{e(r.run_id)}"><b>{e(r.target)}: '
                       f"{e(r.last_good)} → {e(r.first_bad)}</b>\n{e(text)}</div>")
        if r.summary and r.summary.get("message"):
            out.append(f'<p class="note">{e(r.target)}: {e(r.summary["message"])}</p>')
    chart = headroom_chart(model, rows, f"h{n}")
    out.append("<h3>fp16 headroom per release</h3>")
    out.append(f'<div class="chart headroom">{chart}</div>' if chart else
               '<p class="note">No traces for this model yet (they go in results/&lt;run&gt;/traces/&lt;version&gt;.json, '
               "the JSON of <code>bisect trace</code>).</p>")
    chart = history_chart(model, rows, f"s{n}")
    out.append("<h3>History</h3>")
    if chart:
        out.append(f'<div class="chart history">{chart}</div>')
    out.append("<details><summary>When each verdict first appeared</summary><table class=\"grid\"><tr>"
               "<th>first seen</th><th>target</th><th>release</th><th>verdict</th></tr>")
    for r in rows:
        for h in r.history:
            out.append(f"<tr><td>{e(h['first_seen'] or '?')}</td><td>{e(r.target)}</td><td>{e(h['version'])}</td>"
                       f'<td class="v {e(h["verdict"])}">{e(h["verdict"])}</td></tr>')
    out.append("</table></details>")
    # reasons of the probes that were not judged good or bad
    odd = [(r, v, c) for r in rows for v, c in sorted(r.cells.items(), key=lambda kv: _vkey(kv[0]))
           if c["verdict"] not in JUDGED]
    if odd:
        out.append("<details open><summary>Probes not judged good or bad</summary><ul>")
        out += [f'<li><span class="mono">{e(v)}</span> {e(r.target)}: <b>{e(c["verdict"])}</b> — {e(c.get("why"))}</li>'
                for r, v, c in odd]
        out.append("</ul></details>")
    out.append("</section>")
    return "\n".join(out)


def _left_out_html(left_out: list) -> str:
    if not left_out:
        return ""
    items = "".join(f'<li><span class="mono">{e(d.name)}</span>: {e(why)}</li>' for d, why in left_out)
    return (f'<div class="left-out" data-count="{len(left_out)}"><p class="note"><b>{len(left_out)} run(s) left out</b>: '
            f"a file of theirs cannot be read (<code>bisect merge --quarantine</code> sets unreadable probe lines "
            f"aside).</p><ul>{items}</ul></div>")


def render(rows: list[Row], title: str = "ortbisect dashboard", left_out: list = ()) -> str:
    by_model: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_model[r.model].append(r)
    legend = "".join(f'<span style="background:{c}">{e(v)}</span>' for v, c in VERDICT_COLOURS.items())
    generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width,initial-scale=1">',
             ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
              "img-src data:; \">"),
             '<link rel="icon" href="data:,">', f"<title>{e(title)}</title>", f"<style>{CSS}</style></head><body>",
             f"<h1>{e(title)}</h1>",
             (f'<p class="note">Generated {e(generated)} from {sum(len(r.cells) for r in rows)} release verdicts in '
              f"{len({r.run_id for r in rows})} run(s). Each cell shows the verdict of the release's newest probe.</p>"),
             f'<p class="legend">{legend}</p>', _left_out_html(list(left_out))]
    if not rows:
        parts.append("<p>No results yet.</p>")
    for n, model in enumerate(sorted(by_model)):
        parts.append(_model_section(model, sorted(by_model[model], key=lambda r: (r.target, r.predicate)), n))
    parts.append("</body></html>")
    return "\n".join(parts)


def copy_raw(rows: list[Row], out: Path) -> None:
    for d in sorted({r.run_dir for r in rows}):
        dst = out / "data" / d.name
        dst.mkdir(parents=True, exist_ok=True)
        for name in (MANIFEST, PROBES):
            if (d / name).is_file():
                shutil.copy2(d / name, dst / name)
        for sub in SIDE_DIRS:
            if (d / sub).is_dir():
                shutil.copytree(d / sub, dst / sub, dirs_exist_ok=True)


def build(root: Path, out: Path, title: str = "ortbisect dashboard", warn=lambda msg: None,
          left_out: list | None = None) -> Path:
    """The page (and dashboard.json, data/); runs that cannot be read go in `left_out` (see collect)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("bisect dashboard draws its charts with matplotlib, which is not installed "
                         "(uv run --with matplotlib bisect dashboard ...)") from None
    left_out = [] if left_out is None else left_out
    rows = collect(root, warn, left_out)
    out.mkdir(parents=True, exist_ok=True)
    copy_raw(rows, out)
    page = out / "index.html"
    page.write_text(render(rows, title, left_out), encoding="utf-8")
    grid = {r.run_id + "/" + r.predicate: {"model": r.model, "target": r.target, "first_bad": r.first_bad,
                                            "last_good": r.last_good,
                                            "verdicts": {v: c["verdict"] for v, c in r.cells.items()},
                                            "flips": r.flips} for r in rows}
    (out / "dashboard.json").write_text(json.dumps(grid, indent=1, sort_keys=True))
    return page
