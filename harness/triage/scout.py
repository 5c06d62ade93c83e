"""Which rows of a batch come closest to fp16's ceiling, measured natively on the host.

An emulated probe of a full-size model costs minutes per row, so the
fewest-rows search should start from a row that will flip, and from the
cheapest such row. One native pass of a *scout* copy of the model answers
that: every fp16 sum of two computed tensors (a residual stream's Adds)
whose first axis is the batch's gets each row's largest magnitude, taken in
fp32 (a value past 65504 that an fp32 island keeps finite reads as its real
size), and the rows are ranked by it. The scout only orders the rows: no
verdict is ever taken from it.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from harness.graphs.margin import residual_sums
from harness.metrics import FP16_MAX

OUTPUT = "ortbisect_scout_row_peaks"


def scout_model(model_path: Path, dest: Path, type_unsure=None) -> tuple[Path, int, int] | None:
    """A copy of the model (in directory `dest`, its weights linked, not copied) whose one output is
    [rows, K]: each row's largest |value| in each of its K fp16 sums of computed tensors that have the batch's
    first axis; with the number of them typed by `type_unsure(infos)`, which names those of the sums onnx
    cannot type or shape that are such (a session's outputs tell). None when there is none."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from harness.graphs import surgery
    from harness.results.store import write_atomic

    model = onnx.load(str(model_path), load_external_data=False)
    batch, typed, unsure = residual_sums(model)
    if batch is None:
        return None
    confirmed = type_unsure(unsure) if unsure and type_unsure else frozenset()
    chosen = typed + [t for t in unsure if t.name in confirmed]
    if not chosen:
        return None
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 13)
    g = model.graph
    g.initializer.append(numpy_helper.from_array(np.array([0, -1], np.int64), f"{OUTPUT}/rows"))
    axes = {}
    if opset >= 18:  # ReduceMax takes its axes as an input from opset 18 on
        g.initializer.append(numpy_helper.from_array(np.array([1], np.int64), f"{OUTPUT}/axes"))
    else:
        axes = {"axes": [1]}
    peaks = []
    for k, t in enumerate(chosen):
        p = f"{OUTPUT}/{k}"
        g.node.extend([
            helper.make_node("Reshape", [t.name, f"{OUTPUT}/rows"], [f"{p}/flat"], name=f"{p}/Reshape"),
            helper.make_node("Cast", [f"{p}/flat"], [f"{p}/f32"], name=f"{p}/Cast", to=TensorProto.FLOAT),
            helper.make_node("Abs", [f"{p}/f32"], [f"{p}/abs"], name=f"{p}/Abs"),
            helper.make_node("ReduceMax", [f"{p}/abs"] + ([f"{OUTPUT}/axes"] if opset >= 18 else []), [f"{p}/max"],
                             name=f"{p}/ReduceMax", keepdims=1, **axes),
        ])
        peaks.append(f"{p}/max")
    g.node.append(helper.make_node("Concat", peaks, [OUTPUT], name=f"{OUTPUT}/Concat", axis=1))
    del g.output[:]
    g.output.append(helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [batch, len(chosen)]))
    dest.mkdir(parents=True, exist_ok=True)
    surgery.link_external_data(model_path.parent, surgery.external_locations(model), dest)
    out = dest / "scout.onnx"
    write_atomic(out, model.SerializeToString())
    return out, len(chosen), len(confirmed)


def order_rows(peaks: list[float], lengths: list[int]) -> list[int]:
    """Rows whose peak reaches fp16's ceiling first, shortest (cheapest to probe) first among them; then the
    others, closest to the ceiling first. A peak that is NaN or Inf reaches the ceiling. Pure."""
    n = len(peaks)
    over = sorted((r for r in range(n) if not peaks[r] < FP16_MAX), key=lambda r: (lengths[r], r))
    under = sorted((r for r in range(n) if peaks[r] < FP16_MAX), key=lambda r: (-peaks[r], lengths[r], r))
    return over + under


def row_peaks(outputs: dict[str, np.ndarray], rows: list[int]) -> dict[int, float]:
    """Each of `rows` (the batch rows of one scout probe, in order) with its largest magnitude; inf if not finite."""
    values = outputs[OUTPUT].astype(np.float64)
    return {r: (float(v.max()) if np.isfinite(v).all() else math.inf) for r, v in zip(rows, values)}


def host_order(plan, chunks: list[list[int]], batch_of, log) -> dict | None:
    """The plan's batch rows ranked by one native pass of the scout on the newest release of the range (one
    probe per group of rows of similar length, on one worker and session; before it, when onnx cannot type
    some sums, one probe of the two shortest rows that outputs them); None where it cannot be had (no fp16
    tensor with the batch's axis, no release for the host), and the search keeps its length order.
    `batch_of(rows)` is the .npz of those rows."""
    from harness.errors import EnvironmentSkip, HarnessError
    from harness.graphs import surgery
    from harness.probe import ProbeJob, Prober, serving
    from harness.releases.versions import Target
    from harness.results.store import load_outputs
    from harness.runners import make_runner, native_arch

    work = plan.store.subdir("rows") / "scout"
    release = plan.releases[-1]
    try:
        runner = make_runner("auto", Target(native_arch(), plan.runner.target.python), plan.runner.cache_dir,
                             package=plan.runner.package)
        runner.provision()
    except (HarnessError, EnvironmentSkip) as exc:
        log(f"no native pass to rank the rows ({exc}): longest first")
        return None
    def outputs(model: Path, rows: list[int], names: tuple[str, ...], tag: str) -> tuple[dict | None, str]:
        """The named outputs of `model` on those rows, natively on `release` (None and why, if it did not run)."""
        job = ProbeJob(model, batch_of(rows), names, dict(plan.job.session_options), plan.job.timeout)
        out = work / f"{tag}.npz"
        rec = Prober(runner).probe(release, job, outputs=out).record
        if rec["status"] != "ran" or not out.exists():
            return None, rec.get("reason") or rec["status"]
        return load_outputs(out), ""

    def type_unsure(infos: list) -> frozenset[str]:
        """Those sums a session gives as fp16 with the batch's first axis, on the two shortest rows (the
        cheapest probe); none when it cannot output them (a wrong guessed type is refused at load)."""
        two = (chunks[-1] + [r for c in chunks[:-1] for r in c])[:2]
        names = tuple(t.name for t in infos)
        got, why = outputs(surgery.expose(plan.job.model, list(names), work / "typing", infos, "typing.onnx"),
                           two, names, "typing")
        if got is None:
            log(f"{len(names)} sums onnx cannot type are left out: a session could not output them on "
                f"{release.version} ({why})")
            return frozenset()
        return frozenset(n for n in names if n in got and got[n].dtype == np.float16 and got[n].ndim >= 2
                         and got[n].shape[0] == len(two))

    peaks: dict[int, float] = {}
    with serving():  # one worker for every probe of the pass, one session for every group
        made = scout_model(plan.job.model, work, type_unsure)
        if made is None:
            return None
        path, tensors, by_session = made
        log(f"ranking the {sum(map(len, chunks))} rows by how near their {tensors} fp16 sums come to 65504: "
            f"a native {native_arch()} pass on {release.version}")
        for i, rows in enumerate(chunks):
            got, why = outputs(path, rows, (OUTPUT,), f"peaks-{i}")
            if got is None:
                log(f"the native pass failed on {release.version} ({why}): longest first")
                return None
            peaks.update(row_peaks(got, sorted(rows)))
    return {"on": {"arch": native_arch(), "version": release.version, "tensors": tensors,
                   "typed_by_a_session": by_session},
            "peaks": [peaks[r] for r in range(len(peaks))]}
