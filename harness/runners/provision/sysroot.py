"""An arm64 Debian bookworm tree with CPython 3.11: what QEMU user mode runs the worker in.

Unpacked with ``dpkg -x`` from the arm64 debs of the dependency closure of a
few seed packages (about 40 debs, 16 MB), into ``<tools_dir>/sysroot-arm64``.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from harness.runners.provision import Log, ProvisionError, locked, quiet, step
from harness.runners.provision.debian import (
    debian_mirror,
    drop_apt_state,
    read_host_sources,
    updated_apt,
)
from harness.runners.provision.qemu import require_debian_host

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


def sysroot_python(sysroot: Path) -> Path:
    """The aarch64 CPython of a sysroot, as a host path (QEMU runs it with -L sysroot)."""
    return Path(sysroot) / SYSROOT_PYTHON


def _sysroot_ok(root: Path) -> bool:
    return (
        (root / SYSROOT_STAMP).is_file()
        and sysroot_python(root).is_file()
        and (root / "lib" / "ld-linux-aarch64.so.1").exists()
    )


def setup_sysroot(tools_dir: Path, log: Log = quiet) -> Path:
    """Provision an arm64 Debian bookworm sysroot with CPython 3.11.

    Returns ``tools_dir/sysroot-arm64``.  Run its Python with
    ``qemu_command(q, sysroot, cpu, [sysroot_python(sysroot), ...])``.
    """
    tools_dir = Path(tools_dir).absolute()
    final = tools_dir / SYSROOT_DIRNAME
    if _sysroot_ok(final):
        log(f"sysroot: reusing {final}")
        return final
    require_debian_host()
    mirror = debian_mirror(read_host_sources())
    archive = mirror[0]

    with locked(tools_dir, "sysroot", log):
        if _sysroot_ok(final):
            log(f"sysroot: reusing {final}")
            return final
        apt = updated_apt(tools_dir, SYSROOT_SUITE, "arm64", mirror, with_updates=True, log=log, what="sysroot")
        with tempfile.TemporaryDirectory(prefix=".sysroot-", dir=tools_dir) as tmp_s:
            tmp = Path(tmp_s)
            debs_dir = tmp / "debs"
            (debs_dir / "partial").mkdir(parents=True)
            with step(log, "sysroot: download arm64 debs (dependency closure)"):
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
            with step(log, "sysroot: dpkg -x"):
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
        drop_apt_state(apt.root)
        log(f"sysroot: installed {final}")
        return final

