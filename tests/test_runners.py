"""The backend registry (harness/runners/__init__.py): checks, auto, provenance keys, report texts.

Nothing here provisions a backend or needs an engine: the registry answers
from what each Runner class declares.
"""

from __future__ import annotations

import ast
import platform
import shlex
from pathlib import Path

import pytest

from harness import runners
from harness.errors import UsageError
from harness.releases.versions import Target

HARNESS = Path(__file__).resolve().parent.parent / "harness"
NATIVE = platform.machine()
FOREIGN = "aarch64" if NATIVE == "x86_64" else "x86_64"


def test_backends_and_provenance_keys_come_from_the_registry():
    assert runners.BACKENDS == ("auto", *runners.REGISTRY)
    assert set(runners.REGISTRY) == {"uv", "qemu", "docker", "nodejs"}
    assert runners.PROVENANCE_KEYS[:4] == ("arch", "backend", "cpu", "python")
    assert {"qemu", "image"} <= set(runners.PROVENANCE_KEYS)


def test_auto_runs_native_probes_natively():
    assert runners.check_target("auto", NATIVE) == "uv"
    if NATIVE == "x86_64":
        assert runners.check_target("auto", "aarch64") == "qemu"


@pytest.mark.parametrize("backend, arch, cpu, message", [
    ("auto", "sparc", None, "--arch sparc: no backend runs sparc probes"),
    ("podman", NATIVE, None, "--backend podman: unknown backend (choose from auto, uv, qemu, docker, nodejs)"),
    ("uv", FOREIGN, None, f"--backend uv runs {NATIVE} probes, not {FOREIGN}"),
    ("auto", NATIVE, "neoverse-n1", f"--cpu neoverse-n1: {NATIVE} probes run on this host's own CPU"),
    ("uv", NATIVE, "neoverse-n1", f"--cpu neoverse-n1: --backend uv runs {NATIVE} probes on this host's own CPU"),
    ("docker", NATIVE, "neoverse-n1", "--backend docker runs"),
    ("qemu", "aarch64", "graviton", "--cpu graviton: not a CPU model of qemu-aarch64"),
])
def test_check_target_blames_only_what_was_typed(backend, arch, cpu, message):
    with pytest.raises(UsageError) as err:
        runners.check_target(backend, arch, cpu)
    assert message in str(err.value)
    if backend == "auto":
        assert "--backend" not in str(err.value).split(";")[0].split("(")[0]


def test_a_matrix_spells_keys_its_own_way():
    with pytest.raises(UsageError, match=f"^backend 'uv' runs {NATIVE} probes, not {FOREIGN}; for {FOREIGN} use backend"):
        runners.check_target("uv", FOREIGN, spell=lambda key, value: f"{key} {value!r}")


def test_making_a_runner_provisions_nothing(tmp_path):
    runner = runners.make_runner("qemu", Target("aarch64", "3.11"), tmp_path, "cortex-a72")
    assert runner.cpu == "cortex-a72" and not (tmp_path / "tools").exists()
    with pytest.raises(RuntimeError, match="before provision"):
        runner.provenance()
    assert runners.make_runner("qemu", Target("aarch64", "3.11"), tmp_path).cpu == "neoverse-n1"
    with pytest.raises(UsageError, match="--python 3.12: aarch64 probes under QEMU run the sysroot's CPython 3.11"):
        runners.make_runner("auto" if NATIVE == "x86_64" else "qemu", Target("aarch64", "3.12"), tmp_path)
    assert runners.make_runner("auto", Target(NATIVE, "3.11"), tmp_path).provenance()["backend"] == "uv"


def test_setup_steps_and_doctor_fixes_keep_the_cache_dir(tmp_path):
    assert set(runners.setups()) == {"qemu"}
    cache = tmp_path / "my cache"
    rows = {c.what: c for c in runners.doctor_checks(cache)}
    assert f"bisect setup qemu --cache-dir '{cache}'" in rows["arm64 sysroot"].fix
    script = Path(__file__).resolve().parent.parent / ".ci" / "docker-engine.sh"  # by absolute path: any cwd
    assert f"bash {script} start" in rows["docker engine"].fix


def test_reports_describe_each_backend_and_how_to_reproduce_there():
    native = runners.describe({"backend": "uv", "arch": NATIVE}, "Some CPU", "1.20.0", "repro.py")
    assert native == {"how": "native (uv environment)", "cpu_model": "Some CPU", "reproduce": None}
    qemu = runners.describe({"backend": "qemu", "arch": "aarch64", "cpu": "neoverse-n1", "qemu": "10.0.13",
                             "python": "3.11"}, "Neoverse-N1", "1.24.1", "repro.py")
    assert qemu["how"] == "QEMU 10.0.13 user mode, emulated CPU neoverse-n1"
    assert qemu["cpu_model"] == "neoverse-n1 (/proc/cpuinfo under emulation says Neoverse-N1)"
    assert "qemu-aarch64 -L $SYSROOT -cpu neoverse-n1 $SYSROOT/usr/bin/python3.11 repro.py" in qemu["reproduce"]
    assert "onnxruntime==1.24.1" in qemu["reproduce"] and "aarch64-unknown-linux-gnu" in qemu["reproduce"]
    assert "--only-binary :all:" in qemu["reproduce"] and "'numpy>=1.21.6,<3'" in qemu["reproduce"]
    docker = runners.describe({"backend": "docker", "arch": "aarch64", "cpu": "cortex-a72", "image": "sha256:ab",
                               "python": "3.11"}, None, "1.24.1", "repro.py")
    assert docker["how"] == "container sha256:ab, emulated CPU cortex-a72"
    assert docker["reproduce"].startswith("docker run --rm --platform linux/arm64 -e QEMU_CPU=cortex-a72 ")
    inside = shlex.split(docker["reproduce"])[-1]  # wheels only and numpy's range, as the harness installs
    assert shlex.split(inside) == ["pip", "install", "--only-binary", ":all:", "onnxruntime==1.24.1", "numpy>=1.21.6,<3",
                                   "&&", "python", "repro.py"]
    unknown = runners.describe({"backend": "podman"}, None, "1.0", "repro.py")
    assert unknown["how"] == "backend podman" and unknown["reproduce"] is None


def test_no_module_outside_the_runners_names_a_backend():
    """A backend is known by name only under harness/runners/: elsewhere no string constant is one
    (prose in docstrings and comments may mention them; ast sees only whole constants)."""
    names = set(runners.REGISTRY)
    # the uv executable it looks up on PATH; the uv package a Ray node is given and Ray's uv plugin: not the backend
    allowed = {("releases/uvtool.py", "uv"), ("executors/shipping.py", "uv")}
    found = []
    for path in sorted(HARNESS.rglob("*.py")):
        rel = path.relative_to(HARNESS)
        if rel.parts[0] == "runners":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in names and (str(rel), node.value) not in allowed:
                found.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not found, "backend names outside harness/runners/: " + ", ".join(found)
    assert len(list(HARNESS.rglob("*.py"))) > 30  # the walk saw the package
