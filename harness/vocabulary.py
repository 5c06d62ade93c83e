"""Words every part of the harness shares, defined once: architectures, session
option values, where the cache and the results live by default.

The probe worker keeps its own copy of the option enums (it imports nothing of
the harness); `tests/test_vocabulary.py` checks the two agree.
"""

from __future__ import annotations

import os
from pathlib import Path

ARCHS = ("x86_64", "aarch64")
# Docker's and Apple's names for the same CPUs.
ARCH_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}

# Graph optimization levels, in order of how much the optimizer does, with onnxruntime's enum names.
GRAPH_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "layout": "ORT_ENABLE_LAYOUT",  # only in releases that have it (1.23 on)
    "all": "ORT_ENABLE_ALL",
}
EXEC_MODES = {"sequential": "ORT_SEQUENTIAL", "parallel": "ORT_PARALLEL"}
#: the environment variable a worker reads its harness's pid from (its watchdog ends it when that parent is gone)
WORKER_PARENT_ENV = "ORTBISECT_WORKER_PARENT"

DEFAULT_RESULTS_DIR = Path("results")
DEFAULT_TRACE_BUDGET_MB = 256  # MiB of exposed tensors per trace pass, above the model's own memory


def canonical_arch(name: str) -> str:
    """x86_64 or aarch64 for any of their names; anything else is returned as given, for the caller to refuse."""
    name = name.strip()
    return ARCH_ALIASES.get(name, name)


def default_cache_dir() -> Path:
    """Environments, the release listing and generated models: $XDG_CACHE_HOME/ortbisect."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ortbisect"


#: the oldest onnxruntime release the probe worker runs on (harness/worker.py; each package numbers its releases as
#: onnxruntime does)
OLDEST_RELEASE = "1.19.0"

# onnxruntime's packages and execution providers.
DEFAULT_PACKAGE = "onnxruntime"
DEFAULT_EP = "cpu"
#: the --ep word -> onnxruntime's name of the execution provider
PROVIDERS = {"cpu": "CPUExecutionProvider", "openvino": "OpenVINOExecutionProvider", "cuda": "CUDAExecutionProvider",
             "wasm": "WebAssemblyExecutionProvider"}
#: the packages the harness knows -> the --ep words each one runs
PACKAGES = {
    "onnxruntime": ("cpu",),
    "onnxruntime-openvino": ("cpu", "openvino"),
    "onnxruntime-gpu": ("cpu", "cuda"),
    "onnxruntime-node": ("cpu",),
    "onnxruntime-web": ("wasm",),
}
#: the APIs a model's users call onnxruntime through (--binding) -> the package a probe of it installs, and its
#: provider: python, the wheels from the package index (the packages above, installed by uv); node and web, the
#: npm packages (installed by npm, run by Node.js: onnxruntime-node's native library, onnxruntime-web's WebAssembly)
BINDINGS = {"python": (DEFAULT_PACKAGE, DEFAULT_EP), "node": ("onnxruntime-node", "cpu"), "web": ("onnxruntime-web", "wasm")}
DEFAULT_BINDING = "python"


def binding_of(package: str) -> str:
    """The binding a package is installed and run as: python unless it is one of the npm packages."""
    return next((b for b, (name, _) in BINDINGS.items() if name == package and b != DEFAULT_BINDING), DEFAULT_BINDING)
#: extras installed with a package for a provider: the CUDA and cuDNN runtime wheels of onnxruntime-gpu
EP_EXTRAS = {("onnxruntime-gpu", "cuda"): ("cuda", "cudnn")}
#: providers that need a device the host must show before anything is installed, and the command that shows it
DEVICE_CHECKS = {"cuda": ("nvidia-smi", "no NVIDIA GPU is visible")}
