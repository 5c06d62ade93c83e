"""Trace a model's intermediate tensors on one release (`harness.explain.diff` lines two traces up).

A trace is evidence, not a verdict (PLATFORM.md, "Graph surgery facts"):

* The verdict, the NaN rows and the optimized graph always come from one probe
  of the UNMODIFIED model (session option `optimized_model_filepath`).
* The intermediate tensors come from passes over a copy of the model with some
  of them exposed as graph outputs (`surgery.expose`), a bounded number of bytes
  per pass (`surgery.chunk`, half the budget: the worker holds a pass's outputs
  twice as its run ends), through the ordinary probe worker, which returns
  only statistics (dtype, shape, min, max, max |x|, NaN/Inf counts and rows,
  sha256). No tensor is written to disk unless `dump` names it.
* Observer effect: exposing a tensor makes onnxruntime materialize it in its
  declared dtype (fp16), so a value an fp32 island kept finite reads Inf in the
  trace. Each tensor statistic is marked `visibility`:
    "seen"           the tensor exists under its own name in the optimized graph of the
                     unmodified model: its consumer read this very fp16 value
    "observed-only"  only its fp32 island copy existed, or it was fused away: it was
                     rounded to fp16 only to be observed
    "unknown"        the optimized graph could not be saved
  `first_nonfinite` is the first NaN/Inf among "seen" tensors (what really
  happened: the origin of the NaN rows); `first_nonfinite_any` is the first
  NaN/Inf among all of them (what would overflow if the value were rounded).
* Exposing can also change the computation: a consumer may read the rounded
  copy of an exposed island tensor (in a Gemma-shaped model, exposing every
  tensor turned rows NaN that the unmodified model keeps finite). So:
    clean passes    expose only "seen" tensors, which the unmodified run
                    materializes anyway; their model outputs must match the
                    unmodified run's (else `perturbed` is set: do not trust them)
    observe passes  expose the rest; a tensor downstream of an exposed non-finite
                    value of the same pass is traced again in a later pass without
                    it ("peeling", one overflow point per round, MAX_PEEL_ROUNDS)
  Observed values still carry the fp16 rounding of exposed neighbours (small
  relative differences), which is why they are evidence, not a verdict.

This module holds one concept, the trace: its results, its passes, its verdict
(judged as the run's question judges, with its reference) and its JSON.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import onnx

from harness.graphs import precision, surgery
from harness.metrics import FP16_MAX, probe_metrics
from harness.probe import ProbeJob, Prober
from harness.releases.versions import Release
from harness.results.locking import file_lock
from harness.results.store import load_outputs
from harness.runners.base import Runner
from harness.verdicts import Predicate

DEFAULT_BUDGET = 256 << 20
OPT_DATA_MIN_BYTES = 1024  # initializers above this go to the optimized model's external data file


# --- results -----------------------------------------------------------------------------


@dataclass
class TensorStat:
    name: str
    dtype: str
    shape: list | None = None
    min: float | None = None
    max: float | None = None
    max_abs: float | None = None  # over finite values
    nan: int = 0
    inf: int = 0
    rows: int = 0
    nan_rows: int = 0
    inf_rows: int = 0
    sha256: str | None = None
    headroom: float | None = None  # max_abs / 65504 for fp16 tensors
    visibility: str = "unknown"  # seen | observed-only | unknown
    source: str = "exposed"  # model (an output of the unmodified run) | exposed | unavailable
    note: str = ""

    @property
    def nonfinite(self) -> bool:
        return bool(self.nan or self.inf)

    @property
    def available(self) -> bool:
        return self.source != "unavailable"


@dataclass
class NodeTrace:
    name: str
    op_type: str
    layer: int | None
    inputs: list[str]
    outputs: list[TensorStat]
    precision: precision.NodePrecision | None = None


@dataclass
class TraceResult:
    version: str
    provenance: dict
    model: str
    inputs: str
    status: str  # of the unmodified probe: ran / error / crash / timeout / skip
    verdict: str
    reason: str
    rows: int = 0
    nan_rows: int = 0
    inf_rows: int = 0
    outputs: list[dict] = field(default_factory=list)  # unmodified run's output stats
    nodes: list[NodeTrace] = field(default_factory=list)  # topological order
    first_nonfinite: str | None = None  # node; among "seen" tensors
    first_nonfinite_tensor: str | None = None
    first_nonfinite_any: str | None = None  # node; among all tensors
    first_nonfinite_any_tensor: str | None = None
    above_50: list[str] = field(default_factory=list)  # fp16 tensors past 50 % of 65504 (or non-finite)
    above_90: list[str] = field(default_factory=list)
    residual: list[dict] = field(default_factory=list)  # per layer: layer, node, tensor, max_abs, headroom, nonfinite
    precision: dict[str, precision.NodePrecision] = field(default_factory=dict)
    passes: list[dict] = field(default_factory=list)
    perturbed: bool = False
    unavailable: list[str] = field(default_factory=list)  # floating-point tensors no pass could expose
    dumps: dict[str, str] = field(default_factory=dict)
    optimized_model: str | None = None
    seconds: float = 0.0
    # the question the verdict answers: its predicate, and the reference it compared with (id, label), or None
    judged_by: dict = field(default_factory=dict)
    compared: dict = field(default_factory=dict)  # the comparison's measures (cosine_min, rel_diff_max, ...)

    def node(self, name: str) -> NodeTrace | None:
        return next((n for n in self.nodes if n.name == name), None)

    def tensor(self, name: str) -> TensorStat | None:
        for n in self.nodes:
            for t in n.outputs:
                if t.name == name:
                    return t
        return None


# --- tracing -----------------------------------------------------------------------------


def _stat(doc: dict, info: surgery.TensorInfo | None, visibility: str, source: str) -> TensorStat:
    dtype = doc.get("dtype") or (info.dtype if info else "unknown")
    t = TensorStat(
        name=doc["name"], dtype=dtype, shape=doc.get("shape"), min=doc.get("min"), max=doc.get("max"),
        max_abs=doc.get("max_abs"), nan=doc.get("nan", 0), inf=doc.get("inf", 0), rows=doc.get("rows", 0),
        nan_rows=doc.get("nan_rows", 0), inf_rows=doc.get("inf_rows", 0), sha256=doc.get("sha256"),
        visibility=visibility, source=source,
    )
    if dtype == "float16" and t.max_abs is not None:
        t.headroom = t.max_abs / FP16_MAX
    return t


def _log(log, msg):
    if log:
        log(msg)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "tensor"


def trace(runner: Runner, release: Release, model, inputs_npz: Path, workdir: Path,
          budget_bytes: int = DEFAULT_BUDGET, dump: list[str] | tuple[str, ...] = (),
          session_options: dict | None = None, timeout: float = 600.0,
          predicate: Predicate | None = None, log=None, outputs: tuple[str, ...] = (),
          reference: Compared | None = None) -> TraceResult:
    """Trace every floating-point intermediate tensor of `model` on `release`.

    The verdict is the unmodified model's under `predicate`, compared with `reference` when it needs one (the
    question's values for this release: a file's, a reference release's, the fp32 model's outputs here).

    `model` is a ResolvedModel or a path to an .onnx file (external data next to
    it is used in place, never copied or loaded). `workdir` receives the
    optimized graph, the exposed copy (symlinks to the data) and dumps. Traces given one `workdir` (the same
    run's release traced by two commands at once: `diff` beside `report`) take turns: each clears and rewrites
    its files there, and one pass read another's half-written graph.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    with file_lock(workdir.parent / f"{workdir.name}.lock"):
        return _trace(runner, release, model, inputs_npz, workdir, budget_bytes, dump, session_options, timeout,
                      predicate, log, outputs, reference)


def _trace(runner: Runner, release: Release, model, inputs_npz: Path, workdir: Path, budget_bytes: int,
           dump: list[str] | tuple[str, ...], session_options: dict | None, timeout: float,
           predicate: Predicate | None, log, outputs: tuple[str, ...], reference: Compared | None) -> TraceResult:
    t0 = time.perf_counter()
    model_path = Path(getattr(model, "path", model))
    inputs_npz = Path(inputs_npz)
    base_opts = dict(session_options or {})
    predicate = predicate or Predicate()
    prober = Prober(runner, None, predicate)  # a trace's probes are its evidence, not the run's records

    # (a) the unmodified model: verdict and the optimized graph
    opt_dir = workdir / f"optimized-{release.version}"
    shutil.rmtree(opt_dir, ignore_errors=True)
    opt_dir.mkdir(parents=True)
    opt_path = opt_dir / "optimized.onnx"
    config = {**base_opts.get("config", {}),
              "session.optimized_model_external_initializers_file_name": "optimized.onnx.data",
              "session.optimized_model_external_initializers_min_size_in_bytes": OPT_DATA_MIN_BYTES}
    opts = {**base_opts, "optimized_model_filepath": str(opt_path), "config": config}
    _log(log, f"trace {release.version}: unmodified model")
    # The verdict, as in `bisect run`, from the outputs the run checks, compared as the run's question compares.
    compares = predicate.needs_reference
    saved = workdir / f"outputs-{release.version}.npz" if compares else None
    measure = _measure(saved, reference) if compares else None
    probed = prober.probe(release, ProbeJob(model_path, inputs_npz, tuple(outputs), opts, timeout), outputs=saved,
                          measure=measure)
    if saved is not None:
        saved.unlink(missing_ok=True)
    base, judged = probed.record, probed.judged
    result = TraceResult(
        version=release.version, provenance=base.get("provenance", {}), model=str(model_path), inputs=str(inputs_npz),
        status=base["status"], verdict=judged["verdict"], reason=judged["why"], rows=judged["rows"],
        nan_rows=judged["nan_rows"], inf_rows=judged["inf_rows"],
        outputs=list((base.get("result") or {}).get("outputs") or []),
        judged_by={"predicate": str(predicate), "reference": reference.id if compares and reference else None},
        compared={k: v for k, v in (base.get("metrics") or {}).items() if k in COMPARED},
    )

    original = onnx.load(str(model_path), load_external_data=False)
    infos = surgery.intermediates(original)
    optimized = None
    if base["status"] == "ran" and opt_path.is_file():
        try:
            optimized = onnx.load(str(opt_path), load_external_data=False)
            result.optimized_model = str(opt_path)
        except Exception:  # noqa: BLE001 - an unreadable optimized graph only loses the precision map
            optimized = None
    if optimized is not None:
        result.precision = precision.precision_map(original, optimized)
        visibility = precision.tensor_visibility(original, optimized)
    else:
        visibility = {}

    # (b) passes over the exposed copy
    graph_outputs = [o.name for o in original.graph.output]
    base_out = {o["name"]: o for o in result.outputs}
    wanted = [i for i in infos if i.is_float and i.name not in base_out]
    skipped = [i for i in infos if i.name not in base_out and not i.is_float]
    with np.load(inputs_npz) as data:
        shapes = {k: data[k].shape for k in data.files}
    dims = surgery.dim_values_from_inputs(original, shapes)
    stats: dict[str, TensorStat] = {}
    by_name = {i.name: i for i in infos}
    if result.status == "ran":
        exposed_dir = workdir / "exposed"
        concrete = {i.name: i for i in surgery.intermediates(original, dims)}  # shapes of this batch, for sizes
        ctx = _PassContext(prober, release, model_path, inputs_npz, workdir, exposed_dir, infos, graph_outputs,
                           base_out, base_opts, timeout, dims, budget_bytes, visibility, log, concrete)
        # Clean passes: tensors the unmodified run materializes anyway; exposing them changes nothing.
        clean = [i for i in wanted if visibility.get(i.name) == "seen"]
        stats.update(ctx.run(clean, "clean", result))
        # Observe passes: the rest. Exposing an island tensor may feed its rounded copy to its
        # consumers, so a non-finite exposed value taints what is downstream of it in that pass:
        # those tensors are traced again without it (peeling), one overflow point per round.
        pending = [i for i in wanted if visibility.get(i.name) != "seen"]
        producers = _producers(original)
        for round_ in range(MAX_PEEL_ROUNDS):
            if not pending:
                break
            got = ctx.run(pending, f"observe-{round_ + 1}", result)
            tainted: set[str] = set()
            for members in ctx.groups:  # contamination happens only within one pass
                bad = {n for n in members if n in got and got[n].available and got[n].nonfinite}
                tainted |= _downstream(original, producers, bad) & set(members)
            redo = [i for i in pending if i.name in tainted]
            stats.update({n: t for n, t in got.items() if n not in tainted})
            pending = redo
        for i in pending:  # still downstream of an exposed overflow after MAX_PEEL_ROUNDS
            t = ctx.last.get(i.name)
            if t is not None:
                t.note = "downstream of an exposed overflow (value may be perturbed)"
                stats[i.name] = t
        if dump:
            result.dumps = _dump(prober, release, model_path, infos, list(dump), inputs_npz, workdir, base_opts, timeout)
        shutil.rmtree(exposed_dir, ignore_errors=True)
    for o in result.outputs:
        stats[o["name"]] = _stat(o, by_name.get(o["name"]), "seen", "model")
    for i in skipped:
        stats.setdefault(i.name, TensorStat(i.name, i.dtype, source="unavailable", note="not floating point"))

    # (c) per node, in topological order
    nodes: dict[str, NodeTrace] = {}
    node_inputs = {surgery.node_key(n): [t for t in n.input if t] for n in original.graph.node}
    for i in infos:
        nt = nodes.get(i.node)
        if nt is None:
            nt = nodes[i.node] = NodeTrace(i.node, i.op_type, surgery.layer_of(i.node), node_inputs.get(i.node, []), [],
                                           result.precision.get(i.node))
        nt.outputs.append(stats.get(i.name) or TensorStat(i.name, i.dtype, source="unavailable"))
    result.nodes = list(nodes.values())
    _summarize(result, original)
    result.seconds = time.perf_counter() - t0
    return result



MAX_PEEL_ROUNDS = 8
COMPARED = ("reference", "comparison_error", "cosine_min", "rel_diff_max", "abs_diff_max", "nonfinite_rows")


@dataclass
class Compared:
    """What a trace's unmodified probe is compared with: the question's reference values for its release (None:
    this machine has none to give, and the verdict says so)."""

    id: str
    label: str
    arrays: dict[str, np.ndarray] | None


def _measure(saved: Path, reference: Compared | None):
    """The metrics of the unmodified probe against `reference`, from its outputs saved at `saved`."""
    def measure(rec: dict) -> dict:
        outs = load_outputs(saved) if saved.exists() else None
        if reference is None or reference.arrays is None or outs is None:
            label = reference.label if reference else "the reference"
            return {**probe_metrics(rec.get("result")),
                    "comparison_error": f"no outputs of {label} to compare the trace of {rec.get('version')} with"}
        return probe_metrics(rec.get("result"), outs, reference.arrays, reference.id)
    return measure


def _producers(model: onnx.ModelProto) -> dict[str, list[str]]:
    """tensor -> the tensors its producer reads."""
    return {o: [t for t in n.input if t] for n in model.graph.node for o in n.output if o}


def _downstream(model: onnx.ModelProto, producers: dict[str, list[str]], roots: set[str]) -> set[str]:
    """Tensors computed from any of `roots` (the roots excluded)."""
    if not roots:
        return set()
    tainted: set[str] = set()
    for node in surgery.topological_nodes(model.graph):
        if any(t in roots or t in tainted for t in node.input if t):
            tainted.update(o for o in node.output if o)
    return tainted - roots


@dataclass
class _PassContext:
    prober: Prober
    release: Release
    model_path: Path
    inputs_npz: Path
    workdir: Path
    exposed_dir: Path
    infos: list
    graph_outputs: list
    base_out: dict
    opts: dict
    timeout: float
    dims: dict
    budget: int
    visibility: dict
    log: object
    concrete: dict
    count: int = 0
    last: dict = field(default_factory=dict)
    groups: list = field(default_factory=list)  # tensor names of each pass of the last run()

    def run(self, wanted: list, kind: str, result: TraceResult) -> dict[str, TensorStat]:
        """Expose `wanted` in passes within the byte budget; stats by tensor name."""
        by_name = {i.name: i for i in self.infos}
        stats: dict[str, TensorStat] = {}
        sized = [self.concrete.get(i.name, i) for i in wanted]
        unknown = max([s for s in (i.nbytes(self.dims) for i in self.concrete.values()) if s] or [surgery.DEFAULT_UNKNOWN_BYTES])
        # A pass's exposed tensors are held twice at the end of its run: onnxruntime's fetched outputs and
        # the numpy arrays `run` copies them into. Half the budget each keeps the worker within the budget.
        queue = surgery.chunk(sized, max(1, self.budget // 2), self.dims, unknown_bytes=max(unknown, 1 << 20))
        self.groups = []
        while queue:
            group = queue.pop(0)
            self.count += 1
            names = [i.name for i in group]
            self.groups.append(names)
            _log(self.log, f"trace {self.release.version}: pass {self.count} {kind} ({len(names)} tensors)")
            path = surgery.expose(self.model_path, names, self.exposed_dir, self.infos)
            rec = self.prober.probe(
                self.release, ProbeJob(path, self.inputs_npz, tuple(names + self.graph_outputs), self.opts, self.timeout),
                outputs=None).record
            info = {"pass": self.count, "kind": kind, "tensors": len(names), "status": rec["status"],
                    "seconds": rec.get("seconds"), "peak_rss_mb": (rec.get("result") or {}).get("peak_rss_mb"),
                    "perturbed": False}
            result.passes.append(info)
            if rec["status"] != "ran":
                info["reason"] = rec.get("reason")
                whole = "External data" in (rec.get("reason") or "")  # every pass would fail the same way
                if len(group) > 1 and rec["status"] in ("error", "crash") and not whole:
                    half = len(group) // 2
                    queue[:0] = [group[:half], group[half:]]  # find the tensor it cannot expose
                else:
                    for i in group:
                        stats[i.name] = TensorStat(i.name, i.dtype, source="unavailable",
                                                   note=f"{rec['status']}: {rec.get('reason', '')}"[:200])
                continue
            for o in rec["result"]["outputs"]:
                if o["name"] in self.base_out:
                    if o.get("sha256") != self.base_out[o["name"]].get("sha256"):
                        info["perturbed"] = True
                    continue
                stats[o["name"]] = _stat(o, by_name.get(o["name"]), self.visibility.get(o["name"], "unknown"), "exposed")
            result.perturbed |= info["perturbed"] and kind == "clean"
        self.last = stats
        return stats


def _dump(prober: Prober, release, model_path, infos, names, inputs_npz, workdir, opts, timeout) -> dict[str, str]:
    """One extra pass that saves only the named tensors, each as <workdir>/<name>.npz."""
    known = {i.name for i in infos}
    graph_outputs = {o.name for o in onnx.load(str(model_path), load_external_data=False).graph.output}
    missing = [n for n in names if n not in known and n not in graph_outputs]
    if missing:
        raise KeyError(f"cannot dump {missing}: not tensors of the model")
    path = surgery.expose(model_path, [n for n in names if n not in graph_outputs], workdir / "exposed", infos)
    tmp = workdir / "dump-all.npz"
    rec = prober.probe(release, ProbeJob(path, inputs_npz, tuple(names), opts, timeout), outputs=tmp).record
    out = {}
    if rec["status"] == "ran" and tmp.is_file():
        with np.load(tmp) as data:
            for n in names:
                dest = workdir / f"{_safe(n)}.npz"
                np.savez(dest, **{"value": data[n]})
                out[n] = str(dest)
    tmp.unlink(missing_ok=True)
    return out


def _summarize(result: TraceResult, original: onnx.ModelProto) -> None:
    for n in result.nodes:
        for t in n.outputs:
            if not t.available:
                if t.note != "not floating point":
                    result.unavailable.append(t.name)
                continue
            if t.nonfinite:
                if result.first_nonfinite_any is None:
                    result.first_nonfinite_any, result.first_nonfinite_any_tensor = n.name, t.name
                if t.visibility == "seen" and result.first_nonfinite is None:
                    result.first_nonfinite, result.first_nonfinite_tensor = n.name, t.name
            if t.dtype == "float16":
                h = math.inf if t.nonfinite else (t.headroom or 0.0)
                if h > 0.5:
                    result.above_50.append(t.name)
                if h > 0.9:
                    result.above_90.append(t.name)
    by_node = {n.name: n for n in result.nodes}
    for layer, adds in surgery.residual_nodes(original).items():
        best = None
        for name in adds:
            nt = by_node.get(name)
            if nt is None or not nt.outputs or not nt.outputs[0].available:
                continue
            t = nt.outputs[0]
            key = (t.nonfinite, t.max_abs or 0.0)
            if best is None or key > best[0]:
                best = (key, name, t)
        if best is None:
            continue
        _, name, t = best
        result.residual.append({"layer": layer, "node": name, "tensor": t.name, "max_abs": t.max_abs,
                                "headroom": t.headroom, "nonfinite": t.nonfinite, "visibility": t.visibility})


# --- JSON --------------------------------------------------------------------------------


def _clean(x):
    """JSON without Infinity/NaN: non-finite floats become null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def to_json(result) -> dict:
    """A JSON-serializable dict of a trace or a diff (non-finite floats become null)."""
    doc = asdict(result)
    is_trace = isinstance(result, TraceResult)
    doc["kind"] = "trace" if is_trace else "diff"
    if is_trace:
        doc["first_nonfinite_among"] = "seen"
    return _clean(doc)


def trace_from_json(doc: dict) -> TraceResult:
    """Rebuild a TraceResult from `to_json` output (e.g. to diff stored traces)."""
    doc = {k: v for k, v in doc.items() if k not in ("kind", "first_nonfinite_among")}
    prec = {k: precision.NodePrecision(**{**v, "casts": tuple(v.get("casts") or ())}) for k, v in (doc.pop("precision") or {}).items()}
    nodes = []
    for n in doc.pop("nodes") or []:
        p = n.get("precision")
        nodes.append(NodeTrace(n["name"], n["op_type"], n["layer"], n["inputs"], [TensorStat(**t) for t in n["outputs"]],
                               precision.NodePrecision(**{**p, "casts": tuple(p.get("casts") or ())}) if p else None))
    return TraceResult(**doc, nodes=nodes, precision=prec)


def save_json(result, path: Path) -> Path:
    Path(path).write_text(json.dumps(to_json(result), indent=1))
    return Path(path)
