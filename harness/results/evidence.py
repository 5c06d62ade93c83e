"""The evidence a run keeps, as types: a probe record, a run manifest and a cell document (the run document
of one search, cells/<key>.json), parsed before anything reads them.

The compare document of `bisect compare --from --to` (compare.json, the divergence of
package/provider pairs release by release) is one more. Each has a versioned JSON
Schema under docs/schema/ (probe-record.v1.json, run-manifest.v1.json,
cell-document.v1.json, compare-document.v1.json), the contract
for anyone who reads results/ without this package. `parse` checks what the
schema requires and the type of every key it names, so a line of the wrong
shape (from another machine, an older tool or a careless edit) is refused where
it is read, with the key that is wrong, instead of failing a reader far away.
tests/test_evidence.py holds the two to the same rules and validates real
records against the schema files.

The typed fields are what readers decide by; `raw` keeps the whole document,
keys this version does not know included, so nothing is lost on a rewrite.

Before any of that, `loads` bounds what a document may cost to read: a probe
record line longer than MAX_RECORD_BYTES is refused unread, and objects and
arrays nested deeper than MAX_DEPTH in any evidence document are refused (the
json module's parser, and every reader that walks a document, recurse: a line
nested 100,000 deep would otherwise end the reader in RecursionError).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from harness.errors import HarnessError, UsageError

SCHEMA_VERSION = 1
STATUSES = ("ran", "error", "crash", "timeout", "skip", "nondeterministic")  # a probe's; verdicts add inconclusive
VERSION_RE = re.compile(r"^[0-9][0-9A-Za-z.+!-]*$")  # a release version, and a safe file name stem
RUN_ID_RE = re.compile(r"^(?!\.\.?$)[^/\\\x00]+$")  # one directory name: no separator, not . or ..

MAX_RECORD_BYTES = 4 << 20  # one line of probes.jsonl; the tool writes a few KB (stderr cut to 500 characters)
MAX_DEPTH = 64  # objects and arrays inside each other; a probe record nests 5 deep, a run document 6

_NUMBER = (int, float)
_NONE = type(None)

#: key -> the JSON types it may hold (as Python types), for the optional keys of a record
RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "reason": (str,), "package": (str,), "series": (str,), "finished": (str, _NONE),
    "seconds": _NUMBER, "repeats": (int,), "env_seconds": (*_NUMBER, _NONE), "env_created": (bool, _NONE),
    "stderr_tail": (str,), "outputs_saved": (str,), "provenance": (dict,), "providers": (dict,),
    "metrics": (dict,), "result": (dict, _NONE), "margin": (dict,), "timing": (dict,),
}
MARGIN_FIELDS: dict[str, tuple[type, ...]] = {  # harness.graphs.margin.margin_of
    "fraction": (*_NUMBER, _NONE), "tensor": (str, _NONE), "overflowed": (bool,), "ceiling": _NUMBER,
    "source": (str,), "watched": (int,), "held_in_fp16": (int,), "held_in_fp32": (int,), "precision": (str,),
    "fp32_hottest": (dict,), "seconds": _NUMBER, "error": (str,), "rows": (dict,),
}
TIMING_FIELDS: dict[str, tuple[type, ...]] = {  # harness.probe.timed_rounds (rounds read by metrics.timing_summary)
    "baseline": (str,), "rounds": (list,), "threads": (int, _NONE), "pinned_cpu": (int, _NONE), "warmup": (int,),
    "fresh_processes": (bool,), "budget_s": _NUMBER, "stopped": (str,), "error": (str,), "seconds": _NUMBER,
}
PROVENANCE_FIELDS: dict[str, tuple[type, ...]] = {
    "arch": (str,), "backend": (str,), "cpu": (str, _NONE), "python": (str,), "engine": (dict,), "node": (dict,),
}
NODE_FIELDS: dict[str, tuple[type, ...]] = {  # harness.executors.cluster: the Ray node a probe ran on
    "id": (str,), "hostname": (str,), "arch": (str,), "cpu_model": (str,), "cpu_flags": (str,),
}
PROVIDERS_FIELDS: dict[str, tuple[type, ...]] = {"requested": (str, _NONE), "used": (list, _NONE)}
METRICS_FIELDS: dict[str, tuple[type, ...]] = {  # harness.metrics.probe_metrics
    "outputs": (dict,), "max_abs": (*_NUMBER, _NONE), "headroom": (*_NUMBER, _NONE), "reference": (str, _NONE),
    "comparison_error": (str,), "cosine_min": (*_NUMBER, _NONE), "rel_diff_max": (*_NUMBER, _NONE),
    "nonfinite_rows": (int, _NONE), "abs_diff_max": (*_NUMBER, _NONE), "rel_diff_floors": (dict,),
    "identical": (bool,),
}
RESULT_FIELDS: dict[str, tuple[type, ...]] = {
    "stage": (str,), "error": (str, _NONE), "outputs": (list,), "rows": (dict, _NONE), "onnxruntime": (dict,),
    "timing": (dict,), "profile": (dict,),  # the worker's timed runs and its profile summary (explain.profile)
}
ROWS_FIELDS: dict[str, tuple[type, ...]] = {  # the worker's rows_summary: the batch's rows, across the outputs
    "rows": (int,), "outputs": (list,), "nan_rows": (int,), "inf_rows": (int,), "nonfinite_rows": (int,),
    "zero_rows": (int,),
}
OUTPUT_FIELDS: dict[str, tuple[type, ...]] = {  # the worker's output_stats
    "name": (str,), "dtype": (str,), "shape": (list,), "sha256": (str,), "rows": (int, _NONE),
    "nan_rows": (int, _NONE), "inf_rows": (int, _NONE), "zero_rows": (int, _NONE), "nan": (int,), "inf": (int,),
    "max_abs": (*_NUMBER, _NONE), "min": (*_NUMBER, _NONE), "max": (*_NUMBER, _NONE),
}
MANIFEST_FIELDS: dict[str, tuple[type, ...]] = {
    "run_id": (str,), "created": (str,), "harness_version": (str,), "key": (dict,), "host": (dict,),
    "commands": (list,), "model": (dict,), "batch": (dict,), "predicate": (str,), "reference": (dict, _NONE),
}
KEY_FIELDS: dict[str, tuple[type, ...]] = {
    "model": (str,), "batch": (str,), "outputs": (list,), "session_options": (dict,), "backend": (str,),
    "arch": (str,), "python": (str,), "cpu": (str, _NONE),
}
MODEL_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,), "source": (str,), "path": (str,), "digest": (str,), "data_files": (list,),
}

# What a `--json` document names in its "$schema": the schema's own $id (docs/schema/<file name of the $id>)
CELL_SCHEMA = "https://ortbisect.invalid/schema/cell-document.v1.json"
COMPARE_SCHEMA = "https://ortbisect.invalid/schema/compare-document.v1.json"

CELL_FIELDS: dict[str, tuple[type, ...]] = {  # harness.summary.summary and harness.session.finish
    "$schema": (str,), "run_id": (str,), "status": (str,), "mode": (str,), "monotone": (bool,), "message": (str,), "releases": (list,),
    "probes": (list,), "probe_count": (int,), "release_count": (int,), "provenance": (dict,),
    "last_good": (str, _NONE), "first_bad": (str, _NONE), "last_bad": (str, _NONE), "first_good": (str, _NONE),
    "commits": (dict, _NONE), "untestable": (list,), "transitions": (list,), "predicate": (str,), "bad_means": (str,),
    "reference": (dict, _NONE), "refresh": (bool,), "cell": (dict,), "matrix": (dict,), "explanation": (dict, str),
    "rows": (dict,), "generated": (str,), "host": (dict,), "harness": (dict,), "question": (dict,),
    "dev_builds": (dict,),  # harness.triage.devbuilds: the builds' boundary between the releases'
    "skipped": (str,),  # harness.session.skipped: why a matrix cell could not run on its host (status "skipped")
}
CELL_QUESTION_FIELDS: dict[str, tuple[type, ...]] = {  # harness.summary.Question.document
    "predicate": (str,), "reference": (dict, _NONE), "mode": (str,), "range": (list,),
}
CELL_PROBE_FIELDS: dict[str, tuple[type, ...]] = {
    "version": (str,), "verdict": (str,), "why": (str, _NONE), "decided_by": (list,), "metrics": (dict,),
    "nan_rows": (int, _NONE), "inf_rows": (int, _NONE), "rows": (int, _NONE), "seconds": _NUMBER, "reused": (bool,),
    "commit": (str, _NONE),
}
CELL_KEY_FIELDS: dict[str, tuple[type, ...]] = {"key": (str,)}  # the document's `cell` (a matrix cell adds more)
CELL_MODES = ("regression", "fix", "sweep")
CELL_KEY_RE = re.compile(r"^[^/\\]+$")  # the document's file name stem under cells/


COMPARE_FIELDS: dict[str, tuple[type, ...]] = {  # harness.triage.compare.compare_over
    "$schema": (str,), "kind": (str,), "run_id": (str,), "model": (str,), "from": (str,), "to": (str,), "releases": (list,),
    "reference": (dict,), "pairs": (list,), "cosine_bound": _NUMBER, "change_threshold": _NUMBER,
    "provenance": (dict,), "probes": (dict,), "seconds": _NUMBER, "message": (str,), "generated": (str,),
    "origins": (list,),  # core or binding (harness.triage.compare.origins)
}
COMPARE_PAIR_FIELDS: dict[str, tuple[type, ...]] = {  # a pair compared with the reference; the reference itself
    "label": (str,), "package": (str,), "ep": (str,), "run_id": (str,), "releases": (list,),
}
COMPARE_ENTRY_FIELDS: dict[str, tuple[type, ...]] = {  # one release of a compared pair
    "release": (str,), "cosine": (*_NUMBER, _NONE), "max_abs_diff": (*_NUMBER, _NONE), "diverges": (bool, _NONE),
    "why": (str,), "bad_rows": (int, _NONE), "outputs_sha256": (str, _NONE),
}
COMPARE_REFERENCE_ENTRY_FIELDS: dict[str, tuple[type, ...]] = {  # one release of the reference pair
    "release": (str,), "status": (str, _NONE), "nan_rows": (int, _NONE), "rows": (int, _NONE),
    "max_abs": (*_NUMBER, _NONE), "commit": (str, _NONE), "why": (str, _NONE), "bad_rows": (int, _NONE),
    "outputs_sha256": (str, _NONE),
}
COMPARE_KIND = "compare-range"


class EvidenceError(HarnessError):
    """A document that is not of the shape its schema says: `where` is the key that is wrong."""

    def __init__(self, what: str, where: str, why: str):
        self.where = where
        super().__init__(f"not a {what}: {where} {why}" if where else f"not a {what}: {why}")


def _json_type(value) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", _NONE: "null"}.get(type(value), type(value).__name__)


def _check(what: str, doc, fields: dict[str, tuple[type, ...]], prefix: str = "") -> None:
    if not isinstance(doc, dict):
        raise EvidenceError(what, prefix.rstrip("."), f"is {_json_type(doc)}, not an object")
    for key, types in fields.items():
        if key in doc:
            value = doc[key]
            # JSON has no bool among numbers: True is not a count of seconds
            ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
            if not ok:
                raise EvidenceError(what, prefix + key, f"is {_json_type(value)}")


def _check_all(what: str, items: list, fields: dict[str, tuple[type, ...]], prefix: str,
               required: tuple[str, ...] = ()) -> None:
    for i, item in enumerate(items):
        _check(what, item, fields, f"{prefix}[{i}].")
        for key in required:
            if key not in item:
                raise EvidenceError(what, f"{prefix}[{i}].{key}", "is missing")


def loads(raw: bytes | str, max_bytes: int | None = None):
    """The JSON value of `raw`; ValueError saying why there is none: longer than `max_bytes` (not parsed),
    not UTF-8 text, not JSON, or nested deeper than MAX_DEPTH."""
    if max_bytes is not None and len(raw) > max_bytes:
        raise ValueError(f"longer than {max_bytes} bytes ({len(raw)}); not parsed")
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    too_deep = ValueError(f"nested deeper than {MAX_DEPTH} objects and arrays")
    try:
        value = json.loads(text)
    except RecursionError:  # the parser's own bound (the interpreter's recursion limit), far past MAX_DEPTH
        raise too_deep from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    level = [value]
    for _ in range(MAX_DEPTH):  # breadth first, one level of nesting at a time: no recursion
        level = [c for v in level if isinstance(v, (dict, list)) for c in (v.values() if isinstance(v, dict) else v)]
        if not level:
            return value
    if any(isinstance(v, (dict, list)) for v in level):
        raise too_deep
    return value


def _check_ran(what: str, result: dict | None) -> None:
    """A probe that ran keeps what its verdict is judged from: the worker's result, its outputs, and the rows
    they were counted over: `result.rows` (an object with the batch's `rows`), or, from workers before that
    count, the `rows` of an output; `result.rows` is null, with no output's rows, only when no output is
    numeric. Without them a verdict of good would be made of nothing."""
    if result is None:
        raise EvidenceError(what, "result", "is missing: a probe that ran keeps the worker's result")
    if not result.get("outputs"):
        raise EvidenceError(what, "result.outputs", "is missing or empty: a probe that ran keeps its outputs")
    rows, per_output = result.get("rows"), [o.get("rows") for o in result["outputs"]]
    if isinstance(rows, dict):
        counted = "rows" in rows
    else:  # absent (an older worker) or null (no numeric output)
        counted = any(isinstance(n, int) for n in per_output) or ("rows" in result and all(n is None for n in per_output))
    if not counted:
        raise EvidenceError(what, "result.rows", "counts no rows: a probe that ran keeps the rows it was judged on")


@dataclass(frozen=True)
class ProbeRecord:
    """One line of probes.jsonl (docs/schema/probe-record.v1.json)."""

    version: str
    status: str
    series: str | None
    result: dict | None
    raw: dict

    @classmethod
    def parse(cls, doc) -> ProbeRecord:
        what = "probe record"
        _check(what, doc, {"version": (str,), "status": (str,), **RECORD_FIELDS})
        for key in ("version", "status"):
            if key not in doc:
                raise EvidenceError(what, key, "is missing")
        if len(doc["version"]) > 64 or not VERSION_RE.match(doc["version"]):
            raise EvidenceError(what, "version", f"{doc['version'][:64]!r} is not a release version")
        if doc["status"] not in STATUSES:
            raise EvidenceError(what, "status", f"{doc['status'][:64]!r} is not one of {', '.join(STATUSES)}")
        for key, fields in (("provenance", PROVENANCE_FIELDS), ("providers", PROVIDERS_FIELDS),
                            ("metrics", METRICS_FIELDS), ("margin", MARGIN_FIELDS),
                            ("timing", TIMING_FIELDS)):
            if key in doc:
                _check(what, doc[key], fields, f"{key}.")
        if isinstance((doc.get("provenance") or {}).get("node"), dict):
            _check(what, doc["provenance"]["node"], NODE_FIELDS, "provenance.node.")
        result = doc.get("result")
        if result is not None:
            _check(what, result, RESULT_FIELDS, "result.")
            _check_all(what, result.get("outputs") or [], OUTPUT_FIELDS, "result.outputs")
            if result.get("rows") is not None:
                _check(what, result["rows"], ROWS_FIELDS, "result.rows.")
            if "onnxruntime" in result:
                _check(what, result["onnxruntime"], {"version": (str,)}, "result.onnxruntime.")
        if doc["status"] == "ran":
            _check_ran(what, result)
        return cls(doc["version"], doc["status"], doc.get("series"), result, doc)


@dataclass(frozen=True)
class RunManifest:
    """A run's manifest.json (docs/schema/run-manifest.v1.json)."""

    key: dict
    run_id: str | None
    model: dict
    raw: dict

    @classmethod
    def parse(cls, doc) -> RunManifest:
        what = "run manifest"
        _check(what, doc, MANIFEST_FIELDS)
        if "key" not in doc:
            raise EvidenceError(what, "key", "is missing: no run key")
        _check(what, doc["key"], KEY_FIELDS, "key.")
        run_id = doc.get("run_id")
        if run_id is not None and (len(run_id) > 200 or not RUN_ID_RE.match(run_id)):
            raise EvidenceError(what, "run_id", f"{run_id[:64]!r} is not a run id")
        if "model" in doc:
            _check(what, doc["model"], MODEL_FIELDS, "model.")
        if "batch" in doc:
            _check(what, doc["batch"], {"path": (str,), "digest": (str,)}, "batch.")
        _check_all(what, doc.get("commands") or [], {"argv": (list,), "time": (str,)}, "commands")
        return cls(doc["key"], run_id, doc.get("model") or {}, doc)


@dataclass(frozen=True)
class CellDocument:
    """The run document of one search, as kept in cells/<key>.json (docs/schema/cell-document.v1.json).

    Beyond the types: `predicate` must be one `--bad-if` reads (the dashboard judges the run's records under
    it), each probe's verdict one of harness.verdicts.VERDICTS, and the cell's key one file name."""

    key: str
    predicate: str | None
    generated: str | None
    raw: dict

    @classmethod
    def parse(cls, doc) -> CellDocument:
        from harness.verdicts import (  # numpy: only for the readers of run documents
            VERDICTS,
            parse_predicate,
        )

        what = "cell document"
        _check(what, doc, CELL_FIELDS)
        for key in ("run_id", "status", "mode", "releases", "probes", "cell"):
            if key not in doc:
                raise EvidenceError(what, key, "is missing")
        if doc["mode"] not in CELL_MODES:
            raise EvidenceError(what, "mode", f"{doc['mode'][:64]!r} is not one of {', '.join(CELL_MODES)}")
        if not all(isinstance(v, str) for v in doc["releases"]):
            raise EvidenceError(what, "releases", "holds a value that is not a release version")
        _check_all(what, doc["probes"], CELL_PROBE_FIELDS, "probes", required=("version", "verdict"))
        for i, probe in enumerate(doc["probes"]):
            if probe["verdict"] not in VERDICTS:
                raise EvidenceError(what, f"probes[{i}].verdict", f"{probe['verdict'][:64]!r} is not a verdict")
        _check(what, doc["cell"], CELL_KEY_FIELDS, "cell.")
        if "question" in doc:
            _check(what, doc["question"], CELL_QUESTION_FIELDS, "question.")
            q = doc["question"]
            if "range" in q and not (len(q["range"]) == 2 and all(isinstance(v, str) for v in q["range"])):
                raise EvidenceError(what, "question.range", "is not two release versions")
            if q.get("mode", "regression") not in CELL_MODES:
                raise EvidenceError(what, "question.mode", f"{str(q['mode'])[:64]!r} is not one of {', '.join(CELL_MODES)}")
        key = doc["cell"].get("key")
        if key is None:
            raise EvidenceError(what, "cell.key", "is missing")
        if len(key) > 200 or not CELL_KEY_RE.match(key):
            raise EvidenceError(what, "cell.key", f"{key[:64]!r} is not one file name")
        for predicate in (doc.get("predicate"), (doc.get("question") or {}).get("predicate")):
            if predicate is None:
                continue
            try:
                parse_predicate(predicate)
            except UsageError as exc:
                raise EvidenceError(what, "predicate", f"{predicate[:64]!r} is not a predicate ({exc})") from None
        return cls(key, doc.get("predicate"), doc.get("generated"), doc)


@dataclass(frozen=True)
class CompareDocument:
    """A compare over a range, as kept in compare.json (docs/schema/compare-document.v1.json).

    Beyond the types: every release a version, and the reference and each pair hold one entry per release of
    the document, in its order (a reader draws them as cells of one row under the releases)."""

    releases: tuple[str, ...]
    raw: dict

    @classmethod
    def parse(cls, doc) -> CompareDocument:
        what = "compare document"
        _check(what, doc, COMPARE_FIELDS)
        for key in ("kind", "releases", "reference", "pairs"):
            if key not in doc:
                raise EvidenceError(what, key, "is missing")
        if doc["kind"] != COMPARE_KIND:
            raise EvidenceError(what, "kind", f"{doc['kind'][:64]!r} is not {COMPARE_KIND!r}")
        releases = doc["releases"]
        for i, v in enumerate(releases):
            if not isinstance(v, str) or len(v) > 64 or not VERSION_RE.match(v):
                raise EvidenceError(what, f"releases[{i}]", "is not a release version")
        sides = [("reference", doc["reference"], COMPARE_REFERENCE_ENTRY_FIELDS)]
        _check_all(what, doc["pairs"], COMPARE_PAIR_FIELDS, "pairs", required=("label", "releases"))
        sides += [(f"pairs[{i}]", p, COMPARE_ENTRY_FIELDS) for i, p in enumerate(doc["pairs"])]
        for where, side, fields in sides:
            _check(what, side, COMPARE_PAIR_FIELDS, f"{where}.")
            if "label" not in side or "releases" not in side:
                raise EvidenceError(what, f"{where}.{'label' if 'label' not in side else 'releases'}", "is missing")
            required = ("release", "diverges", "why") if fields is COMPARE_ENTRY_FIELDS else ("release",)
            _check_all(what, side["releases"], fields, f"{where}.releases", required=required)
            if [e["release"] for e in side["releases"]] != releases:
                raise EvidenceError(what, f"{where}.releases", "does not hold one entry per release of the document")
        return cls(tuple(releases), doc)
