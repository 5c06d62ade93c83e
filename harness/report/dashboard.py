"""The nightly dashboard: one self-contained static HTML page from a results root.

The module holds one concept, the page: its parts, its style and script, and the site it is written in.

    site/index.html        the page: inline CSS, inline SVG, one inline script (the filters; allowed
                           by its hash in the page's Content-Security-Policy), no network
    site/dashboard.json    every row's verdicts, boundary, margins (the grid as data)
    site/changes.json      what the newest run changed (overview.changes)
    site/data/<run-id>/... copies of each run's manifest.json, probes.jsonl, cells/, traces/, report.md,
                           repro.py (the page links to them relatively, so the site can be moved or published)
    site/.ortbisect-site   marks a site: no reader takes it for runs, so it may lie in the results root and
                           be rebuilt there; no write leaves the site, no read goes through a link (results.runs)

What is on the page (the data comes from harness.report.overview):

* "Changed since the previous run": releases probed for the first time, verdicts
  that flipped, new boundaries; at the top.
* The overview grid: a row per model x target, a column per release; each cell
  the verdict of the release's newest probe as a symbol and a colour, with its
  NaN rows; the boundary (first bad release of the row) outlined and marked, with
  a link to the run's upstream report; per row a sparkline of the fp16 headroom
  (max |x| / 65504 of the outputs) per release, and of the worst cosine against
  the run's reference where there is one. Filters by model and target (inline
  script; everything is shown without it).
* The history: probes recorded per run, by verdict, on the run's date.
* "Package and provider divergence": per `bisect compare --from --to`, a row per
  pair and a cell per release, the pair's max |diff| from the reference in the
  verdict colours (agrees: good, diverges: bad, not compared: skip).
* Per model: explanations of the boundaries, the fp16 headroom of traces
  (matplotlib, where `bisect trace` saved any), when each verdict first appeared,
  and the probes that were not judged good or bad.

Every string that comes from results is escaped with html.escape. The page
reads at 1400 px and at 390 px wide: the grid scrolls inside its own box.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import math
import re
import time
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote

from harness.errors import HarnessError, UsageError
from harness.metrics import cosine_text
from harness.report import escape
from harness.report.overview import (
    MARGIN_THRESHOLD,
    Changes,
    Divergence,
    Row,
    changes,
    close_to_ceiling,
    collect,
    cost_steps,
    divergences,
    left_out_label,
    left_out_words,
    nights,
    reference_words,
    runs_of,
    vkey,
)
from harness.results.runs import (
    check_site,
    copy_into,
    files_in,
    mark_site,
    why,
    write_inside,
)
from harness.results.store import (
    CELLS,
    COMPARE,
    MANIFEST,
    PROBES,
    SIDE_DIRS,
    SIDE_FILES,
)

VERDICT_COLOURS = {"good": "#2e7d32", "bad": "#c62828", "skip": "#f9a825", "error": "#8e24aa",
                   "crash": "#6a1b9a", "timeout": "#ad1457", "nondeterministic": "#00838f", "inconclusive": "#757575"}
SYMBOLS = {"good": "✓", "bad": "✗", "skip": "–", "error": "!", "crash": "‼", "timeout": "◔", "nondeterministic": "≠",
           "inconclusive": "?"}
WORDS = {"good": "good", "bad": "bad", "skip": "skip (no wheel for the target)", "error": "error", "crash": "crash",
         "timeout": "timeout", "nondeterministic": "nondeterministic",
         "inconclusive": "inconclusive (a slowdown's interval holds its bound)"}
JUDGED = ("good", "bad")


def e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _href(site_rel: str) -> str:
    return e(quote(site_rel))


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


def headroom_chart(model: str, rows: list[Row], salt: str) -> str | None:
    """The largest fp16 headroom of any traced tensor per release (traces of `bisect trace`)."""
    series = [(r, r.headroom) for r in rows if r.headroom]
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    versions = sorted({v for _, h in series for v in h}, key=vkey)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * len(versions) + 2), 2.8), dpi=96)
    finite = [x for _, h in series for x in h.values() if math.isfinite(x)]
    top = max([1.2, *[x * 1.1 for x in finite]])
    for r, h in series:
        xs = [i for i, v in enumerate(versions) if v in h]
        ax.plot(xs, [min(h[versions[i]], top) for i in xs], marker="o", label=r.target)
        for i in xs:
            if not math.isfinite(h[versions[i]]):
                ax.annotate("Inf", (i, top), textcoords="offset points", xytext=(0, 4), ha="center", fontsize=7)
    ax.axhline(1.0, color="#c62828", linestyle="--", linewidth=1)
    ax.set_xticks(range(len(versions)), versions, rotation=60, fontsize=7)
    ax.set_ylabel("max |x| / 65504")
    ax.set_title(f"fp16 headroom of traced tensors per release · {model}", fontsize=9)
    ax.legend(fontsize=6, loc="upper left")
    return _svg(fig, salt)


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "none"
    return "non-finite" if not math.isfinite(x) else f"{x:.{digits}g}"


def sparkline(versions: list[str], values: dict[str, float | None], label: str, top: float,
              ceiling: float | None = None, width: int = 120, height: int = 26,
              notes: dict[str, str] | None = None, threshold: float | None = None) -> str:
    """An inline SVG line of one number per release (the grid's columns, in order); a non-finite value
    is a cross at the top, a missing one a gap. Its <title> lists every value as text; with `notes`, each point
    has its own title (hovered: the release, its value and its note); `threshold` is a dotted line."""
    n = max(len(versions) - 1, 1)
    x = {v: 2 + (width - 4) * i / n for i, v in enumerate(versions)}

    def y(val: float) -> float:
        return height - 2 - (height - 4) * min(max(val, 0.0), top) / top

    parts, seg, crosses = [], [], []
    for v in versions:
        val = values.get(v)
        if val is None:
            if len(seg) > 1:
                parts.append(seg)
            seg = []
            continue
        if not math.isfinite(val):
            crosses.append(x[v])
            if len(seg) > 1:
                parts.append(seg)
            seg = []
            continue
        seg.append((x[v], y(val)))
    if len(seg) > 1:
        parts.append(seg)
    dots = [(x[v], y(values[v])) for v in versions if values.get(v) is not None and math.isfinite(values[v])]
    title = f"{label} per release: " + ", ".join(f"{v} {_fmt(values.get(v))}" for v in versions if v in values)
    out = [f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">',
           f"<title>{e(title)}</title>"]
    if ceiling is not None:
        out.append(f'<line x1="0" x2="{width}" y1="{y(ceiling):.1f}" y2="{y(ceiling):.1f}" class="ceiling"/>')
    if threshold is not None:
        out.append(f'<line x1="0" x2="{width}" y1="{y(threshold):.1f}" y2="{y(threshold):.1f}" class="threshold"/>')
    for p in parts:
        out.append('<polyline points="' + " ".join(f"{a:.1f},{b:.1f}" for a, b in p) + '"/>')
    if len(dots) == 1:
        out.append(f'<circle cx="{dots[0][0]:.1f}" cy="{dots[0][1]:.1f}" r="1.5"/>')
    for cx in crosses:
        out.append(f'<path class="nonfinite" d="M{cx - 2:.1f},1 l4,4 m0,-4 l-4,4"/>')
    for v in (versions if notes else ()):  # a hover target per release: what the point is
        val = values.get(v)
        if val is None:
            continue
        cy = y(val) if math.isfinite(val) else 3.0
        out.append(f'<circle class="hover" cx="{x[v]:.1f}" cy="{cy:.1f}" r="4"><title>{e(v)}: {e(_fmt(val, 3))}'
                   f'{e(" · " + notes[v]) if notes.get(v) else ""}</title></circle>')
    out.append("</svg>")
    return "".join(out)


def history_svg(runs: list[dict]) -> str | None:
    """Probes recorded per run (night) by verdict, stacked, with the run's date on the x axis."""
    if not runs:
        return None
    order = [v for v in VERDICT_COLOURS] + sorted({k for r in runs for k in r["verdicts"]} - set(VERDICT_COLOURS))
    top = max(sum(r["verdicts"].values()) for r in runs) or 1
    bar, gap, left, h, bottom = 24, 16, 40, 140, 80
    width = max(240, left + len(runs) * (bar + gap) + 70)  # room for the last slanted date
    out = [f'<svg class="history" viewBox="0 0 {width} {h + bottom}" width="{width}" height="{h + bottom}" '
           f'role="img"><title>probes recorded per run, by verdict</title>']
    for frac in (0, 0.5, 1):
        yy = h - (h - 10) * frac
        out.append(f'<line x1="{left - 4}" x2="{width}" y1="{yy:.1f}" y2="{yy:.1f}" class="grid"/>'
                   f'<text x="{left - 6}" y="{yy + 3:.1f}" text-anchor="end">{round(top * frac)}</text>')
    for i, r in enumerate(runs):
        x0 = left + i * (bar + gap)
        base = h
        for verdict in order:
            n = r["verdicts"].get(verdict, 0)
            if not n:
                continue
            hh = (h - 10) * n / top
            base -= hh
            out.append(f'<rect x="{x0}" y="{base:.1f}" width="{bar}" height="{hh:.1f}" '
                       f'fill="{VERDICT_COLOURS.get(verdict, "#757575")}"><title>{e(r["date"])}: {n} {e(verdict)}'
                       f"</title></rect>")
        out.append(f'<text x="{x0 + bar / 2:.0f}" y="{h + 12}" transform="rotate(45 {x0 + bar / 2:.0f} {h + 12})">'
                   f'{e(r["date"])}</text>')
    out.append("</svg>")
    return "".join(out)


# -- page ---------------------------------------------------------------------------------

CSS = """
*{box-sizing:border-box}
body{font:14px/1.4 system-ui,-apple-system,"DejaVu Sans",sans-serif;margin:1em;color:#222;max-width:100%}
h1{font-size:1.4em} h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ddd}
.scroll{overflow-x:auto;max-width:100%;border:1px solid #eee}
table.grid{border-collapse:collapse;font-size:12px}
.grid th,.grid td{border:1px solid #ccc;padding:2px 4px;text-align:center;white-space:nowrap}
.grid thead th.ver{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:normal;padding:4px 1px}
.grid th.target{text-align:left;font-weight:normal;position:sticky;left:0;background:#fff;z-index:1;
 white-space:normal;overflow-wrap:anywhere;min-width:11em;max-width:22em}
.grid th.target b{display:block}
.grid td.v{color:#fff;min-width:2.2em}
.grid td.none{background:#f3f3f3;color:#999}
.v.good{background:#2e7d32}.v.bad{background:#c62828}.v.skip{background:#f9a825;color:#222}
.v.error{background:#8e24aa}.v.crash{background:#6a1b9a}.v.timeout{background:#ad1457}.v.nondeterministic{background:#00838f}.v.inconclusive{background:#757575}
td.first-bad,td.first-good{outline:3px solid #111;outline-offset:-3px;font-weight:bold}
td.first-bad::before,td.first-good::before{content:"▶";font-size:9px}
td.v a{color:inherit}
td.flip::after{content:"▲";font-size:8px}
.nan{display:block;font-size:10px}
.spark{vertical-align:middle}.spark polyline{fill:none;stroke:#1565c0;stroke-width:1.4}
.spark circle{fill:#1565c0}.spark .ceiling{stroke:#c62828;stroke-dasharray:3 2;stroke-width:1}
.spark .nonfinite{stroke:#c62828;stroke-width:1.6}
.margin{font-size:11px;text-align:left;white-space:nowrap}
.first-bad-col{min-width:9em;max-width:16em;overflow-wrap:anywhere}
.first-bad-col code{white-space:normal;word-break:break-all}
.grid th.target{position:sticky;left:0;background:#fff;z-index:1}
.close{background:#b35900;color:#fff;padding:0 4px;border-radius:3px}
.spark .threshold{stroke:#b35900;stroke-dasharray:1 2;stroke-width:1}
.spark circle.hover{fill:transparent;stroke:none}
.legend span{display:inline-block;padding:1px 6px;margin:0 4px 4px 0;color:#fff;font-size:11px}
.legend span.skip{color:#222}
.note{color:#555;font-size:12px}
.explanation{background:#fffbe6;border-left:3px solid #f9a825;padding:.4em .8em;white-space:pre-wrap;
 overflow-wrap:anywhere}
.changes{background:#f5f8ff;border:1px solid #c5d3f0;padding:.5em 1em}
.changes ul{margin:.2em 0 .4em 1.2em;padding:0}
.chart{overflow-x:auto}.chart svg{max-width:100%;height:auto}
svg.history text{font-size:10px;fill:#333}svg.history .grid{stroke:#ddd}
.filters label{margin-right:1em;display:inline-block}
.filters select{max-width:18em}
code,.mono{font-family:"DejaVu Sans Mono",monospace;font-size:12px;overflow-wrap:anywhere}
details{margin:.4em 0} li{overflow-wrap:anywhere}
@media (max-width:600px){body{margin:.5em}.grid th.target{min-width:8em;max-width:11em}}
"""

FILTER_JS = """(function(){
var m=document.getElementById('f-model'),t=document.getElementById('f-target'),n=document.getElementById('f-count');
var rows=[].slice.call(document.querySelectorAll('#overview tr.row'));
var secs=[].slice.call(document.querySelectorAll('section.model'));
function apply(){var shown=0;rows.forEach(function(r){var ok=(!m.value||r.dataset.model===m.value)&&
(!t.value||r.dataset.target===t.value);r.hidden=!ok;if(ok)shown++;});
secs.forEach(function(s){s.hidden=!!m.value&&s.dataset.model!==m.value;});
n.textContent=shown+' of '+rows.length+' rows shown';}
m.addEventListener('change',apply);t.addEventListener('change',apply);apply();})();"""


def _row_label(r: Row) -> str:
    return f"{r.model} · {r.target}{_question_words(r)}"


def _question_words(r: Row) -> str:
    """" · bad if cosine<0.999 vs fp32": the row's question, where it is not the default one."""
    words = "" if r.predicate == "nan-or-inf" else f" · bad if {r.predicate}"
    ref = reference_words(r.reference)
    return words + (f" vs {ref}" if ref else "") + (f" · {r.span}" if r.span else "")


def _skipped_html(r: Row) -> str:
    """The boundary column of a row whose newest run document was skipped (a CUDA cell on a host without a GPU)."""
    return f'<span class="skipped" title="{e(r.skipped)}"><b>skipped</b>: {e(r.skipped)}</span>'


def _cell_html(version: str, c: dict | None, row: Row, report_href: str | None) -> str:
    if c is None:
        return f'<td class="v none" data-version="{e(version)}" data-verdict="" title="not probed">·</td>'
    verdict = c["verdict"]
    classes = ["v", verdict]
    boundary = version == (row.first_good if row.mode == "fix" else row.first_bad)
    if boundary:
        classes.append("first-good" if row.mode == "fix" else "first-bad")
    if version in row.flips:
        classes.append("flip")
    title = (f"{row.model} · {row.target} · {version}: {WORDS.get(verdict, verdict)} — {c.get('why') or ''}; "
             f"newest probe {c.get('finished') or '?'}; {c['records']} record(s)")
    if version in row.flips:
        title += f"; changed from {row.flips[version]} at the previous release"
    if boundary:
        title += (f"; first good release: fixed (last bad {row.last_bad})" if row.mode == "fix"
                  else f"; first bad release (last good {row.last_good})")
    body = e(SYMBOLS.get(verdict, "?"))
    if boundary and report_href:
        body = f'<a href="{report_href}" title="the upstream report">{body}</a>'
    nan = ""
    if c.get("status") == "ran" and (c.get("nan_rows") or c.get("inf_rows")):
        nan = f'<span class="nan">{e(c.get("nan_rows") or 0)}/{e(c.get("rows") or 0)}</span>'
    return (f'<td class="{e(" ".join(classes))}" data-version="{e(version)}" data-verdict="{e(verdict)}" '
            f'title="{e(title)}" aria-label="{e(title)}">{body}{nan}</td>')


def _margins_html(r: Row, versions: list[str], threshold: float = MARGIN_THRESHOLD) -> str:
    inner = {v: r.margins[v]["margin"] for v in versions if (r.margins.get(v) or {}).get("margin") is not None}
    head = {v: r.margins.get(v, {}).get("headroom") for v in versions if r.margins.get(v, {}).get("headroom") is not None}
    cos = {v: r.margins.get(v, {}).get("cosine_min") for v in versions
           if r.margins.get(v, {}).get("cosine_min") is not None}
    out = []
    if inner:
        notes = {}
        for v in inner:
            m = r.margins[v]
            hot = f"hottest fp16 tensor {m.get('margin_tensor')}" if m.get("margin_tensor") else "no tensor held in fp16"
            if m.get("margin_fp32") is not None:
                hot += f"; kept in fp32: {m.get('margin_fp32_tensor')} at {_fmt(m['margin_fp32'], 3)}"
            notes[v] = hot
        finite = [x for x in inner.values() if math.isfinite(x)]
        top = max([1.2, *[x * 1.05 for x in finite]])
        last_v = max(inner, key=vkey)
        close = close_to_ceiling(r, threshold)
        out.append(f'{sparkline(versions, inner, "internal fp16 margin (hottest fp16 tensor / 65504)", top, 1.0, notes=notes, threshold=threshold)} '
                   f'<span title="internal fp16 margin of the newest release, {e(last_v)}: {e(notes[last_v])}">'
                   f'm {e(_fmt(inner[last_v], 2))}</span>')
        if close:
            out.append(f' <span class="close" title="good releases whose margin reached {threshold:g} of the fp16 '
                       f'ceiling: {e(", ".join(close))}">close to the ceiling</span>')
        out.append("<br>")
    if head:
        finite = [x for x in head.values() if math.isfinite(x)]
        top = max([1.2, *[x * 1.05 for x in finite]])
        last = head[max(head, key=vkey)]
        out.append(f'{sparkline(versions, head, "fp16 headroom (max |x| / 65504)", top, ceiling=1.0)} '
                   f'<span title="fp16 headroom of the newest release">h {e(_fmt(last, 2))}</span>')
    if cos:
        dist = {v: (1.0 - x if math.isfinite(x) else math.inf) for v, x in cos.items()}
        finite = [x for x in dist.values() if math.isfinite(x)]
        last = cos[max(cos, key=vkey)]
        out.append(f'<br>{sparkline(versions, dist, "1 - worst cosine to the reference", max([1e-6, *finite]))} '
                   f'<span title="worst cosine of the newest release">cos {e(cosine_text(last) if math.isfinite(last) else _fmt(last))}</span>')
    out += _costs_html(r, versions)
    return "".join(out) or '<span class="note">no numbers</span>'


def _costs_html(r: Row, versions: list[str]) -> list[str]:
    """Latency (timed probes: median ms, with the ratio to their baseline) and the worker's peak memory per
    release, beside the margin, with their steps named (release before -> release, ratio)."""
    out = []
    # latency as the ratio to the probe's baseline, measured interleaved: absolute times of probes made at
    # different moments of a shared machine move more than the releases do
    for key, label, unit, short in (("latency_ratio", "latency over the baseline's (median of interleaved rounds)",
                                     "x", "lat"),
                                    ("rss_mb", "peak resident memory of the probe's worker", "MB", "mem")):
        values = {v: r.margins[v][key] for v in versions if (r.margins.get(v) or {}).get(key) is not None}
        if not values:
            continue
        notes = {v: f"{_fmt(x, 4)} {unit}" + (f" ({_fmt(r.margins[v]['latency_ms'], 4)} ms)"
                                              if key == "latency_ratio" and r.margins[v].get("latency_ms") else "")
                 for v, x in values.items()}
        steps = cost_steps(r, key)
        said = "; ".join(f"{a} -> {b} x{x:.2f}" for a, b, x in steps)
        last_v = max(values, key=vkey)
        out.append(f'<br>{sparkline(versions, values, label, max(values.values()) * 1.1, notes=notes)} '
                   f'<span title="{e(label)} of the newest release, {e(last_v)}: {e(notes[last_v])}'
                   f'{e("; steps: " + said) if said else ""}">{short} {e(_fmt(values[last_v], 3))} {unit}</span>')
        if steps:
            out.append(f' <span class="note" title="{e(said)}">{len(steps)} step{"s" if len(steps) > 1 else ""}</span>')
    return out


def _boundary_html(r: Row, report_href: str | None) -> str:
    if r.skipped:
        return _skipped_html(r)
    if r.mode == "fix" and r.first_good:
        text = f"fixed in {e(r.first_good)} <span class=\"note\">(last bad {e(r.last_bad)})</span>"
    elif r.first_bad:
        text = f"{e(r.first_bad)} <span class=\"note\">(last good {e(r.last_good)})</span>"
    else:
        return "—"
    if report_href:
        return f'{text}<br><a class="report" href="{report_href}">upstream report</a>'
    return f'{text}<br><span class="note">no report yet: <code>{e(escape.sh_line(["bisect", "report", r.run_id]))}</code></span>'


def overview_html(rows: list[Row], threshold: float = MARGIN_THRESHOLD) -> str:
    versions = sorted({v for r in rows for v in r.cells}, key=vkey)
    models = sorted({r.model for r in rows})
    targets = sorted({r.target for r in rows})
    out = ['<section id="overview"><h2>Overview</h2>',
           '<div class="filters" role="search"><label>model <select id="f-model"><option value="">all</option>',
           *[f'<option value="{e(m)}">{e(m)}</option>' for m in models],
           '</select></label><label>target <select id="f-target"><option value="">all</option>',
           *[f'<option value="{e(t)}">{e(t)}</option>' for t in targets],
           f'</select></label><span id="f-count" class="note">{len(rows)} rows</span></div>',
           f'<p class="note">{len(rows)} row(s) (model × target) × {len(versions)} release(s). Each cell: the verdict '
           "of the release's newest probe as a symbol and a colour, and NaN rows / rows where there are any. ▶ and "
           "the outline mark the boundary (first bad release after a good one), ▲ a verdict that differs from the "
           "previous release of the row. The sparkline follows the fp16 headroom (max |x| / 65504, the dashed line "
           "is the fp16 ceiling, × where an output was not finite) release by release; above it, the internal fp16 "
           "margin: the largest |x| of the model's hottest tensors the release holds in fp16, over 65504 (the dotted "
           f"line is the {threshold:g} threshold; hover a point for its tensor). A row whose good release reached "
           "the threshold is marked close to the ceiling.</p>",
           # the boundary and the margins come before the releases: on a narrow screen the releases scroll, these do not
           '<div class="scroll"><table class="grid"><thead><tr><th class="target">model · target</th>',
           "<th>boundary</th><th>margin per release</th>",
           *[f'<th class="ver" scope="col">{e(v)}</th>' for v in versions],
           "<th>raw</th></tr></thead><tbody>"]
    for r in rows:
        base = f"data/{r.run_id}/"
        report = _href(base + r.report) if r.report else None
        out.append(f'<tr class="row" data-run="{e(r.run_id)}" data-key="{e(r.key)}" data-model="{e(r.model)}" '
                   f'data-target="{e(r.target)}" data-first-bad="{e(r.first_bad or "")}">')
        label = f"<b>{e(r.model)}</b>{e(r.target)}{e(_question_words(r))}"
        out.append(f'<th class="target" scope="row">{label}</th>')
        out.append(f'<td class="first-bad-col">{_boundary_html(r, report)}</td>')
        out.append(f'<td class="margin">{_margins_html(r, versions, threshold)}</td>')
        out += [_cell_html(v, r.cells.get(v), r, report) for v in versions]
        links = [f'<a href="{_href(base + PROBES)}">probes</a>', f'<a href="{_href(base + MANIFEST)}">manifest</a>']
        if r.summary and r.summary.get("cell", {}).get("key"):
            links.append(f'<a href="{_href(base + CELLS + "/" + r.summary["cell"]["key"] + ".json")}">summary</a>')
        out.append(f'<td>{" · ".join(links)}</td></tr>')
    out.append("</tbody></table></div></section>")
    return "\n".join(out)


def changes_html(ch: Changes, rows: list[Row]) -> str:
    label = {r.key: _row_label(r) for r in rows}
    out = ['<section class="changes" id="changes"><h2>Changed since the previous run</h2>']
    if ch.run_started is None:
        out.append("<p>No probes yet.</p></section>")
        return "\n".join(out)
    if ch.previous_run is None:
        out.append(f"<p>The first run (from {e(ch.run_started)}): nothing to compare with yet.</p></section>")
        return "\n".join(out)
    out.append(f'<p class="note">Newest run from {e(ch.run_started)}; the previous run ended {e(ch.previous_run)}.</p>')
    if not ch.any:
        out.append("<p>Nothing changed: no new release, no verdict flipped, no new boundary.</p>")
    if ch.new_boundaries:
        out.append(f"<h3>New boundaries ({len(ch.new_boundaries)})</h3><ul>")
        out += [f"<li>{e(label.get(k, k))}: first bad {e(now)}" + (f" (was {e(was)})" if was else " (none before)")
                + "</li>" for k, was, now in ch.new_boundaries]
        out.append("</ul>")
    if ch.flipped:
        out.append(f"<h3>Verdicts flipped ({len(ch.flipped)})</h3><ul>")
        out += [f"<li>{e(label.get(k, k))} · {e(v)}: {e(was)} → <b>{e(now)}</b></li>" for k, v, was, now in ch.flipped]
        out.append("</ul>")
    if ch.margin_moves:
        out.append(f"<h3>fp16 margin moves ({len(ch.margin_moves)})</h3><ul>")
        out += [f"<li>{e(label.get(k, k))}: {e(a)} {e(_fmt(x, 3))} → {e(b)} <b>{e(_fmt(y, 3))}</b></li>"
                for k, a, b, x, y in ch.margin_moves]
        out.append("</ul>")
    if ch.new_releases:
        out.append(f"<h3>New releases probed ({len(ch.new_releases)})</h3><ul>")
        out += [f"<li><span class=\"mono\">{e(v)}</span> on {len(keys)} row(s)</li>" for v, keys in ch.new_releases]
        out.append("</ul>")
    out.append("</section>")
    return "\n".join(out)


def _model_section(model: str, rows: list[Row], n: int) -> str:
    out = [f'<section class="model" data-model="{e(model)}">', f"<h2>{e(model)}</h2>"]
    digests = sorted({r.model_digest[:12] for r in rows if r.model_digest})
    out.append(f'<p class="note">model digest {e(", ".join(digests))} · {len(rows)} row(s)</p>')
    for r in rows:
        expl = (r.summary or {}).get("explanation")
        if expl:
            text = expl if isinstance(expl, str) else json.dumps(expl, indent=1, default=str)
            out.append(f'<div class="explanation" data-run="{e(r.run_id)}"><b>{e(r.target)}: '
                       + (f"{e(r.last_bad)} → {e(r.first_good)}" if r.mode == "fix" else f"{e(r.last_good)} → {e(r.first_bad)}")
                       + f"</b>\n{e(text)}</div>")
        if r.summary and r.summary.get("message"):  # each question's own words, named as its row is
            out.append(f'<p class="note" data-key="{e(r.key)}">{e(r.target)}{e(_question_words(r))}: '
                       f'{e(r.summary["message"])}</p>')
    chart = headroom_chart(model, rows, f"h{n}")
    if chart:
        out.append(f'<div class="chart headroom">{chart}</div>')
    out.append("<details><summary>When each verdict first appeared</summary><div class=\"scroll\"><table "
               "class=\"grid\"><tr><th>first seen</th><th>target</th><th>release</th><th>verdict</th></tr>")
    for r in rows:
        for h in r.history:
            out.append(f"<tr><td>{e(h['first_seen'] or '?')}</td><td>{e(r.target)}</td><td>{e(h['version'])}</td>"
                       f'<td class="v {e(h["verdict"])}">{e(SYMBOLS.get(h["verdict"], "?"))} {e(h["verdict"])}</td></tr>')
    out.append("</table></div></details>")
    odd = [(r, v, c) for r in rows for v, c in sorted(r.cells.items(), key=lambda kv: vkey(kv[0]))
           if c["verdict"] not in JUDGED]
    if odd:
        out.append("<details open><summary>Probes not judged good or bad</summary><ul>")
        out += [f'<li><span class="mono">{e(v)}</span> {e(r.target)}: <b>{e(c["verdict"])}</b> — {e(c.get("why"))}</li>'
                for r, v, c in odd]
        out.append("</ul></details>")
    out.append("</section>")
    return "\n".join(out)


def divergence_html(divs: list[Divergence]) -> str:
    """"Package and provider divergence": per compare over a range, a row per pair compared with the reference and
    a cell per release: the max |diff| in the colour of its verdict, the worst cosine and why in its title."""
    if not divs:
        return ""
    words = {True: ("bad", "diverges"), False: ("good", "agrees"), None: ("skip", "not compared")}
    out = ['<section id="divergence"><h2>Package and provider divergence</h2>',
           '<p class="note">Each <code>bisect compare --from --to</code>: a row per pair, a cell per release with '
           "the pair's max |diff| from the reference pair over the values finite in both (the worst row cosine in "
           "the cell's title): green where it agrees, red where it diverges (bad rows differ, a row's cosine under "
           "the bound, or one fails where the other ran), yellow where the release was not compared.</p>"]
    for dv in divs:
        doc, base = dv.doc, f"data/{dv.run_id}/"
        ref = doc["reference"]
        out.append(f'<div class="divergence" data-run="{e(dv.run_id)}"><p><b>{e(dv.model)}</b> · {e(dv.target)} · '
                   f"{e(doc.get('from'))} to {e(doc.get('to'))} · against <b>{e(ref['label'])}</b> · "
                   f'<a href="{_href(base + COMPARE + ".json")}">compare.json</a></p>')
        out.append('<div class="scroll"><table class="grid"><thead><tr><th class="target">package:ep</th>')
        out += [f'<th class="ver" scope="col">{e(v)}</th>' for v in doc["releases"]]
        out.append("</tr></thead><tbody>")
        for side in doc["pairs"]:
            out.append(f'<tr class="pair" data-pair="{e(side["label"])}"><th class="target" scope="row">'
                       f'{e(side["label"])}</th>')
            for entry in side["releases"]:
                cls, word = words.get(entry.get("diverges"), words[None])
                diff, cos = _number_of(entry.get("max_abs_diff")), _number_of(entry.get("cosine"))
                title = (f"{side['label']} against {ref['label']} at {entry['release']}: {word} — worst cosine "
                         f"{cosine_text(cos) if cos is not None else 'none'}, max |diff| {_fmt(diff)}; "
                         f"{entry.get('why') or ''}")
                body = _fmt(diff) if entry.get("diverges") is not None and diff is not None else "–"
                out.append(f'<td class="v {cls}" data-version="{e(entry["release"])}" data-verdict="{e(word)}" '
                           f'title="{e(title)}" aria-label="{e(title)}">{e(body)}</td>')
            out.append("</tr>")
        out.append("</tbody></table></div>")
        if doc.get("message"):
            out.append(f'<p class="note">{e(doc["message"])}</p>')
        out.append("</div>")
    out.append("</section>")
    return "\n".join(out)


def _number_of(x) -> float | None:
    """A number of a compare document as the section shows it (anything else in its place: none)."""
    return None if isinstance(x, bool) or not isinstance(x, (int, float)) else float(x)


def _copy_divergences(divs: list[Divergence], site: Path) -> None:
    """Each compare run's manifest and compare.json, into data/<run-id>/ (the section links to them)."""
    for dv in divs:
        copy_into(dv.run_dir, site / "data" / dv.run_id, [MANIFEST, f"{COMPARE}.json"], site)


def _left_out_html(left_out: list) -> str:
    if not left_out:
        return ""
    items = "".join(f'<li><span class="mono">{e(left_out_label(p))}</span>: {e(why)}</li>' for p, why in left_out)
    return (f'<div class="left-out" data-count="{len(left_out)}"><p class="note"><b>{left_out_words(left_out)} left '
            f"out</b>: a file cannot be read (<code>bisect merge --quarantine</code> sets unreadable probe lines "
            f"aside; a run without its cell document is shown from its records).</p><ul>{items}</ul></div>")


def render(rows: list[Row], title: str = "ortbisect dashboard", left_out: list = (), ch: Changes | None = None,
           runs: list[tuple[str, str]] | None = None, divs: list[Divergence] = (),
           threshold: float = MARGIN_THRESHOLD) -> str:
    by_model: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_model[r.model].append(r)
    rows = sorted(rows, key=lambda r: (r.model, r.target, r.predicate))
    legend = "".join(f'<span class="{e(v)}" style="background:{c}">{e(SYMBOLS[v])} {e(WORDS[v])}</span>'
                     for v, c in VERDICT_COLOURS.items())
    generated = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    script_hash = base64.b64encode(hashlib.sha256(FILTER_JS.encode()).digest()).decode()
    runs = runs_of(t for r in rows for _, t, _ in r.judged) if runs is None else runs
    ch = changes(rows, runs) if ch is None else ch
    per_night = nights(rows, runs)
    chart = history_svg(per_night)
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width,initial-scale=1">',
             ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
              f"script-src 'sha256-{script_hash}'; img-src data:\">"),
             '<link rel="icon" href="data:,">', f"<title>{e(title)}</title>", f"<style>{CSS}</style></head><body>",
             f"<h1>{e(title)}</h1>",
             (f'<p class="note">Generated {e(generated)} from {sum(len(r.cells) for r in rows)} release verdicts in '
              f"{len({r.run_id for r in rows})} run(s), {len(per_night)} nightly run(s).</p>"),
             f'<p class="legend">{legend}</p>', _left_out_html(list(left_out)), changes_html(ch, rows)]
    if not rows:
        parts.append("<p>No results yet.</p>")
    else:
        parts.append(overview_html(rows, threshold))
        parts.append('<section id="history"><h2>History</h2><p class="note">Probes recorded per run, by verdict; '
                     "a run is a night of probes (see the dates).</p>")
        parts.append(f'<div class="chart history">{chart}</div>' if chart else "")
        parts.append("<details><summary>The same as a table</summary><ul>")
        parts += [f"<li>{e(n['date'])} ({e(n['first'])} – {e(n['last'])}): "
                  + ", ".join(f"{c} {e(v)}" for v, c in sorted(n["verdicts"].items())) + "</li>" for n in per_night]
        parts.append("</ul></details></section>")
    parts.append(divergence_html(list(divs)))
    for n, model in enumerate(sorted(by_model)):
        parts.append(_model_section(model, sorted(by_model[model], key=lambda r: (r.target, r.predicate)), n))
    parts.append(f"<script>{FILTER_JS}</script></body></html>")
    return "\n".join(parts)


def copy_raw(rows: list[Row], out: Path) -> None:
    """Each run's manifest, probes, report, repro and every file under cells/ and traces/, into data/<run-id>/."""
    site = Path(out).resolve()
    for d in sorted({r.run_dir for r in rows}):
        rels = [name for name in (MANIFEST, PROBES, *SIDE_FILES) if (d / name).is_file()]
        copy_into(d, site / "data" / d.name, rels + [f for sub in SIDE_DIRS for f in files_in(d, sub, deep=True)], site)


def _json_number(x):
    return None if x is None or not math.isfinite(x) else x


def build(root: Path, out: Path, title: str = "ortbisect dashboard", warn=lambda msg: None,
          left_out: list | None = None, threshold: float = MARGIN_THRESHOLD) -> Path:
    """The page (and dashboard.json, changes.json, data/); runs that cannot be read go in `left_out` (see collect)."""
    left_out = [] if left_out is None else left_out
    check_site(root, out)
    site = Path(out).resolve()
    try:
        mark_site(site)  # before the runs are searched
        rows = collect(root, warn, left_out)
        if any(r.headroom for r in rows):
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise UsageError("bisect dashboard draws the traces' charts with matplotlib, which is not installed "
                                 "(uv run --with matplotlib bisect dashboard ...)") from None
        copy_raw(rows, site)
        divs = divergences(root, warn, left_out)
        _copy_divergences(divs, site)
        runs = runs_of(t for r in rows for _, t, _ in r.judged)
        ch = changes(rows, runs)
        page = Path(out) / "index.html"
        write_inside(site, page, render(rows, title, left_out, ch, runs, divs, threshold).encode("utf-8"))
        grid = {r.key: {"model": r.model, "target": r.target, "provenance": r.provenance, "first_bad": r.first_bad,
                        "last_good": r.last_good, "mode": r.mode,
                        **({"last_bad": r.last_bad, "first_good": r.first_good} if r.mode == "fix" else {}),
                        "verdicts": {v: c["verdict"] for v, c in r.cells.items()},
                        "reference": reference_words(r.reference), "skipped": r.skipped,
                        "nan_rows": {v: c["nan_rows"] for v, c in r.cells.items()}, "flips": r.flips,
                        # JSON has no infinity: a margin past the ceiling is null with `past_ceiling` said
                        "margins": {v: {**{k: x if isinstance(x, str) or x is None else _json_number(x)
                                           for k, x in m.items()},
                                        **({"past_ceiling": True} if m.get("margin") == math.inf else {})}
                                    for v, m in r.margins.items()},
                        "close_to_ceiling": close_to_ceiling(r, threshold),
                        "report": f"data/{r.run_id}/{r.report}" if r.report else None} for r in rows}
        write_inside(site, site / "dashboard.json", json.dumps(grid, indent=1, sort_keys=True))
        changed = {"run_started": ch.run_started, "previous_run": ch.previous_run, "new_releases": ch.new_releases,
                   "flipped": ch.flipped, "new_boundaries": ch.new_boundaries,
                   "margin_moves": [[k, a, b, _json_number(x), _json_number(y)] for k, a, b, x, y in ch.margin_moves]}
        write_inside(site, site / "changes.json", json.dumps(changed, indent=1))
    except OSError as exc:
        raise HarnessError(f"cannot write the dashboard to {out}: {why(exc)}") from None
    return page
