"""`trace` and `diff` on real onnxruntime releases: a trace of a tiny model is a few probes."""

from __future__ import annotations

import hashlib
import json

import builders
import numpy as np
import pytest

from harness.explain.chart import headroom_chart
from harness.explain.diff import diff
from harness.explain.trace import to_json, trace
from harness.releases.uvtool import uv_bin
from harness.releases.versions import ReleaseIndex, Target
from harness.runners import make_runner

pytestmark = pytest.mark.release

ADD0, ADD1 = "/model/layers.0/Add", "/model/layers.1/Add"
SLN = "/model/norm/SimplifiedLayerNormalization"


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def releases(cache_dir):
    return {r.version: r for r in ReleaseIndex(cache_dir, uv_bin()).releases()}


@pytest.fixture(scope="module")
def x86(cache_dir):
    return make_runner("uv", Target("x86_64", "3.11"), cache_dir)


@pytest.fixture(scope="module")
def norm_traces(x86, releases, residual_norm, tmp_path_factory):
    model, batch = residual_norm
    work = tmp_path_factory.mktemp("norm_traces")
    return {v: trace(x86, releases[v], model, batch, work / v) for v in ("1.19.2", "1.20.0")}


def test_trace_names_norm_input_as_first_nonfinite(norm_traces):
    t = norm_traces["1.20.0"]
    assert (t.verdict, t.nan_rows, t.rows) == ("bad", 2, 4)
    norm = t.node(SLN)
    assert t.first_nonfinite == ADD1 and t.first_nonfinite_tensor == norm.inputs[0]
    seen = t.tensor(norm.inputs[0])
    assert seen.visibility == "seen" and seen.inf_rows == 2 and seen.dtype == "float16"
    assert t.precision[SLN].precision == "fp16" and t.precision[ADD1].precision == "fp32-island"
    assert [r["layer"] for r in t.residual] == [0, 1] and t.residual[1]["nonfinite"]
    assert t.tensor("/model/layers.0/Add_output_0").name in t.above_90  # 60000 of 65504
    assert t.unavailable == [] and all(p["status"] == "ran" for p in t.passes)
    json.dumps(to_json(t))


def test_trace_marks_observer_effect_in_fp32_island(norm_traces):
    """1.19.2 keeps the chain in fp32: the exposed fp16 copy of the Add reads Inf, but
    only for observation; the model's output is finite and nothing 'seen' is Inf."""
    t = norm_traces["1.19.2"]
    assert (t.verdict, t.nan_rows) == ("good", 0)
    assert t.first_nonfinite is None
    assert t.first_nonfinite_any == ADD1
    observed = t.tensor("/model/layers.1/Add_output_0")
    assert observed.inf_rows == 2 and observed.visibility == "observed-only"
    assert {p.precision for p in t.precision.values()} == {"fp32-island"}


def test_diff_names_norm_from_fp32_island_to_native_fp16(norm_traces):
    d = diff(norm_traces["1.19.2"], norm_traces["1.20.0"])
    changes = {c["node"]: c for c in d.precision_changes}
    assert list(changes) == [SLN]
    assert (changes[SLN]["a"]["precision"], changes[SLN]["b"]["precision"]) == ("fp32-island", "fp16")
    assert d.first_nonfinite_flip["node"] == ADD1
    assert d.suspect == SLN
    assert f"`{SLN}` ran in an fp32 island on 1.19.2 and natively in fp16 on 1.20.0" in d.explanation
    json.dumps(to_json(d))


def test_budget_splits_passes_and_peels_overflows(x86, releases, tmp_path):
    """x86_64 keeps residual_overflow_model in one fp32 island: every tensor is observed
    only. In one pass, the exposed Inf of the second Add feeds the Mul its rounded
    copy, so the Mul is traced again without it; one tensor per pass needs no peeling."""
    model = builders.save(builders.residual_overflow_model(), tmp_path / "overflow.onnx")
    np.savez(tmp_path / "batch.npz", **builders.residual_norm_inputs())
    one = trace(x86, releases["1.20.0"], model, tmp_path / "batch.npz", tmp_path / "one")
    assert [(p["kind"], p["tensors"]) for p in one.passes] == [("observe-1", 3), ("observe-2", 1)]
    split = trace(x86, releases["1.20.0"], model, tmp_path / "batch.npz", tmp_path / "split", budget_bytes=1)
    assert [(p["kind"], p["tensors"]) for p in split.passes] == [("observe-1", 1)] * 3
    for n in one.nodes:
        for s in n.outputs:
            assert split.tensor(s.name).sha256 == s.sha256, s.name
    mul = split.tensor("/model/scale/Mul_output_0")
    assert not mul.nonfinite and mul.max == 22496  # 90000 / 4 computed in fp32, rounded once
    assert split.verdict == "good" and split.first_nonfinite is None and split.first_nonfinite_any == ADD1


def test_trace_external_data_leaves_original_identical(x86, releases, tmp_path):
    """1.24.1 refuses a symlinked data file that leaves the model's directory: the
    exposed copy hard-links it; the original files stay byte-identical."""
    src = tmp_path / "model"
    src.mkdir()
    model = builders.external_data_model(src / "m.onnx")
    data = src / "m.onnx_data"
    np.savez(tmp_path / "batch.npz", **builders.residual_norm_inputs())
    before = {p.name: sha(p) for p in (model, data)}
    work = tmp_path / "work"
    tensor = "/model/layers.1/Add_output_0"
    t = trace(x86, releases["1.24.1"], model, tmp_path / "batch.npz", work, dump=[tensor])
    assert {p.name: sha(p) for p in (model, data)} == before
    assert sorted(p.name for p in src.iterdir()) == ["m.onnx", "m.onnx_data"]
    assert t.unavailable == [] and all(p["status"] == "ran" for p in t.passes)
    assert t.verdict == "bad" and t.first_nonfinite == ADD1
    # only the named tensor was written, as its own .npz
    assert set(t.dumps) == {tensor}
    assert sorted(p.name for p in work.rglob("*.npz")) == ["model_layers.1_Add_output_0.npz"]
    with np.load(t.dumps[tensor]) as f:
        assert np.isinf(f["value"]).any(axis=1).sum() == 2
    assert not (work / "exposed").exists()


def test_headroom_chart_of_real_traces(norm_traces, tmp_path):
    pytest.importorskip("matplotlib")
    out = headroom_chart([norm_traces["1.19.2"], norm_traces["1.20.0"]], tmp_path / "headroom.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.qemu
def test_diff_aarch64_names_overflowing_residual_add(cache_dir, releases, tmp_path):
    """aarch64 with fp16 arithmetic (neoverse-n1): Add runs natively in fp16 from 1.24.1."""
    runner = make_runner("qemu", Target("aarch64", "3.11"), cache_dir, "neoverse-n1")
    runner.provision()
    model = builders.save(builders.residual_overflow_model(), tmp_path / "overflow.onnx")
    np.savez(tmp_path / "batch.npz", **builders.residual_norm_inputs())
    a, b = (trace(runner, releases[v], model, tmp_path / "batch.npz", tmp_path / v) for v in ("1.23.2", "1.24.1"))
    assert (a.verdict, b.verdict) == ("good", "bad")
    d = diff(a, b)
    assert d.first_nonfinite_flip["node"] == ADD1
    assert d.suspect == ADD1
    change = next(c for c in d.precision_changes if c["node"] == ADD1)
    assert (change["a"]["precision"], change["b"]["precision"]) == ("fp32-island", "fp16")
    assert f"`{ADD1}` ran in an fp32 island on 1.23.2 and natively in fp16 on 1.24.1" in d.explanation
    assert "exceeds 65504" in d.explanation


def test_traces_given_one_workdir_take_turns(x86, releases, residual_norm, norm_traces, tmp_path):
    """Two commands tracing the same run's release at once (`diff` beside `report`) share its workdir in the
    cache: each clears its optimized graph there, and a diff read the other's half-written files (verdict None).
    A trace waits while another holds the workdir, then gives the same result."""
    import threading

    from harness.results.locking import file_lock

    model, batch = residual_norm
    work = tmp_path / "run" / "1.20.0"
    done: list = []
    work.parent.mkdir(parents=True)
    with file_lock(work.parent / f"{work.name}.lock"):  # another trace of this workdir, under way
        waiting = threading.Thread(target=lambda: done.append(trace(x86, releases["1.20.0"], model, batch, work)))
        waiting.start()
        waiting.join(timeout=5)
        assert waiting.is_alive() and not done
    waiting.join(timeout=300)
    assert done and done[0].verdict == norm_traces["1.20.0"].verdict == "bad"
    assert done[0].first_nonfinite == norm_traces["1.20.0"].first_nonfinite


def test_a_piped_trace_keeps_each_tensor_on_one_line_with_its_numbers(cache_dir, tmp_path):
    """`bisect trace ... | cat` (no terminal, no COLUMNS: 80 columns): one line per tensor, its name whole or
    shortened in the middle (its start and its end kept), min, max, max |x|, fp16 % and NaN/Inf rows there; at
    200 columns every name is whole and nothing gives way."""
    import os
    import re
    import subprocess
    import sys

    argv = [sys.executable, "-m", "harness.cli", "trace", "--model", "gemma-tiny-fused", "--version", "1.20.0",
            "--cache-dir", str(cache_dir), "--results-dir", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}

    def piped(*extra: str, **more: str) -> str:
        p = subprocess.run([*argv, *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900,
                           env={**env, **more})
        assert p.returncode == 0, p.stderr
        return p.stdout

    narrow = piped()
    doc = json.loads(piped("--json"))  # the trace the run keeps, read back
    # a tensor not named after its node (a model output) is shown with its node: "y ← /model/norm/..."
    names = {t["name"] if t["name"].startswith(n["name"]) else f"{t['name']} ← {n['name']}": t
             for n in doc["nodes"] for t in n["outputs"]}
    shown = int(re.search(r"^(\d+) of \d+ tensors shown$", narrow, re.M).group(1))
    assert shown > 20, narrow

    def table(text: str) -> list[dict]:
        """Each row's cells: the name (left-justified, from the header's "tensor" on) and the numbers, each
        right-justified to where its header ends."""
        lines = text.splitlines()
        head = next(line for line in lines if re.search(r"\btensor\b", line))
        at = {m.group(): m.span() for m in re.finditer(r"\S+", head)}
        assert {"min", "max", "max|x|", "%", "rows"} <= set(at), text
        rows = []
        for line in lines[lines.index(head) + 2:]:
            if not re.match(r"^ *\d+ \S", line) or "tensors shown" in line:
                break
            cell = {"line": line}
            ends = [("min", at["min"][1]), ("max", at["max"][1]), ("max|x|", at["max|x|"][1]), ("%", at["%"][1]),
                    ("rows", at["rows"][1])]
            name_end = at["op"][0] if "op" in at else None
            cell["name"], cell["min"] = line[at["tensor"][0]:ends[0][1]].rstrip().rsplit(maxsplit=1)
            if name_end is not None:
                cell["name"] = line[at["tensor"][0]:name_end].strip()
            for (_, prev), (key, end) in zip(ends, ends[1:]):
                cell[key] = line[prev:end].strip()
            rows.append(cell)
        return rows

    def candidates(cell: str) -> list[dict]:
        """The tensors a name cell can be: the name whole, or one with its start and its end."""
        if "…" not in cell:
            return [names[cell]] if cell in names else []
        start, end = cell.split("…")
        return [t for n, t in names.items() if n.startswith(start) and n.endswith(end) and len(n) > len(cell)]

    def numbers(t: dict) -> dict:
        return {"min": format(t["min"], ".5g"), "max": format(t["max"], ".5g"), "max|x|": format(t["max_abs"], ".5g"),
                "rows": f"{t['nan_rows']}/{t['inf_rows']}"}

    rows = table(narrow)
    assert len(rows) == shown and all(len(r["line"]) <= 80 for r in rows), narrow
    for r in rows:
        assert {k: r[k] for k in ("min", "max", "max|x|", "rows")} in map(numbers, candidates(r["name"])), r
        assert r["%"] == "" or re.fullmatch(r"\d+|Inf", r["%"]), r
    assert any(r["%"] == "Inf" for r in rows) and any(r["%"].isdigit() for r in rows), narrow
    assert len(narrow.splitlines()) < shown + 15, narrow  # 202 lines when each name broke over five to eight

    wide = piped(COLUMNS="200")
    assert "not shown" not in wide, wide
    rows = table(wide)
    assert len(rows) == shown and all(r["name"] in names for r in rows), wide  # every name whole
    assert all({k: r[k] for k in ("min", "max", "max|x|", "rows")} == numbers(names[r["name"]]) for r in rows), wide
    assert all(w in wide for w in ("ran as", "dtype", "observed only")), wide


def test_a_piped_diff_keeps_each_node_on_one_line(cache_dir, tmp_path):
    """`bisect diff ... | cat` at 80 columns: the node whose precision changed, whole, and how it ran on each
    release, on one line (its op, the end of its name, gives way)."""
    import os
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "harness.cli", "diff", "--model", "gemma-tiny-fused", "1.19.2", "1.20.0",
                        "--cache-dir", str(cache_dir), "--results-dir", str(tmp_path)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900,
                       env={k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")})
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    (row,) = [line for line in lines if line.startswith(SLN)]
    assert row.split() == [SLN, "in", "an", "fp32", "island", "natively", "in", "fp16"], p.stdout
    assert all(len(line) <= 80 for line in lines[:lines.index(row) + 1]), p.stdout  # the table's lines
