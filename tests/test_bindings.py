"""The JavaScript bindings on real npm installs: onnxruntime-node (Node.js, native) and onnxruntime-web (its
WebAssembly, run by Node.js), each release in its own npm prefix of the shared test cache.

What these builds do was measured first with bare Node.js scripts on every release both packages have
(1.19.0 .. 1.31.1): onnxruntime-node's outputs are the wheels' bit for bit; onnxruntime-web's differ in bits
and change at other releases, and both turn the fp16 norm's overflow into NaN from 1.20.0 on, as the wheels
do. The tests share one results directory, so the compare reuses the sweeps' probes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import builders
from conftest import cli
import numpy as np
import pytest

from harness.releases import npm
from harness.releases.builds import WHEEL_COMMITS

pytestmark = [pytest.mark.release,
              pytest.mark.skipif(shutil.which("node") is None or shutil.which("npm") is None,
                                 reason="Node.js and npm run the node and web bindings (apt-get install nodejs npm)")]

NODE_VERSION = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip().removeprefix("v") \
    if shutil.which("node") else ""


@pytest.fixture(scope="module")
def shared(module_bisect, tmp_path_factory):
    d = tmp_path_factory.mktemp("bindings")
    model = builders.save(builders.residual_norm_model(), d / "residual_norm.onnx")
    np.savez(d / "batch.npz", **builders.residual_norm_inputs())
    return module_bisect, model, d / "batch.npz"


def records(results: Path, run_id: str) -> list[dict]:
    return [json.loads(x) for x in (results / run_id / "probes.jsonl").read_text().splitlines()]


def sweep(shared, binding: str, *more: str):
    bisect, model, batch = shared
    r = bisect("sweep", "--binding", binding, "--model", str(model), "--inputs", str(batch),
               "--from", "1.19.2", "--to", "1.20.1", "--json", *more)
    assert r.returncode == 0, r.stderr
    return r.json()


def test_versions_of_a_binding_are_npm_s_in_the_harness_s_order():
    versions = ["1.19.2", "1.24.0-dev.20260114-c343143a49", "1.22.0-rev", "1.20.0", "1.8.0", "not-a-version"]
    assert [r.version for r in npm.releases_of_versions("onnxruntime-node", versions)] == ["1.8.0", "1.19.2", "1.20.0"]
    builds = npm.releases_of_versions("onnxruntime-node", versions, pre=True)
    assert [r.version for r in builds] == ["1.8.0", "1.19.2", "1.20.0", "1.22.0.dev0+rev", "1.24.0.dev20260114+c343143a49"]
    assert npm.npm_version(builds[-1], "onnxruntime-node") == "1.24.0-dev.20260114-c343143a49"


def test_a_node_sweep_finds_the_wheels_boundary_and_says_the_binding(shared):
    doc = sweep(shared, "node")
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0"), doc["message"]
    bisect, _, _ = shared
    recs = records(bisect.results_dir, doc["run_id"])
    assert {r["version"] for r in recs} == {"1.19.2", "1.20.0", "1.20.1"}
    for rec in recs:
        prov = rec["provenance"]
        assert (prov["binding"], prov["package"], prov["backend"]) == ("node", "onnxruntime-node", "nodejs")
        assert prov["node_version"] == NODE_VERSION
        ort = rec["result"]["onnxruntime"]
        assert ort["npm_version"] == rec["version"] and ort["versions"]["node"] == rec["version"]
        assert rec["result"]["rows"]["rows"] == 4 and rec["result"]["outputs"][0]["sha256"]


def test_the_web_binding_runs_webassembly_and_names_each_build_s_commit(shared):
    doc = sweep(shared, "web")
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0"), doc["message"]
    bisect, _, _ = shared
    for rec in records(bisect.results_dir, doc["run_id"]):
        assert rec["provenance"]["ep"] == "wasm" and rec["providers"]["used"] == ["WebAssemblyExecutionProvider"]
        # the commit read from the build's own .wasm, the one its release was built from
        assert f"git-commit-id={WHEEL_COMMITS['onnxruntime-web'][rec['version']]}" in \
            rec["result"]["onnxruntime"]["build_info"]


def test_compare_across_bindings_says_core_or_binding(shared):
    bisect, model, batch = shared
    r = bisect("compare", "onnxruntime:cpu", "onnxruntime-node:cpu", "onnxruntime-web:wasm", "--model", str(model),
               "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.1", "--json",
               "--cache-dir", str(bisect.cache_dir), "--results-dir", str(bisect.results_dir))
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert doc["probes"]["reused"] >= 6  # the sweeps' probes of both bindings
    core = [(o["pair"], o["release"]) for o in doc["origins"] if o["in"] == "core"]
    assert ("onnxruntime-node:cpu", "1.20.0") in core and ("onnxruntime-web:wasm", "1.20.0") in core, doc["origins"]
    assert "at 1.20.0 onnxruntime:cpu, onnxruntime-node:cpu and onnxruntime-web:wasm all change: in onnxruntime's " \
           "core" in doc["message"]
    node = next(p for p in doc["pairs"] if p["label"] == "onnxruntime-node:cpu")
    ref = doc["reference"]
    # the same core: the node binding gives the wheel's bits at every release
    assert [e["outputs_sha256"] for e in node["releases"]] == [e["outputs_sha256"] for e in ref["releases"]]


def test_the_web_binding_s_development_builds_narrow_the_release_pair(shared):
    bisect, model, batch = shared
    r = bisect("run", "--binding", "web", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2",
               "--to", "1.20.0", "--into-dev-builds", "--json")
    assert r.returncode == 0, r.stderr
    dev = r.json()["dev_builds"]
    assert (dev["last_good"], dev["first_bad"]) == ("1.20.0.dev20240908+de7a02beef", "1.20.0.dev20240925+a47254eaef"), dev


def test_a_file_changed_in_a_prefix_is_rebuilt_never_judged(shared, tmp_path):
    _, model, batch = shared
    cache = tmp_path / "cache"  # a cache of its own: the shared one's prefixes stay as installed
    bisect = cli(cache, tmp_path / "res")
    run = lambda: bisect("run", "--binding", "node", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2",
                         "--to", "1.20.0", "--json")
    assert run().returncode == 0
    prefix = cache / "envs" / f"{os.uname().machine}-npm" / "onnxruntime-node-1.20.0"
    meta = prefix / "node_modules" / "onnxruntime-node" / "package.json"
    meta.write_text(meta.read_text() + "\n")  # changed after the install
    (prefix / "node_modules" / "onnxruntime-node" / "planted.js").write_text("module.exports = 1\n")
    shutil.rmtree(tmp_path / "res")
    r = run()
    assert r.returncode == 0, r.stderr
    rec = next(x for x in records(tmp_path / "res", r.json()["run_id"]) if x["version"] == "1.20.0")
    assert "environment rebuilt" in rec["reason"] and "is in no file the install made" in rec["reason"], rec["reason"]
    assert not (prefix / "node_modules" / "onnxruntime-node" / "planted.js").exists()


@pytest.mark.parametrize("argv, message", [
    (["--from", "1.22.1", "--to", "1.23.0"], "--from 1.22.1: no such onnxruntime-node release (nearest: "),
    (["--from", "1.19.2", "--to", "1.20.0", "--index-url", "https://example.org/simple"],
     "--index-url https://example.org/simple: a source of wheels; --binding node installs onnxruntime-node from npm"),
    (["--from", "1.19.2", "--to", "1.20.0", "--memory-limit", "512"],
     "--memory-limit is not available with --binding node"),
    (["--from", "1.19.2", "--to", "1.20.0", "--package", "onnxruntime-gpu"],
     "--package onnxruntime-gpu: a wheel of the python binding; --binding node installs onnxruntime-node from npm"),
    (["--from", "1.19.2", "--to", "1.20.0", "--ep", "cuda"], "--ep cuda: onnxruntime-node runs cpu, not cuda"),
    (["--from", "1.19.2", "--to", "1.20.0", "--backend", "uv"],
     "--backend uv runs probes of --binding python, not --binding node"),
    (["--from", "1.19.2", "--to", "1.20.0", "--ray-address", "127.0.0.1:1"],
     "--binding node runs its probes on this machine: a job ships the harness and Python packages to Ray nodes"),
])
def test_what_a_binding_cannot_do_is_refused_in_one_line(shared, argv, message):
    bisect, model, batch = shared
    r = bisect("run", "--binding", "node", "--model", str(model), "--inputs", str(batch), *argv)
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], r.stderr


def test_without_node_or_with_npm_failing_the_tool_says_so_in_one_line(shared, tmp_path):
    _, model, batch = shared
    bisect = cli(tmp_path / "cache", tmp_path / "res")  # no listing cached there: nothing to fall back on
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("uv",):  # the harness itself, without node and npm
        if shutil.which(tool):
            (bare / tool).symlink_to(shutil.which(tool))
    args = ("run", "--binding", "node", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2",
            "--to", "1.20.0")
    r = bisect(*args, env={"PATH": f"{bare}:/usr/bin/env-free"})
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "node is not on PATH" in r.stderr
    # npm's registry refusing
    r = bisect(*args, env={"npm_config_registry": "http://127.0.0.1:9/", "npm_config_fetch_retries": "0"})
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "cannot list onnxruntime-node releases from the npm registry: npm view onnxruntime-node" in r.stderr


def test_reduce_on_the_node_binding_captures_a_cut_s_inner_tensors(shared):
    """A cut fed with tensors captured on the last good release: the worker asks the session for every output and
    takes the ones it needs by name (onnxruntime-node up to 1.23.2 keys a run asked for some outputs by the
    session's first output names, and every capture was rejected)."""
    bisect, _, _ = shared
    r = bisect("run", "--binding", "node", "--model", "gemma-tiny-fused", "--from", "1.19.2", "--to", "1.20.0", "--json")
    assert r.returncode == 0, r.stderr
    run_dir = bisect.results_dir / r.json()["run_id"]
    r = bisect("reduce", str(run_dir), "--json", "--cache-dir", str(bisect.cache_dir))
    assert r.returncode == 0, r.stderr
    doc = json.loads((run_dir / "reduced" / "reduce.json").read_text())
    assert doc["verified"]["flips"] and doc["candidates"]["rejected"] == 0, doc["candidates"]
    assert doc["nodes"]["after"] <= 4, doc["nodes"]  # where the wheels' reduction ends


# -- the report of a binding's run: its repro in that binding ------------------------------------------------


def _report(bisect, run_id: str, *more: str):
    rep = bisect("report", run_id, "--results-dir", str(bisect.results_dir), "--cache-dir", str(bisect.cache_dir),
                 "--no-probe", *more)
    assert rep.returncode == 0, rep.stderr
    return rep


@pytest.mark.parametrize("binding", ["node", "web"])
def test_the_report_of_a_binding_run_reproduces_in_that_binding(shared, binding, tmp_path, fresh_python):
    """The report of a --binding run carries repro.mjs: run by Node.js on the npm package of the release, with the
    reduced model by default and the full model with --full, it exits 0 on the last good release and 1 on the first
    bad one. The report names the binding first, its npm install lines and Node.js, and no Python or numpy of
    probes that had none; repro.py is the same model on the Python wheel of the release."""
    bisect, model, batch = shared
    r = bisect("run", "--binding", binding, "--model", str(model), "--inputs", str(batch), "--from", "1.19.2",
               "--to", "1.20.0", "--json")
    assert r.returncode == 0 and r.json()["first_bad"] == "1.20.0", r.stderr
    run_id, run_dir = r.json()["run_id"], bisect.results_dir / r.json()["run_id"]
    doc = json.loads(_report(bisect, run_id, "--reduce", "--format", "json").stdout)
    assert doc["repro"]["reduced"] and doc["repro"]["js"]["predicate"] == "nan-or-inf", doc["repro"]
    package = {"node": "onnxruntime-node", "web": "onnxruntime-web"}[binding]
    for version, verdict, rc in (("1.19.2", "good", 0), ("1.20.0", "bad", 1)):
        prefix = builders.npm_prefix(bisect.cache_dir, binding, version)
        for args, what in (((), "reduced model"), (("--full",), "full model")):
            out = builders.run_node_repro(run_dir, prefix, tmp_path / version, *args)
            assert out.returncode == rc, out.stdout + out.stderr
            assert out.stdout.startswith(f"{package} {version}, {what}: {verdict} ("), out.stdout
        assert "2 NaN rows, 0 Inf rows of 4" in out.stdout or verdict == "good", out.stdout  # the run's own count
    md = (run_dir / "report.md").read_text()
    words = {"node": "the Node.js binding", "web": "onnxruntime's WebAssembly build"}[binding]
    title = md.splitlines()[0]
    assert title.startswith("## ") and f"since {package} 1.20.0" in title and title.endswith(f", in {words}"), title
    assert f"Running `residual_norm` with `{package}` ({words}) under Node.js {NODE_VERSION} through" in md
    told = md.split("<details>")[0]
    assert f"npm install --ignore-scripts {package}@1.20.0\nnode repro.mjs " in told
    assert f"`repro.mjs` exits 1 (bad) on 1.20.0 and 0 (good) on 1.19.2" in told
    assert "the Python wheel of the same release" in told and "pip install onnxruntime==1.20.0 numpy" in told
    system = md.split("### System information")[1]
    assert f"| Node.js | {NODE_VERSION} |" in system and f"| {package} (npm) | 1.19.2 (good), 1.20.0 (bad) |" in system
    assert "| Python |" not in system and "| numpy |" not in system
    assert f"| How it ran | {package} (" in system
    assert "<summary>repro.mjs</summary>" in md and len(md) < 60_000
    wheel = (run_dir / "repro.py").read_text()
    assert "pip install onnxruntime==VERSION numpy" in wheel and f"the Python wheel of the release the run probed " \
        f"on {package}" in wheel
    out = builders.run_script(fresh_python("1.20.0"), run_dir / "repro.py", "--full")  # the wheel: bad there too
    assert out.returncode == 1 and out.stdout.startswith("onnxruntime 1.20.0, full model: bad"), out.stdout + out.stderr


def test_a_binding_s_report_asks_core_or_binding_and_says_what_compare_answered(shared, tmp_path):
    """Core or binding: the report suggests the `bisect compare` of the wheel beside the binding over its pair,
    and once one is in the results directory it says its answer in one sentence: worked out again from the
    compare document's releases (read as untrusted), never taken from its text."""
    _, model, batch = shared
    bisect = cli(shared[0].cache_dir, tmp_path / "res")
    r = bisect("run", "--binding", "node", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2",
               "--to", "1.20.0", "--json")
    assert r.returncode == 0, r.stderr
    run_id = r.json()["run_id"]
    asked = "bisect compare onnxruntime:cpu onnxruntime-node:cpu --from 1.19.2 --to 1.20.0 --model residual_norm.onnx " \
            "--inputs batch.npz"
    md = _report(bisect, run_id).stdout
    assert f"### Core or binding" in md and f"\n{asked}\n" in md and "answers it" not in md, md
    c = bisect("compare", "onnxruntime:cpu", "onnxruntime-node:cpu", "--model", str(model), "--inputs", str(batch),
               "--from", "1.19.2", "--to", "1.20.0", "--json", "--cache-dir", str(bisect.cache_dir),
               "--results-dir", str(bisect.results_dir))
    assert c.returncode == 0, c.stderr
    md = _report(bisect, run_id).stdout
    # the wheel's run the compare made beside it is another package: no other target of this run
    assert "the same batch is" not in md.split("Where: ")[1].split("\n")[0], md
    compare_id = c.json()["run_id"]
    assert (f"`bisect compare` (run `{compare_id}`) answers it: at 1.20.0 onnxruntime:cpu and onnxruntime-node:cpu "
            "both change: in onnxruntime's core, which the bindings share") in md, md.split("### Core or binding")[1][:800]
    # a document saying the wheel's bits stayed put: the change is the binding's (the document's own sentence is
    # not what the report reads)
    path = bisect.results_dir / compare_id / "compare.json"
    doc = json.loads(path.read_text())
    for entry in doc["reference"]["releases"]:
        entry["outputs_sha256"] = "0" * 64
    doc["message"] = doc["origins"] = "at 1.20.0 everything is fine"
    path.write_text(json.dumps({**doc, "origins": []}))
    md = _report(bisect, run_id).stdout
    assert ("answers it: at 1.20.0 onnxruntime-node:cpu changes and onnxruntime:cpu does not: in what "
            "onnxruntime-node:cpu does not share with onnxruntime:cpu (its binding, or its build of the core)") in md
    path.write_text(json.dumps({**doc, "releases": "not a list"}))  # not of the document's shape: no answer
    md = _report(bisect, run_id).stdout
    assert "answers it" not in md and f"\n{asked}\n" in md


def test_blame_of_a_binding_run_is_refused_in_one_line_pointing_to_the_wheel(shared):
    """blame needs the session log and disabled_optimizers, which the JavaScript API lacks: refused before any
    probe (it used to reinstall the prefix as if onnxruntime would not import, and end in exit 3)."""
    bisect, model, batch = shared
    r = bisect("run", "--binding", "node", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2",
               "--to", "1.20.0", "--json")
    assert r.returncode == 0, r.stderr
    run_dir = bisect.results_dir / r.json()["run_id"]
    r = bisect("blame", str(run_dir), "--cache-dir", str(bisect.cache_dir))
    assert r.returncode == 2, r.stderr
    line, = r.stderr.strip().splitlines()
    assert "onnxruntime-node's JavaScript API cannot" in line and "--binding python" in line
    assert not (run_dir / "blame").exists()
