"""A cache or environment that another user owns or may write is refused before anything in it runs (one line,
exit 2), and nothing the tool makes is group or world writable, whatever the umask it was started with.

The tests run as root: "another user" is uid 65534 (nobody), given with chown."""

from __future__ import annotations

import json
import os
import platform
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import builders
import numpy as np
import pytest

from harness.errors import UsageError
from harness.releases.versions import Target
from harness.runners import ownership
from harness.runners.uv import UvRunner

OTHER_UID = 65534
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"  # the CLI's default --python

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")


def bisect(*args: str, cache: Path, results: Path, umask: int | None = None) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "harness.cli", *args, "--cache-dir", str(cache), "--results-dir", str(results)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


@pytest.fixture
def small_model(tmp_path) -> tuple[Path, Path]:
    model = builders.save(builders.residual_norm_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "batch.npz", x=np.ones((2, 8), np.float16))
    return model, tmp_path / "batch.npz"


@pytest.fixture
def cache(listing, tmp_path) -> Path:
    """A cache of our own that knows the release listing."""
    c = tmp_path / "cache"
    shutil.copytree(listing, c / "index")
    return c


def run_args(small_model) -> tuple[str, ...]:
    model, batch = small_model
    return "run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.0", "--to", "1.19.2"


def refused(r: subprocess.CompletedProcess, *words: str) -> str:
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@needs_root
def test_a_cache_another_user_owns_is_refused_naming_it(cache, small_model, tmp_path):
    os.chown(cache, OTHER_UID, OTHER_UID)
    r = bisect(*run_args(small_model), cache=cache, results=tmp_path / "res")
    refused(r, str(cache), f"owned by uid {OTHER_UID}", "choose a cache you own")
    assert not (tmp_path / "res").exists()


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_a_cache_others_may_write_is_refused_with_the_fix(cache, small_model, tmp_path, mode):
    cache.chmod(mode)
    r = bisect(*run_args(small_model), cache=cache, results=tmp_path / "res")
    refused(r, str(cache), f"mode {mode:04o}", f"chmod go-w {cache}")
    cache.chmod(0o755)  # the same cache, once tightened, is taken
    assert ownership.check_cache_dir(cache) == cache


def plant(cache: Path, version: str) -> Path:
    """A finished-looking environment of `version` whose python is a script that leaves a mark when it runs."""
    env = UvRunner(Target(platform.machine(), PYTHON), cache).env_dir(version)
    (env / "bin").mkdir(parents=True)
    (env / "ortbisect-ready.json").write_text(json.dumps({"python": PYTHON, "package": "onnxruntime",
                                                          "version": version}))
    python = env / "bin" / "python"
    python.write_text(f"#!/bin/sh\ntouch {cache.parent / 'PLANTED-RAN'}\nexit 1\n")
    python.chmod(0o755)
    return env


@needs_root
def test_an_environment_planted_by_another_user_never_runs(cache, small_model, tmp_path):
    envs = [plant(cache, v) for v in ("1.19.0", "1.19.2")]
    for env in envs:
        for root, dirs, files in os.walk(env):
            for name in (".", *dirs, *files):
                os.lchown(Path(root, name), OTHER_UID, OTHER_UID)
    r = bisect(*run_args(small_model), cache=cache, results=tmp_path / "res")
    refused(r, "environment ", f"is owned by uid {OTHER_UID}", "rm -rf ")
    assert not (tmp_path / "PLANTED-RAN").exists()


@pytest.mark.parametrize("where", ["bin/python", "bin", "the envs folder"])
def test_an_environment_others_may_change_never_runs(cache, small_model, tmp_path, where):
    envs = [plant(cache, v) for v in ("1.19.0", "1.19.2")]
    for env in envs:
        target = env.parent.parent if where == "the envs folder" else env / where
        target.chmod(0o1777 if target.is_dir() else 0o777)
    r = bisect(*run_args(small_model), cache=cache, results=tmp_path / "res")
    refused(r, "environment ", "is writable by other users", "rm -rf ")
    assert not (tmp_path / "PLANTED-RAN").exists()


def test_uvs_own_lock_file_at_an_environments_top_is_the_one_writable_file_let_through(tmp_path):
    """uv makes `.lock` writable by all and only ever locks it: environments built before the harness tightened
    it are used (a venv's at its top, a --target site's at the top of `site/`); any other open file, or a `.lock`
    deeper down, is not."""
    cache = tmp_path / "cache"
    env = cache / "envs" / "e"
    (env / "lib").mkdir(parents=True)
    (env / "site").mkdir(parents=True)
    for lock in (env / ".lock", env / "site" / ".lock"):
        lock.touch()
        lock.chmod(0o666)
    ownership.check_environment(env, cache)
    ownership.forget(env)
    (env / "lib" / ".lock").touch()
    (env / "lib" / ".lock").chmod(0o666)
    with pytest.raises(UsageError, match=r"lib/\.lock is writable by other users \(mode 0666\)"):
        ownership.check_environment(env, cache)
    ownership.tighten(env)
    ownership.check_environment(env, cache)
    assert stat.S_IMODE((env / ".lock").stat().st_mode) == 0o644
    assert stat.S_IMODE((env / "site" / ".lock").stat().st_mode) == 0o644


@pytest.mark.release
def test_under_umask_000_nothing_the_tool_makes_is_group_or_world_writable(cache, small_model, tmp_path):
    """A real run from an empty cache (its two environments built by uv) and its results, started with umask 000:
    every file and folder it wrote is writable by its owner only."""
    before = {p for p in cache.rglob("*")}
    r = bisect(*run_args(small_model), "--json", cache=cache, results=tmp_path / "res", umask=0)
    assert r.returncode == 3, r.stderr  # both ends good: nothing to find
    made = [p for root in (cache, tmp_path / "res") for p in (root, *root.rglob("*")) if p not in before]
    assert len(made) > 100 and any(p.name == "probes.jsonl" for p in made)  # the environments and the run
    open_to_others = [f"{p} {stat.S_IMODE(p.lstat().st_mode):04o}" for p in made
                      if not p.is_symlink() and p.lstat().st_mode & (stat.S_IWGRP | stat.S_IWOTH)]
    assert not open_to_others, open_to_others[:10]
