"""``gemma-300m-synthetic``: an fp16 model with EmbeddingGemma-300M's published shapes, generated, never shipped.

The report's model is EmbeddingGemma-300M (about 600 MB in fp16, weights in an
external data file). This builds a model of that size and structure from a
seed, in seconds, so the harness can be measured at real scale without a hub
download. What is taken from the public configuration (Gemma3 text
architecture, as used by EmbeddingGemma):

* vocabulary 262144, hidden 768, 24 layers, 3 query heads sharing 1 key/value
  head (grouped-query attention) of dimension 256, gated MLP of width 1152
  with tanh-GELU, embeddings scaled by sqrt(hidden), rotary positions,
  bidirectional attention with an additive padding bias;
* Gemma3's four RMSNorms per layer (input, post-attention, pre-feedforward,
  post-feedforward: the branch outputs are normalized before each residual
  Add) and its per-head q/k norms, every norm decomposed as torch exports it
  (Cast to float32 ... Cast back to fp16), so only the residual Adds compute
  on the fp16 residual stream;
* a final norm whose output is ``last_hidden_state``, mean pooling over the
  mask, the two dense projections 768 -> 3072 -> 768 of sentence-transformers,
  L2 normalisation to ``sentence_embedding`` (float32, 768).

Local (sliding-window, 512) and global layers are the same computation for
sequences of at most 512 tokens, the repro batch's limit, so every layer is
written as global attention.

Residual growth. As in the tiny models, two "massive activation" channels are
written only by one designed MLP neuron each (their columns in o_proj and
down_proj are zero elsewhere); their size is set by construction, not by the
seed. With the post-feedforward norm in front of the residual Add, what a
layer adds to a channel is that norm's weight for the channel times
sqrt(hidden) times the channel's share of the MLP output, so the per-layer
gains are the norm weights (``TRIGGER_STEPS``, ``BACKGROUND_STEPS``):

* the background channel, in every token: about 1,000 after layer 0, growing
  by about 2,200 a layer to about 50,000 after layer 22 and 52,000 after 23;
* the trigger channel, only at the positions of the trigger word (``laborum``,
  the 7 rows of the report's batch of 444 characters or more): about 1,000
  after layer 0, about 62,000 after layer 21, then ``/model/layers.22/Add_1``
  sums to about 70,000, above the fp16 maximum 65504.

Where a kernel keeps the residual Adds in fp32 (x86_64 in every release;
aarch64 up to 1.23.2) the model is finite. From 1.24.1 on aarch64 with fp16
arithmetic the Add runs in fp16: +Inf at layer 22's residual, NaN in the
next norm, 7 rows of 20 NaN. ``tests/test_gemma300m.py`` measures the
trajectory of a built model.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx
from onnx import TensorProto, helper

from .generator import (
    IR_VERSION,
    MASK_BIAS,
    OPSET,
    ROPE_THETA,
    _gelu_tanh,
    _rmsnorm,
    _rotary,
)
from .graph import ExternalData, _Graph, sentence_embedding_head
from .names import GEMMA_300M, GEMMA_300M_DATA
from .tokenizer import build_tokenizer

NAME = GEMMA_300M
TRIGGER_WORD = "laborum"
TRIGGER_CHANNEL = 11
BG_CHANNEL = 42
TRIGGER_EMBED = 200.0  # the trigger token's trigger channel after the sqrt(hidden) scale
BG_EMBED = 60.0        # every token's background channel after the scale (x0.75..1.25)
GATE_MAX = 16.0        # largest gate pre-activation of a designed neuron: x**3 stays < 65504 in fp16
DATA_FILE = GEMMA_300M_DATA


@dataclasses.dataclass(frozen=True)
class Shape:
    vocab: int = 262144
    hidden: int = 768
    layers: int = 24
    heads: int = 3
    kv_heads: int = 1
    head_dim: int = 256
    intermediate: int = 1152
    dense: int = 3072
    max_positions: int = 2048
    overflow_layer: int = 22  # the layer whose residual Add_1 passes 65504 in the trigger rows

    def steps(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """(trigger, background) target value added per layer, exact arithmetic."""
        n, k = self.layers, self.overflow_layer
        trigger = [1000.0] + [61000.0 / (k - 1)] * (k - 1) + [8000.0] + [2000.0] * (n - k - 1)
        background = [1000.0] + [49000.0 / k] * k + [2000.0] * (n - k - 1)
        return tuple(trigger[:n]), tuple(background[:n])


PUBLISHED = Shape()


def _normal(rng: np.random.Generator, scale: float, shape) -> np.ndarray:
    # float32 draws: the embedding alone is 201M values, float64 would double time and memory.
    return rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)


def weights(shape: Shape, seed: int) -> dict[str, np.ndarray]:
    """Every weight as fp16, deterministic from `seed` (the designed channels do not depend on it)."""
    rng = np.random.default_rng(seed)
    f16 = np.float16
    D, I, H, KV, HD = shape.hidden, shape.intermediate, shape.heads, shape.kv_heads, shape.head_dim
    special = [TRIGGER_CHANNEL, BG_CHANNEL]
    scale = math.sqrt(D)
    w: dict[str, np.ndarray] = {}

    emb = _normal(rng, 0.05, (shape.vocab, D))
    emb[:, TRIGGER_CHANNEL] = 0.0
    emb[:, BG_CHANNEL] = BG_EMBED / scale * rng.uniform(0.75, 1.25, shape.vocab).astype(np.float32)
    emb[build_tokenizer().token_to_id(TRIGGER_WORD), TRIGGER_CHANNEL] = TRIGGER_EMBED / scale
    w["model.embed_tokens.weight"] = emb.astype(f16)
    del emb

    gate_gain = GATE_MAX / scale  # x̂ of one channel is at most sqrt(hidden)
    trigger_steps, bg_steps = shape.steps()

    def norm_weight(n: int, special_values: dict[int, float] | None = None) -> np.ndarray:
        v = 1.0 + rng.normal(0.0, 0.05, n)
        for ch, value in (special_values or {}).items():
            v[ch] = value
        return v.astype(f16)

    for i in range(shape.layers):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm_weight(D, {c: 1.0 for c in special})
        w[p + "post_attention_layernorm.weight"] = norm_weight(D)
        w[p + "pre_feedforward_layernorm.weight"] = norm_weight(D, {c: 1.0 for c in special})
        # What the layer adds to each designed channel: the norm's weight times sqrt(hidden).
        w[p + "post_feedforward_layernorm.weight"] = norm_weight(
            D, {TRIGGER_CHANNEL: trigger_steps[i] / scale, BG_CHANNEL: bg_steps[i] / scale})
        w[p + "self_attn.q_norm.weight"] = norm_weight(HD)
        w[p + "self_attn.k_norm.weight"] = norm_weight(HD)
        w[p + "self_attn.q_proj.weight"] = _normal(rng, D ** -0.5, (D, H * HD)).astype(f16)
        w[p + "self_attn.k_proj.weight"] = _normal(rng, D ** -0.5, (D, KV * HD)).astype(f16)
        w[p + "self_attn.v_proj.weight"] = _normal(rng, D ** -0.5, (D, KV * HD)).astype(f16)
        o = _normal(rng, (H * HD) ** -0.5, (H * HD, D))
        o[:, special] = 0.0
        w[p + "self_attn.o_proj.weight"] = o.astype(f16)
        gate = _normal(rng, D ** -0.5, (D, I))
        up = _normal(rng, D ** -0.5, (D, I))
        down = _normal(rng, I ** -0.5, (I, D))
        down[:, special] = 0.0
        # Neuron 0 reads and writes the trigger channel, neuron 1 the background channel.
        for n, ch in ((0, TRIGGER_CHANNEL), (1, BG_CHANNEL)):
            gate[:, n] = up[:, n] = down[n, :] = 0.0
            gate[ch, n], up[ch, n], down[n, ch] = gate_gain, 1.0, 1.0
        w[p + "mlp.gate_proj.weight"] = gate.astype(f16)
        w[p + "mlp.up_proj.weight"] = up.astype(f16)
        w[p + "mlp.down_proj.weight"] = down.astype(f16)

    final = 16.0 * (1.0 + rng.normal(0.0, 0.05, D))  # the massive channels make x̂ small elsewhere
    final[special] = 0.0  # the model "learned" to ignore its massive channels
    w["model.norm.weight"] = final.astype(f16)
    w["dense.0.weight"] = _normal(rng, D ** -0.5, (D, shape.dense)).astype(f16)
    w["dense.1.weight"] = _normal(rng, shape.dense ** -0.5, (shape.dense, D)).astype(f16)

    inv = 1.0 / ROPE_THETA ** (np.arange(0, HD, 2) / HD)
    ang = np.outer(np.arange(shape.max_positions), inv)
    ang = np.concatenate([ang, ang], axis=-1)
    w["model.rotary_emb.cos_cached"] = np.cos(ang).astype(f16)
    w["model.rotary_emb.sin_cached"] = np.sin(ang).astype(f16)
    return w


def build(shape: Shape = PUBLISHED, seed: int = 0, external: ExternalData | None = None) -> onnx.ModelProto:
    """The fp16 graph; with `external`, weights of 1 KB or more are streamed to its data file."""
    W = weights(shape, seed)
    g = _Graph(np.float16, TensorProto.FLOAT16, external=external)
    D, H, KV, HD = shape.hidden, shape.heads, shape.kv_heads, shape.head_dim

    def take(name: str) -> str:
        return g.init(name, W.pop(name))  # handed to the writer, then dropped: one copy in memory

    def norm(prefix: str, x: str, key: str, out: str | None = None) -> str:
        return _rmsnorm(g, prefix, x, W.pop(key), fused=False, out=out)

    x = g.node("Gather", "/model/embed_tokens/Gather", [take("model.embed_tokens.weight"), "input_ids"])
    x = g.node("Mul", "/model/Mul", [x, g.const("/model/Constant_output_0", math.sqrt(D))])
    mask = g.node("Cast", "/model/Cast", ["attention_mask"], to=TensorProto.FLOAT16)
    inv = g.node("Sub", "/model/Sub", [g.const("/model/Constant_1_output_0", 1.0), mask])
    bias = g.node("Mul", "/model/Mul_1", [inv, g.const("/model/Constant_2_output_0", MASK_BIAS)])
    bias = g.node("Unsqueeze", "/model/Unsqueeze", [bias, g.ints("/model/Constant_3_output_0", [1, 2])])
    seq = g.node("Shape", "/model/rotary_emb/Shape", ["input_ids"], start=1, end=2)
    zero = g.ints("/model/rope/zero", [0])
    cos = g.node("Slice", "/model/rotary_emb/Slice", [take("model.rotary_emb.cos_cached"), zero, seq, zero])
    sin = g.node("Slice", "/model/rotary_emb/Slice_1", [take("model.rotary_emb.sin_cached"), zero, seq, zero])
    scale = g.const("/model/attn_scale", 1.0 / math.sqrt(HD))
    split_q = g.ints("/model/shape_q", [0, 0, H, HD])
    split_kv = g.ints("/model/shape_kv", [0, 0, KV, HD])
    merge = g.ints("/model/shape_merge", [0, 0, H * HD])

    for i in range(shape.layers):
        L, p = f"/model/layers.{i}", f"model.layers.{i}."
        A = f"{L}/self_attn"
        h = norm(f"{L}/input_layernorm", x, p + "input_layernorm.weight")

        def heads(name: str, n: str, shape_: str, k: int) -> str:
            y = g.node("MatMul", f"{A}/{name}_proj/MatMul", [h, take(p + f"self_attn.{name}_proj.weight")])
            y = g.node("Reshape", f"{A}/Reshape_{k}", [y, shape_])
            if n:  # Gemma3's per-head RMSNorm of q and k, over head_dim
                y = norm(f"{A}/{name}_norm", y, p + f"self_attn.{name}_norm.weight")
            return g.node("Transpose", f"{A}/Transpose_{k}", [y], perm=[0, 2, 1, 3])

        q = _rotary(g, f"{A}/rotary_q", heads("q", "q", split_q, 0), cos, sin, head_dim=HD)
        k = _rotary(g, f"{A}/rotary_k", heads("k", "k", split_kv, 1), cos, sin, head_dim=HD)
        v = heads("v", "", split_kv, 2)
        s = g.node("MatMul", f"{A}/MatMul", [q, g.node("Transpose", f"{A}/Transpose_3", [k], perm=[0, 1, 3, 2])])
        s = g.node("Add", f"{A}/Add", [g.node("Mul", f"{A}/Mul", [s, scale]), bias])
        s = g.node("Cast", f"{A}/Cast", [s], to=TensorProto.FLOAT)  # softmax in float32, like HF eager
        pr = g.node("Cast", f"{A}/Cast_1", [g.node("Softmax", f"{A}/Softmax", [s], axis=-1)],
                    to=TensorProto.FLOAT16)
        c = g.node("Transpose", f"{A}/Transpose_4", [g.node("MatMul", f"{A}/MatMul_1", [pr, v])], perm=[0, 2, 1, 3])
        c = g.node("Reshape", f"{A}/Reshape_3", [c, merge])
        o = g.node("MatMul", f"{A}/o_proj/MatMul", [c, take(p + "self_attn.o_proj.weight")])
        o = norm(f"{L}/post_attention_layernorm", o, p + "post_attention_layernorm.weight")
        x = g.node("Add", f"{L}/Add", [x, o])

        M = f"{L}/mlp"
        h = norm(f"{L}/pre_feedforward_layernorm", x, p + "pre_feedforward_layernorm.weight")
        gate = g.node("MatMul", f"{M}/gate_proj/MatMul", [h, take(p + "mlp.gate_proj.weight")])
        up = g.node("MatMul", f"{M}/up_proj/MatMul", [h, take(p + "mlp.up_proj.weight")])
        hm = g.node("Mul", f"{M}/Mul", [_gelu_tanh(g, f"{M}/act_fn", gate), up])
        down = g.node("MatMul", f"{M}/down_proj/MatMul", [hm, take(p + "mlp.down_proj.weight")])
        down = norm(f"{L}/post_feedforward_layernorm", down, p + "post_feedforward_layernorm.weight")
        x = g.node("Add", f"{L}/Add_1", [x, down])

    x = norm("/model/norm", x, "model.norm.weight", out="last_hidden_state")
    sentence_embedding_head(g, x, mask, take)
    assert not W, f"weights left unused: {sorted(W)}"

    graph = helper.make_graph(
        g.nodes, NAME,
        inputs=[helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
                helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])],
        outputs=[helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", D]),
                 helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT16, ["batch", "sequence", D])],
        initializer=g.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="ortbisect.embedded", producer_version="1")
    model.ir_version = IR_VERSION
    model.doc_string = f"{NAME}: EmbeddingGemma-300M shapes {dataclasses.asdict(shape)}; seed={seed}; fp16"
    return model

