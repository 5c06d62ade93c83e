"""Triage after the boundary: does a session option change the verdict, and is the release deterministic?

Options matrix (`bisect options`)
---------------------------------
One release, every combination of the dimensions below, each combination one
probe of the UNMODIFIED model, each probe one line of probes.jsonl in one
RunStore (records keyed by `combo_id`; their outputs in outputs/<version>-<combo_id>.npz).
A summary goes next to them in options.json (read by `bisect report`).

    level     graph optimization level: disable < basic < extended < layout < all
    mode      execution mode: sequential, parallel
    threads   intra-op threads: 1, all (0 = onnxruntime's default, every core)
    switch    CPU-specific session config entries the release knows (see below)

What a release supports is read from its own binary, not guessed from the
version: the pybind module (`onnxruntime_pybind11_state*.so`) holds the names
of its GraphOptimizationLevel values (`ORT_ENABLE_LAYOUT` appears in 1.23.0)
and the session config keys it reads (`mlas.disable_kleidiai` appears in 1.25.1
for aarch64 and 1.30.0 for x86_64). onnxruntime silently ignores config keys it
does not know, so a combination with an unknown key would be a duplicate probe
that *looks* like a finding: it is recorded "n/a" instead, with the reason.
When the binary cannot be found the combination is probed anyway and a worker
error that names the missing level becomes "n/a" too.

A dimension *changes the verdict* when two combinations that differ only in it
have different decisive verdicts. For each such dimension the ordered option
values are bisected with harness.search.bisect_step (the other dimensions at
their first value), exactly as `run` bisects releases; probes the matrix already
holds are reused, so the bisection costs nothing when the matrix is complete.

Determinism (`bisect repeat`)
-----------------------------
N probes of the same release, model, batch and options, each a fresh worker
process, each one line of probes.jsonl; the sha256 of every output is compared.
Different bits -> verdict *nondeterministic*; otherwise the common verdict.
"""

from __future__ import annotations

import itertools
import mmap
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import search
from harness.errors import EnvironmentSkip, UsageError
from harness.probe import ProbeJob, Prober, serving
from harness.results.store import RunStore, run_id_for
from harness.verdicts import judge
from harness.vocabulary import EXEC_MODES, GRAPH_LEVELS

LEVELS = tuple(GRAPH_LEVELS)  # in order of how much the optimizer does
MODES = tuple(EXEC_MODES)
THREADS = ("1", "all")
# CPU-specific switches: name -> (session config key, value, archs where it means something)
SWITCHES = {
    "kleidiai-off": ("mlas.disable_kleidiai", "1", ("aarch64",)),
}
DIMENSIONS = ("level", "mode", "threads", "switch")
# Run documents (see harness.results.store) of the two kinds of triage store.
OPTIONS_SUMMARY = "options"
REPEAT_SUMMARY = "repeat"


# --- what a release supports ---------------------------------------------------------------


def pybind_module(env_path: Path) -> Path | None:
    """The onnxruntime pybind extension of an installed release (venv or site directory)."""
    for p in sorted(Path(env_path).rglob("onnxruntime_pybind11_state*.so")):
        return p
    for p in sorted(Path(env_path).rglob("onnxruntime_pybind11_state*.pyd")):
        return p
    return None


def binary_strings(path: Path, needles: list[str]) -> dict[str, bool]:
    """Which of `needles` occur in a binary (names of enum values, config keys)."""
    found = {}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for n in needles:
            found[n] = m.find(n.encode() + b"\0") != -1 or m.find(n.encode()) != -1
    return found


def config_keys(path: Path) -> list[str]:
    """Every `mlas.*` / `session.*` config key string in the binary (for the record)."""
    keys = set()
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for mt in re.finditer(rb"(?:mlas|session)\.[a-z0-9_.]{3,80}", m):
            keys.add(mt.group().decode())
    return sorted(keys)


@dataclass
class Support:
    """What one release's binary says it supports (None: could not tell)."""

    module: str | None
    levels: dict[str, bool | None] = field(default_factory=dict)
    keys: dict[str, bool | None] = field(default_factory=dict)
    how: str = ""


def release_support(env_path: Path | None) -> Support:
    mod = pybind_module(env_path) if env_path else None
    if mod is None:
        return Support(None, {lv: None for lv in LEVELS}, {k: None for k, *_ in SWITCHES.values()},
                       "the release's binary was not found: unsupported options show up as worker errors")
    found = binary_strings(mod, [GRAPH_LEVELS[lv] for lv in LEVELS] + [k for k, *_ in SWITCHES.values()])
    return Support(str(mod), {lv: found[GRAPH_LEVELS[lv]] for lv in LEVELS},
                   {k: found[k] for k, *_ in SWITCHES.values()},
                   f"names found in {mod.name} (enum values of GraphOptimizationLevel, session config keys)")


# --- combinations ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Combo:
    level: str
    mode: str
    threads: str
    switch: str = "none"

    @property
    def id(self) -> str:
        return f"level={self.level},mode={self.mode},threads={self.threads},switch={self.switch}"

    def get(self, dim: str) -> str:
        return getattr(self, dim)

    def with_(self, dim: str, value: str) -> "Combo":
        return Combo(**{**self.__dict__, dim: value})

    def session_options(self) -> dict:
        so: dict = {"graph_optimization_level": self.level, "execution_mode": self.mode,
                    "intra_op_num_threads": 1 if self.threads == "1" else int(self.threads) if self.threads != "all" else 0}
        if self.switch != "none":
            key, value, _ = SWITCHES[self.switch]
            so["config"] = {key: value}
        return so


def switches_for(arch: str, wanted: str) -> list[str]:
    if wanted == "none":
        return []
    names = [s for s, (_, _, archs) in SWITCHES.items() if arch in archs] if wanted == "auto" else \
        [s.strip() for s in wanted.split(",") if s.strip()]
    for s in names:
        if s not in SWITCHES:
            raise UsageError(f"--switches {s}: unknown (known: {', '.join(SWITCHES)}, auto, none)")
    return names


def combos(levels, modes, threads, switches) -> list[Combo]:
    return [Combo(lv, m, t, s) for lv, m, t, s in itertools.product(levels, modes, threads, ["none", *switches])]


def not_applicable(combo: Combo, support: Support) -> str | None:
    """Why a combination cannot be asked of this release (None: it can)."""
    if support.levels.get(combo.level) is False:
        return f"this release has no GraphOptimizationLevel.{GRAPH_LEVELS[combo.level]}"
    if combo.switch != "none":
        key = SWITCHES[combo.switch][0]
        if support.keys.get(key) is False:
            return f"this release does not know the session config key {key} (it would be ignored silently)"
    return None


def worker_says_na(record: dict) -> str | None:
    """A worker error that means 'this release has no such option' rather than a failing model."""
    if record.get("status") != "error":
        return None
    reason = record.get("reason") or ""
    m = re.search(r"ORT_ENABLE_[A-Z]+", reason)
    if "AttributeError" in reason and m:
        return f"this release has no GraphOptimizationLevel.{m.group()}"
    return None


# --- the options matrix ------------------------------------------------------------------------


def triage_store(plan, kind: str, extra: dict) -> RunStore:
    """A RunStore for a triage of the plan's model (its own run id; the key names what decides the probes)."""
    import sys

    pi = plan.probe_inputs
    key = {"model": pi.model.digest, "batch": pi.batch_digest, "outputs": list(pi.outputs),
           **plan.runner.provenance(), "triage": kind, **extra}
    run_id = run_id_for(f"{pi.model.name}-{kind}", key)
    info = {"model": {"name": pi.model.name, "source": pi.model.spec.source, "path": str(pi.model.path),
                      "digest": pi.model.digest, "data_files": [str(p) for p in pi.model.data_files]},
            "batch": {"path": str(pi.batch), "digest": pi.batch_digest}}
    return RunStore.open(plan.store.dir.parent, run_id, key, info, list(sys.argv))


class OptionsMatrix:
    """Probe the combinations of one release, reusing what the store holds."""

    def __init__(self, plan, release, combos_: list[Combo], jobs: int = 1, observer=None):
        self.plan = plan
        self.release = release
        self.combos = combos_
        self.jobs = max(1, jobs)
        self.observer = observer or (lambda combo, rec, reused: None)
        self.store = triage_store(plan, "options", {"version": release.version})
        self.prober = Prober(plan.runner, self.store, plan.predicate)
        self.records: dict[str, dict] = {}
        for rec in self.store.records():
            if rec.get("version") == release.version and rec.get("combo_id"):
                self.records[rec["combo_id"]] = rec
        self.support = Support(None)
        self.na: dict[str, str] = {}

    def prepare(self) -> None:
        try:
            env = self.plan.runner.prepare(self.release)
        except EnvironmentSkip as exc:
            raise UsageError(f"onnxruntime {self.release.version}: {exc}") from None
        self.support = release_support(env.path)
        for c in self.combos:
            why = not_applicable(c, self.support)
            if why:
                self.na[c.id] = why

    def verdict(self, combo: Combo) -> dict:
        """The (judged) record of one combination, probing it if needed."""
        if combo.id in self.na:
            return {"combo_id": combo.id, "verdict": "n/a", "why": self.na[combo.id]}
        rec = self.records.get(combo.id)
        reused = rec is not None
        if rec is None:
            rec = self._probe(combo)
        j = judge(rec, self.plan.predicate)
        na = worker_says_na(rec)
        if na:
            self.na[combo.id] = na
            j = {**j, "verdict": "n/a", "why": na}
        self.observer(combo, j, reused)
        return j

    def _probe(self, combo: Combo) -> dict:
        safe = combo.id.replace(",", "_").replace("=", "-")
        job = ProbeJob(self.plan.job.model, self.plan.job.inputs, self.plan.job.outputs, combo.session_options(),
                       self.plan.job.timeout)
        rec = self.prober.probe(self.release, job, outputs=self.store.outputs_path(self.release.version, safe),
                                tags={"combo_id": combo.id, "combo": combo.__dict__,
                                      "session_options": combo.session_options()}).record
        self.records[combo.id] = rec
        return rec

    def run(self) -> dict[str, dict]:
        self.prepare()
        with serving(self.jobs, stop=self.prober) as pool:  # one release: its workers serve every combo
            results = list(pool.map(self.verdict, self.combos))
        return {c.id: r for c, r in zip(self.combos, results)}


def dimension_effects(combos_: list[Combo], verdicts: dict[str, str], dims=DIMENSIONS) -> dict[str, list[dict]]:
    """For each dimension: the pairs of combinations differing only in it whose decisive verdicts differ."""
    effects: dict[str, list[dict]] = {d: [] for d in dims}
    by_id = {c.id: c for c in combos_}
    for d in dims:
        groups: dict[tuple, list[Combo]] = {}
        for c in combos_:
            rest = tuple((o, c.get(o)) for o in dims if o != d)
            groups.setdefault(rest, []).append(c)
        for rest, members in groups.items():
            dec = [(c.get(d), verdicts[c.id]) for c in members if verdicts[c.id] in search.DECISIVE]
            if len({v for _, v in dec}) > 1:
                effects[d].append({"fixed": dict(rest), "verdicts": dict(dec)})
    del by_id
    return effects


def bisect_option(values: list[str], verdict_of) -> dict:
    """Bisect an ordered list of option values with search.bisect_step; `verdict_of(value)` probes one."""
    known: list[str | None] = [None] * len(values)
    probed = []
    mode = "regression"
    while True:
        step = search.bisect_step(known, mode)
        if step.status == "wrong_direction" and mode == "regression":
            mode = "fix"
            continue
        if step.done:
            break
        for i in step.next:
            v = verdict_of(values[i])
            known[i] = v if v != "n/a" else "skip"
            probed.append(values[i])
    doc = {"values": values, "verdicts": dict(zip(values, known)), "status": step.status, "mode": mode,
           "probed": probed}
    if step.status == "found":
        old, new = search.MODES[mode]
        doc.update({f"last_{old}": values[step.lo], f"first_{new}": values[step.hi]})
    return doc


def options_matrix(plan, release, *, levels=LEVELS, modes=MODES, threads=THREADS, switches="auto",
                   jobs: int = 1, observer=None) -> dict:
    """The options matrix of one release: per-combination verdicts, which dimension matters, bisections."""
    t0 = time.perf_counter()
    sw = switches_for(plan.runner.target.arch, switches)
    cs = combos(levels, modes, threads, sw)
    matrix = OptionsMatrix(plan, release, cs, jobs, observer)
    results = matrix.run()
    verdicts = {cid: r["verdict"] for cid, r in results.items()}
    dims_values = {"level": list(levels), "mode": list(modes), "threads": list(threads), "switch": ["none", *sw]}
    effects = dimension_effects(cs, verdicts)
    changing = [d for d, e in effects.items() if e]
    bisections = {}
    for d in changing:
        ctx = effects[d][0]["fixed"]
        base = Combo(**{**{o: dims_values[o][0] for o in DIMENSIONS}, **ctx, d: dims_values[d][0]})
        bisections[d] = {"fixed": ctx,
                         **bisect_option(dims_values[d], lambda v, b=base, dd=d: matrix.verdict(b.with_(dd, v))["verdict"])}
    decisive = sorted({v for v in verdicts.values() if v in search.DECISIVE})
    doc = {
        "kind": "options",
        "run_id": matrix.store.run_id,
        "version": release.version,
        "model": plan.probe_inputs.model.name,
        "provenance": plan.runner.provenance(),
        "predicate": str(plan.predicate),
        "dimensions": dims_values,
        "support": {"module": matrix.support.module, "levels": matrix.support.levels, "keys": matrix.support.keys,
                    "how": matrix.support.how},
        "combos": [{"id": c.id, **c.__dict__, "verdict": results[c.id]["verdict"], "why": results[c.id].get("why"),
                    "status": results[c.id].get("status"), "nan_rows": results[c.id].get("nan_rows"), "rows": results[c.id].get("rows"),
                    "sha256": output_hashes(results[c.id])} for c in cs],
        "verdicts_seen": decisive,
        "changing_dimensions": changing,
        "bisections": bisections,
        "na_count": sum(1 for v in verdicts.values() if v == "n/a"),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    doc["message"] = options_sentence(doc)
    na_reasons = sorted({c["why"] for c in doc["combos"] if c["verdict"] == "n/a"})
    if na_reasons:
        doc["message"] += " n/a: " + "; ".join(na_reasons) + "."
    matrix.store.save_document(OPTIONS_SUMMARY, doc)
    doc["results"] = str(matrix.store.dir)
    return doc


def output_hashes(rec: dict) -> list[str] | None:
    outs = (rec.get("result") or {}).get("outputs")
    return [o.get("sha256") for o in outs] if outs else None


def options_sentence(doc: dict) -> str:
    n = len(doc["combos"])
    na = doc["na_count"]
    probed = n - na
    seen = doc["verdicts_seen"]
    head = f"onnxruntime {doc['version']}: {probed} combinations probed" + (f", {na} n/a" if na else "")
    if not seen:
        return head + "; no combination could be judged good or bad."
    if not doc["changing_dimensions"]:
        tried = [d for d in DIMENSIONS if len(doc["dimensions"][d]) > 1]
        text = head + f"; every one is {seen[0]}: the verdict depends on no session option " \
                      f"({', '.join(tried) or 'one combination'} tried)."
        if len(doc["dimensions"]["switch"]) == 1:
            text += f" No CPU-specific switch was tried for {doc['provenance'].get('arch')}."
        return text
    parts = []
    for d in doc["changing_dimensions"]:
        b = doc["bisections"].get(d, {})
        if b.get("status") == "found":
            old, new = search.MODES[b["mode"]]
            parts.append(f"{d} changes it: {old} at {d}={b[f'last_{old}']}, {new} from {d}={b[f'first_{new}']}")
        else:
            parts.append(f"{d} changes it (not monotone in its order: {b.get('verdicts')})")
    return head + "; " + "; ".join(parts) + "."


# --- determinism -------------------------------------------------------------------------------


def repeat_probe(plan, release, n: int, observer=None) -> dict:
    """`n` identical probes (fresh processes); bit-identical outputs or *nondeterministic*."""
    observer = observer or (lambda i, rec: None)
    store = triage_store(plan, "repeat", {"version": release.version,
                                          "session_options": plan.job.session_options})
    # Each invocation is its own series: earlier series stay in probes.jsonl as evidence.
    series = time.strftime("%Y%m%dT%H%M%S") + f"-{os.getpid()}"
    prober = Prober(plan.runner, store, plan.predicate)
    runs = []
    for i in range(n):
        j = prober.probe(release, plan.job, outputs=store.outputs_path(release.version, f"{series}-{i}"),
                         series=series, tags={"repeat_index": i}).judged
        runs.append(j)
        observer(i, j)
    hashes = [tuple(output_hashes(r) or ()) if r["status"] == "ran" else None for r in runs]
    ran = [h for h in hashes if h is not None]
    distinct = sorted({h for h in ran})
    names = [o["name"] for o in ((runs[0].get("result") or {}).get("outputs") or [])]
    per_output = {}
    for k, name in enumerate(names):
        per_output[name] = sorted({h[k] for h in ran if len(h) > k})
    decisive = {r["verdict"] for r in runs}
    if len(ran) < n:
        verdict = next(r["verdict"] for r in runs if r["status"] != "ran")
        why = f"{n - len(ran)} of {n} runs did not finish"
    elif len(distinct) > 1:
        verdict = "nondeterministic"
        differing = [nm for nm, hs in per_output.items() if len(hs) > 1]
        why = f"{len(distinct)} different outputs in {n} identical runs (differing: {', '.join(differing)})"
    elif len(decisive) == 1:
        verdict = runs[0]["verdict"]
        why = f"bit-identical outputs in {n} runs; {runs[0]['why']}"
    else:
        verdict, why = "nondeterministic", f"verdicts {sorted(decisive)} in {n} runs"
    doc = {
        "kind": "repeat",
        "run_id": store.run_id,
        "series": series,
        "version": release.version,
        "model": plan.probe_inputs.model.name,
        "provenance": plan.runner.provenance(),
        "session_options": plan.job.session_options,
        "n": n,
        "verdict": verdict,
        "why": why,
        "identical": len(distinct) <= 1 and len(ran) == n,
        "distinct_outputs": len(distinct),
        "per_output": per_output,
        "runs": [{"index": i, "verdict": r["verdict"], "why": r["why"], "seconds": round(r.get("seconds") or 0, 3),
                  "sha256": output_hashes(r)} for i, r in enumerate(runs)],
    }
    store.save_document(REPEAT_SUMMARY, doc)
    doc["results"] = str(store.dir)
    return doc


def find_summaries(results_dir: Path, kind: str, key_match: dict) -> list[dict]:
    """Stored triage summaries (options.json / repeat.json) of runs whose key matches `key_match`."""
    name = OPTIONS_SUMMARY if kind == "options" else REPEAT_SUMMARY
    found = []
    for p in sorted(Path(results_dir).glob(f"*/{name}.json")):
        store = RunStore(p.parent)
        key = (store.manifest() or {}).get("key", {})
        doc = store.document(name)
        if doc is not None and all(key.get(k) == v for k, v in key_match.items()):
            found.append({**doc, "results": str(p.parent)})
    return found
