"""The docker backend's engine plumbing, against a real engine.

Needs an engine reachable through DOCKER_HOST (``eval "$(.ci/docker-engine.sh
start /tmp/ortbisect-docker)"``); otherwise every test here is skipped with
the reason docker_pool.engine_status() gives. Images are built locally (debootstrap,
needs root and, for arm64, qemu binfmt); rootfs tarballs are cached under
ORTBISECT_TEST_CACHE (default ~/.cache/ortbisect-tests). A first run takes a
few minutes (arm64 debootstrap under emulation, provision.rootfs); later runs
reuse the images.

The tests only need the stdlib inside the container: no onnxruntime site dir.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from engines import ContainerWatch, unique_label

from harness.runners.docker import engine as de
from harness.runners.docker import pool as dp

pytestmark = pytest.mark.docker

NET_PROBE = r"""
import json, os, socket
out = {"interfaces": sorted(os.listdir("/sys/class/net"))}
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.settimeout(3)
try:
    s.connect(("127.0.0.1", 9))
    out["loopback_connect"] = "connected"
except OSError as exc:
    out["loopback_connect"] = type(exc).__name__
s.close()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.connect(("192.0.2.1", 53))  # needs a route; there is none without a network
    out["route_outside"] = True
except OSError as exc:
    out["route_outside"] = False
s.close()
print(json.dumps(out))
"""


def _cache_dir() -> Path:
    return Path(os.environ.get("ORTBISECT_TEST_CACHE", "~/.cache/ortbisect-tests")).expanduser()


@pytest.fixture(scope="module")
def client():
    ok, reason = dp.engine_status()
    if not ok:
        print(f"docker tests skipped: {reason}")
        pytest.skip(reason)
    c = dp.client_for()
    yield c
    c.close()


@pytest.fixture(scope="module")
def images(client):
    """arch -> probe image id, built (or reused) once per module."""
    built = {}

    def get(arch: str) -> str:
        if arch not in built:
            built[arch] = de.ensure_image(client, arch, _cache_dir(), log=print)
        return built[arch]

    return get


def test_engine_status_reports_server():
    ok, reason = dp.engine_status()
    if not ok:
        print(f"docker tests skipped: {reason}")
        pytest.skip(reason)
    assert "docker engine" in reason


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_python_runs_natively_or_emulated(client, images, arch):
    image_id = images(arch)
    prov = de.image_provenance(client, image_id)
    assert prov["id"] == image_id and prov["architecture"] == arch
    env = {"QEMU_CPU": "neoverse-n1"} if arch == "arm64" else {}
    r = de.run_container(
        client,
        image_id,
        ["python3", "-c", "import platform, sys; print(platform.machine(), sys.version_info[:2])"],
        env=env,
        platform=de.docker_platform(arch),
        mem_limit="1g",
        timeout=120,
    )
    assert (r.exit_code, r.signal, r.timed_out, r.oom_killed) == (0, None, False, False), r
    assert r.stdout.split()[0] == de.uname_machine(arch), r
    assert "(3, 11)" in r.stdout


@pytest.mark.parametrize("arch", ["amd64", "arm64"])
def test_network_is_absent(client, images, arch):
    image_id = images(arch)
    r = de.run_container(
        client, image_id, ["python3", "-c", NET_PROBE],
        platform=de.docker_platform(arch), mem_limit="1g", timeout=120,
    )
    assert r.exit_code == 0, r
    out = json.loads(r.stdout)
    assert out["interfaces"] == ["lo"], out
    assert out["loopback_connect"] in ("ConnectionRefusedError", "OSError"), out
    assert out["route_outside"] is False, out


def test_volume_files_in_and_results_out_without_a_bind_mount(client, images, tmp_path):
    """What a probe reads reaches the container through the API (a named volume, files copied in), what it writes
    comes back the same way, and the container has no bind mount: the engine could be another machine's."""
    image_id = images("amd64")
    name = f"ortbisect-test-{os.getpid()}"
    (tmp_path / "hello.txt").write_text("hi from the client\n")
    from harness.runners.docker import volumes as dv

    cache = dv.VolumeCache(client.info()["ID"], tmp_path / "locks")
    try:
        shipped = dv.ensure_volume(client, cache, image_id, name, [(tmp_path / "hello.txt", "hello.txt")], {})
        assert shipped.created and shipped.bytes > 0
        assert not dv.ensure_volume(client, dv.VolumeCache(cache.engine_id, cache.lock_dir), image_id, name,
                                    [], {}).created  # complete: reused by a new process's cache
        code = (
            "import os\n"
            "print(open('/data/hello.txt').read().strip(), open('/in/req.txt').read(), os.environ['PROBE_X'])\n"
            "open('/out/result.txt', 'w').write('ok')\n"
            "try:\n"
            "    open('/data/new.txt', 'w')\n"
            "except OSError as e:\n"
            "    print('ro', e.errno)\n"
        )
        run, label = unique_label("volume")
        watch = ContainerWatch(os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), label)
        try:
            r = de.run_container(
                client, image_id, ["python3", "-c", "import time; time.sleep(1)\n" + code],
                volumes={name: ("/data", "ro")}, files={"/in/req.txt": b"request", "/out/.keep": b""},
                fetch=("/out", tmp_path / "back"), env={"PROBE_X": "42"}, platform="linux/amd64", timeout=60,
                labels={de.LABEL_RUN: run},
            )
        finally:
            watch.stop()
        assert r.exit_code == 0, r
        assert r.stdout.splitlines() == ["hi from the client request 42", "ro 30"]
        assert (tmp_path / "back" / "result.txt").read_text() == "ok"
        (attrs,) = watch.inspected.values()  # this test's one container, whatever other tests run
        assert attrs["Config"]["Labels"][de.LABEL_RUN] == run
        assert watch.bind_mounts() == []
        assert [m["Type"] for m in attrs["HostConfig"].get("Mounts") or []] == ["volume"]
    finally:
        client.volumes.get(name).remove(force=True)


def test_exit_code_signal_and_stderr(client, images):
    image_id = images("amd64")
    r = de.run_container(
        client, image_id, ["python3", "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"],
        platform="linux/amd64", timeout=60,
    )
    assert (r.exit_code, r.signal, r.stderr) == (3, None, "boom\n")
    r = de.run_container(
        client, image_id, ["python3", "-c", "import ctypes; ctypes.string_at(0)"],
        platform="linux/amd64", timeout=60,
    )
    assert (r.exit_code, r.signal, r.timed_out) == (139, 11, False), r


def test_timeout_kills_and_removes(client, images):
    image_id = images("amd64")
    run, label = unique_label("timeout")
    r = de.run_container(
        client, image_id, ["python3", "-c", "import time; print('started', flush=True); time.sleep(600)"],
        platform="linux/amd64", timeout=10,  # ample for python3 to start and print
        labels={de.LABEL_RUN: run},
    )
    assert r.timed_out and r.signal == 9, r
    assert r.stdout == "started\n"
    assert r.seconds < 60
    assert client.containers.list(all=True, filters={"label": label}) == []  # removed


def test_oom_kill_is_reported(client, images):
    image_id = images("amd64")
    code = "x = bytearray(512 * 1024 * 1024); x[::4096] = b'1' * len(x[::4096]); print('survived')"
    r = de.run_container(
        client, image_id, ["python3", "-c", code], platform="linux/amd64", mem_limit="128m", timeout=60,
    )
    assert r.oom_killed, r
    assert r.signal == 9 and "survived" not in r.stdout


def test_existing_images_are_reused(client, images):
    first = images("amd64")
    again = de.ensure_image(client, "amd64", _cache_dir(), log=print)
    assert again == first


def test_image_builds_have_no_network(client, tmp_path):
    """A build step sees only loopback: the builds fetch nothing, and an engine without a default bridge (started
    with --bridge=none, or its docker0 removed by such an engine beside it on the host) still builds."""
    (tmp_path / "Dockerfile").write_text(
        "FROM ortbisect/bookworm-python:amd64\n"
        'RUN python3 -c "import os; n = sorted(os.listdir(\'/sys/class/net\')); assert n == [\'lo\'], n"\n')
    de.ensure_base_image(client, "amd64", _cache_dir(), log=print)
    tag = "ortbisect/test-no-network:amd64"
    try:
        de._build(client, print, path=str(tmp_path), tag=tag, platform=de.docker_platform("amd64"), pull=False)
        assert client.images.get(tag).id
    finally:
        try:
            client.images.remove(tag, force=True)
        except Exception:  # not built: the assertion above says why
            pass
