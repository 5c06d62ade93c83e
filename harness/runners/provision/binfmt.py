"""Is aarch64 emulation registered with the kernel (binfmt_misc)?

Containers of a foreign architecture and ``debootstrap --arch=arm64`` run
aarch64 programs through it; QEMU user mode run directly (the qemu backend)
does not need it. One reading of /proc/sys/fs/binfmt_misc serves both
``bisect doctor`` and the image build.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

BINFMT_DIR = Path("/proc/sys/fs/binfmt_misc")
#: the ELF header of an aarch64 executable (e_machine 0xb7), as QEMU registers it
AARCH64_MAGIC = "7f454c460201010000000000000000000200b700"


def binfmt_status(binfmt_dir: Path = BINFMT_DIR) -> dict:
    """Is binfmt_misc mounted, and is an aarch64 interpreter registered?

    Returns ``{"mounted", "enabled", "registered", "entry", "interpreter",
    "flags", "entry_enabled"}``.
    """
    binfmt_dir = Path(binfmt_dir)
    st: dict = {
        "mounted": (binfmt_dir / "status").exists(),
        "enabled": None,
        "registered": False,
        "entry": None,
        "interpreter": None,
        "flags": None,
        "entry_enabled": None,
    }
    if not st["mounted"]:
        return st
    try:
        st["enabled"] = (binfmt_dir / "status").read_text().strip() == "enabled"
    except OSError:
        pass
    found = next(_aarch64_entries(binfmt_dir), None)
    if found is not None:
        name, info = found
        st.update(
            registered=True,
            entry=name,
            interpreter=info["interpreter"],
            flags=info["flags"],
            entry_enabled=info["enabled"],
        )
    return st


def aarch64_emulation(binfmt_dir: Path = BINFMT_DIR) -> tuple[bool, str]:
    """(ok, why): can the kernel run aarch64 programs, even inside a container or chroot?

    That takes an enabled entry with flag F (the interpreter is opened at
    registration, so it need not exist in the container's filesystem).
    """
    st = binfmt_status(binfmt_dir)
    if not st["mounted"]:
        return False, "binfmt_misc is not mounted"
    if not st["registered"]:
        return False, "no binfmt_misc entry for aarch64"
    if not st["entry_enabled"]:
        return False, f"{st['entry']} is disabled"
    if "F" not in (st["flags"] or ""):
        return False, f"{st['entry']} is registered without flag F"
    return True, f"{st['entry']}: interpreter {st['interpreter']}"


def _aarch64_entries(binfmt_dir: Path) -> Iterator[tuple[str, dict]]:
    """(name, parsed entry) of the aarch64 registrations: by the usual names first, then by magic."""
    try:
        names = sorted(p.name for p in binfmt_dir.iterdir() if p.name not in ("register", "status"))
    except OSError:
        return
    named = [n for n in ("qemu-aarch64", "aarch64") if n in names]
    named += [n for n in names if "aarch64" in n and n not in named]
    for name in named + [n for n in names if n not in named]:
        try:
            info = parse_binfmt_entry((binfmt_dir / name).read_text())
        except OSError:
            continue
        if name in named or info["magic"] == AARCH64_MAGIC:
            yield name, info


def parse_binfmt_entry(text: str) -> dict:
    info: dict = {"enabled": None, "interpreter": None, "flags": "", "magic": None}
    for line in text.splitlines():
        line = line.strip()
        if line in ("enabled", "disabled"):
            info["enabled"] = line == "enabled"
        elif line.startswith("interpreter "):
            info["interpreter"] = line.split(" ", 1)[1]
        elif line.startswith("flags:"):
            info["flags"] = line.split(":", 1)[1].strip()
        elif line.startswith("magic "):
            info["magic"] = line.split(" ", 1)[1]
    return info
