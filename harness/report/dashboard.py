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
* "Runs that are no search": each repeat, options matrix and compare pair's run (overview.Probed), with
  its answer and links to its files; none is a row of the grid.
* Per model: explanations of the boundaries, the fp16 headroom of traces
  (matplotlib, where `bisect trace` saved any), when each verdict first appeared,
  and the probes that were not judged good or bad.

The page is drawn by Jinja2 from the templates in harness/report/templates (autoescape on: every string that
comes from results is text). It reads at 1400 px (25 releases fit beside the row's label, boundary and numbers, the
release headers upright) and at 390 px (each row a card: its label, boundary, then its verdicts newest first).
Rows are labelled by the question they answer (page_lines); numbers are said by harness.report.numbers.human.
A command is drawn word by word (escape.sh_words, the template's `command`): a line breaks between its words only.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import math
import re
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from harness.errors import HarnessError, UsageError
from harness.metrics import cosine_text
from harness.report.escape import sh_words
from harness.report.numbers import human
from harness.report.overview import (
    MARGIN_THRESHOLD,
    Changes,
    Divergence,
    Probed,
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
    span_of,
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
SHORT_WORDS = {**{v: v for v in VERDICT_COLOURS}, "nondeterministic": "nondet.", "inconclusive": "inconcl."}
JUDGED = ("good", "bad")

FILTER_JS = """(function(){
var m=document.getElementById('f-model'),t=document.getElementById('f-target'),n=document.getElementById('f-count');
var rows=[].slice.call(document.querySelectorAll('#overview tr.row'));
var secs=[].slice.call(document.querySelectorAll('section.model'));
function apply(){var shown=0;rows.forEach(function(r){var ok=(!m.value||r.dataset.model===m.value)&&
(!t.value||r.dataset.target===t.value);r.hidden=!ok;if(ok)shown++;});
secs.forEach(function(s){s.hidden=!!m.value&&s.dataset.model!==m.value;});
n.textContent=shown+' of '+rows.length+' rows shown';}
m.addEventListener('change',apply);t.addEventListener('change',apply);apply();})();"""

# The page is drawn by Jinja2 templates kept in the package (harness/report/templates); autoescape is on for every
# template, so a string read from results is text wherever it lands; only the matplotlib charts and the filters'
# script (both made here, not read) go in as markup.
_ENV = Environment(loader=PackageLoader("harness.report", "templates"), autoescape=True, undefined=StrictUndefined,
                   trim_blocks=True, lstrip_blocks=True)
_ENV.filters["human"] = human
_ENV.filters["path"] = quote  # a site-relative link: each segment URL-quoted (autoescape makes it an attribute)


# -- charts -------------------------------------------------------------------------------

def _svg(fig, salt: str) -> Markup:
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    with plt.rc_context({"svg.hashsalt": salt, "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    start = text.find("<svg")
    text = text[start:] if start >= 0 else ""
    # matplotlib writes the SVG and escapes the text it holds (a model's name in the title): made here, not read
    return Markup(re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S))  # RDF boilerplate with a date


def headroom_chart(model: str, rows: list[Row], salt: str) -> Markup | None:
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


def sparkline(versions: list[str], values: dict[str, float | None], label: str, top: float,
              ceiling: float | None = None, width: int = 84, height: int = 22,
              notes: dict[str, str] | None = None, threshold: float | None = None, unit: str = "") -> dict:
    """An inline SVG line of one number per release (the grid's columns, in order), as the template draws it: a
    non-finite value is a cross at the top, a missing one a gap. Its title lists every value; with `notes`, each
    point has its own title (hovered: the release, its value and its note); `threshold` is a dotted line."""
    n = max(len(versions) - 1, 1)
    x = {v: 2 + (width - 4) * i / n for i, v in enumerate(versions)}

    def y(val: float) -> float:
        return height - 2 - (height - 4) * min(max(val, 0.0), top) / top

    lines, seg, crosses = [], [], []
    for v in versions:
        val = values.get(v)
        if val is None or not math.isfinite(val):
            if val is not None:
                crosses.append(round(x[v], 1))
            if len(seg) > 1:
                lines.append(seg)
            seg = []
            continue
        seg.append((x[v], y(val)))
    if len(seg) > 1:
        lines.append(seg)
    dots = [(x[v], y(values[v])) for v in versions if values.get(v) is not None and math.isfinite(values[v])]
    hovers = []
    for v in (versions if notes else ()):  # a hover target per release: what the point is
        val = values.get(v)
        if val is not None:
            hovers.append({"x": round(x[v], 1), "y": round(y(val) if math.isfinite(val) else 3.0, 1),
                           "title": f"{v}: {human(val)}" + (f" · {notes[v]}" if notes.get(v) else "")})
    return {"width": width, "height": height,
            "title": f"{label} per release: " + ", ".join(f"{v} {human(values.get(v), unit)}" for v in versions
                                                           if v in values),
            "ceiling": None if ceiling is None else round(y(ceiling), 1),
            "threshold": None if threshold is None else round(y(threshold), 1),
            "lines": [" ".join(f"{a:.1f},{b:.1f}" for a, b in p) for p in lines],
            "dot": (round(dots[0][0], 1), round(dots[0][1], 1)) if len(dots) == 1 else None,
            "crosses": crosses, "hovers": hovers}


def history_chart(runs: list[dict]) -> dict | None:
    """Probes recorded per run (night) by verdict, stacked, with the run's date on the x axis (the geometry)."""
    if not runs:
        return None
    order = [v for v in VERDICT_COLOURS] + sorted({k for r in runs for k in r["verdicts"]} - set(VERDICT_COLOURS))
    top = max(sum(r["verdicts"].values()) for r in runs) or 1
    bar, gap, left, h, bottom = 24, 16, 40, 140, 80
    width = max(240, left + len(runs) * (bar + gap) + 70)  # room for the last slanted date
    ticks = [{"y": round(h - (h - 10) * frac, 1), "label": round(top * frac)} for frac in (0, 0.5, 1)]
    bars = []
    for i, r in enumerate(runs):
        x0, base, stack = left + i * (bar + gap), h, []
        for verdict in order:
            n = r["verdicts"].get(verdict, 0)
            if n:
                hh = (h - 10) * n / top
                base -= hh
                stack.append({"y": round(base, 1), "height": round(hh, 1), "colour": VERDICT_COLOURS.get(verdict, "#757575"),
                              "title": f"{r['date']}: {n} {verdict}"})
        bars.append({"x": x0, "mid": round(x0 + bar / 2), "stack": stack, "date": r["date"]})
    return {"width": width, "height": h + bottom, "h": h, "left": left, "bar": bar, "ticks": ticks, "bars": bars}


# -- the grid -----------------------------------------------------------------------------

def question_words(r: Row) -> str:
    """" · bad if cosine<0.999 vs fp32": the row's question, where it is not the default one."""
    words = "" if r.predicate == "nan-or-inf" else f" · bad if {r.predicate}"
    ref = reference_words(r.reference)
    return words + (f" vs {ref}" if ref else "") + (f" · {r.span}" if r.span else "")


def _asked_span(r: Row) -> str:
    """"regression 1.19.0..1.30.0": the mode and range the row's question was asked over (its run document's, else
    the releases it holds)."""
    if r.span or r.asked:
        return r.span or r.asked
    if r.summary:
        _, first, last = span_of(r.summary)
        if first and last:
            return f"{r.mode or 'regression'} {first}..{last}"
    known = sorted(r.cells, key=vkey)
    mode = r.mode or "regression"  # a run without a run document asked the default question
    return f"{mode} {known[0]}..{known[-1]}" if known else f"{mode}, nothing probed"


def _newest(r: Row) -> str:
    return max((t for _, t, _ in r.judged), default=(r.summary or {}).get("generated") or "")


def _same_answer(a: Row, b: Row) -> bool:
    return (a.model_digest == b.model_digest and {v: c["verdict"] for v, c in a.cells.items()}
            == {v: c["verdict"] for v, c in b.cells.items()} and a.skipped == b.skipped
            and (a.first_bad, a.last_good, a.first_good, a.last_bad) == (b.first_bad, b.last_good, b.first_good,
                                                                          b.last_bad))


@dataclass
class Line:
    """A row of the page: a Row, the words that name its question, and the runs that gave the same answer to the
    same question (merged into it: the newest of them is shown)."""

    row: Row
    label: str  # after the model's name: target, options, question and, where two rows would read alike, more
    same_as: list[Row] = field(default_factory=list)  # the merged repeats


# what tells apart rows that read alike, asked in order until every label differs
_TELLERS = (("range", _asked_span), ("model digest", lambda r: f"model {r.model_digest[:12]}"),
            ("run", lambda r: f"run {r.run_id}"))


def page_lines(rows: list[Row]) -> list[Line]:
    """The grid's rows, each labelled by the question it answers: the target (arch, backend, package, python,
    session options) and the question (predicate, reference); rows that would still read alike (repeat runs,
    other ranges or modes) say what differs, and repeats that gave the same answer are one row."""
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.model, r.target, r.predicate)):
        groups[(r.model, r.target + question_words(r))].append(r)
    out = []
    for (_, label), group in groups.items():
        kept: list[Line] = []
        # the newest run of a repeat is shown (of two as new, the first by name)
        for r in sorted(sorted(group, key=lambda r: r.run_id), key=_newest, reverse=True):
            twin = next((line for line in kept if _same_answer(line.row, r)), None)
            if twin is not None:
                twin.same_as.append(r)
            else:
                kept.append(Line(r, label))
        for _, tell in _TELLERS:
            if len({line.label for line in kept}) == len(kept):
                break
            said = [tell(line.row) for line in kept]
            if len(set(said)) > 1:
                for line, words in zip(kept, said):
                    line.label += f" · {words}"
        out += sorted(kept, key=lambda line: line.label)
    return out


def _cell(version: str, c: dict | None, row: Row, age: int, report_href: str | None) -> dict:
    """A verdict cell: its classes, title, symbol and NaN rows; `age` orders a card's cells newest first."""
    if c is None:
        return {"version": version, "verdict": "", "classes": "v none", "title": "not probed", "symbol": "·",
                "href": None, "nan": None, "age": age}
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
    nan = None
    if c.get("status") == "ran" and (c.get("nan_rows") or c.get("inf_rows")):
        nan = f"{c.get('nan_rows') or 0}/{c.get('rows') or 0}"
    return {"version": version, "verdict": verdict, "classes": " ".join(classes), "title": title,
            "symbol": SYMBOLS.get(verdict, "?"), "href": report_href if boundary else None, "nan": nan, "age": age}


def _measures(r: Row, versions: list[str], threshold: float) -> list[dict]:
    """The numbers beside a row's verdicts, one line each: a sparkline per release and the newest value."""
    out = []
    inner = {v: r.margins[v]["margin"] for v in versions if (r.margins.get(v) or {}).get("margin") is not None}
    if inner:
        notes = {}
        for v in inner:
            m = r.margins[v]
            hot = f"hottest fp16 tensor {m.get('margin_tensor')}" if m.get("margin_tensor") else "no tensor held in fp16"
            if m.get("margin_fp32") is not None:
                hot += f"; kept in fp32: {m.get('margin_fp32_tensor')} at {human(m['margin_fp32'])}"
            notes[v] = hot
        finite = [x for x in inner.values() if math.isfinite(x)]
        last_v = max(inner, key=vkey)
        close = close_to_ceiling(r, threshold)
        out.append({"spark": sparkline(versions, inner, "internal fp16 margin (hottest fp16 tensor / 65504)",
                                       max([1.2, *[x * 1.05 for x in finite]]), 1.0, notes=notes, threshold=threshold),
                    "short": f"m {human(inner[last_v])}",
                    "title": f"internal fp16 margin of the newest release, {last_v}: {notes[last_v]}",
                    "close": (f"good releases whose margin reached {threshold:g} of the fp16 ceiling: "
                              f"{', '.join(close)}") if close else None})
    head = {v: r.margins[v]["headroom"] for v in versions if (r.margins.get(v) or {}).get("headroom") is not None}
    if head:
        finite = [x for x in head.values() if math.isfinite(x)]
        out.append({"spark": sparkline(versions, head, "fp16 headroom (max |x| / 65504)",
                                       max([1.2, *[x * 1.05 for x in finite]]), ceiling=1.0),
                    "short": f"h {human(head[max(head, key=vkey)])}", "title": "fp16 headroom of the newest release"})
    cos = {v: r.margins[v]["cosine_min"] for v in versions if (r.margins.get(v) or {}).get("cosine_min") is not None}
    if cos:
        dist = {v: (1.0 - x if math.isfinite(x) else math.inf) for v, x in cos.items()}
        last = cos[max(cos, key=vkey)]
        out.append({"spark": sparkline(versions, dist, "1 - worst cosine to the reference",
                                       max([1e-6, *[x for x in dist.values() if math.isfinite(x)]])),
                    "short": f"cos {cosine_text(last) if math.isfinite(last) else human(last)}",
                    "title": "worst cosine of the newest release"})
    # latency as the ratio to the probe's baseline, measured interleaved: absolute times of probes made at
    # different moments of a shared machine move more than the releases do
    for key, label, unit, short in (("latency_ratio", "latency over the baseline's (median of interleaved rounds)",
                                     "x", "lat"),
                                    ("rss_mb", "peak resident memory of the probe's worker", "MB", "mem")):
        values = {v: r.margins[v][key] for v in versions if (r.margins.get(v) or {}).get(key) is not None}
        if not values:
            continue
        notes = {v: human(x, unit) + (f" ({human(r.margins[v]['latency_ms'], 'ms')})"
                                      if key == "latency_ratio" and r.margins[v].get("latency_ms") else "")
                 for v, x in values.items()}
        steps = cost_steps(r, key)
        said = "; ".join(f"{a} -> {b} {human(x, 'x')}" for a, b, x in steps)
        last_v = max(values, key=vkey)
        out.append({"spark": sparkline(versions, values, label, max(values.values()) * 1.1, notes=notes, unit=unit),
                    "short": f"{short} {human(values[last_v], unit)}",
                    "title": f"{label} of the newest release, {last_v}: {notes[last_v]}"
                             + (f"; steps: {said}" if said else ""),
                    "steps": (f"{len(steps)} step{'s' if len(steps) > 1 else ''}", said) if steps else None})
    return [{"close": None, "steps": None, **m} for m in out]


def _grid(lines: list[Line], threshold: float) -> dict:
    rows = [line.row for line in lines]
    versions = sorted({v for r in rows for v in r.cells}, key=vkey)
    out = []
    for line in lines:
        r = line.row
        base = f"data/{r.run_id}/"
        report = base + r.report if r.report else None
        summary = (base + CELLS + "/" + r.summary["cell"]["key"] + ".json"
                   if r.summary and r.summary.get("cell", {}).get("key") else None)
        out.append({"row": r, "label": line.label, "same_as": [x.run_id for x in line.same_as], "report": report,
                    "no_report": sh_words(["bisect", "report", r.run_id]),
                    "cells": [_cell(v, r.cells.get(v), r, len(versions) - i, report) for i, v in enumerate(versions)],
                    "measures": _measures(r, versions, threshold),
                    "links": [("probes", base + PROBES), ("manifest", base + MANIFEST)]
                    + ([("summary", summary)] if summary else [])})
    return {"versions": versions, "rows": out, "models": sorted({r.model for r in rows}),
            "targets": sorted({r.target for r in rows})}


def _changes(ch: Changes, lines: list[Line]) -> dict:
    label = {}
    for line in lines:  # a merged repeat's changes read under the row that shows it
        for key in [line.row.key] + [r.key for r in line.same_as]:
            label[key] = f"{line.row.model} · {line.label}"
    named = lambda k: label.get(k, k)  # noqa: E731
    counts = [(len(ch.new_boundaries), "new boundary", "new boundaries"),
              (len(ch.flipped), "verdict flipped", "verdicts flipped"),
              (len(ch.margin_moves), "fp16 margin move", "fp16 margin moves"),
              (len(ch.new_releases), "new release probed", "new releases probed")]
    return {"ch": ch, "named": named, "counts": [f"{n} {one if n == 1 else many}" for n, one, many in counts if n]}


def _divergence(divs: list[Divergence]) -> list[dict]:
    """"Package and provider divergence": per compare over a range, a row per pair compared with the reference and
    a cell per release: the max |diff| in the colour of its verdict, the worst cosine and why in its title."""
    words = {True: ("bad", "diverges"), False: ("good", "agrees"), None: ("skip", "not compared")}
    out = []
    for dv in divs:
        doc = dv.doc
        ref = doc["reference"]
        pairs = []
        for side in doc["pairs"]:
            cells = []
            for entry in side["releases"]:
                cls, word = words.get(entry.get("diverges"), words[None])
                diff, cos = _number_of(entry.get("max_abs_diff")), _number_of(entry.get("cosine"))
                title = (f"{side['label']} against {ref['label']} at {entry['release']}: {word} — worst cosine "
                         f"{cosine_text(cos) if cos is not None else 'none'}, max |diff| {human(diff)}; "
                         f"{entry.get('why') or ''}")
                body = human(diff) if entry.get("diverges") is not None and diff is not None else "–"
                cells.append({"cls": cls, "word": word, "release": entry["release"], "title": title, "body": body})
            pairs.append({"label": side["label"], "cells": cells})
        out.append({"dv": dv, "doc": doc, "ref": ref, "pairs": pairs, "compare": f"data/{dv.run_id}/{COMPARE}.json"})
    return out


def _number_of(x) -> float | None:
    """A number of a compare document as the section shows it (anything else in its place: none)."""
    return None if isinstance(x, bool) or not isinstance(x, (int, float)) else float(x)


def _copy_divergences(divs: list[Divergence], site: Path) -> None:
    """Each compare run's manifest and compare.json, into data/<run-id>/ (the section links to them)."""
    for dv in divs:
        copy_into(dv.run_dir, site / "data" / dv.run_id, [MANIFEST, f"{COMPARE}.json"], site)


PROBED_WORDS = {"repeat": "bisect repeat", "options": "bisect options", "compare": "a pair of bisect compare"}


def _probed(others: list[Probed]) -> list[dict]:
    """"Runs that are no search": per run, what made it, its releases, its answer and its files (data/<run>/)."""
    return [{"p": p, "what": PROBED_WORDS.get(p.kind, p.kind),
             "links": [(name, f"data/{p.run_id}/{name}") for name in p.files]}
            for p in sorted(others, key=lambda p: (p.model, p.kind, p.run_id))]


def _copy_probed(others: list[Probed], site: Path) -> None:
    for p in others:
        copy_into(p.run_dir, site / "data" / p.run_id, list(p.files), site)


def _model_sections(rows: list[Row]) -> list[dict]:
    by_model: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_model[r.model].append(r)
    out = []
    for n, model in enumerate(sorted(by_model)):
        mine = sorted(by_model[model], key=lambda r: (r.target, r.predicate))
        explanations = []
        for r in mine:
            expl = (r.summary or {}).get("explanation")
            if expl:
                explanations.append((r, expl if isinstance(expl, str) else json.dumps(expl, indent=1, default=str)))
        odd = [(r, v, c) for r in mine for v, c in sorted(r.cells.items(), key=lambda kv: vkey(kv[0]))
               if c["verdict"] not in JUDGED]
        out.append({"model": model, "rows": mine, "explanations": explanations, "odd": odd,
                    "digests": ", ".join(sorted({r.model_digest[:12] for r in mine if r.model_digest})),
                    "chart": headroom_chart(model, mine, f"h{n}")})
    return out


def render(rows: list[Row], title: str = "ortbisect dashboard", left_out: list = (), ch: Changes | None = None,
           runs: list[tuple[str, str]] | None = None, divs: list[Divergence] = (),
           threshold: float = MARGIN_THRESHOLD, others: list[Probed] = ()) -> str:
    runs = runs_of(t for r in rows for _, t, _ in r.judged) if runs is None else runs
    ch = changes(rows, runs) if ch is None else ch
    lines = page_lines(rows)
    per_night = nights(rows, runs)
    return _ENV.get_template("dashboard.html.j2").render(
        title=title, generated=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        n_verdicts=sum(len(r.cells) for r in rows), n_runs=len({r.run_id for r in rows}), nights=per_night,
        script=Markup(FILTER_JS), script_hash=base64.b64encode(hashlib.sha256(FILTER_JS.encode()).digest()).decode(),
        legend=[(v, SYMBOLS[v], SHORT_WORDS[v], WORDS[v]) for v in VERDICT_COLOURS],
        left_out=[(left_out_label(p), why) for p, why in left_out], left_out_words=left_out_words(list(left_out)),
        changes=_changes(ch, lines), grid=_grid(lines, threshold) if rows else None, threshold=threshold,
        history=history_chart(per_night), divergences=_divergence(list(divs)), models=_model_sections(rows),
        probed=_probed(list(others)),
        symbols=SYMBOLS, question_words=question_words)


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
        others: list[Probed] = []
        rows = collect(root, warn, left_out, others)
        if any(r.headroom for r in rows):
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise UsageError("bisect dashboard draws the traces' charts with matplotlib, which is not installed "
                                 "(uv run --with matplotlib bisect dashboard ...)") from None
        copy_raw(rows, site)
        divs = divergences(root, warn, left_out)
        _copy_divergences(divs, site)
        _copy_probed(others, site)
        runs = runs_of(t for r in rows for _, t, _ in r.judged)
        ch = changes(rows, runs)
        page = Path(out) / "index.html"
        write_inside(site, page, render(rows, title, left_out, ch, runs, divs, threshold, others).encode("utf-8"))
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
