"""From what a probe saw to good / bad / skip / error / crash / timeout. Pure.

The worker only measures; the predicate that calls a result bad lives here,
so a stored result can be judged again under another `--bad-if`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from harness.errors import UsageError

VERDICTS = ("good", "bad", "skip", "error", "crash", "timeout", "nondeterministic")


@dataclass(frozen=True)
class Predicate:
    """When a finished probe is *bad*. `kind` is one of PREDICATES."""

    kind: str = "nan-or-inf"
    bound: float | None = None

    def __str__(self) -> str:
        return self.kind if self.bound is None else f"{self.kind}>{self.bound:g}"

    @property
    def needs_reference(self) -> bool:
        return self.kind == "rel-diff"


PREDICATES = {
    "nan-or-inf": "any output row holds NaN or Inf (default)",
    "nan": "any output row holds NaN",
    "zero-rows": "any output row is all zeros",
    "max-abs": "max |x| of an output above a bound: max-abs>1e4",
    "rel-diff": "max relative difference from --reference above a bound: rel-diff>1e-3",
}


def parse_predicate(text: str) -> Predicate:
    m = re.fullmatch(r"\s*([a-z-]+)\s*(?:>\s*([0-9.eE+-]+))?\s*", text)
    if not m or m.group(1) not in PREDICATES:
        raise UsageError(f"--bad-if {text!r}: expected one of {', '.join(PREDICATES)} (bounded ones as max-abs>1e4)")
    kind, bound = m.group(1), m.group(2)
    bounded = kind in ("max-abs", "rel-diff")
    if bounded and bound is None:
        raise UsageError(f"--bad-if {kind} needs a bound, e.g. {kind}>1e-3")
    if not bounded and bound is not None:
        raise UsageError(f"--bad-if {kind} takes no bound")
    try:
        return Predicate(kind, float(bound) if bound is not None else None)
    except ValueError:
        raise UsageError(f"--bad-if {text!r}: {bound!r} is not a number") from None


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
    rest = [o for o in outs if o.get("name") not in set(union.get("outputs") or [])]

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


def max_rel_diff(outputs: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> float:
    """Largest |a - r| / max(|r|, tiny) over the outputs both hold; NaN/Inf count as infinite."""
    worst = 0.0
    for name, ref in reference.items():
        if name not in outputs:
            continue
        a = np.asarray(outputs[name], np.float64)
        r = np.asarray(ref, np.float64)
        if a.shape != r.shape:
            return float("inf")
        diff = np.abs(a - r) / np.maximum(np.abs(r), np.finfo(np.float32).tiny)
        if not np.isfinite(diff).all():
            return float("inf")
        worst = max(worst, float(diff.max(initial=0.0)))
    return worst


def judge(record: dict, predicate: Predicate, reference: dict[str, np.ndarray] | None = None,
          outputs: dict[str, np.ndarray] | None = None) -> dict:
    """The record with its verdict under `predicate` and its row counts: what every reader shows.

    `outputs` are the probe's saved outputs, needed only by predicates that
    compare with a `reference`; without either such a probe is an *error*.
    """
    rel = None
    if predicate.needs_reference and record.get("status") == "ran" and reference is not None and outputs is not None:
        rel = max_rel_diff(outputs, reference)
    verdict, why = classify(record, predicate, rel)
    s = rows_summary(record.get("result"))
    return {**record, "verdict": verdict, "why": why, "predicate": str(predicate),
            "rows": s["rows"], "nan_rows": s["nan_rows"], "inf_rows": s["inf_rows"]}


def classify(outcome: dict, predicate: Predicate, rel_diff: float | None = None) -> tuple[str, str]:
    """(verdict, reason) for one stored probe outcome.

    `outcome` holds `status` (ran / skip / timeout / crash / error) and, when
    the worker finished, its `result`.
    """
    status = outcome["status"]
    if status != "ran":
        return status, outcome.get("reason", status)
    s = rows_summary(outcome.get("result"))
    k = predicate.kind
    if k == "nan-or-inf":
        bad = s["nan_rows"] or s["inf_rows"]
        why = f"{s['nan_rows']} NaN rows, {s['inf_rows']} Inf rows of {s['rows']}"
    elif k == "nan":
        bad = s["nan_rows"]
        why = f"{s['nan_rows']} NaN rows of {s['rows']}"
    elif k == "zero-rows":
        bad = s["zero_rows"]
        why = f"{s['zero_rows']} all-zero rows of {s['rows']}"
    elif k == "max-abs":
        m = s["max_abs"]
        bad = m is None or m > predicate.bound
        why = f"max |x| {m:g}" if m is not None else "no finite value"
    else:
        if rel_diff is None:
            return "error", "no outputs to compare with the reference"
        bad = rel_diff > predicate.bound
        why = f"max relative difference {rel_diff:.3g} from the reference"
    return ("bad" if bad else "good"), why
