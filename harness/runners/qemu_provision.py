"""Provisioning for the ``qemu`` backend: aarch64 probes on an x86_64 host.

Two things are provisioned into a tools directory, both without touching the
host's apt configuration (no ``dpkg --add-architecture``, no new entries in
/etc/apt, nothing installed with dpkg -i):

* ``bin/qemu-aarch64``: a static QEMU >= 10 user-mode emulator, taken from
  Debian trixie's ``qemu-user`` package.  Debian 12's own qemu-user-static is
  QEMU 7.2, which segfaults importing onnxruntime >= 1.28.
* ``sysroot-arm64/``: an arm64 Debian bookworm tree with CPython 3.11 and the
  shared libraries it and the onnxruntime/numpy wheels need, unpacked from
  the arm64 debs with ``dpkg -x``.

Each uses a private apt configuration under ``<tools_dir>/apt/<name>/`` (own
sources list, lists dir, cache, empty dpkg status) pointing at the same
archive mirror as the host's own apt sources.  The mirror is read at run time
from /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list; it can be
overridden with ``ORTBISECT_DEBIAN_MIRROR`` (e.g. on an Ubuntu host).

Everything is idempotent (an existing good result is reused), atomic (built
in a temp dir next to the target, then renamed) and serialized by an
``fcntl.flock`` lock file in the tools directory, so concurrent runs can
share one directory.

Stdlib + ``packaging`` only.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import struct
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.locking import file_lock

__all__ = [
    "DEFAULT_CPU",
    "KNOWN_CPUS",
    "MIN_QEMU",
    "QEMU_SUITE",
    "SYSROOT_SEED_PACKAGES",
    "SYSROOT_SUITE",
    "AptSource",
    "ProvisionError",
    "QemuBinary",
    "binfmt_status",
    "check_cpu",
    "check_qemu",
    "debian_mirror",
    "find_qemu",
    "is_static_elf",
    "list_cpus",
    "parse_deb822_sources",
    "parse_one_line_sources",
    "parse_qemu_version",
    "qemu_command",
    "read_host_sources",
    "setup_qemu",
    "setup_sysroot",
    "sysroot_python",
]

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

SYSROOT_SUITE = "bookworm"
SYSROOT_DIRNAME = "sysroot-arm64"
SYSROOT_STAMP = ".ortbisect-sysroot.json"
SYSROOT_PYTHON = "usr/bin/python3.11"
#: Roots of the dependency closure; apt resolves the rest (libc6, libssl3,
#: krb5 libs, libtirpc3, ... about 40 debs, 16 MB).
SYSROOT_SEED_PACKAGES: tuple[str, ...] = (
    "python3.11-minimal",
    "libpython3.11-minimal",
    "libpython3.11-stdlib",
    "libstdc++6",
    "libgcc-s1",
    "libgomp1",
    "media-types",
)
#: Used only if apt cannot resolve the closure (e.g. an odd apt version).
SYSROOT_FALLBACK_PACKAGES: tuple[str, ...] = SYSROOT_SEED_PACKAGES + (
    "libc6",
    "gcc-12-base",
    "zlib1g",
    "libexpat1",
    "libffi8",
    "libssl3",
    "libbz2-1.0",
    "liblzma5",
    "libsqlite3-0",
    "libncursesw6",
    "libtinfo6",
    "libreadline8",
    "readline-common",
    "libuuid1",
    "libtirpc3",
    "libtirpc-common",
    "libnsl2",
    "libdb5.3",
    "libcrypt1",
    "libmpdec3",
    "libgssapi-krb5-2",
    "libkrb5-3",
    "libk5crypto3",
    "libkrb5support0",
    "libkeyutils1",
    "libcom-err2",
)

DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MIRROR_ENV = "ORTBISECT_DEBIAN_MIRROR"
SECURITY_MIRROR_ENV = "ORTBISECT_DEBIAN_SECURITY_MIRROR"

Log = Callable[[str], None]


class ProvisionError(RuntimeError):
    """Provisioning failed or the provisioned tool is unusable.

    ``str(err)`` is a one-line, user-facing message.
    """


# ---------------------------------------------------------------------------
# QEMU binary discovery
# ---------------------------------------------------------------------------


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


def _tools_bin(tools_dir: Path) -> Path:
    return Path(tools_dir) / "bin"


def find_qemu(tools_dir: Path | None) -> QemuBinary | None:
    """Find ``qemu-aarch64`` (or ``-static``): the tools dir first, then $PATH.

    In the tools dir the first working binary wins; on $PATH the newest
    working one wins (a host may have both a 7.2 ``-static`` and a newer one).
    """
    if tools_dir is not None:
        for name in QEMU_NAMES:
            p = _tools_bin(Path(tools_dir)) / name
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


def check_cpu(q: QemuBinary | None, cpu: str) -> str:
    """Return ``cpu`` if supported, else raise a one-line :class:`ProvisionError`."""
    cpus = list_cpus(q) if q is not None else list(KNOWN_CPUS)
    if cpu not in cpus:
        raise ProvisionError(
            f"unknown --cpu {cpu!r} for qemu-aarch64; choose one of: {', '.join(cpus)} "
            f"(neoverse-n1 has fp16 arithmetic, cortex-a72 has none, max adds SVE/SME)"
        )
    return cpu


def qemu_command(q: QemuBinary, sysroot: Path, cpu: str, argv: list[str]) -> list[str]:
    """argv that runs the aarch64 program ``argv`` under ``q``.

    ``argv[0]`` is a path to the aarch64 executable as seen from the host,
    e.g. ``sysroot_python(sysroot)``.
    """
    return [str(q.path), "-L", str(sysroot), "-cpu", cpu, *[str(a) for a in argv]]


# ---------------------------------------------------------------------------
# apt sources of the host
# ---------------------------------------------------------------------------


@dataclass
class AptSource:
    types: list[str]
    uris: list[str]
    suites: list[str]
    components: list[str]
    signed_by: str | None = None
    enabled: bool = True
    options: dict[str, str] = field(default_factory=dict)


def parse_deb822_sources(text: str) -> list[AptSource]:
    """Parse deb822 ``.sources`` text (stanzas separated by blank lines)."""
    out: list[AptSource] = []
    for stanza in re.split(r"\n[ \t]*\n", text):
        fields: dict[str, str] = {}
        key: str | None = None
        for raw in stanza.splitlines():
            if raw.startswith("#") or not raw.strip():
                continue
            if raw[0] in " \t" and key is not None:  # continuation line
                cont = raw.strip()
                fields[key] += "\n" + ("" if cont == "." else cont)
                continue
            if ":" not in raw:
                continue
            k, v = raw.split(":", 1)
            key = k.strip().lower()
            fields[key] = v.strip()
        if "uris" not in fields or "suites" not in fields:
            continue
        signed = fields.get("signed-by")
        if signed and "\n" in signed.strip():
            signed = None  # an inline key block: not a path we can reuse
        out.append(
            AptSource(
                types=fields.get("types", "deb").split(),
                uris=fields["uris"].split(),
                suites=fields["suites"].split(),
                components=fields.get("components", "").split(),
                signed_by=signed,
                enabled=fields.get("enabled", "yes").lower()
                not in ("no", "false", "0"),
                options={
                    k: v
                    for k, v in fields.items()
                    if k
                    not in (
                        "types",
                        "uris",
                        "suites",
                        "components",
                        "signed-by",
                        "enabled",
                    )
                },
            )
        )
    return out


_ONE_LINE_RE = re.compile(
    r"^\s*(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)\s*(.*)$"
)


def parse_one_line_sources(text: str) -> list[AptSource]:
    """Parse classic one-line ``sources.list`` text."""
    out: list[AptSource] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        m = _ONE_LINE_RE.match(line)
        if not m:
            continue
        typ, opts, uri, suite, comps = m.groups()
        options: dict[str, str] = {}
        for o in (opts or "").split():
            if "=" in o:
                k, v = o.split("=", 1)
                options[k.lower()] = v
        signed = options.pop("signed-by", None)
        out.append(
            AptSource([typ], [uri], [suite], comps.split(), signed, True, options)
        )
    return out


def read_host_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """All enabled apt sources of the host (deb822 and one-line files)."""
    etc_apt = Path(etc_apt)
    sources: list[AptSource] = []
    one_line = [etc_apt / "sources.list"]
    parts = etc_apt / "sources.list.d"
    if parts.is_dir():
        one_line += sorted(parts.glob("*.list"))
        for f in sorted(parts.glob("*.sources")):
            try:
                sources += parse_deb822_sources(f.read_text(errors="replace"))
            except OSError:
                continue
    for f in one_line:
        try:
            sources += parse_one_line_sources(f.read_text(errors="replace"))
        except OSError:
            continue
    return [s for s in sources if s.enabled]


def _is_security_uri(uri: str) -> bool:
    return "security" in uri.rstrip("/").rsplit("/", 2)[-1] or uri.rstrip("/").endswith(
        "-security"
    )


def debian_mirror(sources: Iterable[AptSource]) -> tuple[str, str | None, str | None]:
    """``(archive_uri, security_uri, signed_by)`` of the host's Debian archive.

    The archive is the first binary (``deb``) source whose URI path ends in
    ``/debian`` (or a snapshot of it) and that has a plain release suite.
    Raises :class:`ProvisionError` when there is none (e.g. Ubuntu), unless
    ``ORTBISECT_DEBIAN_MIRROR`` is set.
    """
    sources = list(sources)
    archive: str | None = None
    signed: str | None = None
    security: str | None = None
    for s in sources:
        if "deb" not in s.types:
            continue
        for uri in s.uris:
            path = uri.split("://", 1)[-1]
            if _is_security_uri(uri):
                security = security or uri.rstrip("/")
                continue
            plain_suite = any(re.fullmatch(r"[a-z]+", su) for su in s.suites)
            looks_debian = re.search(
                r"/debian(/\d{8}T\d{6}Z)?/?$", path
            ) is not None or ("/debian/" in path + "/" and "ubuntu" not in path)
            if archive is None and looks_debian and plain_suite:
                archive = uri.rstrip("/")
                signed = s.signed_by
    env = os.environ.get(MIRROR_ENV)
    if env:
        archive = env.rstrip("/")
        signed = None
        security = os.environ.get(SECURITY_MIRROR_ENV, security)
    if archive is None:
        raise ProvisionError(
            "no Debian archive found in /etc/apt sources (this host is not Debian?); "
            "install QEMU >= 10 (qemu-user) by hand and put qemu-aarch64 on PATH, or set "
            f"{MIRROR_ENV}=<a Debian mirror URL> (needs debian-archive-keyring)"
        )
    if signed is None and Path(DEFAULT_KEYRING).is_file():
        signed = DEFAULT_KEYRING
    return archive, security, signed


# ---------------------------------------------------------------------------
# private apt configuration
# ---------------------------------------------------------------------------


def _require_debian_host() -> None:
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


class PrivateApt:
    """apt-get/apt-cache with their own sources, lists, cache and dpkg status."""

    def __init__(
        self, root: Path, arch: str, lines: list[str], *, check_valid_until: bool = True
    ):
        self.root = Path(root)
        self.arch = arch
        for d in (
            "lists/partial",
            "cache/archives/partial",
            "sources.list.d",
            "preferences.d",
        ):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        (self.root / "status").touch()
        (self.root / "sources.list").write_text("\n".join(lines) + "\n")
        self.check_valid_until = check_valid_until

    def opts(self) -> list[str]:
        r = self.root
        o = {
            "Dir::Etc::SourceList": r / "sources.list",
            "Dir::Etc::SourceParts": r / "sources.list.d",
            "Dir::Etc::Preferences": r / "preferences",
            "Dir::Etc::PreferencesParts": r / "preferences.d",
            "Dir::State::Lists": r / "lists",
            "Dir::State::status": r / "status",
            "Dir::Cache": r / "cache",
            "APT::Architecture": self.arch,
            "APT::Architectures": self.arch,
            "APT::Install-Recommends": "false",
            "APT::Install-Suggests": "false",
            # downloads into dirs owned by root: avoid the _apt sandbox warning
            "APT::Sandbox::User": "root",
            "Acquire::Languages": "none",
            "Acquire::Retries": "3",
        }
        if not self.check_valid_until:
            o["Acquire::Check-Valid-Until"] = "false"
        args: list[str] = []
        for k, v in o.items():
            args += ["-o", f"{k}={v}"]
        return args

    def run(self, tool: str, args: list[str], cwd: Path | None = None) -> str:
        cmd = [tool, *self.opts(), *args]
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", LC_ALL="C")
        p = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, env=env, check=False
        )
        if p.returncode != 0:
            tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-4:])
            hint = ""
            if "NO_PUBKEY" in tail or "not signed" in tail:
                hint = " (upgrade debian-archive-keyring on the host)"
            raise ProvisionError(f"`{tool} {' '.join(args)}` failed: {tail}{hint}")
        return p.stdout

    def update(self) -> None:
        self.run("apt-get", ["-q", "update"])


def _apt_lines(
    archive: str,
    security: str | None,
    signed: str | None,
    suite: str,
    with_updates: bool,
) -> list[str]:
    opt = f"[signed-by={signed}] " if signed else ""
    lines = [f"deb {opt}{archive} {suite} main"]
    if with_updates:
        lines.append(f"deb {opt}{archive} {suite}-updates main")
        if security:
            lines.append(f"deb {opt}{security} {suite}-security main")
    return lines


# ---------------------------------------------------------------------------
# helpers: locking, timing, ELF
# ---------------------------------------------------------------------------


@contextmanager
def _locked(tools_dir: Path, name: str, log: Log) -> Iterator[None]:
    tools_dir.mkdir(parents=True, exist_ok=True)
    with file_lock(tools_dir / f".{name}.lock", on_wait=log):
        yield


@contextmanager
def _step(log: Log, what: str) -> Iterator[None]:
    t0 = time.monotonic()
    yield
    log(f"{what}: {time.monotonic() - t0:.1f} s")


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


def _extract_member(deb: Path, wanted: Iterable[str], dest: Path) -> Path | None:
    """Extract the first regular file of ``wanted`` (paths in the deb) to ``dest``.

    Streams ``dpkg-deb --fsys-tarfile`` instead of ``dpkg -x`` of the whole
    package (qemu-user is 465 MB unpacked; we need 16 MB of it).
    """
    wanted = [w.lstrip("./") for w in wanted]
    # stderr is dropped: closing the pipe early makes dpkg-deb complain
    p = subprocess.Popen(
        ["dpkg-deb", "--fsys-tarfile", str(deb)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    found: Path | None = None
    try:
        assert p.stdout is not None
        with tarfile.open(fileobj=p.stdout, mode="r|") as tf:
            for m in tf:
                name = m.name.lstrip("./")
                if name in wanted and m.isfile():
                    src = tf.extractfile(m)
                    assert src is not None
                    with open(dest, "wb") as out:
                        shutil.copyfileobj(src, out)
                    os.chmod(dest, 0o755)
                    found = dest
                    break
    finally:
        if p.stdout:
            p.stdout.close()
        p.wait()
    return found


def _drop_apt_state(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    try:
        root.parent.rmdir()  # tools_dir/apt, if no other run is using it
    except OSError:
        pass


# ---------------------------------------------------------------------------
# setup_qemu
# ---------------------------------------------------------------------------


def setup_qemu(tools_dir: Path, log: Log = print) -> QemuBinary:
    """Provision a static QEMU >= 10 ``qemu-aarch64`` into ``tools_dir/bin``.

    Reuses an existing one.  On a host that is not Debian-like, returns a
    QEMU >= 10 found on PATH, else raises :class:`ProvisionError`.
    """
    tools_dir = Path(tools_dir).absolute()
    target = _tools_bin(tools_dir) / "qemu-aarch64"

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
        _require_debian_host()
        archive, _security, signed = debian_mirror(read_host_sources())
    except ProvisionError:
        on_path = find_qemu(None)
        if on_path is not None and on_path.version >= MIN_QEMU:
            log(f"qemu: using {on_path.path} from PATH (QEMU {on_path.version})")
            return on_path
        raise

    with _locked(tools_dir, "qemu", log):
        q = existing()  # another run may have finished while we waited
        if q is not None:
            log(f"qemu: reusing {q.path} (QEMU {q.version})")
            return q
        apt = PrivateApt(
            tools_dir / "apt" / f"{QEMU_SUITE}-amd64",
            "amd64",
            _apt_lines(archive, None, signed, QEMU_SUITE, with_updates=False),
            check_valid_until="snapshot" not in archive,
        )
        with _step(log, f"qemu: apt update ({QEMU_SUITE} amd64 from {archive})"):
            apt.update()
        target.parent.mkdir(parents=True, exist_ok=True)
        errors: list[str] = []
        with tempfile.TemporaryDirectory(prefix=".qemu-", dir=tools_dir) as tmp_s:
            tmp = Path(tmp_s)
            for pkg in QEMU_PACKAGES:
                dl = tmp / pkg
                dl.mkdir()
                try:
                    with _step(log, f"qemu: apt download {pkg}"):
                        apt.run("apt-get", ["-q", "download", pkg], cwd=dl)
                except ProvisionError as e:
                    errors.append(str(e))
                    continue
                debs = sorted(dl.glob("*.deb"))
                if not debs:
                    errors.append(f"{pkg}: no .deb downloaded")
                    continue
                staged = tmp / "qemu-aarch64.new"
                with _step(log, f"qemu: unpack qemu-aarch64 from {debs[0].name}"):
                    got = _extract_member(
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
                _drop_apt_state(apt.root)
                q = QemuBinary(path=target, version=q.version, source="tools")
                log(f"qemu: installed {target} (QEMU {q.version}, from {pkg})")
                return q
        raise ProvisionError(
            f"could not provision QEMU >= {MIN_QEMU} from Debian {QEMU_SUITE}: "
            + "; ".join(errors)
        )


# ---------------------------------------------------------------------------
# setup_sysroot
# ---------------------------------------------------------------------------


def sysroot_python(sysroot: Path) -> Path:
    return Path(sysroot) / SYSROOT_PYTHON


def _sysroot_ok(root: Path) -> bool:
    return (
        (root / SYSROOT_STAMP).is_file()
        and sysroot_python(root).is_file()
        and (root / "lib" / "ld-linux-aarch64.so.1").exists()
    )


def setup_sysroot(tools_dir: Path, log: Log = print) -> Path:
    """Provision an arm64 Debian bookworm sysroot with CPython 3.11.

    Returns ``tools_dir/sysroot-arm64``.  Run its Python with
    ``qemu_command(q, sysroot, cpu, [sysroot_python(sysroot), ...])``.
    """
    tools_dir = Path(tools_dir).absolute()
    final = tools_dir / SYSROOT_DIRNAME
    if _sysroot_ok(final):
        log(f"sysroot: reusing {final}")
        return final
    _require_debian_host()
    archive, security, signed = debian_mirror(read_host_sources())

    with _locked(tools_dir, "sysroot", log):
        if _sysroot_ok(final):
            log(f"sysroot: reusing {final}")
            return final
        apt = PrivateApt(
            tools_dir / "apt" / f"{SYSROOT_SUITE}-arm64",
            "arm64",
            _apt_lines(archive, security, signed, SYSROOT_SUITE, with_updates=True),
            check_valid_until="snapshot" not in archive,
        )
        with _step(log, f"sysroot: apt update ({SYSROOT_SUITE} arm64 from {archive})"):
            apt.update()
        with tempfile.TemporaryDirectory(prefix=".sysroot-", dir=tools_dir) as tmp_s:
            tmp = Path(tmp_s)
            debs_dir = tmp / "debs"
            (debs_dir / "partial").mkdir(parents=True)
            with _step(log, "sysroot: download arm64 debs (dependency closure)"):
                try:
                    # apt resolves the closure against an empty dpkg status and
                    # only downloads: nothing is installed anywhere.
                    apt.run(
                        "apt-get",
                        [
                            "-q",
                            "-y",
                            "--download-only",
                            "--no-install-recommends",
                            "-o",
                            f"Dir::Cache::Archives={debs_dir}",
                            "install",
                            *SYSROOT_SEED_PACKAGES,
                        ],
                    )
                except ProvisionError as e:
                    log(f"sysroot: closure failed ({e}); using the fixed package list")
                    apt.run(
                        "apt-get",
                        ["-q", "download", *SYSROOT_FALLBACK_PACKAGES],
                        cwd=debs_dir,
                    )
            debs = sorted(debs_dir.glob("*.deb"))
            if not debs:
                raise ProvisionError("sysroot: apt downloaded no arm64 debs")
            size = sum(d.stat().st_size for d in debs)
            log(f"sysroot: {len(debs)} debs, {size / 1e6:.1f} MB")
            root = tmp / "root"
            root.mkdir()
            packages: dict[str, str] = {}
            with _step(log, "sysroot: dpkg -x"):
                for d in debs:
                    p = subprocess.run(
                        ["dpkg", "-x", str(d), str(root)],
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    if p.returncode != 0:
                        raise ProvisionError(
                            f"dpkg -x {d.name} failed: {p.stderr.strip()[:200]}"
                        )
                    name, ver = d.name.split("_")[:2]
                    packages[name] = ver.replace("%3a", ":")
            if not sysroot_python(root).is_file():
                raise ProvisionError(
                    f"sysroot: {SYSROOT_PYTHON} missing after unpacking"
                )
            (root / SYSROOT_STAMP).write_text(
                json.dumps(
                    {
                        "suite": SYSROOT_SUITE,
                        "arch": "arm64",
                        "archive": archive,
                        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                        "packages": packages,
                    },
                    indent=1,
                    sort_keys=True,
                )
            )
            if final.exists() or final.is_symlink():
                # incomplete or broken leftover: move aside, then swap in
                old = tmp / "old"
                os.rename(final, old)
            os.rename(root, final)
        _drop_apt_state(apt.root)
        log(f"sysroot: installed {final}")
        return final


# ---------------------------------------------------------------------------
# binfmt_misc (for `bisect doctor`)
# ---------------------------------------------------------------------------


def binfmt_status(binfmt_dir: Path = Path("/proc/sys/fs/binfmt_misc")) -> dict:
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
    candidates = ["qemu-aarch64", "aarch64"]
    try:
        candidates += sorted(
            p.name
            for p in binfmt_dir.iterdir()
            if "aarch64" in p.name and p.name not in candidates
        )
    except OSError:
        pass
    for name in candidates:
        f = binfmt_dir / name
        if not f.is_file():
            continue
        try:
            info = parse_binfmt_entry(f.read_text())
        except OSError:
            continue
        st.update(
            registered=True,
            entry=name,
            interpreter=info.get("interpreter"),
            flags=info.get("flags"),
            entry_enabled=info.get("enabled"),
        )
        break
    return st


def parse_binfmt_entry(text: str) -> dict:
    info: dict = {"enabled": None, "interpreter": None, "flags": ""}
    for line in text.splitlines():
        line = line.strip()
        if line in ("enabled", "disabled"):
            info["enabled"] = line == "enabled"
        elif line.startswith("interpreter "):
            info["interpreter"] = line.split(" ", 1)[1]
        elif line.startswith("flags:"):
            info["flags"] = line.split(":", 1)[1].strip()
    return info
