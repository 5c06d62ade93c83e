"""What of a run goes into its repro script, and what goes beside it.

The run's question (its predicate, and the reference values it compared with) and its files: the model and
batch named by the manifest when their digests are the run key's, a reduction's files when they are plain
files of its own reduced/ directory, a reference's values when they are the run's. What would make the
script too long for a paste-ready report goes into one attachment beside it (REPRO_BATCH). The script's
text is harness.report.repro's; a node or web run's repro.mjs, holding the same parts, harness.report.repro_node's.

The evidence may come from another machine: a file is embedded only when it is the run's, else the
script and the report say in one line why it is not.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from harness.errors import HarnessError, UsageError
from harness.graphs.external import location_problem
from harness.models import inputs as inputs_mod
from harness.models import registry as models
from harness.releases import packages
from harness.report import repro as repro_mod
from harness.report import repro_node
from harness.report.repro import SCRIPT
from harness.results.evidence import RUN_ID_RE
from harness.results.store import REPRO_BATCH, REPRO_JS, RunStore
from harness.verdicts import Predicate


def _without_reference(predicate: Predicate) -> Predicate:
    """What a repro script can judge by itself: the conditions that need no reference (else the default)."""
    own = tuple(c for c in predicate.conditions if not c.needs_reference)
    return Predicate(own) if own else Predicate()


def _own_file(directory: Path, name) -> Path | None:
    """The file `name` directly in `directory` (a run's own file, named by one of its documents), or None when
    the name is not a plain file name, or the file is a link or not a regular file inside the run."""
    if not isinstance(name, str) or not RUN_ID_RE.match(name) or name != Path(name).name:
        return None
    path = directory / name
    if path.is_symlink() or not path.is_file() or not path.resolve().is_relative_to(directory.resolve()):
        return None
    return path


def _reduced_part(store: RunStore, embed_limit: int, predicate: Predicate) -> tuple[dict | None, list[str], str | None]:
    """(the reduction of this run (`bisect reduce`) when it flips and answers `predicate`, the parts of it over the
    embed limit (they go into the attachment), and what the report says of a reduction it does not run).

    Its model, inputs and reference values are files of the run's own reduced/ directory (a link or a path out
    of it is not followed): nothing of the machine the report is made on can be embedded through reduce.json.
    A reduction that kept every node has no model of its own: the script runs the full model on its rows."""
    from harness.results.store import REDUCED

    reduced = RunStore(store.dir / REDUCED)
    doc = reduced.document("reduce")
    if not doc:
        return None, [], None
    where = f"{store.dir.name}/{REDUCED}/"
    if not doc["verified"]["flips"]:
        return None, [], f"the reduction in {where} does not flip when verified: not in the script."
    if doc.get("predicate") != str(predicate):
        return None, [], (f"the reduction in {where} answers {doc.get('predicate')}, not {predicate}: not in the "
                          "script (bisect reduce RUN --question KEY reduces this question).")
    if doc.get("reduced") is False:
        return None, [], f"bisect reduce dropped no row and no node ({where}reduce.json says why): the full model is the repro."
    names = {"model": doc["model"]["file"], "inputs": doc["inputs"]["file"],
             "reference": (doc.get("reference") or {}).get("file") if predicate.needs_reference else None}
    files = {k: _own_file(reduced.dir, v) if v else None for k, v in names.items()}
    if files["inputs"] is None or (names["model"] and files["model"] is None):
        return None, [], f"the reduction's files in {where} are not plain files of the run: not in the script."
    if predicate.needs_reference and files["reference"] is None:
        return None, [], (f"the reduction in {where} keeps no values its first bad release was compared with "
                          "(reference.npz): not in the script.")
    try:
        inputs = inputs_mod.load_npz(files["inputs"])
        reference = inputs_mod.load_npz(files["reference"], "reduced reference") if files["reference"] else None
    except UsageError:
        return None, [], f"the reduction's arrays in {where} are not readable .npz files: not in the script."
    model = files["model"].read_bytes() if files["model"] else None
    over = [part for part, f in (("reduced_model", files["model"]), ("reduced_inputs", files["inputs"]),
                                 ("reduced_reference", files["reference"])) if f and f.stat().st_size > embed_limit]
    sources = {part: {"file": where + f.name, "bytes": f.stat().st_size, "sha256": models.file_sha256(f)}
               for part, f in (("reduced_model", files["model"]), ("reduced_inputs", files["inputs"]),
                               ("reduced_reference", files["reference"])) if f}
    return ({"model": model, "inputs": inputs, "reference": reference, "outputs": doc["model"]["outputs"],
             "nodes": doc["nodes"]["after"], "of": doc["nodes"]["before"], "rows": doc["rows"]["after"],
             "pair": doc["pair"], "sources": sources}, over, None)


def _model_files(manifest: dict, key: dict) -> tuple[list[dict], str | None]:
    """(the model's files, or [] and why not): the model, then each external data file, as {"file": the name the
    model reads it by (its location, relative to the model's directory), "path", "bytes", "sha256", "data"}.

    The file at the manifest's model.path and its data files are taken for the run's model only when their digest
    is the run key's: a manifest from elsewhere could name any file of this machine."""
    model = manifest["model"]
    path, data_files = Path(model["path"]), [Path(p) for p in model.get("data_files") or [] if isinstance(p, str)]
    name = path.name
    try:
        if not all(f.is_file() for f in (path, *data_files)):
            return [], f"the model file {name} is not on the machine that made this report: not embedded."
        files = [{"file": name, "path": path, "bytes": path.stat().st_size, "sha256": models.file_sha256(path),
                  "data": False}]
        for f in data_files:
            location = Path(os.path.relpath(f, path.parent)).as_posix()
            if location_problem(location):  # the run refused such a file: this manifest is not the run's
                return [], f"the data file {f.name} is not beside the model {name}: not embedded."
            files.append({"file": location, "path": f, "bytes": f.stat().st_size, "sha256": models.file_sha256(f),
                          "data": True})
    except OSError as exc:
        return [], f"the model file {name} could not be read ({exc.strerror or exc}): not embedded."
    if models.digest_of([f["sha256"] for f in files]) != key.get("model"):
        return [], (f"the file at the run's model path ({name}) is not the run's model (its digest is not "
                    "the run key's): not embedded.")
    return files, None


def _batch(manifest: dict, key: dict) -> tuple[dict | None, str | None]:
    """(the run's batch, or None and why it is not embedded): the file at batch.path when its digest is the key's."""
    path = Path(manifest["batch"]["path"])
    try:
        arrays = inputs_mod.load_npz(path, "batch.path")
    except UsageError:
        return None, f"the batch {path.name} is not a readable .npz on the machine that made this report: not embedded."
    if inputs_mod.arrays_digest(arrays) != key.get("batch"):
        return None, (f"the file at the run's batch path ({path.name}) is not the run's batch (its digest is not the "
                      "run key's): not embedded.")
    return arrays, None


def _full_part(manifest: dict, key: dict, embed_limit: int, attach_limit: int) -> dict:
    """The full model and batch as the script holds them: the model embedded when it is one file within the embed
    limit, else (with its data files) in the attachment when they are within the attach limit together, else
    named with its files for the reader to give; a hub model is fetched by its repo and revision."""
    files, model_note = _model_files(manifest, key)
    inputs, batch_note = _batch(manifest, key)
    hub = None
    if manifest["model"].get("source") == "hub":
        spec = models.registered().get(manifest["model"].get("name"))
        if spec is not None:
            hub = {"repo_id": spec.repo, "revision": spec.revision, "files": [spec.model_file, *spec.extra_files]}
    total = sum(f["bytes"] for f in files)
    alone = len(files) == 1 and total <= embed_limit
    carried = bool(files) and (alone or (hub is None and total <= attach_limit))
    try:
        data = [f["path"].read_bytes() for f in files] if carried else []
    except OSError as exc:
        data, model_note = [], f"the model file {files[0]['file']} could not be read ({exc.strerror or exc}): not embedded."
    if data and models.digest_of([hashlib.sha256(d).hexdigest() for d in data]) != key.get("model"):
        data = []  # changed since it was hashed
    return {"model": data[0] if data else None, "data": data[1:], "attached": bool(data) and not alone,
            "sha256": files[0]["sha256"] if files else None, "file": Path(manifest["model"]["path"]).name,
            "files": [{k: f[k] for k in ("file", "bytes", "sha256", "data")} for f in files],
            "data_files": [[f["file"], f["sha256"], f["bytes"]] for f in files[1:]], "hub": hub,
            "inputs": inputs, "outputs": list(key.get("outputs") or []),
            "notes": [n for n in (model_note, batch_note) if n]}


def reference_values(store: RunStore, ref: dict | None, first_bad: str | None) -> dict | None:
    """The values the question `ref` (its reference's kind, id and a file's path, as its run document keeps
    them) compared with, for the run's outputs, or None when this machine has them not.

    A file: the one at the reference's path when its digest is the reference's id. A release: that
    release's saved outputs in the run. fp32: the fp32 model's saved outputs on the first bad release (what the
    run judged it bad against). Either way only for the outputs the run saved of its own probes, shape for
    shape; every file of the run is its own: a name out of outputs/ is not followed."""
    from harness.reference import arrays_for, restored

    reference = restored(ref, store)
    arrays = arrays_for(reference, store, first_bad or "") if reference is not None else None
    if arrays is None:
        return None
    # values for the outputs the run saved, of their shapes: a manifest from elsewhere naming some other .npz of
    # this machine (with its digest as the id) embeds nothing
    probed = [first_bad, *(r["version"] for r in store.records() if r.get("status") == "ran" and not r.get("series"))]
    own = next((o for o in (store.outputs(v) for v in probed if v) if o), None)
    if not own or any(k not in arrays or arrays[k].shape != v.shape for k, v in own.items()):
        return None
    return {k: arrays[k] for k in own}


SCRIPT_LIMIT = 40_000  # characters of repro.py, so that the report holding it stays under REPORT_LIMIT
REPORT_LIMIT = 60_000  # characters of the Markdown: GitHub refuses an issue body over 65,536
ATTACH_LIMIT = 20 << 20  # bytes of the model and its data put in the attachment: GitHub takes files up to 25 MB


def write_repro(store: RunStore, manifest: dict, key: dict, predicate: Predicate, reference: dict | None,
                embed_limit: int, where: str, reference_label: str = "the reference",
                into: RunStore | None = None, attach_limit: int = ATTACH_LIMIT) -> dict:
    """repro.py of the run's question (`predicate`, and `reference`: the values it compares with, by output, named
    `reference_label` in the script's words), and beside it the attachment (REPRO_BATCH) of what would make the
    script too long for a report; written in the run, or in `into` (the folder of a question of its own)."""
    notes = []
    # the reduction carries its own reference values (those its first bad release was compared with, of its
    # own outputs): it is judged as the run's question judges even where the full model's are not here
    reduced, over, reduced_note = _reduced_part(store, embed_limit, predicate)
    if predicate.needs_reference and reference is None:
        if reduced is None:
            notes.append("the reference's values are not on the machine that made this report: the script judges "
                         f"{_without_reference(predicate)}, not {predicate}.")
            predicate = _without_reference(predicate)
        else:
            notes.append("the reference's values of the full model are not on the machine that made this report: "
                         "--full gives no verdict; the reduced repro carries its own.")
    full = _full_part(manifest, key, embed_limit, attach_limit)
    full["reference"] = reference if predicate.needs_reference else None
    full["notes"] += notes + ([reduced_note] if reduced_note else [])
    package = packages.of_key(key)
    # a run of the node or web binding: repro.mjs runs its binding; repro.py the same model on the Python wheel of
    # the same release
    wheel = packages.Package() if package.from_npm else package
    name = manifest["model"]["name"]
    title = f"{name} on {wheel.name} ({wheel.provider})" + (
        f", the Python wheel of the release the run probed on {package.name} ({REPRO_JS} runs that binding)"
        if package.from_npm else "")
    blobs = repro_mod.parts(reduced, full)

    def make(attached: list[str]) -> tuple[str, str | None, bytes | None, dict | None]:
        data = repro_mod.attachment({k: blobs[k] for k in attached}) if attached else None
        info = {"file": REPRO_BATCH, "sha256": hashlib.sha256(data).hexdigest(), "parts": list(attached)} if data else None
        options = key.get("session_options") or {}
        try:
            text = repro_mod.script(title=title, predicate=predicate, bad_means=predicate.words(reference_label),
                                    requirement=wheel.requirement("VERSION"),
                                    providers=wheel.providers_request(), session_options=options,
                                    where=where, reduced=reduced, full=full, attached=info)
            js = repro_node.script(title=f"{name} on {package.name} ({package.provider})", package=package,
                                   predicate=predicate, bad_means=predicate.words(reference_label),
                                   session_options=options, where=where, reduced=reduced, full=full, blobs=blobs,
                                   attached=info) if package.from_npm else None
        except ValueError as exc:  # a value of the evidence that is no plain data (NaN) has no literal
            raise HarnessError(f"{store.dir}: no repro script: the run's evidence holds {exc}") from None
        return text, js, data, info

    # what does not fit goes out: the arrays into the attachment (largest first), then the full model (it is the
    # user's own file: given by path), then the reduced model into the attachment
    # a part over the embed limit is attached from the start, and a model with its data files goes there whole
    over += ["full_model", *(k for k in blobs if k.startswith("full_data_"))] if full["attached"] else []
    attached: list[str] = [p for p in over if p in blobs]
    script, js, data, info = make(attached)
    arrays = sorted((k for k in repro_mod.ARRAY_PARTS if k in blobs), key=lambda k: -len(blobs[k]))
    for move in [*arrays, "full_model", "reduced_model"]:
        if max(len(script), len(js or "")) <= SCRIPT_LIMIT:
            break
        if move == "full_model":
            if full["model"] is None or move in attached:
                continue
            if len(blobs[move]) > attach_limit:
                full["model"] = None
                full["notes"].append(f"the model file {full['file']} ({len(blobs.pop(move)):,} bytes) is not "
                                     "embedded, to keep the report short: give it by path.")
            else:
                attached.append(move)
        elif move in blobs:
            attached.append(move)
        else:
            continue
        script, js, data, info = make(attached)
    out = into or store
    out.save_file(SCRIPT, script)
    if js is not None:
        out.save_file(REPRO_JS, js)
    else:
        out.remove_file(REPRO_JS)
    if data is not None:
        out.save_file(REPRO_BATCH, data)
    else:
        out.remove_file(REPRO_BATCH)  # an attachment of an earlier report is not this script's
    model_in = REPRO_BATCH if "full_model" in attached else SCRIPT if full["model"] is not None else None
    asked, js_note = repro_node.judged(predicate) if js is not None else (None, None)
    return {"file": SCRIPT, "model_embedded": model_in == SCRIPT, "model_attached": model_in == REPRO_BATCH,
            "model_file": full["file"], "model_files": full["files"],
            "model_sha256": full["sha256"], "hub": full["hub"], "notes": full["notes"],
            "reduced": {**{k: reduced[k] for k in ("nodes", "of", "rows", "pair")},
                        "model_is_full": reduced["model"] is None} if reduced else None,
            "predicate": str(predicate), "reference": reference is not None and predicate.needs_reference,
            "reduced_reference": bool(reduced and reduced.get("reference") is not None),
            "files": _where(blobs, attached, reduced, full, manifest, f"{REPRO_JS}, {SCRIPT}" if js else SCRIPT),
            "script": script, "attached": info and {**info, "bytes": len(data)},
            "js": {"file": REPRO_JS, "script": js, "predicate": str(asked) if asked else None, "note": js_note}
            if js is not None else None}


def _where(blobs: dict[str, bytes], attached: list[str], reduced: dict | None, full: dict, manifest: dict,
           scripts: str = SCRIPT) -> list[dict]:
    """What is where: each file the repro needs (its name, size and sha256; a reduction's by its path under the
    results directory), and whether it is embedded in the scripts (`scripts`: their names), in the attachment, or
    for the reader to give (the model's data files beside it)."""
    rows = []
    for part, src in ((reduced or {}).get("sources") or {}).items():
        here = SCRIPT if part == "reduced_reference" else scripts  # repro.mjs compares with no reference
        rows.append({"part": part, **src, "where": REPRO_BATCH if part in attached else here if part in blobs else None})
    for i, f in enumerate(full.get("files") or ()):
        part = f"full_data_{i - 1}" if f["data"] else "full_model"
        where = REPRO_BATCH if part in attached else scripts if part in blobs else "the hub (--full fetches it)" \
            if full.get("hub") else f"not in the report: attach it beside {full['file']}" if f["data"] else \
            "not in the report: attach it"
        rows.append({"part": part, "file": f["file"], "bytes": f["bytes"], "sha256": f["sha256"], "where": where})
    for part, name in (("full_inputs", Path(manifest["batch"]["path"]).name), ("full_reference", "reference values")):
        if part in blobs:
            rows.append({"part": part, "file": name, "bytes": len(blobs[part]),
                         "sha256": hashlib.sha256(blobs[part]).hexdigest(),
                         "where": REPRO_BATCH if part in attached else scripts if part == "full_inputs" else SCRIPT})
    return rows
