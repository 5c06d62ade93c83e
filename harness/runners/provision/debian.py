"""Debian packages without touching the host's apt: its mirror, a private apt, .deb extraction.

The archive mirror is the one the host's own apt sources use, read at run time
from /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list; it can be
overridden with ``ORTBISECT_DEBIAN_MIRROR`` (e.g. on an Ubuntu host). Each
provisioning step gets its own apt configuration under ``<tools_dir>/apt/<name>/``
(own sources list, lists dir, cache, empty dpkg status), so it only downloads.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.runners.provision import Log, ProvisionError, step

DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
MIRROR_ENV = "ORTBISECT_DEBIAN_MIRROR"
SECURITY_MIRROR_ENV = "ORTBISECT_DEBIAN_SECURITY_MIRROR"

_ARCH_ALIASES = {
    "amd64": "amd64",
    "x86_64": "amd64",
    "x64": "amd64",
    "arm64": "arm64",
    "aarch64": "arm64",
}


def debian_arch(arch: str) -> str:
    """``x86_64``/``amd64`` -> ``amd64``; ``aarch64``/``arm64`` -> ``arm64`` (Debian's and Docker's names)."""
    try:
        return _ARCH_ALIASES[arch.lower()]
    except KeyError:
        raise ValueError(f"unsupported architecture {arch!r}; expected one of {sorted(_ARCH_ALIASES)}") from None


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


def host_archive(etc_apt: Path = Path("/etc/apt")) -> str:
    """The Debian archive URI the host's apt uses (read at run time, never hard-coded)."""
    return debian_mirror(read_host_sources(etc_apt))[0]


# ---------------------------------------------------------------------------
# private apt configuration
# ---------------------------------------------------------------------------


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


def apt_lines(
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


def updated_apt(tools_dir: Path, suite: str, arch: str, mirror: tuple[str, str | None, str | None], *,
                with_updates: bool, log: Log, what: str) -> PrivateApt:
    """A private apt for ``suite``/``arch`` under ``tools_dir/apt``, its lists fetched from ``mirror``.

    ``mirror`` is :func:`debian_mirror`'s ``(archive, security, signed_by)``;
    the security archive is used only ``with_updates``.
    """
    archive, security, signed = mirror
    apt = PrivateApt(
        tools_dir / "apt" / f"{suite}-{arch}",
        arch,
        apt_lines(archive, security, signed, suite, with_updates=with_updates),
        check_valid_until="snapshot" not in archive,
    )
    with step(log, f"{what}: apt update ({suite} {arch} from {archive})"):
        apt.update()
    return apt


# ---------------------------------------------------------------------------
# .deb files
# ---------------------------------------------------------------------------


def extract_member(deb: Path, wanted: Iterable[str], dest: Path) -> Path | None:
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


def drop_apt_state(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    try:
        root.parent.rmdir()  # tools_dir/apt, if no other run is using it
    except OSError:
        pass

