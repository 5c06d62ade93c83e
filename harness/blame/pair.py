"""`bisect blame RUN`: below a run's release pair, the graph transformer, the kernel and the commits.

1. Look: L and B once each with their session log (verbose) and optimized graph saved; their verdicts must be
   the run's (else the pair does not flip here, and nothing is blamed).
2. Which transformer: delta debugging of `disabled_optimizers` on B (harness.blame.transformers) to the fewest
   names whose disabling makes B good again, judged as the run's question judges (its predicate, against its
   reference); then L with the same names disabled, and whether they changed L's graph too.
3. If no set of names flips B: the graph optimization levels (the lowest level at which B is bad), then the kernels.
4. Which kernel (harness.blame.kernels): how the nodes the reduction, the explanation or the two graphs name
   ran on each release; the two optimized graphs compared by op type and domain.
5. Which commits (harness.blame.commits), given a clone of onnxruntime: those between L's and B's build
   commits that touch the blamed transformer's or kernel's source. Suspects, not a verdict.

Every probe is a record of results/<run>/blame/probes.jsonl tagged with what it disabled (and the question's
key), so a blame that stops resumes without repeating one; blame.json beside them is what the report reads.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import onnx

from harness.blame import kernels as kern
from harness.blame import session_log
from harness.blame.transformers import REWRITE_RULES, RULE_BASED, Found, minimal_set
from harness.errors import EnvironmentSkip, HarnessError, UsageError
from harness.metrics import probe_metrics
from harness.probe import Observer, ProbeJob, Prober, serving
from harness.reference import Reference, arrays_for, restored
from harness.results.store import BLAME, RunStore, load_outputs
from harness.summary import Pair

BLAME_DOC = "blame"
LEVELS = ("disable", "basic", "extended")  # below "all", in order; "layout" only in releases that have it
OPT_DATA_MIN_BYTES = 1024  # initializers above this go beside the saved optimized graph, not into it
KERNEL_NODES = 8  # nodes named in the kernel section at most
NAMED_BY_RUN = "the run's reduction or explanation"


class NoFlip(Exception):
    """The pair does not flip here: nothing to blame."""


@dataclass
class PairProber:
    """Probes of L and B with options, judged as the run's question judges, recorded and reused."""

    plan: object  # harness.plan.Plan over L..B
    store: RunStore  # the blame store
    run_store: RunStore
    reference: Reference | None
    question: str | None
    log: Callable[[str], None] = lambda msg: None
    observer: Observer | None = None  # hears of each probe made, and of each step's bound (the progress lines)
    made: list[dict] = field(default_factory=list)  # every probe asked for, in order
    _done: dict = field(default_factory=dict)

    def __post_init__(self):
        self._prober = Prober(self.plan.runner, self.store, self.plan.predicate, observer=self.observer)
        for rec in self.store.records():
            if rec.get("question") == self.question and "disabled" in rec:
                self._done[self._key(rec["version"], rec["disabled"], rec.get("level"), rec.get("look", False))] = rec

    @staticmethod
    def _key(version: str, disabled, level, look: bool) -> tuple:
        return version, tuple(sorted(disabled)), level, bool(look)

    @property
    def probes(self) -> int:
        return self._prober.probes

    def expect(self, probes: int | None, step: str) -> None:
        """Tell the observer the most probes `step` still makes (None: nothing bounds them, as delta debugging)."""
        if self.observer is not None:
            self.observer.expect(probes, step)

    def look_dir(self, version: str) -> Path:
        return self.store.subdir("look") / version

    def verdict(self, release, disabled=(), level: str | None = None, look: bool = False) -> dict:
        """The judged probe of `release` with `disabled` transformers (and graph `level`), recorded once."""
        key = self._key(release.version, disabled, level, look)
        rec = self._done.get(key)
        reused = rec is not None
        if rec is None:
            rec = self._probe(release, key[1], level, look)
            self._done[key] = rec
        judged = self._judge(rec)
        step = {"version": release.version, "disabled": list(key[1]), "level": level, "look": look,
                "verdict": judged["verdict"], "why": judged.get("why"), "reused": reused,
                "seconds": round(rec.get("seconds") or 0.0, 2)}
        self.made.append(step)
        self.log(f"{release.version} {'(look) ' if look else ''}{'level ' + level + ' ' if level else ''}"
                 f"disabled [{', '.join(key[1])}]: {judged['verdict']}" + (" (saved)" if reused else ""))
        return {**step, "record": rec}

    def _probe(self, release, disabled: tuple, level: str | None, look: bool) -> dict:
        opts = dict(self.plan.job.session_options)
        if disabled:
            opts["disabled_optimizers"] = list(disabled)
        if level:
            opts["graph_optimization_level"] = level
        if look:
            where = self.look_dir(release.version)
            where.mkdir(parents=True, exist_ok=True)
            opts.update(optimized_model_filepath=str(where / "optimized.onnx"), session_log_path=str(where / "session.log"),
                        config={**opts.get("config", {}),
                                "session.optimized_model_external_initializers_file_name": "optimized.onnx.data",
                                "session.optimized_model_external_initializers_min_size_in_bytes": OPT_DATA_MIN_BYTES})
        job = ProbeJob(self.plan.job.model, self.plan.job.inputs, self.plan.job.outputs, opts, self.plan.job.timeout)
        series = "blame-" + hashlib.sha256(json.dumps([list(disabled), level, look]).encode()).hexdigest()[:16]
        saved = self.store.outputs_path(release.version, series) if self.reference is not None else None
        tags = {"disabled": list(disabled), "level": level, "look": look, "question": self.question}

        def measure(rec: dict) -> dict:
            ref = self.reference
            arrays = arrays_for(ref, self.run_store, release.version)
            outs = load_outputs(saved) if saved is not None and arrays is not None else None
            if arrays is None or outs is None:
                return {**probe_metrics(rec.get("result")),
                        "comparison_error": f"no outputs of {ref.label} to compare the probe of {release.version} with"}
            return probe_metrics(rec.get("result"), outs, arrays, ref.id)

        probed = self._prober.probe(release, job, series=series, tags=tags, outputs=saved,
                                    measure=measure if self.reference is not None else None)
        return probed.record

    def _judge(self, rec: dict) -> dict:
        from harness.verdicts import judge

        return judge(rec, self.plan.predicate)


def blame_pair(plan, good, bad, store: RunStore, run_store: RunStore, *, reference: Reference | None,
               question: dict, nodes: list[str], repo: Path | None = None, log=lambda msg: None,
               observer: Observer | None = None) -> dict:
    """Blame the pair of a run (`good` and `bad`: the last good and first bad release of a regression, the first
    good and last bad of a fix): the blame document, kept in the blame store."""
    t0 = time.perf_counter()
    pp = PairProber(plan, store, run_store, reference, question.get("key"), log, observer)
    # live workers serve one probe after another (under emulation a worker's start is most of a small probe)
    with serving(2, stop=pp._prober) as pool:
        return _blame(pp, pool, plan, good, bad, store, run_store, question, nodes, repo, log, t0)


def _blame(pp: PairProber, pool, plan, good, bad, store, run_store, question, nodes, repo, log, t0) -> dict:
    pp.expect(2, "the look at both releases")
    looks = list(pool.map(lambda r: pp.verdict(r, look=True), (good, bad)))
    seen = {good.version: looks[0]["verdict"], bad.version: looks[1]["verdict"]}
    if seen != {good.version: "good", bad.version: "bad"}:
        raise NoFlip(f"{good.version} is {seen[good.version]} and {bad.version} is {seen[bad.version]} here "
                     f"({looks[1]['why'] or looks[0]['why']}): the pair does not flip, nothing to blame")
    logs = {r.version: session_log.read(pp.look_dir(r.version) / "session.log") for r in (good, bad)}
    bad_log = logs[bad.version] or session_log.SessionLog()
    rules = _rules_in(plan, bad)

    # the run's own level: no optimizing transformer runs below it, and only the levels under it are left to try
    run_level = plan.job.session_options.get("graph_optimization_level")
    levels = LEVELS[:LEVELS.index(run_level)] if run_level in LEVELS else LEVELS
    if run_level == "disable":
        # what the log names then are the passes every session applies (Casts for kernels without fp16, copies
        # between devices), outside the optimizer's registry: `disabled_optimizers` does not reach them
        found = Found(None)
    else:
        pp.expect(None, "the transformers")
        found = minimal_set(bad_log.modified, bad_log.ran, rules,
                            lambda names: pp.verdict(bad, names)["verdict"] == "good")
    pair = Pair(good.version, bad.version, question.get("mode") or "regression")
    doc: dict = {
        "run_id": run_store.dir.name, "mode": pair.mode, "good": good.version, "bad": bad.version, **pair.ends(),
        "question": question, "transformers": found.transformers, "flips": found.flips,
        "graph_optimization_level": run_level, "searched": run_level != "disable",
        "stages": [s.document() for s in found.stages],
        "session_logs": {v: (lg.document() if lg else None) for v, lg in logs.items()},
    }
    # a load error often names the transformer it failed in (a fused node is named after its fusion)
    error = (looks[1]["record"].get("reason") or "") if looks[1]["record"].get("status") == "error" else ""
    named = [n for n in bad_log.ran if n not in (found.transformers or []) and re.search(rf"\b{re.escape(n)}\b", error)]
    pp.expect(len(named[:3]) + (1 if found.flips else len(levels)), "the checks after")
    doc["named_by_error"] = [{"name": n, "flips": pp.verdict(bad, (n,))["verdict"] == "good"} for n in named[:3]]
    if found.flips:
        on_good = pp.verdict(good, found.transformers)
        good_log = logs[good.version] or session_log.SessionLog()
        # a rewrite rule runs inside its rule-based transformer: the log says only whether that one changed the graph
        changed = set(good_log.modified) | ({n for n in found.transformers if n in rules}
                                            if any(RULE_BASED.fullmatch(m) for m in good_log.modified) else set())
        changed_on_good = [n for n in found.transformers if n in changed]
        doc["on_last_good"] = {
            "version": good.version, "verdict": on_good["verdict"], "why": on_good["why"],
            "changed_graph": changed_on_good,
            "ran": [n for n in found.transformers if n in good_log.ran or n in rules],
            "new_in_bad": not changed_on_good,
        }
        doc["level"] = None
    else:
        doc["on_last_good"] = None
        doc["level"] = _level(pp, bad, levels) if levels else None
    doc["kernels"] = _kernels(plan, pp, good, bad, logs, nodes)
    doc["commits"] = _commits(repo, doc, run_store, good, bad, log) if repo else None
    doc["probes"] = [{k: v for k, v in step.items() if k != "record"} for step in pp.made]
    doc["probed_now"] = pp.probes
    doc["seconds"] = round(time.perf_counter() - t0, 1)
    doc["named"] = names_something(doc)
    doc["text"] = said(doc)
    store.save_document(BLAME_DOC, doc)
    return doc


def _rules_in(plan, release) -> list[str]:
    """The rewrite rules whose names the release's binary holds (all of REWRITE_RULES when it cannot be read)."""
    from harness.triage.options import binary_strings, pybind_module

    try:
        env = plan.runner.prepare(release)
    except EnvironmentSkip:
        return list(REWRITE_RULES)
    module = pybind_module(env.path) if env and env.path else None
    if module is None:
        return list(REWRITE_RULES)
    found = binary_strings(module, list(REWRITE_RULES))
    return [r for r in REWRITE_RULES if found.get(r)]


def _level(pp: PairProber, bad, levels=LEVELS) -> dict:
    """The lowest graph optimization level of `levels` (those under the run's own) at which B is bad (no set of
    transformer names flips it)."""
    verdicts = {}
    for level in levels:
        verdicts[level] = pp.verdict(bad, level=level)["verdict"]
        if verdicts[level] == "bad":
            break
    good_at = [lv for lv, v in verdicts.items() if v == "good"]
    bad_from = next((lv for lv, v in verdicts.items() if v == "bad"), "all")
    return {"verdicts": verdicts, "good_at": good_at[-1] if good_at else None, "bad_from": bad_from}


def _load(path: Path) -> onnx.ModelProto | None:
    try:
        return onnx.load(str(path), load_external_data=False) if path.is_file() else None
    except Exception:  # noqa: BLE001 - an unreadable graph only loses the kernel section
        return None


def _kernels(plan, pp: PairProber, good, bad, logs: dict, nodes: list[str]) -> dict | None:
    original = _load(Path(plan.job.model))
    graphs = {r.version: _load(pp.look_dir(r.version) / "optimized.onnx") for r in (good, bad)}
    missing = [v for v, graph in graphs.items() if graph is None]
    if original is None or missing:
        return {"error": f"{' and '.join(missing) or 'the model'}: no optimized graph was saved (a session that fails "
                         "saves none), so no kernel is named"}
    g, b = graphs[good.version], graphs[bad.version]
    changed = kern.changed_nodes(original, g, b)
    # the run's nodes (the explanation's suspect, then the reduction's) that ran differently first, then the rest of
    # them; without any, the changed ones
    named = [n for n in nodes if n in changed] + [n for n in nodes if n not in changed] if nodes else changed
    named = list(dict.fromkeys(named))[:KERNEL_NODES]
    every = list(dict.fromkeys([*named, *changed]))  # said by how they changed, with counts: every changed node
    on_good = kern.kernels(original, g, logs[good.version], every)
    on_bad = kern.kernels(original, b, logs[bad.version], every)
    rows = [{"node": n, "good": on_good[n].document() if n in on_good else None, "bad": on_bad[n].document(),
             "sentence": kern.sentence(good.version, on_good.get(n), bad.version, on_bad[n])}
            for n in named if n in on_bad]
    grouped = kern.groups(good.version, on_good, bad.version, on_bad, every)
    apart = {n for grp in grouped for n in grp["nodes"]}
    return {"nodes": rows, "named_by": NAMED_BY_RUN if nodes else
            "the nodes that ran differently on the two releases", "changed_nodes": len(changed),
            "groups": grouped, "alike": [r["node"] for r in rows if r["node"] not in apart],
            "graphs": kern.graph_changes(g, b)}


def _commits(repo: Path, doc: dict, run_store: RunStore, good, bad, log) -> dict:
    """The commits between the pair's builds (older..newer) that touch the source of what is blamed."""
    from harness.blame import commits as git
    from harness.releases.versions import parse_version
    from harness.results.history import latest_by_version, own_records
    from harness.summary import build_of

    recs = latest_by_version(own_records(run_store.records()))
    older, newer = sorted((good, bad), key=lambda r: parse_version(r.version))
    builds = {r.version: build_of(recs.get(r.version))["commit"] for r in (older, newer)}
    if doc["flips"]:
        kernels = []  # a transformer flips it: its source is where to look
    else:
        kernels = [(k["bad"]["op_type"], k["bad"]["domain"], k["bad"]["provider"] or "CPUExecutionProvider")
                   for k in (doc.get("kernels") or {}).get("nodes", []) if k.get("bad")]
    rng = git.suspects(repo, builds[older.version], builds[newer.version], doc["transformers"] or [],
                       list(dict.fromkeys(kernels)), good_version=older.version, bad_version=newer.version)
    log(f"commits {older.version}..{newer.version}: {rng.total}, {len(rng.suspects)} touch what is named")
    return {**rng.document(), "older": older.version, "newer": newer.version}


def names_something(doc: dict) -> bool:
    """Whether a blame of a pair that flips names anything below it: a set of transformers whose disabling flips
    the bad release, a graph optimization level it is good at, or the kernels its nodes ran as. A pair whose bad
    release does not load the model (an opset it does not know) leaves nothing to name."""
    return bool(doc["flips"] or (doc.get("level") or {}).get("good_at") or (doc.get("kernels") or {}).get("nodes"))


def said(doc: dict) -> str:
    """The blame in a few sentences (the report's and the terminal's)."""
    G, B, fix = doc["good"], doc["bad"], doc.get("mode") == "fix"
    out = []
    if doc["flips"]:
        names = ", ".join(f"`{n}`" for n in doc["transformers"])
        one = len(doc["transformers"]) == 1
        it, them = ("it", "it") if one else ("they", "them")
        out.append(f"Disabling {names} (session option `disabled_optimizers`) makes {B} good"
                   + (f": what {G} fixed is in what {'it rewrites' if one else 'they rewrite'}." if fix else " again."))
        lg = doc.get("on_last_good") or {}
        if lg and not fix:
            if lg["new_in_bad"]:
                out.append(f"On {G} {it} did not change the graph ({lg['verdict']} with {them} disabled): "
                           f"the rewrite is new in {B}.")
            else:
                out.append(f"On {G} {', '.join(lg['changed_graph'])} changed the graph too and {G} is "
                           f"{lg['verdict']} with {them} disabled: what the rewrite makes became bad in {B}.")
        elif lg:
            out.append(f"{G} is {lg['verdict']} with {them} disabled too.")
        for alt in doc.get("named_by_error") or []:
            out.append(f"`{alt['name']}`, which {B}'s error names, "
                       + ("makes it good when disabled alone too." if alt["flips"] else "does not flip it alone."))
    elif doc.get("searched") is False:  # the run's own options turn the optimizer off
        passes = ((doc.get("session_logs") or {}).get(B) or {}).get("ran") or []
        applied = (f" Its session log names only the passes every session applies at any level ({', '.join(passes)}: "
                   "Casts around kernels without fp16, copies between devices), which `disabled_optimizers` does not "
                   "reach." if passes else "")
        out.append(f"The run's session options disable graph optimizations (`graph_optimization_level` "
                   f"disable): no optimizing graph transformer runs on either release, so none is searched, and "
                   f"there is no lower level to try.{applied} The change is in a kernel, or in which kernels {B} has.")
    else:
        level = doc.get("level") or {}
        out.append(f"No set of graph transformers flips {B}: disabling every one that changed its graph, then "
                   "every one that ran, leaves it bad.")
        own = doc.get("graph_optimization_level")
        lowest = list(LEVELS[:LEVELS.index(own)] if own in LEVELS else LEVELS)[:1]
        if level.get("good_at"):
            out.append(f"{B} is good at graph optimization level `{level['good_at']}` and bad from "
                       f"`{level['bad_from']}`: an optimization of that level that `disabled_optimizers` does not reach.")
        elif level and lowest == ["disable"]:
            out.append(f"{B} is bad even with graph optimizations disabled: the change is in a kernel or the runtime.")
    kernels = doc.get("kernels") or {}
    rows = kernels.get("nodes") or []
    grouped = kernels.get("groups") or []
    # one sentence per way the nodes changed, the run's suspect first; many changed alike are one, with a count
    for grp in grouped[:3]:
        out.append(grp["sentence"][0].upper() + grp["sentence"][1:] + ".")
    if len(grouped) > 3:
        rest = grouped[3:]
        out.append(f"{sum(len(grp['nodes']) for grp in rest)} more nodes changed in {len(rest)} other "
                   f"way{'s' if len(rest) > 1 else ''}.")
    alike = kernels.get("alike") or []
    if alike and grouped and kernels.get("named_by") == NAMED_BY_RUN:
        listed = ", ".join(f"`{n}`" for n in alike[:3]) + (f" and {len(alike) - 3} more" if len(alike) > 3 else "")
        out.append(f"{len(alike)} other node{'s' if len(alike) > 1 else ''} of those {kernels['named_by']} "
                   f"name{'' if len(alike) > 1 else 's'} ran alike on both releases ({listed}).")
    elif rows and not grouped:
        out.append(f"The nodes {kernels['named_by']} name ran alike on both releases: the change is inside a "
                   "kernel that kept its op, precision and provider.")
    unnamed = kernels.get("error")
    if unnamed and not rows:
        out.append(unnamed[0].upper() + unnamed[1:] + ".")
    commits = doc.get("commits")
    if commits:
        out.append(f"{len(commits['suspects'])} of the {commits['total']} commits between {commits['older']} and "
                   f"{commits['newer']} touch the source of what is named (suspects, not a verdict).")
    return " ".join(out)


def blame_saved_run(run_dir: Path, cache_dir: Path, offline: bool = False, *, repo: Path | None = None,
                    question: str | None = None, bad_if: str | None = None, command: list[str] | None = None,
                    log=lambda msg: None, observer: Observer | None = None,
                    ray_address: str | None = None) -> dict:
    """Blame the boundary of a run's question (its newest run document, or `question`); UsageError before any
    probe when the run cannot be blamed, NoFlip when the pair does not flip here."""
    import dataclasses

    from harness.plan import make_plan, spec_of_run
    from harness.request import release_listing
    from harness.results.store import REDUCED
    from harness.session import asked_with_records, question_boundary
    from harness.summary import end_names

    from harness.releases.packages import of_key

    run_dir = Path(run_dir)
    store = RunStore(run_dir)
    package = of_key((store.manifest() or {}).get("key") or {})
    if package.from_npm:
        raise UsageError(f"{run_dir.name}: blame reads onnxruntime's session log and turns its transformers off by "
                         f"name (disabled_optimizers), which {package.name}'s JavaScript API cannot: blame the pair "
                         f"on the wheel (the same bisect run with --binding python), where bisect compare shows the "
                         f"change is in the core")
    asked, records = asked_with_records(store, question, bad_if, "blame")
    q = asked.question
    pair = question_boundary(records, release_listing(cache_dir, offline, package), q).pair
    if pair is None:
        ends = " and ".join(name.replace("_", " ") for name in end_names(q.mode))
        raise UsageError(f"{run_dir.name}: its probes show no {ends} release to blame under {asked.said}")
    if repo is not None and not (Path(repo) / ".git").exists() and not (Path(repo) / "HEAD").is_file():
        raise UsageError(f"--repo {repo}: not a git repository (a clone of onnxruntime)")
    spec = spec_of_run(run_dir, cache_dir, offline, pair.older, pair.newer, q, ray_address)
    plan = make_plan(dataclasses.replace(spec, from_=pair.older, to=pair.newer), command)
    good = next(r for r in plan.releases if r.version == pair.good)
    bad = next(r for r in plan.releases if r.version == pair.bad)
    reference = restored(q.reference, store) if q.reference and q.predicate.needs_reference else None
    if reference is not None and reference.kind == "file" and reference.arrays is None:
        raise UsageError(f"{run_dir.name}: its question compares with {reference.label}, and that file is not here "
                         "as it was digested")
    blame_store = RunStore.open(run_dir, BLAME, {"blames": run_dir.name}, {"predicate": str(q.predicate)},
                                command or ["bisect", "blame", run_dir.name])
    log(f"blaming {good.version} (good) -> {bad.version} (bad), answering {asked.said}")
    try:
        return blame_pair(plan, good, bad, blame_store, store, reference=reference,
                          question={**q.document(), "key": asked.key, "said": asked.said},
                          nodes=_named_nodes(store, run_dir / REDUCED), repo=Path(repo) if repo else None, log=log,
                          observer=observer)
    except (UsageError, EnvironmentSkip) as exc:  # probes ran: a failure now, not bad input
        raise HarnessError(f"blame: {exc}") from None


def _named_nodes(store: RunStore, reduced_dir: Path) -> list[str]:
    """The explanation's suspect (the node the report names), then the nodes the run's reduction kept: what the
    kernel section names first."""
    from harness.results.store import EXPLANATION

    reduced = RunStore(reduced_dir).document("reduce") if reduced_dir.is_dir() else None
    names = []
    expl = store.document(EXPLANATION)
    if isinstance(expl, dict) and isinstance(expl.get("suspect"), str):  # first: the node the report names
        names.append(expl["suspect"])
    if isinstance(reduced, dict) and isinstance(reduced.get("nodes"), dict):
        kept = reduced["nodes"].get("kept") or []
        names += [n for n in kept if isinstance(n, str)] if isinstance(kept, list) else []
    return list(dict.fromkeys(names))
