"""Whether `bisect report` reduces its run first, and that reduction.

A report without a reduced repro hands a maintainer the full model, which they may not have (a user's own file)
or may need minutes to run. A reduction (harness.triage.reduce) probes each candidate on both releases of the
pair: some 50 to 150 probes, each loading a candidate no bigger than the model and running at most its batch. The
report makes one by itself only when that is cheap, judged from the pair's own probes in the run (how long the
model took to load and to run); `--reduce` makes one whatever it costs, `--no-reduce` never. What was decided is
said in one line, with its reason and what to run otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

ESTIMATE_PROBES = 100  # a reduction's probes, about (81 on gemma-tiny-fused's 20 rows and 221 nodes)
ROW_PHASE_RUNS = 20  # of them, the ones that run (nearly) the whole batch: the row search's first candidates
CHEAP_S = 60.0  # a reduction the report makes unasked takes about this long at most


@dataclass(frozen=True)
class Advice:
    reduce: bool
    said: str  # one line for the command to print


def estimate_s(records: list[dict]) -> float | None:
    """Seconds a reduction takes, about, from the pair's own probes: every candidate loads a model (the full
    model's session time at most) and the row search's first ones run most of the batch. None: no probe says."""
    def seconds(key: str) -> float | None:
        found = [(r.get("result") or {}).get(key) for r in records]
        found = [x for x in found if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)]
        return max(found) if found else None

    session, run = seconds("session_s"), seconds("run_s")
    if session is None or run is None:
        return None
    return ESTIMATE_PROBES * session + ROW_PHASE_RUNS * run


def advice(run_dir: Path, cache_dir: Path, offline: bool, question: str | None, bad_if: str | None,
           asked: bool | None, probe: bool = True) -> Advice:
    """Whether the report reduces the run first: `asked` True (--reduce), False (--no-reduce) or None (when it
    is cheap, and the run has a boundary and no reduction of its question yet; never under --no-probe)."""
    from harness.request import release_listing
    from harness.results.store import REDUCED, RunStore
    from harness.session import asked_with_records, question_boundary

    store = RunStore(run_dir)
    asked_q, records = asked_with_records(store, question, bad_if, "report")
    q = asked_q.question
    where = f"{run_dir.name}/{REDUCED}/"
    done = RunStore(run_dir / REDUCED).document("reduce") if (run_dir / REDUCED).is_dir() else None
    if isinstance(done, dict) and done.get("predicate") == str(q.predicate):
        return Advice(False, f"the reduction in {where} answers this question: the report uses it")
    if asked is False:
        return Advice(False, "no reduction (--no-reduce): the report carries the full model, or names it")
    if asked:
        return Advice(True, "reducing first (--reduce)")
    if not probe:
        return Advice(False, "no reduction (--no-probe): bisect report RUN --reduce, or bisect reduce RUN, makes one")
    if isinstance(done, dict):
        return Advice(False, f"{where} holds a reduction of another question, kept: bisect report RUN --reduce "
                             "replaces it with one of this question")
    if q.predicate.timed:
        return Advice(False, "no reduction: a slowdown's verdicts are timed against a baseline, not reduced")
    pair = question_boundary(records, release_listing(cache_dir, offline), q).pair
    if pair is None:
        return Advice(False, "no reduction: the run shows no boundary to reduce")
    cost = estimate_s([records[v] for v in (pair.good, pair.bad) if v in records])
    if cost is None or cost > CHEAP_S:
        about = f"about {cost / 60:.0f} min" if cost is not None else "a time its probes do not tell"
        return Advice(False, f"no reduction: one would take {about} of probes (bisect report RUN --reduce, or "
                             "bisect reduce RUN, makes one); the report carries the full model, or names it")
    return Advice(True, f"reducing first, for a repro a maintainer can run in seconds: about {cost:.0f} s of probes "
                        f"at most, judged from the pair's probes (--no-reduce skips it)")


def reduce_first(run_dir: Path, cache_dir: Path, offline: bool, question: str | None, bad_if: str | None, *,
                 explicit: bool, log, observer, command: list[str] | None = None) -> str | None:
    """Reduce the run's question (results/<run>/reduced/) before the report is made: None when it was made, else
    why not, in one line. Asked for (`explicit`), a refusal or a failure is the command's; unasked, the report
    goes on without it."""
    from harness.errors import HarnessError, UsageError
    from harness.triage.reduce import NoFlip, reduce_saved_run

    try:
        doc = reduce_saved_run(run_dir, cache_dir, offline, log=log, command=command, question=question,
                               bad_if=bad_if, observer=observer)
    except NoFlip as exc:
        return f"no reduction: {exc}"
    except (UsageError, HarnessError) as exc:
        if explicit:
            raise
        return f"no reduction: {exc}"
    if not doc["verified"]["flips"]:
        return "no reduction: the reduced pair does not flip when verified"
    return None
