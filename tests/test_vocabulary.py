"""Shared words, defined once; the worker's own copy of the option enums agrees with them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from harness import vocabulary


def load_worker():
    spec = importlib.util.spec_from_file_location("worker", Path(vocabulary.__file__).parent / "worker.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_worker_knows_the_same_option_values():
    worker = load_worker()
    assert worker.GRAPH_LEVELS == vocabulary.GRAPH_LEVELS
    assert worker.EXEC_MODES == vocabulary.EXEC_MODES
    assert worker.PARENT_ENV == vocabulary.WORKER_PARENT_ENV


def test_arch_names_and_their_aliases():
    assert [vocabulary.canonical_arch(a) for a in ("arm64", "amd64", " aarch64", "x86_64")] == \
        ["aarch64", "x86_64", "aarch64", "x86_64"]
    assert vocabulary.canonical_arch("sparc") == "sparc"  # left for the caller to refuse, by the user's word


def test_cache_dir_honours_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert vocabulary.default_cache_dir() == tmp_path / "ortbisect"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert vocabulary.default_cache_dir() == Path.home() / ".cache" / "ortbisect"
