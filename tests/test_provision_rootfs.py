"""Tests of harness/runners/provision/rootfs.py that need no root and no debootstrap.

Building a root filesystem for real is exercised through the images of
tests/test_docker_engine.py.
"""

from __future__ import annotations

import json

from harness.runners.provision import rootfs


def test_the_recipe_key_is_per_arch_and_stable():
    assert rootfs.rootfs_key("amd64") == rootfs.rootfs_key("amd64")
    assert rootfs.rootfs_key("amd64") != rootfs.rootfs_key("arm64")
    assert len(rootfs.rootfs_key("arm64")) == 12


def test_a_cached_tarball_is_reused_without_building(tmp_path):
    tar = tmp_path / "rootfs" / f"{rootfs.SUITE}-python3.11-amd64-{rootfs.rootfs_key('amd64')}.tar"
    tar.parent.mkdir()
    tar.write_bytes(b"not really a tarball")
    tar.with_suffix(".json").write_text(json.dumps({"size_bytes": 20, "sha256": "0" * 64}))
    logs: list[str] = []
    got, meta = rootfs.rootfs_tarball("x86_64", tmp_path, log=logs.append)  # the harness's arch name is accepted
    assert got == tar and meta["sha256"] == "0" * 64
    assert logs and "cached" in logs[0]
