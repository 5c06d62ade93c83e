"""Tests of harness/runners/provision/binfmt.py: the one reading of binfmt_misc."""

from __future__ import annotations

from harness.runners.provision import binfmt


def test_binfmt_status_fake_dir(tmp_path):
    d = tmp_path / "binfmt_misc"
    assert binfmt.binfmt_status(d)["mounted"] is False
    d.mkdir()
    (d / "status").write_text("enabled\n")
    assert binfmt.binfmt_status(d)["registered"] is False
    (d / "qemu-aarch64").write_text(
        "enabled\ninterpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P\nflags: PF\n"
        "offset 0\nmagic 7f454c460201010000000000000000000200b700\n"
    )
    st = binfmt.binfmt_status(d)
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
    st = binfmt.binfmt_status()
    assert set(st) >= {"mounted", "registered", "interpreter", "flags"}


def _entry(flags: str, state: str = "enabled") -> str:
    return (f"{state}\ninterpreter /opt/qemu-aarch64\nflags: {flags}\n"
            f"offset 0\nmagic {binfmt.AARCH64_MAGIC}\nmask ffffffffffffff00fffffffffffffffffeffffff\n")


def test_an_entry_is_found_by_its_magic_under_any_name(tmp_path):
    (tmp_path / "status").write_text("enabled\n")
    (tmp_path / "register").write_text("")
    (tmp_path / "python3.11").write_text("enabled\ninterpreter /usr/bin/python3.11\nflags: \nmagic 420d0d0a\n")
    (tmp_path / "arm64-emu").write_text(_entry("OCF"))
    st = binfmt.binfmt_status(tmp_path)
    assert (st["entry"], st["flags"], st["entry_enabled"]) == ("arm64-emu", "OCF", True)
    assert binfmt.aarch64_emulation(tmp_path) == (True, "arm64-emu: interpreter /opt/qemu-aarch64")


def test_containers_need_an_enabled_entry_with_flag_f(tmp_path):
    assert binfmt.aarch64_emulation(tmp_path / "absent") == (False, "binfmt_misc is not mounted")
    (tmp_path / "status").write_text("enabled\n")
    assert binfmt.aarch64_emulation(tmp_path) == (False, "no binfmt_misc entry for aarch64")
    (tmp_path / "qemu-aarch64").write_text(_entry("P"))
    assert binfmt.aarch64_emulation(tmp_path) == (False, "qemu-aarch64 is registered without flag F")
    (tmp_path / "qemu-aarch64").write_text(_entry("F", state="disabled"))
    assert binfmt.aarch64_emulation(tmp_path) == (False, "qemu-aarch64 is disabled")
