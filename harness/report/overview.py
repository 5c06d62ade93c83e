"""What the dashboard shows, as data: one row per (run, question) of a results root. Pure of HTML.

A row is a model on a target (arch, backend, CPU model, package and execution
providers where the records name them, session options) and a question (its
predicate, and the reference it compares with, when it compares: two
references are two rows), with per release:
the verdict of its NEWEST probe record (`history.latest_by_version`, judged by
`verdicts.judge`), its NaN rows and its graded numbers (`metrics.of_record`:
fp16 headroom = max |x| / 65504, worst cosine against the run's reference where
there is one). The first bad release of the row is its boundary; the report of
the run (`bisect report` writes results/<run>/report.md) is named when present.
A row whose newest run document says `skipped` (a matrix cell this host could
not run: CUDA without a GPU) says why (`Row.skipped`). Each release also carries the probe's internal fp16
margin (`internal_margin`), with the rows close to the ceiling and the margin moves between runs.

This module holds one concept, the dashboard's data: its rows, what changed between runs, the divergences.

`divergences` reads the documents of `bisect compare --from --to` (a run of
their own each, compare.json, validated by results.store.read_compare_document):
one per comparison, drawn as rows of pairs by release; their runs hold no
probes and make no row of the grid.

`collect` draws searches only. A run that is no search (`bisect repeat`, `bisect options`: their run key's
`triage`; the runs of a compare's pairs: probed by `bisect compare` alone, with no run document) is no row:
`collect` hands it to `others` as a `Probed`, with its answer said from its own records (a repeat: whether every
run gave the same bits; options: how many combinations were bad under its predicate), listed apart.

Within a run, the questions of one predicate and reference that found the same boundary (a regression asked
again over another range, a sweep of the range, a fix asked over it that found it is a regression) answer one
question: they are one row, over their ranges together.

`changes` compares the newest run of the nightly with the state before it:
records are grouped into runs by their `finished` times (a gap of more than
RUN_GAP between two probes starts a new run), and the verdicts as of the
previous run are judged from the records finished before the newest run began.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.errors import UsageError
from harness.metrics import intervals_apart, of_record, timing_summary
from harness.results.evidence import EvidenceError, loads
from harness.results.history import latest_by_version, own_records
from harness.results.runs import run_dirs
from harness.results.store import (
    CELLS,
    COMPARE,
    MANIFEST,
    PROBES,
    REPORT,
    TRACES,
    RunStore,
    read_cell_document,
    read_compare_document,
    read_manifest,
)
from harness.runners import PROVENANCE_KEYS
from harness.summary import has_boundary

DEFAULT_PREDICATE = "nan-or-inf"
TARGET_EXTRA = ("package", "ep", "providers")  # what a record's provenance may name beyond the run key
RUN_GAP = timedelta(hours=6)  # probes further apart than this belong to different runs (nights)
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def vkey(v: str):
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
    cells: dict[str, dict]  # version -> {verdict, why, nan_rows, inf_rows, rows, finished, status, records}
    history: list[dict] = field(default_factory=list)  # {version, verdict, first_seen}
    summary: dict | None = None
    first_bad: str | None = None
    last_good: str | None = None
    mode: str = "regression"  # a fix's boundary is its last bad and first good release (first_bad stays None)
    last_bad: str | None = None
    first_good: str | None = None
    flips: dict[str, str] = field(default_factory=dict)  # version -> previous verdict
    headroom: dict[str, float] = field(default_factory=dict)  # from traces (the largest of any tensor)
    margins: dict[str, dict] = field(default_factory=dict)  # version -> {headroom, cosine_min, max_abs} (newest record)
    judged: list[tuple[str, str, str]] = field(default_factory=list)  # (version, finished, verdict) of every record
    report: str | None = None  # file name of the run's upstream report, when `bisect report` wrote one
    reference: dict | None = None  # what the predicate compares with (kind, id, label), when it compares
    # "regression 1.20.0..1.20.0": the question's mode and range, where the run asks its predicate (and
    # reference) over more than one range or mode with more than one answer: each answer is its own row, keyed
    # by it too (questions that found the same boundary are one row: same_questions)
    span: str | None = None
    asked: str | None = None  # "regression 1.19.0..1.21.0": the mode and its ranges together, said or not

    @property
    def key(self) -> str:
        return (f"{self.run_id}/{self.predicate}" + (f"/vs-{self.reference.get('id')}" if self.reference else "")
                + (f"/{self.span.replace(' ', '-')}" if self.span else ""))

    @property
    def skipped(self) -> str | None:
        """Why its newest run document did not run (a matrix cell skipped on this host), or None."""
        s = self.summary or {}
        return str(s.get("skipped") or "a device this host lacks") if s.get("status") == "skipped" else None


def reference_words(ref: dict | None) -> str | None:
    """What a row compares with, in a few words: fp32, a release (1.23.2), a file's name."""
    if not isinstance(ref, dict):
        return None
    ref_id, kind = str(ref.get("id") or ""), ref.get("kind")
    if kind == "fp32":
        return "fp32"
    if kind == "release":
        return ref_id.removeprefix("release:")
    if kind == "file":
        return Path(str(ref.get("path") or ref_id)).name
    return str(ref.get("label") or ref_id or kind)


def question_of(doc: dict) -> tuple[str, str | None]:
    """(predicate, reference id) of a run document; a reference counts only where the predicate compares with
    one (else its records are judged alike)."""
    from harness.verdicts import parse_predicate

    predicate = doc.get("predicate") or DEFAULT_PREDICATE
    ref = doc.get("reference") if isinstance(doc.get("reference"), dict) else None
    compares = ref is not None and parse_predicate(predicate).needs_reference
    return predicate, (str(ref.get("id")) if compares else None)


def span_of(doc: dict) -> tuple[str, str | None, str | None]:
    """(mode, first, last) of a run document's question: with `question_of`, what makes it a row of its own."""
    from harness.summary import Question

    try:
        q = Question.of_document(doc)
    except ValueError:  # a predicate that does not parse: the row says so through its verdicts
        return str(doc.get("mode") or "regression"), None, None
    if not isinstance(doc.get("question"), dict):  # a document from before questions were kept: its releases
        known = sorted((v for v in doc.get("releases") or [] if isinstance(v, str)), key=vkey)
        return q.mode, (known[0] if known else None), (known[-1] if known else None)
    return q.mode, q.first, q.last


def in_span(version: str, first: str | None, last: str | None) -> bool:
    """Whether a release lies in a question's range (no range known: every release does)."""
    if not (isinstance(first, str) and isinstance(last, str)):
        return True
    return vkey(first) <= vkey(version) <= vkey(last)


def answered(docs: list[dict]) -> dict | None:
    """The run document a reader of the run answers by default (harness.session.asked_of_run): the newest with
    a boundary, else the newest."""
    newest = sorted(docs, key=lambda d: d.get("generated") or "", reverse=True)
    return next((d for d in newest if has_boundary(d)), newest[0] if newest else None)


def target_of(key: dict, records: list[dict]) -> dict:
    """Where a run's probes ran: the manifest key's provenance, and the package and providers its records name."""
    prov = {k: key.get(k) for k in PROVENANCE_KEYS}
    for k in TARGET_EXTRA:
        prov[k] = key.get(k)
        for rec in reversed(records):
            value = (rec.get("provenance") or {}).get(k)
            if value:
                prov[k] = value
                break
    return prov


def target_label(prov: dict, options: dict) -> str:
    """"x86_64 · uv · onnxruntime-openvino:openvino · OpenVINOExecutionProvider · py3.11 · options"."""
    from harness.summary import target_label as where

    parts = [where(prov)]  # arch, backend, CPU model, and package:ep when not the default ones
    providers = prov.get("providers")
    if providers:
        parts.append(", ".join(map(str, providers)) if isinstance(providers, (list, tuple)) else str(providers))
    if prov.get("python"):
        parts.append(f"py{prov['python']}")
    if options:
        parts.append(", ".join(f"{k}={v}" for k, v in sorted(options.items())))
    return " · ".join(parts)


def _cell_docs(run_dir: Path, warn, left_out: list) -> list[dict]:
    """The run's cell documents (cells/KEY.json); one that cannot be read or is not of its schema's shape is
    left out (`warn` hears why, `left_out` gets (its file, why)), and the run is shown from its records and the
    others. Each one's key is its file's name, whatever the document says: the page links to the file by it,
    and a key read from the document (`../../x`) could point anywhere."""
    docs = []
    for f in sorted((run_dir / CELLS).glob("*.json")):
        try:
            doc = read_cell_document(f).raw
        except (OSError, EvidenceError) as exc:
            warn(f"leaving out {f}: {exc}")
            left_out.append((f, str(exc)))
            continue
        cell = doc.get("cell") if isinstance(doc.get("cell"), dict) else {}
        docs.append({**doc, "cell": {**cell, "key": f.stem}})
    return docs


def left_out_label(path: Path) -> str:
    """What `collect` left out, by name: a run directory's, or <run>/cells/<file> for a cell document."""
    return f"{path.parent.parent.name}/{CELLS}/{path.name}" if path.parent.name == CELLS else path.name


def left_out_words(left_out: list) -> str:
    """"2 run(s)", "1 cell document(s)", "2 run(s) and 1 cell document(s)": how much `collect` left out."""
    docs = sum(1 for path, _ in left_out if path.parent.name == CELLS)
    runs = len(left_out) - docs
    return " and ".join(w for w in (f"{runs} run(s)" if runs else "", f"{docs} cell document(s)" if docs else "") if w)


def trace_headroom(run_dir: Path) -> dict[str, float]:
    """version -> the largest fp16 headroom (max |x| / 65504; inf when non-finite) of its trace."""
    out = {}
    for f in sorted((run_dir / TRACES).glob("*.json")):
        try:
            doc = loads(f.read_bytes())
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


def _judge(records: list[dict], predicate: str, docs: list[dict], store: RunStore):
    """(record, verdict, why, judged) of each record under the question: against its reference
    (reference.judged, compared again from the saved outputs where the probe was not). A release the question
    could not be compared here takes the verdict its run documents give it, where one does; one never compared
    (verdicts.not_compared) and in none is left out: blank on the page, never an error."""
    from harness.reference import judged as judged_against
    from harness.reference import restored
    from harness.verdicts import judge, not_compared, parse_predicate

    pred = parse_predicate(predicate)
    ref = restored(next((d.get("reference") for d in docs if isinstance(d.get("reference"), dict)), None), store) \
        if pred.needs_reference else None
    by_summary: dict[str, dict] = {}
    for doc in sorted(docs, key=lambda d: d.get("generated") or ""):  # the newest document's verdict last
        by_summary.update({p["version"]: p for p in doc.get("probes") or [] if isinstance(p, dict)})
    out = []
    for rec in records:
        j = judged_against(rec, pred, ref, store) if ref is not None else judge(rec, pred)
        verdict, why = j["verdict"], j["why"]
        unmeasured = pred.needs_reference and rec.get("status") == "ran" and verdict != "bad" and \
            (ref is None or (j.get("metrics") or {}).get("reference") != ref.id)
        said = by_summary.get(rec["version"]) if unmeasured else None
        if said is not None and said.get("verdict") is not None:  # compared where the outputs were
            verdict, why = said["verdict"], said.get("why")
        elif not_compared(j, pred):
            continue
        out.append((rec, verdict, why, j))
    return out


def _number(x) -> float | None:
    """A graded number as the page plots it: None where absent, inf where non-finite."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else math.inf


def margins_of(record: dict) -> dict:
    """The numbers a row's sparkline follows, from the record's stored metrics."""
    if record.get("status") != "ran":
        return {}
    m = of_record(record)
    out = {"headroom": _number(m.get("headroom")), "cosine_min": _number(m.get("cosine_min")),
           "max_abs": _number(m.get("max_abs"))}
    nonfinite = any((o.get("nan_rows") or o.get("inf_rows")) for o in (record.get("result") or {}).get("outputs") or [])
    if nonfinite and out["headroom"] is not None:
        out["headroom"] = math.inf  # max |x| is taken over finite values: a NaN row is past the ceiling
    out.update(internal_margin(record))
    out.update(cost_of(record))
    return out


def cost_of(record: dict) -> dict:
    """What the probe cost the release: `latency_ms` (the median of its timed runs, where it was timed against a
    baseline) with `latency_ratio` to that baseline, and `rss_mb`, the worker's peak resident memory."""
    out: dict = {}
    t = timing_summary(record.get("timing")) or {}
    if isinstance(t.get("candidate_median_s"), float):
        out["latency_ms"] = 1e3 * t["candidate_median_s"]
        out["latency_ratio"] = _number(t.get("ratio"))
        out["latency_low"], out["latency_high"] = _number(t.get("low")), _number(t.get("high"))
    rss = (record.get("result") or {}).get("peak_rss_mb")
    if _number(rss) is not None and math.isfinite(rss) and rss > 0:
        out["rss_mb"] = float(rss)
    return out


COST_STEP = 0.10  # a release's latency or memory 10% above or below the previous release's is a step


def cost_steps(r: Row, key: str, threshold: float = COST_STEP) -> list[tuple[str, str, float]]:
    """(previous release, release, ratio) wherever `key` (latency_ratio, rss_mb) moved by more than `threshold`
    between consecutive releases that have it, in version order: named like `drift` names its steps."""
    known = [(v, (r.margins.get(v) or {}).get(key)) for v in sorted(r.margins, key=vkey)]
    known = [(v, x) for v, x in known if x is not None]

    def apart(a: str, b: str) -> bool:
        """A latency step is one only where the two releases' intervals do not overlap."""
        if key != "latency_ratio":
            return True
        ends = [(r.margins[v].get("latency_low"), r.margins[v].get("latency_high")) for v in (a, b)]
        return intervals_apart(*ends)

    return [(a, b, y / x) for (a, x), (b, y) in zip(known, known[1:])
            if x > 0 and abs(y / x - 1) > threshold and apart(a, b)]


def internal_margin(record: dict) -> dict:
    """The probe's internal fp16 margin (harness.graphs.margin) as the page shows it: `margin` (the fraction of
    65504; inf past the ceiling), `margin_tensor`, `margin_fp32` (the hottest tensor the release kept in fp32).
    The record is read back from disk: a value of another shape is no number."""
    m = record.get("margin")
    if not isinstance(m, dict) or m.get("error"):
        return {}
    fraction = _number(m.get("fraction"))
    if m.get("overflowed") is True and (fraction is None or fraction < 1):
        fraction = math.inf
    tensor = m.get("tensor") if isinstance(m.get("tensor"), str) else None
    hot = m.get("fp32_hottest") if isinstance(m.get("fp32_hottest"), dict) else {}
    return {"margin": fraction, "margin_tensor": tensor,
            "margin_fp32": _number(hot.get("fraction")),
            "margin_fp32_tensor": hot.get("tensor") if isinstance(hot.get("tensor"), str) else None}


def close_to_ceiling(r: Row, threshold: float) -> list[str]:
    """The releases of a row that are not bad yet whose margin reached `threshold` (of 65504): the rows the page
    marks "close to the ceiling" before any NaN."""
    return [v for v, c in sorted(r.cells.items(), key=lambda kv: vkey(kv[0]))
            if c.get("verdict") == "good" and (r.margins.get(v) or {}).get("margin") is not None
            and r.margins[v]["margin"] >= threshold]


# -- a run's questions: one row per answer ----------------------------------------------------------

def answer_of(doc: dict | None) -> tuple[str, str | None, str] | None:
    """(direction, older, newer) of the boundary a run document found: regression (last good, first bad), fix
    (last bad, first good); a sweep's is the direction of the boundary it names. None where it found none."""
    if not doc or not has_boundary(doc):
        return None
    if isinstance(doc.get("first_bad"), str):
        return "regression", doc.get("last_good"), doc["first_bad"]
    if isinstance(doc.get("first_good"), str):
        return "fix", doc.get("last_bad"), doc["first_good"]
    return None


def same_questions(groups: dict[tuple, list[dict]]) -> list[list[tuple]]:
    """The questions of a run (predicate, reference, mode, first, last -> their documents) that are one row:
    those of one predicate and reference whose newest documents found the same boundary, and a question that
    found its range runs the other way (`wrong_direction`) with the one of that range that found the boundary."""
    newest = {q: _newest_doc(docs) for q, docs in groups.items()}
    answer = {q: answer_of(newest[q]) for q in groups}
    out: list[list[tuple]] = []
    for q in sorted(groups, key=lambda q: answer[q] is None):  # those with a boundary first: the others join them
        home = next((g for g in out if g[0][:2] == q[:2] and (
            (answer[q] is not None and answer[q] == answer[g[0]]) or
            (answer[q] is None and (newest[q] or {}).get("status") == "wrong_direction" and answer[g[0]] is not None
             and any(o[3:] == q[3:] and answer[o] is not None and answer[o][0] != q[2] for o in g)))), None)
        if home is None:
            out.append([q])
        else:
            home.append(q)
    return out


def _newest_doc(docs: list[dict]) -> dict | None:
    return max(docs, key=lambda doc: doc.get("generated") or "", default=None)


def _mode_of(questions: list[tuple], answer) -> str | None:
    modes = {q[2] for q in questions}
    return modes.pop() if len(modes) == 1 else (answer[0] if answer else sorted(modes)[0])


def _range_of(questions: list[tuple]) -> tuple[str | None, str | None]:
    """The ranges of one row's questions together (one unknown: every release)."""
    if any(not (isinstance(q[3], str) and isinstance(q[4], str)) for q in questions):
        return None, None
    return min((q[3] for q in questions), key=vkey), max((q[4] for q in questions), key=vkey)


# -- runs that are no search ---------------------------------------------------------------------

@dataclass
class Probed:
    """A run that is no search: a repeat, an options matrix, a compare's pair. Listed apart with its answer."""

    run_id: str
    run_dir: Path
    model: str
    target: str
    kind: str  # repeat, options, compare
    releases: list[str]
    answer: str  # "same bits in 5 of 5 runs", "3 of 8 combinations bad (5 good); bad if nan-or-inf"
    files: list[str]  # its files the page links to, by name in the run


def probed_kind(run_dir: Path, man: dict) -> str | None:
    """repeat or options (the run key's `triage`), compare (a run only `bisect compare` wrote, holding no run
    document: a pair's probes), or None: a search."""
    from harness.triage.options import OPTIONS_SUMMARY, REPEAT_SUMMARY

    triage = man["key"].get("triage")
    if triage in (REPEAT_SUMMARY, OPTIONS_SUMMARY):
        return triage
    commands = [c.get("argv") for c in man.get("commands") or [] if isinstance(c, dict)]
    said = [a[1] for a in commands if isinstance(a, list) and len(a) > 1]
    if said and len(said) == len(commands) and all(a == COMPARE for a in said) and \
            not any((run_dir / CELLS).glob("*.json")):
        return COMPARE
    return None


def _hashes(rec: dict) -> tuple | None:
    outs = (rec.get("result") or {}).get("outputs") or []
    return tuple(o.get("sha256") for o in outs) if rec.get("status") == "ran" and outs else None


def _rows_said(rec: dict) -> str:
    """"NaN rows 4 of 4", or "" where none is NaN nor Inf."""
    outs = (rec.get("result") or {}).get("outputs") or []
    nan = max((o.get("nan_rows") or 0 for o in outs), default=0)
    inf = max((o.get("inf_rows") or 0 for o in outs), default=0)
    rows = max((o.get("rows") or 0 for o in outs), default=0)
    said = [f"NaN rows {nan} of {rows}" if nan else "", f"Inf rows {inf} of {rows}" if inf else ""]
    return ", ".join(w for w in said if w)


def repeat_answer(records: list[dict]) -> str:
    """What the newest series of a repeat says: the same bits in every run, how many outputs, or runs that
    did not finish."""
    series: dict[str, list[dict]] = defaultdict(list)
    for rec in records:
        if isinstance(rec.get("series"), str):
            series[rec["series"]].append(rec)
    if not series:
        return "no runs recorded"
    newest = max(series, key=lambda k: max(r.get("finished") or "" for r in series[k]))
    runs = series[newest]
    hashes = [_hashes(r) for r in runs]
    done = [h for h in hashes if h is not None]
    n = len(runs)
    if len(done) < n:
        failed = sorted({r["status"] for r, h in zip(runs, hashes) if h is None})
        said = f"{n - len(done)} of {n} runs did not finish ({', '.join(failed)})"
    elif len(set(done)) > 1:
        said = f"nondeterministic: {len(set(done))} different outputs in {n} runs"
    else:
        said = f"same bits in {n} of {n} runs"
    rows = _rows_said(runs[0])
    earlier = len(series) - 1
    return said + (f"; {rows}" if rows else "") + (f" ({earlier} earlier series)" if earlier else "")


def options_answer(records: list[dict], predicate: str) -> str:
    """How many of an options matrix's combinations (each one's newest probe) were bad under its predicate."""
    from harness.triage.options import worker_says_na
    from harness.verdicts import judge, parse_predicate

    pred = parse_predicate(predicate)
    combos = latest_by_version([{**r, "version": r["combo_id"]} for r in records if isinstance(r.get("combo_id"), str)])
    counts: dict[str, int] = defaultdict(int)
    for rec in combos.values():
        counts["n/a" if worker_says_na(rec) else judge(rec, pred)["verdict"]] += 1
    n = sum(counts.values())
    if not n:
        return "no combination probed"
    rest = ", ".join(f"{c} {v}" for v, c in sorted(counts.items()) if v != "bad")
    return f"{counts.get('bad', 0)} of {n} combinations bad" + (f" ({rest})" if rest else "") + \
        f"; bad if {predicate}"


def _options_predicate(run_dir: Path) -> str:
    """The predicate an options matrix judged by, from its options.json (a string `--bad-if` reads), else the
    default one."""
    from harness.triage.options import OPTIONS_SUMMARY
    from harness.verdicts import parse_predicate

    try:
        doc = loads((run_dir / f"{OPTIONS_SUMMARY}.json").read_bytes())
        predicate = doc.get("predicate") if isinstance(doc, dict) else None
        if isinstance(predicate, str) and len(predicate) <= 200:
            parse_predicate(predicate)
            return predicate
    except (OSError, ValueError, UsageError):
        pass
    return DEFAULT_PREDICATE


def probed_run(d: Path, man: dict, kind: str, records: list[dict], target: str) -> Probed:
    """A run that is no search, with its answer said from its records."""
    releases = sorted({r["version"] for r in records}, key=vkey)
    if kind == "repeat":
        answer = repeat_answer(records)
    elif kind == "options":
        answer = options_answer(records, _options_predicate(d))
    else:
        newest = latest_by_version(records)
        answer = "probed for bisect compare: " + (", ".join(
            f"{v} {newest[v]['status']}" + (f" ({_rows_said(newest[v])})" if _rows_said(newest[v]) else "")
            for v in releases) or "nothing")
    files = [name for name in (MANIFEST, PROBES, f"{kind}.json") if (d / name).is_file()]
    return Probed(d.name, d, (man.get("model") or {}).get("name") or d.name, target, kind, releases, answer, files)


def collect(root: Path, warn=lambda msg: None, left_out: list | None = None,
            others: list | None = None) -> list[Row]:
    """A row per (run, predicate) under `root`.

    A run whose manifest cannot be read, whose probes.jsonl holds a complete
    line that is not a probe record, or whose evidence holds a symbolic link
    (never read through: results.runs), is left out: `warn` hears why and
    `left_out` gets (run directory or link, reason); so is a cell document
    that is not one (its file, reason), and the run is shown without it. A
    last line cut off mid-write is only warned about. A run that is no
    search (`probed_kind`) goes to `others`, as a `Probed`.
    """
    rows = []
    left_out = [] if left_out is None else left_out
    others = [] if others is None else others
    refused: list[tuple[Path, str]] = []
    dirs = run_dirs(root, refused)
    for path, why in refused:
        warn(f"skipping {path}: {why}")
        left_out.append((path, why))
    for d in dirs:
        try:
            man = read_manifest(d)
        except UsageError as exc:  # an unreadable run is left out of the page, with a note on stderr
            warn(f"skipping {d}: {exc}")
            left_out.append((d, str(exc)))
            continue
        if man["key"].get("triage") == COMPARE:  # a compare over a range: no probes, drawn by `divergences`
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
        key = man["key"]
        options = key.get("session_options") or {}
        kind = probed_kind(d, man)
        if kind is not None:  # a repeat, an options matrix, a compare's pair: no search, no row
            others.append(probed_run(d, man, kind, evidence.records,
                                     target_label(target_of(key, evidence.records), options)))
            continue
        records = own_records(evidence.records)  # a reference's or a triage's probes are not the row's releases
        prov = target_of(key, records)
        docs = _cell_docs(d, warn, left_out)
        # each question (predicate, reference, mode, range) with its documents
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for doc in docs:
            groups[(*question_of(doc), *span_of(doc))].append(doc)
        # questions that found the same boundary are one row (same_questions); each row over its ranges
        order = lambda q: (q[0], q[1] or "", q[2], vkey(q[3] or ""), vkey(q[4] or ""))  # noqa: E731
        together = sorted((sorted(g, key=order) for g in same_questions(groups)), key=lambda g: order(g[0])) or \
            [[(DEFAULT_PREDICATE, None, None, None, None)]]
        shared = defaultdict(int)
        for g in together:
            shared[g[0][:2]] += 1
        headroom = trace_headroom(d)
        newest = latest_by_version(records)
        margins = {v: margins_of(r) for v, r in newest.items()}
        default = answered(docs)
        store = RunStore(d)
        for questions in together:
            predicate, ref_id = questions[0][:2]
            mine = [doc for q in questions for doc in groups.get(q, [])]
            # each question's newest document; of several questions, the newest that found the row's boundary
            summary = answered([_newest_doc(groups[q]) for q in questions if groups.get(q)])
            mode = _mode_of(questions, answer_of(summary))
            first, last = _range_of(questions)
            # the questions' releases
            asked = [r for r in records if any(in_span(r["version"], q[3], q[4]) for q in questions)]
            newest_ids = {id(r) for r in latest_by_version(asked).values()}
            judged = _judge(asked, predicate, mine, store)
            report = REPORT if (d / REPORT).is_file() and (default is None or any(x is default for x in mine)) \
                else None
            cells, first_seen = {}, {}
            counts = defaultdict(int)
            for rec, verdict, why, s in judged:
                counts[rec["version"]] += 1
                k = (rec["version"], verdict)
                t = rec.get("finished") or ""
                if k not in first_seen or (t and t < first_seen[k]):
                    first_seen[k] = t
                if id(rec) in newest_ids:
                    cells[rec["version"]] = {"verdict": verdict, "why": why, "nan_rows": s["nan_rows"],
                                             "inf_rows": s["inf_rows"], "rows": s["rows"],
                                             "finished": rec.get("finished"), "status": rec.get("status")}
            for v, c in cells.items():
                c["records"] = counts[v]
            row = Row(d.name, d, (man.get("model") or {}).get("name") or d.name, key.get("model") or "",
                      target_label(prov, options), prov, options, predicate, cells,
                      history=sorted(({"version": v, "verdict": vd, "first_seen": t} for (v, vd), t in first_seen.items()),
                                     key=lambda h: (h["first_seen"], vkey(h["version"]))),
                      summary=summary, headroom=headroom, margins=margins, report=report,
                      reference=(summary or {}).get("reference") if ref_id else None,
                      span=f"{mode} {first}..{last}" if shared[(predicate, ref_id)] > 1 else None,
                      asked=f"{mode} {first}..{last}" if first and last else None,
                      judged=[(rec["version"], rec.get("finished") or "", verdict) for rec, verdict, _, _ in judged])
            row.mode = mode
            first_bad, last_good, row.flips = boundary({v: c["verdict"] for v, c in cells.items()})
            s = row.summary or {}
            if mode == "fix":  # the first good release after a bad one, as the run names it where its grid agrees
                row.first_good, row.last_bad = fix_boundary({v: c["verdict"] for v, c in cells.items()})
                if s.get("first_good") in row.cells and row.cells[s["first_good"]]["verdict"] == "good":
                    row.first_good, row.last_bad = s["first_good"], s.get("last_bad")
            else:
                row.first_bad, row.last_good = first_bad, last_good
                if s.get("first_bad") and s["first_bad"] in row.cells and row.cells[s["first_bad"]]["verdict"] == "bad":
                    row.first_bad, row.last_good = s["first_bad"], s.get("last_good")
            rows.append(row)
    return rows


@dataclass
class Divergence:
    """One `bisect compare --from --to`: its pairs' divergence from the reference, release by release."""

    run_id: str
    run_dir: Path
    model: str
    target: str
    doc: dict  # the compare document, of its schema's shape (evidence.CompareDocument)


def divergences(root: Path, warn=lambda msg: None, left_out: list | None = None) -> list[Divergence]:
    """Every compare document under `root`, in run order. A run refused for a link is `collect`'s to report; a
    document that cannot be read or is not of its shape leaves its run out (`warn`, `left_out`: the run, why)."""
    left_out = [] if left_out is None else left_out
    found = []
    for d in run_dirs(root, []):
        try:
            man = read_manifest(d)
        except UsageError:
            continue  # collect says so
        if man["key"].get("triage") != COMPARE:
            continue
        try:
            doc = read_compare_document(d).raw
        except (OSError, EvidenceError) as exc:
            warn(f"leaving out {d}: {COMPARE}.json: {exc}")
            left_out.append((d, f"{COMPARE}.json: {exc}"))
            continue
        key = man["key"]  # where the pairs ran: the run key's target (its shape checked), never a package of it
        where = {k: key.get(k) for k in ("arch", "backend", "cpu", "python")}
        found.append(Divergence(d.name, d, (man.get("model") or {}).get("name") or d.name,
                                target_label(where, key.get("session_options") or {}), doc))
    return found


def fix_boundary(verdicts: dict[str, str]) -> tuple[str | None, str | None]:
    """(first good, last bad) of a fix row's verdicts: the first good release after a bad one."""
    last_bad = None
    for v in sorted(verdicts, key=vkey):
        if verdicts[v] == "bad":
            last_bad = v
        elif verdicts[v] == "good" and last_bad is not None:
            return v, last_bad
    return None, None


def boundary(verdicts: dict[str, str]) -> tuple[str | None, str | None, dict[str, str]]:
    """(first bad, last good, flips) of a row's verdicts: the first bad release after a good one, and each
    release whose verdict differs from the previous one's (a skip, no wheel, is stepped over)."""
    prev = last_good = first_bad = boundary_good = None
    flips: dict[str, str] = {}
    for v in sorted(verdicts, key=vkey):
        verdict = verdicts[v]
        if verdict != "skip":  # no wheel for the target: says nothing about the release's numerics
            if prev is not None and verdict != prev:
                flips[v] = prev
            prev = verdict
        if verdict == "good":
            last_good = v
        elif verdict == "bad" and last_good is not None and first_bad is None:
            first_bad, boundary_good = v, last_good
    return first_bad, boundary_good, flips


# -- what changed since the previous run ------------------------------------------------------

@dataclass
class Changes:
    run_started: str | None  # first probe of the newest run; None when no probe has a time
    previous_run: str | None  # last probe of the run before it; None on the first run
    new_releases: list[tuple[str, list[str]]]  # (version, keys of the rows that probed it for the first time)
    flipped: list[tuple[str, str, str, str]]  # (row key, version, before, now)
    new_boundaries: list[tuple[str, str | None, str | None]]  # (row key, first bad before, first bad now)
    # (row key, release before, release probed now, margin before, margin now): moves above MARGIN_MOVE
    margin_moves: list[tuple[str, str, str, float, float]] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.new_releases or self.flipped or self.new_boundaries or self.margin_moves)


MARGIN_THRESHOLD = 0.9  # of 65504: a good release's margin past it marks its row "close to the ceiling"
MARGIN_MOVE = 0.1  # a release's margin 10% above or below the previous release's is worth saying


def margin_moves(r: Row, versions: list[str], threshold: float = MARGIN_MOVE) -> list[tuple[str, str, float, float]]:
    """(previous release, release, margin before, margin now) for each of `versions` whose internal margin moved by
    more than `threshold` (relative) from the previous release of the row that has one; past the ceiling counts."""
    known = [(v, (r.margins.get(v) or {}).get("margin")) for v in sorted(r.margins, key=vkey)]
    known = [(v, m) for v, m in known if m is not None]
    out = []
    for (a, x), (b, y) in zip(known, known[1:]):
        if b not in versions:
            continue
        moved = (math.isinf(x) != math.isinf(y)) or (not math.isinf(x) and x and abs(y - x) / x > threshold)
        if moved:
            out.append((a, b, x, y))
    return out


def _time(t: str) -> datetime | None:
    try:
        return datetime.strptime(t, TIME_FORMAT).replace(tzinfo=timezone.utc)
    except (TypeError, ValueError):
        return None


def runs_of(times) -> list[tuple[str, str]]:
    """(first, last) probe time of each run, oldest first: times further apart than RUN_GAP split runs."""
    parsed = {t: _time(t) for t in set(times)}  # each distinct stamp parsed once
    stamps = sorted(t for t, when in parsed.items() if when)
    runs: list[list[str]] = []
    for t in stamps:
        if runs and parsed[t] - parsed[runs[-1][-1]] <= RUN_GAP:
            runs[-1].append(t)
        else:
            runs.append([t])
    return [(r[0], r[-1]) for r in runs]


def changes(rows: list[Row], runs: list[tuple[str, str]] | None = None) -> Changes:
    """What the newest run changed: releases probed for the first time, verdicts that flipped, boundaries.
    `runs` is `runs_of` every probe time of `rows`, when the caller has it."""
    runs = runs_of(t for r in rows for _, t, _ in r.judged) if runs is None else runs
    if not runs:
        return Changes(None, None, [], [], [], [])
    start = runs[-1][0]
    previous = runs[-2][1] if len(runs) > 1 else None
    new_releases: dict[str, list[str]] = defaultdict(list)
    flipped, bounds, moves = [], [], []
    for r in rows:
        before_recs: dict[str, tuple[str, int, str]] = {}
        for i, (v, t, verdict) in enumerate(r.judged):
            if t and t < start:
                cur = before_recs.get(v)
                if cur is None or (t, i) >= cur[:2]:
                    before_recs[v] = (t, i, verdict)
        before = {v: x[2] for v, x in before_recs.items()}
        if previous is None:
            continue
        for v, c in r.cells.items():
            if v not in before:
                if (c.get("finished") or "") >= start:
                    new_releases[v].append(r.key)
            elif before[v] != c["verdict"]:
                flipped.append((r.key, v, before[v], c["verdict"]))
        was = boundary(before)[0]
        if r.first_bad != was and r.first_bad:
            bounds.append((r.key, was, r.first_bad))
        probed_now = [v for v, c in r.cells.items() if (c.get("finished") or "") >= start]
        moves += [(r.key, *m) for m in margin_moves(r, probed_now)]
    return Changes(start, previous, sorted(new_releases.items(), key=lambda kv: vkey(kv[0])),
                   sorted(flipped, key=lambda f: (f[0], vkey(f[1]))), sorted(bounds),
                   sorted(moves, key=lambda m: (m[0], vkey(m[2]))))


def nights(rows: list[Row], runs: list[tuple[str, str]] | None = None) -> list[dict]:
    """Per run (night): its date, and how many probes of each verdict it recorded; oldest first."""
    runs = runs_of(t for r in rows for _, t, _ in r.judged) if runs is None else runs
    if not runs:
        return []
    out = [{"first": a, "last": b, "date": a[:10], "verdicts": defaultdict(int)} for a, b in runs]
    starts = [a for a, _ in runs]
    import bisect as _bisect

    for r in rows:
        for _, t, verdict in r.judged:
            if t and t >= starts[0]:  # stamps that parse sort as text; the others are in no run
                i = _bisect.bisect_right(starts, t) - 1
                if t <= runs[i][1]:
                    out[i]["verdicts"][verdict] += 1
    for n in out:
        n["verdicts"] = dict(n["verdicts"])
    return out
