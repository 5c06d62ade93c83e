"""Generator of the embedded default model: a tiny EmbeddingGemma-shaped fp16 model.

Built with ``onnx.helper`` only (no torch, no download).  Same seed -> the same
model bytes.  The model reproduces, offline and in milliseconds, the two real
onnxruntime regressions described in ``shared/PLATFORM.md``.

Shape
-----
``input_ids``, ``attention_mask``: int64 ``[batch, sequence]`` (dynamic).
``sentence_embedding``: **float32** ``[batch, 64]`` (the fp16 graph casts to
float before the L2 normalisation, so consumers always get float32).
``last_hidden_state``: model dtype (fp16) ``[batch, sequence, 64]``, the final
norm's output (see the fused variant below for why it matters).

Onnxruntime facts measured while building this (x86_64): an fp16 ``Clip`` with
only a ``min`` input returns all zeros on 1.19.0/1.19.2 (fine from 1.20.0), so
the normalisation is done in float32; keep that in mind for real models.

Token embedding (Gather, vocab 256) times sqrt(hidden) = 8, then ``LAYERS`` (4)
decoder-style layers, hidden 64, bidirectional attention with one head of dim 16
(``HEADS``/``KV_HEADS``; grouped-query broadcasting works for HEADS > KV_HEADS,
but every head costs batch*seq^2 softmax work: 20*512^2 per layer for the
report's batch, the dominant cost natively and under QEMU), rotary position
embedding built from Sin/Cos tables (Slice by sequence length), an additive
padding bias of -10000 on masked keys, Softmax in float32 like HF eager
attention (Cast, Softmax, Cast back); residual ``Add``; gated MLP of width 128
with tanh-GELU (``gelu(gate) * up``, ``down``); residual ``Add_1``; final
RMSNorm (its output is also the graph output ``last_hidden_state``), mean
pooling over the mask, two dense projections (64 -> 128 -> 64, no activation,
like sentence-transformers' Dense modules), Cast to float32, L2 normalisation
(ReduceL2, Clip, Div) in float32.

Residual growth (the overflow mechanism)
----------------------------------------
Two "massive activation" channels, as real LLMs have, are written by one
designed MLP neuron each; everything else is random (numpy ``default_rng(seed)``)
and never writes into those two channels (their columns of ``o_proj`` and
``down_proj`` are zero), so their size is set by construction and does not
depend on the seed:

* the *background* channel (``BG_CHANNEL``) grows in every token and every row:
  ~500 after layer 0, ~4,500 after layer 1, ~20,500 after layer 2, ~40,500
  after layer 3.  Each layer adds at most ``BG_GAIN[l]``, because the neuron
  reads the *normalized* input (|x̂| <= 8), so no row of any batch can pass
  ~40,600 through it.
* the *trigger* channel (``TRIGGER_CHANNEL``) is non-zero only at positions of
  the trigger word ``laborum`` (the last word of the Lorem ipsum text).  Its
  per-layer gain is ``TRIGGER_GAIN[l]``: ~1,100 after layer 0, ~27,200 after
  layer 1, then the layer-2 MLP adds ~44,000 (both fp16 tensors are finite)
  and the residual ``/model/layers.2/Add_1`` is ~71,200 in exact arithmetic,
  ~9% above the fp16 maximum 65504; layer 3 carries it to ~79,200.

In the report's batch 7 of 20 rows (character lengths >= 444: 625, 644, 873,
926, 1164, 1670, 4621) contain ``laborum``; they are the rows that turn NaN.
The other 13 rows peak at ~41,000, far from 65504 whatever the rounding.

A residual above 65504 is harmless as long as no kernel rounds it to fp16:
onnxruntime runs fp16 ops that have no fp16 CPU kernel in fp32 "islands"
(Casts inserted around them, back-to-back fp32->fp16->fp32 pairs removed), so
the residual chain ``Add -> Add`` and ``Add -> Cast(to float)`` stays in fp32.

Variants
--------
``gemma-tiny-decomposed``: every RMSNorm is written as torch exports Gemma's
(Cast to float, Pow 2, ReduceMean, Add eps, Sqrt, Div 1/x, Mul, Mul weight,
Cast back to fp16).  onnxruntime fuses that into a SimplifiedLayerNormalization
fed in fp32, or leaves the fp32 ops, so the norm never rounds its input.  The
only fp16 consumers of the residual stream are the residual ``Add`` nodes:

* x86_64, every release: Add has no fp16 kernel -> fp32 island -> finite.
* aarch64 with asimdhp up to 1.23.2: same -> finite.
* aarch64 with asimdhp from 1.24.1: Add runs natively in fp16, so
  ``/model/layers.2/Add_1`` rounds ~71,200 to +Inf in the 7 trigger rows; the
  next norm computes Inf/Inf = NaN -> 7 NaN rows.

``gemma-tiny-fused``: the norms are ``SimplifiedLayerNormalization`` (default
domain, onnxruntime contrib schema; axis=-1, epsilon, stash_type=1) fed the
fp16 residual directly:

* x86_64 up to 1.19.2: no fp16 kernel for it -> fp32 island with the Adds ->
  finite.
* x86_64 from 1.20.0: native fp16 kernel.  But onnxruntime's cast insertion
  also moves an fp16 node to fp32 when it is "isolated" (every producer and
  consumer runs in fp32): the layer norms, which feed only MatMuls (no fp16
  MatMul kernel on x86_64), keep running in fp32 islands in every release
  (measured).  The final norm is different: its output is the graph output
  ``last_hidden_state``, so it runs in fp16 and its input, the residual after
  ``/model/layers.3/Add_1`` (~79,200), is rounded to fp16 = +Inf -> NaN in the
  7 rows, with default options and with ORT_DISABLE_ALL.  (Were
  ``Add + SimplifiedLayerNormalization`` fused into
  SkipSimplifiedLayerNormalization, which adds in fp32, the residual entering
  that last Add is already ~71,200, which is why the overflow sits one layer
  before the end.)

The float32 twin (``dtype="float32"``) is the same graph and the same weights
(every fp16 weight and constant converted exactly to fp32); its outputs are
finite in all rows.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from .graph import ExternalData, _Graph, sentence_embedding_head  # noqa: F401  (ExternalData: the big model's writer)
from .names import DEFAULT_SEED
from .tokenizer import VOCAB_SIZE, build_tokenizer

HIDDEN = 64
LAYERS = 4
HEADS = 1
KV_HEADS = 1
HEAD_DIM = 16
INTERMEDIATE = 128
DENSE = 128
MAX_POSITIONS = 2048
ROPE_THETA = 10000.0
RMS_EPS = 1e-6
MASK_BIAS = -10000.0
EMBED_SCALE = math.sqrt(HIDDEN)  # 8.0, exact in fp16

TRIGGER_WORD = "laborum"
TRIGGER_CHANNEL = 11
BG_CHANNEL = 42
TRIGGER_EMBED = 200.0   # trigger channel of the trigger token after the x8 scale
BG_EMBED = 60.0         # background channel of every token after the x8 scale (x0.75..1.25)
# Largest value each designed neuron can add to its channel, per layer.
TRIGGER_GAIN = (1000.0, 26500.0, 44000.0, 8000.0)
BG_GAIN = (500.0, 4000.0, 16000.0, 20000.0)
NEURON_GATE = 2.0       # gate pre-activation = 2 * x̂  (<= 16, so x^3 stays < 65504)
# Scale of the random (seeded) parts of o_proj / down_proj, per layer.
BRANCH_SCALE = (0.25, 0.25, 0.25, 0.25)
OPSET = 18
IR_VERSION = 8  # onnxruntime 1.19 accepts IR <= 10

DTYPES = {"float16": (np.float16, TensorProto.FLOAT16),
          "float32": (np.float32, TensorProto.FLOAT)}


@dataclasses.dataclass(frozen=True)
class VariantSpec:
    name: str
    norm: str  # "decomposed" | "fused"
    description: str
    # Expected behaviour of the fp16 model on the report's batch (7 trigger rows).
    expected: str


VARIANTS: dict[str, VariantSpec] = {
    "gemma-tiny-fused": VariantSpec(
        name="gemma-tiny-fused",
        norm="fused",
        description="RMSNorm as SimplifiedLayerNormalization (default domain) fed fp16",
        expected="x86_64: finite on 1.19.0/1.19.2, 7/20 NaN rows from 1.20.0",
    ),
    "gemma-tiny-decomposed": VariantSpec(
        name="gemma-tiny-decomposed",
        norm="decomposed",
        description="RMSNorm decomposed as torch exports it (Cast to float ... Cast to fp16)",
        expected="x86_64: finite in every release; aarch64+asimdhp: finite up to 1.23.2, "
                 "7/20 NaN rows from 1.24.1",
    ),
}



# ---------------------------------------------------------------- weights

def _weights(seed: int) -> dict[str, np.ndarray]:
    """All weights as float16 arrays (the fp32 twin converts them exactly)."""
    rng = np.random.default_rng(seed)
    f16 = np.float16
    w: dict[str, np.ndarray] = {}
    D, I = HIDDEN, INTERMEDIATE
    special = (TRIGGER_CHANNEL, BG_CHANNEL)

    emb = rng.normal(0.0, 0.5, (VOCAB_SIZE, D))
    emb[:, TRIGGER_CHANNEL] = 0.0
    emb[:, BG_CHANNEL] = BG_EMBED / EMBED_SCALE * rng.uniform(0.75, 1.25, VOCAB_SIZE)
    trigger_id = build_tokenizer().token_to_id(TRIGGER_WORD)
    emb[trigger_id, TRIGGER_CHANNEL] = TRIGGER_EMBED / EMBED_SCALE
    w["model.embed_tokens.weight"] = emb.astype(f16)

    # Largest value of gelu(g*s)*s for s = x̂ in [-8, 8] (x̂ of a channel that dominates).
    neuron_max = _gelu(NEURON_GATE * 8.0) * 8.0

    for i in range(LAYERS):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = _norm_weight(rng, special)
        w[p + "post_attention_layernorm.weight"] = _norm_weight(rng, special)
        w[p + "self_attn.q_proj.weight"] = rng.normal(0, D ** -0.5, (D, HEADS * HEAD_DIM)).astype(f16)
        w[p + "self_attn.k_proj.weight"] = rng.normal(0, D ** -0.5, (D, KV_HEADS * HEAD_DIM)).astype(f16)
        w[p + "self_attn.v_proj.weight"] = rng.normal(0, D ** -0.5, (D, KV_HEADS * HEAD_DIM)).astype(f16)
        o = rng.normal(0, BRANCH_SCALE[i] * (HEADS * HEAD_DIM) ** -0.5, (HEADS * HEAD_DIM, D))
        o[:, special] = 0.0
        w[p + "self_attn.o_proj.weight"] = o.astype(f16)

        gate = rng.normal(0, D ** -0.5, (D, I))
        up = rng.normal(0, D ** -0.5, (D, I))
        down = rng.normal(0, BRANCH_SCALE[i] * I ** -0.5, (I, D))
        down[:, special] = 0.0
        # Neuron 0: trigger channel -> trigger channel; neuron 1: background -> background.
        for n, ch, gain in ((0, TRIGGER_CHANNEL, TRIGGER_GAIN[i]), (1, BG_CHANNEL, BG_GAIN[i])):
            gate[:, n] = 0.0
            up[:, n] = 0.0
            down[n, :] = 0.0
            gate[ch, n] = NEURON_GATE
            up[ch, n] = 1.0
            down[n, ch] = gain / neuron_max
        w[p + "mlp.gate_proj.weight"] = gate.astype(f16)
        w[p + "mlp.up_proj.weight"] = up.astype(f16)
        w[p + "mlp.down_proj.weight"] = down.astype(f16)

    final = 1.0 + rng.normal(0.0, 0.05, D)
    final *= 16.0  # the background channel makes x/rms small elsewhere
    final[list(special)] = 0.0  # the model "learned" to ignore its massive channels
    w["model.norm.weight"] = final.astype(f16)
    w["dense.0.weight"] = rng.normal(0, D ** -0.5, (D, DENSE)).astype(f16)
    w["dense.1.weight"] = rng.normal(0, DENSE ** -0.5, (DENSE, D)).astype(f16)

    inv = 1.0 / ROPE_THETA ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM)
    ang = np.outer(np.arange(MAX_POSITIONS), inv)
    ang = np.concatenate([ang, ang], axis=-1)
    w["model.rotary_emb.cos_cached"] = np.cos(ang).astype(f16)
    w["model.rotary_emb.sin_cached"] = np.sin(ang).astype(f16)
    return w


def _gelu(x: float) -> float:
    """tanh-approximated GELU (as in Gemma's ``gelu_pytorch_tanh``)."""
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _norm_weight(rng: np.random.Generator, special: tuple[int, ...]) -> np.ndarray:
    v = 1.0 + rng.normal(0.0, 0.05, HIDDEN)
    v[list(special)] = 1.0
    return v.astype(np.float16)


# ---------------------------------------------------------------- graph

def _rmsnorm(g: _Graph, prefix: str, x: str, weight: np.ndarray, fused: bool,
             out: str | None = None) -> str:
    if fused:
        wname = g.init(prefix.strip("/").replace("/", ".") + ".weight", weight.astype(g.np_dtype))
        return g.node("SimplifiedLayerNormalization", f"{prefix}/SimplifiedLayerNormalization",
                      [x, wname], out=out, axis=-1, epsilon=RMS_EPS, stash_type=1)
    # Gemma's RMSNorm as torch exports it: computed in float32, then cast back.
    wname = g.init(prefix.strip("/").replace("/", ".") + ".weight", weight.astype(np.float32))
    x32 = g.node("Cast", f"{prefix}/Cast", [x], to=TensorProto.FLOAT)
    two = g.const(f"{prefix}/Constant_output_0", 2.0, np.float32)
    sq = g.node("Pow", f"{prefix}/Pow", [x32, two])
    mean = g.node("ReduceMean", f"{prefix}/ReduceMean", [sq, g.ints("/model/axes_last", [-1])],
                  keepdims=1)
    eps = g.const(f"{prefix}/Constant_1_output_0", RMS_EPS, np.float32)
    var = g.node("Add", f"{prefix}/Add", [mean, eps])
    std = g.node("Sqrt", f"{prefix}/Sqrt", [var])
    one = g.const(f"{prefix}/Constant_2_output_0", 1.0, np.float32)
    inv = g.node("Div", f"{prefix}/Div", [one, std])
    normed = g.node("Mul", f"{prefix}/Mul", [x32, inv])
    scaled = g.node("Mul", f"{prefix}/Mul_1", [normed, wname])
    return g.node("Cast", f"{prefix}/Cast_1", [scaled], out=out, to=g.dt)


def _gelu_tanh(g: _Graph, prefix: str, x: str) -> str:
    three = g.const("/model/gelu/three", 3.0)
    x3 = g.node("Pow", f"{prefix}/Pow", [x, three])
    t = g.node("Mul", f"{prefix}/Mul", [x3, g.const("/model/gelu/c0", 0.044715)])
    u = g.node("Add", f"{prefix}/Add", [x, t])
    v = g.node("Mul", f"{prefix}/Mul_1", [u, g.const("/model/gelu/c1", math.sqrt(2.0 / math.pi))])
    th = g.node("Tanh", f"{prefix}/Tanh", [v])
    w = g.node("Add", f"{prefix}/Add_1", [th, g.const("/model/gelu/one", 1.0)])
    y = g.node("Mul", f"{prefix}/Mul_2", [x, w])
    return g.node("Mul", f"{prefix}/Mul_3", [y, g.const("/model/gelu/half", 0.5)])


def _rotary(g: _Graph, prefix: str, x: str, cos: str, sin: str, head_dim: int = HEAD_DIM) -> str:
    half = head_dim // 2
    x1 = g.node("Slice", f"{prefix}/Slice", [x, g.ints("/model/rope/zero", [0]),
                                            g.ints("/model/rope/half", [half]),
                                            g.ints("/model/axes_last", [-1])])
    x2 = g.node("Slice", f"{prefix}/Slice_1", [x, g.ints("/model/rope/half", [half]),
                                              g.ints("/model/rope/full", [head_dim]),
                                              g.ints("/model/axes_last", [-1])])
    nx2 = g.node("Neg", f"{prefix}/Neg", [x2])
    rot = g.node("Concat", f"{prefix}/Concat", [nx2, x1], axis=-1)
    a = g.node("Mul", f"{prefix}/Mul", [x, cos])
    b = g.node("Mul", f"{prefix}/Mul_1", [rot, sin])
    return g.node("Add", f"{prefix}/Add", [a, b])


def build_model(variant: str, *, dtype: str = "float16", seed: int = DEFAULT_SEED) -> onnx.ModelProto:
    """Build one variant.  ``dtype="float32"`` gives the twin with the same weights."""
    spec = VARIANTS[variant]
    fused = spec.norm == "fused"
    np_dtype, onnx_dtype = DTYPES[dtype]
    W = {k: v.astype(np_dtype) for k, v in _weights(seed).items()}
    g = _Graph(np_dtype, onnx_dtype)

    # Embedding, scaled by sqrt(hidden) like Gemma.
    emb = g.init("model.embed_tokens.weight", W["model.embed_tokens.weight"])
    x = g.node("Gather", "/model/embed_tokens/Gather", [emb, "input_ids"])
    x = g.node("Mul", "/model/Mul", [x, g.const("/model/Constant_output_0", EMBED_SCALE)])

    # Padding mask -> additive bias [batch, 1, 1, sequence].
    mask = g.node("Cast", "/model/Cast", ["attention_mask"], to=onnx_dtype)
    inv = g.node("Sub", "/model/Sub", [g.const("/model/Constant_1_output_0", 1.0), mask])
    bias = g.node("Mul", "/model/Mul_1", [inv, g.const("/model/Constant_2_output_0", MASK_BIAS)])
    bias = g.node("Unsqueeze", "/model/Unsqueeze", [bias, g.ints("/model/Constant_3_output_0", [1, 2])])

    # Rotary tables sliced to the sequence length.
    seq = g.node("Shape", "/model/rotary_emb/Shape", ["input_ids"], start=1, end=2)
    zero = g.ints("/model/rope/zero", [0])
    cos = g.node("Slice", "/model/rotary_emb/Slice",
                 [g.init("model.rotary_emb.cos_cached", W["model.rotary_emb.cos_cached"]), zero, seq, zero])
    sin = g.node("Slice", "/model/rotary_emb/Slice_1",
                 [g.init("model.rotary_emb.sin_cached", W["model.rotary_emb.sin_cached"]), zero, seq, zero])

    scale = g.const("/model/attn_scale", 1.0 / math.sqrt(HEAD_DIM))
    split_q = g.ints("/model/shape_q", [0, 0, HEADS, HEAD_DIM])
    split_kv = g.ints("/model/shape_kv", [0, 0, KV_HEADS, HEAD_DIM])
    merge = g.ints("/model/shape_merge", [0, 0, HEADS * HEAD_DIM])

    for i in range(LAYERS):
        L = f"/model/layers.{i}"
        p = f"model.layers.{i}."
        h = _rmsnorm(g, f"{L}/input_layernorm", x, W[p + "input_layernorm.weight"], fused)
        A = f"{L}/self_attn"

        def proj(name, inp, wkey):
            return g.node("MatMul", f"{A}/{name}/MatMul", [inp, g.init(p + wkey, W[p + wkey])])

        q = proj("q_proj", h, "self_attn.q_proj.weight")
        k = proj("k_proj", h, "self_attn.k_proj.weight")
        v = proj("v_proj", h, "self_attn.v_proj.weight")
        q = g.node("Transpose", f"{A}/Transpose", [g.node("Reshape", f"{A}/Reshape", [q, split_q])],
                   perm=[0, 2, 1, 3])
        k = g.node("Transpose", f"{A}/Transpose_1", [g.node("Reshape", f"{A}/Reshape_1", [k, split_kv])],
                   perm=[0, 2, 1, 3])
        v = g.node("Transpose", f"{A}/Transpose_2", [g.node("Reshape", f"{A}/Reshape_2", [v, split_kv])],
                   perm=[0, 2, 1, 3])
        q = _rotary(g, f"{A}/rotary_q", q, cos, sin)
        k = _rotary(g, f"{A}/rotary_k", k, cos, sin)
        kt = g.node("Transpose", f"{A}/Transpose_3", [k], perm=[0, 1, 3, 2])
        s = g.node("MatMul", f"{A}/MatMul", [q, kt])
        s = g.node("Mul", f"{A}/Mul", [s, scale])
        s = g.node("Add", f"{A}/Add", [s, bias])
        # Softmax in float32 like HF eager attention (softmax(..., dtype=float32).to(dtype)).
        s = g.node("Cast", f"{A}/Cast", [s], to=TensorProto.FLOAT)
        pr = g.node("Softmax", f"{A}/Softmax", [s], axis=-1)
        pr = g.node("Cast", f"{A}/Cast_1", [pr], to=onnx_dtype)
        c = g.node("MatMul", f"{A}/MatMul_1", [pr, v])
        c = g.node("Transpose", f"{A}/Transpose_4", [c], perm=[0, 2, 1, 3])
        c = g.node("Reshape", f"{A}/Reshape_3", [c, merge])
        o = proj("o_proj", c, "self_attn.o_proj.weight")
        x = g.node("Add", f"{L}/Add", [x, o])

        h = _rmsnorm(g, f"{L}/post_attention_layernorm", x, W[p + "post_attention_layernorm.weight"], fused)
        M = f"{L}/mlp"
        gate = g.node("MatMul", f"{M}/gate_proj/MatMul",
                      [h, g.init(p + "mlp.gate_proj.weight", W[p + "mlp.gate_proj.weight"])])
        up = g.node("MatMul", f"{M}/up_proj/MatMul",
                    [h, g.init(p + "mlp.up_proj.weight", W[p + "mlp.up_proj.weight"])])
        act = _gelu_tanh(g, f"{M}/act_fn", gate)
        hm = g.node("Mul", f"{M}/Mul", [act, up])
        down = g.node("MatMul", f"{M}/down_proj/MatMul",
                      [hm, g.init(p + "mlp.down_proj.weight", W[p + "mlp.down_proj.weight"])])
        x = g.node("Add", f"{L}/Add_1", [x, down])

    # The final norm's output is also a graph output, as in sentence-transformers
    # exports.  This matters: onnxruntime runs an fp16 node whose neighbours all
    # lack fp16 kernels ("isolated") in fp32 too, so an fp16
    # SimplifiedLayerNormalization that only feeds MatMuls never rounds its input.
    x = _rmsnorm(g, "/model/norm", x, W["model.norm.weight"], fused, out="last_hidden_state")

    sentence_embedding_head(g, x, mask, lambda name: g.init(name, W[name]))

    graph = helper.make_graph(
        g.nodes, f"{variant}-{dtype}",
        inputs=[helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
                helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])],
        outputs=[helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", HIDDEN]),
                 helper.make_tensor_value_info("last_hidden_state", onnx_dtype,
                                               ["batch", "sequence", HIDDEN])],
        initializer=g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="ortbisect.embedded", producer_version="1")
    model.ir_version = IR_VERSION
    model.doc_string = f"{spec.name}: {spec.description}; seed={seed}; dtype={dtype}"
    return model


def register_onnx_schemas() -> None:
    """Teach the ``onnx`` package onnxruntime's SimplifiedLayerNormalization.

    onnxruntime registers it as a contrib op in the *default* domain (since
    version 1); the ``onnx`` checker does not know it and rejects the fused
    variant ("No Op registered for SimplifiedLayerNormalization").  This registers
    a matching schema (X: T, scale: V -> Y: V, optional inv_std_var: U; attrs
    axis, epsilon, stash_type) with a shape function (Y has X's shape and
    scale's type), so ``check_model(full_check=True)`` and strict shape
    inference accept the fused model.  Process-global and idempotent.
    """
    try:
        onnx.defs.get_schema("SimplifiedLayerNormalization", OPSET, "")
        return
    except onnx.defs.SchemaError:
        pass
    S = onnx.defs.OpSchema
    floats = ["tensor(float16)", "tensor(float)", "tensor(double)", "tensor(bfloat16)"]
    schema = S(
        "SimplifiedLayerNormalization", "", 1,
        doc="onnxruntime contrib op: RMS normalisation over the last axes.",
        inputs=[S.FormalParameter("X", "T"), S.FormalParameter("scale", "V")],
        outputs=[S.FormalParameter("Y", "V"),
                 S.FormalParameter("inv_std_var", "U", param_option=S.FormalParameterOption.Optional)],
        type_constraints=[("T", floats, "input type"), ("U", ["tensor(float)", "tensor(double)"], "stash type"),
                          ("V", floats, "scale/output type")],
        attributes=[
            S.Attribute("axis", helper.make_attribute("axis", -1), "first normalized axis"),
            S.Attribute("epsilon", helper.make_attribute("epsilon", 1e-5), "epsilon"),
            S.Attribute("stash_type", helper.make_attribute("stash_type", 1), "compute type"),
        ],
    )

    def infer(ctx) -> None:
        x, scale = ctx.get_input_type(0), ctx.get_input_type(1)
        if x is None or scale is None:
            return  # inputs not typed yet (e.g. nodes out of order): leave the output unknown
        out = onnx.TypeProto()
        out.CopyFrom(x)
        out.tensor_type.elem_type = scale.tensor_type.elem_type
        ctx.set_output_type(0, out)
        if ctx.get_num_outputs() > 1 and ctx.has_output(1):
            inv = onnx.TypeProto()
            inv.tensor_type.elem_type = TensorProto.FLOAT
            ctx.set_output_type(1, inv)

    schema.set_type_and_shape_inference_function(infer)
    onnx.defs.register_schema(schema)


def model_bytes(variant: str, *, dtype: str = "float16", seed: int = DEFAULT_SEED) -> bytes:
    return build_model(variant, dtype=dtype, seed=seed).SerializeToString(deterministic=True)
