"""Predicates: a stored probe outcome judged good or bad."""

import numpy as np
import pytest

from harness.errors import UsageError
from harness.verdicts import classify, max_rel_diff, parse_predicate


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
