"""Shrink a regression to a repro a maintainer can run in seconds: fewest rows, fewest nodes.

Given a run's boundary (its good release L and its bad release B, same target
and options: a regression's last good and first bad, a fix's first good and
last bad), every candidate is judged by probing it on BOTH releases: it is
kept only if it is still good on L and bad on B. Nothing about onnxruntime's numerics is
assumed, because exposing or feeding intermediate tensors changes what it
computes (an fp16 tensor an fp32 island kept finite reads Inf once exposed).

1. Rows: the rows B's saved outputs show as bad are tried one at a time,
   then delta debugging (`ddmin`) over all rows; token inputs are trimmed to
   the longest kept row (attention_mask).
2. Nodes, in the spirit of Polygraphy's `debug reduce`, over the topological
   order: the output moves to the earliest node whose output still flips
   (bisection, then a linear finish), the inputs move to the latest cut that
   still flips, every tensor crossing the cut fed with values captured on L.
   A cut is fed only the inputs it reads. Original node names, opset and
   domains are kept.

A candidate a release gives no verdict (it does not load or run there, crashes
the worker, cannot be compared) is rejected, neither kept nor a step that does
not flip: its progress line says so (Saying), and reduce.json counts them.

Candidates are judged as the run's question judges (harness.session.asked_of_run),
every predicate included. A question that compares with a reference compares
each candidate too: with a reference file or the fp32 model, with the reference
rows of the rows it keeps (only rows are reduced then: those values are of the
model's outputs); with a reference release, with L's own outputs on the same
candidate (good on L by construction, bad on B where B leaves L's values). The
values B was compared with are kept beside the reduction (reference.npz).

Every probe is recorded in results/<run>/reduced/probes.jsonl under the
digest of its candidate (and the question's key, when it compares), so a
reduction that stops resumes without repeating one.

This module holds one concept, the reduction: its search helpers, its checker
and its steps.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import onnx

from harness.errors import EnvironmentSkip, HarnessError, UsageError
from harness.graphs import surgery
from harness.graphs.subgraph import Graph, fed, model_bytes, needed
from harness.metrics import probe_metrics
from harness.models.inputs import MASK_INPUT, axes_rows, bad_rows, batch_axes, take_rows
from harness.probe import Observer, ProbeJob, Prober, serving
from harness.results.store import REDUCED, WORK, RunStore, load_outputs
from harness.search import ddmin
from harness.verdicts import judge

# --- pure search helpers -------------------------------------------------------------------------


def first_true(lo: int, hi: int, holds: Callable[[int], bool]) -> int:
    """The smallest i in [lo, hi] where `holds` is true, given holds(hi); bisection (monotone assumed)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def bisection_checks(n: int) -> int:
    """The most checks first_true or last_true makes over n candidates: ceil(log2(n))."""
    return max(n - 1, 0).bit_length()


def last_true(lo: int, hi: int, holds: Callable[[int], bool]) -> int:
    """The largest i in [lo, hi] where `holds` is true, given holds(lo); bisection (monotone assumed)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if holds(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def take_positions(arrays: dict[str, np.ndarray], positions: list[int], length: int) -> dict[str, np.ndarray]:
    """Every array whose axis 1 has `length` entries, cut to `positions` on that axis (tokens of a sequence)."""
    return {k: np.ascontiguousarray(v[:, positions]) if v.ndim >= 2 and v.shape[1] == length else v
            for k, v in arrays.items()}


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()[:16]


# --- judging candidates on both releases ---------------------------------------------------------


@dataclass
class Against:
    """What the question of the reduced run compares a candidate's outputs with (reduce judges as the run did).

    `rows`: per release, reference arrays aligned with the batch's rows (a reference file: the same for both
    releases; the fp32 model: its outputs on each release), cut to the rows a candidate keeps: only the rows
    can be reduced then, the reference being of the model's outputs. None: the reference is the last good
    release's outputs on the candidate itself (a reference release), so the output may move to any tensor."""

    id: str
    label: str
    kind: str
    rows: dict[str, dict[str, np.ndarray]] | None
    batch: dict[str, np.ndarray] = field(default_factory=dict)  # the full batch: token inputs trim the rows
    axes: dict[str, int | None] | None = None  # each output's batch axis (batch_axes of the model's outputs)

    def cut(self, version: str, kept: list[int] | None) -> dict[str, np.ndarray] | None:
        """The reference rows of `kept` (all rows when None), trimmed as take_rows trims the batch."""
        ref = (self.rows or {}).get(version)
        if ref is None or kept is None:
            return ref
        mask = {MASK_INPUT: self.batch[MASK_INPUT]} if MASK_INPUT in self.batch else {}
        axes = None if self.axes is None else {**{k: self.axes.get(k) for k in ref}, **{k: 0 for k in mask}}
        return {k: v for k, v in take_rows({**ref, **mask}, kept, axes).items() if k not in mask}


NOT_COMPARED = "no reference values for this candidate: the last good release did not run it"

# What a release that gives a candidate one of these verdicts says of it: nothing. The candidate is rejected (it is
# neither kept nor a step that does not flip): not a finding about the release.
NO_VERDICT = ("error", "skip", "crash", "timeout")
_DID = {"crash": "crashes the worker", "timeout": "runs out of time", "skip": "is skipped"}


def _refusal(judged: dict) -> tuple[str, str] | None:
    """(what the release did with the candidate, why) when its probe gives no verdict, else None. A capture is
    refused by its status: it is there for the values, whatever the question makes of them."""
    verdict = judged.get("status") if judged.get("capture") else judged.get("verdict")
    if verdict not in NO_VERDICT:
        return None
    why = str(judged.get("why") or verdict)
    if verdict != "error":
        return _DID[verdict], why
    if judged.get("status") == "ran":  # it ran, and the question could not judge it (no comparison)
        return "cannot be judged", why
    stage = (judged.get("result") or {}).get("stage")  # where the worker stopped, also said at the reason's end
    return ("does not run" if stage in ("run", "timing") else "does not load"), \
        re.sub(r" \(at \w+\)$", "", why)


def probe_said(judged: dict) -> str | None:
    """What a reduction's probe says in place of its verdict on its progress line: a candidate rejected (its
    release gave it no verdict: "candidate rejected: it does not load on 1.20.0 (...)"), or values captured (a
    capture is no candidate: the question does not judge it); None where the verdict says it."""
    if not (judged.get("candidate") or judged.get("capture")):
        return None
    refused = _refusal(judged)
    if judged.get("capture"):
        if refused is None:
            return "captured the values a cut is fed"
        did, why = refused
        return (f"candidate rejected: its inner tensors cannot be captured (the model exposing them {did} on "
                f"{judged['version']}: {why})")
    return None if refused is None else f"candidate rejected: it {refused[0]} on {judged['version']} ({refused[1]})"


class Saying:
    """The observer of a reduction's probes: each record it hears carries what it says in place of its verdict
    (`said`, probe_said), which the progress line shows instead of an "error" that would read as the release's."""

    def __init__(self, observer: Observer):
        self.observer = observer

    def expect(self, left: int | None, step: str | None = None) -> None:
        self.observer.expect(left, step)

    def probe_started(self, version: str) -> None:
        self.observer.probe_started(version)

    def probe_waiting(self, version: str) -> None:
        self.observer.probe_waiting(version)

    def probe_finished(self, record: dict, reused: bool) -> None:
        said = probe_said(record)
        self.observer.probe_finished({**record, "said": said} if said else record, reused)


def rejected_why(judged: list[dict]) -> str | None:
    """Why a candidate is rejected, from its probes on the pair ("it does not load on either release (...)");
    None when every release judged it."""
    found = [(j["version"], r) for j in judged if (r := _refusal(j)) is not None]
    if not found:
        return None
    if len(found) == len(judged) > 1 and len({r for _, r in found}) == 1:
        did, why = found[0][1]
        return f"it {did} on either release ({why})"
    return "; ".join(f"it {did} on {version} ({why})" for version, (did, why) in found)


@dataclass
class Checker:
    """Judge candidates on the boundary pair: a flip is good on L and bad on B. Every probe is recorded.

    With `against`, each probe is compared with the question's reference before it is judged; the records
    carry the question's key, so a reduction of another question of the run never reuses them."""

    plan: object  # harness.plan.Plan of the run (runner, job options, predicate)
    good: object  # Release
    bad: object  # Release
    store: RunStore
    log: Callable[[str], None] = lambda msg: None
    against: Against | None = None
    question: str | None = None  # the key of the question reduced (tags every record)
    reused: int = 0
    reference_used: dict | None = None  # what B's last verdict was compared with (kept beside the reduction)
    observer: Observer | None = None  # hears of each probe made, and of each step's bound (the progress lines)
    tried: dict = field(default_factory=dict)  # each candidate judged (id -> why it is rejected, None when judged)
    _done: dict = field(default_factory=dict)

    def __post_init__(self):
        self._prober = Prober(self.plan.runner, self.store, self.plan.predicate,
                              observer=Saying(self.observer) if self.observer else None)
        self._files = self.store.subdir("candidates")
        for rec in self.store.records():
            if rec.get("candidate") and rec.get("question") == (self.question if self.against else rec.get("question")):
                self._done[(rec["candidate"], rec["version"])] = rec

    @property
    def probes(self) -> int:
        """Probes made now (not reused)."""
        return self._prober.probes

    @property
    def seconds(self) -> float:
        return self._prober.seconds

    def expect(self, checks: int | None, step: str, probes_each: int = 2) -> None:
        """Tell the observer the most candidates `step` still checks (None: nothing bounds them, as delta
        debugging), as probes: a pair each, and one more where a cut's inner tensors are captured first."""
        if self.observer is not None:
            self.observer.expect(None if checks is None else checks * probes_each, step)

    def write(self, model: onnx.ModelProto | Path, arrays: dict[str, np.ndarray]) -> tuple[str, Path, Path]:
        """(candidate id, model path, inputs path); a Path model is the original file, used as it is."""
        data = npz_bytes(arrays)
        if isinstance(model, Path):
            cid = digest(str(model).encode(), data)
            model_path = model
        else:
            raw = model_bytes(model)
            cid = digest(raw, data)
            model_path = self._files / f"{cid}.onnx"
            if not model_path.exists():
                model_path.write_bytes(raw)
        inputs_path = self._files / f"{cid}.npz"
        if not inputs_path.exists():
            inputs_path.write_bytes(data)
        return cid, model_path, inputs_path

    def verdicts(self, model, arrays, outputs: tuple[str, ...] = (), kept: list[int] | None = None) -> dict[str, str]:
        """The verdicts of a candidate on L and B; `kept`: the rows of the batch it keeps (None: all of them).

        A cut is fed only the inputs it reads: the batch's others (an attention_mask the kept nodes never use)
        would make onnxruntime refuse it on both releases, and the cut that flips go untried."""
        if isinstance(model, onnx.ModelProto):
            arrays = fed(model, arrays)
        cid, model_path, inputs_path = self.write(model, arrays)
        job = ProbeJob(model_path, inputs_path, outputs, self.plan.job.session_options, self.plan.job.timeout)
        tags = {"candidate": cid, **({"question": self.question} if self.against and self.question else {})}
        a = self.against
        saved = {r.version: self._files / f"{cid}-{r.version}.npz" for r in (self.good, self.bad)}

        def one(release, reference=None):
            rec = self._done.get((cid, release.version))
            if rec is not None:
                self.reused += 1
                return release.version, judge(rec, self.plan.predicate)
            measure = None
            if a is not None:
                def measure(r: dict) -> dict:
                    outs = load_outputs(saved[release.version])
                    ref = outs if reference is None and release is self.good and a.rows is None else reference
                    if ref is None or outs is None:
                        return {**probe_metrics(r.get("result")), "comparison_error": NOT_COMPARED}
                    return probe_metrics(r.get("result"), outs, ref, a.id)
            probed = self._prober.probe(release, job, tags=tags, outputs=saved[release.version] if a else None,
                                        measure=measure)
            self._done[(cid, release.version)] = probed.record
            return release.version, probed.judged

        if a is not None and a.rows is None:
            # B is compared with L's outputs on this very candidate: L first (again when its outputs are gone)
            if (cid, self.bad.version) not in self._done and not saved[self.good.version].exists():
                self._done.pop((cid, self.good.version), None)
            found = dict([one(self.good)])
            self.reference_used = load_outputs(saved[self.good.version])
            found.update([one(self.bad, self.reference_used)])
        else:
            if a is not None:
                self.reference_used = a.cut(self.bad.version, kept)
            with serving(2, stop=self._prober) as pool:  # the pair at once
                refs = {r.version: a.cut(r.version, kept) if a else None for r in (self.good, self.bad)}
                found = dict(pool.map(lambda r: one(r, refs[r.version]), (self.good, self.bad)))
        self.tried[cid] = rejected_why(list(found.values()))
        return {version: j["verdict"] for version, j in found.items()}

    def known(self, model: Path, arrays: dict[str, np.ndarray], records: dict[str, dict]) -> None:
        """Take the run's own probes of the unreduced model and batch (its search just made them, with the
        same job) as this candidate's: the first check that the full model flips probes nothing again."""
        cid, _, _ = self.write(model, arrays)
        for release in (self.good, self.bad):
            rec = records.get(release.version)
            if rec is not None and rec.get("status") != "skip":
                self._done.setdefault((cid, release.version), rec)

    def flips(self, model, arrays, outputs: tuple[str, ...] = (), kept: list[int] | None = None) -> bool:
        v = self.verdicts(model, arrays, outputs, kept)
        return v[self.good.version] == "good" and v[self.bad.version] == "bad"

    def capture(self, model_path: Path, arrays: dict[str, np.ndarray], names: list[str],
                infos: list[surgery.TensorInfo]) -> dict[str, np.ndarray] | None:
        """Values of `names` on L, from a copy of the model that exposes them (None if that fails)."""
        cid = digest(str(model_path).encode(), npz_bytes(arrays), "\0".join(names).encode())
        saved = self.store.outputs_path(self.good.version, f"capture-{cid}")
        if not saved.exists():
            _, _, inputs_path = self.write(model_path, arrays)
            exposed = surgery.expose(model_path, names, self._files / f"exposed-{cid}", infos)
            job = ProbeJob(exposed, inputs_path, tuple(names), self.plan.job.session_options, self.plan.job.timeout)
            probed = self._prober.probe(self.good, job, tags={"capture": cid}, outputs=saved)
            if probed.record["status"] != "ran" or not saved.exists():  # the cuts fed from it are rejected
                refused = _refusal(probed.judged)
                self.tried[f"capture-{cid}"] = "its inner tensors cannot be captured" + (
                    f" (the model exposing them {refused[0]} on {self.good.version}: {refused[1]})" if refused
                    else f": {self.good.version} saved none of them")
                return None
        with np.load(saved) as data:
            return {k: data[k] for k in data.files}


# --- the reduction -------------------------------------------------------------------------------


def dims_of(values) -> dict[str, tuple | None]:
    """Each graph input's or output's dims (an int, a name, or None), None where it has no shape."""
    found = {}
    for vi in values:
        tt = vi.type.tensor_type
        found[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                               for d in tt.shape.dim) if tt.HasField("shape") else None
    return found


def row_axes(model: onnx.ModelProto, arrays: dict[str, np.ndarray]
             ) -> tuple[dict[str, int | None] | None, dict[str, int | None] | None]:
    """(each input's batch axis, each output's) as the model's dims show them (batch_axes); the outputs' by the
    same named dim as the inputs' (axis 0 when the dims name none)."""
    ins = dims_of(model.graph.input)
    axes = batch_axes(ins, arrays)
    if axes is None:
        return None, None
    names = {ins[k][a] for k, a in axes.items() if a is not None and ins.get(k) and isinstance(ins[k][a], str)}
    outs = {}
    for name, d in dims_of(model.graph.output).items():
        at = [i for i, x in enumerate(d or ()) if x in names] if names else [0]
        outs[name] = at[0] if at else None
    return axes, outs


def reduce_rows(checker: Checker, model: Path, arrays: dict[str, np.ndarray], hints: list[int],
                outputs: tuple[str, ...] = (), axes: dict[str, int | None] | None = None
                ) -> tuple[list[int], str | None]:
    """(the fewest rows that still flip, why no row could be dropped or None): B's bad rows alone first, then
    ddmin over every row, cut along each input's batch axis (`axes`, as the model's dims show it). Every row,
    when the inputs have no batch axis: cutting one input's first axis would only make a batch the model
    refuses."""
    count = axes_rows(arrays, axes) if axes is not None else None
    if count is None:
        count = max((v.shape[0] for v in arrays.values() if v.ndim), default=1)
        why = "the model's dims show no batch axis the inputs share"
        checker.log(f"rows: {why}: all rows kept")
        return list(range(count)), why
    if count == 1:
        return [0], "the batch has one row"
    rows = list(range(count))

    def flips(subset: list[int]) -> bool:
        return checker.flips(model, take_rows(arrays, sorted(subset), axes), outputs, sorted(subset))

    for i, r in enumerate(hints):
        checker.expect(len(hints) - i, "the bad rows alone")
        checker.log(f"rows: trying row {r} alone")
        if flips([r]):
            return [r], None
    checker.log(f"rows: delta debugging over {len(rows)} rows")
    checker.expect(None, "the rows")
    kept = sorted(ddmin(rows, flips))
    return kept, (f"no row of the {count} can be dropped: fewer do not flip" if len(kept) == count else None)


def reduce_nodes(checker: Checker, graph: Graph, model_path: Path, arrays: dict[str, np.ndarray],
                 target: str) -> tuple[tuple[onnx.ModelProto, dict[str, np.ndarray]] | None, str | None]:
    """(the smallest subgraph and its inputs that still flips, or None and why no cut does).

    Output candidates are the float tensors `target` (the checked model output)
    depends on. After the output and input cuts, whole branches are pruned
    (an MLP, an attention block) by feeding the tensor they make, largest first.
    """
    candidates = [i for i in graph.ancestors(target) if graph.float_output(i)]
    if not candidates:
        return None, f"{target} depends on no floating-point tensor a cut could end at"

    def out_flips(k: int) -> bool:
        out = graph.float_output(candidates[k])
        return checker.flips(graph.sub(graph.ancestors(out), out), arrays)

    last = len(candidates) - 1
    checker.expect(1 + bisection_checks(last + 1), "the output cut")
    if not out_flips(last):
        return None, f"the model cut to the nodes {target} depends on does not flip"
    checker.log(f"nodes: moving the output earlier over {len(candidates)} candidate tensors")
    output = graph.float_output(candidates[first_true(0, last, out_flips)])
    upstream = graph.ancestors(output)
    results: dict[tuple, tuple] = {}

    def attempt(keep: list[int]) -> bool:
        """Does the subgraph of `keep` flip, fed on its cut with values captured on L?"""
        key = tuple(keep)
        if key in results:
            return results[key] is not None
        crossing = graph.crossing(keep)
        fed = {t: arrays[t] for t in crossing if t in arrays}
        inner = [t for t in crossing if t not in arrays]
        if inner:
            values = checker.capture(model_path, arrays, inner, [graph.infos[t] for t in inner])
            if values is None or any(t not in values for t in inner):
                results[key] = None
                return False
            fed.update({t: values[t] for t in inner})
        candidate = (graph.sub(keep, output), fed)
        results[key] = candidate if checker.flips(*candidate) else None
        return results[key] is not None

    def from_start(j: int) -> list[int]:
        return [i for i in upstream if i >= upstream[j]]

    checker.log(f"nodes: moving the inputs later over {len(upstream)} cuts")
    checker.expect(1 + bisection_checks(len(upstream)), "the input cut", probes_each=3)
    if not attempt(from_start(0)):
        return None, "no cut fed with the values captured on the last good release flips"
    j = last_true(0, len(upstream) - 1, lambda j: attempt(from_start(j)))
    # the linear finish: one inner tensor fed at a time, whole branches first, then single nodes
    checker.expect(None, "the branches")
    keep = prune_branches(graph, from_start(j), output, attempt, checker.log)
    found = results[tuple(keep)]
    return found, (None if len(found[0].graph.node) < len(graph.nodes) else "every node is needed to flip")


def prune_branches(graph: Graph, keep: list[int], output: str, attempt: Callable[[list[int]], bool],
                   log=lambda msg: None) -> list[int]:
    """Feed one inner tensor at a time, dropping the branch that made it, largest branch first."""
    tried: set[str] = set()
    while True:
        inner = {t for i in keep for t in graph.reads[i] if graph.producer.get(t) in set(keep)}
        options = sorted(((len(keep) - len(needed(graph, keep, output, {t})), t) for t in inner - tried), reverse=True)
        options = [(gain, t) for gain, t in options if gain > 0]
        if not options:
            return keep
        gain, t = options[0]
        tried.add(t)
        trial = needed(graph, keep, output, {t})
        if attempt(trial):
            log(f"nodes: fed {t}, {len(trial)} nodes left")
            keep = trial


def sequence_length(arrays: dict[str, np.ndarray]) -> int | None:
    lengths = {v.shape[1] for v in arrays.values() if v.ndim >= 2}
    return lengths.pop() if len(lengths) == 1 else None


def reduce_positions(checker: Checker, model: onnx.ModelProto, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Fewest sequence positions (axis 1, shared by the inputs) that still flip: ddmin, each subset verified."""
    length = sequence_length(arrays)
    if length is None or length < 2:
        return arrays
    checker.log(f"positions: delta debugging over {length} positions")
    checker.expect(None, "the positions")
    kept = ddmin(list(range(length)), lambda pos: checker.flips(model, take_positions(arrays, sorted(pos), length)))
    return take_positions(arrays, sorted(kept), length)


def candidates_tried(tried: dict[str, str | None], reasons: int = 5) -> dict:
    """The candidates a reduction judged, those rejected (no verdict on a release of the pair) and the most
    frequent reasons why, each with its count."""
    why = [w for w in tried.values() if w is not None]
    counts = sorted(((why.count(w), w) for w in set(why)), key=lambda c: (-c[0], c[1]))
    return {"tried": len(tried), "rejected": len(why),
            "reasons": [{"why": w, "count": n} for n, w in counts[:reasons]]}


class NoFlip(Exception):
    """The full model does not flip between the pair on this target: nothing to reduce (probes ran)."""


def reduce_run(plan, good, bad, arrays: dict[str, np.ndarray], bad_outputs: dict[str, np.ndarray] | None,
               store: RunStore, log=lambda msg: None, nodes: bool = True, known: dict[str, dict] | None = None,
               against: Against | None = None, question: dict | None = None, observer: Observer | None = None) -> dict:
    """Rows, then nodes; the result verified once more on both releases and written to the store.

    `known`: the run's own records of `good` and `bad` (version -> record, judged as the question asks) for
    this very job, reused as the full model's verdicts instead of probing it again. `against`: the question's
    reference (its rows kept beside the reduced batch, reference.npz); `question`: its document and key;
    `observer`: hears of each probe made and of each step's bound."""
    t0 = time.perf_counter()
    checker = Checker(plan, good, bad, store, log, against, (question or {}).get("key"), observer=observer)
    why_not = {}  # what could not be reduced, and why
    if not nodes:
        why_not["nodes"] = "only rows were asked (--rows-only)"
    elif against is not None and against.rows is not None:
        why_not["nodes"] = f"the question compares the model's outputs with {against.label}: only rows are reduced"
        nodes = False
    model_path = Path(plan.job.model)
    outputs = tuple(plan.job.outputs)
    graph = Graph.load(model_path)
    axes, out_axes = row_axes(graph.model, arrays)
    whole = axes is None or axes_rows(arrays, axes) is None  # no batch axis: the batch is kept as it is
    if against is not None:
        against.axes = out_axes
    if known:
        checker.known(model_path, arrays, known)
    checker.expect(1, "the full model")
    if not checker.flips(model_path, arrays, outputs):
        raise NoFlip(f"the full model does not flip between {good.version} and {bad.version} on this target")
    hints = bad_rows(bad_outputs or {}, list(outputs) or None, out_axes) if out_axes is not None else []
    rows, why_rows = reduce_rows(checker, model_path, arrays, hints, outputs, None if whole else axes)
    if why_rows:
        why_not["rows"] = why_rows
    kept = arrays if whole else take_rows(arrays, rows, axes)
    reduced_model, reduced_inputs = None, kept
    positions = {"before": None, "after": None}
    if nodes:
        target = outputs[0] if outputs else graph.model.graph.output[0].name
        found, why_nodes = reduce_nodes(checker, graph, model_path, kept, target)
        if why_nodes:
            why_not["nodes"] = why_nodes
        if found is not None and not why_nodes:
            reduced_model, reduced_inputs = found[0], fed(*found)  # inputs.npz: what the reduced model reads
            if MASK_INPUT in arrays:  # token inputs: axis 1 of the fed tensors is the sequence
                positions["before"] = sequence_length(reduced_inputs)
                reduced_inputs = reduce_positions(checker, reduced_model, reduced_inputs)
                positions["after"] = sequence_length(reduced_inputs)
    final = reduced_model if reduced_model is not None else model_path
    checker.expect(1, "the verification")
    verdicts = checker.verdicts(final, reduced_inputs, () if reduced_model is not None else outputs,
                                None if reduced_model is not None or whole else rows)
    flips = verdicts[good.version] == "good" and verdicts[bad.version] == "bad"
    model_file = store.save_file("model.onnx", model_bytes(reduced_model)) if reduced_model is not None else None
    inputs_file = store.save_file("inputs.npz", npz_bytes(reduced_inputs))
    reference = None
    if against is not None:
        used = checker.reference_used
        ref_file = store.save_file("reference.npz", npz_bytes(used)) if used is not None else None
        reference = {"kind": against.kind, "id": against.id, "label": against.label,
                     "file": ref_file.name if ref_file else None,
                     "values": (f"the outputs of {good.version} on the reduced model and inputs" if against.rows is None
                                else f"the rows kept of {against.label}" + (f" on {bad.version}" if against.kind == "fp32" else ""))}
    before = len(rows) if whole else axes_rows(arrays, axes)
    reduced_any = len(rows) < before or reduced_model is not None or positions["after"] != positions["before"]
    doc = {
        "kind": "reduce",
        "pair": [good.version, bad.version],
        "rows": {"before": before, "after": len(rows), "kept": rows, "axes": None if whole else axes},
        "reduced": reduced_any,
        "not_reduced": None if reduced_any else why_not,
        "positions": positions,
        "nodes": {"before": len(graph.nodes),
                  "after": len(reduced_model.graph.node) if reduced_model is not None else len(graph.nodes),
                  "kept": [n.name for n in reduced_model.graph.node] if reduced_model is not None else None},
        "model": {"file": model_file.name if model_file else None, "bytes": model_file.stat().st_size if model_file else None,
                  "inputs": [i.name for i in reduced_model.graph.input] if reduced_model is not None else None,
                  "outputs": [o.name for o in reduced_model.graph.output] if reduced_model is not None else list(outputs)},
        "inputs": {"file": inputs_file.name, "bytes": inputs_file.stat().st_size},
        "verified": {"verdicts": verdicts, "flips": flips},
        "question": question,
        "predicate": str(plan.predicate),
        "reference": reference,
        "candidates": candidates_tried(checker.tried),
        "probes": {"made": checker.probes, "reused": checker.reused, "probe_seconds": round(checker.seconds, 3)},
        "seconds": round(time.perf_counter() - t0, 3),
        "provenance": plan.runner.provenance(),
    }
    store.save_document("reduce", doc)
    for scratch in ("candidates", WORK):  # the records keep the evidence
        shutil.rmtree(store.dir / scratch, ignore_errors=True)
    return doc


def reduce_saved_run(run_dir: Path, cache_dir: Path, offline: bool = False, log=lambda msg: None,
                     nodes: bool = True, command: list[str] | None = None, question: str | None = None,
                     bad_if: str | None = None, observer: Observer | None = None,
                     ray_address: str | None = None) -> dict:
    """Reduce the boundary of a run's question (results/<run>/reduced/); the run's own target and options.

    The question is the run document `question` names, else the newest (harness.session.asked_of_run);
    `bad_if` asks another predicate over its range. Refusals (UsageError) come before any probe; NoFlip after.

    Every candidate runs on the same two releases: their workers serve one candidate after another
    (under emulation a worker's start is most of a tiny model's probe).
    """
    prepared = _prepare(Path(run_dir), cache_dir, offline, command, question, bad_if, ray_address)
    plan, good, bad = prepared["args"][:3]
    log(f"reducing {plan.probe_inputs.model.name} between {good.version} (good) and {bad.version} (bad), "
        f"answering {prepared['kwargs']['question']['said']}")
    try:
        with serving():
            return reduce_run(*prepared["args"], log=log, nodes=nodes, observer=observer, **prepared["kwargs"])
    except (UsageError, EnvironmentSkip) as exc:  # probes ran: a failure now, not bad input (exit 2)
        raise HarnessError(f"reduce: {exc}") from None


def _prepare(run_dir: Path, cache_dir: Path, offline: bool, command: list[str] | None, key: str | None,
             bad_if: str | None, ray_address: str | None = None) -> dict:
    """Everything a reduction needs, or the UsageError that refuses it: nothing is probed here."""
    import dataclasses

    from harness.models.inputs import load_npz
    from harness.plan import make_plan, spec_of_run
    from harness.reference import FP32, FP32_SERIES, restored
    from harness.request import release_listing
    from harness.results.history import latest_by_version, own_records
    from harness.session import asked_with_records, question_boundary
    from harness.summary import end_names

    store = RunStore(run_dir)
    asked, records = asked_with_records(store, key, bad_if, "reduce")
    q = asked.question
    pair = question_boundary(records, release_listing(cache_dir, offline), q).pair
    if pair is None:
        ends = " and ".join(name.replace("_", " ") for name in end_names(q.mode))
        raise UsageError(f"{run_dir.name}: its probes show no {ends} release to reduce between under {asked.said}")
    spec = spec_of_run(run_dir, cache_dir, offline, pair.older, pair.newer, q, ray_address)
    plan = make_plan(dataclasses.replace(spec, from_=pair.older, to=pair.newer), command)
    good = next(r for r in plan.releases if r.version == pair.good)
    bad = next(r for r in plan.releases if r.version == pair.bad)
    arrays = load_npz(Path(plan.job.inputs))
    against = None
    if q.reference and q.predicate.needs_reference:
        ref = restored(q.reference, store)
        rows = None
        if ref.kind == "file":
            if ref.arrays is None:
                raise UsageError(f"{run_dir.name}: its question compares with {ref.label}, and that file is not here "
                                 "as it was digested")
            rows = {good.version: ref.arrays, bad.version: ref.arrays}
        elif ref.kind == FP32:
            rows = {r.version: store.outputs(r.version, FP32_SERIES) for r in (good, bad)}
            if any(v is None for v in rows.values()):
                raise UsageError(f"{run_dir.name}: the fp32 model's outputs on {good.version} and {bad.version} "
                                 "are not both in the run; run `bisect run` with --reference fp32 over them first")
        against = Against(ref.id, ref.label, ref.kind, rows, arrays)
    saved = store.outputs_path(bad.version)
    bad_outputs = None
    if saved.exists():
        with np.load(saved) as data:
            bad_outputs = {k: data[k] for k in data.files}
    reduced = RunStore.open(run_dir, REDUCED, {"reduces": run_dir.name}, {"predicate": str(q.predicate)},
                            command or ["bisect", "reduce", run_dir.name])
    own = latest_by_version(own_records(store.records()))
    known = {v: records[v] for v in (good.version, bad.version) if v in own and v in records}
    return {"args": (plan, good, bad, arrays, bad_outputs, reduced),
            "kwargs": {"known": known, "against": against, "question": {**q.document(), "key": asked.key,
                                                                         "said": asked.said}}}
