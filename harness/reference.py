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

from harness.releases.versions import Release

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


def from_file(path: Path, arrays: dict[str, np.ndarray], digest: str) -> Reference:
    return Reference("file", f"the outputs in {Path(path).name}", f"file:{digest[:16]}", arrays=arrays)


def from_release(release: Release) -> Reference:
    v = release.version
    return Reference("release", f"the outputs of onnxruntime {v}", f"release:{v}", release=release)


def pending_fp32() -> Reference:
    """`--reference fp32` as checked: the fp32 model is made when the run is planned (`from_fp32`)."""
    return Reference("fp32", "the model in fp32 on the same release", "fp32:pending")


def from_fp32(model: Path, how: str) -> Reference:
    digest = hashlib.sha256(Path(model).read_bytes()).hexdigest()[:16]
    return Reference("fp32", f"the model in fp32 on the same release ({how})", f"fp32:{digest}", model=Path(model))
