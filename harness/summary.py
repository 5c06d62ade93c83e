"""What a search asks and what it found, as a JSON document and a sentence. Pure: no I/O."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from harness.driver import RunOutcome
from harness.search import MODES, transitions
from harness.verdicts import Predicate, parse_predicate

EXIT_FOUND = 0
EXIT_NO_BOUNDARY = 3
EXIT_NOTHING_REDUCED = 4  # `bisect reduce`: the pair flips, and nothing of it could be dropped
UPSTREAM = "https://github.com/microsoft/onnxruntime"


@dataclass(frozen=True)
class Question:
    """What one search asks of a run's probes: when a release is bad (`predicate`), compared with what
    (`reference`: its kind, id and label, and a file's path; None when nothing is compared), in which direction
    (`mode`: regression, fix or sweep) and over which releases (`first`..`last`).

    The probes of a run are shared by its questions and judged again under each; the run document of each
    question is its own (cells/<key>.json), so two references or two ranges never overwrite each other."""

    predicate: Predicate
    reference: dict | None
    mode: str
    first: str
    last: str

    @property
    def key(self) -> str:
        """The name of its run document under cells/: one file name (no `>`, `<` or `:` in it)."""
        key = f"{self.mode}-{self.first}-{self.last}-{self.predicate}"
        if self.reference:
            key += f"-vs-{self.reference.get('id')}"
        return "".join("_" if c in "<>:/\\" else c for c in key)

    def document(self) -> dict:
        return {"predicate": str(self.predicate), "reference": self.reference, "mode": self.mode,
                "range": [self.first, self.last]}

    def words(self) -> str:
        """What bad means, in a sentence's words."""
        return self.predicate.words((self.reference or {}).get("label") or "the reference")

    def asking(self, predicate: Predicate) -> Question:
        """Another predicate over the same range; the reference stays only when the predicate compares."""
        return dataclasses.replace(self, predicate=predicate,
                                   reference=self.reference if predicate.needs_reference else None)

    @classmethod
    def of_document(cls, doc: dict) -> Question:
        """The question of a run document (a parsed cell document); one written before documents held their
        question is read from its predicate, reference, mode and releases."""
        q = doc.get("question") if isinstance(doc.get("question"), dict) else {}
        releases = doc.get("releases") or [None]
        first, last = (q.get("range") or [releases[0], releases[-1]])[:2]
        return cls(parse_predicate(q.get("predicate") or doc.get("predicate") or str(Predicate())),
                   q["reference"] if "reference" in q else doc.get("reference"),
                   q.get("mode") or doc.get("mode") or "regression", first, last)


def has_boundary(doc: dict) -> bool:
    """Whether a run document found the boundary its question asks for: a reader answers the newest question
    that did (harness.session.asked_of_run), and a later one that found none never takes its place."""
    return doc.get("status") == "found"


def build_of(record: dict | None) -> dict:
    """The commit and branch onnxruntime was built from, as `get_build_info()` reported them in the probe."""
    from harness.releases.packages import parse_build_info

    return parse_build_info((((record or {}).get("result") or {}).get("onnxruntime") or {}).get("build_info"))


def compare_url(old: str | None, new: str | None) -> str | None:
    """The upstream page of the commits between two builds."""
    return f"{UPSTREAM}/compare/{old}...{new}" if old and new else None


def summary(outcome: RunOutcome, mode: str, run_id: str, sweep: bool = False) -> dict:
    """The run as one JSON-able document (the `--json` output)."""
    step = outcome.step
    rel = outcome.releases
    old, new = MODES[mode]
    probes = []
    for r in rel:
        rec = outcome.records.get(r.version)
        if rec is None:
            continue
        m = rec.get("metrics") or {}
        probes.append({
            "version": r.version,
            "verdict": rec["verdict"],
            "why": rec.get("why"),
            "decided_by": rec.get("decided_by") or [],
            # timing: the ratio to the baseline, its interval and the runs behind it (slower, rss)
            "metrics": {k: m.get(k) for k in ("max_abs", "headroom", "cosine_min", "rel_diff_max", "abs_diff_max",
                                              "identical", "timing") if k in m},
            "nan_rows": rec.get("nan_rows"),
            "inf_rows": rec.get("inf_rows"),
            "rows": rec.get("rows"),
            "seconds": round(rec.get("seconds") or 0.0, 3),
            "reused": r.version not in outcome.probed_now,
            "commit": build_of(rec)["commit"],
        })
    known = [outcome.verdict(i) for i in range(len(rel))]
    status, lo_i, hi_i = step.status, step.lo, step.hi
    untestable = step.untestable
    if sweep:  # the boundary is the first transition the mode looks for, not the first of any kind
        status, lo_i, hi_i = sweep_boundary(known, mode, step.status)
        untestable = tuple(range(lo_i + 1, hi_i)) if status == "found" else ()
    doc = {
        "run_id": run_id,
        "mode": "sweep" if sweep else mode,
        "status": status,
        "monotone": step.monotone,
        "releases": [r.version for r in rel],
        "probes": probes,
        "probe_count": len(probes),
        "release_count": len(rel),
        "provenance": next(iter(outcome.records.values()), {}).get("provenance", {}),
    }
    lo = rel[lo_i].version if status == "found" else None
    hi = rel[hi_i].version if status == "found" else None
    doc[f"last_{old}"], doc[f"first_{new}"] = lo, hi
    commits = {v: build_of(outcome.records.get(v))["commit"] if v else None for v in (lo, hi)}
    doc["commits"] = {f"last_{old}": commits[lo], f"first_{new}": commits[hi],
                      "compare": compare_url(commits[lo], commits[hi])} if status == "found" else None
    doc["untestable"] = [rel[i].version for i in untestable]
    if sweep:
        doc["transitions"] = [
            {"from": rel[a].version, "to": rel[b].version, "verdicts": [known[a], known[b]]}
            for a, b in transitions(known)
        ]
    doc["message"] = sentence(doc, outcome, mode)
    return doc


def sweep_boundary(known: list[str | None], mode: str, status: str) -> tuple[str, int | None, int | None]:
    """(status, lo, hi) of a sweep: its first transition from the mode's old verdict to its new one; a sweep
    whose only transitions go the other way is the wrong direction, not a boundary found."""
    old, new = MODES[mode]
    pairs = transitions(known)
    for a, b in pairs:
        if (known[a], known[b]) == (old, new):
            return "found", a, b
    if pairs:
        return "wrong_direction", pairs[0][0], pairs[0][1]
    return status, None, None


def sweep_words(doc: dict, mode: str, counted: str) -> str:
    """A sweep's verdicts from its transitions: "bad until 1.27.0, good from 1.28.0: fixed at 1.28.0"."""
    moves = doc["transitions"]
    parts = []
    for i, t in enumerate(moves):
        before, after = t["verdicts"]
        parts.append(f"{before} until {t['from']}" if i == 0 else f"{before} from {moves[i - 1]['to']} to {t['from']}")
    parts.append(f"{moves[-1]['verdicts'][1]} from {moves[-1]['to']}")
    what = {("good", "bad"): "broken", ("bad", "good"): "fixed"}
    events = ", ".join(f"{what[tuple(t['verdicts'])]} at {t['to']}" for t in moves)
    text = ", ".join(parts) + f": {events} ({counted})."
    old, new = MODES[mode]
    if doc["status"] == "found" and len(moves) > 1:
        text += f" Last {old}: {doc[f'last_{old}']}, first {new}: {doc[f'first_{new}']} (the first {old}-to-{new})."
    elif doc["status"] != "found":
        text += f" No {old} release is followed by a {new} one: no {'regression' if mode == 'regression' else 'fix'} " \
                "in this range."
    return text


def sentence(doc: dict, outcome: RunOutcome, mode: str) -> str:
    old, new = MODES[mode]
    rel = outcome.releases
    step = outcome.step
    counted = f"{doc['probe_count']} probes out of {doc['release_count']} releases"
    if doc["mode"] == "sweep" and doc.get("transitions"):
        text = sweep_words(doc, mode, counted)
        if doc["untestable"]:
            text += f" Untestable in between: {', '.join(doc['untestable'])}; the change is in one of them or at {doc[f'first_{new}']}."
        if not doc["monotone"]:
            text += " The verdicts change more than once: the regression is not monotone."
        return text
    if step.status == "found":
        text = f"Last {old}: {doc[f'last_{old}']}, first {new}: {doc[f'first_{new}']} ({counted})."
        if doc["untestable"]:
            text += f" Untestable in between: {', '.join(doc['untestable'])}; the change is in one of them or at {doc[f'first_{new}']}."
    elif step.status == "endpoints_agree":
        if len(rel) == 1:
            text = f"Only one release in the range ({rel[0].version}): nothing to bisect."
        else:
            v = outcome.verdict(step.lo) if step.lo is not None else "the same"
            text = f"Both ends are {v} ({rel[step.lo].version} and {rel[step.hi].version}): no change to find in this range ({counted})."
    elif step.status == "wrong_direction":
        other = "fix" if mode == "regression" else "regression"
        text = (f"{rel[step.lo].version} is {outcome.verdict(step.lo)} and {rel[step.hi].version} is "
                f"{outcome.verdict(step.hi)}: that is a {other}; run again with --mode {other} ({counted}).")
    else:
        text = f"No release in the range could be judged good or bad ({counted}); see the reasons in the table."
    if not doc["monotone"]:
        text += " The verdicts change more than once: the regression is not monotone"
        text += "." if doc["mode"] == "sweep" else "; run `bisect sweep` to see every transition."
    return text


@dataclass(frozen=True)
class Pair:
    """The two releases a search found, by which side is bad: a regression's last good and first bad release,
    a fix's first good and last bad (the bad side of a fix is the OLDER release). Readers of a run (report,
    reduce, blame) work between `good` and `bad` and name them as the run document does (`ends`)."""

    good: str
    bad: str
    mode: str = "regression"  # a sweep's pair reads as a regression's: it looks for good-to-bad

    @property
    def fix(self) -> bool:
        return self.mode == "fix"

    @property
    def older(self) -> str:
        return self.bad if self.fix else self.good

    @property
    def newer(self) -> str:
        return self.good if self.fix else self.bad

    @classmethod
    def of_span(cls, older: str, newer: str, mode: str) -> Pair:
        """The pair of two releases in version order, searched in `mode`."""
        return cls(newer, older, mode) if mode == "fix" else cls(older, newer, mode)

    def ends(self) -> dict[str, str]:
        """The pair by the names a run document of its mode gives it: {last_good, first_bad} or {last_bad, first_good}."""
        first, second = end_names(self.mode)
        return {first: self.older, second: self.newer}

    def words(self) -> str:
        """"last good 1.19.2, first bad 1.20.0" or "last bad 1.26.0, first good 1.27.0"."""
        return ", ".join(f"{name.replace('_', ' ')} {v}" for name, v in self.ends().items())


def end_names(mode: str) -> tuple[str, str]:
    """The keys a document of `mode` names its pair by, older first: ("last_good", "first_bad") of a regression
    or a sweep, ("last_bad", "first_good") of a fix."""
    old, new = MODES.get(mode, MODES["regression"])
    return f"last_{old}", f"first_{new}"


def boundary_of(doc: dict) -> tuple[str, str] | None:
    """The release pair a run document's search found, older first: a regression's last good and first bad, a
    fix's last bad and first good (a sweep's, by the keys its mode gave it); None where it found none."""
    if doc.get("status") != "found":
        return None
    for old, new in [MODES[doc["mode"]]] if doc.get("mode") in MODES else MODES.values():
        if doc.get(f"last_{old}") and doc.get(f"first_{new}"):
            return doc[f"last_{old}"], doc[f"first_{new}"]
    return None


def exit_status(doc: dict) -> int:
    """0 when the search found the boundary it looks for (a sweep: a transition the mode's way), else 3."""
    return EXIT_FOUND if doc["status"] == "found" else EXIT_NO_BOUNDARY


def target_label(prov: dict) -> str:
    """Where probes ran, for titles: "aarch64 · qemu · cpu neoverse-n1", and the package and provider
    when they are not the default: "x86_64 · uv · onnxruntime-openvino:openvino"."""
    from harness.releases.packages import label_of

    parts = [prov.get("arch") or "?", prov.get("backend") or "?"]
    if prov.get("cpu"):
        parts.append(f"cpu {prov['cpu']}")
    if label_of(prov):
        parts.append(label_of(prov) + "".join(f" {k}={v}" for k, v in sorted((prov.get("ep_options") or {}).items())))
    return " · ".join(parts)
