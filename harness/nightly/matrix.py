"""Matrices: many searches described in one TOML file, run cell by cell.

A matrix file names models, a release range, targets (arch, backend, CPU
models), session option sets and a mode; its cells are the product

    models x targets x cpus x option sets x modes

and each cell is one search over the range, run with the machinery of
`bisect run` / `bisect sweep` (harness.plan.make_plan + harness.driver.Driver).
Cells are numbered in file order, so `--cell N` means the same cell on every
machine that reads the same file (the nightly CI job matrix relies on it).

    description = "what this matrix is for"
    mode = "sweep"                        # bisect | sweep, or a list of both
    releases = { since = "1.19.0" }       # every release >= 1.19.0, newest included (re-read each run)
    # releases = { from = "1.22.1", to = "1.25.1" }
    bad_if = "nan-or-inf"                 # optional, as --bad-if
    timeout = 600                         # optional, seconds per probe (default: as --timeout's)
    python = "3.11"                       # optional, Python of the probe environments (MAJOR.MINOR)

    [[models]]
    name = "gemma-tiny-fused"             # a registered model ...
    [[models]]
    path = "models/mine.onnx"             # ... or a file (relative to the matrix file)
    inputs = "models/batch.npz"           # optional; outputs = ["y"] optional

    [[targets]]
    arch = "aarch64"
    backend = "qemu"                      # optional: auto | uv | qemu | docker
    cpus = ["neoverse-n1", "cortex-a72"]  # optional: one cell per CPU model

    [[options]]                           # optional: one cell per set (default: onnxruntime's defaults)
    graph_optimization_level = "all"      # disable | basic | extended | layout | all
    intra_op_num_threads = 1
    execution_mode = "sequential"         # sequential | parallel

Validation errors are harness.errors.UsageError (one line, exit status 2).
Targets are checked by the rules `bisect run` applies on the machine that
reads the file (harness.runners.check_target): e.g. `cpus` on a target that
runs natively there is refused, as `--cpu` would be. A file's `outputs` are
checked against the graph's; a registered model's are checked when its cell
runs (`Matrix.notes` says so). Two cells that ask the same search (an arch
and its alias, a model listed twice) are refused.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.errors import UsageError
from harness.runners import AUTO, BACKENDS, check_target
from harness.vocabulary import EXEC_MODES, GRAPH_LEVELS

TOP_KEYS = {"description", "mode", "releases", "bad_if", "timeout", "python", "models", "targets", "options"}
MODEL_KEYS = {"name", "path", "inputs", "outputs"}
TARGET_KEYS = {"arch", "backend", "cpu", "cpus"}
RANGE_KEYS = {"since", "from", "to"}
OPTION_KEYS = {"graph_optimization_level", "intra_op_num_threads", "inter_op_num_threads", "execution_mode"}
MODES = ("bisect", "sweep")
ARCHS = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
# The GitHub-hosted runner that runs an arch natively (the nightly workflow's job matrix).
RUNNERS = {"x86_64": "ubuntu-latest", "aarch64": "ubuntu-24.04-arm"}


@dataclass(frozen=True)
class Cell:
    index: int
    model: str  # registered name, or an absolute path to an .onnx file
    inputs: str | None
    outputs: tuple[str, ...]
    arch: str
    backend: str
    cpu: str | None
    options: dict
    mode: str  # bisect | sweep
    releases: dict  # {"since": X} or {"from": X, "to": Y}
    bad_if: str
    timeout: float | None  # None: as --timeout's default
    python: str

    @property
    def model_label(self) -> str:
        return Path(self.model).stem if self.model.endswith(".onnx") else self.model

    @property
    def key(self) -> str:
        """Short stable digest of what the cell asks (not of its position in the file)."""
        doc = {k: v for k, v in asdict(self).items() if k != "index"}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:10]

    @property
    def name(self) -> str:
        parts = [self.model_label, self.arch, self.backend]
        if self.cpu:
            parts.append(self.cpu)
        if self.options:
            parts.append(",".join(f"{k}={v}" for k, v in sorted(self.options.items())))
        parts.append(self.mode)
        return "/".join(parts)

    def as_json(self) -> dict:
        doc = asdict(self)
        doc.update(outputs=list(self.outputs), key=self.key, name=self.name, model_label=self.model_label,
                   runner=RUNNERS.get(self.arch, "ubuntu-latest"))
        return doc


@dataclass
class Matrix:
    path: Path
    description: str
    cells: list[Cell] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be checked without fetching a model

    @property
    def name(self) -> str:
        return self.path.stem


def _fail(path: Path, msg: str):
    raise UsageError(f"{path}: {msg}")


def _check_keys(path: Path, where: str, doc: dict, known: set[str]) -> None:
    if not isinstance(doc, dict):
        _fail(path, f"{where} must be a table")
    unknown = sorted(set(doc) - known)
    if unknown:
        _fail(path, f"unknown key {unknown[0]!r} in {where} (known: {', '.join(sorted(known))})")


def _version(path: Path, where: str, text) -> str:
    try:
        return str(Version(str(text)))
    except InvalidVersion:
        _fail(path, f"{where}: {text!r} is not a version number")


def _list_of(path: Path, where: str, value, kind) -> list:
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, kind):
            _fail(path, f"{where}: expected {getattr(kind, '__name__', kind)}, got {item!r}")
    return items


def _models(path: Path, entries, notes: list[str]) -> list[tuple[str, str | None, tuple[str, ...]]]:
    from harness.models import registry as models_mod

    if not isinstance(entries, list) or not entries:
        _fail(path, "'models' must be a non-empty list of model names or [[models]] tables")
    registered = models_mod.registered()
    out = []
    for n, entry in enumerate(entries, 1):
        where = f"[[models]] #{n}"
        if isinstance(entry, str):
            entry = {"path": entry} if models_mod.is_path(entry) and entry not in registered else {"name": entry}
        _check_keys(path, where, entry, MODEL_KEYS)
        if ("name" in entry) == ("path" in entry):
            _fail(path, f"{where}: give exactly one of 'name' (a registered model) or 'path' (an .onnx file)")
        if "name" in entry:
            model = entry["name"]
            if model not in registered:
                _fail(path, f"{where}: unknown model {model!r} (registered: {', '.join(registered)}; "
                            "or use path = \"file.onnx\")")
        else:
            model = _file(path, where, "model", entry["path"], ".onnx")
        inputs = entry.get("inputs")
        if inputs is not None:
            inputs = _file(path, where, "inputs", inputs, ".npz")
        outputs = tuple(_list_of(path, f"{where} outputs", entry.get("outputs", []), str))
        if outputs and "path" in entry:
            _check_outputs(path, where, model, outputs)
        elif outputs:
            notes.append(f"{where} outputs {', '.join(outputs)}: checked when the cell runs (the registered "
                         f"model {model} is not read here)")
        out.append((model, inputs, outputs))
    return out


def _check_outputs(path: Path, where: str, model: str, outputs: tuple[str, ...]) -> None:
    """Every name of `outputs` is an output of the model file's graph."""
    from harness.models.registry import facts_of, load_onnx

    try:
        declared = [p.name for p in facts_of(load_onnx(Path(model), "path")).outputs]
    except (UsageError, ValueError) as exc:
        _fail(path, f"{where}: {exc}")
    for name in outputs:
        if name not in declared:
            _fail(path, f"{where}: output {name!r}: the model has no such output (its outputs: {', '.join(declared)})")


def _file(path: Path, where: str, key: str, value, kind: str) -> str:
    """A file the matrix names (relative to the matrix file), as an absolute path."""
    if not isinstance(value, str) or not value:
        _fail(path, f"{where}: {key} must be a path to an {kind} file, got {value!r}")
    p = Path(value)
    p = p if p.is_absolute() else (path.parent / p)
    if p.is_dir():
        _fail(path, f"{where}: {key} {str(p)!r} is a directory, not an {kind} file")
    if not p.is_file():
        _fail(path, f"{where}: no such {key} file {str(p)!r}")
    return str(p.resolve())


def _targets(path: Path, entries) -> list[tuple[str, str, str | None]]:
    if not isinstance(entries, list) or not entries:
        _fail(path, "'targets' must be a non-empty list of [[targets]] tables (arch, backend, cpus)")
    out = []
    for n, entry in enumerate(entries, 1):
        where = f"[[targets]] #{n}"
        _check_keys(path, where, entry, TARGET_KEYS)
        arch = ARCHS.get(str(entry.get("arch", "")).strip())
        if arch is None:
            _fail(path, f"{where}: arch {entry.get('arch')!r} (choose from x86_64, aarch64)")
        backend = entry.get("backend", AUTO)
        if not isinstance(backend, str):
            _fail(path, f"{where}: backend {backend!r} (choose from {', '.join(BACKENDS)})")
        if "cpu" in entry and "cpus" in entry:
            _fail(path, f"{where}: give 'cpu' or 'cpus', not both")
        cpus = _list_of(path, f"{where} cpus", entry.get("cpus", entry.get("cpu", [])), str) or [None]
        for cpu in cpus:
            try:  # the rules `bisect run` applies, so a cell that loads is one that can run here
                check_target(backend, arch, cpu, spell=lambda key, value: f"{key} {value!r}")
            except UsageError as exc:
                _fail(path, f"{where}: {exc}")
            out.append((arch, backend, cpu))
    return out


def _options(path: Path, entries) -> list[dict]:
    if entries is None:
        return [{}]
    if not isinstance(entries, list) or not entries:
        _fail(path, "'options' must be a non-empty list of [[options]] tables")
    out = []
    for n, entry in enumerate(entries, 1):
        where = f"[[options]] #{n}"
        _check_keys(path, where, entry, OPTION_KEYS)
        lvl = entry.get("graph_optimization_level")
        if lvl is not None and lvl not in GRAPH_LEVELS:
            _fail(path, f"{where}: graph_optimization_level {lvl!r} (choose from {', '.join(GRAPH_LEVELS)})")
        em = entry.get("execution_mode")
        if em is not None and em not in EXEC_MODES:
            _fail(path, f"{where}: execution_mode {em!r} (choose from {', '.join(EXEC_MODES)})")
        for k in ("intra_op_num_threads", "inter_op_num_threads"):
            if k in entry and (not isinstance(entry[k], int) or isinstance(entry[k], bool) or entry[k] < 0):
                _fail(path, f"{where}: {k} must be an integer >= 0")
        out.append(dict(sorted(entry.items())))
    return out


def _range(path: Path, doc) -> dict:
    if not isinstance(doc, dict):
        _fail(path, "'releases' must be a table: { since = \"1.19.0\" } or { from = \"1.19.0\", to = \"1.24.1\" }")
    _check_keys(path, "releases", doc, RANGE_KEYS)
    if "since" in doc:
        if "from" in doc or "to" in doc:
            _fail(path, "releases: give 'since' alone, or 'from' and 'to'")
        return {"since": _version(path, "releases.since", doc["since"])}
    if "from" not in doc or "to" not in doc:
        _fail(path, "releases: give { since = X } or both 'from' and 'to'")
    lo, hi = _version(path, "releases.from", doc["from"]), _version(path, "releases.to", doc["to"])
    if Version(lo) > Version(hi):
        _fail(path, f"releases: empty range ({lo} is after {hi})")
    return {"from": lo, "to": hi}


def load(path: Path) -> Matrix:
    """Read and validate a matrix file; every problem is one UsageError line."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the matrix file ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from None
    _check_keys(path, "the matrix", doc, TOP_KEYS)
    for required in ("models", "targets", "releases"):
        if required not in doc:
            _fail(path, f"missing key {required!r}")
    modes = _list_of(path, "mode", doc.get("mode", "bisect"), str)
    if not modes:
        _fail(path, f"mode = []: no cells; give {' or '.join(MODES)}, or a list of both")
    for m in modes:
        if m not in MODES:
            _fail(path, f"mode {m!r} (choose from {', '.join(MODES)})")
    bad_if = doc.get("bad_if", "nan-or-inf")
    if not isinstance(bad_if, str):
        _fail(path, f"bad_if {bad_if!r}: expected a string such as \"max-abs>1e4\"")
    from harness import request

    try:  # the rules of --bad-if and --timeout, spelt as the file's keys
        predicate = request.predicate(bad_if)
        timeout = request.seconds(doc["timeout"], "timeout") if "timeout" in doc else None
    except UsageError as exc:
        _fail(path, str(exc).replace("--bad-if ", "bad_if ", 1))
    if predicate.needs_reference:
        _fail(path, f"bad_if {bad_if!r} needs a reference; matrices support the reference-free predicates only")
    python = doc.get("python", f"{sys.version_info.major}.{sys.version_info.minor}")
    if not isinstance(python, str):  # python = 3.10 is the float 3.1
        _fail(path, f"python {python!r}: give the version as a string, e.g. python = \"3.11\"")
    try:
        python = request.python_version(python, "python")
    except UsageError as exc:
        _fail(path, str(exc))
    releases = _range(path, doc["releases"])
    notes: list[str] = []
    cells, seen = [], {}
    for model, inputs, outputs in _models(path, doc["models"], notes):
        for arch, backend, cpu in _targets(path, doc["targets"]):
            for opts in _options(path, doc.get("options")):
                for mode in modes:
                    cell = Cell(len(cells), model, inputs, outputs, arch, backend, cpu, opts, mode, releases,
                                bad_if, timeout, python)
                    if cell.key in seen:  # one search twice: an arch and its alias, a model or mode listed twice
                        _fail(path, f"cells {seen[cell.key]} and {cell.index} are the same search ({cell.name}): "
                                    "list each model, target (amd64 is x86_64, arm64 is aarch64), option set "
                                    "and mode once")
                    seen[cell.key] = cell.index
                    cells.append(cell)
    return Matrix(path, str(doc.get("description", "")), cells, notes)


def resolve_range(releases_spec: dict, listing: list) -> tuple[str, str]:
    """(first, last) release of a cell's range in the current listing; "since" takes the newest. Pure."""
    versions = [r.version for r in listing]
    if "since" in releases_spec:
        lo = Version(releases_spec["since"])
        picked = [v for v in versions if Version(v) >= lo]
        if not picked:
            newest = versions[-1] if versions else "none"
            raise UsageError(f"releases since {lo}: empty range (newest release in the index: {newest})")
        return picked[0], picked[-1]
    lo, hi = Version(releases_spec["from"]), Version(releases_spec["to"])
    picked = [v for v in versions if lo <= Version(v) <= hi]
    if not picked:
        raise UsageError(f"releases {lo} .. {hi}: empty range (no release of the index in it)")
    return picked[0], picked[-1]


def select(matrix: Matrix, cells: tuple[int, ...]) -> list[Cell]:
    if not cells:
        return list(matrix.cells)
    out = []
    for i in cells:
        if not 0 <= i < len(matrix.cells):
            raise UsageError(f"--cell {i}: {matrix.path} has cells 0..{len(matrix.cells) - 1}")
        out.append(matrix.cells[i])
    return out


# -- running ------------------------------------------------------------------------------

@dataclass
class CellOutcome:
    cell: Cell
    run_id: str
    doc: dict
    probed_now: int
    reused: int


def spec_for(cell: Cell, first: str, last: str, cache_dir: Path, results_dir: Path, offline: bool):
    from harness.request import SearchSpec

    return SearchSpec(
        model=cell.model, from_=first, to=last, inputs=Path(cell.inputs) if cell.inputs else None,
        outputs=cell.outputs, arch=cell.arch, backend=cell.backend, cpu=cell.cpu, python=cell.python,
        cache_dir=cache_dir, offline=offline, results_dir=results_dir, timeout=cell.timeout, bad_if=cell.bad_if,
        session_options=dict(cell.options), margin=True,  # the dashboard's margin per release
    )


def check_cell(cell: Cell, listing: list, cache_dir: Path, results_dir: Path, offline: bool = False) -> None:
    """Everything `run_cell` would refuse about the cell, refused now: nothing is provisioned or written."""
    from harness.request import check

    first, last = resolve_range(cell.releases, listing)
    check(spec_for(cell, first, last, cache_dir, results_dir, offline))


def run_cell(matrix: Matrix, cell: Cell, cache_dir: Path, results_dir: Path, offline: bool = False,
             refresh: bool = False, jobs: int = 1, observer=None, listing: list | None = None,
             command: list[str] | None = None, log=lambda msg: None) -> CellOutcome:
    """One cell, exactly as `bisect run` / `bisect sweep` would search it; returns its summary."""
    from harness.plan import make_plan
    from harness.request import release_listing
    from harness.session import run_search

    if listing is None:
        listing = release_listing(cache_dir, offline)
    first, last = resolve_range(cell.releases, listing)
    plan = make_plan(spec_for(cell, first, last, cache_dir, results_dir, offline), command or sys.argv, log)
    extra = {"cell": cell.as_json(),
             "matrix": {"name": matrix.name, "path": str(matrix.path), "description": matrix.description}}
    found = run_search(plan, sweep=cell.mode == "sweep", observer=observer, jobs=jobs, refresh=refresh,
                       cell_key=cell.key, extra=extra)
    reused = sum(1 for p in found.doc["probes"] if p["reused"])
    return CellOutcome(cell, plan.store.run_id, found.doc, len(found.outcome.probed_now), reused)
