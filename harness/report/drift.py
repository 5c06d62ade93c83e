"""How a run's numbers move from release to release: one row per probed release, and the steps. Pure.

A run keeps every probe's graded numbers (`metrics.of_record`: max |x|, fp16
headroom, worst-row cosine and largest relative difference from a
reference). `rows` lines up the newest own record of each release (triage
series and option combinations left out, as `session.judged_records` does),
oldest release first; `steps` names where a number moved by more than a
relative threshold between consecutive releases that ran:

* max |x| and headroom: |b - a| / |a| > threshold;
* the worst cosine, through its distance 1 - cosine, and the largest relative
  difference: |b - a| > max(threshold * max(a, b), ABS_FLOOR), so noise at
  1e-7 from a perfect match is not a step;
* a timed probe's latency over its baseline (slower>R): its interval and the previous timed release's do
  not overlap, and the ratio moved by more than the threshold;
* any of them becoming None or non-finite (or finite again), and a verdict
  that changes between consecutive releases (whatever their status); a
  number that was never measured (a probe made before the reference existed
  has no cosine) is missing, not a step.

Releases that did not run (skip, error, crash, timeout, ...) carry no numbers:
the numbers of the release that ran before them are compared with those of
the next one that ran, and the step names both releases.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from harness.metrics import cosine_text, intervals_apart
from harness.releases.versions import parse_version
from harness.results.history import latest_by_version
from harness.verdicts import Predicate, judge, metrics_of, not_compared

DEFAULT_THRESHOLD = 0.01
ABS_FLOOR = 1e-5  # of 1 - cosine and of a relative difference: below it a change is noise
METRICS = ("max_abs", "headroom", "cosine_min", "rel_diff_max", "margin")
LABELS = {"max_abs": "max |x|", "headroom": "headroom", "cosine_min": "worst cosine", "rel_diff_max": "max rel diff",
          "margin": "internal fp16 margin", "verdict": "verdict", "latency": "latency x baseline"}


@dataclass(frozen=True)
class Row:
    """One probed release: its verdict and graded numbers (None where absent or non-finite)."""

    version: str
    status: str
    verdict: str
    why: str
    max_abs: float | None
    headroom: float | None
    cosine_min: float | None
    rel_diff_max: float | None
    outputs_changed: bool | None  # bits differ from the previous release that ran; None: nothing to compare
    margin: float | None = None  # the internal fp16 margin (harness.graphs.margin); None past the ceiling too
    margin_tensor: str | None = None
    margin_past: bool = False  # a tensor held in fp16 reached the ceiling (its margin has no finite size)
    digests: tuple[str, ...] = ()  # the outputs' sha256, in output order (not in `doc`)
    compared: bool = False  # compared with the run's reference: its cosine and differences exist (not in `doc`)
    latency: float | None = None  # a timed probe's latency over its baseline's (median of interleaved rounds)
    latency_low: float | None = None  # ... and its interval
    latency_high: float | None = None

    @property
    def ran(self) -> bool:
        return self.status == "ran"

    def doc(self) -> dict:
        d = asdict(self)
        d.pop("digests")
        d.pop("compared")
        return d


@dataclass(frozen=True)
class Step:
    """A number (or the verdict) that moved between two releases."""

    metric: str  # one of METRICS, or "verdict"
    from_version: str
    to_version: str
    before: float | str | None
    after: float | str | None
    change: float | None  # relative and signed (of 1 - cosine for the cosine); None where it has no size
    description: str

    def doc(self) -> dict:
        return {"metric": self.metric, "from": self.from_version, "to": self.to_version, "before": self.before,
                "after": self.after, "change": self.change, "description": self.description}


def own_records(records: list[dict]) -> list[dict]:
    """The run's own probes: triage series and option combinations left out."""
    return [r for r in records if not (r.get("combo_id") or r.get("series"))]


def _finite(x) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        return None
    return float(x)


def _digests(record: dict) -> tuple[str, ...]:
    outs = (record.get("result") or {}).get("outputs") or []
    return tuple(str(o.get("sha256")) for o in outs if isinstance(o, dict))


COMPARED = ("cosine_min", "rel_diff_max", "rel_diff_floors", "abs_diff_max", "nonfinite_rows")


def rows(records: list[dict], predicate: Predicate, reference_id: str | None = None) -> list[Row]:
    """One row per release: its newest own record, judged under `predicate`, oldest release first.

    A predicate that compares with a reference judges from the comparison each
    probe stored (the saved outputs are not read); where `reference_id` names
    the run's reference, a comparison made against another one is left out, so
    that probe cannot be judged (its verdict says so) and shows no cosine.
    """
    newest = latest_by_version(own_records(records))
    made: list[Row] = []
    previous: tuple[str, ...] = ()
    for version in sorted(newest, key=parse_version):
        rec = newest[version]
        status = str(rec.get("status"))
        m = metrics_of(rec) if status == "ran" else {}
        if reference_id is not None and m.get("reference") not in (None, reference_id):
            m = {k: v for k, v in m.items() if k not in COMPARED and k != "reference"}
            rec = {**rec, "metrics": m}
        j = judge(rec, predicate)  # a verdict, never a status: "ran" is no verdict
        verdict, why = j["verdict"], str(j["why"])
        if not_compared(j, predicate):  # another question's probe: blank, neither good nor an error
            verdict, why = "", "not compared with the reference"
        digests = _digests(rec) if status == "ran" else ()
        changed = None
        if digests and previous:
            changed = digests != previous
        if digests:
            previous = digests
        inner = rec.get("margin") if status == "ran" and isinstance(rec.get("margin"), dict) else {}
        past = inner.get("overflowed") is True
        fraction = _finite(inner.get("fraction"))
        made.append(Row(version, status, verdict, why, _finite(m.get("max_abs")), _finite(m.get("headroom")),
                        _finite(m.get("cosine_min")), _finite(m.get("rel_diff_max")), changed,
                        None if past else fraction, inner.get("tensor") if isinstance(inner.get("tensor"), str) else None,
                        past, digests, "cosine_min" in m, *_latency(m.get("timing"))))
    return made


def _latency(timing: dict | None) -> tuple[float | None, float | None, float | None]:
    t = timing or {}
    return _finite(t.get("ratio")), _finite(t.get("low")), _finite(t.get("high"))


def _latency_step(a: Row, b: Row, threshold: float) -> Step | None:
    """A latency step: the two releases' intervals do not overlap and the ratio moved by more than `threshold`;
    between two probes measured at different moments only the interval tells a step from the machine's noise."""
    if a.latency is None or b.latency is None or not intervals_apart((a.latency_low, a.latency_high),
                                                                     (b.latency_low, b.latency_high)):
        return None
    change = b.latency / a.latency - 1
    if abs(change) <= threshold:
        return None
    shown = lambda r: f"{r.latency:.3f} ({r.latency_low:.3f}-{r.latency_high:.3f})"  # noqa: E731
    return Step("latency", a.version, b.version, a.latency, b.latency, change,
                f"{LABELS['latency']} {shown(a)} -> {shown(b)}{_change_words(change)} between {a.version} and "
                f"{b.version}")


def _relative(a: float, b: float, threshold: float) -> tuple[bool, float | None]:
    """max |x|, headroom: a step when |b - a| / |a| > threshold (any change away from 0)."""
    if a == 0:
        return b != 0, None
    change = (b - a) / abs(a)
    return abs(change) > threshold, change


def _distance(a: float, b: float, threshold: float) -> tuple[bool, float | None]:
    """A distance from the reference: a step when |b - a| > max(threshold * max(a, b), ABS_FLOOR)."""
    moved = abs(b - a) > max(threshold * max(abs(a), abs(b)), ABS_FLOOR)
    return moved, ((b - a) / abs(a) if abs(a) > ABS_FLOOR else None)  # relative to noise is no size


def _change_words(change: float | None) -> str:
    if change is None:
        return ""
    if change > 1:  # more than doubled: as a factor
        ratio = 1 + change
        return f" (x{ratio:.3g})" if ratio < 100 else f" (x{ratio:,.0f})" if ratio < 1e6 else f" (x{ratio:.1e})"
    return f" ({change * 100:+.1f}%)"


def _value(metric: str, x: float | None, row: Row | None = None) -> str:
    if metric == "margin" and row is not None and row.margin_past:
        return f"past the ceiling ({row.margin_tensor})" if row.margin_tensor else "past the ceiling"
    if x is None:
        return "none"
    return {"max_abs": f"{x:.5g}", "headroom": f"{x:.3g}", "cosine_min": cosine_text(x),
            "rel_diff_max": f"{x:.3g}", "margin": f"{x:.3g}"}[metric]


def _metric_step(metric: str, a: Row, b: Row, threshold: float) -> Step | None:
    x, y = getattr(a, metric), getattr(b, metric)
    between = f"between {a.version} and {b.version}"
    if metric == "margin" and (a.margin_past, b.margin_past) != (False, False):
        if a.margin_past == b.margin_past:
            return None
        return Step(metric, a.version, b.version, x, y, None,
                    f"{LABELS[metric]} {_value(metric, x, a)} -> {_value(metric, y, b)} {between}")
    if x is None and y is None:
        return None
    if metric in COMPARED and not (a.compared and b.compared):
        return None  # measured on one side only: a missing number is no step
    if x is None or y is None:
        if metric == "margin":  # measured on one side only (an older record, --no-margin): no step
            return None
        return Step(metric, a.version, b.version, x, y, None,
                    f"{LABELS[metric]} {_value(metric, x)} -> {_value(metric, y)} {between}")
    if metric == "cosine_min":
        da, db = 1.0 - x, 1.0 - y
        moved, change = _distance(da, db, threshold)
        size = _change_words(change).strip(" ()")
        words = f"{LABELS[metric]} {_value(metric, x)} -> {_value(metric, y)} " \
                f"(1 - cosine {da:.2g} -> {db:.2g}{', ' + size if size else ''})"
    else:
        moved, change = (_distance if metric == "rel_diff_max" else _relative)(x, y, threshold)
        words = f"{LABELS[metric]} {_value(metric, x)} -> {_value(metric, y)}{_change_words(change)}"
    return Step(metric, a.version, b.version, x, y, change, f"{words} {between}") if moved else None


def steps(made: list[Row], threshold: float = DEFAULT_THRESHOLD) -> list[Step]:
    """Where a number moved by more than `threshold` (relative), or the verdict changed; in release order."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold) \
            or threshold <= 0:
        raise ValueError(f"threshold {threshold!r}: a finite number above 0")
    found: list[Step] = []
    last_ran: Row | None = None
    last_margin: Row | None = None  # a probe made with --no-margin (or before margins) is passed over
    last_timed: Row | None = None  # a probe not timed against a baseline is passed over
    last_judged: Row | None = None  # a release the question never compared (no verdict) is passed over
    for row in made:
        if last_judged is not None and row.verdict and last_judged.verdict != row.verdict:
            a = last_judged
            found.append(Step("verdict", a.version, row.version, a.verdict, row.verdict, None,
                              f"verdict {a.verdict} -> {row.verdict} between {a.version} and {row.version}"))
        if row.verdict:
            last_judged = row
        if not row.ran:
            continue
        if last_ran is not None:
            found += [s for s in (_metric_step(m, last_ran, row, threshold) for m in METRICS if m != "margin") if s]
        last_ran = row
        if row.margin is not None or row.margin_past:
            if last_margin is not None:
                found += [s for s in (_metric_step("margin", last_margin, row, threshold),) if s]
            last_margin = row
        if row.latency is not None:
            if last_timed is not None:
                found += [s for s in (_latency_step(last_timed, row, threshold),) if s]
            last_timed = row
    return found


def document(run_id: str, threshold: float, made: list[Row], found: list[Step], chart: str | None) -> dict:
    """What `bisect drift --json` prints."""
    return {"run_id": run_id, "threshold": threshold, "rows": [r.doc() for r in made],
            "steps": [s.doc() for s in found], "chart": chart}
