"""The nightly dashboard (`bisect dashboard`): a static page checked in headless Chromium."""

from __future__ import annotations

import base64
import json
import html
import os
import platform
import re
import shutil
import time
import urllib.request
from pathlib import Path

import builders
import pytest
from test_matrix import ROOT, ob, run_matrix, tiny, write_matrix  # noqa: F401  (tiny is a fixture)

from harness.report import dashboard, numbers, overview
from harness.results.store import RunStore

SCREENSHOT = ROOT / "results" / "dashboard.png"
EVIL = "<script>window.__pwned = 1</script>"


# -- a headless Chromium driven by Playwright (Debian's chromium: no browser is downloaded) ---------------

CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--no-first-run", "--disable-default-apps", "--disable-extensions", "--mute-audio",
                  "--hide-scrollbars"]


class Browser:
    """One page in headless chromium: load a file, evaluate, lay out at a width, and the console errors and
    requests of the last load."""

    def __init__(self, exe: str):
        from playwright.sync_api import sync_playwright

        self.pw = sync_playwright().start()
        try:
            self.browser = self.pw.chromium.launch(executable_path=exe, args=CHROMIUM_FLAGS)
        except Exception:
            self.pw.stop()
            raise
        self.context = self.page = None
        self.viewport(1400, 1000)

    def viewport(self, width: int, height: int) -> None:
        """Lay the page out as a window `width` CSS pixels wide (a phone's when narrow: its viewport meta applies);
        a new page, opened by the next `open`."""
        if self.context is not None:
            self.context.close()
        self.context = self.browser.new_context(viewport={"width": width, "height": height}, device_scale_factor=1,
                                                is_mobile=width < 600, has_touch=width < 600)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.urls: list[str] = []
        self.page.on("console", lambda msg: self.errors.append(msg.text[:300]) if msg.type in ("error", "assert")
                     else None)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)[:300]))
        self.page.on("request", lambda req: self.urls.append(req.url))

    def open(self, url: str) -> None:
        self.errors.clear()
        self.urls.clear()  # this load's requests only
        self.page.goto(url, wait_until="load")

    def eval(self, expression: str):
        return self.page.evaluate(expression)

    def screenshot(self, path: Path, full_page: bool = True) -> Path:
        self.page.screenshot(path=str(path), full_page=full_page)
        return path

    def console_errors(self) -> list[str]:
        return list(self.errors)

    def requests(self) -> list[str]:
        return list(self.urls)

    def close(self):
        try:
            self.browser.close()
        finally:
            self.pw.stop()


def chromium_path() -> str | None:
    for exe in (os.environ.get("ORTBISECT_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                shutil.which("chromium-browser")):
        if exe and os.access(exe, os.X_OK):
            return exe
    return None


@pytest.fixture
def browser(tmp_path):
    exe = chromium_path()
    if exe is None:
        reason = "no chromium here (install Debian's chromium: bash .ci/chromium.sh)"
        print(f"\nSKIP: {reason}")
        pytest.skip(reason)
    b = Browser(exe)
    try:
        yield b
    finally:
        b.close()


def check_page(b: Browser, page: Path) -> None:
    b.open(page.resolve().as_uri())
    assert b.console_errors() == []
    leaving = [u for u in b.requests() if not u.startswith(("file://", "data:"))]
    assert leaving == [], leaving
    # one inline script (the filters), allowed by its hash; nothing loaded from elsewhere
    assert b.eval("[...document.scripts].map(s => [s.src, s.textContent.length > 0])") == [["", True]]
    assert b.eval("document.documentElement.scrollWidth <= window.innerWidth"), "horizontal page overflow"


# -- synthetic history --------------------------------------------------------------------

def _key(model_digest, arch, backend="uv", cpu=None, options=None):
    return {"model": model_digest, "batch": "b" * 64, "outputs": [], "session_options": options or {}, "arch": arch,
            "backend": backend, "python": "3.11", "cpu": cpu}


def _rec(version, nan, finished, arch, status="ran", reason=None, backend="uv"):
    r = {"version": version, "status": status, "finished": finished, "seconds": 1.0,
         "provenance": {"arch": arch, "backend": backend, "cpu": None, "python": "3.11"}}
    if status == "ran":
        r["result"] = {"outputs": [{"rows": 20, "nan_rows": nan, "inf_rows": 0}]}
    else:
        r["reason"] = reason
    return r


def make_run(root: Path, run_id: str, model: str, key: dict, records: list[dict], summary: dict | None = None,
             traces: dict | None = None) -> Path:
    d = root / run_id
    (d / "outputs").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"run_id": run_id, "key": key, "model": {"name": model,
                                                 "digest": key["model"]}, "batch": {"digest": key["batch"]},
                                                 "commands": []}))
    store = RunStore(d)
    for r in records:
        store.append(r)
    if summary:
        (d / "cells").mkdir()
        (d / "cells" / "k.json").write_text(json.dumps({  # a run document as harness.session.finish keeps it
            "run_id": run_id, "status": "found", "mode": "regression", "releases": [r["version"] for r in records],
            "probes": [], "predicate": "nan-or-inf", "generated": "2025-01-09T00:00:00Z", "cell": {"key": "k"},
            **summary}))
    if traces:
        (d / "traces").mkdir()
        for v, h in traces.items():
            (d / "traces" / f"{v}.json").write_text(json.dumps(
                {"version": v, "residual": [{"layer": 0, "headroom": h / 2, "nonfinite": False},
                                            {"layer": 1, "headroom": h, "nonfinite": h > 1}]}))
    return d


VERSIONS = ["1.19.0", "1.19.2", "1.20.0", "1.21.1", "1.23.2", "1.24.1"]


def synthetic(root: Path) -> Path:
    # x86: bad from 1.20.0; an old night saw 1.20.0 good, a refresh saw it bad (newest wins)
    recs = [_rec("1.20.0", 0, "2025-01-01T03:00:00Z", "x86_64")]
    recs += [_rec(v, 7 if i >= 2 else 0, f"2025-01-02T03:0{i}:00Z", "x86_64") for i, v in enumerate(VERSIONS)]
    make_run(root, "fused-x86_64-1", "gemma-tiny-fused", _key("f" * 64, "x86_64"), recs,
             summary={"last_good": "1.19.2", "first_bad": "1.20.0", "message": "Last good: 1.19.2, first bad: 1.20.0.",
                      "explanation": f"SimplifiedLayerNormalization runs in fp16 from 1.20.0 {EVIL}"},
             traces={"1.19.2": 0.6, "1.20.0": 1.4})
    # aarch64: good until 1.23.2, bad from 1.24.1, one release not installable, one that errored with markup
    recs = [_rec(v, 7 if v == "1.24.1" else 0, f"2025-01-03T03:0{i}:00Z", "aarch64", backend="qemu")
            for i, v in enumerate(VERSIONS) if v not in ("1.19.0", "1.21.1")]
    recs.append(_rec("1.19.0", 0, "2025-01-03T04:00:00Z", "aarch64", status="skip", reason="no wheel", backend="qemu"))
    recs.append(_rec("1.21.1", 0, "2025-01-03T04:01:00Z", "aarch64", status="error", reason=EVIL, backend="qemu"))
    make_run(root, "decomposed-aarch64-1", f"decomposed {EVIL}", _key("d" * 64, "aarch64", "qemu", "neoverse-n1"), recs)
    return root


def test_grid_marks_first_bad_flips_and_newest_record(tmp_path):
    site = tmp_path / "site"
    dashboard.build(synthetic(tmp_path / "results"), site)
    grid = json.loads((site / "dashboard.json").read_text())
    fused = grid["fused-x86_64-1/nan-or-inf"]
    assert (fused["last_good"], fused["first_bad"]) == ("1.19.2", "1.20.0")
    assert fused["verdicts"]["1.20.0"] == "bad"  # the refresh's newer record, not the first night's
    assert fused["flips"] == {"1.20.0": "good"}
    dec = grid["decomposed-aarch64-1/nan-or-inf"]
    assert dec["first_bad"] == "1.24.1"
    assert dec["verdicts"]["1.21.1"] == "error" and dec["verdicts"]["1.19.0"] == "skip"
    assert dec["flips"] == {"1.21.1": "good", "1.23.2": "error", "1.24.1": "good"}  # a skip is stepped over


def _question_doc(run_dir: Path, key: str, predicate: str, reference: dict | None, verdicts: dict, **more) -> None:
    """A run document under cells/ as harness.session keeps one (its probes' verdicts are the question's)."""
    (run_dir / "cells").mkdir(exist_ok=True)
    (run_dir / "cells" / f"{key}.json").write_text(json.dumps({
        "run_id": run_dir.name, "status": "found", "mode": "regression", "releases": sorted(verdicts),
        "probes": [{"version": v, "verdict": x} for v, x in sorted(verdicts.items())], "predicate": predicate,
        "reference": reference, "generated": "2025-01-09T00:00:00Z", "cell": {"key": key}, **more}))


def test_each_question_of_a_run_is_its_own_row_and_a_skipped_cell_says_why(tmp_path):
    """Two references under one predicate are two rows, each with its document's verdicts; the fp32 probes a
    reference adds to the run (a series) are not the plain row's; a run document that says `skipped` (a CUDA
    cell on a host without a GPU) is a row that says why."""
    root = tmp_path / "results"
    recs = [_rec("1.19.2", 0, "2025-01-02T03:00:00Z", "x86_64"), _rec("1.20.0", 7, "2025-01-02T03:01:00Z", "x86_64")]
    recs += [{**_rec(v, 0, f"2025-01-02T03:0{i + 2}:00Z", "x86_64"), "series": "reference-fp32"}
             for i, v in enumerate(("1.19.2", "1.20.0"))]  # newer, finite: the fp32 model's probes
    run = make_run(root, "fused-x86_64-1", "gemma-tiny-fused", _key("f" * 64, "x86_64"), recs)
    fp32 = {"kind": "fp32", "id": "fp32:0123456789abcdef", "label": "the model in fp32 on the same release"}
    old = {"kind": "release", "id": "release:1.19.2", "label": "the outputs of onnxruntime 1.19.2"}
    _question_doc(run, "plain", "nan-or-inf", None, {"1.19.2": "good", "1.20.0": "bad"})
    _question_doc(run, "vs-fp32", "cosine<0.999", fp32, {"1.19.2": "good", "1.20.0": "bad"})
    _question_doc(run, "vs-old", "cosine<0.999", old, {"1.19.2": "good", "1.20.0": "good"})
    why = "no NVIDIA GPU is visible (nvidia-smi is not installed)"
    gpu = make_run(root, "fused-gpu-1", "gemma-tiny-fused",
                   {**_key("f" * 64, "x86_64"), "package": "onnxruntime-gpu", "ep": "cuda"}, [])
    _question_doc(gpu, "cuda", "nan-or-inf", None, {}, status="skipped", skipped=why, message=f"Skipped: {why}.")
    site = tmp_path / "site"
    dashboard.build(root, site)
    grid = json.loads((site / "dashboard.json").read_text())
    assert sorted(grid) == ["fused-gpu-1/nan-or-inf", "fused-x86_64-1/cosine<0.999/vs-fp32:0123456789abcdef",
                            "fused-x86_64-1/cosine<0.999/vs-release:1.19.2", "fused-x86_64-1/nan-or-inf"]
    assert grid["fused-x86_64-1/nan-or-inf"]["verdicts"] == {"1.19.2": "good", "1.20.0": "bad"}  # not the fp32 probes'
    assert grid["fused-x86_64-1/nan-or-inf"]["first_bad"] == "1.20.0"
    assert grid["fused-x86_64-1/cosine<0.999/vs-fp32:0123456789abcdef"]["first_bad"] == "1.20.0"
    assert grid["fused-x86_64-1/cosine<0.999/vs-release:1.19.2"]["verdicts"] == {"1.19.2": "good", "1.20.0": "good"}
    assert [g["reference"] for _, g in sorted(grid.items())] == [None, "fp32", "1.19.2", None]
    assert [g["skipped"] for _, g in sorted(grid.items())] == [why, None, None, None]
    text = (site / "index.html").read_text()
    labels = __import__("re").findall(r'<th class="target" scope="row">(.*?)</th>', text)
    assert sorted(labels) == sorted([
        "<b>gemma-tiny-fused</b>x86_64 · uv · onnxruntime-gpu:cuda · py3.11",
        "<b>gemma-tiny-fused</b>x86_64 · uv · py3.11",
        "<b>gemma-tiny-fused</b>x86_64 · uv · py3.11 · bad if cosine&lt;0.999 vs fp32",
        "<b>gemma-tiny-fused</b>x86_64 · uv · py3.11 · bad if cosine&lt;0.999 vs 1.19.2"]), labels
    assert f'<b>skipped</b>: {why}' in text


def test_page_is_self_contained_and_escapes_results(tmp_path):
    site = tmp_path / "site"
    page = dashboard.build(synthetic(tmp_path / "results"), site)
    text = page.read_text()
    assert text.lower().count("<script") == 1 and f"<script>{dashboard.FILTER_JS}</script>" in text  # the filters only
    digest = base64.b64encode(__import__("hashlib").sha256(dashboard.FILTER_JS.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in text  # the page's policy runs that script and no other
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in text
    assert "http://" not in text.replace("http://www.w3.org", "") and "https://" not in text
    assert "<svg" in text  # matplotlib charts, inline
    for href in __import__("re").findall(r'href="(data/[^"]+)"', text):
        assert (site / urllib.request.url2pathname(href)).is_file(), href


def test_a_summary_whose_cell_key_climbs_out_links_to_its_own_file(tmp_path):
    """A results directory is evidence from elsewhere: a summary saying its cell key is `../../../../x` is no
    cell document (left out, with why), and one whose key is not its file's name is linked by its own file,
    copied into the site: no link leaves the site."""
    results = synthetic(tmp_path / "results")
    summary = results / "fused-x86_64-1" / "cells" / "k.json"
    doc = json.loads(summary.read_text())
    summary.write_text(json.dumps({**doc, "cell": {"key": "../../../../x"}}))
    left_out = []
    text = dashboard.build(results, tmp_path / "site", left_out=left_out).read_text()
    assert [(p.name, why) for p, why in left_out] == [
        ("k.json", "not a cell document: cell.key '../../../../x' is not one file name")]
    assert 'href="data/fused-x86_64-1/cells/k.json"' not in text  # named among what was left out, not linked
    assert "is not one file name" in text
    summary.write_text(json.dumps({**doc, "cell": {"key": "another-name"}}))
    site = tmp_path / "site2"
    text = dashboard.build(results, site).read_text()
    hrefs = __import__("re").findall(r'href="(data/[^"]+)"', text)
    assert "data/fused-x86_64-1/cells/k.json" in hrefs, hrefs
    assert "another-name" not in " ".join(hrefs)
    for href in hrefs:
        target = (site / urllib.request.url2pathname(href)).resolve()
        assert target.is_relative_to(site.resolve()) and target.is_file(), href


def test_opens_in_headless_chromium_without_errors_or_network(browser, tmp_path):
    site = tmp_path / "site"
    page = dashboard.build(synthetic(tmp_path / "results"), site)
    check_page(browser, page)
    rows = browser.eval('Object.fromEntries([...document.querySelectorAll("tr.row")].map(r => [r.dataset.run, '
                        '[r.dataset.firstBad, r.querySelector("td.first-bad")?.dataset.version]]))')
    assert rows == {"fused-x86_64-1": ["1.20.0", "1.20.0"], "decomposed-aarch64-1": ["1.24.1", "1.24.1"]}
    assert EVIL in browser.eval("document.body.innerText")  # shown as text ...
    assert browser.eval("typeof window.__pwned") == "undefined"  # ... never run
    assert browser.eval('document.querySelectorAll(".chart svg").length') == 2  # traces' headroom + the history


@pytest.mark.release
@pytest.mark.qemu
@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 native + aarch64 under QEMU")
def test_matrix_results_dashboard_in_chromium(browser, tiny, cache_dir, tmp_path):  # noqa: F811
    path = write_matrix(tiny, "dash", models=("residual_overflow",), targets=[("x86_64", "auto"), ("aarch64", "qemu")])
    results = tmp_path / "results"
    run_matrix(path, cache_dir, results, "-j", "2")
    r = ob("dashboard", results, "-o", tmp_path / "site")
    assert r.returncode == 0, r.stderr
    check_page(browser, tmp_path / "site" / "index.html")
    rows = browser.eval('[...document.querySelectorAll("tr.row")].map(r => [r.dataset.target, r.dataset.firstBad])')
    by_arch = {t.split(" · ")[0]: fb for t, fb in rows}
    assert by_arch == {"aarch64": "1.24.1", "x86_64": ""}
    assert browser.eval('document.querySelector("td.first-bad").dataset.version') == "1.24.1"
    SCREENSHOT.parent.mkdir(exist_ok=True)
    browser.screenshot(SCREENSHOT)
    print(f"\nscreenshot: {SCREENSHOT}")


def test_build_time_for_1000_probe_records(tmp_path, capsys):
    """Not a timed assertion: prints how long 1,000 records take to become a page."""
    root = tmp_path / "results"
    versions = [f"1.{minor}.{patch}" for minor in range(19, 32) for patch in (0, 1)][:25]
    n = 0
    for model in ("fused", "decomposed"):
        for arch, backend in (("x86_64", "uv"), ("aarch64", "qemu")):
            recs = []
            for night in range(10):
                for i, v in enumerate(versions):  # 10 nights x 25 releases, every one re-probed (--refresh)
                    recs.append(_rec(v, 7 if i > 8 else 0, f"2025-01-{night + 1:02d}T03:{i:02d}:00Z", arch,
                                     backend=backend))
            n += len(recs)
            make_run(root, f"{model}-{arch}-1", model, _key(model[0] * 64, arch, backend), recs)
    assert n == 1000
    t0 = time.perf_counter()
    dashboard.build(root, tmp_path / "site")
    seconds = time.perf_counter() - t0
    with capsys.disabled():
        print(f"\ndashboard from {n} probe records: {seconds:.2f} s")


def test_a_run_with_an_unreadable_line_is_left_out_with_a_word_and_counted(tmp_path):
    root = synthetic(tmp_path / "results")
    bad = root / "decomposed-aarch64-1" / "probes.jsonl"
    lines = bad.read_text().splitlines(keepends=True)
    lines[1] = lines[1][:30] + "\n"  # a record cut short, with records after it
    bad.write_text("".join(lines))
    torn = root / "fused-x86_64-1" / "probes.jsonl"
    torn.write_text(torn.read_text() + '{"version": "1.25.0", "sta')  # a crash mid-write: the run stays
    heard, left_out = [], []
    page = dashboard.build(root, tmp_path / "site", warn=heard.append, left_out=left_out)
    skipped, torn_note = heard  # one word each, in run order
    assert skipped.startswith(f"skipping {bad.parent}: {bad} line 2: not JSON")
    assert torn_note.startswith(f"{torn} line 8: cut off mid-write (26 bytes") and torn_note.endswith(": left out")
    (d, why), = left_out
    assert d.name == "decomposed-aarch64-1" and why.startswith(f"{bad} line 2: not JSON")
    grid = json.loads((tmp_path / "site" / "dashboard.json").read_text())
    assert sorted(grid) == ["fused-x86_64-1/nan-or-inf"]
    text = page.read_text()
    assert '<div class="left-out" data-count="1">' in text and "1 run(s) left out" in text
    assert "decomposed-aarch64-1</span>: " in text and "line 2: not JSON" in text
    r = ob("dashboard", root, "-o", tmp_path / "site2")
    assert r.returncode == 0, r.stderr
    assert "1 run(s) left out, unreadable" in r.stdout
    assert f"dashboard: skipping {bad.parent}" in r.stderr


# -- dashboard v2: many models and targets, two widths -------------------------------------

V2_VERSIONS = ["1.19.0", "1.19.2", "1.20.0", "1.21.1", "1.22.0", "1.23.2", "1.24.1", "1.25.0", "1.26.0", "1.27.0"]
V2_MODELS = ["gemma-tiny-fused", "gemma-tiny-decomposed", f"stack {EVIL}"]
SCREENSHOTS = {1400: ROOT / "results" / "dashboard-1400.png", 390: ROOT / "results" / "dashboard-390.png"}


@pytest.fixture(scope="module")
def v2_site(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("v2") / "results"
    builders.write_history(root, V2_MODELS, V2_VERSIONS, nights=3, refresh=True)
    site = root.parent / "site"
    dashboard.build(root, site, title="ortbisect nightly")
    return site


def test_v2_grid_rows_are_model_by_target_with_package_provider_and_margins(v2_site):
    grid = json.loads((v2_site / "dashboard.json").read_text())
    assert len(grid) == len(V2_MODELS) * len(builders.HISTORY_TARGETS)
    ov = grid["gemma-tiny-fused-x86_64-2/nan-or-inf"]
    assert "onnxruntime-openvino" in ov["target"] and "OpenVINOExecutionProvider" in ov["target"]
    assert ov["provenance"]["package"] == "onnxruntime-openvino" and ov["first_bad"] is None
    fused = grid["gemma-tiny-fused-x86_64-0/nan-or-inf"]
    assert fused["report"] == "data/gemma-tiny-fused-x86_64-0/report.md"
    assert (v2_site / fused["report"]).is_file()
    # the margin climbs release by release, and is past the ceiling where outputs hold NaN
    rooms = [fused["margins"][v]["headroom"] for v in V2_VERSIONS if v not in fused["nan_rows"] or
             not fused["nan_rows"][v]]
    assert rooms == sorted(rooms) and all(r < 1 for r in rooms)
    assert all(fused["margins"][v]["headroom"] is None for v, n in fused["nan_rows"].items() if n)  # inf: non-finite
    arm = grid["gemma-tiny-decomposed-aarch64-1/nan-or-inf"]
    assert arm["margins"]["1.19.0"]["cosine_min"] == pytest.approx(1 - 1e-4)


def test_v2_changes_since_the_previous_run(v2_site):
    ch = json.loads((v2_site / "changes.json").read_text())
    assert ch["run_started"].startswith("2026-11-03") and ch["previous_run"].startswith("2026-11-02")
    assert [v for v, _ in ch["new_releases"]] == [V2_VERSIONS[-1]]
    assert len(ch["new_releases"][0][1]) == len(V2_MODELS) * len(builders.HISTORY_TARGETS)
    assert ch["flipped"] == [["gemma-tiny-fused-x86_64-0/nan-or-inf", "1.19.2", "good", "bad"]]
    assert ["gemma-tiny-fused-x86_64-0/nan-or-inf", "1.20.0", "1.19.2"] in ch["new_boundaries"]


def test_v2_in_chromium_at_1400_and_390_px(browser, v2_site):
    page = v2_site / "index.html"
    grid = json.loads((v2_site / "dashboard.json").read_text())
    expected = {(k.split("/")[0], v): verdict for k, g in grid.items() for v, verdict in g["verdicts"].items()}
    for width, shot in SCREENSHOTS.items():
        browser.viewport(width, 900)
        check_page(browser, page)  # no console error, no request beyond file://, no horizontal page overflow
        cells = browser.eval('[...document.querySelectorAll("#overview td.v[data-verdict]:not(.none)")]'
                             '.map(td => [td.closest("tr").dataset.run, td.dataset.version, td.dataset.verdict,'
                             ' td.textContent.trim().length > 0])')
        assert {(run, v): verdict for run, v, verdict, _ in cells} == expected  # every verdict cell, as judged
        assert all(has_text for *_, has_text in cells)  # a symbol in each: colour is not the only carrier
        assert browser.eval('document.querySelector("#changes").getBoundingClientRect().top < '
                            'document.querySelector("#overview").getBoundingClientRect().top')
        boundary = browser.eval('[...document.querySelectorAll("#overview tr.row")].filter(r => r.dataset.run == '
                                '"gemma-tiny-fused-x86_64-0").map(r => [r.querySelector("td.first-bad").dataset.version,'
                                ' r.querySelector("a.report").getAttribute("href")])[0]')
        assert boundary == ["1.19.2", "data/gemma-tiny-fused-x86_64-0/report.md"]
        assert browser.eval('document.querySelectorAll("#overview svg.spark").length') >= len(grid)
        assert browser.eval('[...document.querySelectorAll("svg.history text")].some(t => '
                            't.textContent == "2026-11-03")')  # the run's date on the history's axis
        # the filters: one model, then one target, without a server
        shown = browser.eval('(() => { const m = document.getElementById("f-model"); m.value = "gemma-tiny-fused";'
                             ' m.dispatchEvent(new Event("change")); return [...document.querySelectorAll('
                             '"#overview tr.row")].filter(r => !r.hidden).map(r => r.dataset.model); })()')
        assert shown == ["gemma-tiny-fused"] * len(builders.HISTORY_TARGETS)
        SCREENSHOTS[width].parent.mkdir(exist_ok=True)
        browser.eval('(() => { const m = document.getElementById("f-model"); m.value = "";'
                     ' m.dispatchEvent(new Event("change")); })()')
        browser.screenshot(shot)
        assert shot.stat().st_size > 10_000
    assert EVIL in browser.eval("document.body.innerText") and browser.eval("typeof window.__pwned") == "undefined"
    print(f"\nscreenshots: {', '.join(map(str, SCREENSHOTS.values()))}")


# -- dashboard v3: 25 releases, repeat runs, a skipped GPU cell, at 1400x900 and 390x844 ---------------------

V3_VERSIONS = [f"1.{minor}.{patch}" for minor in range(19, 32) for patch in (0, 1)][:25]
V3_SCREENS = ((1400, 900), (390, 844))


def _rewrite_run(src: Path, dest: Path, keep=lambda rec: True, key: dict | None = None, **more) -> Path:
    """A copy of a recorded run under another run id: its records filtered by `keep`, each updated by `more`,
    its manifest key updated by `key` (another run of the same model, as a repeat or another option leaves it)."""
    shutil.copytree(src, dest)
    man = json.loads((dest / "manifest.json").read_text())
    man.update(run_id=dest.name, key={**man["key"], **(key or {})})
    (dest / "manifest.json").write_text(json.dumps(man))
    recs = [json.loads(line) for line in (dest / "probes.jsonl").read_text().splitlines()]
    for rec in recs:
        for k, v in more.items():
            rec.setdefault(k, {}).update(v)
    (dest / "probes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs if keep(r)))
    return dest


@pytest.fixture(scope="module")
def v3_site(tmp_path_factory) -> Path:
    """Three nights of 3 models x 3 targets over 25 releases, and beside them: a repeat run that gave the same
    answer (one row), a repeat over the same range that lacks a release, the same question over fewer releases
    and with a session option (rows of their own that say so), the worker's peak memory of one run (in MB, as
    recorded), and a CUDA cell skipped on a host without a GPU (no numbers)."""
    root = tmp_path_factory.mktemp("v3") / "results"
    builders.write_history(root, V2_MODELS, V3_VERSIONS, nights=3, refresh=True)
    fused = root / "gemma-tiny-fused-x86_64-0"
    _rewrite_run(root / "gemma-tiny-decomposed-x86_64-0", root / "gemma-tiny-decomposed-x86_64-again")
    _rewrite_run(fused, root / "gemma-tiny-fused-x86_64-few", keep=lambda r: r["version"] in V3_VERSIONS[:6])
    _rewrite_run(root / "gemma-tiny-decomposed-aarch64-1", root / "gemma-tiny-decomposed-aarch64-rerun",
                 keep=lambda r: r["version"] != V3_VERSIONS[3])
    _rewrite_run(fused, root / "gemma-tiny-fused-x86_64-noopt",
                 key={"session_options": {"graph_optimization_level": "ORT_DISABLE_ALL"}})
    recs = [json.loads(line) for line in (fused / "probes.jsonl").read_text().splitlines()]
    for rec in recs:
        rec["result"]["peak_rss_mb"] = 1250.0
    (fused / "probes.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    why = "no NVIDIA GPU is visible (nvidia-smi is not installed)"
    gpu = make_run(root, "gemma-tiny-fused-gpu-1", "gemma-tiny-fused",
                   {**_key(f"{0:064x}", "x86_64"), "package": "onnxruntime-gpu", "ep": "cuda"}, [])
    _question_doc(gpu, "cuda", "nan-or-inf", None, {}, status="skipped", skipped=why, message=f"Skipped: {why}.")
    site = root.parent / "site"
    dashboard.build(root, site, title="ortbisect nightly")
    return site


def test_v3_rows_are_labelled_by_their_question_and_a_repeat_with_the_same_answer_is_one_row(v3_site):
    text = (v3_site / "index.html").read_text()
    rows = re.findall(r'<tr class="row" data-run="([^"]+)".*?<th class="target" scope="row">(.*?)</th>', text, re.S)
    labels = {run: html.unescape(re.sub(r"<[^>]+>", " ", label)).strip() for run, label in rows}
    assert len(rows) == len(labels) == len(set(labels.values())), labels  # no two rows read alike
    assert "gemma-tiny-decomposed-x86_64-again" not in labels  # the same answer again: merged ...
    assert 'data-same-as="gemma-tiny-decomposed-x86_64-again"' in text and "(+1 same)" in text  # ... and said
    fused = "gemma-tiny-fused x86_64 · uv · py3.11"
    assert labels["gemma-tiny-fused-x86_64-few"] == f"{fused} · regression 1.19.0..{V3_VERSIONS[5]}"  # the range
    assert labels["gemma-tiny-fused-x86_64-0"] == f"{fused} · regression 1.19.0..{V3_VERSIONS[-1]}"
    assert labels["gemma-tiny-fused-x86_64-noopt"] == f"{fused} · graph_optimization_level=ORT_DISABLE_ALL"
    arm = "gemma-tiny-decomposed aarch64 · qemu · cpu neoverse-n1 · py3.11"  # same range, another answer: the run
    assert labels["gemma-tiny-decomposed-aarch64-rerun"] == f"{arm} · run gemma-tiny-decomposed-aarch64-rerun"
    assert labels["gemma-tiny-decomposed-aarch64-1"] == f"{arm} · run gemma-tiny-decomposed-aarch64-1"
    assert labels["gemma-tiny-decomposed-x86_64-0"] == "gemma-tiny-decomposed x86_64 · uv · py3.11"  # alone: as ever
    assert "mem 1.2 GB" in text and "e+03" not in text  # numbers for people


# every visible text node's line boxes (as far as the scroll boxes around it show them); a pair from two nodes that cross by more than a pixel each way overlaps
OVERLAPS_JS = """(() => {
  const boxes = [];
  const walk = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walk.nextNode(); n; n = walk.nextNode()) {
    if (!n.textContent.trim() || n.parentElement.closest('svg, script, style, select')) continue;
    if (!n.parentElement.checkVisibility({visibilityProperty: true})) continue;  // a closed <details>, hidden
    let clip = [-Infinity, -Infinity, Infinity, Infinity];  // what the scroll boxes around it let be seen
    for (let el = n.parentElement; el; el = el.parentElement) {
      const style = getComputedStyle(el);
      if (style.overflowX === 'visible' && style.overflowY === 'visible') continue;
      const c = el.getBoundingClientRect();
      clip = [Math.max(clip[0], c.left), Math.max(clip[1], c.top), Math.min(clip[2], c.right), Math.min(clip[3], c.bottom)];
    }
    const range = document.createRange();
    range.selectNodeContents(n);
    for (const r of range.getClientRects()) {
      const seen = {left: Math.max(r.left, clip[0]), top: Math.max(r.top, clip[1]),
                    right: Math.min(r.right, clip[2]), bottom: Math.min(r.bottom, clip[3])};
      if (seen.right - seen.left > 0 && seen.bottom - seen.top > 0) boxes.push([n, seen]);
    }
  }
  const out = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [n, a] = boxes[i], [m, b] = boxes[j];
    if (n === m) continue;
    const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
    const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
    if (w > 1 && h > 1) out.push([n.textContent.trim().slice(0, 40), m.textContent.trim().slice(0, 40)]);
  }
  return [boxes.length, out];
})()"""

FIRST_ROW_JS = """(() => {
  const box = el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const row = document.querySelector('#overview tr.row');
  const cells = [...row.querySelectorAll('td.v')];
  return {first: box(document.querySelector('#overview td.v')), boundary: box(row.querySelector('td.first-bad-col')),
          newest: box(cells[cells.length - 1]), label: box(row.querySelector('th.target')),
          screen: [window.innerWidth, window.innerHeight]};
})()"""


def test_v3_in_chromium_at_1400x900_and_390x844(browser, v3_site, tmp_path_factory):
    """The acceptance of the page: on both screens the first verdict cell (and the first row's label, boundary and
    newest verdict) lie inside the first screen; at 1400 px the 25 releases fit without a horizontal scroll; no
    text overlaps another; no row reads like another. Screenshots (the first screen and the whole page) go to a
    temporary folder, named in the output."""
    shots = tmp_path_factory.mktemp("screenshots")
    grid = json.loads((v3_site / "dashboard.json").read_text())
    assert len({v for g in grid.values() for v in g["verdicts"]}) == 25
    for width, height in V3_SCREENS:
        browser.viewport(width, height)
        check_page(browser, v3_site / "index.html")  # no console error, no request, no page overflow
        at = browser.eval(FIRST_ROW_JS)
        assert at["screen"] == [width, height]
        for name in ("first", "boundary", "newest", "label"):
            left, top, right, bottom = at[name]
            assert 0 <= left and right <= width and 0 <= top and bottom <= height, (width, name, at[name])
        if width == 1400:
            fits = browser.eval('(() => { const s = document.querySelector("#overview .scroll");'
                                ' return [s.scrollWidth, s.clientWidth]; })()')
            assert fits[0] <= fits[1], f"the grid scrolls sideways: {fits}"
            raw = browser.eval('document.querySelector("#overview tr.row td.raw a").getBoundingClientRect().right')
            assert raw <= width  # the last column (the probes link) in sight
            assert browser.eval('document.querySelectorAll("#overview thead th.ver").length') == 25
        n, overlaps = browser.eval(OVERLAPS_JS)
        assert n > 500 and overlaps == [], overlaps[:10]
        rows = browser.eval('[...document.querySelectorAll("#overview tr.row")].map(r => [r.dataset.run,'
                            ' r.querySelector("th.target").innerText.replace(/\\s+/g, " ").trim(),'
                            ' [...r.querySelectorAll("td.v")].map(td => td.dataset.verdict).join(",")])')
        labels = [label for _, label, _ in rows]
        assert len(labels) == len(set(labels)), labels  # no two rows read alike ...
        assert len({(label, v) for _, label, v in rows}) == len(rows)  # ... nor show the same answer twice
        runs = [run for run, _, _ in rows]
        assert "gemma-tiny-decomposed-x86_64-again" not in runs  # the repeat with the same answer is merged ...
        assert browser.eval('document.querySelector(\'tr.row[data-run="gemma-tiny-decomposed-x86_64-0"]\')'
                            '.dataset.sameAs') == "gemma-tiny-decomposed-x86_64-again"  # ... and said
        by_run = dict((run, label) for run, label, _ in rows)
        assert by_run["gemma-tiny-fused-x86_64-few"].endswith(f"· regression 1.19.0..{V3_VERSIONS[5]}")
        assert by_run["gemma-tiny-fused-x86_64-0"].endswith(f"· regression 1.19.0..{V3_VERSIONS[-1]}")
        assert "graph_optimization_level=ORT_DISABLE_ALL" in by_run["gemma-tiny-fused-x86_64-noopt"]
        text = browser.eval('document.querySelector(\'tr.row[data-run="gemma-tiny-fused-x86_64-0"]\').innerText')
        assert "mem 1.2 GB" in text, text  # not "1.25e+03 MB"
        assert "skipped: no NVIDIA GPU" in browser.eval(
            'document.querySelector(\'tr.row[data-run="gemma-tiny-fused-gpu-1"]\').innerText')
        assert browser.eval('document.querySelector("#changes").getBoundingClientRect().top < '
                            'document.querySelector("#overview").getBoundingClientRect().top')
        assert browser.eval('document.querySelector("details.help").open') is False  # the explanations wait
        browser.screenshot(shots / f"first-screen-{width}x{height}.png", full_page=False)
        browser.screenshot(shots / f"page-{width}.png")
    print(f"\nscreenshots: {shots}")


def test_changes_are_one_line_when_nothing_changed(browser, tmp_path):
    """A newest run that changed nothing says so in one line above the grid; one that changed something lists it."""
    root = tmp_path / "results"
    builders.write_history(root, V2_MODELS[:1], V2_VERSIONS, nights=2, refresh=True)
    rows = overview.collect(root)
    runs = overview.runs_of(t for r in rows for _, t, _ in r.judged)
    quiet = overview.Changes(run_started=runs[-1][0], previous_run=runs[-2][1], new_releases=[], flipped=[],
                             new_boundaries=[])
    page = tmp_path / "quiet.html"
    page.write_text(dashboard.render(rows, ch=quiet, runs=runs))
    browser.viewport(1400, 900)
    check_page(browser, page)
    said = browser.eval('(() => { const c = document.querySelector("#changes"); return [c.innerText,'
                        ' c.querySelectorAll("li").length, [...c.querySelector("p").getClientRects()].length]; })()')
    assert said[0].startswith("Changed since the previous run: nothing") and said[1:] == [0, 1], said
    loud = dashboard.render(rows, runs=runs)
    assert '<section class="changes" id="changes"><h2>Changed since the previous run: ' in loud


@pytest.mark.parametrize("x, unit, said", [
    (None, "", "none"), (0, "", "0"), (0.93, "", "0.93"), (1.0, "", "1"), (12.345, "", "12.3"), (450.4, "", "450"),
    (12345.6, "", "12,346"), (3.1e-7, "", "3.1e-7"), (3.14159e-7, "", "3.1e-7"), (-2.5e-5, "", "-2.5e-5"),
    (1e-7, "", "1e-7"), (2.5e6, "", "2.5e6"), (0.001, "", "0.001"), (float("nan"), "", "NaN"),
    (float("inf"), "", "inf"), (float("-inf"), "MB", "-inf"), (1220.0, "MB", "1.2 GB"), (1250.0, "MB", "1.2 GB"),
    (512.0, "MB", "512 MB"), (64.25, "MB", "64.2 MB"), (0.5, "MB", "512 kB"), (3.0 * 1024 ** 2, "MB", "3 TB"),
    (1.0523, "x", "1.05x"), (12.34, "ms", "12.3 ms"), (True, "", "True"), ("n/a", "", "n/a"),
])
def test_numbers_are_said_for_people(x, unit, said):
    assert numbers.human(x, unit) == said


# -- commands on the page ---------------------------------------------------------------------------------

# each text node under a command's element, character by character: where a line starts again (a character lower
# than the one before it) with no space between them, the command was broken inside a word
BROKEN_COMMANDS_JS = """(() => {
  const out = [];
  let n = 0;
  for (const code of document.querySelectorAll('code')) {
    if (!code.checkVisibility()) continue;
    n++;
    let top = null, space = false;
    const walk = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let t = walk.nextNode(); t; t = walk.nextNode()) {
      for (let i = 0; i < t.length; i++) {
        if (/\\s/.test(t.data[i])) { space = true; continue; }
        const range = document.createRange();
        range.setStart(t, i); range.setEnd(t, i + 1);
        const r = range.getClientRects()[0];
        if (!r) continue;
        if (top !== null && r.top > top + 2 && !space) out.push([code.textContent, t.data.slice(0, i + 1)]);
        top = r.top; space = false;
      }
    }
  }
  return [n, out];
})()"""


def test_every_command_on_the_page_breaks_between_words_only(v3_site):
    """A command (`bisect report RUN` where a row has no report yet) is its words, each unbreakable: the page's
    lines never cut one inside a word ("bisect repo|rt"); the style says so."""
    text = (v3_site / "index.html").read_text()
    codes = re.findall(r"<code[^>]*>(.*?)</code>", text, re.S)
    assert len(codes) > 3 and all('class="cmd"' in c for c in re.findall(r"<code[^>]*>", text)), codes[:3]
    said = 'no report yet: <code class="cmd"><span class="w">bisect</span> <span class="w">report</span> <span class="w">'
    assert said in text
    css = (Path(dashboard.__file__).parent / "templates" / "dashboard.css").read_text()
    assert "break-all" not in css and "code.cmd .w{white-space:nowrap}" in css


def test_in_chromium_no_command_is_broken_inside_a_word(browser, v3_site):
    for width, height in V3_SCREENS:
        browser.viewport(width, height)
        check_page(browser, v3_site / "index.html")
        n, broken = browser.eval(BROKEN_COMMANDS_JS)
        assert n >= 5 and broken == [], (width, broken[:5])
        if width == 1400:  # the run ids widen their column, yet the 25 releases still fit
            fits = browser.eval('(() => { const s = document.querySelector("#overview .scroll");'
                                ' return [s.scrollWidth, s.clientWidth]; })()')
            assert fits[0] <= fits[1], fits


# -- runs that are no search: listed apart, never a row of the grid -----------------------------------------

def _triage_run(root: Path, run_id: str, kind: str, records: list[dict], doc: dict | None = None) -> Path:
    """A run as `bisect repeat` or `bisect options` leaves it: its key's `triage`, its tagged probes, its document."""
    d = make_run(root, run_id, "fused", {**_key("f" * 64, "x86_64"), "triage": kind, "version": "1.20.0"}, records)
    if doc is not None:
        (d / f"{kind}.json").write_text(json.dumps(doc))
    return d


def _sha(rec: dict, sha: str) -> dict:
    rec["result"]["outputs"][0].update(name="y", sha256=sha)
    return rec


def test_a_repeat_or_options_run_is_no_row_but_listed_apart_with_its_answer(tmp_path):
    root = tmp_path / "results"
    synthetic(root)
    _triage_run(root, "fused-repeat-1", "repeat",
                [{**_sha(_rec("1.20.0", 7, f"2025-01-04T03:0{i}:00Z", "x86_64"), "ab" * 32), "series": "s1",
                  "repeat_index": i} for i in range(5)], {"kind": "repeat", "n": 5})
    _triage_run(root, "fused-repeat-2", "repeat",
                [{**_sha(_rec("1.20.0", 0, f"2025-01-04T03:0{i}:00Z", "x86_64"), "cd" * 32 if i else "ef" * 32),
                  "series": "s2", "repeat_index": i} for i in range(3)])
    combos = [(f"level={lv},mode=sequential,threads=1,switch=none", nan) for lv, nan in
              (("disable", 0), ("basic", 7), ("extended", 7), ("all", 7))]
    _triage_run(root, "fused-options-1", "options",
                [{**_rec("1.20.0", nan, "2025-01-04T04:00:00Z", "x86_64"), "combo_id": c} for c, nan in combos],
                {"kind": "options", "predicate": "nan-or-inf"})
    site = tmp_path / "site"
    text = dashboard.build(root, site).read_text()
    grid = json.loads((site / "dashboard.json").read_text())
    assert sorted(grid) == ["decomposed-aarch64-1/nan-or-inf", "fused-x86_64-1/nan-or-inf"]  # no row of theirs
    assert re.findall(r'<tr class="row" data-run="([^"]+)"', text) == ["decomposed-aarch64-1", "fused-x86_64-1"]
    listed = {run: html.unescape(re.sub(r"<[^>]+>", " ", body)) for run, body in
              re.findall(r'<tr class="probed" data-run="([^"]+)"[^>]*>(.*?)</tr>', text, re.S)}
    assert sorted(listed) == ["fused-options-1", "fused-repeat-1", "fused-repeat-2"]
    assert "same bits in 5 of 5 runs" in listed["fused-repeat-1"] and "NaN rows 7 of 20" in listed["fused-repeat-1"]
    assert "nondeterministic: 2 different outputs in 3 runs" in listed["fused-repeat-2"]
    assert "3 of 4 combinations bad (1 good); bad if nan-or-inf" in listed["fused-options-1"]
    assert all("no boundary" not in body for body in listed.values())
    for href in re.findall(r'href="(data/fused-(?:repeat|options)[^"]+)"', text):
        assert (site / urllib.request.url2pathname(href)).is_file(), href
    assert 'href="data/fused-repeat-1/repeat.json"' in text and 'href="data/fused-options-1/options.json"' in text


# -- one row per question answered: a run's questions that found one boundary, and real runs of every command --

def test_the_questions_of_a_run_that_found_one_boundary_are_one_row(tmp_path):
    """One run asked where it broke over two ranges, swept one of them and asked it as a fix (which found it runs
    the other way): one question, one answer, one row, over both ranges. A one-release question asked in passing,
    and a fix that found a fix, answer otherwise: rows of their own."""
    root = tmp_path / "results"
    versions = ["1.19.0", "1.19.2", "1.20.0", "1.20.1", "1.21.0", "1.22.0", "1.23.0"]
    bad = {"1.20.0", "1.20.1", "1.21.0"}
    recs = [_rec(v, 7 if v in bad else 0, f"2025-01-02T03:0{i}:00Z", "x86_64") for i, v in enumerate(versions)]
    run = make_run(root, "fused-x86_64-1", "gemma-tiny-fused", _key("f" * 64, "x86_64"), recs)

    def asked(key, mode, first, last, status="found", **said):
        span = [v for v in versions if versions.index(first) <= versions.index(v) <= versions.index(last)]
        _question_doc(run, key, "nan-or-inf", None, {v: "bad" if v in bad else "good" for v in span}, mode=mode,
                      status=status, question={"predicate": "nan-or-inf", "reference": None, "mode": mode,
                                               "range": [first, last]}, **said)

    asked("a", "regression", "1.19.0", "1.20.1", last_good="1.19.2", first_bad="1.20.0")
    asked("b", "regression", "1.19.2", "1.21.0", last_good="1.19.2", first_bad="1.20.0")
    asked("c", "sweep", "1.19.2", "1.21.0", last_good="1.19.2", first_bad="1.20.0")
    asked("d", "fix", "1.19.2", "1.21.0", status="wrong_direction")
    asked("e", "fix", "1.20.1", "1.23.0", last_bad="1.21.0", first_good="1.22.0")
    asked("f", "regression", "1.20.0", "1.20.0", status="nothing_to_bisect")
    site = tmp_path / "site"
    text = dashboard.build(root, site).read_text()
    grid = json.loads((site / "dashboard.json").read_text())
    assert sorted(grid) == ["fused-x86_64-1/nan-or-inf/fix-1.20.1..1.23.0",
                            "fused-x86_64-1/nan-or-inf/regression-1.19.0..1.21.0",
                            "fused-x86_64-1/nan-or-inf/regression-1.20.0..1.20.0"]
    one = grid["fused-x86_64-1/nan-or-inf/regression-1.19.0..1.21.0"]
    assert (one["last_good"], one["first_bad"]) == ("1.19.2", "1.20.0")
    assert sorted(one["verdicts"]) == versions[:5]  # both ranges' releases
    fix = grid["fused-x86_64-1/nan-or-inf/fix-1.20.1..1.23.0"]
    assert (fix["last_bad"], fix["first_good"]) == ("1.21.0", "1.22.0")
    labels = [html.unescape(re.sub(r"<[^>]+>", " ", label)).strip() for label in
              re.findall(r'<tr class="row" data-run="[^"]+".*?<th class="target" scope="row">(.*?)</th>', text, re.S)]
    assert len(labels) == len(set(labels)) == 3, labels


MIXED_RELEASES = ("1.19.2", "1.20.1")  # residual_norm: finite on 1.19.2, NaN from 1.20.0


@pytest.fixture(scope="module")
def mixed_site(cache_dir, tmp_path_factory) -> tuple[Path, Path]:
    """One results directory as a user fills it: run (twice, over another range, as a fix), sweep, repeat, options,
    compare (one release, and a range) and reduce, on residual_norm, gemma-tiny-fused and silero-vad 6.2.3 (a
    real PyPI model), then the dashboard over it. Returns (results, site)."""
    from conftest import cli

    d = tmp_path_factory.mktemp("mixed")
    results = d / "results"
    bisect = cli(cache_dir, results)
    rn = builders.save(builders.residual_norm_model(), d / "rn.onnx")
    import numpy as np

    np.savez(d / "rn.npz", **builders.residual_norm_inputs())
    rng = np.random.default_rng(0)
    np.savez(d / "silero.npz", input=(rng.standard_normal((4, 512)) * 0.1).astype(np.float32),
             state=np.zeros((2, 4, 128), np.float32), sr=np.array(16000, np.int64))
    silero = builders.real_package(cache_dir, "silero-vad") / "silero_vad/data/silero_vad.onnx"
    where = ("--results-dir", str(results), "--cache-dir", str(cache_dir))
    on_rn = ("--model", str(rn), "--inputs", str(d / "rn.npz"))
    on_silero = ("--model", str(silero), "--inputs", str(d / "silero.npz"))
    steps = [
        ("run", *on_rn, "--from", "1.19.2", "--to", "1.20.1"),
        ("run", *on_rn, "--from", "1.19.2", "--to", "1.20.1"),  # the same question again
        ("run", *on_rn, "--from", "1.19.2", "--to", "1.20.1", "--mode", "fix"),  # wrong direction: exit 3
        ("run", *on_rn, "--from", "1.19.0", "--to", "1.20.0"),  # another range, the same boundary
        ("sweep", *on_rn, "--from", "1.19.2", "--to", "1.20.1"),
        ("repeat", *on_rn, "--version", "1.20.1", "-n", "3", *where),
        ("options", *on_rn, "--version", "1.20.1", "--levels", "disable,all", "--modes", "sequential",
         "--threads", "1", *where),
        ("compare", *on_rn, "--version", "1.23.0", "onnxruntime:cpu", "onnxruntime-openvino:openvino", *where),
        ("run", "--model", "gemma-tiny-fused", "--from", "1.19.2", "--to", "1.20.1"),
        ("run", *on_silero, "--from", "1.20.1", "--to", "1.21.0", "--bad-if", "abs-diff>0",
         "--reference-release", "1.20.1"),
        ("repeat", *on_silero, "--version", "1.21.0", "-n", "2", *where),
        ("compare", *on_silero, "--from", "1.23.0", "--to", "1.24.1", "onnxruntime:cpu",
         "onnxruntime-openvino:openvino", *where),
    ]
    for args in steps:
        r = bisect(*args)
        assert r.returncode in (0, 3), (args, r.stderr[-2000:])
    rn_run = next(p.name for p in results.iterdir() if p.name.startswith("rn-x86_64-"))
    r = bisect("reduce", rn_run, *where)
    assert r.returncode in (0, 4), r.stderr[-2000:]
    r = bisect("dashboard", str(results), "-o", str(d / "site"))
    assert r.returncode == 0, r.stderr
    return results, d / "site"


@pytest.mark.release
def test_a_results_directory_of_every_command_draws_one_row_per_question(mixed_site):
    """Real runs of run, sweep, compare, repeat, options and reduce in one directory: a row per question that
    found its boundary (the repeats and options are listed apart with their answers, the compares' pairs with
    their files), never a row of grey dots that says 'no boundary'."""
    results, site = mixed_site
    grid = json.loads((site / "dashboard.json").read_text())
    rows = sorted(((g["model"], g["first_bad"], g["last_good"]) for g in grid.values()), key=str)
    assert rows == [("gemma-tiny-fused", "1.20.0", "1.19.2"), ("rn", "1.20.0", "1.19.2"),
                    ("silero_vad", "1.21.0", "1.20.1")], sorted(grid)
    rn = next(g for g in grid.values() if g["model"] == "rn")
    assert {"1.19.0", "1.19.2", "1.20.0", "1.20.1"} <= set(rn["verdicts"])  # both ranges' releases, one row
    text = (site / "index.html").read_text()
    assert len(re.findall(r'<tr class="row"', text)) == 3 and "no boundary" not in text
    listed = {run: (kind, html.unescape(re.sub(r"<[^>]+>", " ", body))) for run, kind, body in
              re.findall(r'<tr class="probed" data-run="([^"]+)" data-kind="([^"]+)">(.*?)</tr>', text, re.S)}
    kinds = sorted(kind for kind, _ in listed.values())
    assert kinds == ["compare", "compare", "options", "repeat", "repeat"], listed
    said = {(run.split("-")[0], kind): body for run, (kind, body) in listed.items()}
    assert "same bits in 3 of 3 runs" in said[("rn", "repeat")]
    assert "same bits in 2 of 2 runs" in said[("silero_vad", "repeat")]
    assert "2 of 2 combinations bad; bad if nan-or-inf" in said[("rn", "options")]
    assert "probed for bisect compare: 1.23.0" in said[("rn", "compare")]
    for href in re.findall(r'href="(data/[^"]+)"', text):
        assert (site / urllib.request.url2pathname(href)).is_file(), href
    assert 'id="divergence"' in text  # the compare over a range, drawn as ever


@pytest.mark.release
def test_in_chromium_the_mixed_results_page_breaks_no_command_inside_a_word(browser, mixed_site):
    _, site = mixed_site
    for width, height in V3_SCREENS:
        browser.viewport(width, height)
        check_page(browser, site / "index.html")
        # nothing (a compare's message quoting a long C++ error) widens the page: a phone would zoom out
        assert browser.eval("[window.innerWidth, window.innerHeight]") == [width, height]
        n, broken = browser.eval(BROKEN_COMMANDS_JS)
        assert n >= 3 and broken == [], (width, broken[:5])
        n, overlaps = browser.eval(OVERLAPS_JS)
        assert overlaps == [], overlaps[:10]
