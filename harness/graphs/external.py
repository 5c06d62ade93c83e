"""A model's external data: which tensors keep their bytes in which file, at which offset and length, and
whether a location names a file inside the model's directory. Pure: reads the graph, never a data file (the
files are checked against these facts where a model is resolved, harness.models.registry).

No `onnx` import at the top: the checks of a warm run read these facts from the cache without it.
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx


@dataclass(frozen=True)
class ExternalTensor:
    """Where one tensor's bytes are, as its `external_data` entries say."""

    tensor: str
    location: str  # as written in the model: relative to the model's directory
    offset: int
    length: int | None  # bytes; None where neither the entries nor the tensor's type tell (strings, packed types)


def all_tensors(graph: onnx.GraphProto):
    """Every tensor of the graph: initializers, node attributes, and those of every subgraph."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from all_tensors(attr.g)
            for sub in attr.graphs:
                yield from all_tensors(sub)


def external_tensors(model: onnx.ModelProto) -> list[ExternalTensor]:
    """Every tensor of the model stored as external data. ValueError (naming the tensor) for an offset or a
    length that is not a number >= 0."""
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    out = []
    for t in all_tensors(model.graph):
        if not uses_external_data(t):
            continue
        try:
            info = ExternalDataInfo(t)
        except ValueError as exc:
            raise ValueError(f"tensor {t.name!r}: unreadable external data entries ({exc})") from None
        length = info.length if info.length is not None else _stored_bytes(t)
        out.append(ExternalTensor(t.name, info.location, info.offset or 0, length))
    return out


def _stored_bytes(t: onnx.TensorProto) -> int | None:
    """The bytes of the tensor's data by its type and shape; None where they are not one itemsize per element."""
    from onnx import TensorProto, helper

    packed = {getattr(TensorProto, n, None) for n in ("STRING", "UNDEFINED", "INT4", "UINT4", "FLOAT4E2M1",
                                                       "INT2", "UINT2")}
    if t.data_type in packed:
        return None
    try:
        return helper.tensor_dtype_to_np_dtype(t.data_type).itemsize * math.prod(t.dims)
    except (KeyError, TypeError, ValueError):
        return None


def location_problem(location: str) -> str | None:
    """Why an external data location must not be opened, or None. onnxruntime opens it relative to the model's
    directory, and copies of a model link their data files at it: an absolute path, or one through `..` out of
    that directory, would read (or link) a file of somewhere else."""
    if posixpath.isabs(location):
        return "is an absolute path, not one relative to the model's directory"
    norm = posixpath.normpath(location) if location and "\0" not in location else "."
    if norm == ".":
        return "names no file"
    if norm == ".." or norm.startswith("../"):
        return "leaves the model's directory"
    return None
