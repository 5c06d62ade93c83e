"""A wheel source's credentials are never stored or printed, and reach uv only through its environment.

The development builds of the test cache (wheelhouse.dev_builds) are served on
127.0.0.1 by a server that answers only with basic auth (authserver.py): a run
that lists and installs from it proves the secret reached httpx and uv; every
file that run, report, matrix, merge and dashboard write, every line they
print, and the command line of every process alive meanwhile are searched for it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import builders
import pytest
import wheelhouse

from harness.releases.credentials import redact
from harness.releases.packages import Package, of_key
from harness.releases.versions import Target

pytestmark = pytest.mark.release

TOKEN = "s3cret-T0KEN-7f2a"
USER = "ci-reader"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def test_redact_masks_the_secret_of_every_url_in_a_text_and_nothing_else():
    assert redact(f"http://{USER}:{TOKEN}@h/simple") == f"http://{USER}:****@h/simple"
    assert redact(f"https://{TOKEN}@h/simple") == "https://****@h/simple"  # a token alone as the user
    said = f"Client error '404 Not Found' for url 'http://{USER}:{TOKEN}@127.0.0.1:8/x/onnxruntime/'"
    assert TOKEN not in redact(said) and "'http://ci-reader:****@127.0.0.1:8/x/onnxruntime/'" in redact(said)
    for plain in ("http://127.0.0.1:8/simple", "/wheels/a@b", "http://h/p@q", "file:///w"):
        assert redact(plain) == plain
    assert redact(redact(f"http://{USER}:{TOKEN}@h")) == redact(f"http://{USER}:{TOKEN}@h")


def test_a_package_keeps_its_secret_for_uv_s_environment_only():
    url, links = f"http://{USER}:{TOKEN}@127.0.0.1:9/simple", f"http://{TOKEN}@127.0.0.1:9/links/"
    pkg = Package(index_urls=(url, "http://127.0.0.1:9/plain"), find_links=(links,))
    args, env = pkg.uv_args()
    assert TOKEN not in " ".join(args) and "--index" not in args and "--find-links" not in args
    assert env == {"UV_INDEX": f"{url} http://127.0.0.1:9/plain", "UV_FIND_LINKS": links}
    assert TOKEN not in repr(pkg.key()) + repr(pkg.provenance()) + pkg.env_name("1.20.0")
    assert pkg.key()["index_urls"][0] == "http://ci-reader:****@127.0.0.1:9/simple"
    # a saved run's key gives back the package redacted: the same run and the same environments
    assert of_key(pkg.key()) == pkg.redacted() and pkg.redacted().env_name("1.20.0") == pkg.env_name("1.20.0")
    plain = Package(index_urls=("http://127.0.0.1:9/plain",))
    assert plain.uv_args() == (["--index", "http://127.0.0.1:9/plain"], {})  # no secret: argv as before


# -- end to end, against a server that wants the secret ---------------------------------------


@pytest.fixture(scope="module")
def served(cache_dir, tmp_path_factory):
    """http://USER:TOKEN@127.0.0.1:PORT, serving simple/ (the dev builds' index) and links/ (their find-links
    directory, as a page of links); anything without the credentials is answered 401."""
    builds = wheelhouse.dev_builds(cache_dir, Target("x86_64", PYTHON))
    root = tmp_path_factory.mktemp("served")
    (root / "simple").symlink_to(builds["index"])
    (root / "links").symlink_to(builds["links"])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = root.parent / "served.log"
    # the secret goes to the server in its environment, as it does to uv: the argv watch below sees every process
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "authserver.py"), str(port), str(root)],
                            env={**os.environ, "AUTH_USER": USER, "AUTH_PASSWORD": TOKEN},
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        builders.wait_for_port(port)
        yield {"base": f"http://{USER}:{TOKEN}@127.0.0.1:{port}", "plain": f"http://127.0.0.1:{port}", "log": log}
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class ArgvWatch:
    """Reads the command line of every process on this machine, over and over, while a step runs: of those the
    harness starts (uv, workers), none may hold the secret."""

    def __init__(self):
        self.seen: list[str] = []
        self.looked = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if TOKEN in argv and " -m harness.cli " not in argv:  # the user's own command line holds what they typed
                    self.seen.append(argv)
            self.looked += 1
            time.sleep(0.01)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def ob(*args: str, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "harness.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=900, env={**os.environ, "COLUMNS": "200", **(env or {})})


def written_with_token(*roots: Path) -> list[str]:
    """'path: the line' of each file under `roots` holding the secret."""
    return [f"{p}: {next(ln for ln in p.read_bytes().splitlines() if TOKEN.encode() in ln)[:300]!r}"
            for root in roots for p in root.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the development builds are x86_64 wheels")
def test_a_run_report_matrix_merge_and_dashboard_from_a_source_with_credentials_hold_no_secret(
        served, cache_dir, residual_norm, tmp_path):
    model, batch = residual_norm
    # a cache of its own, so the environments are installed by uv from the served index this time
    cache = tmp_path / "cache"
    shutil.copytree(cache_dir / "index", cache / "index")
    results, matrix_results, site = tmp_path / "results", tmp_path / "matrix-results", tmp_path / "site"
    index, links = f"{served['base']}/simple", f"{served['base']}/links/"
    m = tmp_path / "dev.toml"
    m.write_text(f'mode = "bisect"\nreleases = {{ from = "1.20.0.dev2", to = "1.20.0.dev3" }}\n'
                 f'[[models]]\npath = "{model}"\ninputs = "{batch}"\n[[targets]]\narch = "x86_64"\n'
                 f'[[providers]]\npackage = "onnxruntime"\nfind_links = "{links}"\npre = true\n')
    common = ["--cache-dir", cache, "--pre"]
    steps = {}
    with ArgvWatch() as watch:
        steps["versions"] = ob("versions", "--index-url", index, *common, "--from", "1.20.0.dev1",
                               "--to", "1.20.0.dev4", "--json")
        steps["run"] = ob("run", "--model", model, "--inputs", batch, "--index-url", index, *common,
                          "--from", "1.20.0.dev2", "--to", "1.20.0.dev3", "--results-dir", results, "--json")
        run_id = json.loads(steps["run"].stdout or "{}").get("run_id")
        steps["report"] = ob("report", results / str(run_id), "--no-probe")
        steps["matrix"] = ob("matrix", "run", m, "--cache-dir", cache, "--results-dir", matrix_results, "--report",
                             "--json")
        steps["merge"] = ob("merge", results, matrix_results)
        steps["dashboard"] = ob("dashboard", results, "-o", site)
        # the index answers 404 and 401: one line each, the URL redacted
        steps["404"] = ob("versions", "--index-url", f"{served['base']}/nothing-here", *common,
                          "--from", "1.20.0.dev1", "--to", "1.20.0.dev4")
        steps["401"] = ob("versions", "--index-url", f"http://{USER}:{TOKEN}-wrong@{index.split('@')[1]}",
                          *common, "--from", "1.20.0.dev1", "--to", "1.20.0.dev4")
    for name in ("versions", "run", "report", "matrix", "merge", "dashboard"):
        assert steps[name].returncode == 0, (name, steps[name].stderr)
    doc = json.loads(steps["run"].stdout)
    assert (doc["last_good"], doc["first_bad"]) == ("1.20.0.dev2", "1.20.0.dev3"), doc["message"]
    assert doc["provenance"]["index_urls"] == [f"http://{USER}:****@{index.split('@')[1]}"]
    cells = json.loads(steps["matrix"].stdout)["cells"]
    assert [(c["last_good"], c["first_bad"]) for c in cells] == [("1.20.0.dev2", "1.20.0.dev3")]
    for name in ("404", "401"):
        lines = [ln for ln in steps[name].stderr.splitlines() if ln.strip()]
        assert steps[name].returncode == 2 and len(lines) == 1, (name, steps[name].stderr)
        assert f"{USER}:****@127.0.0.1" in lines[0], lines[0]
    # uv fetched the wheels through the server, so it was given the secret; nobody could read it in an argv
    served_log = served["log"].read_text()
    assert "GET /simple/onnxruntime/" in served_log and "GET /links/" in served_log
    assert "uv/" in served_log, "uv installed from the served index"
    assert watch.looked > 10 and not watch.seen, watch.seen
    printed = [name for name, r in steps.items() if TOKEN in r.stdout + r.stderr]
    assert not printed, printed
    assert (site / "dashboard.json").is_file() and (results / str(run_id) / "report.md").is_file()
    assert not written_with_token(results, matrix_results, site, cache)
