"""What the driver gives a Ray node (`--ray-address`), so that a node with Ray alone serves probes.

A node needs Ray at the driver's version with its `default` extra (Ray's runtime environments need its
virtualenv), in a Python of the driver's version. Everything else comes with the job, in Ray's own runtime
environment (`runtime_env()`):

- `py_modules`: this harness package's directory, as the driver imports it (its sources, no bytecode);
- `uv`: the third-party packages the node's side of a probe imports, pinned to the driver's own installed
  versions (`NODE_PACKAGES`); Ray's uv plugin installs them, wheels only, into a virtualenv over the node's
  Python, from the node's own uv cache. What the node's probes install (each release) is its runner's work,
  with the uv shipped here.

The survey runs in that environment and reports `source_digest()` of the harness it imports: the driver keeps
only the nodes whose digest is its own, so a node cannot probe with other code than the driver's.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from pathlib import Path

import harness
from harness.errors import HarnessError

#: what the node's side of a probe imports beyond Ray (which brings packaging): numpy (metrics, the margin's
#: rows), onnx (the margin reads the release's optimized graph; the job's margin names its tensors), uv (the
#: node's runner makes each release's environment with it)
NODE_PACKAGES = ("numpy", "onnx", "uv")
#: never a source distribution's build script (as every install of the harness); uv's cache is kept
UV_OPTIONS = ("--only-binary", ":all:")


def package_dir() -> Path:
    """The harness package's directory, as this process imports it."""
    return Path(harness.__file__).resolve().parent


def source_digest(root: Path | None = None) -> str:
    """The sha256 of the harness's sources under `root` (default: the package this process imports, read once):
    every `.py` file's path and content, in path order. Bytecode is left out: it is made from the sources."""
    return _digest(root) if root is not None else _own_digest()


@functools.cache
def _own_digest() -> str:
    return _digest(package_dir())


def _digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts):
        with path.open("rb") as f:
            content = hashlib.file_digest(f, "sha256").digest()
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + content)
    return digest.hexdigest()


def node_requirements() -> list[str]:
    """NODE_PACKAGES pinned to the versions installed here."""
    try:
        return [f"{name}=={importlib.metadata.version(name)}" for name in NODE_PACKAGES]
    except importlib.metadata.PackageNotFoundError as exc:
        raise HarnessError(f"--ray-address: {exc.name} is not installed here, and the nodes are given the "
                           f"driver's own version of it") from None


def runtime_env() -> dict:
    """The job's runtime environment on every node (see the module docstring)."""
    # made on a node at its first task (the survey), not when the job starts: a node with no CPU (a head kept
    # for scheduling) takes no probe and sets nothing up
    return {"py_modules": [str(package_dir())], "excludes": ["__pycache__", "*.pyc"],
            "uv": {"packages": node_requirements(), "uv_pip_install_options": list(UV_OPTIONS)},
            "config": {"eager_install": False}}


__all__ = ["NODE_PACKAGES", "node_requirements", "package_dir", "runtime_env", "source_digest"]
