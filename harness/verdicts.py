"""From what a probe saw to good / bad / skip / error / crash / timeout. Pure.

The worker only measures; the predicate that calls a result bad lives here,
so a stored result can be judged again under another `--bad-if`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from harness.errors import UsageError
from harness.metrics import (
    CONFIDENCE,
    FLOORS,
    REL_FLOOR,
    cosine_text,
    floor_key,
    of_record,
    probe_metrics,
    timing_summary,
)

VERDICTS = ("good", "bad", "skip", "error", "crash", "timeout", "nondeterministic", "inconclusive")
#: a slowdown whose interval straddles its bound: stepped around like skip (after the probe re-measured it)
INCONCLUSIVE = "inconclusive"


def bound_text(x: float) -> str:
    """A bound as the predicate's text: the short `:g` form where it reads back as the same number, else every
    digit (`cosine<0.99999995` is no `cosine<1`: the text is what readers judge the run's probes by again)."""
    short = f"{x:g}"
    return short if float(short) == x else repr(x)


@dataclass(frozen=True)
class Condition:
    """One way of being bad: `kind` is one of CONDITIONS, `bound` its threshold where it has one, `floor`
    the relative difference's floor where it is not the default (metrics.REL_FLOOR)."""

    kind: str
    bound: float | None = None
    floor: float | None = None

    def __str__(self) -> str:
        if self.bound is None:
            return self.kind
        at = f"@{self.floor:g}" if self.floor is not None else ""
        return f"{self.kind}{'<' if self.kind in BELOW else '>'}{bound_text(self.bound)}{at}"

    @property
    def needs_reference(self) -> bool:
        return self.kind in ("rel-diff", "abs-diff", "cosine")

    @property
    def timed(self) -> bool:
        """Measured against a baseline release, interleaved (time and memory), not from one probe's outputs."""
        return self.kind in TIMED

    @property
    def rel_floor(self) -> float:
        return REL_FLOOR if self.floor is None else self.floor

    def words(self, reference: str = "the reference") -> str:
        b = None if self.bound is None else bound_text(self.bound)
        return {
            "nan-or-inf": "an output row holds NaN or Inf",
            "nan": "an output row holds NaN",
            "zero-rows": "an output row is all zeros",
            "max-abs": f"an output's max |x| is above {b}",
            "headroom": f"an fp16 output's max |x| is above {b} of the fp16 ceiling (65504)",
            "rel-diff": f"the largest relative difference from {reference} (|a - r| / max(|r|, {self.rel_floor:g} of the "
                        f"output's largest |r|)) is above {b}",
            "abs-diff": f"the largest absolute difference from {reference} is above {b}",
            "cosine": f"the worst row's cosine with {reference} is below {b}",
            "slower": f"the median latency is more than {b}x the baseline's (the whole {CONFIDENCE:.0%} interval of "
                      "the ratio past it)",
            "rss": f"the worker's peak resident memory is more than {b}x the baseline's (the whole {CONFIDENCE:.0%} "
                   "interval past it)",
            "error": "the model fails to load or run",
            "crash": "the worker process dies (by a signal or without a result)",
        }[self.kind]


@dataclass(frozen=True)
class Predicate:
    """When a probe is *bad*: when any of its conditions holds (`--bad-if` given several times).

    Errors and crashes are stepped around (like git bisect's skip) unless a
    condition names them.
    """

    conditions: tuple[Condition, ...] = (Condition("nan-or-inf"),)

    def __str__(self) -> str:
        return ",".join(str(c) for c in self.conditions)

    @property
    def needs_reference(self) -> bool:
        return any(c.needs_reference for c in self.conditions)

    @property
    def kinds(self) -> set[str]:
        return {c.kind for c in self.conditions}

    @property
    def timed(self) -> tuple[Condition, ...]:
        """The conditions measured against a baseline release (slower, rss)."""
        return tuple(c for c in self.conditions if c.timed)

    def words(self, reference: str = "the reference") -> str:
        """What bad means, in a sentence's words: "the model fails to load or run, or ..."."""
        return ", or ".join(c.words(reference) for c in self.conditions)


CONDITIONS = {
    "nan-or-inf": "any output row holds NaN or Inf (default)",
    "nan": "any output row holds NaN",
    "zero-rows": "any output row is all zeros",
    "max-abs": "max |x| of an output above a bound: max-abs>1e4",
    "headroom": "max |x| of an fp16 output over 65504 above a bound: headroom>0.9",
    "rel-diff": ("max relative difference from the reference above a bound: rel-diff>1e-3 "
                 f"(floor {REL_FLOOR:g} of the output's largest |reference|; another: rel-diff>1e-3@1e-5)"),
    "abs-diff": "max absolute difference from the reference above a bound: abs-diff>1e-4",
    "cosine": "worst row's cosine with the reference below a bound: cosine<0.999",
    "slower": ("median latency over the baseline's (the range's good end, or --reference-release), measured "
               "interleaved, above a bound: slower>1.15"),
    "rss": "peak resident memory of the worker over the baseline's above a bound: rss>1.3",
    "error": "the model fails to load or run on the release (the message is kept)",
    "crash": "the worker dies by a signal or ends without a result",
}
PREDICATES = CONDITIONS  # the vocabulary of --bad-if
BOUNDED = ("max-abs", "headroom", "rel-diff", "abs-diff", "cosine", "slower", "rss")
TIMED = ("slower", "rss")
BELOW = ("cosine",)  # bad below the bound, not above


def _floor(text: str, kind: str, floor: str) -> float | None:
    """The `@F` of rel-diff>X@F: one of metrics.FLOORS (None for the default one)."""
    if kind != "rel-diff":
        raise UsageError(f"--bad-if {text.strip()!r}: only rel-diff takes a floor (@F)")
    try:
        f = float(floor)
    except ValueError:
        raise UsageError(f"--bad-if {text.strip()!r}: floor {floor!r} is not a number") from None
    on = [x for x in FLOORS if math.isclose(f, x, rel_tol=1e-9)]
    if not on:
        raise UsageError(f"--bad-if {text.strip()!r}: the floor is a power of ten from {FLOORS[0]:g} to 1 (a "
                         "fraction of the output's largest |reference|; each probe keeps its relative difference "
                         "at those, so a run can be judged again without probing)")
    return None if on[0] == REL_FLOOR else on[0]


def _condition(text: str) -> Condition:
    m = re.fullmatch(r"\s*([a-z-]+)\s*(?:([<>])\s*([0-9.eE+-]+)(?:\s*@\s*([^\s@]*))?)?\s*", text)
    if not m or m.group(1) not in CONDITIONS:
        raise UsageError(f"--bad-if {text.strip()!r}: expected one of {', '.join(CONDITIONS)} "
                         "(bounded ones as max-abs>1e4, cosine<0.999, rel-diff>1e-3@1e-5)")
    kind, op, bound, floor = m.groups()
    if kind in BOUNDED and bound is None:
        want = "<" if kind in BELOW else ">"
        raise UsageError(f"--bad-if {kind} needs a bound, e.g. {kind}{want}{'0.999' if kind in BELOW else '1e-3'}")
    if kind not in BOUNDED and bound is not None:
        raise UsageError(f"--bad-if {kind} takes no bound")
    if bound is not None and op != ("<" if kind in BELOW else ">"):
        raise UsageError(f"--bad-if {text.strip()!r}: {kind} is bad {'below' if kind in BELOW else 'above'} "
                         f"its bound: {kind}{'<' if kind in BELOW else '>'}{bound}")
    try:
        value = float(bound) if bound is not None else None
    except ValueError:
        raise UsageError(f"--bad-if {text.strip()!r}: {bound!r} is not a number") from None
    return Condition(kind, value, _floor(text, kind, floor) if floor is not None else None)


def parse_predicate(text: str | tuple[str, ...] | list[str]) -> Predicate:
    """`--bad-if` values (each may list several, comma-separated) as one Predicate: bad if any holds."""
    parts = [p for t in ([text] if isinstance(text, str) else text) for p in t.split(",") if p.strip()]
    if not parts:
        raise UsageError(f"--bad-if {text!r}: expected one of {', '.join(CONDITIONS)}")
    conditions: list[Condition] = []
    for part in parts:
        c = _condition(part)
        if c not in conditions:
            conditions.append(c)
    return Predicate(tuple(conditions))


def rows_summary(result: dict | None) -> dict:
    """NaN / Inf / zero rows of the batch: a row is bad once, however many outputs it is bad in.

    The worker counts rows across the outputs that have one row per batch row
    (`result["rows"]`). An output it left out of that count (another first
    axis), and every output of a record made before it counted, adds its own
    count through the largest one, never the sum: a lower bound, never a
    double count.
    """
    res = result or {}
    outs = res.get("outputs") or []
    union = res.get("rows") if isinstance(res.get("rows"), dict) else {}
    counted = set(union.get("outputs") or [])
    rest = [o for o in outs if o.get("name") not in counted]

    def most(key: str, per_output=None) -> int:
        per_output = per_output or (lambda o: o.get(key) or 0)
        return max([per_output(o) for o in rest] + [union.get(key) or 0])

    return {
        "rows": most("rows"),
        "nan_rows": most("nan_rows"),
        "inf_rows": most("inf_rows"),
        "nonfinite_rows": most("nonfinite_rows", lambda o: max(o.get("nan_rows") or 0, o.get("inf_rows") or 0)),
        "zero_rows": most("zero_rows"),
        "max_abs": max((o["max_abs"] for o in outs if o.get("max_abs") is not None), default=None),
    }


def judge(record: dict, predicate: Predicate, reference: dict[str, np.ndarray] | None = None,
          outputs: dict[str, np.ndarray] | None = None, reference_id: str | None = None) -> dict:
    """The record with its verdict under `predicate`, its row counts and metrics: what every reader shows.

    The record's stored metrics are used as they are, unless `reference` and
    the probe's saved `outputs` are given: then the comparison is made here
    (a record probed before the reference was known, or against another one).
    """
    if reference is not None and outputs is not None and record.get("status") == "ran":
        m = probe_metrics(record.get("result"), outputs, reference, reference_id)
    else:
        m = metrics_of(record)
    # a skipped probe's numbers are not the release's (a provider fallback ran something else): none are shown
    s = rows_summary(None if record.get("status") == "skip" else record.get("result"))
    verdict, why, held = classify(record, predicate, m, s)
    return {**record, "verdict": verdict, "why": why, "predicate": str(predicate), "decided_by": held,
            "metrics": m, "rows": s["rows"], "nan_rows": s["nan_rows"], "inf_rows": s["inf_rows"]}


def not_compared(judged: dict, predicate: Predicate) -> bool:
    """Whether a judged record is one its question never compared: the predicate compares with a reference, the
    probe ran, and no comparison with that reference was made or tried for it (a probe of another question), so
    that no condition held. Such a release is blank to every reader (no verdict): neither good nor an error."""
    if not predicate.needs_reference or judged.get("status") != "ran" or judged.get("verdict") == "bad":
        return False
    m = judged.get("metrics") or {}
    return not any(k in m for k in ("reference", "comparison_error", "cosine_min"))


def metrics_of(record: dict) -> dict:
    """The record's metrics, with its timed rounds summed up (`timing`: ratio, interval, runs) where it has them:
    derived every time from the latencies kept, never stored."""
    m = of_record(record)
    timing = record.get("timing")
    t = timing_summary(timing)
    if t is None and isinstance(timing, dict) and isinstance(timing.get("error"), str):
        return {**m, "timing_error": timing["error"][:300]}  # why no round was measured
    return {**m, "timing": t} if t is not None else m


def _timed(c: Condition, m: dict) -> tuple[bool | str | None, str]:
    t = m.get("timing")
    low, high, ratio, n = ((t.get("low"), t.get("high"), t.get("ratio"), t.get("rounds")) if c.kind == "slower"
                           else (t.get("rss_low"), t.get("rss_high"), t.get("rss_ratio"), t.get("rss_rounds"))) \
        if t else (None, None, None, 0)
    what = "latency" if c.kind == "slower" else "peak memory"
    if ratio is None and m.get("timing_error"):
        return None, f"no {what} measured against the baseline: {m['timing_error']}"
    if ratio is None:
        return None, f"no {what} measured against a baseline" + (
            "" if c.kind == "slower" or not t else " (rounds in fresh processes measure memory)")
    base = f" of {t['baseline']}" if t.get("baseline") else ""
    runs = f", {t['runs']} runs" if c.kind == "slower" else ""
    if low is None:
        return INCONCLUSIVE, f"{what} {ratio:.3f}x the baseline's{base} ({n} rounds{runs}: too few for an interval)"
    said = f"{what} {ratio:.3f}x the baseline's{base} ({low:.3f}-{high:.3f}, {n} rounds{runs})"
    if low > c.bound:
        return True, said
    if high < c.bound:
        return False, said
    return INCONCLUSIVE, said


def timing_decides(conditions: tuple[Condition, ...], summary: dict | None) -> bool:
    """Whether rounds summed up as `summary` (metrics.timing_summary) judge every timed condition good or bad:
    the interval of each is clear of its bound (a timed probe measures until they do)."""
    return summary is not None and all(_timed(c, {"timing": summary})[0] in (True, False) for c in conditions)


def _measure(c: Condition, s: dict, m: dict) -> tuple[bool | str | None, str]:
    """(holds, what was measured) of one condition on a probe that ran; holds is None when it cannot tell,
    INCONCLUSIVE when a timed condition's interval holds its bound."""
    k, b = c.kind, c.bound
    if k in TIMED:
        return _timed(c, m)
    if k == "nan-or-inf":
        return bool(s["nan_rows"] or s["inf_rows"]), f"{s['nan_rows']} NaN rows, {s['inf_rows']} Inf rows of {s['rows']}"
    if k == "nan":
        return bool(s["nan_rows"]), f"{s['nan_rows']} NaN rows of {s['rows']}"
    if k == "zero-rows":
        return bool(s["zero_rows"]), f"{s['zero_rows']} all-zero rows of {s['rows']}"
    if k == "max-abs":
        v = s["max_abs"]
        return (v is None or v > b), (f"max |x| {v:g}" if v is not None else "no finite value")
    if k == "headroom":
        v = m.get("headroom")
        if v is None:
            return None, "no fp16 output with a finite value"
        return v > b, f"fp16 headroom {v:.3g}"
    if k in ("error", "crash"):
        return False, "loads and runs"
    if m.get("comparison_error"):
        return None, m["comparison_error"]
    if k == "cosine":
        v = m.get("cosine_min")
        if v is None:
            return None, "no comparison with the reference"
        return v < b, f"worst row's cosine {cosine_text(v)}" + (" (identical bits)" if m.get("identical") else "")
    if "cosine_min" not in m:
        return None, "no comparison with the reference"
    if m.get("nonfinite_rows"):
        return True, f"{m.get('nonfinite_rows')} rows non-finite where the reference is finite"
    if k == "abs-diff":
        v = m.get("abs_diff_max")
        if v is None:
            return None, "compared before absolute differences were kept: probe again (--refresh)"
        return v > b, f"max absolute difference {v:.3g}" + (" (identical bits)" if m.get("identical") else "")
    floors = m.get("rel_diff_floors")
    if not isinstance(floors, dict):
        # measured without a floor (before floors were kept): an upper bound, so it can only clear a probe
        v = m.get("rel_diff_max")
        if v is not None and v <= b:
            return False, f"max relative difference {v:.3g} (without a floor)"
        return None, "relative difference measured without a floor: probe again (--refresh)"
    v = floors.get(floor_key(c.rel_floor))
    if v is None:
        return True, f"{m.get('nonfinite_rows')} rows non-finite where the reference is finite"
    at = "" if c.floor is None else f" (floor {c.floor:g})"
    return v > b, f"max relative difference {v:.3g}{at}"


def classify(outcome: dict, predicate: Predicate, metrics: dict | None = None,
             summary: dict | None = None) -> tuple[str, str, list[str]]:
    """(verdict, reason, the conditions that held) for one stored probe outcome.

    `outcome` holds `status` (ran / skip / timeout / crash / error) and, when
    the worker finished, its `result`; `metrics` are the probe's (of_record),
    `summary` its rows_summary where the caller has it already.
    """
    status = outcome["status"]
    if status in ("error", "crash") and status in predicate.kinds:
        cond = next(str(c) for c in predicate.conditions if c.kind == status)
        return "bad", outcome.get("reason", status), [cond]
    if status != "ran":
        return status, outcome.get("reason", status), []
    s = summary if summary is not None else rows_summary(outcome.get("result"))
    m = metrics if metrics is not None else metrics_of(outcome)
    measured = [(c, *_measure(c, s, m)) for c in predicate.conditions]
    held = [(c, what) for c, holds, what in measured if holds is True]
    if held:
        return "bad", "; ".join(what for _, what in held), [str(c) for c, _ in held]
    unknown = [what for _, holds, what in measured if holds is None]
    if unknown:
        return "error", unknown[0], []
    straddling = [what for _, holds, what in measured if holds == INCONCLUSIVE]
    if straddling:
        return INCONCLUSIVE, "; ".join(straddling), []
    numeric = [what for c, _, what in measured if c.kind not in ("error", "crash")]
    if not numeric:
        numeric = [f"loads and runs ({s['nan_rows']} NaN rows, {s['inf_rows']} Inf rows of {s['rows']})"]
    return "good", "; ".join(dict.fromkeys(numeric)), []
