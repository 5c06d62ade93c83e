"""The batch a probe feeds: a user's .npz, or a registered repro batch tokenized once."""

from __future__ import annotations

import hashlib
import math
import os
import zipfile
from pathlib import Path

import numpy as np

from harness.errors import UsageError
from harness.models.registry import Facts, ResolvedModel, batch_spec, user_file

MASK_INPUT = "attention_mask"  # a token model's padding mask: rows are as long as their 1s


MAX_NPZ_BYTES = 1 << 30  # the arrays of one .npz, as its members' headers declare them; a real batch is MBs
NPY_MAGIC = b"\x93NUMPY"


def load_npz(path: Path, flag: str = "--inputs") -> dict[str, np.ndarray]:
    """The arrays of an .npz file the user named with `flag`; anything unreadable is a UsageError. Each member's
    .npy header is read first: arrays declaring more than MAX_NPZ_BYTES in all (a zip bomb of zeros is a few
    MB on disk) are refused before any of their data is read, and so is a name given twice (numpy would read
    the last one silently)."""
    path = user_file(path, flag, ".npz")
    try:
        with zipfile.ZipFile(path) as archive:
            members = _npz_members(archive, path, flag)
            arrays = {}
            for name, info in members.items():
                with archive.open(info) as stream:
                    arrays[name] = np.lib.format.read_array(stream, allow_pickle=False)
            return arrays
    except UsageError:
        raise
    except zipfile.BadZipFile:
        if _starts_with(path, NPY_MAGIC):
            raise UsageError(f"{flag} {path}: a single array (.npy), not an .npz archive of named arrays") from None
        raise UsageError(f"{flag} {path}: not a readable .npz file (BadZipFile)") from None
    except Exception as exc:  # numpy, zipfile and zlib each raise their own on a damaged file
        raise UsageError(f"{flag} {path}: not a readable .npz file ({type(exc).__name__})") from None


def _npz_members(archive: zipfile.ZipFile, path: Path, flag: str) -> dict[str, zipfile.ZipInfo]:
    """The archive's arrays by name (as numpy names them: without `.npy`), each header read and checked: one
    member per name, each an .npy array without objects, all of them within MAX_NPZ_BYTES."""
    members: dict[str, zipfile.ZipInfo] = {}
    total = 0
    for info in archive.infolist():
        name = info.filename[:-len(".npy")] if info.filename.endswith(".npy") else info.filename
        if name in members:
            raise UsageError(f"{flag} {path}: holds two arrays named {name!r}: which one is the batch's is not "
                             "clear (numpy reads the last)")
        members[name] = info
        with archive.open(info) as stream:
            try:
                version = np.lib.format.read_magic(stream)
            except ValueError:
                raise UsageError(f"{flag} {path}: member {info.filename!r} is not an .npy array") from None
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(stream)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(stream)
            else:
                raise UsageError(f"{flag} {path}: member {info.filename!r} is an .npy array of format "
                                 f"{version[0]}.{version[1]}, not 1.0 or 2.0")
        if dtype.hasobject:
            raise UsageError(f"{flag} {path}: {name!r} holds Python objects (a pickle), not numbers")
        total += math.prod(shape) * dtype.itemsize
        if total > MAX_NPZ_BYTES:
            raise UsageError(f"{flag} {path}: its arrays come to {total / (1 << 30):.1f} GiB with {name!r} "
                             f"({dtype.name} {shape}), over the {MAX_NPZ_BYTES >> 30} GiB an .npz may hold "
                             "(refused before reading them)")
    return members


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _spell(dims: list) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in dims) + ")"


def _names_a_size(dim: str) -> bool:
    """Whether a symbolic dim's name says one size: `?` and a blank name are exporters' way of saying
    "unknown" (paddle2onnx names both H and W of an image `?`), and onnxruntime binds nothing by them."""
    return dim.strip() not in ("", "?")


def check_inputs(facts: Facts, arrays: dict[str, np.ndarray], source: str = "the batch",
                 warnings: list[str] | None = None) -> dict[str, int]:
    """The arrays against the model's graph inputs: names, element types, ranks, static dims, rows.

    `source` says where the arrays came from (`--inputs batch.npz`). Returns
    the size of each symbolic dim (batch=20, ...) that is the same in every
    input that names it. A name given two sizes is appended to `warnings`, not
    refused: onnxruntime does not hold a batch to its symbolic names, and runs it.
    """
    wanted = {p.name: p for p in facts.inputs}
    missing = sorted(set(wanted) - set(arrays))
    extra = sorted(set(arrays) - set(wanted))
    if missing or extra:
        raise UsageError(
            f"{source}: inputs do not match the model: missing {missing or 'none'}, unexpected {extra or 'none'} "
            f"(model inputs: {sorted(wanted)})"
        )
    bound: dict[str, tuple[int, str]] = {}
    split: set[str] = set()  # names given two sizes: no size of theirs is returned
    for name, port in wanted.items():
        got = arrays[name]
        expected = np.dtype(port.dtype) if port.dtype else None  # None: a type numpy has no name for
        if expected is not None and got.dtype != expected:
            raise UsageError(f"{source}: input {name}: dtype {got.dtype}, the model expects {expected}")
        dims = port.dims
        if dims is not None and len(dims) != got.ndim:
            raise UsageError(f"{source}: input {name}: rank {got.ndim}, the model expects {len(dims)}")
        if got.ndim and got.shape[0] == 0:
            raise UsageError(f"{source}: the batch has zero rows (input {name} has shape {got.shape})")
        for d, n in zip(dims or [], got.shape):
            if isinstance(d, int) and d > 0 and d != n:
                raise UsageError(f"{source}: input {name}: shape {got.shape}, the model expects {_spell(dims)}")
            if isinstance(d, str) and _names_a_size(d):
                if d in bound and bound[d][0] != n and d not in split:
                    split.add(d)
                    if warnings is not None:
                        warnings.append(f"{source}: input {name} has {d}={n} but input {bound[d][1]} has "
                                        f"{d}={bound[d][0]}: onnxruntime runs such a batch, so it is run as it is")
                bound.setdefault(d, (n, name))
    return {d: n for d, (n, _) in bound.items() if d not in split}


def check_reference(facts: Facts, sizes: dict[str, int], reference: dict[str, np.ndarray],
                    outputs: tuple[str, ...], source: str) -> None:
    """Reference outputs against the outputs a probe checks: one numeric array per output, of its shape.

    Shapes are checked where the model declares them: static dims exactly,
    symbolic ones (batch, ...) against their `sizes` in the batch (from check_inputs).
    """
    declared = {p.name: p for p in facts.outputs}
    checked = list(outputs) or list(declared)
    missing = [n for n in checked if n not in reference]
    extra = sorted(set(reference) - set(checked))
    if missing or extra:
        raise UsageError(f"{source}: arrays {sorted(reference)} do not match the outputs checked "
                         f"({', '.join(checked)}): missing {missing or 'none'}, unexpected {extra or 'none'}")
    for name in checked:
        got = reference[name]
        if not (np.issubdtype(got.dtype, np.number) or got.dtype == np.bool_):
            raise UsageError(f"{source}: {name} holds {got.dtype} values, not numbers")
        dims = declared[name].dims if name in declared else None
        if dims is None:
            continue
        want = [sizes.get(d) if isinstance(d, str) else (d or None) for d in dims]
        if len(want) != got.ndim or any(w is not None and w != n for w, n in zip(want, got.shape)):
            shown = [f"{d}={sizes[d]}" if isinstance(d, str) and d in sizes else d for d in dims]
            raise UsageError(f"{source}: {name} has shape {got.shape}, the model's output {name} with this batch "
                             f"is {_spell(shown)}")


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
    """The registered model's repro batch as .npz, tokenized once and kept in the cache (or the batch a
    generated model comes with)."""
    if model.batch_file is not None:
        return model.batch_file
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


def batch_rows(arrays: dict[str, np.ndarray]) -> int | None:
    """How many rows the batch has (its inputs' shared axis 0), or None when its inputs share no such axis: a
    scalar input (silero-vad's sample rate) or one whose batch is not its first axis (its state, [2, N, 128])."""
    firsts = {v.shape[0] if v.ndim else None for v in arrays.values()}
    return firsts.pop() if len(firsts) == 1 and None not in firsts else None


def batch_axes(dims: dict[str, tuple | None], arrays: dict[str, np.ndarray]) -> dict[str, int | None] | None:
    """Each input's batch axis as the model's dims show it (None: an input without one, kept whole), or None
    when they show none the batch agrees with.

    The batch is the named dim (`dims`: each graph input's dims, a str for a named one) the most inputs carry,
    at axis 0 first on a tie, of one size in every array that carries it: silero-vad's `input` [N, 512] and
    `state` [2, N, 128] share N, on axes 0 and 1; `sr` has none. A model whose dims name nothing (fixed
    shapes) has its inputs' shared axis 0, as batch_rows reads it."""
    named: dict[str, dict[str, int]] = {}
    for name, a in arrays.items():
        for axis, d in enumerate((dims.get(name) or ())[:a.ndim]):
            if isinstance(d, str) and d and a.ndim == len(dims[name]):
                named.setdefault(d, {}).setdefault(name, axis)
    agreed = {d: at for d, at in named.items() if len({arrays[n].shape[a] for n, a in at.items()}) == 1}
    if agreed:
        first = next(iter(arrays))
        best = max(agreed, key=lambda d: (len(agreed[d]), 0 in agreed[d].values(), agreed[d].get(first, -1) == 0))
        return {name: agreed[best].get(name) for name in arrays}
    return {name: 0 for name in arrays} if batch_rows(arrays) is not None else None


def axes_rows(arrays: dict[str, np.ndarray], axes: dict[str, int | None]) -> int | None:
    """How many rows the batch has along `axes` (batch_axes), or None when no input has a batch axis."""
    sizes = {arrays[k].shape[a] for k, a in axes.items() if a is not None and k in arrays}
    return sizes.pop() if len(sizes) == 1 else None


def take_rows(arrays: dict[str, np.ndarray], rows: list[int], axes: dict[str, int | None] | None = None
              ) -> dict[str, np.ndarray]:
    """The batch cut to `rows` (axis 0, or each input's axis of `axes`: None keeps it whole), and, for token
    inputs, to the longest kept row."""
    axes = axes if axes is not None else {k: 0 for k in arrays}
    cut = {k: np.ascontiguousarray(np.take(v, rows, axis=axes[k])) if axes.get(k) is not None else v
           for k, v in arrays.items()}
    mask = cut.get(MASK_INPUT)
    if mask is not None and mask.ndim == 2 and mask.any() and axes.get(MASK_INPUT) == 0:
        length = int(np.nonzero(mask.any(axis=0))[0].max()) + 1
        width = mask.shape[1]
        cut = {k: np.ascontiguousarray(v[:, :length]) if v.ndim >= 2 and v.shape[1] == width else v
               for k, v in cut.items()}
    return cut


def bad_rows(outputs: dict[str, np.ndarray], names: list[str] | None = None,
             axes: dict[str, int | None] | None = None) -> list[int]:
    """Rows (axis 0, or each output's axis of `axes`) with a NaN or Inf in any of the outputs."""
    bad = None
    for name, a in outputs.items():
        if names and name not in names or a.dtype.kind not in "fc" or a.ndim == 0:
            continue
        axis = 0 if axes is None else axes.get(name)
        if axis is None or axis >= a.ndim:
            continue
        a = np.moveaxis(a, axis, 0)
        rows = ~np.isfinite(a.reshape(a.shape[0], -1)).all(axis=1)
        bad = rows if bad is None else (bad | rows if bad.shape == rows.shape else bad)
    return [] if bad is None else [int(i) for i in np.nonzero(bad)[0]]


def row_lengths(arrays: dict[str, np.ndarray]) -> list[int]:
    """Each row's tokens (of the padding mask); 0 for every row of a batch without one."""
    n = next(iter(arrays.values())).shape[0]
    mask = arrays.get(MASK_INPUT)
    return [int(v) for v in mask.reshape(n, -1).sum(axis=1)] if mask is not None and mask.ndim >= 2 else [0] * n


def rows_by_length(arrays: dict[str, np.ndarray]) -> list[int]:
    """Row indices, longest first (tokens of the padding mask; ties and mask-less batches in row order).

    Without a better ranking (harness.triage.scout), the longest rows are the likeliest
    to hold what overflows: the fewest-rows search tries them first.
    """
    lengths = row_lengths(arrays)
    return sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))


def length_chunks(arrays: dict[str, np.ndarray], keep: float = 2 / 3) -> list[list[int]]:
    """Every row once, in groups of similar length (longest first): a group starts where a row is shorter
    than `keep` of its group's first row, so a group cut to its longest row wastes little on padding.

    A batch without a padding mask is one group: its rows are all as long as the batch.
    """
    order = rows_by_length(arrays)
    mask = arrays.get(MASK_INPUT)
    if mask is None or mask.ndim < 2:
        return [order]
    lengths = mask.reshape(mask.shape[0], -1).sum(axis=1)
    chunks: list[list[int]] = []
    for i in order:
        if chunks and lengths[i] >= keep * lengths[chunks[-1][0]]:
            chunks[-1].append(i)
        else:
            chunks.append([i])
    return chunks
