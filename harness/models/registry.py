"""Which model a probe runs: a registered name (hub or generated) or a local file.

The registry is data: one TOML file per model in `harness/models/cards/`, so
adding a model needs no code. Hub models are always fetched at a pinned
commit with huggingface_hub; nothing is ever taken from a moving branch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import UsageError
from harness.graphs.external import ExternalTensor, location_problem
from harness.results.store import write_atomic
from harness.worker import file_identity

if TYPE_CHECKING:
    import onnx

REGISTRY = Path(__file__).resolve().parent / "cards"
COMMIT = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class ModelSpec:
    name: str
    source: str  # hub | generated | local
    description: str = ""
    outputs: tuple[str, ...] = ()
    batch: str | None = None  # name of a batch in registry/batches
    repo: str | None = None
    revision: str | None = None
    model_file: str | None = None
    extra_files: tuple[str, ...] = ()
    tokenizer_file: str | None = None
    generator: str | None = None  # variant name for source = "generated"
    # a hub model's stand-in where the hub cannot be reached: the embedded model and the flags that show its case
    stand_in: str | None = None
    stand_in_shows: str = ""


@dataclass(frozen=True)
class Port:
    """A graph input or output, as the checks before a probe read it."""
    name: str
    dtype: str | None  # numpy's name of its element type; None for a type numpy has no name for
    dims: tuple | None  # per dim: an int (static), a name (symbolic) or None (unknown); None if unranked


@dataclass(frozen=True)
class Facts:
    """What the checks before a probe read of a model's graph.

    Read from the file once and kept in the cache by its path and identity (settled_identity), like
    its digest: a warm `bisect run` neither imports onnx nor parses the graph
    (together about 2 s of every run's start-up).
    """
    inputs: tuple[Port, ...]  # graph inputs that are not initializers: what a batch feeds
    outputs: tuple[Port, ...]
    tensors: frozenset[str]  # every node output and graph output (what --dump may name)
    nodes: frozenset[str]  # every node's key (what --node may name)
    external: tuple[ExternalTensor, ...]  # each tensor kept in an external data file: which file, which bytes
    fp16: bool  # any fp16 value or weight (else the model is its own fp32 version)

    @property
    def data_files(self) -> tuple[str, ...]:
        """The external data locations, relative to the model."""
        return tuple(sorted({x.location for x in self.external}))

    def to_json(self) -> dict:
        return {"inputs": [[p.name, p.dtype, p.dims] for p in self.inputs],
                "outputs": [[p.name, p.dtype, p.dims] for p in self.outputs],
                "tensors": sorted(self.tensors), "nodes": sorted(self.nodes),
                "external": [[x.tensor, x.location, x.offset, x.length] for x in self.external], "fp16": self.fp16}

    @classmethod
    def from_json(cls, doc: dict) -> "Facts":
        def ports(rows):
            return tuple(Port(n, d, None if dims is None else tuple(dims)) for n, d, dims in rows)

        return cls(ports(doc["inputs"]), ports(doc["outputs"]), frozenset(doc["tensors"]), frozenset(doc["nodes"]),
                   tuple(ExternalTensor(*x) for x in doc["external"]), bool(doc["fp16"]))


@dataclass
class ResolvedModel:
    spec: ModelSpec
    path: Path
    facts: Facts
    data_files: list[Path] = field(default_factory=list)
    tokenizer: Path | None = None
    digest: str = ""
    batch_file: Path | None = None  # a generated model's own batch (no tokenizer to make one)

    @property
    def name(self) -> str:
        return self.spec.name


def registered() -> dict[str, ModelSpec]:
    specs = {}
    for f in sorted(REGISTRY.glob("*.toml")):
        doc = tomllib.loads(f.read_text())
        for key in ("outputs", "extra_files"):
            doc[key] = tuple(doc.get(key, ()))
        specs[f.stem] = ModelSpec(name=f.stem, **doc)
    return specs


def batch_spec(name: str) -> dict:
    path = REGISTRY / "batches" / f"{name}.toml"
    if not path.exists():
        raise UsageError(f"unknown batch {name!r}")
    return tomllib.loads(path.read_text())


def is_path(text: str) -> bool:
    return text.endswith(".onnx") or os.sep in text or Path(text).exists()


def resolve(model: str, cache_dir: Path, offline: bool = False) -> ResolvedModel:
    """A registered name or a path to an .onnx file, checked and digested (`offline`: hub files from the cache only)."""
    if is_path(model):
        spec = ModelSpec(name=Path(model).stem, source="local")
        return check_local(Path(model), spec, cache_dir)
    specs = registered()
    if model not in specs:
        raise UsageError(f"--model {model}: unknown model (registered: {', '.join(specs)}; or give a path to an .onnx file)")
    spec = specs[model]
    if spec.source == "hub":
        files = fetch_hub(spec, offline)
        resolved = check_local(hub_probe_copy(spec, files, cache_dir), spec, cache_dir)
        resolved.tokenizer = files.get(spec.tokenizer_file) if spec.tokenizer_file else None
        return resolved
    if spec.source == "generated":
        from harness.models import embedded

        made = embedded.materialize(spec.generator, cache_dir / "models" / spec.name)
        resolved = check_local(Path(made["model"]), spec, cache_dir)
        resolved.tokenizer = Path(made["tokenizer"]) if made.get("tokenizer") else None
        resolved.batch_file = Path(made["batch"]) if made.get("batch") else None
        return resolved
    raise UsageError(f"model {spec.name}: unknown source {spec.source!r}")


HUB_TIMEOUT_S = 3.0  # one try to reach the hub before falling back to its cache


def hub_reachable() -> bool:
    """Whether the hub answers at all, asked once with a short timeout (through the proxies huggingface_hub
    uses): unreachable, hf_hub_download would retry each file for about 25 s before failing."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=HUB_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - any failure to connect means the same: work from the cache
        return False
    return True


def fetch_hub(spec: ModelSpec, offline: bool = False) -> dict[str, Path]:
    """Download (or find in the huggingface_hub cache) every file of a hub model at its pinned commit.

    `offline` (or HF_HUB_OFFLINE, or a hub that does not answer) takes them from the huggingface_hub cache only.
    """
    if not spec.revision or not COMMIT.fullmatch(spec.revision):
        raise UsageError(f"model {spec.name}: revision {spec.revision!r} is not a pinned 40-hex commit; refusing to fetch")
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    from huggingface_hub.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # its retry warnings are noise: the one line below says what happened
    offline = offline or os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
    names = [spec.model_file, *spec.extra_files] + ([spec.tokenizer_file] if spec.tokenizer_file else [])
    files = {}
    for name in names:
        try:
            path = Path(hf_hub_download(spec.repo, name, revision=spec.revision, local_files_only=True))
        except LocalEntryNotFoundError:
            if offline or not hub_reachable():
                raise UsageError(_not_cached(spec, name)) from None
            try:
                path = Path(hf_hub_download(spec.repo, name, revision=spec.revision))
            except LocalEntryNotFoundError:
                raise UsageError(_not_cached(spec, name)) from None
            except (HfHubHTTPError, OSError) as exc:
                raise UsageError(f"model {spec.name}: cannot fetch {name}: {exc}".splitlines()[0]) from None
        if f"/snapshots/{spec.revision}/" not in path.as_posix():
            raise UsageError(f"model {spec.name}: {name} resolved outside revision {spec.revision[:12]}: {path}")
        files[name] = path
    return files


def _not_cached(spec: ModelSpec, name: str) -> str:
    """The one line for a hub model that is neither cached nor reachable: what works without the hub (the card's
    stand-in, the other embedded models, a copy of the file, which has no default batch: the model's own is
    made with the hub's tokenizer)."""
    generated = [n for n, s in registered().items() if s.source == "generated"]
    stand_in = (f"--model {spec.stand_in} shows its case without the hub ({spec.stand_in_shows}); "
                if spec.stand_in else "")
    others = ", ".join(n for n in generated if not spec.stand_in or n != spec.stand_in.split()[0])
    return (f"model {spec.name}: {name} at revision {spec.revision[:12]} is not in the huggingface_hub cache and "
            f"the hub cannot be reached (--offline, HF_HUB_OFFLINE or no network); {stand_in}other embedded models: "
            f"{others}; a copy of the export: --model PATH --inputs FILE.npz (a file has no default batch: "
            f"{spec.name}'s is made with its tokenizer, from the hub)")


def hub_probe_copy(spec: ModelSpec, files: dict[str, Path], cache_dir: Path) -> Path:
    """The model and its external data as plain files in one directory of the cache.

    The huggingface_hub cache keeps files as symlinks into blobs/, and
    onnxruntime from 1.24.1 on refuses external data whose real path leaves the
    model's directory: each probe would be an *error* there. Hard links (a copy
    across filesystems) make the files the directory's own, without a copy.
    """
    dest = cache_dir / "models" / f"{spec.name}-{spec.revision[:12]}"
    for name in (spec.model_file, *spec.extra_files):
        link_or_copy(files[name].resolve(), dest / name)
    return dest / spec.model_file


def link_or_copy(src: Path, dst: Path) -> None:
    if dst.exists() and os.path.samefile(src, dst):
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def text_name(path: Path, flag: str) -> Path:
    """`path` if its name is text (UTF-8): records, keys and messages hold it as text, and a name with other bytes
    (which Python holds as lone surrogates) could be written nowhere. Else a UsageError showing those bytes."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(str(path)).decode("utf-8", "backslashreplace")
        raise UsageError(f"{flag} {shown}: the name is not UTF-8 text; rename it") from None
    return Path(path)


def user_file(path: Path, flag: str, kind: str) -> Path:
    """`path` if it is a file; else a UsageError naming `flag` and what the path is instead (kind: ".onnx")."""
    path = text_name(path, flag)
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a directory, not an {kind} file")
    if not path.is_file():
        raise UsageError(f"{flag} {path}: no such file")
    return path


def load_onnx(path: Path, flag: str = "--model") -> onnx.ModelProto:
    """The model file the user named with `flag`, without its external data; anything else is a UsageError."""
    import onnx

    path = user_file(path, flag, ".onnx")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf raises its own DecodeError, onnx others
        raise UsageError(f"{flag} {path}: not a readable ONNX model ({type(exc).__name__})") from None
    if not proto.graph.node:
        raise UsageError(f"{flag} {path}: the graph has no nodes")
    return proto


def check_local(path: Path, spec: ModelSpec, cache_dir: Path) -> ResolvedModel:
    facts = model_facts(path, cache_dir)
    data_files = external_data_files(path, facts)
    return ResolvedModel(spec=spec, path=path, facts=facts, data_files=data_files,
                         digest=files_digest([path, *data_files], cache_dir))


def model_facts(path: Path, cache_dir: Path, flag: str = "--model") -> Facts:
    """The Facts of the model file at `path`: from the cache, else read (refusing what onnx cannot read) and kept."""
    path = user_file(path, flag, ".onnx")
    identity = settled_identity(path)
    memo = None
    if identity is not None:
        key = hashlib.sha256(f"{path.resolve()}:{identity}".encode()).hexdigest()[:32]
        memo = Path(cache_dir) / "model-facts" / f"{key}.json"
        try:
            return Facts.from_json(json.loads(memo.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            pass
    try:
        facts = facts_of(load_onnx(path, flag))
    except ValueError as exc:  # external data entries that are not numbers
        raise UsageError(f"{flag} {path}: {exc}") from None
    if memo is not None:
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(memo, json.dumps(facts.to_json()))
        except OSError:
            pass  # a read-only cache: read the graph again next time
    return facts


def facts_of(proto: onnx.ModelProto) -> Facts:
    """The Facts of a loaded model (or of a graph made in memory); ValueError for unreadable external data entries."""
    from harness.graphs.external import external_tensors
    from harness.graphs.fp32 import has_fp16
    from harness.graphs.surgery import node_key

    g = proto.graph
    inits = {i.name for i in g.initializer}
    return Facts(inputs=tuple(_port(i) for i in g.input if i.name not in inits),
                 outputs=tuple(_port(o) for o in g.output),
                 tensors=frozenset({o for n in g.node for o in n.output if o} | {o.name for o in g.output}),
                 nodes=frozenset(node_key(n) for n in g.node), external=tuple(external_tensors(proto)),
                 fp16=has_fp16(proto))


def external_data_files(path: Path, facts: Facts) -> list[Path]:
    """The external data files of the model at `path`, each where onnxruntime will read it: a location inside the
    model's directory, a file there (by its real path, through any link), long enough for every tensor's bytes.
    Anything else is refused before a probe (one line naming the tensor and the file): every probe would read
    another file, or fail."""
    for x in facts.external:
        problem = location_problem(x.location)
        if problem:
            raise UsageError(f"--model {path}: tensor {x.tensor}: external data location {x.location!r} {problem}")
    sizes: dict[str, int] = {}
    home = path.parent.resolve()
    for name in facts.data_files:
        f = path.parent / name
        if not f.is_file():
            raise UsageError(f"--model {path}: external data file {name} is missing (expected next to the model)")
        # the location is checked as written; a link (of the file or of a folder on its way) may still lead out,
        # and onnxruntime from 1.24.1 on refuses such a file, so the other releases' verdicts would be on a file
        # of somewhere else
        real = f.resolve()
        if not real.is_relative_to(home):
            raise UsageError(f"--model {path}: external data file {name} is a link to {real}, outside the model's "
                             "directory (copy the file there)")
        sizes[name] = f.stat().st_size
    for x in facts.external:
        end = x.offset + (x.length or 0)
        if end > sizes[x.location]:
            raise UsageError(f"--model {path}: tensor {x.tensor}: external data file {x.location} holds "
                             f"{sizes[x.location]} bytes, the tensor's are bytes {x.offset}..{end} (truncated?)")
    return [path.parent / name for name in facts.data_files]


def _port(value_info) -> Port:
    from onnx.helper import tensor_dtype_to_np_dtype

    t = value_info.type.tensor_type
    try:
        dtype = str(tensor_dtype_to_np_dtype(t.elem_type))
    except (KeyError, TypeError, ValueError):
        dtype = None  # a type numpy has no name for: the release decides
    dims = None
    if t.HasField("shape"):
        dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
    return Port(value_info.name, dtype, dims)


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in chunks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def digest_of(file_sha256s: list[str]) -> str:
    """A model's digest (a run key's `model`) from the sha256 of each of its files: the model, then its data."""
    h = hashlib.sha256()
    for hexdigest in file_sha256s:
        h.update(hexdigest.encode())
    return h.hexdigest()


def settled_identity(path: Path) -> list[int] | None:
    """`path`'s file identity (worker.file_identity), the key of every memo of a file's content; None while its
    last change is too recent to key a memo: a change in the same clock tick could leave the ctime as it is.
    A ctime in whole milliseconds comes from a filesystem that keeps coarse times (FAT, HFS+, some network
    ones: up to 2 s); otherwise the kernel's coarse clock, a tick of at most 10 ms."""
    identity = file_identity(path)
    ctime = identity[4]
    slack = 2_000_000_000 if ctime % 1_000_000 == 0 else 50_000_000
    return identity if ctime < time.time_ns() - slack else None


def files_digest(paths: list[Path], cache_dir: Path) -> str:
    """sha256 over the files' bytes, memoised by each file's identity (inode, size, mtime and ctime, which a copy
    keeping size and mtime cannot forge): a 1 GB model is hashed once, and again whenever it is changed."""
    memo_path = cache_dir / "digests.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if not isinstance(memo, dict):
        memo = {}
    hashes = []
    changed = False
    for p in paths:
        name = str(p.resolve())
        identity = settled_identity(p)
        entry = memo.get(name)
        if (identity is not None and isinstance(entry, dict) and entry.get("identity") == identity
                and isinstance(entry.get("sha256"), str) and re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])):
            hashes.append(entry["sha256"])
            continue
        hashes.append(file_sha256(p))
        if identity is not None:  # one entry per file: the memo does not grow with each change
            memo[name] = {"identity": identity, "sha256": hashes[-1]}
            changed = True
    if changed:
        try:
            memo_path.parent.mkdir(parents=True, exist_ok=True)
            # entries of the former (path, size, mtime) keys are dropped: a copy could fool them
            write_atomic(memo_path, json.dumps({k: v for k, v in memo.items() if isinstance(v, dict)}))
        except OSError:
            pass
    return digest_of(hashes)


def describe(spec: ModelSpec, cache_dir: Path) -> dict:
    """What `bisect models` shows: source, size, inputs/outputs, default batch.

    Small generated models are made on the spot; the full-size one and hub
    models are described from the cache only, never generated or downloaded here.
    """
    row = {"name": spec.name, "source": spec.source, "description": spec.description, "batch": spec.batch,
           "outputs_checked": list(spec.outputs), "size_bytes": None, "inputs": None, "outputs": None}
    if spec.source == "hub":
        row["origin"] = f"{spec.repo}@{spec.revision[:12]}/{spec.model_file}"
        path = _cached_hub_file(spec)
    else:
        from harness.models import embedded

        made = embedded.existing(spec.generator, cache_dir / "models" / spec.name)
        path = Path(made["model"]) if made else None  # a large one not made yet: described once it is
        row["origin"] = f"generated by harness.models.embedded ({spec.generator})"
    if path is not None:
        facts = model_facts(path, cache_dir)
        row["inputs"] = [_signature(p) for p in facts.inputs]
        row["outputs"] = [_signature(p) for p in facts.outputs]
        row["size_bytes"] = sum(p.stat().st_size for p in {path, *(path.parent / f for f in facts.data_files)}
                                if p.exists())
    return row


def _cached_hub_file(spec: ModelSpec) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(spec.repo, spec.model_file, revision=spec.revision)
    return Path(found) if isinstance(found, str) else None


def _signature(port: Port) -> str:
    dims = ["?" if d is None else str(d) for d in port.dims or ()]
    return f"{port.name}: {port.dtype}[{', '.join(dims)}]"
