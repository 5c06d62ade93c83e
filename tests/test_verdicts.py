"""Predicates: a stored probe outcome judged good or bad."""

import numpy as np
import pytest

from harness.errors import UsageError
from harness.verdicts import classify, max_rel_diff, parse_predicate, rows_summary


def ran(nan=0, inf=0, zero=0, max_abs=1.0, rows=4):
    out = {"rows": rows, "nan_rows": nan, "inf_rows": inf, "zero_rows": zero, "max_abs": max_abs}
    return {"status": "ran", "result": {"outputs": [out]}}


@pytest.mark.parametrize("text, outcome, verdict", [
    ("nan-or-inf", ran(), "good"),
    ("nan-or-inf", ran(nan=2), "bad"),
    ("nan-or-inf", ran(inf=1), "bad"),
    ("nan", ran(inf=1), "good"),
    ("nan", ran(nan=1), "bad"),
    ("zero-rows", ran(zero=1), "bad"),
    ("zero-rows", ran(nan=3), "good"),
    ("max-abs>1e4", ran(max_abs=2e4), "bad"),
    ("max-abs>1e4", ran(max_abs=9e3), "good"),
    ("max-abs > 10", ran(max_abs=None), "bad"),
])
def test_predicates(text, outcome, verdict):
    assert classify(outcome, parse_predicate(text))[0] == verdict


@pytest.mark.parametrize("status", ["skip", "error", "crash", "timeout"])
def test_non_ran_outcomes_keep_their_status(status):
    assert classify({"status": status, "reason": "why"}, parse_predicate("nan"))[0] == status


def test_rel_diff():
    ref = {"y": np.array([[1.0, 2.0]], np.float32)}
    assert max_rel_diff({"y": np.array([[1.0, 2.02]], np.float32)}, ref) == pytest.approx(0.01, rel=1e-3)
    assert max_rel_diff({"y": np.array([[np.nan, 2.0]], np.float32)}, ref) == float("inf")
    p = parse_predicate("rel-diff>1e-3")
    assert classify(ran(), p, rel_diff=0.01)[0] == "bad"
    assert classify(ran(), p, rel_diff=1e-4)[0] == "good"


@pytest.mark.parametrize("text", ["nan>1", "max-abs", "rel-diff", "sometimes", "max-abs>x"])
def test_bad_predicates(text):
    with pytest.raises(UsageError):
        parse_predicate(text)


def out(name, nan=0, inf=0, zero=0, rows=20):
    return {"name": name, "rows": rows, "nan_rows": nan, "inf_rows": inf, "zero_rows": zero, "max_abs": 1.0}


def test_rows_summary_counts_a_row_once_from_the_workers_union():
    result = {"outputs": [out("a", nan=7), out("b", nan=7)],
              "rows": {"rows": 20, "outputs": ["a", "b"], "nan_rows": 7, "inf_rows": 0, "nonfinite_rows": 7,
                       "zero_rows": 0}}
    s = rows_summary(result)
    assert (s["rows"], s["nan_rows"], s["nonfinite_rows"]) == (20, 7, 7)
    assert classify({"status": "ran", "result": result}, parse_predicate("nan"))[1] == "7 NaN rows of 20"


def test_rows_summary_of_an_output_outside_the_union_adds_by_the_largest_count():
    result = {"outputs": [out("a", nan=2), out("pooled", nan=4, rows=4)],
              "rows": {"rows": 20, "outputs": ["a"], "nan_rows": 2, "inf_rows": 0, "nonfinite_rows": 2, "zero_rows": 0}}
    s = rows_summary(result)
    assert (s["rows"], s["nan_rows"]) == (20, 4)  # never good when an output has NaN; never a sum


def test_rows_summary_of_a_record_made_before_the_union_is_a_lower_bound_never_a_sum():
    result = {"outputs": [out("a", nan=7, inf=1, zero=2), out("b", nan=7, inf=3, zero=2)]}
    s = rows_summary(result)
    assert (s["nan_rows"], s["inf_rows"], s["nonfinite_rows"], s["zero_rows"]) == (7, 3, 7, 2)
    assert rows_summary(None)["nan_rows"] == 0
