"""The batch a probe feeds: a user's .npz, or a registered repro batch tokenized once."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx.helper import tensor_dtype_to_np_dtype

from harness.errors import UsageError
from harness.models import ResolvedModel, batch_spec


def load_npz(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise UsageError(f"--inputs {path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise UsageError(f"--inputs {path}: not a readable .npz file ({type(exc).__name__})") from None


def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def check_inputs(model_path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Names, element types and ranks of the arrays against the model's graph inputs."""
    graph = onnx.load(str(model_path), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    wanted = {i.name: i.type.tensor_type for i in graph.input if i.name not in inits}
    missing = sorted(set(wanted) - set(arrays))
    extra = sorted(set(arrays) - set(wanted))
    if missing or extra:
        raise UsageError(
            f"inputs do not match the model: missing {missing or 'none'}, unexpected {extra or 'none'} "
            f"(model inputs: {sorted(wanted)})"
        )
    for name, ttype in wanted.items():
        expected = np.dtype(tensor_dtype_to_np_dtype(ttype.elem_type))
        got = arrays[name]
        if got.dtype != expected:
            raise UsageError(f"input {name}: dtype {got.dtype}, the model expects {expected}")
        if ttype.HasField("shape") and len(ttype.shape.dim) != got.ndim:
            raise UsageError(f"input {name}: rank {got.ndim}, the model expects {len(ttype.shape.dim)}")


def repro_texts(spec: dict) -> list[str]:
    """The report's construction: each length cut from the filler repeated."""
    filler = spec["filler"]
    return [(filler * (n // len(filler) + 2))[:n] for n in spec["lengths"]]


def tokenize_batch(tokenizer_path: Path, spec: dict) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_path))
    tok.enable_padding(pad_id=spec.get("pad_id", 0), pad_token=spec.get("pad_token", "<pad>"))
    tok.enable_truncation(max_length=spec.get("max_length", 512))
    encs = tok.encode_batch(repro_texts(spec))
    return {
        "input_ids": np.array([e.ids for e in encs], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encs], dtype=np.int64),
    }


def default_batch(model: ResolvedModel, cache_dir: Path) -> Path:
    """The registered model's repro batch as .npz, tokenized once and kept in the cache."""
    if not model.spec.batch or not model.tokenizer:
        raise UsageError(f"--model {model.name}: no default batch; give one with --inputs FILE.npz")
    spec = batch_spec(model.spec.batch)
    tok_digest = hashlib.sha256(model.tokenizer.read_bytes()).hexdigest()[:16]
    key = hashlib.sha256(repr(sorted(spec.items())).encode()).hexdigest()[:16]
    path = cache_dir / "batches" / f"{model.spec.batch}-{tok_digest}-{key}.npz"
    if not path.exists():
        arrays = tokenize_batch(model.tokenizer, spec)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    return path
