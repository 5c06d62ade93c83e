"""A paste-ready upstream report of a run (`bisect report RUN`): Markdown or JSON.

Everything comes from the run's evidence (manifest.json, probes.jsonl,
explanation.json, mitigation.json, and the options matrices of the same model,
batch and target in the same results directory); what is missing is made:
a diff of the boundary pair when --explain did not run, a probe of the newest
release when the run did not reach it (appended to the run's probes.jsonl like
any probe). The repro script (results/<run>/repro.py) needs only onnxruntime
and numpy: the batch is embedded (base64 .npz), the model too when it is small,
else referenced by path and sha256. It exits 0 when good, 1 when bad.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import shlex
import textwrap
from pathlib import Path

import numpy as np

from harness.results import EXPLANATION, RunStore
from harness.verdicts import Predicate, parse_predicate
from harness.versions import parse_version
from harness.vocabulary import GRAPH_LEVELS

SCRIPT = "repro.py"


def _predicate(manifest: dict) -> Predicate:
    """The run's predicate; one that needs a reference file is replaced by the default (the repro has none)."""
    p = parse_predicate(manifest.get("predicate") or str(Predicate()))
    return p if not p.needs_reference else Predicate()


def build(run_dir: Path, *, cache_dir: Path, offline: bool = False, probe: bool = True, embed_limit: int = 64 << 10,
          log=None) -> dict:
    """The report as a JSON-able document (and repro.py written next to the run)."""
    from harness.explain import explanation
    from harness.mitigate import MITIGATION
    from harness.plan import make_plan, release_listing, spec_of_run
    from harness.session import boundary_in, judged_records, probe_releases

    log = log or (lambda msg: None)
    run_dir = Path(run_dir)
    store = RunStore(run_dir)
    manifest = store.manifest()
    predicate = _predicate(manifest)
    recs = judged_records(store, predicate)
    if not recs:
        raise ValueError(f"{run_dir}: no probes recorded")
    key = manifest["key"]
    probed = sorted(recs, key=parse_version)
    spec = spec_of_run(run_dir, cache_dir, offline, probed[0], probed[-1])
    from harness.versions import Target

    all_releases = release_listing(cache_dir, offline)

    target = Target(key["arch"], key["python"])
    installable = [r for r in all_releases if r.wheel_for(target)]
    newest = installable[-1].version if installable else probed[-1]
    plan = None

    def get_plan(to: str):
        nonlocal plan
        if plan is None or plan.releases[-1].version != to:
            plan = make_plan(dataclasses.replace(spec, to=to), command=["bisect", "report", str(run_dir)], log=log)
        return plan

    # newest release: still present?
    if probe and newest not in recs:
        log(f"probing the newest release, {newest}")
        probe_releases(get_plan(newest), [newest])
        recs = judged_records(store, predicate)
    probed = sorted(recs, key=parse_version)
    found = boundary_in(recs, all_releases)
    last_good, first_bad, untested = found.last_good, found.first_bad, found.untested

    # explanation
    expl = store.document(EXPLANATION)
    if expl is None and probe and last_good and first_bad:
        expl = explanation(get_plan(probed[-1]), last_good, first_bad, log=log)

    # options matrices and mitigation of the same model, batch and target
    from harness.triage import find_summaries

    match = {k: key.get(k) for k in ("model", "batch", "outputs", "arch", "backend", "cpu", "python")}
    options = find_summaries(run_dir.parent, "options", match)
    repeats = find_summaries(run_dir.parent, "repeat", match)
    mitigation = store.document(MITIGATION)

    repro = write_repro(store, manifest, key, predicate, embed_limit)
    env = environment(recs, key, first_bad or probed[-1], SCRIPT + ("" if repro["model_embedded"] else " model.onnx"))
    doc = {
        "run_id": run_dir.name,
        "run_dir": str(run_dir),
        "model": manifest["model"],
        "batch": manifest["batch"],
        "outputs": key.get("outputs"),
        "session_options": key.get("session_options") or {},
        "predicate": str(predicate),
        "environment": env,
        "probes": [{"version": v, "verdict": recs[v]["verdict"], "why": recs[v]["why"],
                    "nan_rows": recs[v].get("nan_rows"), "inf_rows": recs[v].get("inf_rows"), "rows": recs[v].get("rows")}
                   for v in probed],
        "releases_in_range": [r.version for r in found.releases],
        "last_good": last_good,
        "first_bad": first_bad,
        "untested_between": untested,
        "monotone": found.monotone,
        "newest": {"version": newest, "verdict": recs.get(newest, {}).get("verdict"), "why": recs.get(newest, {}).get("why")},
        "explanation": expl,
        "options": [{k: o.get(k) for k in ("version", "message", "changing_dimensions", "bisections", "dimensions",
                                           "verdicts_seen", "na_count", "results")} for o in options],
        "repeat": [{k: o.get(k) for k in ("version", "n", "verdict", "why", "results")} for o in repeats],
        "mitigation": ({k: mitigation.get(k) for k in ("message", "all_clean", "island", "culprits", "range",
                                                       "worst_cosine", "worst_max_abs")}
                       | {"patched_model": mitigation["patched"]["path"]}) if mitigation else None,
    }
    doc["repro"] = repro
    return doc


def environment(recs: dict[str, dict], key: dict, version: str, script: str = SCRIPT) -> dict:
    """The platform a probe of `version` ran on, and how to run `script` there again."""
    from harness.runners import describe

    rec = recs.get(version) or next(iter(recs.values()))
    res = rec.get("result") or {}
    prov = {"backend": key.get("backend"), **(rec.get("provenance") or {})}
    cpu = res.get("cpu") or {}
    ort = res.get("onnxruntime") or {}
    ran = describe(prov, cpu.get("model"), version, script)
    return {
        "os": res.get("platform", "?"),
        "arch": prov.get("arch", key.get("arch")),
        "cpu_model": ran["cpu_model"],
        "cpu_flags": cpu.get("flags") or [],
        # the CPU's fp16 vector-arithmetic flag: what onnxruntime's aarch64 kernels key on
        "fp16_flag": next((f for f in ("asimdhp", "avx512_fp16") if f in (cpu.get("flags") or [])), None),
        "python": res.get("python", "?"),
        "numpy": res.get("numpy", "?"),
        "backend": ran["how"],
        "reproduce": ran["reproduce"],
        "execution_provider": "CPUExecutionProvider",
        "build_info": ort.get("build_info", ""),
        "seen_in": version,
    }


# --- repro script --------------------------------------------------------------------------------


def _npz_b64(path: Path) -> str:
    with np.load(path) as d:
        arrays = {k: d[k] for k in d.files}
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return base64.b64encode(buf.getvalue()).decode()


def _wrap(b64: str) -> str:
    return "\n".join(textwrap.wrap(b64, 100))


def write_repro(store: RunStore, manifest: dict, key: dict, predicate: Predicate, embed_limit: int) -> dict:
    model_path = Path(manifest["model"]["path"])
    data = model_path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    embedded = len(data) <= embed_limit and not manifest["model"].get("data_files")
    model_block = (f'MODEL_B64 = """\n{_wrap(base64.b64encode(data).decode())}\n"""\n'
                   f"MODEL = None  # embedded above\n") if embedded else \
        (f"MODEL_B64 = None\nMODEL = {str(model_path)!r}  # sha256 {sha}\n")
    script = f'''\
"""Repro: {manifest["model"]["name"]} on onnxruntime (CPUExecutionProvider). Needs only onnxruntime and numpy.

    pip install onnxruntime==VERSION numpy && python {SCRIPT} [MODEL.onnx]

Prints the verdict; exit status 0 good, 1 bad. Bad means: {predicate} in the outputs {", ".join(key.get("outputs") or []) or "(all)"}.
"""
import base64, hashlib, io, sys
import numpy as np
import onnxruntime as ort

{model_block}MODEL_SHA256 = {sha!r}
OUTPUTS = {list(key.get("outputs") or [])!r}
SESSION_OPTIONS = {json.dumps(key.get("session_options") or {})}
PREDICATE = {str(predicate)!r}
INPUTS_NPZ_B64 = """
{_wrap(_npz_b64(Path(manifest["batch"]["path"])))}
"""

LEVELS = {json.dumps(GRAPH_LEVELS)}


def main():
    if len(sys.argv) > 1:
        model = open(sys.argv[1], "rb").read()
    elif MODEL_B64:
        model = base64.b64decode(MODEL_B64)
    else:
        model = open(MODEL, "rb").read()
    if hashlib.sha256(model).hexdigest() != MODEL_SHA256:
        print("warning: the model's sha256 differs from the reported one", file=sys.stderr)
    feeds = dict(np.load(io.BytesIO(base64.b64decode(INPUTS_NPZ_B64))))
    so = ort.SessionOptions()
    if SESSION_OPTIONS.get("graph_optimization_level"):
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[SESSION_OPTIONS["graph_optimization_level"]])
    if SESSION_OPTIONS.get("intra_op_num_threads") is not None:
        so.intra_op_num_threads = int(SESSION_OPTIONS["intra_op_num_threads"])
    sess = ort.InferenceSession(model, sess_options=so, providers=["CPUExecutionProvider"])
    names = OUTPUTS or [o.name for o in sess.get_outputs()]
    outs = sess.run(names, feeds)
    nan_rows = inf_rows = zero_rows = rows = 0
    max_abs = 0.0
    for a in outs:
        a = np.asarray(a)
        r = a.reshape(a.shape[0], -1) if a.ndim else a.reshape(1, 1)
        rows = max(rows, r.shape[0])
        if a.dtype.kind == "f":
            nan_rows += int(np.isnan(r).any(axis=1).sum())
            inf_rows += int(np.isinf(r).any(axis=1).sum())
            fin = r[np.isfinite(r)]
            max_abs = max(max_abs, float(np.abs(fin).max()) if fin.size else 0.0)
        zero_rows += int((r == 0).all(axis=1).sum())
    kind, _, bound = PREDICATE.partition(">")
    bad = {{"nan-or-inf": nan_rows + inf_rows > 0, "nan": nan_rows > 0, "zero-rows": zero_rows > 0,
           "max-abs": bound and max_abs > float(bound)}}[kind]
    verdict = "bad" if bad else "good"
    print(f"onnxruntime {{ort.__version__}}: {{verdict}} ({{nan_rows}} NaN rows, {{inf_rows}} Inf rows of {{rows}})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
'''
    path = store.save_file(SCRIPT, script)
    return {"path": str(path), "model_embedded": embedded, "model": None if embedded else str(model_path),
            "model_sha256": sha, "script": script}


# --- Markdown ----------------------------------------------------------------------------------


def markdown(doc: dict) -> str:
    env = doc["environment"]
    lg, fb = doc["last_good"], doc["first_bad"]
    what = {"nan-or-inf": "NaN/Inf", "nan": "NaN", "zero-rows": "all-zero"}.get(doc["predicate"], doc["predicate"])
    title = (f"{doc['model']['name']}: {what} outputs on {env['arch']} CPU since onnxruntime {fb} "
             f"(last good {lg})") if fb else f"{doc['model']['name']}: onnxruntime verdicts on {env['arch']}"
    L = [f"## {title}", ""]
    L += ["### Describe the bug", ""]
    if fb:
        L.append(f"Running `{doc['model']['name']}` through the CPU execution provider gives "
                 f"{'NaN/Inf' if doc['predicate'] == 'nan-or-inf' else doc['predicate']} rows from onnxruntime "
                 f"**{fb}** on; **{lg}** is the last good release (bisected over the releases "
                 f"{doc['releases_in_range'][0]}..{doc['releases_in_range'][-1]} with ortbisect, one fresh process per probe).")
        if doc["untested_between"]:
            L.append(f"Releases between them that could not be tested: {', '.join(doc['untested_between'])}.")
    else:
        L.append("No good-to-bad boundary in the probed releases.")
    nv = doc["newest"]
    if nv.get("verdict"):
        still = "**still present**" if nv["verdict"] == "bad" else "**not present**"
        L.append(f"\nIt is {still} in the newest release, {nv['version']} ({nv['why']}).")
    L += ["", "### Verdicts", "", "| release | verdict | NaN rows | Inf rows | rows |", "|---|---|---:|---:|---:|"]
    for p in doc["probes"]:
        mark = f"**{p['verdict']}**" if p["version"] in (lg, fb) else p["verdict"]
        L.append(f"| {p['version']} | {mark} | {p['nan_rows'] or 0} | {p['inf_rows'] or 0} | {p['rows'] or 0} |")
    L += ["", f"Last good: **{lg}**, first bad: **{fb}**." if fb else "", ""]
    if doc["explanation"]:
        L += ["### What changed", "", doc["explanation"]["text"], ""]
        if doc["explanation"].get("suspect"):
            L += [f"Suspect node: `{doc['explanation']['suspect']}`.", ""]
    if doc["options"]:
        L += ["### Session options", ""]
        for o in doc["options"]:
            L.append(f"- {o['message']}")
        L.append("")
    if doc["repeat"]:
        L += ["### Determinism", ""]
        for r in doc["repeat"]:
            L.append(f"- onnxruntime {r['version']}, {r['n']} identical runs in fresh processes: {r['verdict']} ({r['why']}).")
        L.append("")
    if doc["mitigation"]:
        m = doc["mitigation"]
        L += ["### Workaround", "", m["message"],
              f"Patched model (nodes kept in fp32 with Cast in / Cast out): `{m['patched_model']}`.", ""]
    L += ["### To reproduce", "",
          f"Model: `{doc['model']['name']}` (sha256 `{doc['repro']['model_sha256']}`)" +
          ("; embedded in the script." if doc["repro"]["model_embedded"] else
           f"; the script reads it from `{doc['repro']['model']}` or from the path given as its argument."),
          "The batch is embedded in the script (base64 .npz). Only onnxruntime and numpy are needed:", "",
          "```", f"pip install onnxruntime=={fb or doc['probes'][-1]['version']} numpy", f"python {SCRIPT}" +
          ("" if doc["repro"]["model_embedded"] else " model.onnx"), "```", ""]
    if env.get("reproduce"):
        L += [f"On the platform where ortbisect saw it ({env['backend']}):", "", "```", env["reproduce"], "```", ""]
    L += ["<details><summary>repro.py</summary>", "", "```python", doc["repro"]["script"].rstrip(), "```", "",
          "</details>", ""]
    L += ["### System information", "", "| | |", "|---|---|"]
    rows = [("OS", env["os"]), ("Architecture", env["arch"]), ("CPU model", env["cpu_model"]),
            ("CPU flags", " ".join(env["cpu_flags"]) or "?"),
            ("CPU fp16 arithmetic flag", env["fp16_flag"] or "none (neither asimdhp nor avx512_fp16)"),
            ("Python", env["python"]), ("numpy", env["numpy"]), ("onnxruntime", f"{lg} (good), {fb} (bad)" if fb else "?"),
            ("Execution provider", env["execution_provider"]), ("How it ran", env["backend"]),
            ("Session options", json.dumps(doc["session_options"]) if doc["session_options"] else "defaults")]
    for k, v in rows:
        L.append(f"| {k} | {str(v).replace('|', '/')} |")
    if env.get("build_info"):
        L.append(f"| Build info ({env['seen_in']}) | {env['build_info'].replace('|', '/')} |")
    L += ["", f"<sub>Generated by ortbisect from {doc['run_dir']} ({shlex.quote(doc['run_id'])}).</sub>", ""]
    return "\n".join(L)
