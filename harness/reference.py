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
driver's (harness/driver.py); this module makes the fp32 model.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from harness.versions import Release

if TYPE_CHECKING:
    import onnx

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


def from_fp32(model: Path, how: str) -> Reference:
    digest = hashlib.sha256(Path(model).read_bytes()).hexdigest()[:16]
    return Reference("fp32", f"the model in fp32 on the same release ({how})", f"fp32:{digest}", model=Path(model))


def has_fp16(model: onnx.ModelProto) -> bool:
    """Whether any value or weight of the model is fp16 (else it is its own fp32 version)."""
    from onnx import TensorProto

    g = model.graph
    f16 = TensorProto.FLOAT16
    typed = [*g.input, *g.output, *g.value_info]
    return (any(t.data_type == f16 for t in g.initializer)
            or any(v.type.tensor_type.elem_type == f16 for v in typed)
            or any(a.t.data_type == f16 for n in g.node for a in n.attribute if a.HasField("t"))
            or any(a.i == f16 for n in g.node if n.op_type == "Cast" for a in n.attribute if a.name == "to"))


def fp32_model(resolved, cache_dir: Path) -> tuple[Path, str]:
    """(path, how) of the model in fp32: an embedded model's twin, else converted once into the cache.

    The conversion keeps the model's interface (fp16 inputs are cast in,
    outputs cast back), so the run's batch feeds it as it is.
    """
    spec = resolved.spec
    if spec.source == "generated":
        from harness import embedded

        made = embedded.materialize(spec.generator, Path(cache_dir) / "models" / spec.name)
        if made.get("model_fp32"):  # the full-size model has none: converted below like any model
            return Path(made["model_fp32"]), "the embedded model's fp32 twin, same weights"
    import onnx

    from harness.mitigate import to_fp32

    dest = Path(cache_dir) / "references" / f"{resolved.digest[:16]}.fp32.onnx"
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        converted = to_fp32(onnx.load(str(resolved.path)))
        tmp = dest.with_name(dest.name + ".tmp")
        big = converted.ByteSize() > (1 << 30)  # protobuf's 2 GB ceiling: weights beside the model
        onnx.save_model(converted, str(tmp), save_as_external_data=big, location=dest.name + ".data")
        tmp.replace(dest)
    return dest, "converted to fp32 by ortbisect, every node in fp32"
