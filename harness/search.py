"""The search over an ordered list of releases. Pure: no I/O, no printing.

`ddmin` (delta debugging) is the same kind of search over subsets: reduce and blame use it.

The driver asks `bisect_step` (or `sweep_step`) which releases to probe next,
given every verdict known so far, probes them, and asks again. Because the
whole state is the list of verdicts, resuming an interrupted run, probing K
releases per round and prefetching environments are all the same loop.

Verdict vocabulary follows git bisect: *good* and *bad* are decisive; every
other verdict (skip, error, crash, timeout, nondeterministic) is stepped around.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

DECISIVE = ("good", "bad")
MODES = {"regression": ("good", "bad"), "fix": ("bad", "good")}


def is_decisive(verdict: str | None) -> bool:
    return verdict in DECISIVE


@dataclass(frozen=True)
class Step:
    """What the search knows after the verdicts it was given.

    status: "probing" (probe `next`), "found" (boundary between `lo` and `hi`),
    "endpoints_agree", "wrong_direction" (the range goes the other way for
    this mode), "undecidable" (no decisive verdict at one end).
    """

    status: str
    next: tuple[int, ...] = ()
    lo: int | None = None  # last index with the old verdict
    hi: int | None = None  # first index with the new verdict
    untestable: tuple[int, ...] = ()  # skip-like indices between lo and hi
    monotone: bool = True
    prefetch: tuple[int, ...] = ()  # likely next probes, whichever way `next` turns out

    @property
    def done(self) -> bool:
        return self.status != "probing"


def _end(verdicts: Sequence[str | None], order: Sequence[int]) -> tuple[str, int | None]:
    """Walk from one end: ("decided", i), ("probe", i) or ("none", None)."""
    for i in order:
        v = verdicts[i]
        if v is None:
            return "probe", i
        if is_decisive(v):
            return "decided", i
    return "none", None


def _spread(candidates: Sequence[int], k: int) -> tuple[int, ...]:
    """k indices that cut `candidates` into k+1 nearly equal parts (k=1: the median)."""
    n = len(candidates)
    if k >= n:
        return tuple(candidates)
    picks = sorted({candidates[((j + 1) * (n + 1)) // (k + 1) - 1] for j in range(k)})
    return tuple(picks)


def bisect_step(verdicts: Sequence[str | None], mode: str = "regression", k: int = 1) -> Step:
    """Next probes for a bisection, or its result.

    `verdicts[i]` is the verdict of the i-th release in version order, or None
    when it has not been probed. Both endpoints are probed first; then the
    first release whose verdict differs from the first endpoint's is searched
    for, `k` probes per round (k-ary search).
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    if k < 1:
        raise ValueError("k must be at least 1")
    n = len(verdicts)
    if n == 0:
        return Step("undecidable")
    old, new = MODES[mode]

    lo_state, lo_end = _end(verdicts, range(n))
    hi_state, hi_end = _end(verdicts, range(n - 1, -1, -1))
    pending = tuple(sorted({i for s, i in ((lo_state, lo_end), (hi_state, hi_end)) if s == "probe"}))
    if pending:
        # if the ends differ, the next round probes inside them: its environments (and workers) can start now
        inner = [i for i in range(pending[0] + 1, pending[-1]) if verdicts[i] is None] if len(pending) == 2 else []
        return Step("probing", next=pending, prefetch=_spread(inner, k) if inner else ())
    if lo_state == "none":
        return Step("undecidable")
    if lo_end == hi_end:  # a single release, or a single decisive one among skips
        return Step("endpoints_agree" if n == 1 else "undecidable", lo=lo_end, hi=hi_end)
    if verdicts[lo_end] == verdicts[hi_end]:
        return Step("endpoints_agree", lo=lo_end, hi=hi_end, monotone=_monotone(verdicts))
    if verdicts[lo_end] != old:
        return Step("wrong_direction", lo=lo_end, hi=hi_end, monotone=_monotone(verdicts))

    # The first release with the new verdict, and the last old one before it.
    hi = next(i for i in range(lo_end + 1, n) if verdicts[i] == new)
    lo = max(i for i in range(lo_end, hi) if verdicts[i] == old)
    monotone = _monotone(verdicts)
    between = range(lo + 1, hi)
    candidates = [i for i in between if verdicts[i] is None]
    if not candidates:
        return Step("found", lo=lo, hi=hi, untestable=tuple(between), monotone=monotone)
    picks = _spread(candidates, k)
    return Step(
        "probing",
        next=picks,
        lo=lo,
        hi=hi,
        monotone=monotone,
        prefetch=_prefetch(candidates, picks, k),
    )


def probes_left(verdicts: Sequence[str | None], mode: str = "regression", k: int = 1, sweep: bool = False) -> int:
    """The most probes the search still makes, as it stands, if no release is skipped or fails to run (a skip
    adds one): a sweep probes what is left; a bisection its pending ends, then a k-ary search of what lies
    between them."""
    unknown = sum(1 for v in verdicts if v is None)
    if sweep:
        return unknown
    step = bisect_step(verdicts, mode, k)
    if step.done:
        return 0
    if step.lo is None:  # the ends first: then everything between them may be searched
        return len(step.next) + _kary(unknown - len(step.next), k)
    return _kary(sum(1 for i in range(step.lo + 1, step.hi) if verdicts[i] is None), k)


def _kary(m: int, k: int) -> int:
    """Probes a k-ary search of m candidates makes at most: k a round, then the largest part left."""
    probes = 0
    while m > 0:
        take = min(k, m)
        probes += take
        m = -(-(m - take) // (k + 1))
    return probes


def _prefetch(candidates: list[int], picks: tuple[int, ...], k: int) -> tuple[int, ...]:
    """The probes the next round would ask for, for each way this round can end."""
    bounds = [-1, *(candidates.index(p) for p in picks), len(candidates)]
    nxt: list[int] = []
    for a, b in zip(bounds, bounds[1:]):
        part = candidates[a + 1 : b]
        nxt.extend(_spread(part, k) if part else ())
    return tuple(sorted(set(nxt)))


def sweep_step(verdicts: Sequence[str | None], k: int = 1) -> Step:
    """Probe every release, k at a time, in version order."""
    pending = [i for i, v in enumerate(verdicts) if v is None]
    if pending:
        return Step("probing", next=tuple(pending[:k]), prefetch=tuple(pending[k : 2 * k]))
    trans = transitions(verdicts)
    decided = [i for i, v in enumerate(verdicts) if is_decisive(v)]
    if not decided:
        return Step("undecidable")
    if not trans:
        return Step("endpoints_agree", lo=decided[0], hi=decided[-1])
    lo, hi = trans[0]
    return Step("found", lo=lo, hi=hi, untestable=tuple(range(lo + 1, hi)), monotone=len(trans) == 1)


def transitions(verdicts: Sequence[str | None]) -> list[tuple[int, int]]:
    """Pairs (i, j) of consecutive decisive verdicts that differ, skip-likes stepped over."""
    decided = [i for i, v in enumerate(verdicts) if is_decisive(v)]
    return [(a, b) for a, b in zip(decided, decided[1:]) if verdicts[a] != verdicts[b]]


def _monotone(verdicts: Sequence[str | None]) -> bool:
    return len(transitions(verdicts)) <= 1


@dataclass
class Simulation:
    """Replay of a search against a known verdict list (tests and benchmarks)."""

    step: Step
    probed: list[int] = field(default_factory=list)
    rounds: int = 0


def simulate(truth: Sequence[str], mode: str = "regression", k: int = 1, sweep: bool = False) -> Simulation:
    known: list[str | None] = [None] * len(truth)
    sim = Simulation(step=Step("probing"))
    while True:
        step = sweep_step(known, k) if sweep else bisect_step(known, mode, k)
        if step.done:
            sim.step = step
            return sim
        sim.rounds += 1
        for i in step.next:
            known[i] = truth[i]
            sim.probed.append(i)


def ddmin(items: list, still_fails: Callable[[list], bool]) -> list:
    """Zeller's delta debugging: a 1-minimal sublist of `items` for which `still_fails` holds.

    `items` itself must fail. Subsets are tried before complements, so a
    single failing item is found in about log2(len) steps.
    """
    n = 2
    while len(items) >= 2:
        size = len(items)
        chunks = [items[i * size // n:(i + 1) * size // n] for i in range(n)]
        chunks = [c for c in chunks if c]
        for chunk in chunks:
            if still_fails(chunk):
                items, n = chunk, 2
                break
        else:
            for chunk in chunks:
                rest = [x for x in items if x not in chunk]
                if len(chunks) > 2 and still_fails(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    return items
                n = min(len(items), 2 * n)
    return items
