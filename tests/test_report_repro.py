"""The report's repro script asks the run's question, and the report fits where it is pasted.

The script judges with the run's conditions and bounds, against the reference values the run compared with
(a file's, a reference release's, the fp32 model's), measuring with the harness's own functions; a batch too
big for a report is attached beside it. Checked on the same arrays against harness.verdicts, and on real
releases in fresh environments: exit 0 on the last good release, 1 on the first bad.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import re
import shutil
import subprocess
import textwrap

import builders
import numpy as np
import pytest

from harness import verdicts, worker
from harness.report import repro, upstream
from harness.results.store import REPRO, REPRO_BATCH

# -- the script's judgement is the harness's -------------------------------------------------------------

REFERENCE = {"y": np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)}


def _cases() -> dict[str, dict[str, np.ndarray]]:
    """Outputs of one model, named by what they show against REFERENCE."""
    y = REFERENCE["y"]
    nan, zero, drift = y.copy(), y.copy(), y.copy()
    nan[2, 1] = np.nan
    zero[3] = 0
    drift[1] += 1e-3
    return {"same": {"y": y.copy()}, "one ulp": {"y": np.nextafter(y, np.float32(np.inf))},
            "drift 1e-3": {"y": drift}, "flipped": {"y": -y}, "a NaN row": {"y": nan}, "an all-zero row": {"y": zero},
            "fp16 near the ceiling": {"y": (y * 30000).astype(np.float16)},
            "another shape": {"y": y[:, :3].copy()}, "big": {"y": y * 1e4}}


PREDICATES = ["rel-diff>1e-3@1e-5", "abs-diff>1e-4", "nan-or-inf", "nan", "zero-rows", "max-abs>10", "headroom>0.5", "error", "crash", "cosine<0.999",
              "rel-diff>1e-3", "rel-diff>1e-6", "error,cosine<0.999", "nan,max-abs>1e3"]


def _script_judge():
    """The judge as the script holds it, run as the script runs it (numpy and hashlib only)."""
    namespace = {"np": np, "hashlib": hashlib}
    exec(compile(repro.judge_source(), "repro.py", "exec"), namespace)  # the project's own text, not evidence
    return namespace


def _harness_verdict(outputs: dict, predicate: str, reference: dict | None) -> str:
    names, values, feeds = list(outputs), list(outputs.values()), {"x": np.zeros((4, 2), np.float32)}
    record = {"status": "ran", "result": {"outputs": [worker.output_stats(np, n, v) for n, v in outputs.items()],
                                          "rows": worker.rows_summary(np, feeds, names, values)}}
    return verdicts.judge(record, verdicts.parse_predicate(predicate), reference, outputs if reference else None,
                          "ref")["verdict"]


@pytest.mark.parametrize("predicate", PREDICATES)
def test_the_scripts_judge_gives_the_harness_verdict_on_the_same_arrays(predicate):
    ns = _script_judge()
    pred = verdicts.parse_predicate(predicate)
    reference = REFERENCE if pred.needs_reference else None
    for case, outputs in _cases().items():
        verdict, why = ns["judge"](list(outputs), list(outputs.values()), {"x": np.zeros((4, 2), np.float32)},
                                   reference, [[c.kind, c.bound, c.floor] for c in pred.conditions])
        harness = _harness_verdict(outputs, predicate, reference)
        assert {"good": "good", "bad": "bad", None: "error"}[verdict] == harness, (case, why)
        assert why == verdicts.judge({"status": "ran", "result": {
            "outputs": [worker.output_stats(np, n, v) for n, v in outputs.items()],
            "rows": worker.rows_summary(np, {"x": np.zeros((4, 2))}, list(outputs), list(outputs.values()))}},
            pred, reference, outputs if reference else None, "ref")["why"], case


def test_every_condition_a_run_takes_is_one_entry_of_the_scripts_table_and_abs_diff_is_there():
    ns = _script_judge()
    # every condition is measured by the harness's own verdicts._measure, copied in: one table, not two
    own = ast.unparse(repro._unannotated(ast.parse(textwrap.dedent(inspect.getsource(verdicts._measure))).body[0]))
    assert own.replace("def _measure(", "def measure(", 1) in repro.judge_source()
    assert set(verdicts.CONDITIONS) >= {"abs-diff", "rel-diff", "cosine", "error", "crash"}
    # abs-diff: max |a - b| over the values finite in both
    for case, outputs in _cases().items():
        a, r = outputs["y"].astype(np.float64), REFERENCE["y"].astype(np.float64)
        if a.shape != r.shape or case == "a NaN row":  # non-finite where the reference is finite: bad, as the harness says
            continue
        both = np.isfinite(a) & np.isfinite(r)
        want = float(np.abs(a - r)[both].max())
        for bound, bad in ((want * 0.99, want > 0), (want * 1.01 + 1e-12, False)):
            verdict, why = ns["judge"](["y"], [outputs["y"]], {"x": np.zeros((4, 2))}, REFERENCE, [["abs-diff", bound, None]])
            assert verdict == ("bad" if bad else "good"), (case, why)
            if "abs-diff" in verdicts.CONDITIONS and case != "a NaN row":  # once the harness judges abs-diff too
                assert _harness_verdict(outputs, f"abs-diff>{bound!r}", REFERENCE) == verdict, case


# -- repro.mjs judges as the harness does --------------------------------------------------------------------

# outputs of other types and shapes than _cases(): the rows repro.mjs counts from a binding's tensors
MORE_CASES = {
    "int64 with a zero row": {"y": np.array([[1, 2], [0, 0], [3, -4], [5, 6]], np.int64)},
    "bool": {"y": np.array([[True, False], [False, False], [True, True], [False, True]])},
    "fp16 Inf": {"y": np.array([[1, np.inf], [2, 3], [-np.inf, 0], [4, 5]], np.float16)},
    "another first axis beside the batch's": {"y": REFERENCE["y"], "z": np.array([[np.nan, 1]] * 3, np.float32)},
    "a scalar beside the batch": {"y": REFERENCE["y"], "s": np.array(np.inf, np.float32)},
    "no output of the batch's rows": {"a": np.zeros((5, 2), np.float32), "b": np.ones((5, 1), np.float32),
                                      "c": np.full((3, 2), np.nan, np.float32)},
    "a tie of first axes": {"a": np.full((5, 2), np.nan, np.float32), "b": np.zeros((3, 1), np.float32)},
    "the inputs' rows, fewer outputs of them": {"a": np.array([[np.nan], [1], [1], [1]], np.float32),
                                                "d": np.array([[1], [np.nan], [1], [1]], np.float32),
                                                **{k: np.ones((5, 1), np.float32) for k in "bce"}},
    "huge": {"y": REFERENCE["y"] * 617283.5},
    "an empty row width": {"y": np.zeros((4, 0), np.float32)},
}


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js runs repro.mjs (apt-get install nodejs)")
def test_the_node_scripts_judge_gives_the_harness_verdict_and_words_on_the_same_arrays(tmp_path):
    """repro.mjs's judgement (harness.report.repro_node: worker.js's .npz reading and the row counts of
    worker.rows_summary and verdicts.rows_summary, in verdicts' words) run by Node.js on the arrays a binding gives
    it: for every condition it judges, the harness's verdict and the same sentence of what was measured."""
    from harness.report import repro_node

    predicates = [p for p in PREDICATES if all(c.kind in repro_node.JUDGED for c in verdicts.parse_predicate(p).conditions)]
    assert {c for p in predicates for c in p.split(",")} >= {"nan-or-inf", "nan", "zero-rows", "max-abs>10",
                                                             "headroom>0.5", "error", "crash"}
    feeds = {"x": np.zeros((4, 2), np.float32)}
    np.savez(tmp_path / "feeds.npz", **feeds)
    cases, want = [], []
    for i, (case, outputs) in enumerate({**_cases(), **MORE_CASES}.items()):
        np.savez(tmp_path / f"{i}.npz", **outputs)
        cases.append({"outputs": str(tmp_path / f"{i}.npz"), "names": list(outputs),
                      "conditions": [[[c.kind, c.bound] for c in verdicts.parse_predicate(p).conditions]
                                     for p in predicates]})
        record = {"status": "ran", "result": {
            "outputs": [worker.output_stats(np, n, v) for n, v in outputs.items()],
            "rows": worker.rows_summary(np, feeds, list(outputs), list(outputs.values()))}}
        for p in predicates:
            judged = verdicts.judge(record, verdicts.parse_predicate(p))
            want.append((case, p, judged["verdict"], judged["why"]))
    (tmp_path / "cases.json").write_text(json.dumps({"feeds": str(tmp_path / "feeds.npz"), "cases": cases}))
    program = tmp_path / "judge.mjs"
    program.write_text(repro_node.IMPORTS + repro_node.worker_source() + repro_node.JUDGE + """
const ort = { Tensor: class { constructor(type, data, dims) { Object.assign(this, { type, data, dims }); } } };
const asked = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const feeds = feedsOf(ort, fs.readFileSync(asked.feeds));
console.log(JSON.stringify(asked.cases.flatMap((c) => {
  const got = feedsOf(ort, fs.readFileSync(c.outputs));
  return c.conditions.map((conditions) => judge(feeds, c.names.map((n) => got[n]), conditions));
})));
""")
    out = subprocess.run(["node", str(program), str(tmp_path / "cases.json")], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert len(got) == len(want)
    for (case, p, verdict, why), (js_verdict, js_why) in zip(want, got):
        assert ({"good": "good", "bad": "bad", None: "error"}[js_verdict], js_why) == (verdict, why), (case, p)


# -- real releases: the question travels ---------------------------------------------------------------------


def _norm_rounding(tmp_path):
    """norm_rounding: finite on every release, its outputs change at 1.20.0 (see tests/builders.py)."""
    model = builders.save(builders.norm_rounding_model(), tmp_path / "norm_rounding.onnx")
    np.savez(tmp_path / "batch.npz", **builders.norm_rounding_inputs())
    return model, tmp_path / "batch.npz"


def _outputs_on(python, model, batch, dest):
    """The model's outputs on the release of `python` (a fresh environment), saved as a reference file."""
    code = ("import sys, numpy as np, onnxruntime as ort; s = ort.InferenceSession(sys.argv[1], "
            "providers=['CPUExecutionProvider']); f = dict(np.load(sys.argv[2])); "
            "np.savez(sys.argv[3], **dict(zip([o.name for o in s.get_outputs()], s.run(None, f))))")
    subprocess.run([str(python), "-c", code, str(model), str(batch), str(dest)], check=True, capture_output=True)
    return dest


def _report(bisect, run_id, results):
    rep = bisect("report", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--no-probe",
                 "--format", "json")
    assert rep.returncode == 0, rep.stderr
    return json.loads(rep.stdout)


QUESTIONS = {
    "reference release": lambda tmp, model, batch, py: ("--reference-release", "1.19.2", "--bad-if", "cosine<0.999"),
    "reference file": lambda tmp, model, batch, py: (
        "--reference", str(_outputs_on(py("1.19.2"), model, batch, tmp / "ref.npz")), "--bad-if", "rel-diff>0.01"),
    "fp32": lambda tmp, model, batch, py: ("--reference", "fp32", "--bad-if", "cosine<0.999"),
}


@pytest.mark.release
@pytest.mark.parametrize("question", sorted(QUESTIONS))
def test_the_repro_of_a_reference_question_is_good_on_the_last_good_release_and_bad_on_the_first_bad(
        question, bisect, tmp_path, fresh_python):
    model, batch = _norm_rounding(tmp_path)
    results = tmp_path / "results"
    asked = QUESTIONS[question](tmp_path, model, batch, fresh_python)
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0", *asked,
               "--json", results=results)
    assert r.returncode == 0, r.stderr
    assert (r.json()["last_good"], r.json()["first_bad"]) == ("1.19.2", "1.20.0")
    doc = _report(bisect, r.json()["run_id"], results)
    script = results / r.json()["run_id"] / REPRO
    measure = asked[-1].split("<")[0].split(">")[0]
    words = {"cosine": "worst row's cosine", "rel-diff": "max relative difference"}[measure]
    for version, verdict, rc in (("1.20.0", "bad", 1), ("1.19.2", "good", 0)):
        out = builders.run_script(fresh_python(version), script)
        assert out.returncode == rc, out.stdout + out.stderr
        assert out.stdout.startswith(f"onnxruntime {version}, full model: {verdict} ({words}"), out.stdout
    assert doc["repro"]["predicate"] == asked[-1] and doc["repro"]["reference"], doc["repro"]["notes"]


# -- the reduced repro of a reference question -------------------------------------------------------------


@pytest.mark.release
@pytest.mark.parametrize("embed_limit", [None, "100"], ids=["embedded", "attached"])
def test_the_reduced_repro_of_a_reference_question_carries_its_reference_and_says_what_is_where(
        embed_limit, bisect, tmp_path, fresh_python):
    """A reference release's question reduced to a few nodes: `python repro.py` runs the reduced model, judged
    against the values the reduction's first bad release was compared with (reduced/reference.npz): good on
    the last good release, bad on the first bad. Parts over the embed limit go into the attachment, and the
    report names every file (its path under the results, size, sha256) and where it is."""
    model, batch = _norm_rounding(tmp_path)
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0",
               "--reference-release", "1.19.2", "--bad-if", "cosine<0.999", "--reduce", "--json", results=results)
    assert r.returncode == 0, r.stderr
    run_id = r.json()["run_id"]
    red = r.json()["reduced"]
    assert red["verified"]["flips"] and red["reduced"] and red["model"]["file"] == "model.onnx", red
    more = ("--embed-limit", embed_limit) if embed_limit else ()
    rep = bisect("report", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--no-probe",
                 "--format", "json", *more)
    assert rep.returncode == 0, rep.stderr
    doc = json.loads(rep.stdout)
    assert doc["repro"]["reduced"] and doc["repro"]["reduced_reference"], doc["repro"]["notes"]
    where = {f["part"]: f for f in doc["repro"]["files"]}
    reduced_dir = results / run_id / "reduced"
    for part, name in (("reduced_model", "model.onnx"), ("reduced_inputs", "inputs.npz"),
                       ("reduced_reference", "reference.npz")):
        data = (reduced_dir / name).read_bytes()
        assert where[part]["file"] == f"{run_id}/reduced/{name}"
        assert (where[part]["bytes"], where[part]["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    attached = set((doc["repro"]["attached"] or {}).get("parts") or ())
    if embed_limit:
        assert {"reduced_model", "reduced_inputs", "reduced_reference"} <= attached
        assert all(where[p]["where"] == REPRO_BATCH for p in attached)
    else:
        assert where["reduced_model"]["where"] == REPRO
    md = bisect("report", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--no-probe",
                *more)
    assert f"`{run_id}/reduced/model.onnx`" in md.stdout and where["reduced_model"]["sha256"] in md.stdout
    script = results / run_id / REPRO
    for version, verdict, rc in (("1.19.2", "good", 0), ("1.20.0", "bad", 1)):
        out = builders.run_script(fresh_python(version), script)
        assert out.returncode == rc, out.stdout + out.stderr
        assert out.stdout.startswith(f"onnxruntime {version}, reduced model: {verdict} (worst row's cosine"), out.stdout


@pytest.mark.release
def test_a_rows_only_reduction_against_a_reference_file_runs_the_full_model_on_its_rows(bisect, tmp_path, fresh_python):
    """A reference file's question reduces rows only (its values are of the model's outputs): the rows are cut
    along each input's and output's batch axis (a state [2, N, W] on axis 1), and `python repro.py` runs the
    full model, embedded, on the row kept against the file's values of that row."""
    d = tmp_path / "made"
    d.mkdir()
    model = builders.save(builders.recurrent_state_model(), d / "recurrent.onnx")
    np.savez(d / "batch.npz", **builders.recurrent_state_inputs(6, big=(4,)))
    ref = _outputs_on(fresh_python("1.19.2"), model, d / "batch.npz", d / "ref.npz")
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model), "--inputs", str(d / "batch.npz"), "--from", "1.19.2", "--to", "1.20.0",
               "--reference", str(ref), "--bad-if", "rel-diff>0.01", "--reduce", "--json", results=results)
    assert r.returncode == 0, r.stderr
    run_id, red = r.json()["run_id"], r.json()["reduced"]
    assert red["rows"]["kept"] == [4] and red["model"]["file"] is None and red["reduced"], red
    with np.load(results / run_id / "reduced" / "reference.npz") as kept:
        assert kept["stateN"].shape == (2, 1, 8) and kept["output"].shape == (1, 8)
    doc = _report(bisect, run_id, results)
    assert doc["repro"]["reduced"]["model_is_full"] and doc["repro"]["reduced_reference"], doc["repro"]["notes"]
    for version, verdict, rc in (("1.19.2", "good", 0), ("1.20.0", "bad", 1)):
        out = builders.run_script(fresh_python(version), results / run_id / REPRO)
        assert out.returncode == rc, out.stdout + out.stderr
        assert out.stdout.startswith(f"onnxruntime {version}, reduced model: {verdict}"), out.stdout


# -- a report fits in an issue -----------------------------------------------------------------------------


@pytest.mark.release
def test_a_2_mb_batch_is_attached_beside_a_report_under_60000_characters(bisect, tmp_path, fresh_python):
    model = builders.save(builders.residual_norm_model(), tmp_path / "residual_norm.onnx")
    rows = 131072  # x 8 fp16 values: 2 MB, noise that does not compress
    x = np.random.default_rng(3).uniform(-1, 1, (rows, 8)).astype(np.float16)
    x[:4] = builders.residual_norm_inputs()["x"]  # two rows that overflow from 1.20.0 on
    np.savez(tmp_path / "batch.npz", x=x)
    assert (tmp_path / "batch.npz").stat().st_size >= 2 << 20
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model), "--inputs", str(tmp_path / "batch.npz"), "--from", "1.19.2", "--to",
               "1.20.0", "--json", results=results)
    assert r.returncode == 0 and r.json()["first_bad"] == "1.20.0", r.stderr
    run_dir = results / r.json()["run_id"]
    rep = bisect("report", r.json()["run_id"], "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir),
                 "--no-probe")
    assert rep.returncode == 0, rep.stderr
    md = (run_dir / "report.md").read_text()
    assert len(md) < upstream.REPORT_LIMIT == 60_000 and len(rep.stdout) < 60_000
    attached = run_dir / REPRO_BATCH
    sha = hashlib.sha256(attached.read_bytes()).hexdigest()
    assert [line for line in md.splitlines() if line.startswith(f"Attach `{REPRO_BATCH}`") and sha in line]
    assert "<summary>repro.py</summary>" in md  # the script itself is pasted, the batch is not
    script = run_dir / REPRO
    for version, rc in (("1.19.2", 0), ("1.20.0", 1)):
        out = builders.run_script(fresh_python(version), script)
        assert out.returncode == rc, out.stdout + out.stderr
        assert f"of {rows}" in out.stdout  # the whole batch, read from beside the script
    # a script too long to paste is named for attaching too, with its sha256, and the report still fits
    doc = _report(bisect, r.json()["run_id"], results)
    long = "x = 1\n" * 20000
    md = upstream.markdown({**doc, "repro": {**doc["repro"], "script": long}})
    assert len(md) < 60_000 and "<summary>repro.py</summary>" not in md
    assert f"Attach `{REPRO}` too (120,000 characters, sha256 `{hashlib.sha256(long.encode()).hexdigest()}`)" in md
    damaged = bytearray(attached.read_bytes())
    damaged[len(damaged) // 2] ^= 1
    attached.write_bytes(bytes(damaged))
    out = builders.run_script(fresh_python("1.20.0"), script)
    assert out.returncode not in (0, 1) and "sha256 differs" in out.stderr, out.stdout + out.stderr


@pytest.mark.release
def test_the_repro_of_a_crash_question_is_bad_when_onnxruntime_kills_the_process(bisect, tmp_path, fresh_python):
    model = builders.save(builders.expand_dims_crash_model(), tmp_path / "expand_dims.onnx")
    np.savez(tmp_path / "batch.npz", x=np.ones((2, 4), np.float32))
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model), "--inputs", str(tmp_path / "batch.npz"), "--from", "1.19.2", "--to",
               "1.20.0", "--bad-if", "crash", "--json", results=results)
    assert {p["verdict"] for p in r.json()["probes"]} == {"bad"}, r.stderr
    _report(bisect, r.json()["run_id"], results)
    out = builders.run_script(fresh_python("1.20.0"), results / r.json()["run_id"] / REPRO)
    assert out.returncode == 1 and "bad (the process died by signal" in out.stdout, out.stdout + out.stderr


# -- the full model: what travels with the report, and what the reader must be given -----------------------


@pytest.mark.release
def test_a_model_with_external_data_names_every_file_and_travels_whole_or_is_named_to_attach(bisect, tmp_path,
                                                                                             fresh_python):
    """residual_norm saved with external data (onnx.save_model(..., save_as_external_data=True)). The report's table
    once listed model.onnx alone, size "?", "by path", and never named model.onnx_data, which --full needs. Every
    file is named with its size and sha256; under the attach limit both travel in the attachment, and
    `repro.py --full` (with only the script and the attachment) writes them side by side and judges; with
    --attach-limit 0 the report says to attach both, kept side by side, and the script given the model without its
    data file says which file it needs."""
    d = tmp_path / "model"
    d.mkdir()
    model = builders.external_data_model(d / "model.onnx")
    data = d / "model.onnx_data"
    assert data.is_file()
    np.savez(d / "batch.npz", **builders.residual_norm_inputs())
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model), "--inputs", str(d / "batch.npz"), "--from", "1.19.2", "--to", "1.20.0",
               "--json", results=results)
    assert r.returncode == 0 and r.json()["first_bad"] == "1.20.0", r.stderr
    run_id, run_dir = r.json()["run_id"], results / r.json()["run_id"]
    report = ("report", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--no-probe")
    rep = bisect(*report)
    assert rep.returncode == 0, rep.stderr
    md = rep.stdout
    for f in (model, data):
        row = f"| `{f.name}` | {f.stat().st_size:,} | `{hashlib.sha256(f.read_bytes()).hexdigest()}` | {REPRO_BATCH} |"
        assert row in md, md.split("### To reproduce")[1][:1500]
    told = md.split("<details>")[0]  # the report's words, not the pasted script's
    assert "| ? |" not in told and "by path" not in told
    assert "`model.onnx` reads its external data (`model.onnx_data`) from beside it" in md
    elsewhere = tmp_path / "maintainer"
    elsewhere.mkdir()
    for name in (REPRO, REPRO_BATCH):
        (elsewhere / name).write_bytes((run_dir / name).read_bytes())
    for version, verdict, rc in (("1.19.2", "good", 0), ("1.20.0", "bad", 1)):
        out = builders.run_script(fresh_python(version), elsewhere / REPRO, "--full")
        assert out.returncode == rc, out.stdout + out.stderr
        assert out.stdout.startswith(f"onnxruntime {version}, full model: {verdict}"), out.stdout
    assert sorted(p.name for p in (elsewhere / "repro-model").iterdir()) == ["model.onnx", "model.onnx_data"]

    rep = bisect(*report, "--attach-limit", "0")
    assert rep.returncode == 0, rep.stderr
    size, sha = model.stat().st_size, hashlib.sha256(model.read_bytes()).hexdigest()
    dsize, dsha = data.stat().st_size, hashlib.sha256(data.read_bytes()).hexdigest()
    assert (f"The full model is not in this report: attach `model.onnx` ({size:,} bytes, sha256 `{sha}`), "
            f"`model.onnx_data` ({dsize:,} bytes, sha256 `{dsha}`), kept side by side in one directory") in rep.stdout
    assert not (run_dir / REPRO_BATCH).exists()
    given = tmp_path / "given"
    given.mkdir()
    (given / "model.onnx").write_bytes(model.read_bytes())  # the model without its data file
    out = builders.run_script(fresh_python("1.20.0"), run_dir / REPRO, "--full", str(given / "model.onnx"))
    assert out.returncode == 2 and "reads its external data from model.onnx_data beside it" in out.stderr, out.stderr
    (given / "model.onnx_data").write_bytes(data.read_bytes())
    out = builders.run_script(fresh_python("1.20.0"), run_dir / REPRO, "--full", str(given / "model.onnx"))
    assert out.returncode == 1, out.stdout + out.stderr


@pytest.mark.release
def test_a_report_reduces_a_cheap_run_first_and_says_so_and_never_unasked_when_told_not_to(bisect, residual_norm,
                                                                                             tmp_path):
    """A report of a run with a boundary and no reduction once said 'python repro.py --full model.onnx', a file the
    maintainer has not got. The report reduces first when the pair's probes say it is cheap, saying so on stderr;
    --no-reduce, and --no-probe, make none (and say how to); --reduce makes one under --no-probe too."""
    model, batch = residual_norm
    results = tmp_path / "results"
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0", "--json",
               results=results)
    assert r.returncode == 0, r.stderr
    run_id, run_dir = r.json()["run_id"], results / r.json()["run_id"]
    report = ("report", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--format", "json")
    for told, said in ((("--no-reduce",), "no reduction (--no-reduce)"), (("--no-probe",), "no reduction (--no-probe)")):
        rep = bisect(*report, *told, *(() if "--no-probe" in told else ("--no-probe",)))
        assert rep.returncode == 0 and said in rep.stderr, rep.stderr
        assert json.loads(rep.stdout)["repro"]["reduced"] is None and not (run_dir / "reduced").exists()
    rep = bisect(*report)  # unasked: it probes the newest release and explains, and reduces (cheap)
    assert rep.returncode == 0, rep.stderr
    assert re.search(r"^reducing first, for a repro a maintainer can run in seconds: about \d+ s", rep.stderr, re.M)
    assert re.search(r"^probe +\d+", rep.stderr, re.M)  # the reduction's progress lines
    doc = json.loads(rep.stdout)
    assert doc["repro"]["reduced"]["pair"] == ["1.19.2", "1.20.0"] and doc["repro"]["reduced"]["nodes"] <= 3
    again = bisect(*report, "--no-probe")
    assert "answers this question: the report uses it" in again.stderr, again.stderr
    shutil.rmtree(run_dir / "reduced")
    rep = bisect(*report, "--no-probe", "--reduce")
    assert rep.returncode == 0 and "reducing first (--reduce)" in rep.stderr, rep.stderr
    assert json.loads(rep.stdout)["repro"]["reduced"]


def test_a_reduction_is_cheap_by_the_time_the_pair_s_probes_took_to_load_and_run_the_model():
    from harness.report.reduction import CHEAP_S, estimate_s

    def probe(session, run):
        return {"result": {"session_s": session, "run_s": run}}

    assert estimate_s([probe(0.07, 0.8), probe(0.1, 0.9)]) <= CHEAP_S  # gemma-tiny-fused's 20 rows
    assert estimate_s([probe(3.0, 10.0)]) > CHEAP_S  # a 600 MB model
    assert estimate_s([{"result": {"session_s": "x"}}, {}]) is None  # what a record does not say is not guessed
