"""Tests of the embedded default model and tokenizer (no onnxruntime needed)."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

from harness.models.embedded import (
    LENGTHS,
    VARIANTS,
    build_model,
    build_tokenizer,
    encode_batch,
    materialize,
    model_bytes,
    repro_texts,
)
from harness.models.embedded import generator as G
from harness.models.embedded import tokenizer as T

FP16_MAX = 65504.0
# Rows of the report's batch that contain the trigger word (character length >= 444).
TRIGGER_ROWS = [i for i, n in enumerate(LENGTHS) if n >= 444]


@pytest.fixture(scope="module")
def batch():
    return encode_batch()


# ---------------------------------------------------------------- structure

def test_variants_api():
    assert set(VARIANTS) == {"gemma-tiny-fused", "gemma-tiny-decomposed"}
    for name, spec in VARIANTS.items():
        assert spec.name == name
    with pytest.raises(KeyError):
        build_model("nope")


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_decomposed_checks_and_infers(dtype):
    m = build_model("gemma-tiny-decomposed", dtype=dtype)
    onnx.checker.check_model(m, full_check=True)
    onnx.shape_inference.infer_shapes(m, strict_mode=True, check_type=True)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_fused_checks_and_infers_with_contrib_schema(dtype):
    # SimplifiedLayerNormalization is an onnxruntime contrib op in the default
    # domain; the onnx checker needs its schema registered first.
    G.register_onnx_schemas()
    m = build_model("gemma-tiny-fused", dtype=dtype)
    onnx.checker.check_model(m, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True, check_type=True)
    vi = {v.name: v for v in inferred.graph.value_info}
    sln = "/model/layers.0/input_layernorm/SimplifiedLayerNormalization_output_0"
    assert vi[sln].type.tensor_type.elem_type == G.DTYPES[dtype][1]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_interface(variant, dtype):
    m = build_model(variant, dtype=dtype)
    assert m.ir_version == G.IR_VERSION and m.opset_import[0].version == G.OPSET
    ins = {i.name: i for i in m.graph.input}
    assert list(ins) == ["input_ids", "attention_mask"]
    for i in ins.values():
        assert i.type.tensor_type.elem_type == onnx.TensorProto.INT64
        assert [d.dim_param for d in i.type.tensor_type.shape.dim] == ["batch", "sequence"]
    outs = {o.name: o for o in m.graph.output}
    assert outs["sentence_embedding"].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert outs["last_hidden_state"].type.tensor_type.elem_type == G.DTYPES[dtype][1]
    # every float initializer in the model's dtype, except the fp32 weights/constants
    # of decomposed norms and of the final (fp32) L2 normalisation
    for t in m.graph.initializer:
        if t.data_type in (onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT):
            if "norm" in t.name:
                continue
            assert t.data_type == G.DTYPES[dtype][1], t.name
    assert len(m.SerializeToString()) < 2_000_000


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_node_names_follow_exporter(variant):
    m = build_model(variant)
    names = {n.name for n in m.graph.node}
    assert "/model/embed_tokens/Gather" in names
    for i in range(G.LAYERS):
        L = f"/model/layers.{i}"
        for suffix in ("/self_attn/q_proj/MatMul", "/self_attn/k_proj/MatMul", "/self_attn/v_proj/MatMul",
                       "/self_attn/o_proj/MatMul", "/self_attn/Softmax", "/mlp/gate_proj/MatMul",
                       "/mlp/up_proj/MatMul", "/mlp/down_proj/MatMul", "/Add", "/Add_1"):
            assert L + suffix in names, L + suffix
        assert any(n.startswith(L + "/input_layernorm/") for n in names)
        assert any(n.startswith(L + "/post_attention_layernorm/") for n in names)
    assert any(n.startswith("/model/norm/") for n in names)
    layer_nodes = [n for n in names if n.startswith("/model/layers.")]
    assert all(re.match(r"^/model/layers\.\d+/", n) for n in layer_nodes)
    # the residual adds: Add after attention, Add_1 after the MLP
    by_name = {n.name: n for n in m.graph.node}
    assert by_name["/model/layers.1/Add"].input[0] == "/model/layers.0/Add_1_output_0"
    assert by_name["/model/layers.1/Add_1"].input[0] == "/model/layers.1/Add_output_0"


def test_norm_forms():
    fused = build_model("gemma-tiny-fused")
    dec = build_model("gemma-tiny-decomposed")
    sln = [n for n in fused.graph.node if n.op_type == "SimplifiedLayerNormalization"]
    assert len(sln) == 2 * G.LAYERS + 1
    for n in sln:
        assert n.domain == ""
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["axis"] == -1 and attrs["epsilon"] == pytest.approx(G.RMS_EPS)
    assert not [n for n in dec.graph.node if n.op_type == "SimplifiedLayerNormalization"]
    ops = [n.op_type for n in dec.graph.node if n.name.startswith("/model/layers.0/input_layernorm/")]
    assert ops == ["Cast", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Mul", "Cast"]


# ---------------------------------------------------------------- determinism

@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_generation_is_deterministic(variant):
    a = model_bytes(variant, seed=0)
    assert a == model_bytes(variant, seed=0)
    assert a != model_bytes(variant, seed=1)
    assert model_bytes(variant, dtype="float32", seed=0) == model_bytes(variant, dtype="float32", seed=0)


def test_fp32_twin_has_the_same_weights():
    m16 = {t.name: onnx.numpy_helper.to_array(t) for t in build_model("gemma-tiny-decomposed").graph.initializer}
    m32 = {t.name: onnx.numpy_helper.to_array(t)
           for t in build_model("gemma-tiny-decomposed", dtype="float32").graph.initializer}
    assert m16.keys() == m32.keys()
    for k in m16:
        assert np.array_equal(m16[k].astype(np.float64), m32[k].astype(np.float64)), k


def test_materialize(tmp_path):
    info = materialize("gemma-tiny-fused", tmp_path / "m")
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["materialized.json", "model.onnx",
                                                                  "model_fp32.onnx", "tokenizer.json"]
    for key, name in (("model", "model.onnx"), ("model_fp32", "model_fp32.onnx"), ("tokenizer", "tokenizer.json")):
        data = info[key].read_bytes()
        assert hashlib.sha256(data).hexdigest() == info["sha256"][name]
    assert info["model"].read_bytes() == model_bytes("gemma-tiny-fused")
    mtime = info["model"].stat().st_mtime_ns
    again = materialize("gemma-tiny-fused", tmp_path / "m")
    assert again["sha256"] == info["sha256"]
    assert info["model"].stat().st_mtime_ns == mtime  # reused, not rewritten
    info["model"].write_bytes(b"tampered")
    assert materialize("gemma-tiny-fused", tmp_path / "m")["model"].read_bytes() == model_bytes("gemma-tiny-fused")
    with pytest.raises(KeyError):
        materialize("nope", tmp_path / "x")


# ---------------------------------------------------------------- tokenizer

def test_tokenizer_is_deterministic():
    assert build_tokenizer().to_str() == build_tokenizer().to_str()
    assert build_tokenizer().get_vocab_size() == T.VOCAB_SIZE <= 256
    assert build_tokenizer().token_to_id("<pad>") == 0


def test_tokenizer_gemma_like():
    enc = build_tokenizer().encode("Lorem ipsum dolor sit amet, lab")
    assert enc.tokens[0] == "<bos>" and enc.tokens[-1] == "<eos>"
    assert "<unk>" not in enc.tokens  # words cut mid-way fall back to characters


def test_repro_batch(batch):
    ids, mask = batch
    assert ids.shape == (20, 512) and mask.shape == (20, 512)
    assert ids.dtype == np.int64 and mask.dtype == np.int64
    lengths = mask.sum(1)
    assert lengths.max() == 512 and int(np.argmax(lengths)) == LENGTHS.index(4621)
    assert (lengths[:, None] > np.arange(512)).astype(int).tolist() == mask.tolist()
    assert (ids[mask == 0] == 0).all()
    assert ids.max() < G.VOCAB_SIZE
    assert (ids != T.UNK_ID).all()
    assert len(repro_texts()) == 20
    trig = build_tokenizer().token_to_id(G.TRIGGER_WORD)
    assert [i for i in range(20) if (ids[i] == trig).any()] == TRIGGER_ROWS


# ---------------------------------------------------------------- numerics (numpy reference)

class _SLN(OpRun):
    op_domain = ""

    def _run(self, x, scale, axis=-1, epsilon=1e-5, stash_type=1):
        x32 = x.astype(np.float32)
        y = x32 / np.sqrt((x32 * x32).mean(axis=-1, keepdims=True) + np.float32(epsilon))
        return ((y * scale.astype(np.float32)).astype(scale.dtype),)


_SLN.__name__ = "SimplifiedLayerNormalization"


def _run(model, ids, mask, intermediate=False):
    ev = ReferenceEvaluator(model, new_ops=[_SLN])
    return ev.run(None, {"input_ids": ids, "attention_mask": mask}, intermediate=intermediate)


def test_fp32_twin_residual_profile(batch):
    """Per-layer max |residual| of the twin: the 7 trigger rows pass 65504, the rest stay far below."""
    ids, mask = batch
    res = _run(build_model("gemma-tiny-decomposed", dtype="float32"), ids, mask, intermediate=True)
    valid = mask.astype(bool)
    other = [i for i in range(20) if i not in TRIGGER_ROWS]
    prof = {}
    for i in range(G.LAYERS):
        for a in ("Add", "Add_1"):
            r = np.abs(res[f"/model/layers.{i}/{a}_output_0"]).max(-1)
            prof[(i, a)] = np.where(valid, r, 0).max(1)
    assert 100 < prof[(0, "Add_1")].max() < 2000                      # hundreds at layer 0
    assert prof[(G.LAYERS - 1, "Add_1")][other].max() > 20000          # tens of thousands at the end
    for key, per_row in prof.items():
        assert per_row[other].max() < 45000, key                       # never marginal
    first = (G.LAYERS - 2, "Add_1")
    assert (prof[first][TRIGGER_ROWS] > 1.05 * FP16_MAX).all()         # overflow if rounded to fp16
    before = [k for k in prof if k < first]
    assert all(prof[k].max() < 0.5 * FP16_MAX for k in before)
    # each addend of the overflowing Add is finite in fp16
    down = res[f"/model/layers.{G.LAYERS - 2}/mlp/down_proj/MatMul_output_0"]
    assert np.abs(down).max() < 0.75 * FP16_MAX
    assert np.isfinite(res["sentence_embedding"]).all()


def test_fused_and_decomposed_twins_agree():
    ids, mask = encode_batch([repro_texts()[i] for i in (0, 4, 10)])
    a = _run(build_model("gemma-tiny-fused", dtype="float32"), ids, mask)[0]
    b = _run(build_model("gemma-tiny-decomposed", dtype="float32"), ids, mask)[0]
    np.testing.assert_allclose(a, b, atol=1e-4)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-4)


def test_all_fp16_arithmetic_gives_nan_exactly_in_trigger_rows():
    """numpy fp16 everywhere (like fp16-native Add on aarch64 from 1.24.1): trigger rows -> NaN."""
    sel = [LENGTHS.index(625), LENGTHS.index(358), LENGTHS.index(77), LENGTHS.index(644)]
    ids, mask = encode_batch([repro_texts()[i] for i in sel])
    with np.errstate(over="ignore", invalid="ignore"):
        out16 = _run(build_model("gemma-tiny-decomposed"), ids, mask)[0]
    out32 = _run(build_model("gemma-tiny-decomposed", dtype="float32"), ids, mask)[0]
    bad = [not np.isfinite(r).all() for r in out16]
    assert bad == [True, False, False, True]
    ok = ~np.array(bad)
    cos = (out16[ok] * out32[ok]).sum(1) / np.linalg.norm(out16[ok], axis=1) / np.linalg.norm(out32[ok], axis=1)
    assert cos.min() > 0.999
