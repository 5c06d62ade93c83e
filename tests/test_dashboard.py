"""The nightly dashboard (`bisect dashboard`): a static page checked in headless Chromium."""

from __future__ import annotations

import base64
import json
import os
import platform
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import builders
import pytest
from test_matrix import ROOT, ob, run_matrix, tiny, write_matrix  # noqa: F401  (tiny is a fixture)

from harness.report import dashboard
from harness.results.store import RunStore

SCREENSHOT = ROOT / "results" / "dashboard.png"
EVIL = "<script>window.__pwned = 1</script>"


# -- a headless Chromium over the DevTools protocol (stdlib only) -------------------------

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-default-apps",
                  "--disable-extensions", "--mute-audio", "--hide-scrollbars"]


class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol (text frames, client masking)."""

    def __init__(self, url: str, timeout: float = 30):
        assert url.startswith("ws://")
        hostport, _, path = url[5:].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("websocket handshake failed")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(head.decode(errors="replace"))

    def send(self, text: str) -> None:
        data = text.encode()
        n = len(data)
        header = bytes([0x81])
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("websocket closed")
            buf += chunk
        return buf

    def recv(self) -> str:
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._exact(8))[0]
            payload = self._exact(n)
            op = b0 & 0x0F
            if op == 8:
                raise ConnectionError("websocket closed by the browser")
            if op in (9, 10):
                continue
            message += payload
            if b0 & 0x80:
                return message.decode()

    def close(self):
        self.sock.close()


class Browser:
    """Headless chromium driven over the DevTools protocol: load a page, collect console and network events."""

    def __init__(self, exe: str, workdir: Path):
        self.profile = Path(tempfile.mkdtemp(prefix="profile-", dir=workdir))
        self.proc = subprocess.Popen([exe, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}",
                                      "--remote-debugging-port=0", "--window-size=1400,1000", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.time() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"chromium did not start: {self.proc.stderr.read().decode(errors='replace')[-2000:]}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        deadline = time.time() + 15
        while True:
            targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
            pages = [t for t in targets if t.get("type") == "page"]
            if pages or time.time() > deadline:
                break
            time.sleep(0.1)
        self.ws = WebSocket(pages[0]["webSocketDebuggerUrl"])
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.time() + timeout
        for ev in self.events:
            if ev["method"] == method:
                return ev
        while time.time() < deadline:
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
                if msg["method"] == method:
                    return msg
        raise TimeoutError(method)

    def open(self, url: str) -> None:
        self.events = []  # this load's events only (a second open must not see the first one's load event)
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable")
        self.call("Page.navigate", url=url)
        self.wait_for("Page.loadEventFired")
        self.call("Runtime.evaluate", expression="new Promise(r => setTimeout(r, 300))", awaitPromise=True)

    def eval(self, expression: str):
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in res:
            raise RuntimeError(res["exceptionDetails"])
        return res["result"].get("value")

    def viewport(self, width: int, height: int) -> None:
        """Lay the page out as a window `width` CSS pixels wide (a phone's when narrow: its viewport meta applies)."""
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=width < 600)

    def screenshot(self, path: Path) -> Path:
        width, height = self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        clip = {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}  # the whole page, not one screen
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def console_errors(self) -> list[str]:
        out = []
        for ev in self.events:
            p = ev.get("params", {})
            if ev["method"] == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails", {}))[:300])
            elif ev["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args", []))[:300])
            elif ev["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", "")[:300])
        return out

    def requests(self) -> list[str]:
        return [ev["params"]["request"]["url"] for ev in self.events if ev["method"] == "Network.requestWillBeSent"]

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            shutil.rmtree(self.profile, ignore_errors=True)


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
    b = Browser(exe, tmp_path)
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
