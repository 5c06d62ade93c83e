"""The search function on its own: verdict lists in, boundary and probes out."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.search import bisect_step, probes_left, simulate, sweep_step, transitions

G, B, S = "good", "bad", "skip"


def run(truth, mode="regression", k=1):
    sim = simulate(truth, mode=mode, k=k)
    return sim.step, sim.probed


@pytest.mark.parametrize(
    "name, truth, mode, status, lo, hi, untestable, monotone",
    [
        ("monotone regression", [G] * 5 + [B] * 17, "regression", "found", 4, 5, (), True),
        ("regression at the last release", [G] * 21 + [B], "regression", "found", 20, 21, (), True),
        ("regression at the second release", [G] + [B] * 21, "regression", "found", 0, 1, (), True),
        ("fix mode", [B] * 7 + [G] * 3, "fix", "found", 6, 7, (), True),
        ("endpoints agree (good)", [G] * 8, "regression", "endpoints_agree", 0, 7, (), True),
        ("endpoints agree (bad)", [B] * 8, "regression", "endpoints_agree", 0, 7, (), True),
        ("single release", [B], "regression", "endpoints_agree", 0, 0, (), True),
        ("two releases", [G, B], "regression", "found", 0, 1, (), True),
        ("skips around the boundary", [G, G, G, S, S, B, B, B], "regression", "found", 2, 5, (3, 4), True),
        ("skip just before the boundary", [G, G, S, B, B, B], "regression", "found", 1, 3, (2,), True),
        ("skipped endpoints are stepped around", [S, G, G, B, B, S], "regression", "found", 2, 3, (), True),
        ("crash and timeout count as skips", [G, "crash", "timeout", B], "regression", "found", 0, 3, (1, 2), True),
        ("wrong direction for the mode", [B, B, G, G], "regression", "wrong_direction", 0, 3, (), True),
        ("nothing decisive", [S, S, "error"], "regression", "undecidable", None, None, (), True),
        ("one decisive among skips", [S, G, S], "regression", "undecidable", 1, 1, (), True),
    ],
)
def test_bisect_table(name, truth, mode, status, lo, hi, untestable, monotone):
    step, probed = run(truth, mode)
    assert (step.status, step.lo, step.hi, step.untestable, step.monotone) == (status, lo, hi, untestable, monotone), name
    assert len(probed) == len(set(probed)), "no release is probed twice"


def test_endpoints_are_probed_first():
    step = bisect_step([None] * 10)
    assert step.next == (0, 9)


def test_non_monotone_is_reported_when_seen():
    # A resumed run (or a parallel round) may know verdicts that cross twice.
    step = bisect_step([G, B, None, G, None, B])
    assert not step.monotone
    assert (step.lo, step.hi) == (0, 1)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 13, 22, 25, 64])
def test_probe_bound_for_every_boundary(n):
    bound = math.ceil(math.log2(n)) + 2
    for b in range(1, n):
        step, probed = run([G] * b + [B] * (n - b))
        assert (step.lo, step.hi) == (b - 1, b)
        assert len(probed) <= bound, (n, b, len(probed))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_k_ary_search_finds_the_same_boundary_in_fewer_rounds(k):
    n = 25
    for b in range(1, n):
        truth = [G] * b + [B] * (n - b)
        serial = simulate(truth, k=1)
        parallel = simulate(truth, k=k)
        assert (parallel.step.lo, parallel.step.hi) == (b - 1, b)
        assert parallel.rounds <= serial.rounds


def test_prefetch_names_the_next_round_either_way():
    known = [None] * 22
    known[0], known[21] = G, B
    step = bisect_step(known)
    (mid,) = step.next
    for outcome in (G, B):
        after = list(known)
        after[mid] = outcome
        assert set(bisect_step(after).next) <= set(step.prefetch)


@pytest.mark.parametrize("k", [1, 2])
def test_while_the_endpoints_run_the_round_after_them_is_prefetched(k):
    step = bisect_step([None] * 22, k=k)
    assert step.next == (0, 21)
    after = [G] + [None] * 20 + [B]
    assert set(bisect_step(after, k=k).next) <= set(step.prefetch) and step.prefetch
    assert bisect_step([None, None]).prefetch == ()  # nothing lies between


def test_sweep_lists_every_transition():
    truth = [G, G, B, B, S, G, B]
    sim = simulate(truth, sweep=True)
    assert sorted(sim.probed) == list(range(len(truth)))
    assert transitions(truth) == [(1, 2), (3, 5), (5, 6)]
    assert not sim.step.monotone
    assert sweep_step(truth).status == "found"


# -- properties -------------------------------------------------------------------------

@st.composite
def one_transition_with_skips(draw):
    n = draw(st.integers(2, 40))
    b = draw(st.integers(1, n - 1))  # first new index
    truth = [G] * b + [B] * (n - b)
    skips = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
    for i in skips:
        truth[i] = draw(st.sampled_from([S, "error", "crash", "timeout"]))
    # the boundary is decidable: a decisive verdict on each side
    if not any(v == G for v in truth[:b]) or not any(v == B for v in truth[b:]):
        truth[0], truth[-1] = G, B
    return truth


@given(one_transition_with_skips(), st.integers(1, 4))
@settings(max_examples=400, deadline=None)
def test_property_true_boundary_despite_skips(truth, k):
    step = simulate(truth, k=k).step
    assert step.status == "found" and step.monotone
    last_old = max(i for i, v in enumerate(truth) if v == G)
    first_new = min(i for i, v in enumerate(truth) if v == B)
    assert (step.lo, step.hi) == (last_old, first_new)
    assert all(truth[i] not in (G, B) for i in step.untestable)


@given(st.lists(st.sampled_from([G, B, S]), min_size=2, max_size=30), st.integers(1, 4))
@settings(max_examples=400, deadline=None)
def test_property_sweep_reports_non_monotone(truth, k):
    step = simulate(truth, k=k, sweep=True).step
    n_trans = len(transitions(truth))
    assert step.monotone == (n_trans <= 1)
    assert (step.status == "found") == (n_trans >= 1)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 60), cut=st.integers(0, 60), k=st.integers(1, 4), mode=st.sampled_from(["regression", "fix"]),
       sweep=st.booleans())
def test_the_probes_left_bound_is_never_passed_and_a_sweep_s_is_exact(n, cut, k, mode, sweep):
    """What `run` prints as "probe i of at most N": at every round, the probes still to come are at most the bound
    (a bisection knows it: the ends, then a k-ary search of what lies between); a sweep's is what is left."""
    old, new = ("good", "bad") if mode == "regression" else ("bad", "good")
    truth = [old if i < min(cut, n) else new for i in range(n)]
    known: list = [None] * n
    bounds, made = [], 0
    while True:
        step = sweep_step(known, k) if sweep else bisect_step(known, mode, k)
        if step.done:
            break
        bounds.append((made, probes_left(known, mode, k, sweep)))
        for i in step.next:
            known[i] = truth[i]
            made += 1
    for before, bound in bounds:
        assert made - before <= bound
        if sweep:
            assert made - before == bound
    assert probes_left(known, mode, k, sweep) == 0
