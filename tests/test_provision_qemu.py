"""Tests of harness/runners/provision/qemu.py and provision/sysroot.py.

Unit tests run anywhere.  Tests marked ``qemu`` really provision QEMU and an
arm64 sysroot (about 40 MB of downloads from the host's Debian mirror, ~12 s
the first time) into ``$ORTBISECT_TEST_TOOLS`` (default
``~/.cache/ortbisect-tests/tools``) so later runs on the same machine reuse it.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from harness.runners.provision import ProvisionError
from harness.runners.provision import qemu as qp
from harness.runners.provision.debian import debian_mirror, read_host_sources
from harness.runners.provision.sysroot import setup_sysroot, sysroot_python

QEMU10_VERSION_TEXT = (
    "qemu-aarch64 version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)\n"
    "Copyright (c) 2003-2025 Fabrice Bellard and the QEMU Project developers\n"
)
QEMU72_VERSION_TEXT = (
    "qemu-aarch64 version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)\n"
    "Copyright (c) 2003-2022 Fabrice Bellard and the QEMU Project developers\n"
)
CPU_HELP_TEXT = """Available CPUs:
  a64fx
  cortex-a35
  cortex-a53
  cortex-a55
  cortex-a57
  cortex-a710
  cortex-a72
  cortex-a76
  max
  neoverse-n1
  neoverse-n2
  neoverse-v1
"""
# ---------------------------------------------------------------- versions


def test_parse_qemu_version_real_texts():
    assert qp.parse_qemu_version(QEMU10_VERSION_TEXT) == Version("10.0.13")
    assert qp.parse_qemu_version(QEMU72_VERSION_TEXT) == Version("7.2.22")
    assert qp.parse_qemu_version("qemu-aarch64-static version 9.2.0\n") == Version(
        "9.2.0"
    )


def test_parse_qemu_version_garbage():
    with pytest.raises(ProvisionError):
        qp.parse_qemu_version("command not found")


def test_check_qemu_rejects_72_with_one_line_message():
    q = qp.QemuBinary(Path("/usr/bin/qemu-aarch64-static"), Version("7.2.22"), "path")
    with pytest.raises(ProvisionError) as ei:
        qp.check_qemu(q)
    msg = str(ei.value)
    assert "\n" not in msg
    assert "7.2" in msg and "1.28" in msg and "bisect setup qemu" in msg


def test_check_qemu_accepts_10_and_rejects_none():
    q = qp.QemuBinary(Path("/x/qemu-aarch64"), Version("10.0.13"))
    assert qp.check_qemu(q) is q
    with pytest.raises(ProvisionError, match="bisect setup qemu"):
        qp.check_qemu(None)


def _fake_qemu(path: Path, version_text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    # shell builtins only: the tests may set PATH to a dir without cat
    path.write_text(
        "#!/bin/sh\n"
        f"if [ \"$1\" = \"--version\" ]; then printf '%s' '{version_text}'; exit 0; fi\n"
        f"if [ \"$1\" = \"-cpu\" ]; then printf '%s' '{CPU_HELP_TEXT}'; exit 1; fi\n"
        "exit 2\n"
    )
    path.chmod(0o755)
    return path


def test_find_qemu_prefers_tools_dir(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    _fake_qemu(tools / "bin" / "qemu-aarch64", QEMU10_VERSION_TEXT)
    onpath = tmp_path / "pathbin"
    _fake_qemu(onpath / "qemu-aarch64-static", QEMU72_VERSION_TEXT)
    monkeypatch.setenv("PATH", f"{onpath}:{os.environ['PATH']}")
    q = qp.find_qemu(tools)
    assert q is not None and q.source == "tools" and q.version == Version("10.0.13")
    assert q.path == tools / "bin" / "qemu-aarch64"


def test_find_qemu_falls_back_to_path(tmp_path, monkeypatch):
    onpath = tmp_path / "pathbin"
    _fake_qemu(onpath / "qemu-aarch64-static", QEMU72_VERSION_TEXT)
    monkeypatch.setenv("PATH", str(onpath))
    q = qp.find_qemu(tmp_path / "empty-tools")
    assert q is not None and q.source == "path" and q.version == Version("7.2.22")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    assert qp.find_qemu(tmp_path / "empty-tools") is None


def test_list_and_check_cpus_with_fake_binary(tmp_path):
    p = _fake_qemu(tmp_path / "qemu-aarch64", QEMU10_VERSION_TEXT)
    q = qp.QemuBinary(p, Version("10.0.13"))
    cpus = qp.list_cpus(q)  # the fake exits 1 like the real one
    assert cpus == list(qp.KNOWN_CPUS)
    assert qp.check_cpu(q, "neoverse-n1") == "neoverse-n1"
    with pytest.raises(ProvisionError, match="unknown --cpu 'graviton'.*cortex-a72"):
        qp.check_cpu(q, "graviton")


def test_parse_cpu_help():
    assert qp.parse_cpu_help(CPU_HELP_TEXT)[:3] == ["a64fx", "cortex-a35", "cortex-a53"]
    assert "neoverse-n1" in qp.parse_cpu_help(CPU_HELP_TEXT)


# ---------------------------------------------------------------- commands


def test_qemu_command_assembly():
    q = qp.QemuBinary(Path("/t/bin/qemu-aarch64"), Version("10.0.13"))
    sysroot = Path("/t/sysroot-arm64")
    cmd = qp.qemu_command(
        q, sysroot, "neoverse-n1", [sysroot_python(sysroot), "-c", "print(1)"]
    )
    assert cmd == [
        "/t/bin/qemu-aarch64",
        "-L",
        "/t/sysroot-arm64",
        "-cpu",
        "neoverse-n1",
        "/t/sysroot-arm64/usr/bin/python3.11",
        "-c",
        "print(1)",
    ]
    assert all(isinstance(a, str) for a in cmd)



# ---------------------------------------------------------------- misc


def test_is_static_elf(tmp_path):
    # the venv's python is dynamically linked
    assert qp.is_static_elf(Path(os.path.realpath(sys.executable))) is False
    (tmp_path / "t").write_text("#!/bin/sh\n")
    assert qp.is_static_elf(tmp_path / "t") is False


def _debian_like_x86() -> str | None:
    if platform.machine() not in ("x86_64", "amd64"):
        return f"needs an x86_64 host (this is {platform.machine()})"
    for tool in ("apt-get", "dpkg-deb", "dpkg"):
        if shutil.which(tool) is None:
            return f"needs a Debian-like host ({tool} missing)"
    try:
        debian_mirror(read_host_sources())
    except ProvisionError as e:
        return f"needs a Debian apt source: {e}"
    return None


@pytest.fixture(scope="module")
def tools_dir() -> Path:
    reason = _debian_like_x86()
    if reason:
        print(f"SKIP qemu provisioning tests: {reason}")
        pytest.skip(reason)
    d = Path(
        os.environ.get("ORTBISECT_TEST_TOOLS", "~/.cache/ortbisect-tests/tools")
    ).expanduser()
    d.mkdir(parents=True, exist_ok=True)
    return d


@pytest.fixture(scope="module")
def provisioned(tools_dir):
    q = qp.setup_qemu(tools_dir)
    sysroot = setup_sysroot(tools_dir)
    return q, sysroot


@pytest.mark.qemu
def test_setup_qemu_real(provisioned, tools_dir):
    q, _ = provisioned
    assert q.version >= qp.MIN_QEMU
    assert qp.check_qemu(q) is q
    if q.source == "tools":
        assert q.path == tools_dir / "bin" / "qemu-aarch64"
        assert qp.is_static_elf(q.path)
    found = qp.find_qemu(tools_dir)
    assert found is not None and found.version >= qp.MIN_QEMU
    assert {"neoverse-n1", "cortex-a72"} <= set(qp.list_cpus(q))


@pytest.mark.qemu
def test_setup_is_idempotent(provisioned, tools_dir):
    logs: list[str] = []
    q2 = qp.setup_qemu(tools_dir, log=logs.append)
    s2 = setup_sysroot(tools_dir, log=logs.append)
    assert q2.path == provisioned[0].path and s2 == provisioned[1]
    assert all("reusing" in line or "from PATH" in line for line in logs), logs


@pytest.mark.qemu
def test_sysroot_python_runs_under_qemu(provisioned):
    q, sysroot = provisioned
    py = sysroot_python(sysroot)
    assert py.is_file()
    for cpu in ("neoverse-n1", "cortex-a72"):
        cmd = qp.qemu_command(
            q,
            sysroot,
            cpu,
            [
                py,
                "-c",
                (
                    "import platform, sys, ctypes, ssl, sqlite3, json; "
                    "print(platform.machine(), sys.version_info[:2])"
                ),
            ],
        )
        out = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=300,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.split()[0] == "aarch64"
        assert "(3, 11)" in out.stdout


@pytest.mark.qemu
def test_hwcap_reflects_cpu_model(provisioned):
    """getauxval(AT_HWCAP) inside emulation shows asimdhp (bit 10) per -cpu."""
    q, sysroot = provisioned
    code = (
        "import ctypes; libc = ctypes.CDLL(None); libc.getauxval.restype = ctypes.c_ulong; "
        "print(libc.getauxval(16))"
    )
    hw = {}
    for cpu in ("neoverse-n1", "cortex-a72"):
        out = subprocess.run(
            qp.qemu_command(q, sysroot, cpu, [sysroot_python(sysroot), "-c", code]),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        hw[cpu] = int(out.stdout)
    assert hw["neoverse-n1"] & (1 << 10)
    assert not hw["cortex-a72"] & (1 << 10)
