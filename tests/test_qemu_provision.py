"""Tests of harness/runners/qemu_provision.py.

Unit tests run anywhere.  Tests marked ``qemu`` really provision QEMU and an
arm64 sysroot (about 40 MB of downloads from the host's Debian mirror, ~12 s
the first time) into ``$ORTBISECT_TEST_TOOLS`` (default
``~/.cache/ortbisect-tests/tools``) so later runs on the same machine reuse it.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

_MOD_PATH = (
    Path(__file__).resolve().parents[1] / "harness" / "runners" / "qemu_provision.py"
)


def _load():
    try:
        from harness.runners import qemu_provision  # type: ignore

        return qemu_provision
    except ImportError:
        spec = importlib.util.spec_from_file_location("qemu_provision", _MOD_PATH)
        mod = importlib.util.module_from_spec(spec)
        sys.modules["qemu_provision"] = mod
        spec.loader.exec_module(mod)
        return mod


qp = _load()

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
DEBIAN_SOURCES = """\
Types: deb
# http://snapshot.mirror.invalid/archive/debian/20250520T000000Z
URIs: http://deb.mirror.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
# http://snapshot.mirror.invalid/archive/debian-security/20250520T000000Z
URIs: http://deb.mirror.invalid/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


# ---------------------------------------------------------------- versions


def test_parse_qemu_version_real_texts():
    assert qp.parse_qemu_version(QEMU10_VERSION_TEXT) == Version("10.0.13")
    assert qp.parse_qemu_version(QEMU72_VERSION_TEXT) == Version("7.2.22")
    assert qp.parse_qemu_version("qemu-aarch64-static version 9.2.0\n") == Version(
        "9.2.0"
    )


def test_parse_qemu_version_garbage():
    with pytest.raises(qp.ProvisionError):
        qp.parse_qemu_version("command not found")


def test_check_qemu_rejects_72_with_one_line_message():
    q = qp.QemuBinary(Path("/usr/bin/qemu-aarch64-static"), Version("7.2.22"), "path")
    with pytest.raises(qp.ProvisionError) as ei:
        qp.check_qemu(q)
    msg = str(ei.value)
    assert "\n" not in msg
    assert "7.2" in msg and "1.28" in msg and "bisect setup qemu" in msg


def test_check_qemu_accepts_10_and_rejects_none():
    q = qp.QemuBinary(Path("/x/qemu-aarch64"), Version("10.0.13"))
    assert qp.check_qemu(q) is q
    with pytest.raises(qp.ProvisionError, match="bisect setup qemu"):
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
    with pytest.raises(qp.ProvisionError, match="unknown --cpu 'graviton'.*cortex-a72"):
        qp.check_cpu(q, "graviton")


def test_parse_cpu_help():
    assert qp.parse_cpu_help(CPU_HELP_TEXT)[:3] == ["a64fx", "cortex-a35", "cortex-a53"]
    assert "neoverse-n1" in qp.parse_cpu_help(CPU_HELP_TEXT)


# ---------------------------------------------------------------- commands


def test_qemu_command_assembly():
    q = qp.QemuBinary(Path("/t/bin/qemu-aarch64"), Version("10.0.13"))
    sysroot = Path("/t/sysroot-arm64")
    cmd = qp.qemu_command(
        q, sysroot, "neoverse-n1", [qp.sysroot_python(sysroot), "-c", "print(1)"]
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


# ---------------------------------------------------------------- apt sources


def test_parse_deb822_sources():
    srcs = qp.parse_deb822_sources(DEBIAN_SOURCES)
    assert len(srcs) == 2
    assert srcs[0].uris == ["http://deb.mirror.invalid/debian"]
    assert srcs[0].suites == ["bookworm", "bookworm-updates"]
    assert srcs[0].components == ["main"]
    assert srcs[0].signed_by == "/usr/share/keyrings/debian-archive-keyring.gpg"
    assert srcs[1].uris == ["http://deb.mirror.invalid/debian-security"]


def test_parse_deb822_disabled_and_inline_key():
    text = DEBIAN_SOURCES + textwrap.dedent("""
        Types: deb
        URIs: http://example.invalid/other
        Suites: stable
        Components: main
        Enabled: no

        Types: deb
        URIs: http://example.invalid/debian
        Suites: sid
        Components: main contrib
        Signed-By:
         -----BEGIN PGP PUBLIC KEY BLOCK-----
         .
         abc
         -----END PGP PUBLIC KEY BLOCK-----
        """)
    srcs = qp.parse_deb822_sources(text)
    assert len(srcs) == 4
    assert srcs[2].enabled is False
    assert srcs[3].signed_by is None and srcs[3].components == ["main", "contrib"]


def test_parse_one_line_sources():
    text = (
        "# comment\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.invalid/debian bookworm main contrib\n"
        "deb-src http://mirror.invalid/debian bookworm main\n"
        "deb http://mirror.invalid/debian-security bookworm-security main # trailing\n"
    )
    srcs = qp.parse_one_line_sources(text)
    assert [s.types for s in srcs] == [["deb"], ["deb-src"], ["deb"]]
    assert srcs[0].signed_by == "/k.gpg" and srcs[0].options == {"arch": "amd64"}
    assert srcs[0].components == ["main", "contrib"]
    assert srcs[2].suites == ["bookworm-security"]


def test_debian_mirror_from_debian_sources(monkeypatch):
    monkeypatch.delenv(qp.MIRROR_ENV, raising=False)
    archive, security, signed = qp.debian_mirror(
        qp.parse_deb822_sources(DEBIAN_SOURCES)
    )
    assert archive == "http://deb.mirror.invalid/debian"
    assert security == "http://deb.mirror.invalid/debian-security"
    assert signed == "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_debian_mirror_snapshot_uri(monkeypatch):
    monkeypatch.delenv(qp.MIRROR_ENV, raising=False)
    text = DEBIAN_SOURCES.replace(
        "URIs: http://deb.mirror.invalid/debian\n",
        "URIs: http://snapshot.mirror.invalid/archive/debian/20250520T000000Z/\n",
    )
    archive, _, _ = qp.debian_mirror(qp.parse_deb822_sources(text))
    assert archive == "http://snapshot.mirror.invalid/archive/debian/20250520T000000Z"


def test_debian_mirror_ubuntu_raises_and_env_override(monkeypatch):
    monkeypatch.delenv(qp.MIRROR_ENV, raising=False)
    ubuntu = qp.parse_one_line_sources(
        "deb http://archive.ubuntu.invalid/ubuntu noble main universe\n"
        "deb http://security.ubuntu.invalid/ubuntu noble-security main\n"
    )
    with pytest.raises(qp.ProvisionError, match="not Debian"):
        qp.debian_mirror(ubuntu)
    monkeypatch.setenv(qp.MIRROR_ENV, "http://mirror.invalid/debian/")
    archive, _, _ = qp.debian_mirror(ubuntu)
    assert archive == "http://mirror.invalid/debian"


def test_read_host_sources_from_dir(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEBIAN_SOURCES)
    (tmp_path / "sources.list.d" / "x.list.disabled").write_text(
        "deb http://a.invalid/debian sid main\n"
    )
    (tmp_path / "sources.list").write_text("")
    srcs = qp.read_host_sources(tmp_path)
    assert [s.uris[0] for s in srcs] == [
        "http://deb.mirror.invalid/debian",
        "http://deb.mirror.invalid/debian-security",
    ]


def test_private_apt_options_do_not_touch_host(tmp_path):
    apt = qp.PrivateApt(
        tmp_path / "apt", "arm64", ["deb http://m.invalid/debian bookworm main"]
    )
    opts = apt.opts()
    joined = " ".join(opts)
    assert f"Dir::State::Lists={tmp_path}/apt/lists" in joined
    assert f"Dir::State::status={tmp_path}/apt/status" in joined
    assert f"Dir::Etc::SourceList={tmp_path}/apt/sources.list" in joined
    assert "APT::Architecture=arm64" in joined and "APT::Architectures=arm64" in joined
    assert "/var/lib" not in joined and "/etc/apt" not in joined
    assert (tmp_path / "apt" / "status").read_text() == ""


# ---------------------------------------------------------------- misc


def test_is_static_elf(tmp_path):
    # the venv's python is dynamically linked
    assert qp.is_static_elf(Path(os.path.realpath(sys.executable))) is False
    (tmp_path / "t").write_text("#!/bin/sh\n")
    assert qp.is_static_elf(tmp_path / "t") is False


def test_binfmt_status_fake_dir(tmp_path):
    d = tmp_path / "binfmt_misc"
    assert qp.binfmt_status(d)["mounted"] is False
    d.mkdir()
    (d / "status").write_text("enabled\n")
    assert qp.binfmt_status(d)["registered"] is False
    (d / "qemu-aarch64").write_text(
        "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n"
        "offset 0\nmagic 7f454c460201010000000000000000000200b700\n"
    )
    st = qp.binfmt_status(d)
    assert st == {
        "mounted": True,
        "enabled": True,
        "registered": True,
        "entry": "qemu-aarch64",
        "interpreter": "/usr/libexec/qemu-binfmt/aarch64-binfmt-P",
        "flags": "PF",
        "entry_enabled": True,
    }


def test_binfmt_status_real_host_does_not_crash():
    st = qp.binfmt_status()
    assert set(st) >= {"mounted", "registered", "interpreter", "flags"}


def _debian_like_x86() -> str | None:
    if platform.machine() not in ("x86_64", "amd64"):
        return f"needs an x86_64 host (this is {platform.machine()})"
    for tool in ("apt-get", "dpkg-deb", "dpkg"):
        if shutil.which(tool) is None:
            return f"needs a Debian-like host ({tool} missing)"
    try:
        qp.debian_mirror(qp.read_host_sources())
    except qp.ProvisionError as e:
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
    sysroot = qp.setup_sysroot(tools_dir)
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
    s2 = qp.setup_sysroot(tools_dir, log=logs.append)
    assert q2.path == provisioned[0].path and s2 == provisioned[1]
    assert all("reusing" in line or "from PATH" in line for line in logs), logs


@pytest.mark.qemu
def test_sysroot_python_runs_under_qemu(provisioned):
    q, sysroot = provisioned
    py = qp.sysroot_python(sysroot)
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
            qp.qemu_command(q, sysroot, cpu, [qp.sysroot_python(sysroot), "-c", code]),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        hw[cpu] = int(out.stdout)
    assert hw["neoverse-n1"] & (1 << 10)
    assert not hw["cortex-a72"] & (1 << 10)
