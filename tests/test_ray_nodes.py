"""Nodes that have no ortbisect (--ray-address): the job's runtime environment ships the driver's harness and the
packages its probes import (harness.executors.shipping), and a node serves only with the driver's own sources.

The real test joins a node started from a bare environment (Ray and uv alone: no ortbisect, numpy or onnx) to a
head on loopback that takes no probe (tests/raylocal.py, tests/raynode.py); the others hold the pure parts: what
is shipped, the digest check, and what the node's side of a probe imports.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed here (the extra: uv sync --extra ray)")

import raylocal  # noqa: E402
from raylocal import ray_env  # noqa: E402, F401  (a fixture)

from harness.executors import cluster, shipping  # noqa: E402
from harness.releases.uvtool import uv_bin  # noqa: E402
from harness.results.locking import file_lock  # noqa: E402

RAYNODE = Path(__file__).parent / "raynode.py"
#: what the driver has and a node need not: none of it may be imported by the node's side of a probe
DRIVER_ONLY = ("rich", "httpx", "huggingface_hub", "tokenizers", "pandas", "matplotlib", "docker", "jinja2")


def bare_python(cache_dir: Path) -> Path:
    """The Python of a uv environment holding Ray (with its default extra: runtime environments need virtualenv)
    and uv (a `uv venv` has no pip, with which Ray would install uv) alone, of this Python's version (Ray's rule);
    made once per cache under a lock, so CI pays for it once."""
    folder = cache_dir / "ray-nodes"
    env = folder / f"bare-ray{ray.__version__}-py{platform.python_version()}"
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / f"{env.name}.lock"):
        if not (env / ".made").exists():
            shutil.rmtree(env, ignore_errors=True)
            subprocess.run([uv_bin(), "venv", "-q", "--python", sys._base_executable, str(env)], check=True,
                           capture_output=True)
            subprocess.run([uv_bin(), "pip", "install", "-q", "--python", str(env / "bin" / "python"),
                            f"ray[default]=={ray.__version__}", f"uv=={importlib.metadata.version('uv')}"],
                           check=True, capture_output=True)
            (env / ".made").touch()
    return env / "bin" / "python"


def test_the_job_ships_the_driver_s_package_and_pins_what_its_probes_import():
    env = shipping.runtime_env()
    assert env["py_modules"] == [str(Path(shipping.__file__).resolve().parent.parent)]
    pins = {p.split("==")[0]: p.split("==")[1] for p in env["uv"]["packages"]}
    assert pins == {name: importlib.metadata.version(name) for name in ("numpy", "onnx", "uv")}
    assert env["uv"]["uv_pip_install_options"] == ["--only-binary", ":all:"]  # wheels only, uv's cache kept


def test_a_node_importing_other_harness_sources_serves_no_probe(tmp_path):
    """One byte changed in one module is another digest; a node reporting it is no serving node, said in the
    refusal, while a node of the driver's digest serves."""
    copy = tmp_path / "harness"
    shutil.copytree(shipping.package_dir(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert shipping.source_digest(copy) == shipping.source_digest()
    (copy / "verdicts.py").write_text((copy / "verdicts.py").read_text() + "\n# another\n")
    other = shipping.source_digest(copy)
    assert other != shipping.source_digest()

    def node(name: str, digest: str) -> cluster.Node:
        return cluster.Node(name, "127.0.0.1", name, "x86_64", "x86_64", "m", "f", "0.1.0", digest)

    nodes = [node("same", shipping.source_digest()), node("changed", other)]
    assert [n.node_id for n in cluster.serving_nodes(nodes, "x86_64", False, shipping.source_digest())] == ["same"]
    line = cluster.no_node_serves(nodes[1:], [], "x86_64", False)
    assert f"changed (x86_64, another harness (ortbisect 0.1.0, sources {other[:12]}))" in line


def test_the_node_side_of_a_probe_imports_none_of_the_driver_s_packages():
    """What a node unpickles and runs (the task, the probe, its runner, a margin's job) imports numpy, packaging
    and onnx beyond Ray, never the driver's own packages."""
    code = ("import sys, ray, ray.util.scheduling_strategies; before = set(sys.modules)\n"
            "import harness.executors.cluster, harness.probe, harness.runners, harness.graphs.margin\n"
            "print(' '.join(sorted({m.split('.')[0] for m in set(sys.modules) - before})))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = set(proc.stdout.split())
    assert {"harness", "numpy", "onnx"} <= imported
    assert not imported & set(DRIVER_ONLY), imported & set(DRIVER_ONLY)


@pytest.fixture(scope="module")
def cpuless_head(ray_env):
    """A head on loopback with no CPU: it takes no probe, so every probe goes to the nodes joined to it."""
    with raylocal.started_head(ray_env, cpus=0) as address:
        yield address


@pytest.fixture(scope="module")
def bare_node(cache_dir, cpuless_head, tmp_path_factory):
    """A node of two CPUs from the bare environment, joined to the head: (its Python, its node id). It runs in a
    folder of its own: in the checkout, its Python would find the harness there."""
    python = bare_python(cache_dir)
    proc = subprocess.Popen([str(python), str(RAYNODE), cpuless_head, "bare", "2"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=tmp_path_factory.mktemp("bare-node"))
    try:
        said = json.loads(proc.stdout.readline() or "null")
        assert said, "the bare node did not start"
        yield python, said["node_id"]
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.release
def test_a_node_with_ray_alone_runs_the_sweep_with_the_driver_s_harness(bisect, cpuless_head, bare_node,
                                                                          residual_norm, tmp_path):
    python, node_id = bare_node
    has = subprocess.run([str(python), "-c", "import importlib.util as u; "
                          "print([m for m in ('harness', 'numpy', 'onnx') if u.find_spec(m)])"],
                         capture_output=True, text=True, timeout=60, cwd=python.parent)
    assert has.stdout.strip() == "[]", has.stdout + has.stderr[-2000:]  # nothing of ours on the node
    model, batch = residual_norm
    # the driver runs outside the checkout: Ray gives a node's workers the driver's folder, which on this machine
    # would hold the harness
    res = bisect("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.0", "--to", "1.21.1",
                 "--offline", "--ray-address", cpuless_head, "-j", "2", "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    recs = raylocal.records(bisect.results_dir)
    assert sorted(r["version"] for r in recs) == ["1.19.0", "1.19.2", "1.20.0", "1.20.1", "1.21.0", "1.21.1"]
    assert all(r["status"] == "ran" for r in recs), [(r["version"], r.get("reason")) for r in recs]
    assert {r["provenance"]["node"]["id"] for r in recs} == {node_id}
    assert all(r["provenance"]["backend"] == "uv" and r["provenance"]["node"]["arch"] == platform.machine()
               for r in recs)
    assert all("error" not in r["margin"] for r in recs)  # the margin read the optimized graph with shipped onnx
    doc = res.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0")
