"""Wheels that are not the release they say they are, put in a --find-links folder and installed by real uv:
a pure-Python stub that answers NaN under a version no release has, the same stub claiming a real release's
version and commit, and a real release's compiled core in a wheel of another version, with and without a
Python layer that lies about its commit. None of them is ever judged: each probe is a skip that says why."""

from __future__ import annotations

import json
import platform
import sys
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
import wheelhouse
from onnx import TensorProto, helper

from harness.releases.versions import Target

pytestmark = [pytest.mark.release,
              pytest.mark.skipif(platform.machine() != "x86_64", reason="the real wheels here are x86_64 wheels")]
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

# onnxruntime's API as far as the worker uses it, answering NaN for every output: no native code at all
STUB = '''\
import numpy as np

__version__ = {version!r}


def get_build_info():
    return {build_info!r}


def get_device():
    return "CPU"


def get_available_providers():
    return ["CPUExecutionProvider"]


class GraphOptimizationLevel:
    ORT_DISABLE_ALL, ORT_ENABLE_BASIC, ORT_ENABLE_EXTENDED, ORT_ENABLE_ALL = 0, 1, 2, 99


class ExecutionMode:
    ORT_SEQUENTIAL, ORT_PARALLEL = 0, 1


class SessionOptions:
    def add_session_config_entry(self, key, value):
        pass


class RunOptions:
    pass


class _Arg:
    def __init__(self, name):
        self.name = name


class InferenceSession:
    def __init__(self, model, sess_options=None, providers=None, **kw):
        pass

    def get_providers(self):
        return ["CPUExecutionProvider"]

    def get_outputs(self):
        return [_Arg("y")]

    def run(self, names, feeds, run_options=None):
        x = next(iter(feeds.values()))
        return [np.full(x.shape, np.nan, np.float32) for _ in names]
'''


def build(commit: str) -> str:
    return f"ORT Build Info: git-branch=HEAD, git-commit-id={commit}, build type=Release"


def stub(dest: Path, version: str, build_info: str, tag: str = "py3-none-any") -> Path:
    return wheelhouse.made_wheel(dest, "onnxruntime", version, {
        "onnxruntime/__init__.py": STUB.format(version=version, build_info=build_info).encode()}, tag=tag)


def tag_of(wheel: Path) -> str:
    return wheel.name[:-len(".whl")].split("-", 2)[2]


def release_as(dest: Path, wheel: Path, version: str, init_tail: str = "") -> Path:
    """Every file of a real release's wheel (its compiled core too) in a wheel of `version`, with
    `__version__` set to it and `init_tail` appended to onnxruntime/__init__.py."""
    files = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if ".dist-info/" not in name and not name.endswith("/"):
                files[name] = zf.read(name)
    init = files["onnxruntime/__init__.py"].decode()
    old = init.split('__version__ = "', 1)[1].split('"', 1)[0]
    files["onnxruntime/__init__.py"] = (init.replace(f'__version__ = "{old}"', f'__version__ = "{version}"', 1)
                                        + init_tail).encode()
    return wheelhouse.made_wheel(dest, "onnxruntime", version, files, tag=tag_of(wheel))


@pytest.fixture(scope="module")
def plus_one(tmp_path_factory) -> tuple[Path, Path]:
    """y = x + 1: finite on every release."""
    d = tmp_path_factory.mktemp("plus_one")
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])], "plus_one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, d / "m.onnx")
    np.savez(d / "m.npz", x=np.arange(12, dtype=np.float32).reshape(3, 4))
    return d / "m.onnx", d / "m.npz"


@pytest.fixture
def ob(listing, tmp_path):
    """`bisect ...` on an empty environment cache (the builds here are made per test: none joins the shared
    cache) that knows the release listing."""
    import shutil

    from conftest import cli

    cache = tmp_path / "cache"
    shutil.copytree(listing, cache / "index")
    return cli(cache, tmp_path / "results")


def sweep(ob, plus_one, links: Path, first: str, last: str, results: Path | None = None,
          command: str = "sweep") -> dict[str, dict]:
    """`bisect sweep` (or `command`) over `first`..`last` with `links` as --find-links: each release's record,
    and the command's document under None."""
    model, batch = plus_one
    results = results or ob.results_dir
    r = ob(command, "--model", str(model), "--inputs", str(batch), "--find-links", str(links),
           "--from", first, "--to", last, "--json", results=results)
    assert r.returncode in (0, 3, 4), r.stderr
    (path,) = results.rglob("probes.jsonl")
    return {None: r.json(), **{rec["version"]: rec for rec in map(json.loads, path.read_text().splitlines())}}


def skipped(rec: dict, *words: str) -> None:
    assert rec["status"] == "skip", rec
    for w in words:
        assert w in rec["reason"], rec["reason"]


def test_a_pure_python_stub_of_a_version_no_release_has_is_never_judged(ob, plus_one, tmp_path):
    """onnxruntime 1.20.3 (no such release) that runs no native code and answers NaN: a build that loaded no
    compiled core of its own is a skip, not "first bad: 1.20.3"."""
    links = tmp_path / "links"
    stub(links, "1.20.3", build("0123456789"))
    recs = sweep(ob, plus_one, links, "1.20.1", "1.20.3", command="run")
    assert recs[None]["first_bad"] is None, recs[None]["message"]
    assert recs["1.20.1"]["status"] == "ran", recs["1.20.1"]
    skipped(recs["1.20.3"], "is not a build of onnxruntime: it loaded no native library")


def test_a_build_that_names_no_commit_is_never_judged(ob, plus_one, tmp_path):
    links = tmp_path / "links"
    stub(links, "1.20.3", "ORT Build Info: build type=Release")
    recs = sweep(ob, plus_one, links, "1.20.3", "1.20.3")
    skipped(recs["1.20.3"], "is not the release's build: its build names no commit")


def test_a_stub_claiming_a_real_release_and_its_commit_is_never_judged(ob, cache_dir, plus_one, tmp_path):
    """A --find-links "onnxruntime 1.20.1" whose version and get_build_info() are 1.20.1's own, tagged as the
    release's wheel is (so uv takes it over the index's): only what it loaded tells, and it loaded no native
    library."""
    real = wheelhouse.release_wheel(cache_dir, "onnxruntime", "1.20.1", Target("x86_64", PYTHON))
    links = tmp_path / "links"
    stub(links, "1.20.1", build("5c1b7ccbff"), tag=tag_of(real))
    recs = sweep(ob, plus_one, links, "1.20.1", "1.20.1")
    skipped(recs["1.20.1"], "it loaded no native library")


def test_a_real_releases_compiled_core_in_a_wheel_of_another_version_is_never_judged(ob, cache_dir, plus_one,
                                                                                      tmp_path):
    """1.20.1's whole wheel as 1.20.3: its compiled core names 1.20.1's commit. The same with a Python layer
    whose get_build_info() names a commit no release has: the build information must be the compiled core's."""
    real = wheelhouse.release_wheel(cache_dir, "onnxruntime", "1.20.1", Target("x86_64", PYTHON))
    links = tmp_path / "links"
    release_as(links, real, "1.20.3")
    recs = sweep(ob, plus_one, links, "1.20.3", "1.20.3")
    skipped(recs["1.20.3"], "its build names commit 5c1b7ccbff (onnxruntime 1.20.1's)")

    lied = tmp_path / "lied"
    release_as(lied, real, "1.20.3", f"\nget_build_info = lambda: {build('0123456789')!r}\n")
    recs = sweep(ob, plus_one, lied, "1.20.3", "1.20.3", results=tmp_path / "lied-results")
    skipped(recs["1.20.3"], "its get_build_info() is not its compiled core's")


def test_the_native_library_must_be_a_shared_object_its_own_wheel_installed(cache_dir):
    """What a worker reports loading, checked against the site on the host, as a local worker and a container's
    (the site mounted at /site) see it."""
    from harness.releases.versions import Release
    from harness.runners.uv import UvRunner
    from harness.runners.verify import native_problem

    real = wheelhouse.release_wheel(cache_dir, "onnxruntime", "1.20.1", Target("x86_64", PYTHON))
    runner = UvRunner(Target("x86_64", PYTHON), cache_dir)
    env = runner.prepare(Release("1.20.1", [real.name]))
    assert runner.verify(env) is None
    site = runner.site_packages(env)
    (core,) = site.glob("onnxruntime/capi/onnxruntime_pybind11_state*.so")
    rel = str(core.relative_to(site))
    numpy_core = next(site.glob("numpy/**/_multiarray_umath*.so"))

    def said(seen, path, extension=True, own=True):
        return native_problem(site, seen, "onnxruntime", {"file": f"{seen}/{path}", "extension": extension,
                                                           "own_build_info": own})

    for seen in (str(site), "/site"):
        assert said(seen, rel) is None
        assert "loaded no native library" in native_problem(site, seen, "onnxruntime", None)
        assert "loaded no native library" in native_problem(site, seen, "onnxruntime", ["not", "a", "dict"])
        assert "not a compiled extension" in said(seen, rel, extension=False)
        assert said(seen, rel, own=False) == "its get_build_info() is not its compiled core's"
        assert "is not in its environment" in said(seen, f"../../{rel}")
        # numpy's own compiled module: hashed, but no file of onnxruntime's wheel
        assert "is in no RECORD of onnxruntime" in said(seen, str(numpy_core.relative_to(site)))
        assert said(seen, "onnxruntime/__init__.py") == (
            "its native library 'onnxruntime/__init__.py' is not a shared object")
