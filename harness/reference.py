"""What a probe's outputs are compared with: a file, another release's outputs, or the model in fp32.

* `--reference FILE.npz`: outputs the user made (by hand, or on another machine);
* `--reference-release V`: the outputs of release V, probed in the same run
  (same model, batch, target and options) when the run does not hold them yet;
* `--reference fp32`: the model converted to fp32 by the tool (weights and
  casts included; the embedded models have an fp32 twin), run on the same
  release and target as each probe: a truth that does not depend on how a
  release computes in fp16.

A Reference says which one, in words for reports, with an id that tags the
metrics made against it. The probing of release and fp32 references is the
driver's (harness/driver.py); the fp32 model is made when the run is planned
(harness/models/fp32.py), so checking a request writes nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.errors import UsageError
from harness.metrics import probe_metrics
from harness.releases.versions import Release
from harness.results.store import RunStore, load_outputs
from harness.verdicts import Predicate, judge

FP32 = "fp32"
FP32_SERIES = "reference-fp32"  # the fp32 model's probe of each release, in the run's own store
RELEASE_SERIES = "reference"  # a reference release outside the searched range


@dataclass
class Reference:
    kind: str  # "file" | "release" | "fp32"
    label: str  # in words: "the model converted to fp32 (same release)"
    id: str  # tags the metrics made against it
    arrays: dict[str, np.ndarray] | None = None  # file; release once its probe is known
    release: Release | None = None  # release
    model: Path | None = None  # fp32
    path: Path | None = None  # file

    def identity(self) -> dict:
        """What a question keeps of it: kind, id and label, and the path of a file (to judge again later)."""
        return {"kind": self.kind, "id": self.id, "label": self.label,
                **({"path": str(self.path)} if self.path is not None else {})}


def from_file(path: Path, arrays: dict[str, np.ndarray], digest: str) -> Reference:
    return Reference("file", f"the outputs in {Path(path).name}", f"file:{digest[:16]}", arrays=arrays,
                     path=Path(path).resolve())


def from_release(release: Release) -> Reference:
    v = release.version
    return Reference("release", f"the outputs of onnxruntime {v}", f"release:{v}", release=release)


def pending_fp32() -> Reference:
    """`--reference fp32` as checked: the fp32 model is made when the run is planned (`from_fp32`)."""
    return Reference("fp32", "the model in fp32 on the same release", "fp32:pending")


def from_fp32(model: Path, how: str) -> Reference:
    digest = hashlib.sha256(Path(model).read_bytes()).hexdigest()[:16]
    return Reference("fp32", f"the model in fp32 on the same release ({how})", f"fp32:{digest}", model=Path(model))


# --- a question's reference read back from a run, and records judged against it -------------------


def restored(identity: dict | None, store: RunStore) -> Reference | None:
    """The reference a question names, with what the run holds of it: a file's arrays when the file is still
    there and still the one digested (else none: nothing is compared), a release's saved outputs. The fp32
    model's outputs are per release (`arrays_for`)."""
    from harness.models.inputs import arrays_digest, load_npz

    if not identity:
        return None
    kind, ref_id, label = identity.get("kind"), str(identity.get("id")), str(identity.get("label"))
    if kind == "file":
        path, arrays = identity.get("path"), None
        if isinstance(path, str) and Path(path).is_file():
            try:
                loaded = load_npz(Path(path), "the reference")
            except UsageError:  # unreadable now: no comparison, said by the verdicts
                loaded = None
            if loaded is not None and f"file:{arrays_digest(loaded)[:16]}" == ref_id:
                arrays = loaded
        return Reference("file", label, ref_id, arrays=arrays, path=Path(path) if isinstance(path, str) else None)
    if kind == "release":
        version = ref_id.removeprefix("release:")
        return Reference("release", label, ref_id, arrays=release_outputs(store, version), release=Release(version, []))
    return Reference(str(kind), label, ref_id)


def release_outputs(store: RunStore, version: str) -> dict[str, np.ndarray] | None:
    """The saved outputs of the run's newest probe of `version` that ran (its own, or as a reference)."""
    mine = [r for r in store.records() if r["version"] == version and not r.get("combo_id")
            and r.get("series") in (None, RELEASE_SERIES)]
    for rec in sorted(mine, key=lambda r: r.get("finished") or "", reverse=True):
        path = store.outputs_path(version, rec.get("series"))
        if rec["status"] == "ran" and path.exists():
            return load_outputs(path)
    return None


def fp32_record(store: RunStore, ref: Reference, version: str) -> dict | None:
    """The newest probe of the fp32 model `ref` on `version`, or None."""
    found = [r for r in store.records() if r["version"] == version and r.get("series") == FP32_SERIES
             and r.get("reference") == ref.id]
    return found[-1] if found else None


def arrays_for(ref: Reference | None, store: RunStore, version: str) -> dict[str, np.ndarray] | None:
    """What a probe of `version` is compared with: the file's or the release's arrays, or the fp32 model's
    outputs on that same release."""
    if ref is None:
        return None
    if ref.kind != FP32:
        return ref.arrays
    rec = fp32_record(store, ref, version)
    if rec is None or rec["status"] != "ran":
        return None
    return store.outputs(version, FP32_SERIES)


def judged(record: dict, predicate: Predicate, ref: Reference | None, store: RunStore) -> dict:
    """The record judged under `predicate` against `ref`: its stored metrics when they were made against that
    reference (or nothing is compared), else compared again from its saved outputs. A record that cannot be
    compared with `ref` is judged with no comparison at all, never with the metrics of another reference."""
    m = record.get("metrics") or {}
    stored = m.get("reference")
    if ref is None or record.get("status") != "ran" or stored == ref.id:
        return judge(record, predicate)
    arrays = arrays_for(ref, store, record["version"])
    outputs = store.outputs(record["version"], record.get("series")) if arrays is not None else None
    if arrays is not None and outputs is not None:
        return judge(record, predicate, arrays, outputs, ref.id)
    own = probe_metrics(record.get("result"))
    # a comparison that was tried and failed is said (the fp32 model did not run on its release); a probe that
    # was never compared with `ref` (another question's) keeps no comparison at all: verdicts.not_compared
    fp32_failed = ref.kind == FP32 and fp32_record(store, ref, record["version"]) is not None
    if stored is None and m.get("comparison_error"):
        own["comparison_error"] = m["comparison_error"]
    elif fp32_failed or (ref.kind == "release" and arrays is None):
        own["comparison_error"] = f"no outputs of {ref.label} to compare the probe of {record['version']} with"
    return judge({**record, "metrics": own}, predicate)
