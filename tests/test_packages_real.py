"""Other packages, providers and wheel sources on real wheels: onnxruntime-openvino, development builds
in a --find-links directory and in a simple index served from disk.

The tests of a part share one results directory, so a probe one test made
is reused by the next (the compare at 1.24.1 reuses the OpenVINO run's and
the sweep's probes of 1.24.1); the wheels, the development builds made from
them and the environments are kept in the shared test cache.
"""

from __future__ import annotations

import json
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import builders
import pytest
import wheelhouse

from harness.releases.versions import Target

pytestmark = pytest.mark.release

NATIVE = platform.machine()
X86 = pytest.mark.skipif(NATIVE != "x86_64", reason="onnxruntime-openvino and these builds are x86_64 wheels")
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
OPENVINO = ["--package", "onnxruntime-openvino"]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("packages") / "results"


def records(results: Path, run_id: str) -> list[dict]:
    return [json.loads(x) for x in (results / run_id / "probes.jsonl").read_text().splitlines()]


# -- onnxruntime-openvino ------------------------------------------------------------------


@X86
def test_versions_lists_the_openvino_releases(bisect):
    r = bisect("versions", *OPENVINO, "--from", "1.19.0", "--json")
    assert r.returncode == 0, r.stderr
    rows = r.json()
    versions = [row["version"] for row in rows]
    assert {"1.19.0", "1.20.0", "1.21.0", "1.22.0", "1.23.0", "1.24.1"} <= set(versions), versions
    assert versions == sorted(versions, key=lambda v: tuple(int(x) for x in v.split(".")))
    assert all(row["wheel"].startswith("onnxruntime_openvino-") for row in rows if row["wheel"])
    assert all(".dev" not in v and "rc" not in v for v in versions)  # no --pre: releases only
    r = bisect("versions", *OPENVINO, "--from", "1.24.1", "--to", "1.24.1", "--commits", "--json")
    assert r.returncode == 0, r.stderr
    assert [(row["version"], row["commit"], row["branch"]) for row in r.json()] == [
        ("1.24.1", "b5963e82c8", "rel-1.24.1")]  # get_build_info() of the onnxruntime-openvino build


@X86
def test_a_run_on_the_openvino_provider_records_package_and_providers(bisect, results):
    r = bisect("run", "--model", "gemma-tiny-fused", *OPENVINO, "--ep", "openvino", "--from", "1.23.0", "--to",
               "1.24.1", "--json", results=results)
    assert r.returncode in (0, 3), r.stderr
    doc = r.json()
    assert doc["run_id"].startswith("gemma-tiny-fused-onnxruntime-openvino-openvino-"), doc["run_id"]
    assert doc["provenance"]["package"] == "onnxruntime-openvino" and doc["provenance"]["ep"] == "openvino"
    recs = records(results, doc["run_id"])
    assert {rec["version"] for rec in recs} == {"1.23.0", "1.24.1"}
    for rec in recs:
        assert rec["status"] == "ran", rec.get("reason")
        assert rec["package"] == "onnxruntime-openvino"
        assert rec["providers"]["requested"] == "OpenVINOExecutionProvider"
        assert rec["providers"]["used"][0] == "OpenVINOExecutionProvider", rec["providers"]
        assert "OpenVINOExecutionProvider" in rec["result"]["onnxruntime"]["providers"]
    # On the OpenVINO provider gemma-tiny-fused stays finite where the CPU provider has 7 NaN rows of 20.
    assert [(p["version"], p["verdict"], p["nan_rows"]) for p in doc["probes"]] == [("1.23.0", "good", 0),
                                                                                  ("1.24.1", "good", 0)]
    assert all(p["commit"] for p in doc["probes"])


@X86
def test_a_sweep_of_the_openvino_package_on_its_cpu_provider(bisect, results):
    r = bisect("sweep", "--model", "gemma-tiny-fused", *OPENVINO, "--from", "1.23.0", "--to", "1.24.1", "--json",
               results=results)
    assert r.returncode == 3, r.stderr  # no transition: both NaN, as the onnxruntime wheel since 1.20.0
    doc = r.json()
    assert doc["run_id"].startswith("gemma-tiny-fused-onnxruntime-openvino-cpu-"), doc["run_id"]
    assert [(p["version"], p["verdict"], p["nan_rows"]) for p in doc["probes"]] == [("1.23.0", "bad", 7),
                                                                                  ("1.24.1", "bad", 7)]
    for rec in records(results, doc["run_id"]):
        assert rec["providers"] == {"requested": "CPUExecutionProvider", "used": ["CPUExecutionProvider"]}


@X86
def test_a_provider_that_falls_back_to_the_cpu_is_a_skip_with_the_reason(bisect, results, residual_norm):
    """OpenVINO asked for precision FP16 on CPU logs an error and runs the session on the CPU provider."""
    model, batch = residual_norm
    r = bisect("run", "--model", str(model), "--inputs", str(batch), *OPENVINO, "--ep", "openvino",
               "--ep-option", "device_type=CPU", "--ep-option", "precision=FP16", "--from", "1.24.1", "--to", "1.24.1",
               "--json", results=results)
    assert r.returncode == 3, r.stderr
    doc = r.json()
    (probe,) = doc["probes"]
    assert probe["verdict"] == "skip", probe
    assert probe["why"].startswith("OpenVINOExecutionProvider was asked for but the session ran on "
                                   "CPUExecutionProvider"), probe["why"]
    assert "precision" in probe["why"], probe["why"]  # onnxruntime's own error line
    assert probe["nan_rows"] is None or probe["nan_rows"] == 0  # never judged as if it had run
    (rec,) = records(results, doc["run_id"])
    assert rec["providers"] == {"requested": "OpenVINOExecutionProvider", "used": ["CPUExecutionProvider"]}
    assert rec["provenance"]["ep_options"] == {"device_type": "CPU", "precision": "FP16"}
    assert not (results / doc["run_id"] / "outputs" / "1.24.1.npz").exists()  # the fallback's outputs are not kept


@X86
def test_compare_finds_where_the_builds_of_one_release_part(bisect, results, cache_dir):
    """The issue's example at 1.24.1: the onnxruntime wheel's CPU provider gives 7 NaN rows of 20 on
    gemma-tiny-fused, the OpenVINO provider 0. (Measured here: the onnxruntime-openvino wheel's own CPU
    provider gives the same 7 as the onnxruntime wheel, bit for bit on the finite rows.)"""
    r = bisect("compare", "--model", "gemma-tiny-fused", "--version", "1.24.1", "onnxruntime:cpu",
               "onnxruntime-openvino:cpu", "onnxruntime-openvino:openvino", "--cache-dir", str(cache_dir),
               "--results-dir", str(results), "--json")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    pairs = {p["label"]: p for p in doc["pairs"]}
    assert [p["label"] for p in doc["pairs"]] == ["onnxruntime:cpu", "onnxruntime-openvino:cpu",
                                                  "onnxruntime-openvino:openvino"]
    assert pairs["onnxruntime:cpu"]["nan_rows"] == 7 and pairs["onnxruntime:cpu"]["rows"] == 20
    assert pairs["onnxruntime-openvino:openvino"]["nan_rows"] == 0
    assert pairs["onnxruntime-openvino:openvino"]["providers"]["used"][0] == "OpenVINOExecutionProvider"
    assert doc["diverging"] == ["onnxruntime-openvino:openvino"]
    assert "NaN rows 0 vs 7" in pairs["onnxruntime-openvino:openvino"]["why"]
    assert pairs["onnxruntime-openvino:cpu"]["diverges"] is False
    assert pairs["onnxruntime:cpu"]["commit"] != pairs["onnxruntime-openvino:cpu"]["commit"]  # two builds of 1.24.1
    assert doc["message"].startswith("At 1.24.1, diverging from onnxruntime:cpu: onnxruntime-openvino:openvino")



@X86
def test_compare_over_a_range_rows_by_release_reruns_free_and_shows_on_the_dashboard(bisect, results, cache_dir,
                                                                                      tmp_path):
    """onnxruntime's CPU provider against onnxruntime-openvino's OpenVINO provider from 1.23.0 to 1.24.1: the two
    releases both have a cp311 wheel of diverge (7 NaN rows of 20 against 0, the finite rows a cosine of
    0.99999994 apart); onnxruntime's 1.23.1 and 1.23.2, which onnxruntime-openvino lacks, are said and not probed."""
    argv = ["compare", "--model", "gemma-tiny-fused", "--from", "1.23.0", "--to", "1.24.1", "onnxruntime:cpu",
            "onnxruntime-openvino:openvino", "--cache-dir", str(cache_dir), "--results-dir", str(results)]
    r = bisect(*argv, "--json")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert doc["releases"] == ["1.23.0", "1.23.1", "1.23.2", "1.24.1"]
    assert doc["probes"]["made"] + doc["probes"]["reused"] == 4  # two releases of two pairs (earlier tests' reused)
    (ov,) = doc["pairs"]
    assert ov["label"] == "onnxruntime-openvino:openvino"
    rows = {e["release"]: e for e in ov["releases"]}
    for v in ("1.23.0", "1.24.1"):
        assert (rows[v]["diverges"], rows[v]["why"]) == (True, "NaN rows 0 vs 7"), rows[v]
        assert 0.9999 < rows[v]["cosine"] < 1 and 0 < rows[v]["max_abs_diff"] < 1e-3, rows[v]
    for v in ("1.23.1", "1.23.2"):
        assert rows[v] == {"release": v, "cosine": None, "max_abs_diff": None, "diverges": None, "bad_rows": None,
                           "outputs_sha256": None, "why": "not compared: no such onnxruntime-openvino release"}
    ref = {e["release"]: e for e in doc["reference"]["releases"]}
    assert [ref[v]["nan_rows"] for v in doc["releases"]] == [7, None, None, 7]
    assert "onnxruntime-openvino:openvino diverges at every release compared (2), from 1.23.0" in doc["message"]
    runs = [doc["reference"]["run_id"], ov["run_id"]]
    assert not {rec["version"] for run in runs for rec in records(results, run)} & {"1.23.1", "1.23.2"}
    lines = {run: len(records(results, run)) for run in runs}
    stored = json.loads((results / doc["run_id"] / "compare.json").read_text())
    assert stored["pairs"] == doc["pairs"]

    again = bisect(*argv, env={"COLUMNS": "200"})  # the table, from what the runs hold
    assert again.returncode == 0, again.stderr
    assert {run: len(records(results, run)) for run in runs} == lines  # nothing probed again
    assert "0 probes made, 4 reused" in again.stdout, again.stdout
    table = [x for x in again.stdout.splitlines() if x.startswith("│")]
    assert [x.split("│")[1].strip() for x in table if x.split("│")[1].strip()] == doc["releases"]
    assert "diverges 0.99999994" in again.stdout and "no such onnxruntime-openvino release" in again.stdout

    site = tmp_path / "site"
    r = bisect("dashboard", str(results), "-o", str(site))
    assert r.returncode == 0, r.stderr
    html = (site / "index.html").read_text()
    section = html[html.index('<section id="divergence">'):]
    section = section[:section.index("</section>")]
    assert "Package and provider divergence" in section and f'data-run="{doc["run_id"]}"' in section
    (row,) = [x for x in section.split('<tr class="pair"')[1:] if 'data-pair="onnxruntime-openvino:openvino"' in x]
    assert [c.split('data-version="')[1].split('"')[0] for c in row.split("<td ")[1:]] == doc["releases"]
    assert [c.split('class="')[1].split('"')[0] for c in row.split("<td ")[1:]] == ["v bad", "v skip", "v skip",
                                                                                      "v bad"]

# -- wheels only: a source distribution in a wheel source never runs ------------------------


def planted_sdist(folder: Path, name: str, version: str, marker: Path) -> Path:
    """`name`-`version`.tar.gz whose setup.py writes `marker`: it shows whether anything built (ran) it."""
    import io
    import tarfile

    base = f"{name}-{version}"
    files = {"PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             "setup.py": f"open({str(marker)!r}, 'a').write({base!r} + '\\n')\n"
                         f"from setuptools import setup\nsetup(name={name!r}, version={version!r})\n"}
    path = folder / f"{base}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{base}/{rel}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_source_distribution_in_a_find_links_folder_never_runs(cache_dir, tmp_path):
    """numpy's sdists planted beside the release's wheel, one above numpy's range and one inside it and newer than
    any wheel: uv builds neither (wheels only), so neither setup.py runs, and the environment (and the site folder of
    emulated and container probes) takes numpy's wheel."""
    from harness.releases.packages import Package
    from harness.releases.versions import Release
    from harness.runners.uv import UvRunner

    target = Target(NATIVE, PYTHON)
    wheel = wheelhouse.release_wheel(cache_dir, "onnxruntime", "1.19.2", target)
    links = wheelhouse.find_links_dir(tmp_path / "links", [wheel])
    marker = tmp_path / "SDIST-RAN"
    for version in ("99.0.0", "2.99.0"):
        planted_sdist(links, "numpy", version, marker)
    runner = UvRunner(target, tmp_path / "cache")
    runner.package = Package(find_links=(str(links),))
    env = runner.prepare(Release("1.19.2", [wheel.name], source=str(links)))
    assert not marker.exists(), f"a planted setup.py ran: {marker.read_text()!r}"
    numpy = subprocess.run([str(env.path / "bin" / "python"), "-I", "-c", "import numpy; print(numpy.__version__)"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert numpy.split(".")[0] in ("1", "2") and numpy != "2.99.0", numpy
    # the folder of wheels for emulated and container probes is installed by the same arguments
    from harness.runners.sites import prepare_site

    site = prepare_site(tmp_path / "cache", target, Release("1.19.2", [wheel.name], source=str(links)), runner.package)
    assert not marker.exists(), f"a planted setup.py ran: {marker.read_text()!r}"
    assert [p.name for p in (site.path / "site").glob("numpy-*.dist-info")] != [], "numpy's wheel was not installed"


# -- development builds from a --find-links directory and a simple index -----------------------


@pytest.fixture(scope="module")
def dev_builds(cache_dir) -> dict:
    """1.19.2 as 1.20.0.dev1 and dev2, 1.20.0 as dev3 and dev4 (wheelhouse.dev_builds)."""
    return wheelhouse.dev_builds(cache_dir, Target("x86_64", PYTHON))


@X86
def test_development_builds_sort_between_releases(bisect, dev_builds):
    links = str(dev_builds["links"])
    r = bisect("versions", "--find-links", links, "--pre", "--from", "1.19.2", "--to", "1.20.0", "--json")
    assert r.returncode == 0, r.stderr
    rows = r.json()
    assert [row["version"] for row in rows] == ["1.19.2", "1.20.0.dev1", "1.20.0.dev2", "1.20.0.dev3", "1.20.0.dev4",
                                                "1.20.0"]
    assert {row["source"] for row in rows if ".dev" in row["version"]} == {links}


@X86
def test_a_bisection_over_development_builds_names_the_first_bad_one(bisect, dev_builds, residual_norm, results):
    model, batch = residual_norm
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--find-links", str(dev_builds["links"]), "--pre",
               "--from", "1.20.0.dev1", "--to", "1.20.0.dev4", "--json", results=results)
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.20.0.dev2", "1.20.0.dev3"), doc["message"]
    by_version = {p["version"]: p for p in doc["probes"]}
    # the builds are the 1.19.2 and 1.20.0 binaries: their commits tell them apart
    assert by_version["1.20.0.dev3"]["commit"] != by_version["1.20.0.dev2"]["commit"]
    recs = records(results, doc["run_id"])
    # as nightlies built from main, every build reports the base release 1.20.0 as its __version__
    assert {rec["result"]["onnxruntime"]["version"] for rec in recs} == {"1.20.0"}
    assert all(rec["provenance"]["find_links"] == [str(dev_builds["links"])] for rec in recs)


@X86
def test_a_matrix_cell_bisects_development_builds_from_its_find_links(bisect, dev_builds, residual_norm, results,
                                                                      tmp_path):
    """The [[providers]] entry's find_links and pre list the builds for the cell, as --find-links --pre do."""
    import json as json_mod

    from test_matrix import ob

    model, batch = residual_norm
    m = tmp_path / "dev.toml"
    m.write_text(f'mode = "bisect"\nreleases = {{ from = "1.20.0.dev1", to = "1.20.0.dev4" }}\n'
                 f'[[models]]\npath = "{model}"\ninputs = "{batch}"\n[[targets]]\narch = "x86_64"\n'
                 f'[[providers]]\npackage = "onnxruntime"\nfind_links = "{dev_builds["links"]}"\npre = true\n')
    r = ob("matrix", "run", str(m), "--cache-dir", bisect.cache_dir, "--results-dir", str(tmp_path / "res"), "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = json_mod.loads(r.stdout)["cells"]
    assert (doc["last_good"], doc["first_bad"]) == ("1.20.0.dev2", "1.20.0.dev3"), doc.get("message")


@pytest.fixture(scope="module")
def served_index(dev_builds):
    """The simple index of the test cache served over http on 127.0.0.1 (python -m http.server), ended by PID."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory",
                             str(dev_builds["index"])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        builders.wait_for_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@X86
def test_a_simple_index_on_disk_lists_and_installs_development_builds(bisect, served_index, dev_builds,
                                                                     residual_norm, tmp_path):
    """Listed over http (python -m http.server on 127.0.0.1, a PEP 503 page); installed by uv from the same
    index as file:// (a stable address: its environments are reused by the next run)."""
    r = bisect("versions", "--index-url", served_index, "--pre", "--from", "1.20.0.dev1", "--to", "1.20.0.dev4",
               "--json")
    assert r.returncode == 0, r.stderr
    assert [row["version"] for row in r.json()] == [f"1.20.0.dev{i}" for i in (1, 2, 3, 4)]
    assert {row["source"] for row in r.json()} == {served_index}
    model, batch = residual_norm
    index = dev_builds["index"].as_uri()
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--index-url", index, "--pre",
               "--from", "1.20.0.dev2", "--to", "1.20.0.dev3", "--json", results=tmp_path / "results")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.20.0.dev2", "1.20.0.dev3"), doc["message"]
    assert doc["provenance"]["index_urls"] == [index]


# -- the fp16 RMS norm of the second seed: CPU here, CUDA where a GPU is visible --------------------


def gpu_visible() -> bool:
    found = shutil.which("nvidia-smi")
    return bool(found) and subprocess.run([found], capture_output=True).returncode == 0


def test_the_rmsnorm_model_is_finite_on_the_cpu_provider(bisect, results):
    """On the CPU provider the square runs in an fp32 island: no row goes to zero (measured 1.19.0 .. 1.32.0)."""
    r = bisect("run", "--model", "rmsnorm-fp16-overflow", "--bad-if", "zero-rows,nan-or-inf", "--from", "1.24.1",
               "--to", "1.24.1", "--json", results=results)
    assert r.returncode == 3, r.stderr
    (probe,) = r.json()["probes"]
    assert probe["verdict"] == "good", probe["why"]
    assert "0 all-zero rows of 4" in probe["why"], probe["why"]


@pytest.mark.skipif(not gpu_visible(), reason="no NVIDIA GPU visible here (nvidia-smi absent or failing): "
                                              "the CUDA provider cannot run")
def test_the_rmsnorm_model_zeroes_rows_on_the_cuda_provider(bisect, results):
    """The seed: on CUDA the fp16 square overflows and rows whose values reach 888 and 300 come out all zero."""
    r = bisect("run", "--model", "rmsnorm-fp16-overflow", "--package", "onnxruntime-gpu", "--ep", "cuda",
               "--bad-if", "zero-rows", "--from", "1.24.1", "--to", "1.24.1", "--json", results=results)
    assert r.returncode == 3, r.stderr
    doc = r.json()
    (probe,) = doc["probes"]
    (rec,) = records(results, doc["run_id"])
    assert rec["providers"]["used"][0] == "CUDAExecutionProvider", rec.get("reason")
    assert probe["verdict"] == "bad" and "2 all-zero rows of 4" in probe["why"], probe["why"]
