"""Packages, providers and wheel sources above the runner: keys, names, listings, refusals, the fallback skip.

Nothing here installs a wheel: listings are read from files written by the
test, probes answer through tests/replay.py, and requests stop at the
provisioning step (tests/inproc.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import builders
import numpy as np
import pytest
from replay import ReplayRunner, outputs

from harness.errors import UsageError
from harness.probe import ProbeJob, run_probe
from harness.releases.packages import Package, label_of, of_key, parse_build_info
from harness.releases.versions import (
    Release,
    ReleaseIndex,
    files_of_page,
    merge_releases,
    releases_from_simple_json,
    select_range,
)
from harness.results.store import run_id_for
from harness.runners.workers import ProcessOutcome
from harness.triage.compare import _against, parse_pair
from harness.verdicts import judge, parse_predicate

LINUX = "cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64"


def gpu_visible() -> bool:
    found = shutil.which("nvidia-smi")
    return bool(found) and subprocess.run([found], capture_output=True).returncode == 0


# -- the default package changes nothing -------------------------------------------------------

def test_the_default_package_adds_nothing_to_keys_names_or_requests():
    pkg = Package()
    assert pkg.key() == {} and pkg.is_default
    assert pkg.env_name("1.24.1") == "onnxruntime-1.24.1"  # the environments made before packages existed
    assert pkg.providers_request() is None  # the worker's own default: the CPU provider, no options
    assert pkg.requirement("1.24.1") == "onnxruntime==1.24.1" and pkg.uv_args() == ([], {})
    key = {"model": "m", "arch": "x86_64", **pkg.key()}
    assert run_id_for("m", key) == f"m-x86_64-{run_id_for('m', key).rsplit('-', 1)[1]}"


def test_another_package_provider_or_source_is_another_run_and_environment():
    ov = Package("onnxruntime-openvino", "openvino", (("device_type", "CPU"),))
    assert ov.key() == {"package": "onnxruntime-openvino", "ep": "openvino", "ep_options": {"device_type": "CPU"}}
    assert ov.providers_request() == [["OpenVINOExecutionProvider", {"device_type": "CPU"}]]
    assert run_id_for("m", {"arch": "x86_64", **ov.key()}).startswith("m-onnxruntime-openvino-openvino-x86_64-")
    links = Package(find_links=("/wheels",))
    assert links.key() == {"package": "onnxruntime", "ep": "cpu", "find_links": ["/wheels"]}
    assert links.env_name("1.20.0") != Package().env_name("1.20.0")  # the same number from elsewhere
    assert Package(find_links=("/other",)).env_name("1.20.0") != links.env_name("1.20.0")
    assert links.uv_args() == (["--find-links", "/wheels"], {})
    assert Package(index_urls=("http://127.0.0.1:1/simple",)).uv_args() == (["--index", "http://127.0.0.1:1/simple"], {})
    gpu = Package("onnxruntime-gpu", "cuda")
    assert gpu.requirement("1.24.1") == "onnxruntime-gpu[cuda,cudnn]==1.24.1"  # the CUDA runtime from the index
    assert Package("onnxruntime-gpu", "cpu").requirement("1.24.1") == "onnxruntime-gpu==1.24.1"
    for pkg in (ov, links, gpu):
        assert of_key(pkg.key()) == pkg
    assert label_of({}) is None and label_of(ov.key()) == "onnxruntime-openvino:openvino"


def test_build_info_names_the_commit():
    text = "ORT Build Info: git-branch=rel-1.24.1, git-commit-id=b5963e82c8, build type=Release"
    assert parse_build_info(text) == {"commit": "b5963e82c8", "branch": "rel-1.24.1"}
    assert parse_build_info("") == {"commit": None, "branch": None}
    assert parse_build_info(None) == {"commit": None, "branch": None}
    full = "d93bf0042a" + "0" * 30
    assert parse_build_info(f"git-branch=HEAD, git-commit-id={full}, build type=Release")["commit"] == full
    assert parse_build_info("git-commit-id=D93BF0042A")["commit"] == "d93bf0042a"
    assert parse_build_info("ORT Build Info: git-branch=rel-1.19.0, build type=Release")["commit"] is None
    # what a worker reports is untrusted: anything that is not a commit id names none
    for bad in ("git-commit-id=xyz1234", "git-commit-id=abc12", "git-commit-id=" + "a" * 41,
                "git-commit-id=, build type=Release", "git-commit-id=d93bf0042a;rm"):
        assert parse_build_info(f"ORT Build Info: {bad}")["commit"] is None, bad
    assert parse_build_info("git-branch=rel-1.24.1;rm -rf, git-commit-id=d93bf0042a")["branch"] is None


# -- listings: PEP 440 order, --pre, pages, directories ----------------------------------------

def page(*names, yanked=()):
    return {"files": [{"filename": n, "yanked": n in yanked} for n in names]}


def test_development_builds_sort_by_pep_440_and_only_with_pre():
    doc = page(*(f"onnxruntime-{v}-{LINUX}.whl" for v in ("1.25.0", "1.24.4", "1.25.0.dev20260101001",
                                                           "1.25.0.dev20251231002", "1.25.0rc1")))
    assert [r.version for r in releases_from_simple_json(doc)] == ["1.24.4", "1.25.0"]
    assert [r.version for r in releases_from_simple_json(doc, pre=True)] == [
        "1.24.4", "1.25.0.dev20251231002", "1.25.0.dev20260101001", "1.25.0rc1", "1.25.0"]
    rels = releases_from_simple_json(doc, pre=True)
    assert [r.version for r in select_range(rels, "1.25.0.dev20251231002", "1.25.0rc1")] == [
        "1.25.0.dev20251231002", "1.25.0.dev20260101001", "1.25.0rc1"]
    with pytest.raises(UsageError, match="--from 1.25.0.dev1: no such onnxruntime-gpu release"):
        select_range(rels, "1.25.0.dev1", "1.25.0", package="onnxruntime-gpu")


def test_a_pep_503_page_is_read_with_its_yanked_files():
    html = (f'<a href="../../files/onnxruntime-1.20.0-{LINUX}.whl#sha256=00">x</a>'
            f'<a href="https://example.invalid/p/onnxruntime-1.21.0-{LINUX}.whl" data-yanked="">y</a>'
            '<a href="onnxruntime-1.21.0.tar.gz">sdist</a>')
    doc = files_of_page(html)
    assert [f["filename"] for f in doc["files"]] == [f"onnxruntime-1.20.0-{LINUX}.whl",
                                                     f"onnxruntime-1.21.0-{LINUX}.whl", "onnxruntime-1.21.0.tar.gz"]
    assert [r.version for r in releases_from_simple_json(doc)] == ["1.20.0"]  # 1.21.0 is all yanked


def test_a_find_links_directory_holds_only_its_project_and_merges_with_the_index(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in (f"onnxruntime-1.20.0.dev3-{LINUX}.whl", f"onnxruntime_openvino-1.24.1-{LINUX}.whl",
                 f"numpy-2.0.0-{LINUX}.whl", "notes.txt"):
        (wheels / name).write_bytes(b"")
    cache = tmp_path / "cache"
    (cache / "index").mkdir(parents=True)
    index = [Release(v, [f"onnxruntime-{v}-{LINUX}.whl"]) for v in ("1.19.2", "1.20.0", "1.25.0.dev1")]
    for name, rels in (("onnxruntime.pre.json", index), ("onnxruntime.json", [r for r in index if not r.is_pre])):
        (cache / "index" / name).write_text(json.dumps(
            {"fetched_at": time.time(), "releases": [{"version": r.version, "wheels": r.wheels} for r in rels]}))
    listed = ReleaseIndex(cache, "uv", offline=True, package=Package(find_links=(str(wheels),), pre=True)).releases()
    assert [(r.version, r.source) for r in listed] == [("1.19.2", ""), ("1.20.0.dev3", str(wheels)), ("1.20.0", ""),
                                                       ("1.25.0.dev1", "")]
    plain = ReleaseIndex(cache, "uv", offline=True, package=Package(find_links=(str(wheels),))).releases()
    assert [r.version for r in plain] == ["1.19.2", "1.20.0"]  # without --pre: the releases of both sources
    ov = ReleaseIndex(cache, "uv", offline=True, package=Package("onnxruntime-openvino", find_links=(str(wheels),)))
    with pytest.raises(UsageError, match="no cached onnxruntime-openvino release listing"):
        ov.releases()  # each package has its own listing


def test_merged_sources_unite_the_wheels_of_a_version():
    a = [Release("1.20.0", ["x.whl"])]
    b = [Release("1.20.0", ["y.whl"], source="/w"), Release("1.19.0", ["z.whl"], source="/w")]
    merged = merge_releases(a, b)
    assert [(r.version, r.wheels, r.source) for r in merged] == [("1.19.0", ["z.whl"], "/w"),
                                                                 ("1.20.0", ["x.whl", "y.whl"], "/w")]


# -- refusals before anything is listed or installed ------------------------------------------

@pytest.fixture
def model(residual_norm):
    """The shared residual-norm model and batch (conftest): these requests are refused before any probe."""
    return residual_norm


def refused(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.lines) == 1 and r.lines[0].startswith("error: "), r.stderr
    return r.lines[0].removeprefix("error: ")


@pytest.mark.parametrize("argv, message", [
    (["--package", "onnxruntime-silicon"], "--package onnxruntime-silicon: not an onnxruntime package this harness "
                                           "knows (known: onnxruntime, onnxruntime-openvino, onnxruntime-gpu, onnxruntime-node, onnxruntime-web)"),
    (["--ep", "openvino"], "--ep openvino: onnxruntime runs cpu, not openvino; openvino is in onnxruntime-openvino"),
    (["--package", "onnxruntime-openvino", "--ep", "cuda"], "--ep cuda: onnxruntime-openvino runs cpu, openvino, "
                                                            "not cuda; cuda is in onnxruntime-gpu"),
    (["--ep", "tpu"], "--ep tpu: onnxruntime runs cpu, not tpu (providers: cpu, cuda, openvino, wasm)"),
    (["--find-links", "/nonexistent/wheels"], "--find-links /nonexistent/wheels: no such directory"),
    (["--index-url", "file:///nonexistent/simple"], "--index-url file:///nonexistent/simple: no such directory"),
    (["--ep-option", "precision"], "Invalid value for '--ep-option': 'precision': expected KEY=VALUE"),
    (["--ep-option", "device_type=CPU"], "--ep-option device_type=CPU: the CPU provider takes no provider options "
                                         "(onnxruntime runs cpu; options are for another provider)"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_package_the_harness_cannot_run_is_refused_before_anything(offline_cli, model, tmp_path, argv, message):
    cache, results = tmp_path / "cache", tmp_path / "res"
    r = offline_cli("run", "--model", model[0], "--inputs", model[1], "--from", "1.19.0", "--to", "1.20.0", *argv,
            "--cache-dir", cache, "--results-dir", results)
    assert message in refused(r)
    assert not results.exists() and not (cache / "index").exists() and not (cache / "envs").exists()


@pytest.mark.skipif(gpu_visible(), reason="this host shows an NVIDIA GPU: the refusal is for hosts without one")
@pytest.mark.parametrize("command", ["run", "compare", "versions"])
def test_cuda_without_a_gpu_exits_2_before_any_download(offline_cli, model, tmp_path, command):
    cache, results = tmp_path / "cache", tmp_path / "res"
    argv = {"run": ["run", "--model", model[0], "--inputs", model[1], "--from", "1.24.1", "--to", "1.24.1",
                    "--package", "onnxruntime-gpu", "--ep", "cuda", "--results-dir", results],
            "compare": ["compare", "--model", model[0], "--inputs", model[1], "--version", "1.24.1", "onnxruntime:cpu",
                        "onnxruntime-gpu:cuda", "--results-dir", results],
            "versions": ["versions", "--package", "onnxruntime-gpu", "--ep", "cuda"]}[command]
    line = refused(offline_cli(*argv, "--cache-dir", cache))
    assert line.startswith("--ep cuda: no NVIDIA GPU is visible (nvidia-smi "), line
    assert line.endswith("; nothing was installed"), line
    assert not results.exists() and not cache.exists()  # no listing, no environment, no run


def test_compare_pairs_are_package_colon_provider():
    base = Package(ep_options=(("device_type", "CPU"),), find_links=("/w",))
    assert parse_pair("onnxruntime-openvino:openvino", base) == Package(
        "onnxruntime-openvino", "openvino", (("device_type", "CPU"),), find_links=("/w",))
    assert parse_pair("onnxruntime:cpu", base).ep_options == ()  # provider options are for the other providers
    with pytest.raises(UsageError, match="expected PACKAGE:EP"):
        parse_pair("onnxruntime-openvino", base)


def test_compare_refuses_one_pair_or_a_pair_twice(offline_cli, model, tmp_path):
    common = ["--model", model[0], "--inputs", model[1], "--version", "1.24.1", "--cache-dir", tmp_path / "c",
              "--results-dir", tmp_path / "r"]
    assert "give two PACKAGE:EP pairs or more" in refused(offline_cli("compare", *common, "onnxruntime:cpu"))
    assert "onnxruntime:cpu: given twice" in refused(offline_cli("compare", *common, "onnxruntime:cpu", "onnxruntime:cpu"))
    assert not (tmp_path / "r").exists()


# -- the probe: a provider that did not run is a skip ------------------------------------------

def ran_on(*providers: str, stderr: str = "") -> ProcessOutcome:
    return ProcessOutcome(0, None, False, 0.01, stderr, {"stage": "done", "outputs": [outputs(4, 2)],
                                                         "providers_used": list(providers)})


@pytest.mark.parametrize("used, status", [
    (("OpenVINOExecutionProvider", "CPUExecutionProvider"), "ran"),
    (("CPUExecutionProvider",), "skip"),
])
def test_a_session_that_fell_back_to_another_provider_is_a_skip(tmp_path, used, status):
    log = ("\x1b[1;31m2026-12-01 [E:onnxruntime:Default, provider_bridge_ort.cc:2310 Create] openvino_parser_utils.cc"
           ":101 [ERROR] [OpenVINO] Unsupported inference precision is selected. CPU only supports FP32, ACCURACY.\n")
    runner = ReplayRunner({"1.24.1": ran_on(*used, stderr=log)})
    runner.package = Package("onnxruntime-openvino", "openvino", (("precision", "FP16"),))
    job = ProbeJob(tmp_path / "m.onnx", tmp_path / "b.npz")  # the provider is the runner's package's
    rec = run_probe(runner, Release("1.24.1", [f"x-{LINUX}.whl"]), job, tmp_path / "w", tmp_path / "out.npz")
    assert rec["status"] == status
    assert rec["package"] == "onnxruntime-openvino"
    assert rec["providers"] == {"requested": "OpenVINOExecutionProvider", "used": list(used)}
    assert rec["provenance"]["ep_options"] == {"precision": "FP16"}
    judged = judge(rec, parse_predicate("nan-or-inf"))
    if status == "skip":
        assert rec["reason"] == ("OpenVINOExecutionProvider was asked for but the session ran on CPUExecutionProvider;"
                                 " onnxruntime said: [ERROR] [OpenVINO] Unsupported inference precision is selected."
                                 " CPU only supports FP32, ACCURACY.")
        assert judged["verdict"] == "skip" and judged["nan_rows"] == 0  # its 2 NaN rows are not the provider's
    else:
        assert judged["verdict"] == "bad" and judged["nan_rows"] == 2


def test_a_default_probe_sends_the_worker_what_it_always_did(tmp_path):
    seen = []

    class Recording(ReplayRunner):
        def run(self, env, request, workdir, timeout):
            seen.append(request)
            return super().run(env, request, workdir, timeout)

    runner = Recording({"1.19.0": ran_on("CPUExecutionProvider")})
    rec = run_probe(runner, Release("1.19.0", [f"x-{LINUX}.whl"]), ProbeJob(tmp_path / "m", tmp_path / "b"),
                    tmp_path / "w", None)
    assert rec["status"] == "ran" and "providers" not in seen[0]
    assert "package" not in rec["provenance"]  # the default package: provenance as before
    runner = Recording({"1.24.1": ran_on("OpenVINOExecutionProvider", "CPUExecutionProvider")})
    runner.package = Package("onnxruntime-openvino", "openvino", (("device_type", "CPU"),))
    run_probe(runner, Release("1.24.1", [f"x-{LINUX}.whl"]), ProbeJob(tmp_path / "m", tmp_path / "b"),
              tmp_path / "w", None)
    assert seen[1]["providers"] == [["OpenVINOExecutionProvider", {"device_type": "CPU"}]]


# -- compare's arithmetic ----------------------------------------------------------------------

def test_a_pair_diverges_on_bad_rows_or_on_a_finite_row_far_from_the_first():
    first_out = {"y": np.array([[1, 2], [np.nan, 1], [3, 4]], np.float32)}
    first = {"status": "ran", "nan_rows": 1, "inf_rows": 0, "zero_rows": 0}
    same = {"status": "ran", "nan_rows": 1, "inf_rows": 0, "zero_rows": 0}
    assert _against(same, first_out, first, first_out, 0.999)["diverges"] is False
    finite = {"y": np.array([[1, 2], [5, 1], [3, 4]], np.float32)}
    got = _against({**same, "nan_rows": 0}, finite, first, first_out, 0.999)
    assert got["diverges"] and got["why"] == "NaN rows 0 vs 1" and got["cosine_min_finite"] == pytest.approx(1.0)
    turned = {"y": np.array([[2, -1], [np.nan, 1], [3, 4]], np.float32)}
    got = _against(same, turned, first, first_out, 0.999)
    assert got["diverges"] and got["why"].startswith("worst cosine 0.00000000 < 0.999")
    skipped = _against({"status": "skip", "reason": "fell back"}, None, first, first_out, 0.999)
    assert skipped == {"diverges": None, "why": "not compared: fell back"}
    near = {"y": np.array([[1, 2.001], [np.nan, 1], [3, 4]], np.float32)}
    assert _against(same, near, first, first_out, 0.999)["abs_diff_max"] == pytest.approx(1e-3, rel=1e-3)


@pytest.mark.parametrize("status", ["error", "crash", "timeout"])
def test_a_pair_that_fails_to_load_or_run_diverges_from_one_that_ran(status):
    from harness.triage.compare import sentence

    first_out = {"y": np.ones((2, 2), np.float32)}
    first = {"status": "ran", "label": "onnxruntime:cpu", "nan_rows": 0, "inf_rows": 0, "zero_rows": 0}
    failed = {"status": status, "label": "onnxruntime-openvino:openvino", "reason": "Load model failed: no kernel"}
    got = _against(failed, None, first, first_out, 0.999)
    assert got["diverges"] is True and got["why"] == f"{status} where onnxruntime:cpu ran: Load model failed: no kernel"
    doc = {"version": "1.24.1", "reference_pair": "onnxruntime:cpu", "diverging": [failed["label"]],
           "pairs": [first, {**failed, **got}]}
    assert "every pair compared agrees" not in sentence(doc) and "Load model failed" in sentence(doc)
    # the other way round: the first fails, a later pair runs
    back = _against({**first, "label": "b"}, first_out, {**failed, "label": "a"}, None, 0.999)
    assert back["diverges"] is True and back["why"] == f"ran where a did not ({status}: Load model failed: no kernel)"
    both = _against({**failed, "label": "b"}, None, {**failed, "label": "a"}, None, 0.999)
    assert both["diverges"] is None  # both fail: nothing to compare


def test_the_commit_of_each_build_is_in_the_run_document(tmp_path):
    from harness.driver import Driver
    from harness.results.store import RunStore
    from harness.summary import summary

    def info(v):
        return ProcessOutcome(0, None, False, 0.01, "", {"stage": "done", "outputs": [outputs(4, 0)],
                                                         "onnxruntime": {"build_info": f"git-commit-id={v}"}})
    releases = [Release(v, [f"x-{LINUX}.whl"]) for v in ("1.2", "1.3")]
    runner = ReplayRunner({"1.2": info("120abcd"), "1.3": info("130abcd")})
    store = RunStore.open(tmp_path, "r", {"k": 1}, {}, ["t"])
    outcome = Driver(runner, releases, store, ProbeJob(Path("m"), Path("b")), parse_predicate("nan")).run(sweep=True)
    doc = summary(outcome, "regression", "r", sweep=True)
    assert [(p["version"], p["commit"]) for p in doc["probes"]] == [("1.2", "120abcd"), ("1.3", "130abcd")]


def test_the_compare_table_says_which_pair_diverges():
    from rich.console import Console

    from harness.report.terminal import compare_table

    pair = {"status": "ran", "nan_rows": 7, "inf_rows": 0, "zero_rows": 0, "max_abs": 0.37, "commit": "470ae16099",
            "providers": {"requested": "CPUExecutionProvider", "used": ["CPUExecutionProvider"]}}
    doc = {"model": "m", "version": "1.24.1", "reference_pair": "onnxruntime:cpu", "provenance": {"arch": "x86_64"},
           "pairs": [{**pair, "label": "onnxruntime:cpu"},
                     {**pair, "label": "onnxruntime-openvino:openvino", "nan_rows": 0, "commit": "b5963e82c8",
                      "providers": {"used": ["OpenVINOExecutionProvider", "CPUExecutionProvider"]},
                      "diverges": True, "why": "NaN rows 0 vs 7", "cosine_min_finite": 1.0},
                     {**pair, "label": "onnxruntime-openvino:cpu", "status": "skip", "diverges": None,
                      "why": "not compared: fell back"}]}
    console = Console(width=200, record=True)
    console.print(compare_table(doc))
    text = console.export_text()
    assert "diverges: NaN rows 0 vs 7" in text and "OpenVINO, CPU" in text and "b5963e82c8" in text
    assert "not compared: fell back" in text


def test_titles_and_the_dashboard_name_a_package_that_is_not_the_default():
    from harness.runners import PROVENANCE_KEYS
    from harness.summary import target_label

    assert target_label({"arch": "x86_64", "backend": "uv", "cpu": None}) == "x86_64 · uv"
    ov = {"arch": "x86_64", "backend": "uv", **Package("onnxruntime-openvino", "openvino",
                                                       (("precision", "FP16"),)).key()}
    assert target_label(ov) == "x86_64 · uv · onnxruntime-openvino:openvino precision=FP16"
    assert {"package", "ep", "ep_options", "index_urls", "find_links"} <= set(PROVENANCE_KEYS)  # dashboard rows


def test_the_cached_listing_keeps_the_format_earlier_versions_read(tmp_path, monkeypatch):
    """<package>.json holds final releases with version, wheels and yanked only (a harness without packages
    reads the same file); a --pre listing is cached beside it."""
    doc = page(f"onnxruntime-1.24.1-{LINUX}.whl", f"onnxruntime-1.25.0.dev1-{LINUX}.whl")
    monkeypatch.setattr(ReleaseIndex, "_fetch", lambda self: doc)
    ReleaseIndex(tmp_path, "uv").releases()
    ReleaseIndex(tmp_path, "uv", package=Package(pre=True)).releases()
    finals = json.loads((tmp_path / "index" / "onnxruntime.json").read_text())["releases"]
    assert finals == [{"version": "1.24.1", "wheels": [f"onnxruntime-1.24.1-{LINUX}.whl"], "yanked": False}]
    pre = json.loads((tmp_path / "index" / "onnxruntime.pre.json").read_text())["releases"]
    assert [r["version"] for r in pre] == ["1.24.1", "1.25.0.dev1"]


# -- the upstream repro asks for the report's provider, and says when it did not run -------------

@pytest.mark.release
def test_the_repro_asks_for_the_runs_provider_and_gives_no_verdict_when_it_did_not_run(tmp_path):
    import hashlib

    from harness.report import repro

    model = builders.residual_norm_model().SerializeToString()
    batch = builders.residual_norm_inputs()
    full = {"model": model, "file": "model.onnx", "sha256": hashlib.sha256(model).hexdigest(), "hub": None,
            "inputs": batch, "outputs": []}
    common = dict(title="t", predicate="nan-or-inf", bad_means="an output row holds NaN or Inf", session_options={},
                  where="here", reduced=None, full=full)
    python = builders.fresh_env(tmp_path, "1.20.0")
    openvino = Package("onnxruntime-openvino", "openvino")
    asked = tmp_path / "openvino.py"
    asked.write_text(repro.script(**common, requirement=openvino.requirement("VERSION"),
                                  providers=openvino.providers_request()))
    assert "pip install onnxruntime-openvino==VERSION numpy" in asked.read_text()
    out = builders.run_script(python, asked)  # the plain onnxruntime wheel has no OpenVINO provider
    assert out.returncode == 2, out.stdout + out.stderr
    assert "OpenVINOExecutionProvider did not run here (the session ran on CPUExecutionProvider)" in out.stderr
    cpu = tmp_path / "cpu.py"
    cpu.write_text(repro.script(**common))
    out = builders.run_script(python, cpu)
    assert out.returncode in (0, 1) and out.stdout.startswith("onnxruntime 1.20.0, full model:"), out.stderr
