"""The hub download path, against a local directory laid out as the huggingface_hub cache (offline)."""

from __future__ import annotations

import hashlib
import shutil
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.models.registry import registered

SPEC = registered()["embeddinggemma"]


def tiny_embedder() -> onnx.ModelProto:
    """input_ids, attention_mask -> sentence_embedding, with an embedding table to store externally."""
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])
    out = helper.make_tensor_value_info("sentence_embedding", TensorProto.FLOAT, ["batch", 4])
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32), "embed")
    nodes = [
        helper.make_node("Gather", ["embed", "input_ids"], ["h"]),
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["m", "axis"], ["m3"]),
        helper.make_node("Mul", ["h", "m3"], ["hm"]),
        helper.make_node("ReduceSum", ["hm", "axis1"], ["sentence_embedding"], keepdims=0),
    ]
    inits = [table, numpy_helper.from_array(np.array([2], np.int64), "axis"),
             numpy_helper.from_array(np.array([1], np.int64), "axis1")]
    graph = helper.make_graph(nodes, "tiny", [ids, mask], [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def hub_cache(root: Path, revision: str) -> Path:
    """Lay files out as huggingface_hub does: blobs by hash, snapshots/<commit>/ symlinks, refs/main."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    repo = root / ("models--" + SPEC.repo.replace("/", "--"))
    staging = root / "staging"
    (staging / "onnx").mkdir(parents=True)
    onnx.save_model(tiny_embedder(), str(staging / SPEC.model_file), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=Path(SPEC.extra_files[0]).name, size_threshold=256)
    words = "<pad> <unk> lorem ipsum dolor sit amet , . consectetur adipiscing elit".split()
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(staging / SPEC.tokenizer_file))
    for name in (SPEC.model_file, *SPEC.extra_files, SPEC.tokenizer_file):
        data = (staging / name).read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = repo / "snapshots" / revision / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return root


def resolve_offline(hub: Path, cache: Path, revision: str | None = None) -> subprocess.CompletedProcess:
    code = f"""
import dataclasses, json, sys
from pathlib import Path
from harness.models import inputs, registry as models
from harness.errors import UsageError
spec = models.registered()["embeddinggemma"]
if {revision!r}:
    spec = dataclasses.replace(spec, revision={revision!r})
try:
    files = models.fetch_hub(spec)
    m = models.resolve("embeddinggemma", Path({str(cache)!r}))
    batch = inputs.load_npz(inputs.default_batch(m, Path({str(cache)!r})))
    inputs.check_inputs(m.facts, batch)
    print(json.dumps({{"files": {{k: str(v) for k, v in files.items()}}, "digest": m.digest, "path": str(m.path),
                      "shape": list(batch["input_ids"].shape), "data": [str(p) for p in m.data_files]}}))
except UsageError as exc:
    print(exc, file=sys.stderr); sys.exit(2)
"""
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)


def test_pinned_files_come_from_the_pinned_snapshot(tmp_path):
    hub = hub_cache(tmp_path / "hub", SPEC.revision)
    r = resolve_offline(hub, tmp_path / "cache")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc["files"]) == {SPEC.model_file, *SPEC.extra_files, SPEC.tokenizer_file}
    assert all(f"/snapshots/{SPEC.revision}/" in p for p in doc["files"].values())
    assert doc["data"] and doc["data"][0].endswith("model_fp16.onnx_data")
    # probes read plain files in one directory (onnxruntime >= 1.24.1 rejects data symlinked out of it)
    probe_model, probe_data = Path(doc["path"]), Path(doc["data"][0])
    assert probe_model.parent == probe_data.parent
    assert not probe_model.is_symlink() and not probe_data.is_symlink()
    assert probe_model.read_bytes() == Path(doc["files"][SPEC.model_file]).read_bytes()
    assert doc["shape"][0] == 20  # the report's batch: 20 texts


def test_other_revision_is_refused(tmp_path):
    hub = hub_cache(tmp_path / "hub", "0" * 40)  # the cache holds another commit only
    r = resolve_offline(hub, tmp_path / "cache")
    assert r.returncode == 2
    assert "not in the huggingface_hub cache" in r.stderr


@pytest.mark.parametrize("revision", ["main", "v1.0", "5090578d"])
def test_unpinned_revision_is_refused(tmp_path, revision):
    hub = hub_cache(tmp_path / "hub", SPEC.revision)
    r = resolve_offline(hub, tmp_path / "cache", revision=revision)
    assert r.returncode == 2
    assert "not a pinned 40-hex commit" in r.stderr


def test_models_lists_every_registered_model(bisect, tmp_path):
    hub = hub_cache(tmp_path / "hub", SPEC.revision)
    r = bisect("models", "--json", "--cache-dir", str(tmp_path / "cache"), env={"HF_HUB_CACHE": str(hub)})
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(r.stdout)}
    assert set(rows) == set(registered())
    hub_row = rows["embeddinggemma"]
    assert hub_row["source"] == "hub" and hub_row["size_bytes"] > 0
    assert any(i.startswith("input_ids: int64") for i in hub_row["inputs"])
    gen = rows["gemma-tiny-fused"]
    assert gen["source"] == "generated" and gen["batch"] == "embeddinggemma-report"
    assert "sentence_embedding: float32[batch, 64]" in gen["outputs"]


@pytest.mark.release
def test_hub_model_runs_on_1_24_1(bisect, tmp_path):
    """onnxruntime >= 1.24.1 rejects external data symlinked out of the model's directory,
    which is how the huggingface_hub cache stores files: probes must not see the symlinks."""
    hub = hub_cache(tmp_path / "hub", SPEC.revision)
    r = bisect("sweep", "--model", "embeddinggemma", "--from", "1.24.1", "--to", "1.24.1", "--json",
               env={"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 3, r.stderr
    (probe,) = r.json()["probes"]
    assert (probe["verdict"], probe["rows"]) == ("good", 20), probe


@pytest.mark.release
def test_report_of_a_hub_model_fetches_it_by_revision_and_names_no_local_path(bisect, tmp_path):
    hub = hub_cache(tmp_path / "hub", SPEC.revision)
    env = {"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    results = tmp_path / "results"
    r = bisect("sweep", "--model", "embeddinggemma", "--from", "1.24.1", "--to", "1.24.1", "--json", results=results,
               env=env)
    assert r.returncode == 3, r.stderr
    run_id = r.json()["run_id"]
    rep = bisect("report", run_id, "--results-dir", str(results), "--cache-dir", str(bisect.cache_dir), "--no-probe",
                 env=env)
    assert rep.returncode == 0, rep.stderr
    script = (results / run_id / "repro.py").read_text()
    namespace: dict = {}
    exec(script.split("\ndef session(")[0].split("import onnxruntime as ort\n")[1], namespace)  # the constants
    assert namespace["FULL_MODEL_HUB"] == {"repo_id": SPEC.repo, "revision": SPEC.revision,
                                           "files": [SPEC.model_file, *SPEC.extra_files]}
    assert namespace["FULL_MODEL_B64"] is None  # a hub model is fetched, never embedded
    assert "--full     # the full model, fetched from the hub" in script
    # the reader is told what to download, never "?": the repo, the revision and every file, sizes not needed
    files = ", ".join(f"`{f}`" for f in (SPEC.model_file, *SPEC.extra_files))
    assert (f"The full model is not in this report: it is on the Hugging Face Hub, repo `{SPEC.repo}` at revision "
            f"`{SPEC.revision}`, files {files}; `python repro.py --full` downloads them") in rep.stdout
    table = rep.stdout.split("| file | bytes | sha256 | where |")[1].split("\n\n")[0]
    assert "| ? |" not in table and "the hub (--full fetches it)" in table
    for text in (rep.stdout, script):
        for local in (str(tmp_path), str(bisect.cache_dir), str(Path.home()), "/tmp/", "/root/"):
            assert local not in text, local


def _unreachable_hub(hub: Path) -> dict:
    """A hub endpoint nothing listens on (loopback, a closed port: refused at once), HF_HUB_OFFLINE unset."""
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    return {**env, "HF_HUB_CACHE": str(hub), "HF_ENDPOINT": "http://127.0.0.1:9"}


def test_the_mission_command_without_the_hub_is_one_line_naming_what_works_here(tmp_path, listing):
    """No hub and no cached export: one line, exit 2, that names the embedded models and --model PATH; none of
    huggingface_hub's retry warnings (five per file, about 25 s, before this)."""
    cache = tmp_path / "cache"
    shutil.copytree(listing, cache / "index")
    r = subprocess.run([sys.executable, "-m", "harness.cli", "run", "--model", "embeddinggemma", "--from", "1.19.0",
                        "--to", "1.30.0", "--cache-dir", str(cache), "--results-dir", str(tmp_path / "r")],
                       capture_output=True, text=True, env=_unreachable_hub(tmp_path / "empty-hub"), timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert "the hub cannot be reached" in lines[0] and "--model PATH" in lines[0]
    from harness.models.registry import registered
    for name, spec in registered().items():
        if spec.source == "generated":
            assert name in lines[0]


def test_with_the_export_in_the_hub_cache_it_runs_without_the_hub(tmp_path):
    """The pinned files in the hub cache are taken from it before the hub is asked: an unreachable hub (and no
    HF_HUB_OFFLINE) still resolves the model."""
    hub = hub_cache(tmp_path / "hub", SPEC.revision)
    code = ("from pathlib import Path; from harness.models import registry as m; "
            f"print(m.resolve('embeddinggemma', Path({str(tmp_path / 'cache')!r})).path)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_unreachable_hub(hub),
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()).is_file()


def test_offline_the_hub_model_s_line_names_its_stand_in_and_what_a_copy_of_the_file_needs(offline_cli, cache_dir,
                                                                                             tmp_path):
    """Without the hub, the one line says which embedded model shows the report's case (with the flags a user types
    next) and that a copy of the export needs a batch: a file has none. Both claims are then held."""
    import builders

    from harness.models.registry import registered

    r = offline_cli("run", "--model", "embeddinggemma", "--from", "1.23.2", "--to", "1.24.1", "--offline",
                    "--cache-dir", cache_dir, "--results-dir", tmp_path / "results")
    assert r.returncode == 2
    line, = r.stderr.strip().splitlines()
    stand_in = registered()["embeddinggemma"].stand_in
    assert stand_in == "gemma-tiny-decomposed --arch aarch64"
    assert f"--model {stand_in} shows its case" in line and "NaN from 1.24.1 on aarch64" in line, line
    assert "--model PATH --inputs FILE.npz (a file has no default batch" in line, line
    # the stand-in's flags pass every check (the probe would start), a file without --inputs does not
    r = offline_cli("run", "--model", *stand_in.split()[:1], *stand_in.split()[1:], "--from", "1.23.2", "--to", "1.24.1",
                    "--offline", "--cache-dir", cache_dir, "--results-dir", tmp_path / "results")
    assert r.returncode is None, r.stderr
    model = builders.save(builders.residual_norm_model(), tmp_path / "copy.onnx")
    r = offline_cli("run", "--model", model, "--from", "1.23.2", "--to", "1.24.1", "--offline", "--cache-dir",
                    cache_dir, "--results-dir", tmp_path / "results")
    assert r.returncode == 2 and "no default batch; give one with --inputs FILE.npz" in r.stderr, r.stderr
