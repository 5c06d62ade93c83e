"""Predicates: a stored probe outcome judged good or bad."""

import numpy as np
import pytest

from harness.errors import UsageError
from harness.metrics import compare
from harness.verdicts import classify, judge, parse_predicate, rows_summary


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


def test_comparison_metrics():
    ref = np.array([[1.0, 0.0], [0.0, 2.0]], np.float32)
    c = compare(ref + np.float32(1e-3), ref)
    assert c["cosine_min"] > 0.999 and c["max_abs_diff"] == pytest.approx(1e-3, abs=1e-6)
    # 0 in the reference: judged against the floor, 1e-3 of the output's largest |r| (2)
    assert c["rel_diff_max"] == pytest.approx(1e-3 / 2e-3, rel=1e-3) and c["abs_diff_max"] == pytest.approx(1e-3, abs=1e-6)
    c = compare(np.array([[1.0, 2.02]], np.float32), np.array([[1.0, 2.0]], np.float32))
    assert c["rel_diff_max"] == pytest.approx(0.01, rel=1e-3) and c["nonfinite_rows"] == 0
    c = compare(np.array([[np.nan, 2.0], [1.0, 0.0]], np.float32), ref)
    assert (c["cosine_min"], c["worst_row"], c["rel_diff_max"], c["nonfinite_rows"]) == (-1.0, 0, None, 1)
    assert compare(np.zeros((2, 2)), np.zeros((2, 2)))["cosine_min"] == 1.0
    assert compare(np.zeros((2, 2)), ref)["cosine_min"] == 0.0
    assert "error" in compare(np.zeros((2, 3)), ref)


def record_with(y, stats=None):
    stats = stats or {"name": "y", "dtype": "float16", "rows": 2, "nan_rows": 0, "inf_rows": 0, "zero_rows": 0,
                      "max_abs": float(np.abs(y).max())}
    return {"status": "ran", "result": {"outputs": [stats]}}


@pytest.mark.parametrize("text, y, verdict", [
    ("cosine<0.999", [[1.0, 0.0], [0.0, 2.0]], "good"),
    ("cosine<0.999", [[1.0, 0.0], [2.0, 0.0]], "bad"),  # finite, wrong row
    ("rel-diff>1e-3", [[1.0, 0.0], [0.0, 2.01]], "bad"),
    ("rel-diff>1e-2", [[1.0, 0.0], [0.0, 2.01]], "good"),
    ("nan-or-inf,cosine<0.999", [[1.0, 0.0], [2.0, 0.0]], "bad"),
])
def test_reference_predicates(text, y, verdict):
    ref = {"y": np.array([[1.0, 0.0], [0.0, 2.0]], np.float32)}
    y = np.array(y, np.float32)
    judged = judge(record_with(y), parse_predicate(text), ref, {"y": y}, "ref-1")
    assert judged["verdict"] == verdict, judged["why"]
    assert judged["metrics"]["reference"] == "ref-1"


def test_reference_predicate_without_a_comparison_is_an_error_unless_another_condition_holds():
    y = np.array([[1.0, 0.0]], np.float32)
    assert judge(record_with(y), parse_predicate("cosine<0.999"))["verdict"] == "error"
    nan = {"name": "y", "dtype": "float16", "rows": 1, "nan_rows": 1, "inf_rows": 0, "zero_rows": 0, "max_abs": 1.0}
    assert judge(record_with(y, nan), parse_predicate("cosine<0.999,nan"))["verdict"] == "bad"


def test_headroom():
    p = parse_predicate("headroom>0.9")
    assert judge(record_with(np.array([[60000.0]])), p)["verdict"] == "bad"
    judged = judge(record_with(np.array([[30000.0]])), p)
    assert judged["verdict"] == "good" and judged["metrics"]["headroom"] == pytest.approx(30000 / 65504)
    fp32 = {"name": "y", "dtype": "float32", "rows": 1, "nan_rows": 0, "inf_rows": 0, "zero_rows": 0, "max_abs": 7e4}
    assert judge(record_with(None, fp32), p)["verdict"] == "error"  # no fp16 output to measure


@pytest.mark.parametrize("status", ["error", "crash"])
def test_error_and_crash_are_bad_only_when_asked(status):
    rec = {"status": status, "reason": "Fail: [ONNXRuntimeError] : 1 : FAIL : Load model failed"}
    assert classify(rec, parse_predicate("nan-or-inf"))[0] == status  # stepped around
    verdict, why, held = classify(rec, parse_predicate(["nan-or-inf", status]))
    assert (verdict, held) == ("bad", [status]) and "Load model failed" in why
    other = "crash" if status == "error" else "error"
    assert classify(rec, parse_predicate(other))[0] == status
    assert classify(record_with(np.ones((1, 1))), parse_predicate(status))[:2] == (
        "good", "loads and runs (0 NaN rows, 0 Inf rows of 2)")


def test_several_bad_ifs_are_one_predicate_bad_if_any_holds():
    p = parse_predicate(["nan", "error,crash", "nan"])
    assert str(p) == "nan,error,crash" and parse_predicate(str(p)) == p
    assert p.words() == ("an output row holds NaN, or the model fails to load or run, or the worker process dies "
                         "(by a signal or without a result)")
    assert str(parse_predicate("cosine < 0.999")) == "cosine<0.999"
    assert parse_predicate("cosine<0.999").needs_reference and not parse_predicate("headroom>0.5").needs_reference


@pytest.mark.parametrize("text", ["cosine<0.99999995", "abs-diff>1.2345678e-07", "slower>1.0000001", "max-abs>65504.5"])
def test_a_bound_past_six_digits_is_kept_whole_in_the_predicates_text(text):
    """Readers judge a run's probes again from its predicate's text: rounded, `cosine<0.99999995` read back as
    `cosine<1` and turned the run's good release bad in every artifact."""
    p = parse_predicate(text)
    assert str(p) == text and parse_predicate(str(p)) == p
    assert text.split("<")[-1].split(">")[-1] in p.words()
    assert str(parse_predicate("abs-diff>1e-4")) == "abs-diff>0.0001"  # short bounds keep their short text


@pytest.mark.parametrize("text", ["nan>1", "max-abs", "rel-diff", "sometimes", "max-abs>x", "cosine>0.9",
                                  "max-abs<3", "error>1", "cosine", "", "abs-diff", "abs-diff<1",
                                  "rel-diff>1e-3@", "rel-diff>1e-3@x", "rel-diff>1e-3@2e-5", "rel-diff>1e-3@1e-12",
                                  "cosine<0.9@1e-5", "abs-diff>1@1e-3", "rel-diff@1e-5", "rel-diff>1e-3@1e-5@1e-4"])
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


def softmax_pair():
    """An fp32 softmax over wide logits (exact zeros and tiny values in the reference) and the same outputs one
    ulp away: every value one ulp up, and a few exact zeros turned into one ulp of 1.0 (2**-23), as a
    probability computed through 1 - p reads on another build."""
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 40, (8, 64)).astype(np.float32)
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    ref = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    assert (ref == 0).any() and ((ref > 0) & (ref < 1e-30)).any()
    out = np.nextafter(ref, np.float32(np.inf))
    zeros = np.argwhere(ref == 0)[:3]
    out[tuple(zeros.T)] = np.float32(2.0 ** -23)
    return out, ref


def test_a_one_ulp_change_of_a_softmax_is_not_a_large_relative_difference():
    out, ref = softmax_pair()
    c = compare(out, ref)
    assert c["rel_diff_max"] < 1e-3  # was 1.0e+31: 2**-23 over float32's tiny
    assert c["abs_diff_max"] == pytest.approx(2.0 ** -23)
    judged = judge(record_with(out), parse_predicate("rel-diff>1e-3"), {"y": ref}, {"y": out}, "ref")
    assert judged["verdict"] == "good", judged["why"]
    # a real change of one probability is still one
    worse = ref.copy()
    worse[0, np.argmax(ref[0])] *= 0.99
    assert judge(record_with(worse), parse_predicate("rel-diff>1e-3"), {"y": ref}, {"y": worse}, "ref")["verdict"] == "bad"


def test_the_floor_is_settable_and_a_stored_probe_is_judged_again_under_another():
    out, ref = softmax_pair()
    rec = record_with(out)
    rec["metrics"] = judge(rec, parse_predicate("rel-diff>1e-3"), {"y": ref}, {"y": out}, "ref")["metrics"]
    low = parse_predicate("rel-diff>1e-3@1e-9")
    assert str(low) == "rel-diff>0.001@1e-09" and parse_predicate(str(low)) == low
    assert parse_predicate("rel-diff>1e-3@1e-3") == parse_predicate("rel-diff>1e-3")  # the default floor
    judged = judge(rec, low)  # from the stored metrics: no reference at hand
    assert judged["verdict"] == "bad" and "floor 1e-09" in judged["why"]
    assert judge(rec, parse_predicate("rel-diff>1e-3"))["verdict"] == "good"
    assert "1e-09 of the output's largest |r|" in low.words()


def test_abs_diff_needs_a_reference_and_judges_the_largest_difference():
    out, ref = softmax_pair()
    p = parse_predicate("abs-diff>1e-6")
    assert p.needs_reference and str(p) == "abs-diff>1e-06"
    assert judge(record_with(out), p, {"y": ref}, {"y": out}, "ref")["verdict"] == "good"
    assert judge(record_with(out), parse_predicate("abs-diff>1e-8"), {"y": ref}, {"y": out}, "ref")["verdict"] == "bad"
    assert judge(record_with(out), p)["verdict"] == "error"  # no comparison made
    nan = out.copy()
    nan[1, 1] = np.nan
    judged = judge(record_with(nan), p, {"y": ref}, {"y": nan}, "ref")
    assert judged["verdict"] == "bad" and judged["metrics"]["abs_diff_max"] == pytest.approx(2.0 ** -23)


def test_a_probe_measured_without_a_floor_is_cleared_only_by_its_upper_bound():
    rec = record_with(np.ones((1, 1)))
    rec["metrics"] = {"outputs": {}, "reference": "ref", "cosine_min": 1.0, "rel_diff_max": 1e31, "nonfinite_rows": 0}
    assert judge(rec, parse_predicate("rel-diff>1e-3"))["verdict"] == "error"
    rec["metrics"]["rel_diff_max"] = 1e-5
    assert judge(rec, parse_predicate("rel-diff>1e-3"))["verdict"] == "good"


def test_cosine_reads_the_same_everywhere():
    from harness.metrics import cosine_text

    assert cosine_text(0.9999995) == "0.99999950"
    assert cosine_text(1 - 4e-10) == "1-4.0e-10" and cosine_text(1.0) == "1.00000000" and cosine_text(None) == "-"


def test_outputs_bit_identical_to_the_reference_read_identical_bits_with_a_cosine_of_exactly_1():
    """silero-vad on 1.20.1 against 1.20.1's own outputs read a worst cosine of 1-1.1e-16: the sum of squares over
    two norms rounds below 1 for most rows. Equal rows have cosine 1 exactly, and bit-identical outputs say so."""
    from harness.metrics import cosine_said, probe_metrics

    y = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    result = {"outputs": [{"name": "y"}]}
    m = probe_metrics(result, {"y": y.copy()}, {"y": y}, "ref")
    assert m["cosine_min"] == 1.0 and m["identical"] is True and cosine_said(m) == "identical bits"
    judged = judge(record_with(y), parse_predicate("cosine<0.999"), {"y": y}, {"y": y.copy()}, "ref")
    assert judged["why"] == "worst row's cosine 1.00000000 (identical bits)"
    assert judge(record_with(y), parse_predicate("abs-diff>0"), {"y": y}, {"y": y.copy()}, "ref")["why"] == \
        "max absolute difference 0 (identical bits)"
    moved = y.copy()
    moved[2, 5] = np.nextafter(moved[2, 5], np.float32(np.inf))  # one ulp in one row: the others are still exact
    m = probe_metrics(result, {"y": moved}, {"y": y}, "ref")
    assert m["identical"] is False and cosine_said(m) != "identical bits" and m["cosine_min"] <= 1.0
    assert probe_metrics(result, {"y": y.astype(np.float16)}, {"y": y.astype(np.float16).astype(np.float32)},
                         "ref")["identical"] is False  # the same values in another dtype are not the same bits
