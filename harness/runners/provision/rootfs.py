"""Debootstrap root filesystems with CPython 3.11: what the container base images are made of.

A bookworm minbase with CPython 3.11, built once per architecture (recipe)
and cached as a tarball under ``<cache_dir>/rootfs``, with a ``.json``
sidecar. Building needs root and ``debootstrap``; an arm64 root on an x86_64
host also needs aarch64 binfmt emulation with flag F (``provision.binfmt``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from harness.results.locking import file_lock
from harness.runners.provision import ENGINE_SCRIPT, Log, ProvisionError, quiet
from harness.runners.provision.binfmt import aarch64_emulation
from harness.runners.provision.debian import debian_arch, host_archive

SUITE = "bookworm"
DEBOOTSTRAP_INCLUDE = ("python3.11-minimal", "libpython3.11-stdlib", "libgomp1", "libstdc++6")
# Bump when the rootfs post-processing or the base image's Dockerfile changes.
RECIPE_VERSION = 1


def rootfs_key(arch: str) -> str:
    """A short digest of what the rootfs of `arch` is built from: a changed recipe is a new tarball."""
    recipe = {
        "suite": SUITE,
        "arch": arch,
        "variant": "minbase",
        "include": list(DEBOOTSTRAP_INCLUDE),
        "version": RECIPE_VERSION,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def _mounts_under(root: Path) -> list[str]:
    root_s = str(root.resolve())
    found = []
    with open("/proc/self/mounts") as fh:
        for line in fh:
            mnt = line.split()[1].replace("\\040", " ")
            if mnt == root_s or mnt.startswith(root_s + "/"):
                found.append(mnt)
    return found


def _safe_rmtree(root: Path) -> None:
    """Remove a debootstrap target, refusing if anything is still mounted in it."""
    if not root.exists():
        return
    for mnt in sorted(_mounts_under(root), key=len, reverse=True):
        subprocess.run(["umount", "-l", mnt], check=False)
    left = _mounts_under(root)
    if left:
        raise ProvisionError(f"refusing to delete {root}: still mounted: {left}")
    shutil.rmtree(root)


def rootfs_tarball(arch: str, cache_dir: Path | str, log: Log = quiet) -> tuple[Path, dict]:
    """Debootstrap (once, cached) a bookworm minbase + CPython 3.11 rootfs.

    Returns (tarball path, metadata). The tarball lives at
    ``cache_dir/rootfs/bookworm-python3.11-<arch>-<recipe>.tar`` with a
    ``.json`` sidecar (mirror, sha256, size, build seconds); a later call
    with the same cache dir reuses it. Needs root; arm64 needs binfmt.
    """
    arch = debian_arch(arch)
    root = Path(cache_dir).expanduser() / "rootfs"
    root.mkdir(parents=True, exist_ok=True)
    key = rootfs_key(arch)
    tar = root / f"{SUITE}-python3.11-{arch}-{key}.tar"
    meta_path = tar.with_suffix(".json")

    with file_lock(root / f"{arch}.lock", on_wait=log):
        if tar.is_file() and meta_path.is_file():
            meta = json.loads(meta_path.read_text())
            log(f"rootfs {arch}: cached {tar} ({meta.get('size_bytes', 0) / 1e6:.0f} MB)")
            return tar, meta

        if os.geteuid() != 0:
            raise ProvisionError("debootstrap needs root")
        if shutil.which("debootstrap") is None:
            raise ProvisionError(f"debootstrap is not installed (apt-get install debootstrap; {ENGINE_SCRIPT} start does it)")
        host_arch = debian_arch(os.uname().machine)
        if arch != host_arch:
            if arch != "arm64":
                raise ProvisionError(f"cannot debootstrap {arch} on a {host_arch} host")
            ok, why = aarch64_emulation()
            if not ok:
                raise ProvisionError(f"arm64 debootstrap needs qemu-aarch64 binfmt with flag F: {why} (run: bash {ENGINE_SCRIPT} binfmt)")

        mirror = host_archive()
        work = Path(tempfile.mkdtemp(prefix=f"rootfs-{arch}-", dir=root))
        target = work / "rootfs"
        try:
            cmd = [
                "debootstrap",
                "--variant=minbase",
                f"--arch={arch}",
                f"--include={','.join(DEBOOTSTRAP_INCLUDE)}",
                SUITE,
                str(target),
                mirror,
            ]
            log(f"rootfs {arch}: {' '.join(cmd)}")
            t0 = time.monotonic()
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            t_debootstrap = time.monotonic() - t0
            if proc.returncode != 0:
                tail = "\n".join(proc.stdout.splitlines()[-30:])
                debootstrap_log = target / "debootstrap" / "debootstrap.log"
                if debootstrap_log.is_file():
                    tail += "\n--- debootstrap.log ---\n" + "\n".join(debootstrap_log.read_text(errors="replace").splitlines()[-30:])
                raise ProvisionError(f"debootstrap {arch} failed (exit {proc.returncode}):\n{tail}")
            log(f"rootfs {arch}: debootstrap took {t_debootstrap:.1f} s")

            # python3 -> python3.11 (python3.11-minimal does not provide it)
            py3 = target / "usr/bin/python3"
            if not py3.exists() and not py3.is_symlink():
                py3.symlink_to("python3.11")
            # drop what a probe never needs
            for sub in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info"):
                d = target / sub
                if d.is_dir():
                    for child in d.iterdir():
                        if child.is_dir() and not child.is_symlink():
                            shutil.rmtree(child)
                        elif child.name != "lock":
                            child.unlink()

            t1 = time.monotonic()
            tmp_tar = work / "rootfs.tar"
            subprocess.run(
                [
                    "tar", "-C", str(target), "--numeric-owner",
                    "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*", "--exclude=./run/*",
                    "-cf", str(tmp_tar), ".",
                ],
                check=True,
            )
            with open(tmp_tar, "rb") as f:
                sha = hashlib.file_digest(f, "sha256").hexdigest()
            meta = {
                "arch": arch,
                "suite": SUITE,
                "include": list(DEBOOTSTRAP_INCLUDE),
                "recipe": key,
                "mirror": mirror,
                "sha256": sha,
                "size_bytes": tmp_tar.stat().st_size,
                "debootstrap_seconds": round(t_debootstrap, 1),
                "tar_seconds": round(time.monotonic() - t1, 1),
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            os.replace(tmp_tar, tar)
            meta_path.write_text(json.dumps(meta, indent=2) + "\n")
            log(f"rootfs {arch}: {tar} ({meta['size_bytes'] / 1e6:.0f} MB, sha256 {sha[:12]})")
            return tar, meta
        finally:
            _safe_rmtree(work)

