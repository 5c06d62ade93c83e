"""The repro script of an upstream report: runs as written on any machine with onnxruntime and numpy.

Two parts in one file:

* the reduced repro (`bisect reduce`), embedded as base64 when model and
  inputs fit the embed limit: `python repro.py`;
* the full model on the full batch: `python repro.py --full [MODEL.onnx]`; a
  hub-registered model is fetched by repo, revision and file with
  huggingface_hub into a plain directory (onnxruntime 1.24.1 and later refuse
  external data reached through the hub cache's symlinks), a small model is
  embedded, any other model is given as the argument.

A model that is a file is loaded from its path, so external data beside it
resolves; only an embedded model is loaded from bytes (and never has external
data). Nothing of the reporter's machine (home, cache, results paths) is written.

What the script holds comes from a run's evidence, which may have been made on
another machine: every value is written as a Python literal or as escaped
docstring text (harness.report.escape), never as code.
"""

from __future__ import annotations

import base64
import io
import textwrap

import numpy as np

from harness.report import escape
from harness.results.store import REPRO
from harness.vocabulary import GRAPH_LEVELS

SCRIPT = REPRO  # results/<run>/repro.py


def npz_b64(arrays: dict[str, np.ndarray]) -> str:
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return base64.b64encode(buf.getvalue()).decode()


def wrap(b64: str | None) -> str:
    return "None" if b64 is None else '"""\n' + "\n".join(textwrap.wrap(b64, 100)) + '\n"""'


def script(*, title: str, predicate: str, bad_means: str, session_options: dict, where: str,
           requirement: str = "onnxruntime==VERSION", providers: list | None = None,
           reduced: dict | None, full: dict) -> str:
    """The script's text.

    reduced: {"model": bytes, "inputs": arrays, "outputs": [...], "nodes": n, "of": N, "rows": r} or None
    full: {"model": bytes | None (embedded) , "sha256": str | None (not known), "file": name, "hub": {repo_id,
           revision, files: [model, *data]} | None, "inputs": arrays | None (not embedded), "outputs": [...],
           "notes": [why a file is not embedded, one line each]}

    Every value is data from the run's evidence, which may come from another machine: it reaches the script
    as a literal (escape.py_literal) or, in the docstring, as escaped text (escape.py_docstring), never as code.
    """
    reduced_model = base64.b64encode(reduced["model"]).decode() if reduced else None
    reduced_inputs = npz_b64(reduced["inputs"]) if reduced else None
    full_model = base64.b64encode(full["model"]).decode() if full.get("model") else None
    full_inputs = npz_b64(full["inputs"]) if full.get("inputs") is not None else None
    usage = []
    if reduced:
        usage.append(f"python {SCRIPT}            # the reduced model: {reduced['nodes']} of {reduced['of']} nodes, "
                     f"{reduced['rows']} row(s), embedded")
    if full_model:
        usage.append(f"python {SCRIPT} --full     # the full model ({full['file']}), embedded")
    elif full.get("hub"):
        usage.append(f"python {SCRIPT} --full     # the full model, fetched from the hub (pip install huggingface_hub)")
    else:
        sha = f"sha256 {full['sha256'][:16]}..." if full.get("sha256") else "sha256 not known"
        usage.append(f"python {SCRIPT} --full {full['file']}   # the full model, given by path ({sha})")
    header = [f"Repro: {title}.", "", f"    pip install {requirement} numpy", *(f"    {u}" for u in usage), "",
              f"Exit status 0 good, 1 bad. Bad means: {bad_means}.", f"Where it reproduces: {where}",
              *(full.get("notes") or ())]
    doc = "\n".join(escape.py_docstring(line) for line in header)
    lit = escape.py_literal
    return f'''\
"""{doc}
"""
import base64, hashlib, io, os, sys
import numpy as np
import onnxruntime as ort

REDUCED_MODEL_B64 = {wrap(reduced_model)}
REDUCED_INPUTS_NPZ_B64 = {wrap(reduced_inputs)}
REDUCED_OUTPUTS = {lit(list(reduced["outputs"] or []) if reduced else [])}
FULL_MODEL_B64 = {wrap(full_model)}
FULL_MODEL_FILE = {lit(full["file"])}
FULL_MODEL_SHA256 = {lit(full.get("sha256"))}  # None: not known (the model was not read)
FULL_MODEL_HUB = {lit(full.get("hub"))}
FULL_INPUTS_NPZ_B64 = {wrap(full_inputs)}
FULL_OUTPUTS = {lit(list(full["outputs"]))}
NOT_EMBEDDED = {lit(list(full.get("notes") or []))}
SESSION_OPTIONS = {lit(session_options)}
PROVIDERS = {lit(providers or [["CPUExecutionProvider", {}]])}  # [[name, options]], asked for in this order
PREDICATE = {lit(predicate)}
LEVELS = {lit(GRAPH_LEVELS)}


def session(model):
    """model: bytes of an embedded model, or the path of a file (its external data beside it)."""
    so = ort.SessionOptions()
    if SESSION_OPTIONS.get("graph_optimization_level"):
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[SESSION_OPTIONS["graph_optimization_level"]])
    if SESSION_OPTIONS.get("intra_op_num_threads") is not None:
        so.intra_op_num_threads = int(SESSION_OPTIONS["intra_op_num_threads"])
    return ort.InferenceSession(model, sess_options=so, providers=[p[0] for p in PROVIDERS],
                                provider_options=[p[1] for p in PROVIDERS])


def fetch_full_model():
    """The hub model by repo, revision and file, into a plain directory next to this script."""
    from huggingface_hub import snapshot_download

    hub = FULL_MODEL_HUB
    where = snapshot_download(hub["repo_id"], revision=hub["revision"], allow_patterns=hub["files"],
                              local_dir=os.path.join(os.path.dirname(os.path.abspath(__file__)), "repro-model"))
    return os.path.join(where, hub["files"][0])


def judge(outs):
    nan_rows = inf_rows = zero_rows = rows = 0
    max_abs = fp16_max = 0.0
    for a in outs:
        a = np.asarray(a)
        r = a.reshape(a.shape[0], -1) if a.ndim else a.reshape(1, 1)
        rows = max(rows, r.shape[0])
        if a.dtype.kind == "f":
            nan_rows = max(nan_rows, int(np.isnan(r).any(axis=1).sum()))
            inf_rows = max(inf_rows, int(np.isinf(r).any(axis=1).sum()))
            fin = r[np.isfinite(r)]
            top = float(np.abs(fin).max()) if fin.size else 0.0
            max_abs = max(max_abs, top)
            if a.dtype == np.float16:
                fp16_max = max(fp16_max, top)
        zero_rows = max(zero_rows, int((r == 0).all(axis=1).sum()))
    bad = False
    for condition in PREDICATE.split(","):
        kind, _, bound = condition.partition(">")
        bad = bad or {{"nan-or-inf": nan_rows + inf_rows > 0, "nan": nan_rows > 0, "zero-rows": zero_rows > 0,
                      "max-abs": bool(bound) and max_abs > float(bound or 0),
                      "headroom": bool(bound) and fp16_max / 65504.0 > float(bound or 0)}}.get(kind, False)
    return bad, "%d NaN rows, %d Inf rows of %d, max |x| %g" % (nan_rows, inf_rows, rows, max_abs)


def main(argv):
    full = "--full" in argv or REDUCED_MODEL_B64 is None
    args = [a for a in argv[1:] if a != "--full"]
    if full:
        if args:
            model = args[0]
        elif FULL_MODEL_B64:
            model = base64.b64decode(FULL_MODEL_B64)
        elif FULL_MODEL_HUB:
            model = fetch_full_model()
        else:
            print("give the model: python %s --full %s" % (sys.argv[0], FULL_MODEL_FILE), file=sys.stderr)
            return 2  # a usage error, not a verdict: 1 means bad
        if isinstance(model, str) and FULL_MODEL_SHA256:
            with open(model, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != FULL_MODEL_SHA256:
                    print("warning: the model's sha256 differs from the reported one", file=sys.stderr)
        if FULL_INPUTS_NPZ_B64 is None:
            print("the batch is not in this script: %s" % "; ".join(NOT_EMBEDDED), file=sys.stderr)
            return 2
        feeds, outputs, what = FULL_INPUTS_NPZ_B64, FULL_OUTPUTS, "full model"
    else:
        model = base64.b64decode(REDUCED_MODEL_B64)
        feeds, outputs, what = REDUCED_INPUTS_NPZ_B64, REDUCED_OUTPUTS, "reduced model"
    feeds = dict(np.load(io.BytesIO(base64.b64decode(feeds))))
    try:
        sess = session(model)
        if sess.get_providers()[0] != PROVIDERS[0][0]:  # onnxruntime fell back: not what was asked
            print("%s did not run here (the session ran on %s): no verdict"
                  % (PROVIDERS[0][0], ", ".join(sess.get_providers())), file=sys.stderr)
            return 2
        names = outputs or [o.name for o in sess.get_outputs()]
        values = sess.run(names, feeds)
    except Exception as exc:  # the model fails to load or run on this release
        if "error" not in PREDICATE.split(","):
            raise
        print("onnxruntime %s, %s: bad (fails: %s)" % (ort.__version__, what, str(exc).splitlines()[0][:300]))
        return 1
    bad, counts = judge(values)
    print("onnxruntime %s, %s: %s (%s)" % (ort.__version__, what, "bad" if bad else "good", counts))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''
