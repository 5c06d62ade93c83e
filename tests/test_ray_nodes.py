"""Nodes that have no ortbisect (--ray-address), and native aarch64 nodes for an x86_64 driver.

The job's runtime environment ships the driver's harness and the packages its probes import
(harness.executors.shipping), and a node serves only with the driver's own sources: the real test joins a node
started from a bare environment (Ray and uv alone: no ortbisect, numpy or onnx) to a head on loopback that takes
no probe (tests/raylocal.py, tests/raynode.py). On a cluster the backend is the one the nodes of the target's
arch run natively: the real test joins an aarch64 node (an arm64 Debian rootfs in a chroot, its every process
aarch64 through QEMU user mode and binfmt_misc, on loopback) to an x86_64 head labelled aarch64, and an aarch64
sweep runs on the aarch64 node alone, natively. The others hold the pure parts: what is shipped, the digest
check, what the node's side of a probe imports, the backend chosen for the nodes.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shlex
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
    with raylocal.joined_node([str(python), str(RAYNODE), cpuless_head, "bare", "2"], "bare node", 60,
                              cwd=tmp_path_factory.mktemp("bare-node")) as said:
        yield python, said["node_id"]


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


# -- a native aarch64 node for an x86_64 driver ------------------------------------------------------------------

def test_on_a_cluster_auto_is_the_backend_the_nodes_of_the_target_s_arch_run_natively(tmp_path):
    """Here --arch aarch64 picks QEMU when this machine is x86_64; on a cluster the backend is chosen for the nodes
    of the target's arch (host=aarch64): auto is the native uv, emulation only where --backend asks, and --cpu has
    no model to pick. The driver's runner is what the records and the key say, and nothing is provisioned here."""
    if platform.machine() != "x86_64":
        pytest.skip("the driver must be an x86_64 machine, where auto picks QEMU for aarch64")
    from harness.errors import UsageError
    from harness.releases.versions import Target
    from harness.runners import check_target, make_runner

    assert check_target("auto", "aarch64") == "qemu"
    assert check_target("auto", "aarch64", host="aarch64") == "uv"
    assert check_target("qemu", "aarch64", host="aarch64") == "qemu"
    assert check_target("uv", "aarch64", host="aarch64") == "uv"
    with pytest.raises(UsageError, match="--backend uv runs x86_64 probes, not aarch64"):
        check_target("uv", "aarch64")
    with pytest.raises(UsageError, match="on the nodes' own CPUs.*--backend qemu"):
        check_target("auto", "aarch64", "neoverse-n1", host="aarch64")
    runner = make_runner("auto", Target("aarch64", "3.11"), tmp_path, on_nodes=True)
    runner.provision()
    assert {k: runner.provenance()[k] for k in ("backend", "arch")} == {"backend": "uv", "arch": "aarch64"}
    assert not list(tmp_path.iterdir())  # no QEMU, no sysroot, no environment on the driver
    line = cluster.no_node_serves([cluster.Node("n", "127.0.0.1", "h", "x86_64", "aarch64", "m", "f", "0.1.0",
                                                shipping.source_digest())], [], "aarch64", False)
    assert "runs aarch64 probes natively (nodes: h (aarch64 on x86_64))" in line and "--backend qemu" in line


AARCH64_SITE_PACKAGES = "usr/local/lib/python3.11/dist-packages"  # on the Debian rootfs's sys.path


def _aarch64_ray_site(folder: Path) -> Path:
    """Ray (its default extra) and uv as aarch64 wheels for CPython 3.11, unpacked once per cache, with bytecode
    made here (the same for every 3.11): an emulated Python compiling Ray's imports at each start would miss the
    raylet's 15 s wait for its agents."""
    site = folder / f"aarch64-ray{ray.__version__}-py3.11"
    with file_lock(folder / f"{site.name}.lock"):
        if not (site / ".made").exists():
            shutil.rmtree(site, ignore_errors=True)
            subprocess.run([uv_bin(), "pip", "install", "-q", "--target", str(site), "--python-platform",
                            "aarch64-unknown-linux-gnu", "--python-version", "3.11", "--only-binary", ":all:",
                            f"ray[default]=={ray.__version__}", f"uv=={importlib.metadata.version('uv')}"],
                           check=True, capture_output=True)
            subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "2", str(site)], capture_output=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"})
            (site / ".made").touch()
    return site


def _aarch64_root(folder: Path, tarball: Path) -> Path:
    """The arm64 Debian rootfs (the docker backend's, harness.runners.provision.rootfs) unpacked once per cache,
    with the folders the node's mounts go on; its standard library's bytecode made here too."""
    root = folder / f"rootfs-{tarball.stem}"
    with file_lock(folder / f"{root.name}.lock"):
        if not (root / ".made").exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            subprocess.run(["tar", "-xf", str(tarball), "-C", str(root)], check=True, capture_output=True)
            for d in (AARCH64_SITE_PACKAGES, "opt/tests", "cache", "etc/ssl", "proc", "dev", "sys", "tmp"):
                (root / d).mkdir(parents=True, exist_ok=True)
            for f in ("etc/resolv.conf", "etc/hosts"):
                (root / f).touch()
            subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "2", str(root / "usr/lib/python3.11")],
                           capture_output=True, env={k: v for k, v in os.environ.items()
                                                     if k != "PYTHONDONTWRITEBYTECODE"})
            (root / ".made").touch()
    return root


def _aarch64_node_problem() -> str | None:
    """Why this machine cannot run an emulated aarch64 node, or None."""
    from harness.runners.provision.binfmt import aarch64_emulation

    if platform.machine() != "x86_64" or sys.platform != "linux":
        return "an emulated aarch64 node is for an x86_64 Linux driver"
    if os.geteuid() != 0:
        return "the node runs in a chroot of an arm64 rootfs, in a mount namespace of its own: that needs root"
    missing = [c for c in ("unshare", "chroot", "mount", "tar") if shutil.which(c) is None]
    if missing:
        return f"{', '.join(missing)} not found"
    ok, why = aarch64_emulation()
    if not ok:
        return f"aarch64 binaries need qemu-aarch64 registered with binfmt_misc, flag F: {why}"
    return None


def _node_script(root: Path, site: Path, cache: Path, scratch: str, address: str, env: dict) -> str:
    """The shell line that runs tests/raynode.py as an aarch64 process: in a private mount namespace (nothing is
    mounted on this machine), the rootfs with this machine's /proc, /dev and /sys, a /tmp of its own (with the
    scratch folder's path, so its processes are ended by it), the aarch64 Ray, the node's caches and the tests."""
    q = shlex.quote
    r = str(root)
    binds = [("/proc", "proc"), ("/dev", "dev"), ("/sys", "sys"), (str(site), AARCH64_SITE_PACKAGES),
             (str(Path(__file__).parent), "opt/tests"), (str(cache), "cache"), ("/etc/resolv.conf", "etc/resolv.conf"),
             ("/etc/hosts", "etc/hosts")]
    if Path("/etc/ssl").is_dir():
        binds.append(("/etc/ssl", "etc/ssl"))  # the CA certificates the node's uv downloads with
    lines = ["set -e", "mount --make-rprivate /"]
    lines += [f"mount --rbind {q(src)} {q(r + '/' + dst)}" for src, dst in binds]
    lines += [f"mount -t tmpfs tmpfs {q(r + '/tmp')}", f"mkdir -p {q(r + scratch)}"]
    variables = " ".join(q(f"{k}={v}") for k, v in env.items())
    lines.append(f"exec chroot {q(r)} /usr/bin/env -i {variables} /usr/bin/python3.11 /opt/tests/raynode.py "
                 f"{q(address)} arm64 2")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def x86_head_labelled_aarch64(ray_env):
    """A head of this x86_64 machine, labelled aarch64 and with a CPU: a node no native aarch64 probe may reach.
    The bare node's cluster is done with first: one cluster at a time on two cores."""
    raylocal.end_processes_under(ray_env["RAY_TMPDIR"])
    with raylocal.started_head(ray_env, cpus=1, labels=f"{cluster.ARCH_LABEL}=aarch64") as address:
        yield address


@pytest.fixture(scope="module")
def aarch64_node(cache_dir, ray_env, x86_head_labelled_aarch64):
    """A node whose raylet, agents and workers are aarch64 processes (QEMU user mode through binfmt_misc), joined
    to the head: its node id. Its environments and uv cache are kept in the test cache, so CI pays for them once."""
    why = _aarch64_node_problem()
    if why:
        pytest.skip(why)
    from harness.runners.provision import ProvisionError
    from harness.runners.provision.rootfs import rootfs_tarball

    folder = cache_dir / "ray-nodes"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        tarball, _ = rootfs_tarball("aarch64", cache_dir)
    except ProvisionError as exc:
        pytest.skip(f"no arm64 rootfs: {exc}")
    root, site = _aarch64_root(folder, tarball), _aarch64_ray_site(folder)
    cache = folder / "aarch64-node"
    cache.mkdir(exist_ok=True)
    passed = {k: v for k, v in os.environ.items()
              if k.lower().endswith("_proxy") or k in ("SSL_CERT_FILE", "SSL_CERT_DIR", "UV_INDEX_URL",
                                                       "UV_DEFAULT_INDEX", "UV_INDEX", "UV_EXTRA_INDEX_URL")}
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8", **passed,
           **{k: ray_env[k] for k in ("RAY_TMPDIR", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_USAGE_STATS_ENABLED")},
           # the rootfs's CPython is 3.11.2, this one 3.11.x: Ray asks for the same minor version
           "RAY_DEFAULT_PYTHON_VERSION_MATCH_LEVEL": "minor",
           # an emulated node's agents and workers start in tens of seconds where native ones take one or two
           "RAY_agent_register_timeout_ms": "300000", "RAY_worker_register_timeout_seconds": "300",
           "QEMU_CPU": "neoverse-n1",  # has fp16 arithmetic (asimdhp), as the QEMU backend's default
           "ORTBISECT_NODE_CACHE": "/cache/envs", "UV_CACHE_DIR": "/cache/uv"}
    script = _node_script(root, site, cache, ray_env["RAY_TMPDIR"], x86_head_labelled_aarch64, env)
    with raylocal.joined_node(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script],
                              "aarch64 node", 120) as said:
        yield said["node_id"]


@pytest.mark.release
@pytest.mark.qemu
def test_an_aarch64_sweep_from_an_x86_64_driver_runs_natively_on_the_aarch64_node(
        bisect, x86_head_labelled_aarch64, aarch64_node, residual_overflow, tmp_path):
    """--arch aarch64 with the default backend: every probe on the aarch64 node, in a native aarch64 environment it
    made itself (backend uv), none on the x86_64 head labelled aarch64; fp16 Adds from 1.24.1 as on a real
    asimdhp CPU. The driver provisions nothing for it: its own cache gets no QEMU and no environment."""
    model, batch = residual_overflow
    driver_cache = tmp_path / "driver-cache"
    shutil.copytree(bisect.cache_dir / "index", driver_cache / "index")  # the release listing, for --offline
    argv = [sys.executable, "-m", "harness.cli", "sweep", "--model", str(model), "--inputs", str(batch),
            "--from", "1.23.2", "--to", "1.24.1", "--offline", "--arch", "aarch64", "--ray-address",
            x86_head_labelled_aarch64, "-j", "2", "--cache-dir", str(driver_cache), "--results-dir",
            str(tmp_path / "results"), "--json"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = raylocal.records(tmp_path / "results")
    assert sorted(r["version"] for r in recs) == ["1.23.2", "1.24.1"]
    assert all(r["status"] == "ran" for r in recs), [(r["version"], r.get("reason")) for r in recs]
    assert {r["provenance"]["node"]["id"] for r in recs} == {aarch64_node}
    assert all((r["provenance"]["backend"], r["provenance"]["arch"], r["provenance"]["node"]["arch"])
               == ("uv", "aarch64", "aarch64") for r in recs)
    doc = json.loads(proc.stdout)
    assert (doc["last_good"], doc["first_bad"]) == ("1.23.2", "1.24.1")
    assert not (driver_cache / "tools").exists() and not (driver_cache / "envs").exists()
