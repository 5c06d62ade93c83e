"""The repro script of an upstream report: runs as written on any machine with onnxruntime and numpy.

Two parts in one file:

* the reduced repro (`bisect reduce`), embedded as base64 when model and
  inputs fit the embed limit: `python repro.py`;
* the full model on the full batch: `python repro.py --full [MODEL.onnx]`; a
  hub-registered model is fetched by repo, revision and file with
  huggingface_hub into a plain directory (onnxruntime 1.24.1 and later refuse
  external data reached through the hub cache's symlinks), a small model is
  embedded, any other model is given as the argument.

The script asks the run's question: its conditions and bounds, and for a
reference predicate the reference's values of the rows it runs (a file's, a
reference release's or the fp32 model's outputs, as the run saved them). It
measures with the harness's own functions (the worker's output statistics,
harness.metrics, the row counts of harness.verdicts), whose source is copied
in when the script is made, and judges with one table of conditions that
mirrors harness.verdicts (tests/test_report_repro.py holds the two equal).

What does not fit a paste-ready report (the batch, the reference values, a
reduced model: `parts`) goes into one attachment beside it (`attachment`),
which the script reads from beside itself after checking its sha256.

A model that is a file is loaded from its path, so external data beside it
resolves; only an embedded model is loaded from bytes (and never has external
data). Nothing of the reporter's machine (home, cache, results paths) is written.

What the script holds comes from a run's evidence, which may have been made on
another machine: every value is written as a Python literal or as escaped
docstring text (harness.report.escape), never as code.

This module holds one concept: the repro script, its text and the parts it carries.
"""

from __future__ import annotations

import ast
import base64
import inspect
import io
import sys
import textwrap

import numpy as np

from harness import metrics, verdicts, worker
from harness.report import escape
from harness.results.store import REPRO
from harness.vocabulary import GRAPH_LEVELS

SCRIPT = REPRO  # results/<run>/repro.py

# What the script may hold, each the bytes of one file: a model, or an .npz of arrays by name; the full model's
# external data files are full_data_0, full_data_1, ... (in the attachment only).
PARTS = ("reduced_model", "reduced_inputs", "reduced_reference", "full_model", "full_inputs", "full_reference")
ARRAY_PARTS = ("reduced_inputs", "reduced_reference", "full_inputs", "full_reference")

# The harness functions the script measures with, under the names it calls them by: copied, not rewritten,
# so the repro's numbers are the run's (worker.rows_summary and verdicts.rows_summary share a name).
MEASURED_WITH = ((worker.output_stats, "output_stats"), (worker.rows_summary, "rows_summary"),
                 (verdicts.rows_summary, "row_counts"), (metrics.probe_metrics, "probe_metrics"),
                 (verdicts._measure, "measure"), (metrics.timing_summary, "timing_summary"),
                 (worker.timed_runs, "timed_runs"))


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue()


def npz_b64(arrays: dict[str, np.ndarray]) -> str:
    return base64.b64encode(npz_bytes(arrays)).decode()


def wrap(b64: str | None) -> str:
    return "None" if b64 is None else '"""\n' + "\n".join(textwrap.wrap(b64, 100)) + '\n"""'


def parts(reduced: dict | None, full: dict) -> dict[str, bytes]:
    """The files the script needs, by part name (PARTS): those the run has."""
    found = {"reduced_model": reduced["model"] if reduced else None,
             "reduced_inputs": npz_bytes(reduced["inputs"]) if reduced else None,
             "reduced_reference": npz_bytes(reduced["reference"]) if reduced and reduced.get("reference") is not None
             else None,
             "full_model": full.get("model"),
             **{f"full_data_{i}": data for i, data in enumerate(full.get("data") or ())},
             "full_inputs": npz_bytes(full["inputs"]) if full.get("inputs") is not None else None,
             "full_reference": npz_bytes(full["reference"]) if full.get("reference") is not None else None}
    return {k: v for k, v in found.items() if v is not None}


def attachment(attached: dict[str, bytes]) -> bytes:
    """One .npz holding each part left out of the script as a uint8 array (no pickle needed to read it)."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.frombuffer(v, np.uint8) for k, v in attached.items()})
    return buf.getvalue()


def _code_names(code) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _code_names(const)
    return names


class _Unannotated(ast.NodeTransformer):
    """Annotations out (`dict | None` is an error on Python 3.8 and 3.9, where a release may run)."""

    def visit_arg(self, node):
        node.annotation = None
        return node

    def visit_FunctionDef(self, node):
        node.returns = None
        return self.generic_visit(node)

    def visit_AnnAssign(self, node):
        return ast.Assign([node.target], node.value, lineno=node.lineno) if node.value is not None else None


def _unannotated(node):
    return ast.fix_missing_locations(_Unannotated().visit(node))


def _plain(value) -> bool:
    """A constant the script can hold as a literal: a number or string, or a tuple of them (metrics.FLOORS)."""
    if isinstance(value, tuple):
        return all(_plain(v) for v in value)
    return isinstance(value, (int, float, str)) and not isinstance(value, bool)


def measured_with() -> str:
    """The source of MEASURED_WITH and of what they use from their modules (functions, constants as literals),
    annotations and decorators dropped: the script runs on a release's Python, 3.8 on."""
    defs: dict[str, tuple[str, str]] = {}  # name in the script -> (module, name there): one meaning each
    out: list[str] = []
    consts: dict[str, object] = {}

    def add(fn, name: str) -> None:
        origin = (fn.__module__, fn.__name__)
        if name in defs:
            if defs[name] != origin:
                raise RuntimeError(f"the repro script would define {name} twice ({defs[name]} and {origin})")
            return
        defs[name] = origin
        node = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        node.name, node.decorator_list = name, []
        out.append(ast.unparse(_unannotated(node)))
        module = vars(sys.modules[fn.__module__])
        for used in sorted(_code_names(fn.__code__) & module.keys()):
            value = module[used]
            if inspect.isfunction(value) and value.__module__.startswith("harness."):  # metrics.cosine_text too
                add(value, used)
            elif _plain(value):
                if consts.setdefault(used, value) != value:
                    raise RuntimeError(f"the repro script would define {used} twice")

    for fn, name in MEASURED_WITH:
        add(fn, name)
    return "\n".join([*(f"{k} = {v!r}" for k, v in sorted(consts.items())), "", "", *(f"{d}\n\n" for d in out)])


# The script's judgement: each condition is measured by harness.verdicts._measure itself (copied in above as
# measure), and the verdict of them all is harness.verdicts.classify's. Text of the script, not evidence: it holds
# no value of a run.
JUDGE = r'''
def abs_diff_max(outputs, reference):
    """max |a - b| over the elements finite in both, across the outputs compared (None: none compared)."""
    worst = None
    for name, a in outputs.items():
        if name in reference and np.shape(a) == np.shape(reference[name]):
            a, r = np.asarray(a, np.float64), np.asarray(reference[name], np.float64)
            both = np.isfinite(a) & np.isfinite(r)
            d = float(np.abs(a - r)[both].max(initial=0.0))
            worst = d if worst is None else max(worst, d)
    return worst


def compared(m, key, then):
    """A condition on a comparison with the reference: None when there is none to judge by."""
    if m.get("comparison_error"):
        return None, m["comparison_error"]
    if "cosine_min" not in m:
        return None, "no comparison with the reference"
    return then(m.get(key))


def condition(kind, bound=None, floor=None):
    """One condition of the question, with what measure() reads of a harness.verdicts.Condition."""
    from types import SimpleNamespace

    return SimpleNamespace(kind=kind, bound=bound, floor=floor, rel_floor=REL_FLOOR if floor is None else floor)


def judge(names, values, feeds, reference, conditions):
    """(verdict, why) of one run of the model: "good", "bad", or None when a condition cannot tell."""
    result = {"outputs": [output_stats(np, n, v) for n, v in zip(names, values)],
              "rows": rows_summary(np, feeds, names, values)}
    outputs = dict(zip(names, values))
    m = probe_metrics(result, outputs, reference, "repro") if reference is not None else probe_metrics(result)
    if reference is not None and "cosine_min" in m:
        m.setdefault("abs_diff_max", abs_diff_max(outputs, reference))
    s = row_counts(result)
    measured = [(kind, *measure(condition(kind, bound, floor), s, m)) for kind, bound, floor in conditions]
    held = [what for _, holds, what in measured if holds]
    if held:
        return "bad", "; ".join(held)
    unknown = [what for _, holds, what in measured if holds is None]
    if unknown:
        return None, unknown[0]
    numeric = [what for kind, _, what in measured if kind not in ("error", "crash")]
    if not numeric:
        numeric = ["loads and runs (%d NaN rows, %d Inf rows of %d)" % (s["nan_rows"], s["inf_rows"], s["rows"])]
    return "good", "; ".join(dict.fromkeys(numeric))
'''


def judge_source() -> str:
    """The script's measuring and judging functions, as the script holds them (needs `np` and `hashlib`)."""
    return f"REL_FLOOR = {metrics.REL_FLOOR!r}\n" + measured_with() + JUDGE


def script(*, title: str, predicate, bad_means: str, session_options: dict, where: str,
           requirement: str = "onnxruntime==VERSION", providers: list | None = None,
           reduced: dict | None, full: dict, attached: dict | None = None) -> str:
    """The script's text.

    predicate: a harness.verdicts.Predicate (or its text), the run's question
    reduced: {"model": bytes | None (None: every node kept, the full model on the rows kept), "inputs": arrays,
           "reference": arrays | None (the values the reduction's first bad release was compared with),
           "outputs": [...], "nodes": n, "of": N, "rows": r} or None
    full: {"model": bytes | None (embedded) , "sha256": str | None (not known), "file": name, "hub": {repo_id,
           revision, files: [model, *data]} | None, "inputs": arrays | None (not embedded), "outputs": [...],
           "reference": arrays | None (the reference's values of those outputs), "notes": [why a file is not
           embedded, one line each]}
    attached: {"file": name, "sha256": hex, "parts": [part names]}: the parts left out of the script, in the
           attachment beside it, or None

    Every value is data from the run's evidence, which may come from another machine: it reaches the script
    as a literal (escape.py_literal) or, in the docstring, as escaped text (escape.py_docstring), never as code.
    """
    pred = verdicts.parse_predicate(predicate) if isinstance(predicate, str) else predicate
    left_out = set((attached or {}).get("parts") or ())
    blobs = {k: None if k in left_out else base64.b64encode(v).decode() for k, v in parts(reduced, full).items()}
    sh = escape.sh_line  # the lines a reader pastes: every value one quoted word
    usage = []
    if reduced:
        how = "attached" if left_out & {"reduced_model", "reduced_inputs", "reduced_reference"} else "embedded"
        usage.append(sh(["python", SCRIPT], f"the reduced model: {reduced['nodes']} of {reduced['of']} nodes, "
                        f"{reduced['rows']} row(s), {how}" + (" (the full model's file: give it as for --full)"
                                                             if reduced["model"] is None and not full.get("model")
                                                             and not full.get("hub") else ""), 27))
    data_files = [d[0] for d in full.get("data_files") or ()]
    beside = f", with {', '.join(data_files)} beside it" if data_files else ""
    if full.get("model") and "full_model" in left_out:
        usage.append(sh(["python", SCRIPT, "--full"], f"the full model ({full['file']}{beside}), from "
                        f"{(attached or {}).get('file')}", 27))
    elif full.get("model"):
        usage.append(sh(["python", SCRIPT, "--full"], f"the full model ({full['file']}), embedded", 27))
    elif full.get("hub"):
        usage.append(sh(["python", SCRIPT, "--full"], "the full model, fetched from the hub (pip install huggingface_hub)",
                        27))
    else:
        sha = f"sha256 {full['sha256'][:16]}..." if full.get("sha256") else "sha256 not known"
        usage.append(sh(["python", SCRIPT, "--full", full["file"]], f"the full model, given by path ({sha}){beside}"))
    header = [f"Repro: {title}.", "", "    " + sh(["pip", "install", requirement, "numpy"]),
              *(f"    {u}" for u in usage), "",
              f"Exit status 0 good, 1 bad, 2 no verdict. Bad means: {bad_means} (--bad-if {pred}).",
              f"Where it reproduces: {where}", *(full.get("notes") or ())]
    if attached:
        header.append(f"Needs {attached['file']} beside it (sha256 {attached['sha256']}): "
                      f"{', '.join(attached['parts'])}.")
    doc = "\n".join(escape.py_docstring(line) for line in header)
    lit = escape.py_literal
    conditions = [[c.kind, c.bound, c.floor] for c in pred.conditions]
    return f'''\
"""{doc}
"""
import base64, hashlib, io, json, math, os, shlex, subprocess, sys, time
import numpy as np
import onnxruntime as ort

REDUCED_MODEL_B64 = {wrap(blobs.get("reduced_model"))}
REDUCED_INPUTS_NPZ_B64 = {wrap(blobs.get("reduced_inputs"))}
REDUCED_OUTPUTS = {lit(list(reduced["outputs"] or []) if reduced else [])}
REDUCED_REFERENCE_NPZ_B64 = {wrap(blobs.get("reduced_reference"))}
REDUCED_MODEL_IS_FULL = {lit(bool(reduced) and reduced["model"] is None)}  # every node kept: the rows alone reduced
FULL_MODEL_B64 = {wrap(blobs.get("full_model"))}
FULL_MODEL_FILE = {lit(full["file"])}
FULL_MODEL_SHA256 = {lit(full.get("sha256"))}  # None: not known (the model was not read)
FULL_MODEL_HUB = {lit(full.get("hub"))}
FULL_MODEL_DATA = {lit([list(d) for d in full.get("data_files") or ()])}  # [[location, sha256, bytes]]: read from beside it
FULL_INPUTS_NPZ_B64 = {wrap(blobs.get("full_inputs"))}
FULL_REFERENCE_NPZ_B64 = {wrap(blobs.get("full_reference"))}
FULL_OUTPUTS = {lit(list(full["outputs"]))}
ATTACHED = {lit(attached)}  # the parts too big for a report, in one .npz beside this script
NOT_EMBEDDED = {lit(list(full.get("notes") or []))}
SESSION_OPTIONS = {lit(session_options)}
PROVIDERS = {lit(providers or [["CPUExecutionProvider", {}]])}  # [[name, options]], asked for in this order
PREDICATE = {lit(str(pred))}
CONDITIONS = {lit(conditions)}  # [[kind, bound, floor]]: bad when any holds
LEVELS = {lit(GRAPH_LEVELS)}

{judge_source()}

def no_verdict(why):
    """Stop with status 2: 1 would say bad."""
    print(why, file=sys.stderr)
    sys.exit(2)


def part(name, embedded):
    """The bytes of one part: embedded, or from the attachment beside this script (None: neither)."""
    if embedded is not None:
        return base64.b64decode(embedded)
    if not ATTACHED or name not in ATTACHED["parts"]:
        return None
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), ATTACHED["file"])
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        no_verdict("put %s (sha256 %s) beside this script: it holds what the report could not embed"
                   % (ATTACHED["file"], ATTACHED["sha256"]))
    if hashlib.sha256(data).hexdigest() != ATTACHED["sha256"]:
        no_verdict("%s is not the file the report names (its sha256 differs): no verdict" % ATTACHED["file"])
    with np.load(io.BytesIO(data)) as z:
        return z[name].tobytes()


def arrays(data):
    return None if data is None else dict(np.load(io.BytesIO(data)))


def session(model):
    """model: bytes of an embedded model, or the path of a file (its external data beside it)."""
    so = ort.SessionOptions()
    if SESSION_OPTIONS.get("graph_optimization_level"):
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[SESSION_OPTIONS["graph_optimization_level"]])
    if SESSION_OPTIONS.get("intra_op_num_threads") is not None:
        so.intra_op_num_threads = int(SESSION_OPTIONS["intra_op_num_threads"])
    return ort.InferenceSession(model, sess_options=so, providers=[p[0] for p in PROVIDERS],
                                provider_options=[p[1] for p in PROVIDERS])


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def inside(where, name):
    """`name` (a file the report names) under the directory `where`, or stop: never a path out of it."""
    path = os.path.normpath(os.path.join(where, name))
    if os.path.isabs(name) or not path.startswith(where + os.sep):
        no_verdict("%r is not a file name under %s: no verdict" % (name, where))
    return path


def full_model_of_report():
    """The full model this report carries (embedded, or in the attachment), or None: its bytes, or, with external
    data, the path of a copy written with its data files beside it next to this script (onnxruntime reads external
    data from beside the model file)."""
    data = part("full_model", FULL_MODEL_B64)
    if data is None or not FULL_MODEL_DATA:
        return data
    where = os.path.join(os.path.dirname(os.path.abspath(__file__)), "repro-model")
    files = [(FULL_MODEL_FILE, data)] + [(loc, part("full_data_%d" % i, None))
                                         for i, (loc, _, _) in enumerate(FULL_MODEL_DATA)]
    for name, blob in files:
        if blob is None:
            no_verdict("%s is not in %s: no verdict" % (name, ATTACHED["file"] if ATTACHED else "this script"))
        path = inside(where, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(blob)
    return inside(where, FULL_MODEL_FILE)


def data_beside(model):
    """A model given by path reads its external data from beside it: each file the report names must be there."""
    home = os.path.dirname(os.path.abspath(model))
    for loc, sha, size in FULL_MODEL_DATA:
        path = inside(home, loc)
        if not os.path.isfile(path):
            no_verdict("%s reads its external data from %s beside it (%d bytes, sha256 %s): put that file there"
                       % (model, loc, size, sha))
        if sha256_of(path) != sha:
            print("warning: the sha256 of %s differs from the reported one" % loc, file=sys.stderr)


def fetch_full_model():
    """The hub model by repo, revision and file, into a plain directory next to this script."""
    from huggingface_hub import snapshot_download

    hub = FULL_MODEL_HUB
    where = snapshot_download(hub["repo_id"], revision=hub["revision"], allow_patterns=hub["files"],
                              local_dir=os.path.join(os.path.dirname(os.path.abspath(__file__)), "repro-model"))
    return os.path.join(where, hub["files"][0])


def crashed(argv):
    """Run in a child process (a crash is a verdict, so it must not be this process's own): its exit status,
    or 1 when it died by a signal."""
    child = subprocess.run([sys.executable, os.path.abspath(__file__)] + argv[1:],
                           env=dict(os.environ, REPRO_CHILD="1"))
    if child.returncode < 0:
        print("onnxruntime %s: bad (the process died by signal %d)" % (ort.__version__, -child.returncode))
        return 1
    return child.returncode


TIMED_CONDITIONS = {lit([c for c in conditions if c[0] in verdicts.TIMED])}  # judged against a baseline release, in rounds
ROUNDS = 8  # the fewest rounds an interval needs
ROUNDS_MAX = 40  # more only while the interval straddles a bound


def timed_child(sess, names, feeds):
    """One side of one round: the worker's own timed runs (warm-up runs, then the batch again and again for a
    second, at least 3 runs); the latencies and this process's peak memory, as one JSON line for the parent."""
    import resource

    runs = timed_runs(sess, names, feeds, {{"warmup": 3, "seconds": 1.0, "runs_min": 3, "runs_max": 400}},
                      {{}})["latencies_s"]
    print(json.dumps({{"version": ort.__version__, "latencies": runs,
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}}))
    return 0


def timed_verdict(argv):
    """A slowdown is a comparison: this script runs under this Python and under the baseline's (--baseline
    PYTHON, a Python with the good release installed), in fresh processes, in turn, ROUNDS rounds and more (up
    to ROUNDS_MAX) while the interval straddles a bound, as the harness's rounds go on within their budget;
    judged on the median ratio of the rounds and its interval, as the harness judges it."""
    i = argv.index("--baseline")
    if i + 1 >= len(argv):
        no_verdict("--baseline PYTHON: a Python with the good onnxruntime release installed")
    baseline, rest = argv[i + 1], argv[:i] + argv[i + 2:]
    rounds, versions = [], {{}}
    for n in range(ROUNDS_MAX):
        got = {{}}
        for side, python in ((("baseline", baseline), ("candidate", sys.executable)) if n % 2 == 0 else
                             (("candidate", sys.executable), ("baseline", baseline))):
            child = subprocess.run([python, os.path.abspath(__file__)] + rest[1:], capture_output=True, text=True,
                                   env=dict(os.environ, REPRO_TIMED="1"))
            if child.returncode != 0:
                no_verdict("the %s (%s) did not run: %s" % (side, python, (child.stderr or child.stdout)[-300:]))
            got[side] = json.loads(child.stdout.strip().splitlines()[-1])
            versions[side] = got[side]["version"]
        rounds.append({{"baseline_s": got["baseline"]["latencies"], "candidate_s": got["candidate"]["latencies"],
                       "baseline_rss_mb": got["baseline"]["rss_mb"], "candidate_rss_mb": got["candidate"]["rss_mb"]}})
        m = {{"timing": timing_summary({{"baseline": versions["baseline"], "rounds": rounds}})}}
        measured = [measure(condition(kind, bound, floor), {{}}, m) for kind, bound, floor in TIMED_CONDITIONS]
        if len(rounds) >= ROUNDS and all(holds in (True, False) for holds, _ in measured):
            break  # every bound decided (an interval that holds its bound is "inconclusive": not yet)
    held = [what for holds, what in measured if holds is True]
    verdict = "bad" if held else ("good" if all(holds is False for holds, _ in measured) else "inconclusive")
    print("onnxruntime %s against %s: %s (%s)" % (versions["candidate"], versions["baseline"], verdict,
                                                  "; ".join(held or [what for _, what in measured])))
    return {{"good": 0, "bad": 1}}.get(verdict, 2)


def main(argv):
    if TIMED_CONDITIONS and not os.environ.get("REPRO_TIMED"):
        if "--baseline" not in argv:
            no_verdict("a slowdown is measured against the good release: python %s --baseline PYTHON (a Python "
                       "with the good onnxruntime release installed; add --full for the full model)"
                       % shlex.quote(sys.argv[0]))
        return timed_verdict(argv)
    if any(kind == "crash" for kind, *_ in CONDITIONS) and not os.environ.get("REPRO_CHILD"):
        return crashed(argv)
    reduced = REDUCED_INPUTS_NPZ_B64 is not None or bool(ATTACHED and "reduced_inputs" in ATTACHED["parts"])
    full = "--full" in argv or not reduced
    args = [a for a in argv[1:] if a != "--full"]
    reference = None
    if full or REDUCED_MODEL_IS_FULL:
        model = args[0] if args else full_model_of_report()
        if model is None and FULL_MODEL_HUB:
            model = fetch_full_model()
        elif model is None:
            # the file's name is the record's: one quoted word of the line a reader pastes
            print("give the model: %s" % shlex.join(["python", sys.argv[0], *(["--full"] if full else []),
                                                    FULL_MODEL_FILE]),
                  file=sys.stderr)
            return 2  # a usage error, not a verdict: 1 means bad
        if args and FULL_MODEL_SHA256 and sha256_of(model) != FULL_MODEL_SHA256:
            print("warning: the model's sha256 differs from the reported one", file=sys.stderr)
        if args and FULL_MODEL_DATA:
            data_beside(model)
    if full:
        feeds = part("full_inputs", FULL_INPUTS_NPZ_B64)
        if feeds is None:
            print("the batch is not in this script: %s" % "; ".join(NOT_EMBEDDED), file=sys.stderr)
            return 2
        reference = arrays(part("full_reference", FULL_REFERENCE_NPZ_B64))
        outputs, what = FULL_OUTPUTS, "full model"
    else:
        if not REDUCED_MODEL_IS_FULL:
            model = part("reduced_model", REDUCED_MODEL_B64)
        feeds, outputs, what = part("reduced_inputs", REDUCED_INPUTS_NPZ_B64), REDUCED_OUTPUTS, "reduced model"
        reference = arrays(part("reduced_reference", REDUCED_REFERENCE_NPZ_B64))
    feeds = arrays(feeds)
    try:
        sess = session(model)
        if sess.get_providers()[0] != PROVIDERS[0][0]:  # onnxruntime fell back: not what was asked
            print("%s did not run here (the session ran on %s): no verdict"
                  % (PROVIDERS[0][0], ", ".join(sess.get_providers())), file=sys.stderr)
            return 2
        names = outputs or [o.name for o in sess.get_outputs()]
        if os.environ.get("REPRO_TIMED"):
            return timed_child(sess, names, feeds)
        values = sess.run(names, feeds)
    except Exception as exc:  # the model fails to load or run on this release
        why = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        if not any(kind == "error" for kind, *_ in CONDITIONS):
            print("onnxruntime %s, %s: no verdict (fails: %s)" % (ort.__version__, what, why))
            return 2
        print("onnxruntime %s, %s: bad (fails: %s)" % (ort.__version__, what, why))
        return 1
    verdict, why = judge(names, values, feeds, reference, CONDITIONS)
    print("onnxruntime %s, %s: %s (%s)" % (ort.__version__, what, verdict or "no verdict", why))
    return {{"good": 0, "bad": 1}}.get(verdict, 2)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''
