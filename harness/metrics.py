"""Graded numbers of one probe: how close to the fp16 ceiling, how far from a reference. Pure.

Stored with each probe's raw record (`record["metrics"]`), so any predicate
can judge it later and `bisect drift` can follow a number across releases
without probing again. What is measured:

* per output, from the worker's own statistics: max |x|, the fp16 headroom
  (max |x| / 65504) of fp16 outputs, the count of all-zero rows;
* with a reference (a file, another release's outputs, the model in fp32):
  per output the cosine of each row with the reference row (the worst row is
  kept), the largest absolute difference over the values finite in both, and
  the largest relative difference |a - r| / max(|r|, floor) where the floor is
  a fraction of the output's largest |r| (REL_FLOOR by default; one value per
  floor of FLOORS is kept, so `rel-diff>X@F` judges a stored probe again).
  A row holding NaN or Inf counts as cosine -1 (as far from the reference as
  a row can be) and makes the relative difference non-finite (stored as None,
  with the row count).

Everything is a plain float, int or None: a record is JSON.
"""

from __future__ import annotations

import math

import numpy as np

FP16_MAX = 65504.0

# The relative difference's floor, as a fraction of the output's largest |reference|. Without one, an exact
# zero in the reference makes any change infinite (one ulp of a probability near 1.0, 1.2e-7, over float32's
# tiny was 1e+31). 1e-3 is numpy.allclose's own ratio (atol 1e-8 / rtol 1e-5), taken in the output's units so
# that it holds for logits as for probabilities: values under a thousandth of the output's largest are judged
# by their absolute difference. A one-ulp change at the output's scale is then ~1.2e-4, under rel-diff>1e-3.
REL_FLOOR = 1e-3
# The floors a probe stores its relative difference at (decades): any of them can judge a stored probe again.
FLOORS = tuple(10.0 ** -k for k in range(9, -1, -1))


def floor_key(floor: float) -> str:
    """The name of a floor in a record's `rel_diff_floors`: "1e-03"."""
    return f"{floor:.0e}"


def cosine_text(x: float | None) -> str:
    """A cosine as every table and sentence shows it: 8 decimals, and never "1.00000000" for one below 1
    (0.9999999996 reads 1-4.0e-10), so one cosine reads the same everywhere."""
    if x is None:
        return "-"
    text = f"{x:.8f}"
    if x < 1.0 and text == "1.00000000":
        return f"1-{1.0 - x:.1e}"
    return text


def cosine_said(m: dict) -> str:
    """A comparison's worst-row cosine as tables show it: "identical bits" where every output compared is the
    reference's bit for bit (`compare`'s `identical`), else cosine_text; "-" without a comparison."""
    return "identical bits" if m.get("identical") else cosine_text(m.get("cosine_min"))


def ratio_text(timing: dict | None, prefix: str = "") -> str:
    """A timed probe's ratio to its baseline with the interval: "1.231 (1.198-1.262)"; "-" without one."""
    t = timing or {}
    ratio, low, high = (t.get(f"{prefix}{k}") for k in ("ratio", "low", "high"))
    if ratio is None:
        return "-"
    return f"{ratio:.3f}" + (f" ({low:.3f}-{high:.3f})" if low is not None else "")


def headroom(stats: dict) -> float | None:
    """max |x| over the fp16 ceiling, for an fp16 output whose worker statistics hold a max |x|."""
    if stats.get("dtype") != "float16" or stats.get("max_abs") is None:
        return None
    return float(stats["max_abs"]) / FP16_MAX


def compare(output: np.ndarray, reference: np.ndarray) -> dict:
    """Per-row cosine (worst row), max absolute and relative differences of one output against its reference."""
    a = np.asarray(output, np.float64)
    r = np.asarray(reference, np.float64)
    if a.shape != r.shape:
        return {"error": f"shape {list(a.shape)} vs the reference's {list(r.shape)}"}
    rows_a = a.reshape(a.shape[0], -1) if a.ndim else a.reshape(1, 1)
    rows_r = r.reshape(r.shape[0], -1) if r.ndim else r.reshape(1, 1)
    finite = np.isfinite(rows_a).all(axis=1) & np.isfinite(rows_r).all(axis=1)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        na, nr = np.linalg.norm(rows_a, axis=1), np.linalg.norm(rows_r, axis=1)
        dot = (rows_a * rows_r).sum(axis=1)
        both_zero = (na == 0) & (nr == 0)
        cos = np.where(both_zero, 1.0, np.where((na > 0) & (nr > 0), dot / (na * nr), 0.0))
        cos = np.where(finite & np.isfinite(cos), np.clip(cos, -1.0, 1.0), -1.0)
        # a row equal to its reference has cosine 1 exactly: the sum of squares over two norms reads 1 - 1e-16
        cos = np.where(finite & (rows_a == rows_r).all(axis=1), 1.0, cos)
        diff = np.abs(rows_a - rows_r)
        both = np.isfinite(rows_a) & np.isfinite(rows_r)
        scale = float(np.abs(rows_r[np.isfinite(rows_r)]).max(initial=0.0))
        tiny = np.finfo(np.float32).tiny  # an all-zero reference: no scale to take a fraction of
        rel = {floor_key(f): float((diff / np.maximum(np.abs(rows_r), max(f * scale, tiny))).max(initial=0.0))
               for f in FLOORS}
    worst = int(np.argmin(cos)) if cos.size else None
    nonfinite = int((~finite).sum())
    return {
        "cosine_min": float(cos.min()) if cos.size else None,
        "worst_row": worst,
        "rel_diff_max": None if nonfinite else rel[floor_key(REL_FLOOR)],
        "rel_diff_floors": {k: None if nonfinite else v for k, v in rel.items()},
        "abs_diff_max": float(diff[both].max(initial=0.0)),
        "max_abs_diff": None if nonfinite else float(diff.max(initial=0.0)),
        "nonfinite_rows": nonfinite,
        # the same dtype, shape and bytes: nothing changed at all (not "a difference of 0")
        "identical": bool(np.asarray(output).dtype == np.asarray(reference).dtype and np.array_equal(
            np.ascontiguousarray(output).view(np.uint8), np.ascontiguousarray(reference).view(np.uint8))),
    }


def probe_metrics(result: dict | None, outputs: dict[str, np.ndarray] | None = None,
                  reference: dict[str, np.ndarray] | None = None, reference_id: str | None = None) -> dict:
    """The metrics of one finished probe: `result` is the worker's, `outputs` its saved arrays.

    Comparison keys appear only when both `outputs` and `reference` are given;
    `reference_id` names the reference they were made against.
    """
    per: dict[str, dict] = {}
    for i, stats in enumerate((result or {}).get("outputs") or []):
        per[stats.get("name", f"output {i}")] = {"dtype": stats.get("dtype"), "max_abs": stats.get("max_abs"),
                              "headroom": headroom(stats), "zero_rows": stats.get("zero_rows")}
    doc: dict = {"outputs": per}
    maxes = [m["max_abs"] for m in per.values() if m["max_abs"] is not None]
    rooms = [m["headroom"] for m in per.values() if m["headroom"] is not None]
    doc["max_abs"] = max(maxes) if maxes else None
    doc["headroom"] = max(rooms) if rooms else None
    if outputs is not None and reference is not None:
        compared = {name: compare(outputs[name], reference[name]) for name in per
                    if name in outputs and name in reference}
        for name, c in compared.items():
            per[name].update(c)
        errors = [f"{n}: {c['error']}" for n, c in compared.items() if "error" in c]
        good = [c for c in compared.values() if "error" not in c]
        doc["reference"] = reference_id
        if errors or not good:
            doc["comparison_error"] = "; ".join(errors) or "no output in common with the reference"
        else:
            doc["cosine_min"] = min(c["cosine_min"] for c in good)
            rel = [c["rel_diff_max"] for c in good]
            doc["rel_diff_max"] = None if None in rel else max(rel)
            doc["rel_diff_floors"] = {k: None if any(c["rel_diff_floors"][k] is None for c in good)
                                      else max(c["rel_diff_floors"][k] for c in good) for k in map(floor_key, FLOORS)}
            doc["abs_diff_max"] = max(c["abs_diff_max"] for c in good)
            doc["nonfinite_rows"] = max(c["nonfinite_rows"] for c in good)
            doc["identical"] = all(c["identical"] for c in good)
    return doc


def of_record(record: dict) -> dict:
    """The record's stored metrics, or those its worker result gives (records made before metrics were stored)."""
    return record.get("metrics") or probe_metrics(record.get("result"))


# --- time and memory: a probe measured against its baseline, interleaved --------------------------------------
#
# A timed probe keeps rounds: in each, the baseline release and the probed one ran the same batch in turn (in two
# live workers, the order alternating), each many times. Runs inside one round share whatever the machine was
# doing then, so the round is the unit: its ratio of medians (candidate / baseline) is one paired sample, and the
# interval is the sign test's distribution-free interval for the median of those samples (order statistics; no
# assumption that latencies are normal or that runs are independent).

CONFIDENCE = 0.95
MAX_ROUNDS = 500  # what a record may hold and still be read (the harness writes at most TimingJob.max_rounds)
MAX_RUNS = 20000  # latencies per side of one round


def _positive_numbers(xs, limit: int) -> list[float] | None:
    """The list when it is one of at most `limit` finite positive numbers (read from a record: untrusted)."""
    if not isinstance(xs, list) or not xs or len(xs) > limit:
        return None
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 for x in xs):
        return None
    return [float(x) for x in xs]


def median_interval(samples: list[float], confidence: float | None = None) -> tuple[float, float, float] | None:
    """(low, high, coverage) of the sign test's interval for the median of `samples`, or None when there are too
    few for `confidence` (default CONFIDENCE; six at 95%: the smallest and largest of six cover the median 96.9%
    of the time)."""
    confidence = CONFIDENCE if confidence is None else confidence
    x = sorted(samples)
    n = len(x)
    k, below, coverage = 0, 0.0, 0.0
    for j in range(n):
        below += math.comb(n, j) / 2.0 ** n  # P(at most j samples under the median)
        if 2 * below > 1 - confidence:
            break
        k, coverage = j + 1, 1 - 2 * below
    if k == 0:
        return None
    return x[k - 1], x[n - k], coverage


def _ratio_stats(pairs: list[tuple[float, float]]) -> dict:
    ratios = [c / b for b, c in pairs]
    interval = median_interval(ratios)
    return {"ratio": float(np.median(ratios)) if ratios else None, "low": interval[0] if interval else None,
            "high": interval[1] if interval else None, "coverage": interval[2] if interval else None,
            "rounds": len(ratios)}


def timing_summary(timing) -> dict | None:
    """What a timed probe measured: the latency ratio (candidate / baseline, median over rounds of each round's
    ratio of medians) with its interval, the runs behind it, the medians of each side; the same for peak memory
    where each round ran in fresh processes. None when `timing` holds no round that can be read."""
    if not isinstance(timing, dict) or not isinstance(timing.get("rounds"), list):
        return None
    lat: list[tuple[float, float]] = []
    rss: list[tuple[float, float]] = []
    base_all: list[float] = []
    cand_all: list[float] = []
    for rnd in timing["rounds"][:MAX_ROUNDS]:
        if not isinstance(rnd, dict):
            continue
        b, c = _positive_numbers(rnd.get("baseline_s"), MAX_RUNS), _positive_numbers(rnd.get("candidate_s"), MAX_RUNS)
        if b and c:
            lat.append((float(np.median(b)), float(np.median(c))))
            base_all += b
            cand_all += c
        mem = _positive_numbers([rnd.get("baseline_rss_mb"), rnd.get("candidate_rss_mb")], 2)
        if mem:
            rss.append((mem[0], mem[1]))
    if not lat and not rss:
        return None
    doc = {**_ratio_stats(lat), "runs": len(cand_all), "baseline_runs": len(base_all),
           "baseline_median_s": float(np.median(base_all)) if base_all else None,
           "candidate_median_s": float(np.median(cand_all)) if cand_all else None,
           "baseline": timing.get("baseline") if isinstance(timing.get("baseline"), str) else None}
    mem_stats = _ratio_stats(rss)
    doc.update({f"rss_{k}": v for k, v in mem_stats.items()})
    doc["baseline_rss_mb"] = float(np.median([b for b, _ in rss])) if rss else None
    doc["candidate_rss_mb"] = float(np.median([c for _, c in rss])) if rss else None
    return doc


def intervals_apart(a: tuple[float | None, float | None], b: tuple[float | None, float | None]) -> bool:
    """Whether two (low, high) intervals do not overlap (an unknown end: they may): between two releases timed at
    different moments, only that tells a step from the machine's noise."""
    if None in (*a, *b):
        return False
    return b[0] > a[1] or b[1] < a[0]
