"""Tests of harness/runners/provision/debian.py: the host's apt sources and a private apt."""

from __future__ import annotations

import textwrap

import pytest

from harness.runners.provision import ProvisionError, debian

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


def test_parse_deb822_sources():
    srcs = debian.parse_deb822_sources(DEBIAN_SOURCES)
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
    srcs = debian.parse_deb822_sources(text)
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
    srcs = debian.parse_one_line_sources(text)
    assert [s.types for s in srcs] == [["deb"], ["deb-src"], ["deb"]]
    assert srcs[0].signed_by == "/k.gpg" and srcs[0].options == {"arch": "amd64"}
    assert srcs[0].components == ["main", "contrib"]
    assert srcs[2].suites == ["bookworm-security"]


def test_debian_mirror_from_debian_sources(monkeypatch):
    monkeypatch.delenv(debian.MIRROR_ENV, raising=False)
    archive, security, signed = debian.debian_mirror(
        debian.parse_deb822_sources(DEBIAN_SOURCES)
    )
    assert archive == "http://deb.mirror.invalid/debian"
    assert security == "http://deb.mirror.invalid/debian-security"
    assert signed == "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_debian_mirror_snapshot_uri(monkeypatch):
    monkeypatch.delenv(debian.MIRROR_ENV, raising=False)
    text = DEBIAN_SOURCES.replace(
        "URIs: http://deb.mirror.invalid/debian\n",
        "URIs: http://snapshot.mirror.invalid/archive/debian/20250520T000000Z/\n",
    )
    archive, _, _ = debian.debian_mirror(debian.parse_deb822_sources(text))
    assert archive == "http://snapshot.mirror.invalid/archive/debian/20250520T000000Z"


def test_debian_mirror_ubuntu_raises_and_env_override(monkeypatch):
    monkeypatch.delenv(debian.MIRROR_ENV, raising=False)
    ubuntu = debian.parse_one_line_sources(
        "deb http://archive.ubuntu.invalid/ubuntu noble main universe\n"
        "deb http://security.ubuntu.invalid/ubuntu noble-security main\n"
    )
    with pytest.raises(ProvisionError, match="not Debian"):
        debian.debian_mirror(ubuntu)
    monkeypatch.setenv(debian.MIRROR_ENV, "http://mirror.invalid/debian/")
    archive, _, _ = debian.debian_mirror(ubuntu)
    assert archive == "http://mirror.invalid/debian"


def test_read_host_sources_from_dir(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEBIAN_SOURCES)
    (tmp_path / "sources.list.d" / "x.list.disabled").write_text(
        "deb http://a.invalid/debian sid main\n"
    )
    (tmp_path / "sources.list").write_text("")
    srcs = debian.read_host_sources(tmp_path)
    assert [s.uris[0] for s in srcs] == [
        "http://deb.mirror.invalid/debian",
        "http://deb.mirror.invalid/debian-security",
    ]


def test_private_apt_options_do_not_touch_host(tmp_path):
    apt = debian.PrivateApt(
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


def test_debian_arch_names():
    assert [debian.debian_arch(a) for a in ("x86_64", "amd64", "aarch64", "ARM64")] == ["amd64", "amd64", "arm64", "arm64"]
    with pytest.raises(ValueError, match="sparc"):
        debian.debian_arch("sparc")


def test_host_archive_is_read_from_host_apt_config():
    try:
        uri = debian.host_archive()
    except ProvisionError as exc:
        pytest.skip(f"not a Debian host: {exc}")
    assert uri.startswith(("http://", "https://", "file:"))
