"""Embedded default model: a tiny EmbeddingGemma-shaped fp16 model and its tokenizer.

Everything is generated offline and deterministically (see ``generator`` for the
design and the overflow mechanism of each variant, ``tokenizer`` for the
tokenizer and the report's repro batch).

    materialize("gemma-tiny-fused", Path("models/gemma-tiny-fused"))

writes ``model.onnx`` (fp16), ``model_fp32.onnx`` (the float32 twin, same
weights) and ``tokenizer.json``, each atomically, and returns their paths and
sha256 digests.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import secrets
from pathlib import Path

from harness.worker import file_identity

from .names import DEFAULT_SEED, GEMMA_300M, GEMMA_300M_DATA, RMSNORM

__all__ = [
    "VARIANTS", "VariantSpec", "DEFAULT_SEED", "build_model", "model_bytes", "build_tokenizer",
    "materialize", "encode_batch", "repro_texts", "LOREM", "LENGTHS",
]

# The generators import onnx (and tokenizers): loaded on first use, so a warm run that finds its model
# made already never loads them.
_LAZY = {"VARIANTS": "generator", "VariantSpec": "generator", "build_model": "generator", "model_bytes": "generator",
         "build_tokenizer": "tokenizer", "encode_batch": "tokenizer", "repro_texts": "tokenizer",
         "LOREM": "tokenizer", "LENGTHS": "tokenizer"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if name in ("gemma300m", "generator", "graph", "rmsnorm", "tokenizer"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _write_atomic(path: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    try:
        if path.read_bytes() == data:
            return digest  # already there: keep its mtime, so digests stay memoised
    except OSError:
        pass
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    # created as open() creates a file (0666 less the umask), not 0600 as mkstemp does; reading the umask
    # would set it for a moment, for every thread and every process started then
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return digest


def materialize(variant: str, dest_dir: Path, *, seed: int = DEFAULT_SEED) -> dict:
    """Write the variant's fp16 model, fp32 twin and tokenizer into ``dest_dir``.

    Returns ``{"variant", "seed", "dir", "model", "model_fp32", "tokenizer",
    "sha256": {"model.onnx": ..., "model_fp32.onnx": ..., "tokenizer.json": ...}}``
    (paths as :class:`~pathlib.Path`).
    """
    if variant == RMSNORM:
        from . import rmsnorm

        return _materialize_files(variant, Path(dest_dir), rmsnorm.files())
    if variant == GEMMA_300M:
        return _materialize_300m(Path(dest_dir), seed)
    dest = Path(dest_dir)
    recipe = {"variant": variant, "seed": seed, "code": _code_digest()}
    stamp = dest / "materialized.json"
    try:
        made = json.loads(stamp.read_text())
        if made["recipe"] == recipe and all(
            hashlib.sha256((dest / name).read_bytes()).hexdigest() == digest for name, digest in made["sha256"].items()
        ):
            return _paths(dest, variant, seed, made["sha256"])  # same code, same seed: same bytes
    except (OSError, ValueError, KeyError):
        pass
    from .generator import VARIANTS, model_bytes
    from .tokenizer import build_tokenizer

    if variant not in VARIANTS:
        raise KeyError(f"unknown embedded variant {variant!r}; known: {sorted(VARIANTS)}")
    dest.mkdir(parents=True, exist_ok=True)
    files = {
        "model.onnx": model_bytes(variant, dtype="float16", seed=seed),
        "model_fp32.onnx": model_bytes(variant, dtype="float32", seed=seed),
        "tokenizer.json": build_tokenizer().to_str().encode("utf-8"),
    }
    digests = {name: _write_atomic(dest / name, data) for name, data in files.items()}
    _write_atomic(stamp, json.dumps({"recipe": recipe, "sha256": digests}).encode())
    return _paths(dest, variant, seed, digests)


def _materialize_files(variant: str, dest: Path, files: dict[str, bytes]) -> dict:
    """A model generated with its own batch and no tokenizer (rmsnorm): model, fp32 twin and batch.npz."""
    dest.mkdir(parents=True, exist_ok=True)
    digests = {name: _write_atomic(dest / name, data) for name, data in files.items()}
    return {"variant": variant, "seed": None, "dir": dest, "model": dest / "model.onnx",
            "model_fp32": dest / "model_fp32.onnx", "tokenizer": None, "batch": dest / "batch.npz", "sha256": digests}


def _materialize_300m(dest: Path, seed: int) -> dict:
    """gemma-300m-synthetic: model.onnx, its external data and the tokenizer, written once per recipe.

    About 600 MB: the stamp records each file's identity (inode, size, mtime and ctime) instead of a
    digest, so a warm call costs a few stats, not a pass over the weights.
    """
    recipe = {"variant": GEMMA_300M, "seed": seed,
              "code": _code_digest(("gemma300m.py", "generator.py", "graph.py", "tokenizer.py", "names.py"))}
    names = ("model.onnx", GEMMA_300M_DATA, "tokenizer.json")
    stamp = dest / "materialized.json"
    try:
        made = json.loads(stamp.read_text())
        if made["recipe"] == recipe and all(list(_stat(dest / n)) == made["files"][n] for n in names):
            return _paths_300m(dest, seed)
    except (OSError, ValueError, KeyError):
        pass
    from . import gemma300m, graph
    from .tokenizer import build_tokenizer

    dest.mkdir(parents=True, exist_ok=True)
    tmp_data = dest / f".{GEMMA_300M_DATA}.{os.getpid()}.tmp"
    try:
        with open(tmp_data, "wb") as fh:
            model = gemma300m.build(gemma300m.PUBLISHED, seed, external=graph.ExternalData(fh, gemma300m.DATA_FILE))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_data, dest / GEMMA_300M_DATA)
    finally:
        tmp_data.unlink(missing_ok=True)
    _write_atomic(dest / "model.onnx", model.SerializeToString(deterministic=True))
    _write_atomic(dest / "tokenizer.json", build_tokenizer().to_str().encode("utf-8"))
    files = {n: list(_stat(dest / n)) for n in names}
    _write_atomic(stamp, json.dumps({"recipe": recipe, "files": files}).encode())
    return _paths_300m(dest, seed)


def existing(variant: str, dest_dir: Path, *, seed: int = DEFAULT_SEED) -> dict | None:
    """What `materialize` would return, without writing anything: the paths if the model is made already
    (the full-size model is 600 MB: listing models must not generate it), else None."""
    if variant != GEMMA_300M:
        return materialize(variant, dest_dir, seed=seed)  # the small ones are made in milliseconds
    dest = Path(dest_dir)
    try:
        made = json.loads((dest / "materialized.json").read_text())
        if made["recipe"]["seed"] == seed and all(list(_stat(dest / n)) == v for n, v in made["files"].items()):
            return _paths_300m(dest, seed)
    except (OSError, ValueError, KeyError):
        pass
    return None


def _stat(path: Path) -> list[int]:
    # the identity every memo of a file is keyed by: a copy over the weights that keeps size and mtime is seen
    return file_identity(path)


def _paths_300m(dest: Path, seed: int) -> dict:
    # No fp32 twin is written (1.2 GB): a reference in fp32 is converted on demand like any model's.
    return {"variant": GEMMA_300M, "seed": seed, "dir": dest, "model": dest / "model.onnx",
            "data": dest / GEMMA_300M_DATA, "model_fp32": None, "tokenizer": dest / "tokenizer.json"}


def _code_digest(names: tuple[str, ...] = ("generator.py", "graph.py", "tokenizer.py")) -> str:
    """The generator's own source: a change to it makes new models."""
    here = Path(__file__).parent
    h = hashlib.sha256()
    for name in names:
        h.update((here / name).read_bytes())
    return h.hexdigest()


def _paths(dest: Path, variant: str, seed: int, digests: dict) -> dict:
    return {
        "variant": variant,
        "seed": seed,
        "dir": dest,
        "model": dest / "model.onnx",
        "model_fp32": dest / "model_fp32.onnx",
        "tokenizer": dest / "tokenizer.json",
        "sha256": digests,
    }
