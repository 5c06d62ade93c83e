"""Matrices: many searches described in one TOML file, run cell by cell.

This module holds one concept, the matrix file: its keys, each checked as the `bisect run` flag it spells,
and the cells they make.

A matrix file names models, a release range, targets (arch, backend, CPU
models), the packages and execution providers to probe, session option sets,
the question (predicate, reference, rows) and a mode; its cells are the product

    models x targets x cpus x providers x option sets x modes

and each cell is one search over the range, run with the machinery of
`bisect run` / `bisect sweep` (harness.request.check, harness.plan.make_plan,
harness.session.run_search; `rows = "fewest"`: harness.triage.rows.search).
Cells are numbered in file order, so `--cell N` means the same cell on every
machine that reads the same file (the nightly CI job matrix relies on it).

    description = "what this matrix is for"
    mode = "sweep"                        # bisect | sweep, or a list of both
    releases = { since = "1.19.0" }       # every release >= 1.19.0, newest included (re-read each run)
    # releases = { from = "1.22.1", to = "1.25.1" }
    bad_if = "nan-or-inf"                 # optional, as --bad-if: "cosine<0.999", "rel-diff>1e-2" compare ...
    reference = "fp32"                    # ... with a reference: fp32, or a .npz file (relative to the matrix file)
    # reference_release = "1.23.2"        # ... or the outputs of a release (--reference-release)
    rows = "fewest"                       # optional, as --rows: all | fewest (mode bisect only)
    timeout = 600                         # optional, seconds per probe (default: as --timeout's)
    time_budget = 60                      # optional, as --time-budget: seconds a slower>R / rss>R probe re-measures
    python = "3.11"                       # optional, Python of the probe environments (MAJOR.MINOR)

    [[models]]
    name = "gemma-tiny-fused"             # a registered model ...
    [[models]]
    path = "models/mine.onnx"             # ... or a file (relative to the matrix file)
    inputs = "models/batch.npz"           # optional; outputs = ["y"] optional
    bad_if = "cosine<0.999"               # optional: the model's own bad_if, reference or reference_release,
    reference = "fp32"                    #   rows win over the matrix's (its reference replaces both of them)

    [[targets]]
    arch = "aarch64"
    backend = "qemu"                      # optional: auto | uv | qemu | docker
    cpus = ["neoverse-n1", "cortex-a72"]  # optional: one cell per CPU model

    [[providers]]                         # optional: one cell per entry (default: onnxruntime on the CPU provider)
    # binding = "node"                    # optional, as --binding: python | node | web (npm's packages)
    package = "onnxruntime-openvino"      # as --package: onnxruntime | onnxruntime-openvino | onnxruntime-gpu
    ep = "openvino"                       # as --ep (cpu, openvino, cuda) or onnxruntime's OpenVINOExecutionProvider
    ep_options = { device_type = "CPU" }  # optional, as --ep-option KEY=VALUE (not for the CPU provider)
    name = "openvino-cpu"                 # optional: the cell's label
    releases = { from = "1.23.0", to = "1.24.1" }  # optional: the package's own range (it ships other releases)
    # index_url = "https://example.org/simple"   # optional, as --index-url (a text or a list)
    # find_links = ["wheels/"]                    # optional, as --find-links (relative to the matrix file)
    # pre = true                                  # optional, as --pre: development builds and pre-releases

    [[options]]                           # optional: one cell per set (default: onnxruntime's defaults)
    graph_optimization_level = "all"      # disable | basic | extended | layout | all
    intra_op_num_threads = 1
    execution_mode = "sequential"         # sequential | parallel

Validation errors are harness.errors.UsageError (one line, exit status 2),
naming the file and the table. Every value is checked by the functions that
check `bisect run`'s flags (harness.request: the package and provider, the
predicate and its reference, --timeout, --python; harness.triage.rows.check:
`rows`); targets by the rules `bisect run` applies on the machine that reads
the file (harness.runners.check_target): e.g. `cpus` on a target that runs
natively there is refused, as `--cpu` would be. A file's `outputs` are
checked against the graph's; a registered model's are checked when its cell
runs (`Matrix.notes` says so). Two cells that ask the same search (an arch
and its alias, a model or a provider listed twice) are refused.

Running the cells, and skipping those whose device is missing here: harness.nightly.cells.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.errors import UsageError
from harness.releases.credentials import redact
from harness.releases.packages import Package
from harness.runners import AUTO, BACKENDS, check_target
from harness.vocabulary import (
    BINDINGS,
    DEFAULT_BINDING,
    DEFAULT_EP,
    DEFAULT_PACKAGE,
    EXEC_MODES,
    GRAPH_LEVELS,
    PROVIDERS,
)

QUESTION_KEYS = {"bad_if", "reference", "reference_release", "rows"}  # at the top, or a model's own
TOP_KEYS = {"description", "mode", "releases", "timeout", "time_budget", "python", "models", "targets", "providers", "options",
            *QUESTION_KEYS}
MODEL_KEYS = {"name", "path", "inputs", "outputs", *QUESTION_KEYS}
TARGET_KEYS = {"arch", "backend", "cpu", "cpus"}
PROVIDER_KEYS = {"binding", "package", "ep", "ep_options", "name", "releases", "index_url", "find_links", "pre"}
RANGE_KEYS = {"since", "from", "to"}
OPTION_KEYS = {"graph_optimization_level", "intra_op_num_threads", "inter_op_num_threads", "execution_mode"}
MODES = ("bisect", "sweep")
ARCHS = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}
EP_WORDS = {name: word for word, name in PROVIDERS.items()}  # CUDAExecutionProvider -> cuda
# The GitHub-hosted runner that runs an arch natively (the nightly workflow's job matrix).
RUNNERS = {"x86_64": "ubuntu-latest", "aarch64": "ubuntu-24.04-arm"}
# What a cell adds to its key only when it is not the default, so the cells of files written before these keys
# keep their keys (and the run documents under cells/ their names).
CELL_DEFAULTS = {"package": DEFAULT_PACKAGE, "ep": DEFAULT_EP, "ep_options": {}, "reference": None,
                 "reference_release": None, "rows": "all", "time_budget": 60.0, "index_urls": (), "find_links": (),
                 "pre": False}


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
    package: str = DEFAULT_PACKAGE
    ep: str = DEFAULT_EP  # the --ep word
    ep_options: dict = field(default_factory=dict)
    provider: str | None = None  # the [[providers]] entry's name: a label, no part of the search
    reference: str | None = None  # "fp32", or an absolute path to an .npz file
    reference_release: str | None = None
    rows: str = "all"  # all | fewest
    time_budget: float = 60.0  # seconds a timed probe (slower, rss) may re-measure
    index_urls: tuple[str, ...] = ()  # as --index-url: indexes searched before uv's configured one
    find_links: tuple[str, ...] = ()  # as --find-links: wheel directories (absolute) or pages of links
    pre: bool = False  # as --pre: development builds and pre-releases listed too

    @property
    def model_label(self) -> str:
        return Path(self.model).stem if self.model.endswith(".onnx") else self.model

    @property
    def key(self) -> str:
        """Short stable digest of what the cell asks (not of its position in the file, nor of its labels, nor of a
        source's credentials)."""
        doc = {k: v for k, v in self._stored().items()
               if k not in ("index", "provider") and not (k in CELL_DEFAULTS and v == CELL_DEFAULTS[k])}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:10]

    def package_of(self) -> Package:
        """The package and provider its probes install and run on (as --package, --ep, --ep-option give them)."""
        return Package(name=self.package, ep=self.ep, ep_options=tuple(sorted(self.ep_options.items())),
                       index_urls=tuple(self.index_urls), find_links=tuple(self.find_links), pre=self.pre)

    @property
    def provider_label(self) -> str | None:
        """The entry's name, else PACKAGE:EP and its options; None for the default package on the CPU provider."""
        pkg = self.package_of()
        if self.provider or pkg.is_default:
            return self.provider
        return pkg.label + "".join(f" {k}={v}" for k, v in pkg.ep_options)

    @property
    def reference_label(self) -> str | None:
        """fp32, the reference release, or the reference file's name."""
        if self.reference_release:
            return self.reference_release
        return self.reference if self.reference in (None, "fp32") else Path(self.reference).name

    @property
    def name(self) -> str:
        parts = [self.model_label, self.arch, self.backend]
        if self.cpu:
            parts.append(self.cpu)
        if self.provider_label:
            parts.append(self.provider_label)
        if self.options:
            parts.append(",".join(f"{k}={v}" for k, v in sorted(self.options.items())))
        if self.bad_if != "nan-or-inf" or self.reference_label:
            parts.append(f"{self.bad_if}" + (f" vs {self.reference_label}" if self.reference_label else ""))
        if self.rows != "all":
            parts.append(f"rows={self.rows}")
        parts.append(self.mode)
        return "/".join(parts)

    def _stored(self) -> dict:
        """The cell's fields as anything written holds them: the sources' credentials masked."""
        return {**asdict(self), "index_urls": tuple(redact(u) for u in self.index_urls),
                "find_links": tuple(redact(u) for u in self.find_links)}

    def as_json(self) -> dict:
        doc = self._stored()
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


_FLAGS = re.compile(r"--(bad-if|reference-release|reference|package|ep-option|ep|rows|timeout|python)\b")


def _as_keys(exc: UsageError) -> str:
    """A refusal of `bisect run`'s checks, its flags spelt as the file's keys (--ep-option: ep_options)."""
    keys = {"ep-option": "ep_options"}
    return _FLAGS.sub(lambda m: keys.get(m.group(1), m.group(1).replace("-", "_")), str(exc))


def _fail(path: Path, msg: str):
    raise UsageError(f"{path}: {msg}")


def _check_keys(path: Path, where: str, doc: dict, known: set[str]) -> None:
    if not isinstance(doc, dict):
        _fail(path, f"{where} must be a table")
    unknown = sorted(set(doc) - known)
    if unknown:
        _fail(path, f"unknown key {unknown[0]!r} in {where} (known: {', '.join(sorted(known))})")


def _tables(path: Path, entries, name: str, known: set[str], hint: str = ""):
    """(where, entry) of each table of an array of tables (`[[name]]`), its keys checked; the array must be a
    non-empty list."""
    if not isinstance(entries, list) or not entries:
        _fail(path, f"'{name}' must be a non-empty list of [[{name}]] tables{hint}")
    for n, entry in enumerate(entries, 1):
        where = f"[[{name}]] #{n}"
        _check_keys(path, where, entry, known)
        yield where, entry


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


def _models(path: Path, entries, notes: list[str]) -> list[tuple[str, str | None, tuple[str, ...], dict]]:
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
        out.append((model, inputs, outputs, {k: entry[k] for k in QUESTION_KEYS if k in entry}))
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
    out = []
    for where, entry in _tables(path, entries, "targets", TARGET_KEYS, " (arch, backend, cpus)"):
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
    out = []
    for where, entry in _tables(path, entries, "options", OPTION_KEYS):
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


def _range(path: Path, doc, where: str = "releases") -> dict:
    if not isinstance(doc, dict):
        _fail(path, f"'{where}' must be a table: {{ since = \"1.19.0\" }} or {{ from = \"1.19.0\", to = \"1.24.1\" }}")
    _check_keys(path, where, doc, RANGE_KEYS)
    if "since" in doc:
        if "from" in doc or "to" in doc:
            _fail(path, f"{where}: give 'since' alone, or 'from' and 'to'")
        return {"since": _version(path, f"{where}.since", doc["since"])}
    if "from" not in doc or "to" not in doc:
        _fail(path, f"{where}: give {{ since = X }} or both 'from' and 'to'")
    lo, hi = _version(path, f"{where}.from", doc["from"]), _version(path, f"{where}.to", doc["to"])
    if Version(lo) > Version(hi):
        _fail(path, f"{where}: empty range ({lo} is after {hi})")
    return {"from": lo, "to": hi}


def _strings(path: Path, where: str, entry: dict, key: str) -> list[str]:
    """A key that takes one text or a list of them (index_url, find_links), as the repeatable flag does."""
    value = entry.get(key, [])
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not all(isinstance(v, str) and v.strip() for v in values):
        _fail(path, f"{where}: {key} {redact(repr(value))}: give a text or a list of them, as --{key.replace('_', '-')} takes")
    return [v.strip() for v in values]


def _providers(path: Path, entries) -> list[tuple[Package, str | None, dict | None]]:
    """(package, its label, its own range or None) of each [[providers]] entry, checked as --package, --ep and
    --ep-option are (all but the device: a missing one skips the cell when it runs)."""
    from harness import request

    if entries is None:
        return [(Package(), None, None)]
    out = []
    for where, entry in _tables(path, entries, "providers", PROVIDER_KEYS, " (package, ep, ep_options)"):
        for k in ("binding", "package", "ep", "name"):
            if k in entry and (not isinstance(entry[k], str) or not entry[k].strip()):
                _fail(path, f"{where}: {k} {entry[k]!r}: expected a name such as \"onnxruntime-openvino\"")
        binding = entry.get("binding", DEFAULT_BINDING).strip()
        if binding not in BINDINGS:
            _fail(path, f"{where}: binding {binding!r}: expected one of {', '.join(BINDINGS)}")
        own_package, own_ep = BINDINGS[binding]
        if binding != DEFAULT_BINDING and entry.get("package", own_package).strip() != own_package:
            _fail(path, f"{where}: package {entry['package']!r} is a wheel of the python binding; binding "
                        f"{binding!r} installs {own_package} from npm")
        opts = entry.get("ep_options", {})
        if not isinstance(opts, dict):
            _fail(path, f"{where}: ep_options must be a table, e.g. ep_options = {{ device_type = \"CPU\" }}")
        for k, v in opts.items():  # --ep-option KEY=VALUE: a value is text (a whole number is written as one)
            if isinstance(v, bool) or not isinstance(v, (str, int)) or not str(v).strip():
                _fail(path, f"{where}: ep_options.{k} = {v!r}: give the value as a string, e.g. device_type = \"CPU\"")
        ep = entry.get("ep", own_ep).strip()
        if "pre" in entry and not isinstance(entry["pre"], bool):
            _fail(path, f"{where}: pre {entry['pre']!r}: expected true or false (as --pre)")
        pkg = Package(name=entry.get("package", own_package).strip(), ep=EP_WORDS.get(ep, ep),
                      ep_options=tuple(sorted((k, str(v).strip()) for k, v in opts.items())),
                      index_urls=tuple(u.rstrip("/") for u in _strings(path, where, entry, "index_url")),
                      find_links=tuple(link if "://" in link else str((path.parent / Path(link).expanduser()).resolve())
                                       for link in _strings(path, where, entry, "find_links")),
                      pre=entry.get("pre", False))
        try:
            request.package(pkg, device=False)
        except UsageError as exc:
            _fail(path, f"{where}: {_as_keys(exc)}")
        own = _range(path, entry["releases"], f"{where} releases") if "releases" in entry else None
        out.append((pkg, entry.get("name"), own))
    return out


def _question(path: Path, where: str, asked: dict, modes: list[str]) -> tuple[str, str | None, str | None, str]:
    """(bad_if, reference, reference_release, rows) of a model's cells, checked as `bisect run` checks
    --bad-if, --reference, --reference-release and --rows; `where` names the table that asked them."""
    from harness import request
    from harness.models.registry import user_file
    from harness.triage import rows as fewrows

    bad_if = asked.get("bad_if", "nan-or-inf")
    if not isinstance(bad_if, str):
        _fail(path, f"{where}: bad_if {bad_if!r}: expected a string such as \"max-abs>1e4\"")
    reference, release = asked.get("reference"), asked.get("reference_release")
    rows = asked.get("rows", "all")
    if release is not None:
        release = _version(path, f"{where}: reference_release", release)
    try:
        if reference is not None:
            if not isinstance(reference, str) or not reference:
                raise UsageError(f"--reference {reference!r}: give \"fp32\" or a path to an .npz file")
            if reference != "fp32":
                p = Path(reference)
                reference = str(user_file(p if p.is_absolute() else path.parent / p, "--reference", ".npz").resolve())
        request.question(bad_if, reference, release)
        if rows not in fewrows.STRATEGIES:
            raise UsageError(f"--rows {rows!r} (choose from {', '.join(fewrows.STRATEGIES)})")
        for mode in modes:
            fewrows.check("regression", mode == "sweep", rows)
    except UsageError as exc:
        _fail(path, f"{where}: {_as_keys(exc)}")
    return bad_if, reference, release, rows


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
    for required in ("models", "targets"):
        if required not in doc:
            _fail(path, f"missing key {required!r}")
    modes = _list_of(path, "mode", doc.get("mode", "bisect"), str)
    if not modes:
        _fail(path, f"mode = []: no cells; give {' or '.join(MODES)}, or a list of both")
    for m in modes:
        if m not in MODES:
            _fail(path, f"mode {m!r} (choose from {', '.join(MODES)})")
    from harness import request

    try:  # the rules of --timeout and --python, spelt as the file's keys
        timeout = request.seconds(doc["timeout"], "timeout") if "timeout" in doc else None
        time_budget = request.seconds(doc["time_budget"], "time_budget") if "time_budget" in doc else 60.0
    except UsageError as exc:
        _fail(path, str(exc))
    python = doc.get("python", f"{sys.version_info.major}.{sys.version_info.minor}")
    if not isinstance(python, str):  # python = 3.10 is the float 3.1
        _fail(path, f"python {python!r}: give the version as a string, e.g. python = \"3.11\"")
    try:
        python = request.python_version(python, "python")
    except UsageError as exc:
        _fail(path, str(exc))
    providers = _providers(path, doc.get("providers"))
    if "releases" not in doc and any(own is None for _, _, own in providers):
        _fail(path, "missing key 'releases'" + (" (or a range in every [[providers]] entry)" if "providers" in doc
                                                 else ""))
    releases = _range(path, doc["releases"]) if "releases" in doc else None
    top = {k: doc[k] for k in QUESTION_KEYS if k in doc}
    notes: list[str] = []
    models = _models(path, doc["models"], notes)
    targets = _targets(path, doc["targets"])
    option_sets = _options(path, doc.get("options"))
    cells, seen = [], {}
    for n, (model, inputs, outputs, own) in enumerate(models, 1):
        asked = {**top, **own}
        if "reference" in own or "reference_release" in own:  # a model's reference replaces the matrix's
            asked = {k: v for k, v in asked.items() if k not in ("reference", "reference_release") or k in own}
        where = f"[[models]] #{n}" if own else "the matrix"
        bad_if, reference, reference_release, rows = _question(path, where, asked, modes)
        for arch, backend, cpu in targets:
            for pkg, label, own_range in providers:
                for opts in option_sets:
                    for mode in modes:
                        cell = Cell(len(cells), model, inputs, outputs, arch, backend, cpu, opts, mode,
                                    own_range or releases, bad_if, timeout, python, pkg.name, pkg.ep,
                                    dict(pkg.ep_options), label, reference, reference_release, rows,
                                    float(time_budget), pkg.index_urls, pkg.find_links, pkg.pre)
                        if cell.key in seen:  # one search twice: an arch and its alias, a model listed twice, ...
                            _fail(path, f"cells {seen[cell.key]} and {cell.index} are the same search ({cell.name}): "
                                        "list each model, target (amd64 is x86_64, arm64 is aarch64), provider, "
                                        "option set and mode once")
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
