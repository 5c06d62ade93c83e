"""What `bisect matrix init` writes: a starter matrix and a reusable GitHub workflow, both package data (they ship
with a tool install), the matrix with the models and range asked for and checked by the matrix loader before it is
written; an existing file is refused, not overwritten, unless forced."""

from __future__ import annotations

import json
import os
import re
import tempfile
from importlib.resources import files
from pathlib import Path
from typing import Sequence

from harness.errors import UsageError

MATRIX_NAME = "ortbisect.toml"  # the matrix's default path
WORKFLOW_PATH = Path(".github") / "workflows" / "ortbisect.yml"  # where the workflow goes, from the matrix's directory
_MODEL = re.compile(r'^\[\[models\]\]\n(?:name|path) = "[^"\n]*"\n\n?', re.M)
_RELEASES = re.compile(r"^releases = \{[^}\n]*\}", re.M)


def packaged(name: str) -> str:
    """A starter file's text, as the package holds it (matrix.toml, workflow.yml)."""
    return files("harness.nightly").joinpath("starter", name).read_text(encoding="utf-8")


def _string(text: str) -> str:
    """`text` as a TOML basic string (a JSON string is one, escapes included)."""
    return json.dumps(text, ensure_ascii=False)


def _model_keys(model: str) -> str:
    """A [[models]] entry's keys for `model`: name = ..., or path = ... (and inputs = ...)."""
    path, colon, batch = model.rpartition(":")
    if colon and batch.endswith(".npz"):
        return f"path = {_string(path)}\ninputs = {_string(batch)}\n"
    if model.endswith(".onnx") or "/" in model:
        return f"path = {_string(model)}\n"
    return f"name = {_string(model)}\n"


def matrix_text(models: Sequence[str] = (), since: str | None = None, from_: str | None = None,
                to: str | None = None) -> str:
    """The starter matrix, its models and range replaced by those given: a model is a registered name, or a file
    (FILE.onnx, or FILE.onnx:BATCH.npz with its batch) relative to the matrix file; a range is `since`, or
    `from_` and `to`."""
    text = packaged("matrix.toml")
    if models:
        entries = "".join(f"[[models]]\n{_model_keys(m)}\n" for m in models)
        found = list(_MODEL.finditer(text))
        text = text[:found[0].start()] + entries + _MODEL.sub("", text[found[0].end():])
    if since is not None:
        text = _RELEASES.sub(lambda _: f"releases = {{ since = {_string(since)} }}", text, count=1)
    elif from_ is not None:
        text = _RELEASES.sub(lambda _: f"releases = {{ from = {_string(from_)}, to = {_string(to)} }}", text, count=1)
    return text


def write(matrix_path: Path, text: str, workflow_path: Path | None, force: bool = False) -> list[Path]:
    """Write the matrix (checked by the loader where it will live: model paths are relative to it) and the workflow;
    nothing is written when either exists and `force` is not given, or the matrix does not load. The paths
    written."""
    from harness.nightly.matrix import load

    targets = [(Path(matrix_path), text)] + ([(Path(workflow_path), packaged("workflow.yml"))] if workflow_path else [])
    for path, _ in targets:
        if path.is_dir():
            raise UsageError(f"{path}: a directory; give a file path")
        if path.exists() and not force:
            raise UsageError(f"{path}: already there; give --force to overwrite it")
    matrix_path = Path(matrix_path)
    matrix_path.parent.mkdir(parents=True, exist_ok=True)
    fd, trial = tempfile.mkstemp(prefix=".init-", suffix=".toml", dir=matrix_path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        try:
            load(Path(trial))
        except UsageError as exc:  # the loader names the trial file: say it of the file asked for
            raise UsageError(str(exc).replace(str(trial), str(matrix_path))) from None
        for path, body in targets[1:]:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body, encoding="utf-8")
        os.replace(trial, matrix_path)
    finally:
        Path(trial).unlink(missing_ok=True)
    return [path for path, _ in targets]
