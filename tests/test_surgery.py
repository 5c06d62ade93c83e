"""Graph surgery and trace/diff logic, without onnxruntime.

The optimized graphs here are written by hand after the ones real releases
saved with `optimized_model_filepath` (see harness/surgery.py's docstring).
"""

from __future__ import annotations

import hashlib
import json
import os

import builders
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.external_data_helper import ExternalDataInfo

from harness.explain.diff import diff
from harness.explain.trace import (
    NodeTrace,
    TensorStat,
    TraceResult,
    to_json,
    trace_from_json,
)
from harness.graphs import precision, surgery
from harness.graphs.precision import CAST_PREFIX as P
from harness.report.terminal import diff_table, trace_table
from harness.verdicts import parse_predicate

F16, F32 = TensorProto.FLOAT16, TensorProto.FLOAT


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


# --- intermediates -------------------------------------------------------------------------


def test_intermediates_topological_and_typed():
    m = builders.residual_norm_model()
    # shuffle the node order: intermediates must still come out topologically
    nodes = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(reversed(nodes))
    infos = surgery.intermediates(m)
    assert [i.node for i in infos] == ["/model/layers.0/Add", "/model/layers.1/Add",
                                       "/model/norm/SimplifiedLayerNormalization"]
    assert [i.name for i in infos] == ["/model/layers.0/Add_output_0", "/model/layers.1/Add_output_0", "y"]
    assert all(i.elem_type == F16 and i.dtype == "float16" for i in infos)
    assert infos[0].shape == ("batch", 8) and not infos[0].type_guessed
    assert [i.order for i in infos] == [0, 1, 2]


def test_intermediates_contrib_op_falls_back_to_first_input_type():
    """onnx shape inference does not know SimplifiedLayerNormalization: its output is
    declared with its input's type and shape and inference goes on past it; an op
    nothing knows takes its first input's type."""
    x = helper.make_tensor_value_info("x", F16, ["batch", 4])
    y = helper.make_tensor_value_info("y", F16, None)
    w = numpy_helper.from_array(np.ones(4, np.float16), "w")
    nodes = [
        helper.make_node("SimplifiedLayerNormalization", ["x", "w"], ["n"], name="/norm/SLN", axis=-1),
        helper.make_node("Shape", ["n"], ["s"], name="/shape"),
        helper.make_node("Mul", ["n", "n"], ["m"], name="/mul"),
        helper.make_node("Frobnicate", ["m"], ["f"], name="/frob", domain="com.example"),
        helper.make_node("Identity", ["f"], ["y"], name="/id"),
    ]
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]), ir_version=8,
                          opset_imports=[*builders.OPSET, helper.make_opsetid("com.example", 1)])
    infos = {i.name: i for i in surgery.intermediates(m)}
    assert infos["n"].elem_type == F16 and infos["n"].shape == ("batch", 4)
    assert infos["s"].elem_type == TensorProto.INT64 and infos["s"].shape == (2,)
    assert infos["m"].elem_type == F16 and infos["m"].shape == ("batch", 4) and not infos["m"].type_guessed
    assert infos["f"].elem_type == F16 and infos["f"].type_guessed and infos["f"].shape is None
    # with the batch's dims, shapes come out concrete (for sizing passes)
    concrete = {i.name: i for i in surgery.intermediates(m, {"batch": 3})}
    assert concrete["m"].shape == (3, 4) and concrete["m"].nbytes() == 24


# --- expose --------------------------------------------------------------------------------


def test_expose_adds_outputs_keeps_original_and_links_data(tmp_path, monkeypatch):
    src = tmp_path / "src"
    src.mkdir()
    model_path = builders.external_data_model(src / "m.onnx")
    data = src / "m.onnx_data"
    before = (sha(model_path), sha(data))

    def refuse(*a, **k):
        raise AssertionError("external data must not be loaded")

    monkeypatch.setattr(onnx.external_data_helper, "load_external_data_for_model", refuse)
    monkeypatch.setattr(onnx, "load_external_data_for_model", refuse, raising=False)
    names = ["/model/layers.0/Add_output_0", "/model/layers.1/Add_output_0", "y"]
    out = surgery.expose(model_path, names, tmp_path / "dest")
    monkeypatch.undo()

    assert (sha(model_path), sha(data)) == before
    link = tmp_path / "dest" / "m.onnx_data"
    assert os.path.samefile(link, data) and not link.is_symlink()  # hard link: same inode, no copy
    assert out.parent == tmp_path / "dest" and out != model_path
    copy = onnx.load(str(out), load_external_data=False)
    assert [o.name for o in copy.graph.output] == ["y", "/model/layers.0/Add_output_0", "/model/layers.1/Add_output_0"]
    assert all(o.type.tensor_type.elem_type == F16 for o in copy.graph.output)
    assert copy.graph.initializer[0].data_location == TensorProto.EXTERNAL  # still external
    # the copy's relative location resolves, through the link, to the weight's bytes
    # (onnx's own loader refuses linked data files; onnxruntime reads them)
    info = ExternalDataInfo(copy.graph.initializer[0])
    raw = (out.parent / info.location).read_bytes()[info.offset or 0:][:info.length or None]
    assert (np.frombuffer(raw, np.float16) == 1).all() and len(raw) == 16
    # again into the same dest: the link is reused, the copy replaced
    surgery.expose(model_path, names[:1], tmp_path / "dest")
    assert len(onnx.load(str(out), load_external_data=False).graph.output) == 2


def test_expose_symlink_mode_and_same_dir(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    model_path = builders.external_data_model(src / "m.onnx")
    data = src / "m.onnx_data"
    before = (sha(model_path), sha(data))
    surgery.expose(model_path, ["y"], tmp_path / "d", link="symlink")
    link = tmp_path / "d" / "m.onnx_data"
    assert link.is_symlink() and os.path.samefile(link, data)
    surgery.expose(model_path, ["y"], tmp_path / "d")  # auto replaces our symlink by a hard link
    assert not link.is_symlink() and os.path.samefile(link, data)
    out = surgery.expose(model_path, ["/model/layers.0/Add_output_0"], src)  # next to the original
    assert out == src / "m.exposed.onnx" and not data.is_symlink()
    assert (sha(model_path), sha(data)) == before


def test_expose_unknown_name_and_overwrite_guard(tmp_path):
    path = builders.save(builders.residual_norm_model(), tmp_path / "m.onnx")
    with pytest.raises(KeyError):
        surgery.expose(path, ["nope"], tmp_path / "d")
    with pytest.raises(ValueError):
        surgery.expose(path, ["y"], tmp_path, filename="m.onnx")
    assert onnx.load(str(path)).graph.output[0].name == "y"


# --- chunk ---------------------------------------------------------------------------------


def _info(name, shape, et=F16, order=0):
    return surgery.TensorInfo(name, "/n" + name, "Add", 0, order, et, shape)


def test_chunk_respects_budget_and_order():
    dims = {"batch": 20, "sequence": 512}
    infos = [_info(f"t{i}", ("batch", "sequence", 768), order=i) for i in range(10)]  # 15 MiB each
    size = 20 * 512 * 768 * 2
    assert infos[0].nbytes(dims) == size
    passes = surgery.chunk(infos, 3 * size + 1, dims)
    assert [len(p) for p in passes] == [3, 3, 3, 1]
    assert [i for p in passes for i in p] == infos
    for p in passes:
        assert surgery.pass_bytes(p, dims) <= 3 * size + 1


def test_chunk_unknown_sizes_are_conservative_and_big_tensors_alone():
    dims = {"batch": 2}
    infos = [_info("small", ("batch", 4)), _info("unknown", None), _info("sym", ("batch", "nobody")),
             _info("big", (1000, 1000)), _info("small2", ("batch", 4))]
    # unknown sizes count as the largest known one (2 MB here): each gets a pass of its own
    passes = surgery.chunk(infos, 1 << 20, dims)
    assert [[i.name for i in p] for p in passes] == [["small"], ["unknown"], ["sym"], ["big"], ["small2"]]
    assert [[i.name for i in p] for p in surgery.chunk(infos, 10 << 20, dims)] == [[i.name for i in infos]]
    assert surgery.chunk(infos, 100, dims, unknown_bytes=50)[0][0].name == "small"
    assert surgery.chunk([], 100) == []


def test_dim_values_from_inputs():
    m = builders.residual_norm_model()
    assert surgery.dim_values_from_inputs(m, {"x": (4, 8)}) == {"batch": 4}


# --- layers --------------------------------------------------------------------------------


@pytest.mark.parametrize("name, layer", [
    ("/model/layers.0/Add", 0), ("/model/layers.12/self_attn/q_proj/MatMul", 12),
    ("/model/norm/SimplifiedLayerNormalization", None), ("/model/layers.x/Add", None), ("", None),
    ("/model/embed_tokens/Gather", None),
])
def test_layer_of(name, layer):
    assert surgery.layer_of(name) == layer


def test_residual_nodes():
    x = helper.make_tensor_value_info("x", F16, [2])
    y = helper.make_tensor_value_info("y", F16, [2])
    names = [("Add", "/model/layers.0/Add"), ("Add", "/model/layers.0/self_attn/Add"), ("Add", "/model/layers.0/Add_1"),
             ("Mul", "/model/layers.0/Add_5"), ("Add", "/model/layers.0/mlp/Add_3"), ("Add", "/model/layers.10/Add_2"),
             ("Add", "/model/norm/Add"), ("Add", "/model/layers.1/Add_1/extra")]
    nodes, prev = [], "x"
    for i, (op, name) in enumerate(names):
        nodes.append(helper.make_node(op, [prev, "x"], [f"t{i}"], name=name))
        prev = f"t{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="/out"))
    m = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=builders.OPSET, ir_version=8)
    assert surgery.residual_nodes(m) == {0: ["/model/layers.0/Add", "/model/layers.0/Add_1"],
                                         10: ["/model/layers.10/Add_2"]}
    assert surgery.residual_nodes(surgery.intermediates(m)) == surgery.residual_nodes(m)


# --- precision map on hand-built optimized graphs --------------------------------------------


def _opt_model(nodes, inputs, outputs, inits=()):
    g = helper.make_graph(nodes, "opt", [helper.make_tensor_value_info(n, t, None) for n, t in inputs],
                          [helper.make_tensor_value_info(n, t, None) for n, t in outputs], list(inits))
    return helper.make_model(g, opset_imports=builders.OPSET, ir_version=8)


def _cast(src, to, out=None, name=None):
    out = out or P + src
    return helper.make_node("Cast", [src], [out], name=name or out, to=to)


W16 = numpy_helper.from_array(np.ones(8, np.float16), "/model/norm/weight")


def island_1_19_2():
    """x86_64 1.19.2, residual_norm_model: one fp32 island from x to y."""
    a0, a1 = "/model/layers.0/Add_output_0", "/model/layers.1/Add_output_0"
    return _opt_model([
        _cast("/model/norm/weight", F32), _cast("x", F32),
        helper.make_node("Add", [P + "x", P + "x"], [P + a0], name="/model/layers.0/Add"),
        helper.make_node("Add", [P + a0, P + "x"], [P + a1], name="/model/layers.1/Add"),
        helper.make_node("SimplifiedLayerNormalization", [P + a1, P + "/model/norm/weight"], [P + "y"],
                         name="/model/norm/SimplifiedLayerNormalization"),
        _cast(P + "y", F16, out="y", name=P + "y"),
    ], [("x", F16)], [("y", F16)], [W16])


def native_sln_1_20_0():
    """x86_64 1.20.0: the Adds are an island cast back to fp16 for the native norm."""
    a0, a1 = "/model/layers.0/Add_output_0", "/model/layers.1/Add_output_0"
    return _opt_model([
        _cast("x", F32),
        helper.make_node("Add", [P + "x", P + "x"], [P + a0], name="/model/layers.0/Add"),
        helper.make_node("Add", [P + a0, P + "x"], [P + a1], name="/model/layers.1/Add"),
        _cast(P + a1, F16, out=a1, name=P + a1),
        helper.make_node("SimplifiedLayerNormalization", [a1, "/model/norm/weight"], ["y"],
                         name="/model/norm/SimplifiedLayerNormalization"),
    ], [("x", F16)], [("y", F16)], [W16])


def test_precision_map_fp32_island_then_native_fp16():
    orig = builders.residual_norm_model()
    sln = "/model/norm/SimplifiedLayerNormalization"
    before = precision.precision_map(orig, island_1_19_2())
    after = precision.precision_map(orig, native_sln_1_20_0())
    assert list(before) == ["/model/layers.0/Add", "/model/layers.1/Add", sln]
    assert {k: v.precision for k, v in before.items()} == dict.fromkeys(before, "fp32-island")
    assert before[sln].casts == (P + "/model/norm/weight", P + "y") and before[sln].ran_as == "SimplifiedLayerNormalization"
    assert after[sln].precision == "fp16" and after["/model/layers.1/Add"].precision == "fp32-island"
    assert after["/model/layers.1/Add"].casts == (P + "x", P + "/model/layers.1/Add_output_0")
    vis_before = precision.tensor_visibility(orig, island_1_19_2())
    vis_after = precision.tensor_visibility(orig, native_sln_1_20_0())
    assert vis_before == {"/model/layers.0/Add_output_0": "observed-only", "/model/layers.1/Add_output_0": "observed-only",
                          "y": "seen"}
    assert vis_after["/model/layers.1/Add_output_0"] == "seen"  # cast back to fp16 for the norm: really rounded


def test_precision_map_native_add_and_folded_initializer():
    """aarch64: 1.23.2 island with the scalar folded to FusedBack_quarter; 1.24.1 native fp16."""
    orig = builders.residual_overflow_model()
    a0, a1, mul = "/model/layers.0/Add_output_0", "/model/layers.1/Add_output_0", "/model/scale/Mul_output_0"
    island = _opt_model([
        _cast("x", F32),
        helper.make_node("Add", [P + "x", P + "x"], [P + a0], name="/model/layers.0/Add"),
        helper.make_node("Add", [P + a0, P + "x"], [P + a1], name="/model/layers.1/Add"),
        helper.make_node("Mul", [P + a1, "FusedBack_quarter"], [P + mul], name="/model/scale/Mul"),
        helper.make_node("Div", [P + mul, P + mul], [P + "y"], name="/model/norm/Div"),
        _cast(P + "y", F16, out="y", name=P + "y"),
    ], [("x", F16)], [("y", F16)], [numpy_helper.from_array(np.array(0.25, np.float32), "FusedBack_quarter")])
    native = _opt_model([
        helper.make_node("Add", ["x", "x"], [a0], name="/model/layers.0/Add"),
        helper.make_node("Add", [a0, "x"], [a1], name="/model/layers.1/Add"),
        helper.make_node("Mul", [a1, "quarter"], [mul], name="/model/scale/Mul"),
        helper.make_node("Div", [mul, mul], ["y"], name="/model/norm/Div"),
    ], [("x", F16)], [("y", F16)], [numpy_helper.from_array(np.array(0.25, np.float16), "quarter")])
    pi, pn = precision.precision_map(orig, island), precision.precision_map(orig, native)
    assert {v.precision for v in pi.values()} == {"fp32-island"}
    assert pi["/model/scale/Mul"].casts == ()  # fed by the folded fp32 initializer and the island
    assert {v.precision for v in pn.values()} == {"fp16"}
    assert all(v.casts == () for v in pn.values())
    assert set(precision.tensor_visibility(orig, native).values()) == {"seen"}


def rms_model():
    """Residual Add, torch-style decomposed RMSNorm in fp32, residual Add, and a folded constant."""
    x = helper.make_tensor_value_info("x", F16, ["batch", 8])
    y = helper.make_tensor_value_info("y", F16, ["batch", 8])
    p = "/model/layers.0/"
    n = helper.make_node
    inits = [numpy_helper.from_array(np.ones(8, np.float32), p + "norm/w"),
             numpy_helper.from_array(np.array(2.0, np.float32), "two"),
             numpy_helper.from_array(np.array(1e-6, np.float32), "eps"),
             numpy_helper.from_array(np.ones(8, np.float16), "c")]
    nodes = [
        n("Add", ["x", "x"], [p + "Add_output_0"], name=p + "Add"),
        n("Cast", [p + "Add_output_0"], [p + "norm/Cast_output_0"], name=p + "norm/Cast", to=1),
        n("Pow", [p + "norm/Cast_output_0", "two"], [p + "norm/Pow_output_0"], name=p + "norm/Pow"),
        n("ReduceMean", [p + "norm/Pow_output_0"], [p + "norm/ReduceMean_output_0"], name=p + "norm/ReduceMean",
          axes=[-1], keepdims=1),
        n("Add", [p + "norm/ReduceMean_output_0", "eps"], [p + "norm/Add_output_0"], name=p + "norm/Add"),
        n("Sqrt", [p + "norm/Add_output_0"], [p + "norm/Sqrt_output_0"], name=p + "norm/Sqrt"),
        n("Div", [p + "norm/Cast_output_0", p + "norm/Sqrt_output_0"], [p + "norm/Div_output_0"], name=p + "norm/Div"),
        n("Mul", [p + "norm/Div_output_0", p + "norm/w"], [p + "norm/Mul_output_0"], name=p + "norm/Mul"),
        n("Cast", [p + "norm/Mul_output_0"], [p + "norm/Cast_1_output_0"], name=p + "norm/Cast_1", to=10),
        n("Neg", ["c"], ["/model/const/Neg_output_0"], name="/model/const/Neg"),
        n("Add", [p + "norm/Cast_1_output_0", p + "Add_output_0"], [p + "Add_1_output_0"], name=p + "Add_1"),
        n("Mul", [p + "Add_1_output_0", "/model/const/Neg_output_0"], ["y"], name="/model/out/Mul"),
    ]
    g = helper.make_graph(nodes, "rms", [x], [y], inits)
    return helper.make_model(g, opset_imports=builders.OPSET, ir_version=8)


def test_precision_map_fused_removed_folded():
    """As x86_64 1.19.2 to 1.22.1 saved it: the decomposed norm becomes one
    SimplifiedLayerNormalization named `<last Mul>/SimplifiedLayerNormFusion/`."""
    orig = rms_model()
    p = "/model/layers.0/"
    fused = p + "norm/Mul/SimplifiedLayerNormFusion/"
    opt = _opt_model([
        _cast("x", F32), _cast("/model/const/Neg_output_0", F32),
        helper.make_node("Add", [P + "x", P + "x"], [P + p + "Add_output_0"], name=p + "Add"),
        helper.make_node("SimplifiedLayerNormalization", [P + p + "Add_output_0", p + "norm/w"], [p + "norm/Mul_output_0"],
                         name=fused, axis=-1, epsilon=1e-6),
        helper.make_node("Add", [p + "norm/Mul_output_0", P + p + "Add_output_0"], [P + p + "Add_1_output_0"], name=p + "Add_1"),
        helper.make_node("Mul", [P + p + "Add_1_output_0", P + "/model/const/Neg_output_0"], [P + "y"], name="/model/out/Mul"),
        _cast(P + "y", F16, out="y", name=P + "y"),
    ], [("x", F16)], [("y", F16)],
        [numpy_helper.from_array(np.ones(8, np.float32), p + "norm/w"),
         numpy_helper.from_array(-np.ones(8, np.float16), "/model/const/Neg_output_0")])
    pm = precision.precision_map(orig, opt)
    for name in ("norm/Cast", "norm/Pow", "norm/ReduceMean", "norm/Add", "norm/Sqrt", "norm/Div", "norm/Mul"):
        np_ = pm[p + name]
        assert (np_.precision, np_.ran_as, np_.optimized_node) == ("fused", "SimplifiedLayerNormalization", fused), name
        assert np_.fused_precision == "fp32-island"
    assert pm[p + "norm/Cast_1"].precision == "removed" and pm[p + "norm/Cast_1"].optimized_node == p + "Add_1"
    assert pm["/model/const/Neg"].precision == "folded"
    assert pm[p + "Add_1"].precision == "fp32-island"
    assert pm["/model/out/Mul"].precision == "fp32-island"
    vis = precision.tensor_visibility(orig, opt)
    assert vis[p + "norm/Mul_output_0"] == "seen" and vis[p + "norm/Pow_output_0"] == "observed-only"


# --- trace results: diff, JSON, rendering (hand-built, no probes) -----------------------------


def _trace(version, verdict, nan_rows, precisions, stats):
    """stats: node -> (tensor, inf, max_abs, visibility)."""
    names = ["/model/layers.0/Add", "/model/layers.1/Add", "/model/norm/SimplifiedLayerNormalization"]
    ins = [["x", "x"], ["/model/layers.0/Add_output_0", "x"], ["/model/layers.1/Add_output_0", "/model/norm/weight"]]
    prec = {n: precision.NodePrecision(n, n.rsplit("/", 1)[1].split("_")[0], p, n.rsplit("/", 1)[1]) for n, p in zip(names, precisions)}
    nodes = []
    for n, i in zip(names, ins):
        tensor, inf, mx, vis, nan = stats[n]
        ts = TensorStat(tensor, "float16", [4, 8], 1.0, mx, mx, nan, inf, 4, 2 if nan else 0, 2 if inf else 0,
                        f"{version}{tensor}{inf}{nan}", mx / 65504, vis, "model" if tensor == "y" else "exposed")
        nodes.append(NodeTrace(n, prec[n].op_type, surgery.layer_of(n), i, [ts], prec[n]))
    r = TraceResult(version, {}, "m.onnx", "b.npz", "ran", verdict, "", 4, nan_rows, 0, [], nodes, precision=prec)
    from harness.explain.trace import _summarize
    _summarize(r, builders.residual_norm_model())
    return r


def test_diff_names_norm_that_became_native():
    a = _trace("1.19.2", "good", 0, ["fp32-island"] * 3, {
        "/model/layers.0/Add": ("/model/layers.0/Add_output_0", 0, 60000.0, "observed-only", 0),
        "/model/layers.1/Add": ("/model/layers.1/Add_output_0", 16, 3.0, "observed-only", 0),
        "/model/norm/SimplifiedLayerNormalization": ("y", 0, 1.0, "seen", 0)})
    b = _trace("1.20.0", "bad", 2, ["fp32-island", "fp32-island", "fp16"], {
        "/model/layers.0/Add": ("/model/layers.0/Add_output_0", 0, 60000.0, "observed-only", 0),
        "/model/layers.1/Add": ("/model/layers.1/Add_output_0", 16, 3.0, "seen", 0),
        "/model/norm/SimplifiedLayerNormalization": ("y", 0, 1.0, "seen", 16)})
    assert a.first_nonfinite is None and a.first_nonfinite_any == "/model/layers.1/Add"
    assert b.first_nonfinite == "/model/layers.1/Add"
    assert [r["layer"] for r in b.residual] == [0, 1] and b.residual[1]["nonfinite"]
    assert "/model/layers.0/Add_output_0" in b.above_90
    d = diff(a, b)
    assert [c["node"] for c in d.precision_changes] == ["/model/norm/SimplifiedLayerNormalization"]
    assert d.first_nonfinite_flip["node"] == "/model/layers.1/Add"
    assert d.first_nonfinite_flip_any["node"] == "/model/norm/SimplifiedLayerNormalization"
    assert d.suspect == "/model/norm/SimplifiedLayerNormalization"
    assert "fp32 island on 1.19.2 and natively in fp16 on 1.20.0" in d.explanation
    # JSON round trip, renderers
    doc = json.loads(json.dumps(to_json(b)))
    assert doc["first_nonfinite"] == "/model/layers.1/Add" and doc["first_nonfinite_among"] == "seen"
    again = trace_from_json(doc)
    assert diff(a, again).explanation == d.explanation
    json.dumps(to_json(d))
    from rich.console import Console

    console = Console(width=160, record=True)
    console.print(trace_table(b))
    console.print(diff_table(d))
    text = console.export_text()
    assert "SimplifiedLayerNormalization" in text and "natively in fp16" in text


def test_diff_same_precision_is_kernel_change():
    a = _trace("1", "good", 0, ["fp16"] * 3, {
        "/model/layers.0/Add": ("/model/layers.0/Add_output_0", 0, 60000.0, "seen", 0),
        "/model/layers.1/Add": ("/model/layers.1/Add_output_0", 0, 65000.0, "seen", 0),
        "/model/norm/SimplifiedLayerNormalization": ("y", 0, 1.0, "seen", 0)})
    b = _trace("2", "bad", 2, ["fp16"] * 3, {
        "/model/layers.0/Add": ("/model/layers.0/Add_output_0", 0, 60000.0, "seen", 0),
        "/model/layers.1/Add": ("/model/layers.1/Add_output_0", 16, 3.0, "seen", 0),
        "/model/norm/SimplifiedLayerNormalization": ("y", 0, 1.0, "seen", 16)})
    d = diff(a, b)
    assert d.precision_changes == [] and d.suspect == "/model/layers.1/Add"
    assert "same precision" in d.explanation


def test_headroom_chart(tmp_path):
    pytest.importorskip("matplotlib")
    from harness.explain.chart import headroom_chart

    a = _trace("1.20.0", "bad", 2, ["fp16"] * 3, {
        "/model/layers.0/Add": ("/model/layers.0/Add_output_0", 0, 60000.0, "seen", 0),
        "/model/layers.1/Add": ("/model/layers.1/Add_output_0", 16, 3.0, "seen", 0),
        "/model/norm/SimplifiedLayerNormalization": ("y", 0, 1.0, "seen", 16)})
    out = headroom_chart([a], tmp_path / "h.svg")
    assert out.read_text().lstrip().startswith("<?xml")


def test_diff_of_a_release_that_does_not_load_shows_its_error():
    stats = {"/model/layers.0/Add": ("/model/layers.0/Add_output_0", 0, 1.0, "seen", 0),
             "/model/layers.1/Add": ("/model/layers.1/Add_output_0", 0, 1.0, "seen", 0),
             "/model/norm/SimplifiedLayerNormalization": ("y", 0, 1.0, "seen", 0)}
    a = _trace("1.19.2", "good", 0, ["fp16"] * 3, stats)
    b = _trace("1.20.0", "error", 0, ["fp16"] * 3, stats)
    # what a trace of a release that cannot load holds: its nodes, no precision map, no tensor it could expose
    b.status, b.reason, b.precision, b.rows = "error", "[ONNXRuntimeError] : 1 : FAIL : Load model failed", {}, 0
    for n in b.nodes:
        for t in n.outputs:
            t.source = "unavailable"
    d = diff(a, b)
    assert d.precision_changes == [] and d.suspect is None
    assert d.failed == [{"version": "1.20.0", "status": "error", "reason": b.reason}]
    assert "1.20.0 does not run the model (error): [ONNXRuntimeError] : 1 : FAIL : Load model failed" in d.explanation
    from rich.console import Console

    console = Console(width=160, record=True)
    console.print(diff_table(d))
    text = console.export_text()
    assert "Load model failed" in text and "unknown precision" not in text
    both = diff(b, b)
    assert "Neither release runs the model" in both.explanation


def _chain(version, verdict, values, compared=None, judged_by=None):
    """A same-precision chain Rsqrt -> Mul -> Add (fp32), `values`: node -> (max_abs, sha) of its output."""
    names = [("/norm/Rsqrt", "Rsqrt"), ("/norm/Mul", "Mul"), ("/out/Add", "Add")]
    nodes, prev = [], "x"
    prec = {n: precision.NodePrecision(n, op, "fp32", n) for n, op in names}
    for (n, op), tensor in zip(names, ("r", "m", "y")):
        mx, sha = values[n]
        ts = TensorStat(tensor, "float32", [4, 8], -mx, mx, mx, 0, 0, 4, 0, 0, sha, None, "seen",
                        "model" if tensor == "y" else "exposed")
        nodes.append(NodeTrace(n, op, None, [prev], [ts], prec[n]))
        prev = tensor
    return TraceResult(version, {}, "m.onnx", "b.npz", "ran", verdict, "", 4, 0, 0, [], nodes, precision=prec,
                       compared=compared or {}, judged_by=judged_by or {})


def test_the_first_node_that_differs_is_the_first_not_bit_identical_whatever_its_size():
    """The first bit-exact change is an Rsqrt's, far within tolerance; a later Mul parts beyond it. The sentence
    names the Rsqrt, says how it was chosen and how the tolerance reads it, and names the Mul as the first
    beyond: diff's bit-exact line and its prose name one node."""
    a = _chain("1.19.2", "good", {"/norm/Rsqrt": (1.0, "r1"), "/norm/Mul": (2.0, "m1"), "/out/Add": (3.0, "y1")})
    b = _chain("1.20.0", "good", {"/norm/Rsqrt": (1.0000001, "r2"), "/norm/Mul": (2.5, "m2"), "/out/Add": (3.5, "y2")})
    d = diff(a, b)
    assert d.first_bits_differ["node"] == d.first_differs["node"] == d.suspect == "/norm/Rsqrt"
    assert "`/norm/Rsqrt` (Rsqrt) is the first node whose output differs" in d.explanation
    assert "not bit-identical" in d.explanation and "within the run's tolerance (nan-or-inf" in d.explanation
    assert "`/norm/Mul`" not in d.explanation.split("first node whose output differs")[0]
    d = diff(a, b, parse_predicate("rel-diff>0.01"))
    assert d.first_differs["node"] == "/norm/Rsqrt" and not d.first_differs["beyond_tolerance"]
    assert d.first_divergent["node"] == "/norm/Mul"
    assert "within the run's tolerance (rel-diff>0.01). The first beyond it is `/norm/Mul`'s" in d.explanation
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(diff_table(d))
    text = console.export_text()
    assert "first output not bit-identical (the first node that differs): /norm/Rsqrt" in text


def test_outputs_a_tight_question_judges_bad_are_never_said_to_agree():
    """Outputs 1.2e-6 apart, which rel-diff>1e-6 judges bad: the diff names where they part, beyond the run's
    tolerance, and says each verdict as the question gave it, with what it measured."""
    same = {"/norm/Rsqrt": (1.0, "r"), "/norm/Mul": (2.0, "m")}
    a = _chain("1.19.2", "good", {**same, "/out/Add": (3.0, "y1")}, {"reference": "release:1.19.2",
               "rel_diff_max": 0.0}, {"predicate": "rel-diff>1e-06", "reference": "release:1.19.2"})
    b = _chain("1.20.0", "bad", {**same, "/out/Add": (3.0000036, "y2")}, {"reference": "release:1.19.2",
               "rel_diff_max": 1.2e-6}, {"predicate": "rel-diff>1e-06", "reference": "release:1.19.2"})
    d = diff(a, b, parse_predicate("rel-diff>1e-6"))
    assert "agree" not in d.explanation
    assert d.first_differs["node"] == "/out/Add" and d.first_differs["beyond_tolerance"]
    assert "beyond the run's tolerance (rel-diff>1e-06)" in d.explanation
    assert "1.20.0: bad under rel-diff>1e-06 (0 NaN rows of 4, max relative difference 1.2e-06)" in d.explanation


def test_a_value_the_trace_rounds_to_inf_on_the_good_release_is_said_in_a_sentence_that_says_what_happened():
    """gemma-tiny-fused 1.19.2 -> 1.20.0: the norm's input is Inf in 1.19.2's trace too (tracing reads it out in
    fp16), though 1.19.2 kept it in fp32. The explanation once said "(rounded to fp16 only for the trace, it reads
    Inf on 1.19.2 too)": it says which release rounds the tensor, and why the trace shows Inf on both."""
    a = _trace("1.19.2", "good", 0, ["fp32-island"] * 3, {
        "/model/layers.0/Add": ("/model/layers.0/Add_output_0", 0, 60000.0, "observed-only", 0),
        "/model/layers.1/Add": ("/model/layers.1/Add_output_0", 16, 3.0, "observed-only", 0),
        "/model/norm/SimplifiedLayerNormalization": ("y", 0, 1.0, "seen", 0)})
    b = _trace("1.20.0", "bad", 2, ["fp32-island", "fp32-island", "fp16"], {
        "/model/layers.0/Add": ("/model/layers.0/Add_output_0", 0, 60000.0, "observed-only", 0),
        "/model/layers.1/Add": ("/model/layers.1/Add_output_0", 16, 3.0, "seen", 0),
        "/model/norm/SimplifiedLayerNormalization": ("y", 0, 1.0, "seen", 16)})
    text = diff(a, b).explanation
    assert "only for the trace" not in text
    assert ("Its input `/model/layers.1/Add_output_0` (from `/model/layers.1/Add`) is beyond the fp16 range (65504): "
            "on 1.19.2 it stays in fp32 for `/model/norm/SimplifiedLayerNormalization`; on 1.20.0 it is rounded to "
            "fp16 for `/model/norm/SimplifiedLayerNormalization`, becomes Inf, and the rows turn NaN.") in text
    assert ("The trace reads `/model/layers.1/Add_output_0` as Inf on 1.19.2 too, only because tracing reads it out "
            "in fp16: 1.19.2's own run never rounds it.") in text


def test_a_first_difference_the_statistics_do_not_show_is_not_called_a_difference_of_0():
    """silero-vad 1.20.1 -> 1.21.0 under abs-diff>0: `If_0`'s output changed bits with the same min, max and
    largest |x|. The sentence once said it differs "with a relative difference of 0 in its statistics, within the
    run's tolerance"; it says the statistics are the same and the bits moved by less than they show. A difference
    the statistics do show is measured as the tolerance reads it (absolute for abs-diff)."""
    a = _chain("1.20.1", "good", {"/norm/Rsqrt": (1.0, "r1"), "/norm/Mul": (2.0, "m1"), "/out/Add": (3.0, "y1")})
    b = _chain("1.21.0", "bad", {"/norm/Rsqrt": (1.0, "r2"), "/norm/Mul": (2.0, "m2"), "/out/Add": (3.0, "y2")})
    text = diff(a, b, parse_predicate("abs-diff>0")).explanation
    assert "difference of 0" not in text and "within the run's tolerance" not in text
    assert ("whose traced output `r` is not bit-identical on 1.20.1 and 1.21.0 (sha256 of each tensor); its "
            "statistics (min, max, largest |x|) are the same on both releases: it moved by less than they show. No "
            "traced output parts beyond the run's tolerance (abs-diff>0).") in text
    b = _chain("1.21.0", "bad", {"/norm/Rsqrt": (1.5, "r2"), "/norm/Mul": (2.0, "m2"), "/out/Add": (3.0, "y2")})
    text = diff(a, b, parse_predicate("abs-diff>1")).explanation
    assert "with an absolute difference of 0.5 in its statistics (min, max, largest |x|), within the run's " \
           "tolerance (abs-diff>1)." in text


def test_a_fused_island_cast_back_to_fp16_is_the_fusion_not_a_removal():
    """residual_stack on x86_64 1.20.0: the last layer's MatMul and Add are fused into a Gemm in an fp32 island, and
    an inserted Cast turns its output back into the fp16 `/Add_output_0` the now native norm reads. The walk from
    the Add once skipped that Cast and landed on the norm: "removed" into it, as if the Add never ran."""
    a = "/model/layers.39/Add_output_0"
    x = helper.make_tensor_value_info("x", F16, ["batch", 8])
    y = helper.make_tensor_value_info("y", F16, ["batch", 8])
    w = numpy_helper.from_array(np.ones((8, 8), np.float16), "w")
    orig = helper.make_model(helper.make_graph([
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="/model/layers.39/mlp/down/MatMul"),
        helper.make_node("Add", ["mm", "x"], [a], name="/model/layers.39/Add"),
        helper.make_node("Identity", [a], ["i"], name="/model/layers.39/Identity"),
        helper.make_node("SimplifiedLayerNormalization", ["i", "/model/norm/weight"], ["y"],
                         name="/model/norm/SimplifiedLayerNormalization"),
    ], "stack", [x], [y], [w, W16]), opset_imports=builders.OPSET, ir_version=8)
    gemm = "/model/layers.39/mlp/down/MatMul/MatMulAddFusion/"
    opt = _opt_model([
        _cast("x", F32), _cast("w", F32),
        helper.make_node("Gemm", [P + "x", P + "w", P + "x"], [P + a], name=gemm),
        _cast(P + a, F16, out=a, name=P + a),
        helper.make_node("SimplifiedLayerNormalization", [a, "/model/norm/weight"], ["y"],
                         name="/model/norm/SimplifiedLayerNormalization"),
    ], [("x", F16)], [("y", F16)], [w, W16])
    pm = precision.precision_map(orig, opt)
    for node in ("/model/layers.39/mlp/down/MatMul", "/model/layers.39/Add"):
        assert (pm[node].precision, pm[node].ran_as, pm[node].optimized_node, pm[node].fused_precision) == \
            ("fused", "Gemm", gemm, "fp32-island"), node
    ident = pm["/model/layers.39/Identity"]
    assert (ident.precision, ident.optimized_node) == ("removed", "/model/norm/SimplifiedLayerNormalization")
    assert pm["/model/norm/SimplifiedLayerNormalization"].precision == "fp16"
