"""A static QEMU >= 10 ``qemu-aarch64`` for aarch64 probes on an x86_64 host.

Taken from Debian trixie's ``qemu-user`` package into ``<tools_dir>/bin``:
Debian 12's own qemu-user-static is QEMU 7.2, which segfaults importing
onnxruntime >= 1.28. Also here: the CPU models it emulates (``-cpu``) and the
command line that runs an aarch64 program under it.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.runners.provision import Log, ProvisionError, locked, quiet, step
from harness.runners.provision.debian import (
    debian_mirror,
    drop_apt_state,
    extract_member,
    read_host_sources,
    updated_apt,
)

MIN_QEMU = Version("10.0")

#: CPU models of QEMU 10.0's ``qemu-aarch64 -cpu help``.  The binary in use is
#: the authority (see :func:`list_cpus`); this is for messages and for code
#: that cannot run the binary.
KNOWN_CPUS: tuple[str, ...] = (
    "a64fx",
    "cortex-a35",
    "cortex-a53",
    "cortex-a55",
    "cortex-a57",
    "cortex-a710",
    "cortex-a72",
    "cortex-a76",
    "max",
    "neoverse-n1",
    "neoverse-n2",
    "neoverse-v1",
)
#: A CPU with fp16 vector arithmetic (asimdhp) and no SVE/SME: the profile of
#: common aarch64 servers (Graviton2, Ampere Altra).
DEFAULT_CPU = "neoverse-n1"

QEMU_SUITE = "trixie"
QEMU_PACKAGES = ("qemu-user", "qemu-user-static")
QEMU_NAMES = ("qemu-aarch64", "qemu-aarch64-static")


@dataclass(frozen=True)
class QemuBinary:
    path: Path
    version: Version
    #: "tools" if found in the provisioned tools dir, "path" if on $PATH.
    source: str = "tools"

    def __str__(self) -> str:  # pragma: no cover - cosmetic
        return f"{self.path} (QEMU {self.version})"


_VERSION_RE = re.compile(r"qemu-\S+\s+version\s+(\d+(?:\.\d+)+)", re.IGNORECASE)


def parse_qemu_version(text: str) -> Version:
    """Parse the version of ``qemu-aarch64 --version`` output.

    >>> str(parse_qemu_version("qemu-aarch64 version 10.0.13 (Debian 1:10.0.13+ds-0+deb13u1)"))
    '10.0.13'
    """
    m = _VERSION_RE.search(text) or re.search(r"version\s+(\d+(?:\.\d+)+)", text)
    if not m:
        raise ProvisionError(f"cannot parse a QEMU version from {text.strip()[:120]!r}")
    try:
        return Version(m.group(1))
    except InvalidVersion as e:  # pragma: no cover - regex makes this unlikely
        raise ProvisionError(f"bad QEMU version {m.group(1)!r}") from e


def _probe_binary(path: Path, source: str) -> QemuBinary | None:
    try:
        out = subprocess.run(
            [str(path), "--version"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        return QemuBinary(
            path=path, version=parse_qemu_version(out.stdout), source=source
        )
    except ProvisionError:
        return None


def tools_bin(tools_dir: Path) -> Path:
    return Path(tools_dir) / "bin"


def find_qemu(tools_dir: Path | None) -> QemuBinary | None:
    """Find ``qemu-aarch64`` (or ``-static``): the tools dir first, then $PATH.

    In the tools dir the first working binary wins; on $PATH the newest
    working one wins (a host may have both a 7.2 ``-static`` and a newer one).
    """
    if tools_dir is not None:
        for name in QEMU_NAMES:
            p = tools_bin(Path(tools_dir)) / name
            if p.is_file() and os.access(p, os.X_OK):
                q = _probe_binary(p, "tools")
                if q is not None:
                    return q
    found: list[QemuBinary] = []
    for name in QEMU_NAMES:
        w = shutil.which(name)
        if w:
            q = _probe_binary(Path(w), "path")
            if q is not None:
                found.append(q)
    if not found:
        return None
    return max(found, key=lambda q: q.version)


def check_qemu(q: QemuBinary | None) -> QemuBinary:
    """Raise :class:`ProvisionError` unless ``q`` is QEMU >= :data:`MIN_QEMU`."""
    if q is None:
        raise ProvisionError(
            "no qemu-aarch64 found (tools dir or PATH); run `bisect setup qemu`"
        )
    if q.version < MIN_QEMU:
        raise ProvisionError(
            f"{q.path} is QEMU {q.version}, but QEMU {q.version.major}.x crashes "
            f"onnxruntime >= 1.28 (QEMU 7.2 segfaults on import); QEMU >= "
            f"{MIN_QEMU} is needed: run `bisect setup qemu`"
        )
    return q


def list_cpus(q: QemuBinary) -> list[str]:
    """CPU models ``q`` supports, from ``qemu-aarch64 -cpu help``."""
    out = subprocess.run(
        [str(q.path), "-cpu", "help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    # qemu-user exits 1 after printing the list: judge by the output
    cpus = parse_cpu_help(out.stdout)
    if not cpus:
        raise ProvisionError(
            f"`{q.path} -cpu help` listed no CPUs: {(out.stderr or out.stdout).strip()[:200]}"
        )
    return cpus


def parse_cpu_help(text: str) -> list[str]:
    cpus: list[str] = []
    for line in text.splitlines():
        if not line.startswith((" ", "\t")):
            continue  # "Available CPUs:" header
        word = line.strip().split()
        if word:
            cpus.append(word[0])
    return cpus


def cpu_problem(cpu: str, cpus: Iterable[str]) -> str | None:
    """Why ``cpu`` is not one of ``cpus`` (one line, without naming ``cpu``), or None."""
    cpus = list(cpus)
    if cpu in cpus:
        return None
    return (f"not a CPU model of qemu-aarch64; choose one of: {', '.join(cpus)} "
            "(neoverse-n1 has fp16 arithmetic, cortex-a72 has none, max adds SVE/SME)")


def check_cpu(q: QemuBinary | None, cpu: str) -> str:
    """Return ``cpu`` if supported, else raise a one-line :class:`ProvisionError`."""
    cpus = list_cpus(q) if q is not None else list(KNOWN_CPUS)
    problem = cpu_problem(cpu, cpus)
    if problem:
        raise ProvisionError(f"unknown --cpu {cpu!r}: {problem}")
    return cpu


def qemu_command(q: QemuBinary, sysroot: Path, cpu: str, argv: list[str]) -> list[str]:
    """argv that runs the aarch64 program ``argv`` under ``q``.

    ``argv[0]`` is a path to the aarch64 executable as seen from the host,
    e.g. ``sysroot_python(sysroot)``.
    """
    return [str(q.path), "-L", str(sysroot), "-cpu", cpu, *[str(a) for a in argv]]


def is_static_elf(path: Path) -> bool:
    """True if ``path`` is an ELF64 executable without a PT_INTERP segment."""
    with open(path, "rb") as f:
        hdr = f.read(64)
        if len(hdr) < 64 or hdr[:4] != b"\x7fELF" or hdr[4] != 2:
            return False
        endian = "<" if hdr[5] == 1 else ">"
        e_phoff = struct.unpack_from(endian + "Q", hdr, 0x20)[0]
        e_phentsize, e_phnum = struct.unpack_from(endian + "HH", hdr, 0x36)
        f.seek(e_phoff)
        table = f.read(e_phentsize * e_phnum)
    for i in range(e_phnum):
        (p_type,) = struct.unpack_from(endian + "I", table, i * e_phentsize)
        if p_type == 3:  # PT_INTERP
            return False
    return True


def require_debian_host() -> None:
    """Raise unless this is an x86_64 host with apt and dpkg: what provisioning from Debian needs."""
    machine = platform.machine()
    if machine not in ("x86_64", "amd64"):
        raise ProvisionError(
            f"qemu provisioning supports x86_64 hosts only (this is {machine}); "
            "on an aarch64 host run probes natively"
        )
    missing = [t for t in ("apt-get", "dpkg-deb", "dpkg") if shutil.which(t) is None]
    if missing:
        raise ProvisionError(
            f"not a Debian-like host ({', '.join(missing)} missing): install by hand a "
            "static qemu-aarch64 >= 10 on PATH (e.g. qemu-user-static from your distro) and "
            "an aarch64 root with python3.11, then point the qemu backend at them"
        )


def setup_qemu(tools_dir: Path, log: Log = quiet) -> QemuBinary:
    """Provision a static QEMU >= 10 ``qemu-aarch64`` into ``tools_dir/bin``.

    Reuses an existing one.  On a host that is not Debian-like, returns a
    QEMU >= 10 found on PATH, else raises :class:`ProvisionError`.
    """
    tools_dir = Path(tools_dir).absolute()
    target = tools_bin(tools_dir) / "qemu-aarch64"

    def existing() -> QemuBinary | None:
        if target.is_file():
            q = _probe_binary(target, "tools")
            if q is not None and q.version >= MIN_QEMU:
                return q
        return None

    q = existing()
    if q is not None:
        log(f"qemu: reusing {q.path} (QEMU {q.version})")
        return q
    try:
        require_debian_host()
        mirror = debian_mirror(read_host_sources())
    except ProvisionError:
        on_path = find_qemu(None)
        if on_path is not None and on_path.version >= MIN_QEMU:
            log(f"qemu: using {on_path.path} from PATH (QEMU {on_path.version})")
            return on_path
        raise

    with locked(tools_dir, "qemu", log):
        q = existing()  # another run may have finished while we waited
        if q is not None:
            log(f"qemu: reusing {q.path} (QEMU {q.version})")
            return q
        apt = updated_apt(tools_dir, QEMU_SUITE, "amd64", mirror, with_updates=False, log=log, what="qemu")
        target.parent.mkdir(parents=True, exist_ok=True)
        errors: list[str] = []
        with tempfile.TemporaryDirectory(prefix=".qemu-", dir=tools_dir) as tmp_s:
            tmp = Path(tmp_s)
            for pkg in QEMU_PACKAGES:
                dl = tmp / pkg
                dl.mkdir()
                try:
                    with step(log, f"qemu: apt download {pkg}"):
                        apt.run("apt-get", ["-q", "download", pkg], cwd=dl)
                except ProvisionError as e:
                    errors.append(str(e))
                    continue
                debs = sorted(dl.glob("*.deb"))
                if not debs:
                    errors.append(f"{pkg}: no .deb downloaded")
                    continue
                staged = tmp / "qemu-aarch64.new"
                with step(log, f"qemu: unpack qemu-aarch64 from {debs[0].name}"):
                    got = extract_member(
                        debs[0], [f"usr/bin/{n}" for n in QEMU_NAMES], staged
                    )
                if got is None:
                    errors.append(f"{pkg}: has no usr/bin/qemu-aarch64 (transitional?)")
                    continue
                if not is_static_elf(got):
                    errors.append(f"{pkg}: usr/bin/qemu-aarch64 is not static")
                    continue
                q = _probe_binary(got, "tools")
                if q is None:
                    errors.append(f"{pkg}: qemu-aarch64 --version failed")
                    continue
                if q.version < MIN_QEMU:
                    errors.append(
                        f"{pkg}: {QEMU_SUITE} has QEMU {q.version} < {MIN_QEMU}"
                    )
                    continue
                # same filesystem: an atomic rename into place
                os.replace(got, target)
                # lists + pkgcache (~20 MB) are refreshed by every run anyway
                drop_apt_state(apt.root)
                q = QemuBinary(path=target, version=q.version, source="tools")
                log(f"qemu: installed {target} (QEMU {q.version}, from {pkg})")
                return q
        raise ProvisionError(
            f"could not provision QEMU >= {MIN_QEMU} from Debian {QEMU_SUITE}: "
            + "; ".join(errors)
        )

