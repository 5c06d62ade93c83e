"""gemma-300m-synthetic: the published shapes, and its overflow measured on real releases.

The real-release tests use the same design at a small width (hidden 64, 24
layers): what a layer adds to the two designed channels does not depend on
the width, so the residual trajectory and the verdicts are the full model's,
at a cost the suite can pay. The full model is materialized once per cache.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import onnx
import pytest

from harness.models import embedded, inputs
from harness.models import registry as models
from harness.models.embedded import gemma300m as G
from harness.models.embedded.graph import ExternalData
from harness.results.store import load_outputs

FP16_MAX = 65504.0
SMALL = G.Shape(vocab=512, hidden=64, heads=3, kv_heads=1, head_dim=16, intermediate=96, dense=128)
TRIGGER_ROWS = [7, 8, 10, 11, 12, 15, 16]  # rows of the report's batch holding the trigger word


def write(shape: G.Shape, dest, seed: int = 0, residuals: bool = False):
    """The model of `shape` with its weights in one external file (and, with `residuals`, every layer's
    residual as an fp32 output: a Cast after each Add_1, which a fp32 island removes, so it reads exact sums)."""
    dest.mkdir(parents=True, exist_ok=True)
    with open(dest / G.DATA_FILE, "wb") as fh:
        model = G.build(shape, seed, external=ExternalData(fh, G.DATA_FILE))
    if residuals:
        for i in range(shape.layers):
            model.graph.node.append(onnx.helper.make_node(
                "Cast", [f"/model/layers.{i}/Add_1_output_0"], [f"residual{i}"], to=onnx.TensorProto.FLOAT))
            model.graph.output.append(onnx.helper.make_tensor_value_info(f"residual{i}", onnx.TensorProto.FLOAT, None))
    onnx.save_model(model, str(dest / "model.onnx"))
    ids, mask = embedded.encode_batch()
    np.savez(dest / "batch.npz", input_ids=ids, attention_mask=mask)
    return dest / "model.onnx", dest / "batch.npz"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return write(SMALL, tmp_path_factory.mktemp("small"))


def test_the_registered_model_has_the_published_shapes(cache_dir):
    made = embedded.materialize(G.NAME, cache_dir / "models" / G.NAME)
    proto = onnx.load(str(made["model"]), load_external_data=False)
    dims = {t.name: list(t.dims) for t in proto.graph.initializer}
    assert dims["model.embed_tokens.weight"] == [262144, 768]
    assert dims["model.layers.23.self_attn.q_proj.weight"] == [768, 3 * 256]
    assert dims["model.layers.23.self_attn.k_proj.weight"] == [768, 256]  # one key/value head for three queries
    assert dims["model.layers.0.mlp.gate_proj.weight"] == [768, 1152]
    assert dims["dense.0.weight"] == [768, 3072] and dims["dense.1.weight"] == [3072, 768]
    assert "model.layers.24.input_layernorm.weight" not in dims
    norms = {n.split(".")[3] for n in dims if n.startswith("model.layers.5.") and n.endswith("norm.weight")}
    assert norms == {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm", "self_attn"}  # and the q/k norms under self_attn
    size = made["data"].stat().st_size
    assert 550e6 < size < 700e6, size  # EmbeddingGemma-300M's fp16 weights are about 600 MB
    resolved = models.resolve(G.NAME, cache_dir)
    assert resolved.data_files == [made["data"]] and resolved.tokenizer == made["tokenizer"]
    # A second call writes nothing: the stamp holds each file's size and time.
    stamp = json.loads((made["dir"] / "materialized.json").read_text())
    again = embedded.materialize(G.NAME, cache_dir / "models" / G.NAME)
    assert json.loads((again["dir"] / "materialized.json").read_text()) == stamp


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path):
    a, _ = write(SMALL, tmp_path / "a")
    b, _ = write(SMALL, tmp_path / "b")
    c, _ = write(SMALL, tmp_path / "c", seed=1)
    data = [p.parent / G.DATA_FILE for p in (a, b, c)]
    assert a.read_bytes() == b.read_bytes() and data[0].read_bytes() == data[1].read_bytes()
    assert data[0].read_bytes() != data[2].read_bytes()
    onnx.checker.check_model(str(a), full_check=True)


def four_rows(batch, dest):
    """Rows 0, 7, 10 and 13 of the report's batch (7 and 10 hold the trigger word), cut to 114 tokens."""
    np.savez(dest, **inputs.take_rows(inputs.load_npz(batch), ROWS))
    return dest


ROWS = [0, 7, 10, 13]


@pytest.mark.release
def test_residual_grows_to_the_fp16_ceiling_and_passes_it_at_layer_22(bisect, tmp_path):
    model, batch = write(SMALL, tmp_path / "m", residuals=True)
    rows = four_rows(batch, tmp_path / "rows.npz")
    r = bisect("sweep", "--model", str(model), "--inputs", str(rows), "--from", "1.23.2", "--to", "1.23.2", "--json",
               results=tmp_path / "res")
    assert r.returncode in (0, 3), r.stderr
    out = load_outputs(next((tmp_path / "res").glob("*/outputs/1.23.2.npz")))
    hit = [ROWS.index(r) for r in ROWS if r in TRIGGER_ROWS]
    trigger = [float(np.abs(out[f"residual{i}"][hit]).max()) for i in range(24)]
    others = [float(np.abs(np.delete(out[f"residual{i}"], hit, axis=0)).max()) for i in range(24)]
    assert 500 < trigger[0] < 2000 and 500 < others[0] < 2000  # about 1e3 after layer 0
    assert all(b > a for a, b in zip(trigger, trigger[1:]))  # it grows in every layer
    assert max(trigger[:22]) < FP16_MAX < trigger[22]  # the first sum past 65504: layer 22's residual Add
    assert 5e4 <= others[22] and max(others) < 0.9 * FP16_MAX  # rows without the trigger never come close
    assert np.isfinite(out["sentence_embedding"]).all()  # fp32 islands keep the sums on x86_64


@pytest.mark.release
def test_clean_on_x86_64(bisect, small, tmp_path):
    model, batch = small
    rows = four_rows(batch, tmp_path / "rows.npz")  # the trigger rows are what overflows where anything does
    r = bisect("run", "--model", str(model), "--inputs", str(rows), "--from", "1.19.0", "--to", "1.30.0", "--json")
    assert r.returncode == 3, r.stderr  # both ends good: nothing to find
    assert {p["verdict"] for p in r.json()["probes"]} == {"good"}


@pytest.mark.qemu
def test_nan_rows_from_1_24_1_on_aarch64_neoverse_n1(bisect, tmp_path):
    # The same design in 6 layers, past 65504 at layer 4: under QEMU a session's graph optimizations cost
    # about as much as the run, and they grow with the nodes (24 layers: 11 minutes on a loaded machine).
    model, batch = write(dataclasses.replace(SMALL, layers=6, overflow_layer=4), tmp_path / "m")
    rows = four_rows(batch, tmp_path / "rows.npz")
    r = bisect("sweep", "--model", str(model), "--inputs", str(rows), "--arch", "aarch64",
               "--backend", "qemu",
               "--cpu", "neoverse-n1", "--from", "1.23.2", "--to", "1.24.1", "--json", timeout=1800)
    assert r.returncode == 0, r.stderr
    seen = {p["version"]: (p["verdict"], p["nan_rows"]) for p in r.json()["probes"]}
    assert seen == {"1.23.2": ("good", 0), "1.24.1": ("bad", len(set(ROWS) & set(TRIGGER_ROWS)))}
