"""A paste-ready upstream report of a run (`bisect report RUN`): Markdown or JSON.

Everything comes from the run's evidence (manifest.json, probes.jsonl,
explanation.json, mitigation.json, and the options matrices of the same model,
batch and target in the same results directory); what is missing is made:
a diff of the boundary pair when --explain did not run, a probe of the newest
release when the run did not reach it (appended to the run's probes.jsonl like
any probe). The repro script (results/<run>/repro.py, harness.report.repro_files)
needs only onnxruntime and numpy and asks the run's question; it exits 0 when
good, 1 when bad. A run of the node or web binding has repro.mjs too, run by
Node.js on that binding (harness.report.repro_node), and repro.py then runs the
Python wheel of the same release; its report asks whether the change is in the
core or in the binding (`bisect compare`), and says the answer of one made. The
Markdown stays under REPORT_LIMIT characters: what does not fit is attached
beside it, and the report says what to attach.

The evidence may come from another machine: a file is embedded only when it is
the run's (harness.report.repro_files), every value reaches the script as data
and the Markdown as escaped text (harness.report.escape).

This module holds one concept: the report, from its evidence to its Markdown.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from harness.errors import UsageError
from harness.metrics import ratio_text
from harness.releases import packages
from harness.releases.versions import parse_version
from harness.report import escape
from harness.report.repro import SCRIPT
from harness.report.repro_files import ATTACH_LIMIT, REPORT_LIMIT, reference_values, write_repro
from harness.results.store import (
    EXPLANATION,
    REPORT,
    REPRO_BATCH,
    REPRO_JS,
    RunStore,
)
from harness.summary import Pair, build_of, compare_url, end_names
from harness.verdicts import not_compared

SYMPTOMS = {"nan-or-inf": "NaN/Inf outputs", "nan": "NaN outputs", "zero-rows": "all-zero outputs",
            "max-abs": "outputs past a bound", "headroom": "outputs near the fp16 ceiling",
            "error": "load or run failures", "crash": "worker crashes", "cosine": "outputs that differ from the reference",
            "rel-diff": "outputs that differ from the reference",
            "abs-diff": "outputs that differ from the reference", "slower": "a slowdown",
            "rss": "memory growth"}


def build(run_dir: Path, *, cache_dir: Path, offline: bool = False, probe: bool = True, embed_limit: int = 64 << 10,
          log=None, question: str | None = None, bad_if: str | None = None, attach_limit: int = ATTACH_LIMIT) -> dict:
    """The report as a JSON-able document (and repro.py written next to the run).

    It answers the run's question (harness.session.asked_of_run: the run document `question` names, else the
    newest; `bad_if` asks another predicate over its range): its verdicts, against its reference, and the
    boundary of its range, the run document's own."""
    from harness.explain.boundary import explanation
    from harness.plan import make_plan, spec_of_run
    from harness.request import release_listing
    from harness.session import (
        asked_of_run,
        judged_for,
        probe_releases,
        question_boundary,
    )
    from harness.triage.mitigate import MITIGATION

    log = log or (lambda msg: None)
    run_dir = Path(run_dir)
    store = RunStore(run_dir)
    manifest = store.manifest()
    asked = asked_of_run(store, question, bad_if)
    q = asked.question
    # report.md and repro.py beside the run are those of the question the run answers by default; another
    # question's go in a folder of its own, so that asking it never overwrites them
    default = asked if question is None and bad_if is None else asked_of_run(store)
    files = None if bad_if is None and asked.key == default.key else store.question_files(asked.key or q.key)
    predicate = q.predicate

    def judged_now() -> tuple[dict, dict]:
        """(every release's record, those the question judged): a release it never compared has no verdict
        here (verdicts.not_compared), and no line in the table."""
        every = judged_for(store, q, uncompared=True)
        return every, {v: r for v, r in every.items() if not not_compared(r, predicate)}

    everything, recs = judged_now()
    if not everything:
        raise ValueError(f"{run_dir}: no probes recorded")
    key = manifest["key"]
    probed = sorted(everything, key=parse_version)
    spec = spec_of_run(run_dir, cache_dir, offline, probed[0], probed[-1], q if probe else None)
    from harness.releases.versions import Target

    try:
        all_releases = release_listing(cache_dir, offline, packages.of_key(key))
    except UsageError:  # offline, and no listing of this run's package here (a run made elsewhere): onnxruntime's
        if packages.of_key(key).from_npm:
            raise
        all_releases = release_listing(cache_dir, offline)

    target = Target(key["arch"], key.get("python") or "")
    installable = [r for r in all_releases if r.wheel_for(target)]
    newest = installable[-1].version if installable else probed[-1]
    plan = None

    def get_plan(to: str):
        nonlocal plan
        if plan is None or plan.releases[-1].version != to:
            plan = make_plan(dataclasses.replace(spec, to=to), command=["bisect", "report", str(run_dir)], log=log)
        return plan

    # newest release: still present?
    if probe and newest not in everything:
        log(f"probing the newest release, {newest}")
        probe_releases(get_plan(newest), [newest])
        everything, recs = judged_now()
    probed = sorted(everything, key=parse_version)
    found = question_boundary(recs, all_releases, q)
    pair, untested = found.pair, found.untested  # a fix's bad side is its older release

    # explanation
    expl = store.document(EXPLANATION)
    # an explanation made under another question (another predicate or reference) does not explain this one
    compares = predicate.needs_reference and q.reference
    if expl is not None and expl.get("judged_by") != {"predicate": str(predicate),
                                                      "reference": q.reference["id"] if compares else None}:
        expl = None
    timed = bool(predicate.timed)
    if expl is None and probe and pair and not timed:  # a slowdown's why is its profile
        expl = explanation(get_plan(probed[-1]), pair.older, pair.newer, log=log)
    profile = None
    if timed and pair:
        from harness.explain.profile import profile_pair
        from harness.explain.profile import read as read_profile

        span = (pair.older, pair.newer)
        profile = read_profile(run_dir)
        if (profile is None or (profile["old"], profile["new"]) != span) and probe:
            log(f"profiling {span[0]} and {span[1]}")
            profile_pair(get_plan(probed[-1]), *span)
            profile = read_profile(run_dir)
        if profile is not None and (profile["old"], profile["new"]) != span:
            profile = None
        if profile is not None and not profile.get("error"):
            try:
                from harness.report.charts import profile_chart

                profile["chart"] = profile_chart(profile, run_dir / PROFILE_CHART).name
            except ImportError:  # matplotlib is optional: the tables say it all
                pass

    # options matrices and mitigation of the same model, batch and target
    from harness.triage.options import find_summaries

    match = {k: key.get(k) for k in ("model", "batch", "outputs", "arch", "backend", "cpu", "python", *PACKAGE_KEYS)}
    options = find_summaries(run_dir.parent, "options", match)
    repeats = find_summaries(run_dir.parent, "repeat", match)
    mitigation = store.document(MITIGATION)

    bad = pair.bad if pair else None  # where the problem shows: the repro's platform and reference values
    env = environment(everything, key, bad or probed[-1], SCRIPT)
    elsewhere = other_targets(run_dir, key, bad, q) if bad else []
    defaults = with_default_options(run_dir, key, pair, q) if pair and key.get("session_options") else None
    where = where_it_reproduces(env, elsewhere, bad)
    repro = write_repro(store, manifest, key, predicate, reference_values(store, q.reference, bad), embed_limit,
                        where, (q.reference or {}).get("label") or "the reference", into=files,
                        attach_limit=attach_limit)
    commits = {v: build_of(recs.get(v))["commit"] for v in ((pair.older, pair.newer) if pair else ())}
    doc = {
        "run_id": run_dir.name,
        "model": {k: manifest["model"].get(k) for k in ("name", "source", "digest")},
        "batch": {"digest": manifest["batch"]["digest"]},
        "outputs": key.get("outputs"),
        "session_options": key.get("session_options") or {},
        "question": {**q.document(), "key": asked.key, "said": asked.said, "bad_means": q.words(),
                     "others": [{**o.document(), "key": k, "bad_means": o.words(), "found": found}
                                for k, o, found in asked.others]},
        # where report.md and repro.py are, in the run: "" beside it, or questions/<key>/
        "files": str(files.dir.relative_to(run_dir)) if files else "",
        "predicate": str(predicate),
        "bad_means": q.words(),
        "symptom": " or ".join(dict.fromkeys(SYMPTOMS[c.kind] for c in predicate.conditions)),
        "environment": env,
        "probes": [{"version": v, "verdict": recs[v]["verdict"], "why": recs[v]["why"],
                    "nan_rows": recs[v].get("nan_rows"), "inf_rows": recs[v].get("inf_rows"), "rows": recs[v].get("rows"),
                    **({"timing": recs[v]["metrics"].get("timing")} if timed else {})}
                   for v in probed if v in recs],
        "profile": profile,
        "releases_in_range": [r.version for r in found.releases],
        "mode": pair.mode if pair else q.mode,
        # named as the run document names them: last_good and first_bad, or a fix's last_bad and first_good
        **(pair.ends() if pair else dict.fromkeys(end_names(q.mode))),
        "good": pair.good if pair else None,
        "bad": bad,
        "good_requirement": packages.of_key(key).requirement(pair.good) if pair else None,
        "untested_between": untested,
        "monotone": found.monotone,
        "newest": {"version": newest, "verdict": recs.get(newest, {}).get("verdict"), "why": recs.get(newest, {}).get("why")},
        "commits": {**{name: commits[v] for name, v in pair.ends().items()},
                    "compare": compare_url(commits[pair.older], commits[pair.newer])} if pair else None,
        "elsewhere": elsewhere,
        "default_options": defaults,
        "explanation": {k: v for k, v in expl.items() if k not in ("diff", "chart")} if expl else None,
        "options": [{k: o.get(k) for k in ("version", "message", "changing_dimensions", "bisections", "dimensions",
                                           "verdicts_seen", "na_count")} for o in options],
        "repeat": [{k: o.get(k) for k in ("version", "n", "verdict", "why")} for o in repeats],
        "mitigation": ({k: mitigation.get(k) for k in ("message", "all_clean", "island", "culprits", "range",
                                                       "worst_cosine", "worst_max_abs")}
                       | {"patched_model": Path(mitigation["patched"]["path"]).name}) if mitigation else None,
    }
    doc["blame"] = blame_of(store, pair.good, pair.bad) if pair else None
    doc["repro"] = repro
    doc["repro_where"] = where
    doc["binding"] = binding_of_run(run_dir, manifest, pair, everything, all_releases)
    return doc


#: what a run's key holds of its package (nothing for the default wheel): runs beside it of another package are
#: another question (core or binding), never another target or the same run with other options
PACKAGE_KEYS = packages.KEYS

BINDING_WORDS = {"node": "the Node.js binding", "web": "onnxruntime's WebAssembly build"}  # both run by Node.js


def binding_of_run(run_dir: Path, manifest: dict, pair: Pair | None, recs: dict[str, dict], listing: list) -> dict | None:
    """A run of the node or web binding (harness.releases.packages.Package.binding): its package, the npm spelling of
    the releases the report names, the Node.js version, the `bisect compare` that asks whether the boundary is in
    onnxruntime's core or in the binding, and its answer when a compare over the pair is in the results directory
    already. None for a run of the wheels."""
    from harness.releases.npm import npm_version

    key = manifest["key"]
    package = packages.of_key(key)
    if not package.from_npm:
        return None
    spelled = {r.version: npm_version(r, package.name) for r in listing}
    seen = next((r.get("provenance") or {} for r in recs.values() if (r.get("provenance") or {}).get("node_version")), {})
    doc = {"name": package.binding, "words": BINDING_WORDS.get(package.binding, package.binding),
           "package": package.name, "label": package.label, "node_version": seen.get("node_version"),
           "npm": {v: spelled.get(v) or v for v in recs}, "compare": None}
    if pair is None:
        return doc
    model = manifest["model"]
    named = model.get("source") in ("generated", "hub")  # the registry's name, else the file the user gave
    batch = Path(manifest["batch"]["path"])
    own_batch = named and (batch.parent.name == "batches" or batch.parent == Path(model["path"]).parent)
    words = ["bisect", "compare", packages.Package().label, package.label, "--from", pair.older, "--to", pair.newer,
             "--model", model["name"] if named else Path(model["path"]).name,
             *(() if own_batch else ("--inputs", batch.name)),
             *(w for k, v in (key.get("session_options") or {}).items() if OPTION_WORDS.get(k, (0, None))[1]
               for w in (OPTION_WORDS[k][1], str(v)))]
    doc["compare"] = {"command": escape.sh_line(words), **(compared(run_dir, key, package, pair) or {})}
    return doc


def compared(run_dir: Path, key: dict, package, pair: Pair) -> dict | None:
    """What a `bisect compare` of the Python wheel beside `package` in the results directory says of the pair: the
    newest whose document (read as untrusted: results.store.read_compare_document) compares both releases of the
    same model, batch, outputs and options, {"run_id", "in": core | binding, "sentence"}; None without one. The
    origins are worked out again from its releases (harness.triage.compare.origins), never read from it."""
    from harness.results.evidence import EvidenceError
    from harness.results.store import COMPARE, read_compare_document
    from harness.triage.compare import origin_sentence, origins

    wheel = packages.Package().label
    best = None
    for other in sorted(Path(run_dir).parent.glob("*/")):
        okey = (RunStore(other).manifest() or {}).get("key") or {}
        if okey.get("triage") != COMPARE or any(okey.get(k) != key.get(k) for k in ("model", "batch", "outputs", "arch")) \
                or (okey.get("session_options") or {}) != (key.get("session_options") or {}):
            continue
        try:
            doc = read_compare_document(other).raw
        except (OSError, EvidenceError):
            continue
        if doc["reference"]["label"] != wheel:
            continue
        for o in origins(doc):
            if (o["pair"], o["after"], o["release"]) == (package.label, pair.older, pair.newer) and \
                    (best is None or str(doc.get("generated")) >= best[0]):
                sentence = origin_sentence({"reference": doc["reference"], "origins": [o]})
                best = (str(doc.get("generated")), {"run_id": other.name, "in": o["in"],
                                                    "sentence": sentence.removeprefix("Core or binding: ")})
    return best[1] if best else None


def blame_of(store: RunStore, good: str, bad: str) -> dict | None:
    """What `bisect blame` named for this very pair (its good and bad release), as plain typed values (the
    document is read back from disk: anything not of the shape it is written in is left out)."""
    from harness.results.store import BLAME

    raw = RunStore(store.dir / BLAME).document("blame")
    if not isinstance(raw, dict) or (raw.get("good"), raw.get("bad")) != (good, bad):
        return None

    def strings(value) -> list[str]:
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    rows = ((raw.get("kernels") or {}) if isinstance(raw.get("kernels"), dict) else {}).get("nodes")
    commits = raw.get("commits") if isinstance(raw.get("commits"), dict) else None
    suspects = []
    for c in (commits or {}).get("suspects") or []:
        if isinstance(c, dict) and all(isinstance(c.get(k), str) for k in ("sha", "date", "subject")):
            suspects.append({"sha": c["sha"], "date": c["date"], "subject": c["subject"],
                             "pr": c["pr"] if isinstance(c.get("pr"), int) else None})
    total = (commits or {}).get("total")
    return {
        "text": raw["text"] if isinstance(raw.get("text"), str) else "",
        "transformers": strings(raw.get("transformers")) or None,
        "kernels": [r["sentence"] for r in rows if isinstance(r, dict) and isinstance(r.get("sentence"), str)]
        if isinstance(rows, list) else [],
        "commits": {"total": total, "suspects": suspects} if isinstance(total, int) else None,
    }


def other_targets(run_dir: Path, key: dict, version: str, question) -> list[dict]:
    """Verdicts of `version` on the other targets that probed the same model and batch (next to this run), under
    `question` (a harness.summary.Question): a release reference is that run's own probe of the release."""
    from harness.session import judged_for

    found = []
    for other in sorted(Path(run_dir).parent.glob("*/")):
        okey = (RunStore(other).manifest() or {}).get("key") or {}
        if other.name == Path(run_dir).name or any(okey.get(k) != key.get(k) for k in ("model", "batch", *PACKAGE_KEYS)):
            continue  # another binding's run is the core-or-binding question's (binding_of_run), not a target's
        rec = judged_for(RunStore(other), question).get(version)
        if rec and rec["verdict"] in ("good", "bad") and okey.get("session_options") == key.get("session_options"):
            found.append({"arch": okey.get("arch"), "backend": okey.get("backend"), "cpu": okey.get("cpu"),
                          "version": version, "verdict": rec["verdict"], "why": rec["why"]})
    return found


def with_default_options(run_dir: Path, key: dict, pair: Pair, question) -> dict | None:
    """The pair's verdicts, under `question`, in a run beside this one of the same model, batch and target with
    onnxruntime's default session options: whether the defaults show what this run's options show."""
    from harness.session import judged_for

    same = ("model", "batch", "outputs", "arch", "backend", "cpu", "python", *PACKAGE_KEYS)
    for other in sorted(Path(run_dir).parent.glob("*/")):
        okey = (RunStore(other).manifest() or {}).get("key") or {}
        if other.name == Path(run_dir).name or okey.get("session_options") or \
                any(okey.get(k) != key.get(k) for k in same):
            continue
        recs = judged_for(RunStore(other), question)
        seen = {v: recs[v]["verdict"] for v in (pair.good, pair.bad) if v in recs}
        if all(seen.get(v) in ("good", "bad") for v in (pair.good, pair.bad)):
            return {"run_id": other.name, "verdicts": seen}
    return None


# the session options a run may set, as the report says them (harness.commands.common.search_spec)
OPTION_WORDS = {"graph_optimization_level": ("graph optimization level", "--graph-opt"),
                "intra_op_num_threads": ("intra_op_num_threads", "--threads")}


def options_said(options: dict) -> str:
    """Non-default session options in words: 'graph optimizations disabled (`--graph-opt disable`)'."""
    said = []
    for k, v in options.items():
        if k == "graph_optimization_level" and v == "disable":
            said.append("graph optimizations disabled (`--graph-opt disable`, `ORT_DISABLE_ALL`)")
            continue
        words, flag = OPTION_WORDS.get(k, (k, None))
        said.append(f"{escape.md_text(words)} {escape.md_code(str(v))}"
                    + (f" ({escape.md_code(f'{flag} {v}')})" if flag else ""))
    return ", ".join(said)


FP16_CPUS = ("Arm Neoverse N1/V1/V2 (AWS Graviton2-4, Ampere Altra, Google Axion), Cortex-A76 and later; "
             "without it (e.g. Cortex-A72, Raspberry Pi 4) onnxruntime keeps fp16 arithmetic in fp32")


def where_it_reproduces(env: dict, elsewhere: list[dict], first_bad: str | None) -> str:
    """The platform the verdicts came from, how to get one, and what other targets showed: for the repro."""
    flag = env.get("fp16_flag")
    text = f"Linux {env['arch']}, {env['backend']}, CPU {env['cpu_model']}"
    text += f", fp16 arithmetic ({flag})." if flag else ", no fp16 arithmetic flag."
    if env["arch"] == "aarch64" and flag == "asimdhp":
        text += f" Native Linux aarch64 CPUs with fp16 vector arithmetic should show it: {FP16_CPUS}."
    for o in elsewhere:
        cpu = f", CPU {o['cpu']}" if o.get("cpu") else ""
        text += (f" On {o['arch']} ({o['backend']}{cpu}) the same batch is {o['verdict']} on {o['version']}"
                 + (": that platform does not reproduce it." if o["verdict"] == "good" else "."))
    if first_bad and not any(o["arch"] != env["arch"] for o in elsewhere):
        text += " Other architectures were not checked."
    return text


def environment(recs: dict[str, dict], key: dict, version: str, script: str = SCRIPT) -> dict:
    """The platform a probe of `version` ran on, and how to run `script` there again."""
    from harness.runners import describe

    rec = recs.get(version) or next(iter(recs.values()))
    res = rec.get("result") or {}
    # the backends write shell commands of these (quoting each value): made one line each first, so that
    # no value can start a line of its own in the commands a reader pastes
    prov = {k: escape.printable(v) if isinstance(v, str) else v
            for k, v in {"backend": key.get("backend"), **(rec.get("provenance") or {})}.items()}
    cpu = res.get("cpu") or {}
    ort = res.get("onnxruntime") or {}
    seen = cpu.get("model")
    ran = describe(prov, escape.printable(seen) if seen else None, version, script)
    return {
        "os": res.get("platform", "?"),
        "arch": prov.get("arch", key.get("arch")),
        "cpu_model": ran["cpu_model"],
        "cpu_flags": cpu.get("flags") or [],
        # the CPU's fp16 vector-arithmetic flag: what onnxruntime's aarch64 kernels key on
        "fp16_flag": next((f for f in ("asimdhp", "avx512_fp16") if f in (cpu.get("flags") or [])), None),
        "python": res.get("python", "?"),
        "numpy": res.get("numpy", "?"),
        "node_version": prov.get("node_version"),  # a run of the node or web binding (no Python, no numpy)
        "backend": ran["how"],
        "reproduce": ran["reproduce"],
        "execution_provider": packages.of_key(key).provider,
        "requirement": packages.of_key(key).requirement(version),
        "build_info": ort.get("build_info", ""),
        "seen_in": version,
    }


# --- Markdown ----------------------------------------------------------------------------------


def save(run_dir: Path, doc: dict) -> Path:
    """The report's Markdown kept beside its repro script: next to the run, or in its question's folder."""
    return RunStore(Path(run_dir) / doc.get("files", "")).save_file(REPORT, markdown(doc))


PROFILE_CHART = "profile.svg"


def profile_section(prof: dict) -> list[str]:
    """"Where the time went": the boundary pair under onnxruntime's profiler, per op type and the slowest-changing
    nodes, from the run's profile.json (read as untrusted: every value escaped)."""
    t, code, prose = escape.md_text, escape.md_code, escape.md_prose
    if prof.get("error"):
        return ["### Where the time went", "", f"No profile of both releases: {t(prof['error'])}", ""]
    old, new = t(prof["old"]), t(prof["new"])
    chart = [f"Chart: {code(prof['chart'])} (beside the report).", ""] if prof.get("chart") else []
    L = ["### Where the time went", "", prose(prof.get("message") or ""), "", *chart,
         "onnxruntime's profiler (`enable_profiling`) on both releases, the median kernel time per run of each node "
         "over warm runs, summed per op type; largest increase first.", "",
         f"| op type | {old} | {new} | change | ratio |", "|---|---:|---:|---:|---:|"]
    for r in prof["ops"][:10]:
        ratio = f"{r['ratio']:.2f}x" if isinstance(r.get("ratio"), (int, float)) else "new"
        L.append(f"| {t(r['op'])} | {r['old_us'] / 1e3:.3f} ms | {r['new_us'] / 1e3:.3f} ms | "
                 f"{r['change_us'] / 1e3:+.3f} ms | {t(ratio)} |")
    L += ["", f"| node | op type | {old} | {new} | change |", "|---|---|---:|---:|---:|"]
    for r in prof["nodes"][:10]:
        L.append(f"| {code(r['node'])} | {t(r.get('op') or '')} | {r['old_us'] / 1e3:.3f} ms | "
                 f"{r['new_us'] / 1e3:.3f} ms | {r['change_us'] / 1e3:+.3f} ms |")
    return [*L, ""]


def model_needs(r: dict) -> list[str]:
    """What a reader needs of the full model that the report does not carry, in plain words: the hub's repo,
    revision and files; else the model's own file and its data files, to attach side by side (with their sizes
    and sha256); and that a model's data files travel with it."""
    t, code = escape.md_text, escape.md_code
    files = r.get("model_files") or []
    data = [f for f in files if f.get("data")]
    if r.get("model_embedded"):
        return []
    if r.get("model_attached"):
        if not data:
            return []
        return ["", f"{code(files[0]['file'])} reads its external data ({', '.join(code(f['file']) for f in data)}) "
                f"from beside it: `python {SCRIPT} --full` writes them side by side into `repro-model/` from "
                f"{code(REPRO_BATCH)}."]
    if r.get("hub"):
        h = r["hub"]
        return ["", f"The full model is not in this report: it is on the Hugging Face Hub, repo {code(h['repo_id'])} "
                f"at revision {code(h['revision'])}, files {', '.join(code(f) for f in h['files'])}; "
                f"`python {SCRIPT} --full` downloads them (pip install huggingface_hub)."]
    if not files:
        return ["", f"The full model ({code(r['model_file'])}) is not in this report and was not on the machine that "
                "made it: its size and sha256 are not known here."]
    said = ", ".join(f"{code(f['file'])} ({f['bytes']:,} bytes, sha256 {code(f['sha256'])})" for f in files)
    big = sum(f["bytes"] for f in files) > GITHUB_ATTACHMENT
    return ["", f"The full model is not in this report: attach {said}"
            + (", kept side by side in one directory (the model reads its external data from beside it)"
               if data else "")
            + (": over the 25 MB a GitHub attachment takes, so share them by a link" if big else "")
            + f"; `python {SCRIPT} --full {t(files[0]['file'])}` checks "
            + ("their" if data else "its") + " sha256."]


GITHUB_ATTACHMENT = 25 << 20  # bytes: the largest file a GitHub issue takes


def core_or_binding(b: dict) -> list[str]:
    """The question a binding's report leaves to `bisect compare`: is the change in onnxruntime's core (the wheel
    changes too) or in the binding? The command that asks it, and the answer of one already made."""
    t, code = escape.md_text, escape.md_code
    c = b.get("compare")
    if not c:
        return []
    L = ["### Core or binding", "", f"Whether the Python wheel changes at the same release ({t(b['package'])} "
         "shares onnxruntime's core with it) tells a change in the core from one in the binding:", "",
         *escape.md_fence(c["command"]), ""]
    if c.get("sentence"):
        L += [f"`bisect compare` (run {code(c['run_id'])}) answers it: {t(c['sentence'])}", ""]
    return L


def markdown(doc: dict) -> str:
    """The report as Markdown, under REPORT_LIMIT characters: with its scripts inside it when they fit (a binding's
    repro.mjs first, then repro.py), else saying to attach them. Every value of the evidence (names, versions,
    reasons, messages) is escaped where it lands (harness.report.escape): shown as it is, it makes no heading,
    link, HTML or table cell, and the code fences are longer than any backtick run they hold."""
    scripts = [REPRO_JS, SCRIPT] if (doc["repro"].get("js") or {}).get("script") else [SCRIPT]
    for n in range(len(scripts), 0, -1):
        text = _markdown(doc, paste=scripts[:n])
        if len(text) < REPORT_LIMIT:
            return text
    return _markdown(doc, paste=[])


def _markdown(doc: dict, paste: list[str]) -> str:
    t, code, prose = escape.md_text, escape.md_code, escape.md_prose
    env = doc["environment"]
    pair = Pair(doc["good"], doc["bad"], doc["mode"]) if doc.get("bad") else None
    good, bad = (pair.good, pair.bad) if pair else (None, None)
    name = doc["model"]["name"]
    package = (env.get("requirement") or "onnxruntime").split("==")[0].split("[")[0]
    b = doc.get("binding")  # a run of the node or web binding
    ep = env.get("execution_provider") or "CPUExecutionProvider"
    on = f"{env['arch']} CPU" if ep == "CPUExecutionProvider" else f"{env['arch']} {ep}"
    symptom = 'NaN/Inf rows' if doc['predicate'] == 'nan-or-inf' else t(doc['symptom'])
    # options that are not onnxruntime's defaults are not what a reader running the defaults sees: said at once
    off = ", graph optimizations disabled" if (doc.get("session_options") or {}).get("graph_optimization_level") \
        == "disable" else ""
    opts = f" with {options_said(doc['session_options'])}, not onnxruntime's default options," \
        if doc.get("session_options") else ""
    if pair is None:
        title = f"{name}: {package} verdicts on {on}"
    elif pair.fix:
        title = f"{name}: {doc['symptom']} on {on} fixed in {package} {good} (last bad {bad})"
    else:
        title = f"{name}: {doc['symptom']} on {on} since {package} {bad} (last good {good})"
    if b:
        title += f", in {b['words']}"
    L = [f"## {t(title + off)}", ""]
    q = doc["question"]
    asked = f"question {code(q['key'])}: " if q.get("key") else "a question asked on the command line: "
    L += [f"This report answers {asked}bad when {t(q.get('bad_means') or doc['bad_means'])} "
          f"({code('--bad-if ' + q['predicate'])}), {t(q['mode'])} over {t(q['range'][0])}..{t(q['range'][1])}.", ""]
    L += ["### Describe the bug", ""]
    # how the model ran: the wheel through its provider, or a binding (its package, in Node.js)
    via, rel = ("through the CPU execution provider", "onnxruntime") if not b else (
        f"with {code(b['package'])} ({t(b['words'])}) under Node.js {t(b['node_version'] or '?')} through {t(ep)}",
        t(b["package"]))
    if pair:
        span = doc["releases_in_range"]
        bisected = (f"bisected over the releases {t(span[0])}..{t(span[-1])} with ortbisect, one fresh process per "
                    "probe")
        if pair.fix:
            L.append(f"Running {code(name)} {via}{opts} gives {symptom} up to {rel} "
                     f"**{t(bad)}**, the last bad release; **{t(good)}** is the first good one: it is fixed there "
                     f"({bisected}).")
        else:
            L.append(f"Running {code(name)} {via}{opts} gives {symptom} from {rel} "
                     f"**{t(bad)}** on; **{t(good)}** is the last good release ({bisected}).")
        L.append(f"A release counts as bad when {t(doc['bad_means'])} ({code('--bad-if ' + doc['predicate'])}).")
        if doc["untested_between"]:
            L.append(f"Releases between them that could not be tested: {t(', '.join(doc['untested_between']))}.")
        d = doc.get("default_options")
        if d:
            seen = " and ".join(f"{t(v)} is {t(d['verdicts'][v])}" for v in (pair.older, pair.newer))
            same = d["verdicts"] == {good: "good", bad: "bad"}
            L.append(f"With the default options (run {code(d['run_id'])}) {seen}: "
                     + ("the defaults show it too." if same else "the defaults do not show it; these options do."))
        elif opts:
            L.append("Whether the default options show it too was not checked (a run without these options would "
                     "tell).")
    else:
        old, new = (n.split("_")[1] for n in end_names(doc.get("mode") or "regression"))
        L.append(f"No {old}-to-{new} boundary in the probed releases" + (f"{opts[:-1]}." if opts else "."))
    nv = doc["newest"]
    if nv.get("verdict") in ("good", "bad"):
        still = "**still present**" if nv["verdict"] == "bad" else "**not present**"
        L.append(f"\nIt is {still} in the newest release, {t(nv['version'])} ({t(nv['why'])}).")
    elif nv.get("verdict"):  # an error or a skip says nothing of the problem
        L.append(f"\nThe newest release, {t(nv['version'])}, could not be judged ({t(nv['verdict'])}: {t(nv['why'])}).")
    timed = any("timing" in p for p in doc["probes"])
    if timed:
        L += ["", "### Verdicts", "", "| release | verdict | latency x baseline (95% interval) | median latency | "
              "rounds | runs |", "|---|---|---:|---:|---:|---:|"]
    else:
        L += ["", "### Verdicts", "", "| release | verdict | NaN rows | Inf rows | rows |", "|---|---|---:|---:|---:|"]
    for p in doc["probes"]:
        mark = f"**{t(p['verdict'])}**" if p["version"] in (good, bad) else t(p["verdict"])
        if timed:
            tm = p.get("timing") or {}
            ms = f"{tm['candidate_median_s'] * 1e3:.3f} ms" if tm.get("candidate_median_s") else "-"
            L.append(f"| {t(p['version'])} | {mark} | {t(ratio_text(tm))} | {t(ms)} | {t(tm.get('rounds', '-'))} | "
                     f"{t(tm.get('runs', '-'))} |")
        else:
            L.append(f"| {t(p['version'])} | {mark} | {t(p['nan_rows'] or 0)} | {t(p['inf_rows'] or 0)} | {t(p['rows'] or 0)} |")
    ends = pair.ends() if pair else {}
    said = ", ".join(f"{k.replace('_', ' ')}: **{t(v)}**" for k, v in ends.items())
    L += ["", said[:1].upper() + said[1:] + "." if pair else "", ""]
    c = doc.get("commits") or {}
    if pair and all(c.get(k) for k in ends):  # older .. newer, each with its side
        c_old, c_new = (c[k] for k in ends)
        side = {good: "good", bad: "bad"}
        L += ["### Commit range", "", f"Built from {code(c_old)} ({t(pair.older)}, {side[pair.older]}) .. "
              f"{code(c_new)} ({t(pair.newer)}, {side[pair.newer]}), as "
              + ("each build's own binary names them" if b else "`onnxruntime.get_build_info()` reports them")
              + ": " + t(c["compare"] or ""), ""]
    if doc["explanation"]:
        L += ["### What changed", "", prose(doc["explanation"]["text"]), ""]
        if doc["explanation"].get("suspect"):
            L += [f"Suspect node: {code(doc['explanation']['suspect'])}.", ""]
    if doc.get("profile"):
        L += profile_section(doc["profile"])
    if doc.get("blame"):
        bl = doc["blame"]
        L += ["### Below the release", "", prose(bl["text"]), ""]
        if bl["commits"]:
            c = bl["commits"]
            L.append(f"Commits between the two builds that touch the source of what is named ({t(len(c['suspects']))} "
                     f"of {t(c['total'])}; suspects, not a verdict):")
            L += [f"- {code(x['sha'][:10])} {t(x['date'])} {t(x['subject'])}" for x in c["suspects"][:20]]
            L.append("")
    if doc["options"]:
        L += ["### Session options", ""]
        for o in doc["options"]:
            L.append(f"- {prose(o['message'])}")
        L.append("")
    if doc["repeat"]:
        L += ["### Determinism", ""]
        for r in doc["repeat"]:
            L.append(f"- onnxruntime {t(r['version'])}, {t(r['n'])} identical runs in fresh processes: "
                     f"{t(r['verdict'])} ({t(r['why'])}).")
        L.append("")
    if doc["mitigation"]:
        m = doc["mitigation"]
        L += ["### Workaround", "", prose(m["message"]),
              f"Patched model (nodes kept in fp32 with Cast in / Cast out): {code(m['patched_model'])}.", ""]
    r = doc["repro"]
    version = bad or (doc["probes"][-1]["version"] if doc["probes"] else doc["newest"]["version"])
    if b:
        L += core_or_binding(b)
    L += ["### To reproduce", "", f"Where: {t(doc['repro_where'])}", ""]
    needs = (f"Only Node.js (18 or newer) and {code(b['package'])} are needed for `{REPRO_JS}`, which runs the model "
             f"as the probes did; `{SCRIPT}` runs the same model on the Python wheel of the same release (onnxruntime "
             "and numpy)") if b else "Only onnxruntime and numpy are needed"
    scripts = f"`{REPRO_JS}` and `{SCRIPT}` hold" if b else f"`{SCRIPT}` holds"
    if r["reduced"]:
        red = r["reduced"]
        kept = (f"the full model's {t(red['of'])} nodes" if red.get("model_is_full") else
                f"{t(red['nodes'])} of the model's {t(red['of'])} nodes (original node names kept)")
        judged = " and the values its first bad release was compared with," if r.get("reduced_reference") else ""
        L.append(f"{scripts} a reduced repro made by ortbisect: {kept} on {t(red['rows'])} row(s),{judged} "
                 f"checked good on {t(red['pair'][0])} and bad on {t(red['pair'][1])} on the platform above. "
                 f"{needs}:")
    else:
        batch_in = next((f["where"] for f in r.get("files") or () if f.get("part") == "full_inputs"), None)
        L.append(needs + (f"; {scripts.removesuffix(' hold').removesuffix(' holds')} embed"
                          f"{'' if b else 's'} the batch (base64 .npz):" if batch_in and REPRO_BATCH not in batch_in
                          else ":"))
    if r.get("attached"):
        a = r["attached"]
        held = [f["file"] for f in r.get("files") or () if f.get("where") == a["file"]] or \
            [p.replace("_", " ") for p in a["parts"]]
        beside = f"`{REPRO_JS}` and `{SCRIPT}`" if b else f"`{SCRIPT}`"
        L += ["", f"Attach {code(a['file'])} ({a['bytes']:,} bytes, sha256 {code(a['sha256'])}) beside {beside}: "
              f"it holds {', '.join(map(code, held))}, too big to paste here."]
    for note in [*(r.get("notes") or ()), *([r["js"]["note"]] if b and r["js"].get("note") else [])]:
        L += ["", f"Note: {t(note)}"]
    if r.get("files"):
        L += ["", "| file | bytes | sha256 | where |", "|---|---|---|---|"]
        for f in r["files"]:
            size = f"{f['bytes']:,}" if isinstance(f.get("bytes"), int) else "not known"
            L.append(f"| {code(f['file'])} | {size} | {code(f['sha256']) if f.get('sha256') else 'not known'} | "
                     f"{t(f.get('where') or 'not in the report')} |")
    L += model_needs(r)
    sha = f"sha256 {r['model_sha256'][:16]}..." if r.get("model_sha256") else "sha256 not known"
    # every value (a requirement, a release, the model's file name) one quoted word of the lines a reader pastes
    sh = escape.sh_line
    full_args, full_said = (["--full"], "the full model, embedded") if r["model_embedded"] else (
        ["--full"], f"the full model, from {REPRO_BATCH}") if r.get("model_attached") else (
        ["--full"], "the full model, fetched from the hub by revision (pip install huggingface_hub)") if r["hub"] else (
        ["--full", r["model_file"]], f"the full model, attached to the issue ({sha})")
    by_path = bool(r["reduced"]) and r["reduced"].get("model_is_full") and not r["model_embedded"] \
        and not r.get("model_attached") and not r["hub"]
    first, last = ("first", "last") if pair and pair.fix else ("last", "first")
    if b and r["js"]["predicate"] is None:  # a slowdown: the note says repro.mjs gives no verdict
        L += ["", f"The same model and batch on the Python wheel of the same release (`{SCRIPT}`):"]
    elif b:  # the binding's own repro first, on the npm package the run probed
        js, hub = r["js"], r["hub"]

        def npm(v: str, comment: str = "") -> str:  # npm's own spelling of the release (releases.npm.npm_version)
            return sh(["npm", "install", "--ignore-scripts", f"{b['package']}@{b['npm'].get(v) or v}"], comment, 32)

        lines = [npm(version)]
        if r["reduced"]:
            lines.append(sh(["node", REPRO_JS, *([r["model_file"]] if by_path else [])], "the reduced batch on the full "
                            "model" if by_path else "the reduced model", 32))
        lines.append(sh(["node", REPRO_JS, "--full", hub["files"][0]], "the full model, downloaded from the hub "
                        f"(repo {hub['repo_id']}, revision {hub['revision']})", 32) if hub and not r["model_embedded"]
                     else sh(["node", REPRO_JS, *full_args], full_said, 32))
        same = bool(good) and js["predicate"] == doc["predicate"]
        if same:
            lines.append(npm(good, f"{good}, the {first} good release: the same commands exit 0"))
        L += ["", *escape.md_fence("\n".join(lines)), ""]
        if same:
            L += [f"`{REPRO_JS}` exits 1 (bad) on {t(bad)} and 0 (good) on {t(good)}; 2 when it cannot judge.", ""]
        L += [f"The same model and batch on the Python wheel of the same release (`{SCRIPT}`"
              + ("; whether the wheel shows it too is the core-or-binding question above" if b["compare"] else "")
              + "):"]
    wheel = packages.Package() if b else None
    requirement = wheel.requirement(version) if b else env.get("requirement") or f"onnxruntime=={version}"
    good_requirement = wheel.requirement(good) if b and good else doc["good_requirement"]
    commands = [sh(["pip", "install", requirement, "numpy"])]
    if r["reduced"]:
        commands.append(sh(["python", SCRIPT, r["model_file"]], "the reduced batch on the full model", 32) if by_path
                        else sh(["python", SCRIPT], "the reduced model", 32))
    after, sides = [], []
    if timed and good:  # a slowdown is a comparison: the script times both releases in turn
        commands = [*commands[:1], sh(["python", "-m", "venv", "good"]) + " && "
                    + sh(["good/bin/pip", "install", good_requirement, "numpy"])]
        full = sh(["python", SCRIPT, "--baseline", "good/bin/python", *full_args],
                  f"timed against the good release, in turn; {full_said}", 32)
    else:
        full = sh(["python", SCRIPT, *full_args], full_said, 32)
        # the script asks the run's question: good on the other side (on the wheel the run probed, not a binding's)
        if good and r["predicate"] == doc["predicate"] and not b:
            after = [sh(["pip", "install", good_requirement, "numpy"],
                        f"{good}, the {first} good release: the same commands exit 0", 32)]
            sides = [f"`{SCRIPT}` exits 1 (bad) on {t(bad)} and 0 (good) on {t(good)}; 2 when it cannot judge.", ""]
    L += ["", *escape.md_fence("\n".join([*commands, full, *after])), "", *sides]
    if env.get("reproduce"):
        L += [f"On the platform where ortbisect saw it ({t(env['backend'])}):", "", *escape.md_fence(env["reproduce"]), ""]
    texts = {REPRO_JS: (r.get("js") or {}).get("script"), SCRIPT: r["script"]}
    for name in [n for n in (REPRO_JS, SCRIPT) if texts[n]]:
        if name in paste:
            L += [f"<details><summary>{name}</summary>", "",
                  *escape.md_fence(texts[name].rstrip(), "js" if name == REPRO_JS else "python"), "", "</details>", ""]
        else:
            L += [f"Attach `{name}` too ({len(texts[name]):,} characters, sha256 "
                  f"{code(hashlib.sha256(texts[name].encode()).hexdigest())}): too long to paste here.", ""]
    L += ["### System information", "", "| | |", "|---|---|"]
    ran = f"{good} (good), {bad} (bad)" if pair else "?"
    if b:  # no Python and no numpy ran the probes: Node.js and the npm package did
        spelled = f"{b['npm'].get(good) or good} (good), {b['npm'].get(bad) or bad} (bad)" if pair else "?"
        runtime = [("Binding", f"{b['package']}, {b['words']}"), ("Node.js", b["node_version"] or "?"),
                   (f"{b['package']} (npm)", spelled)]
    else:
        runtime = [("Python", env["python"]), ("numpy", env["numpy"]), ("onnxruntime", ran)]
    rows = [("OS", env["os"]), ("Architecture", env["arch"]), ("CPU model", env["cpu_model"]),
            ("CPU flags", " ".join(map(str, env["cpu_flags"])) or "?"),
            ("CPU fp16 arithmetic flag", env["fp16_flag"] or "none (neither asimdhp nor avx512_fp16)"), *runtime,
            ("Execution provider", env["execution_provider"]), ("How it ran", env["backend"]),
            ("Session options", json.dumps(doc["session_options"]) if doc["session_options"] else "defaults")]
    for k, v in rows:
        L.append(f"| {t(k)} | {t(v)} |")
    if env.get("build_info"):
        L.append(f"| Build info ({t(env['seen_in'])}) | {t(env['build_info'])} |")
    if q.get("others"):
        L += ["", "### Other questions of this run", "",
              f"The same probes, judged under the run's other questions (`bisect report {t(doc['run_id'])} "
              "--question KEY` answers one):", ""]
        for o in q["others"]:
            found = "found its boundary" if o.get("found") else "found no boundary"
            L.append(f"- {code(o['key'])}: bad when {t(o['bad_means'])}, {t(o['mode'])} over {t(o['range'][0])}.."
                     f"{t(o['range'][1])}; {found}.")
    L += ["", f"<sub>Generated by ortbisect (run {t(doc['run_id'])}"
          + (f", question {t(q['key'])}" if q.get("key") else "") + ").</sub>", ""]
    return "\n".join(L)
