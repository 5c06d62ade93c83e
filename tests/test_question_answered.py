"""Which question a reader of a run answers, and what a question never compared shows (real releases, the CLI as
a user runs it).

* A later question that found no boundary (a one-release range tried in passing) never takes the place of the
  one that found it: `report` answers the newest question with a boundary, says which, lists the others, and
  the report files of another question asked with --question go in a folder of their own.
* The dashboard shows each question as its own row, the boundary its grid shows.
* A release a question never compared (probed by another question, never against fp32) has no verdict in the
  report, in `drift` and on the page: never *error*, never *good*.
"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.release


def _run(bisect, results, model, batch, first, last, *more):
    got = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", first, "--to", last, "--json", *more,
                 results=results)
    assert got.returncode in (0, 3), got.stderr
    return got.json()


def _report(bisect, run_dir, *more):
    got = bisect("report", str(run_dir), "--cache-dir", str(bisect.cache_dir), "--offline", "--no-probe", *more)
    assert got.returncode == 0, got.stderr
    return got


def test_a_later_question_without_a_boundary_never_replaces_the_answered_one(bisect, tmp_path, residual_norm):
    model, batch = residual_norm
    results = tmp_path / "results"
    found = _run(bisect, results, model, batch, "1.19.2", "1.20.0")
    assert (found["last_good"], found["first_bad"]) == ("1.19.2", "1.20.0")
    run_dir = results / found["run_id"]
    throwaway = _run(bisect, results, model, batch, "1.20.0", "1.20.0")
    assert throwaway["first_bad"] is None and throwaway["cell"]["key"] != found["cell"]["key"]

    answered = _report(bisect, run_dir)
    assert "No good-to-bad boundary" not in answered.stdout and "**1.20.0**" in answered.stdout
    assert f"answering question {found['cell']['key']}" in answered.stderr
    md = (run_dir / "report.md").read_text()
    assert f"This report answers question `{found['cell']['key']}`" in md
    assert "### Other questions of this run" in md and f"`{throwaway['cell']['key']}`" in md
    script = (run_dir / "repro.py").read_text()

    # asking the throwaway question answers it, and leaves the run's report and repro as they were
    other = _report(bisect, run_dir, "--question", throwaway["cell"]["key"])
    assert "No good-to-bad boundary" in other.stdout
    own = run_dir / "questions" / throwaway["cell"]["key"]
    assert (own / "report.md").is_file() and (own / "repro.py").is_file()
    assert (run_dir / "report.md").read_text() == md and (run_dir / "repro.py").read_text() == script

    # the dashboard: each question its own row, each row's boundary the one its grid shows
    site = tmp_path / "site"
    got = bisect("dashboard", str(results), "-o", str(site))
    assert got.returncode == 0, got.stderr
    grid = json.loads((site / "dashboard.json").read_text())
    rows = {k: g for k, g in grid.items() if k.startswith(found["run_id"] + "/nan-or-inf")}
    assert len(rows) == 2, sorted(grid)
    wide = next(g for k, g in rows.items() if k.endswith("1.19.2-1.20.0") or k.endswith("1.19.2..1.20.0"))
    narrow = next(g for k, g in rows.items() if g is not wide)
    assert (wide["last_good"], wide["first_bad"]) == ("1.19.2", "1.20.0")
    assert wide["verdicts"] == {"1.19.2": "good", "1.20.0": "bad"} and wide["report"]
    assert narrow["first_bad"] is None and narrow["verdicts"] == {"1.20.0": "bad"} and not narrow["report"]
    page = (site / "index.html").read_text()
    assert "Last good: 1.19.2, first bad: 1.20.0" in page
    assert "regression 1.20.0..1.20.0: Only one release in the range (1.20.0): nothing to bisect." in page


def test_a_release_the_question_never_compared_is_blank_in_the_report_drift_and_the_page(bisect, tmp_path,
                                                                                         residual_norm):
    model, batch = residual_norm
    results = tmp_path / "results"
    plain = _run(bisect, results, model, batch, "1.19.0", "1.20.0")  # probes 1.19.0 too, against nothing
    run_dir = results / plain["run_id"]
    vs = _run(bisect, results, model, batch, "1.19.2", "1.20.0", "--bad-if", "cosine<0.999", "--reference", "fp32")
    assert (vs["last_good"], vs["first_bad"]) == ("1.19.2", "1.20.0")
    key = vs["cell"]["key"]

    doc = json.loads(_report(bisect, run_dir, "--question", key, "--format", "json").stdout)
    verdicts = {p["version"]: p["verdict"] for p in doc["probes"]}
    assert verdicts == {"1.19.2": "good", "1.20.0": "bad"}  # 1.19.0 was never compared with fp32: no line

    got = bisect("drift", str(run_dir), "--question", key, "--json")
    assert got.returncode == 0, got.stderr
    drifted = {r["version"]: r["verdict"] for r in got.json()["rows"]}
    assert drifted == {"1.19.0": "", "1.19.2": "good", "1.20.0": "bad"}

    site = tmp_path / "site"
    got = bisect("dashboard", str(results), "-o", str(site))
    assert got.returncode == 0, got.stderr
    grid = json.loads((site / "dashboard.json").read_text())
    row = next(g for k, g in grid.items() if k.startswith(plain["run_id"] + "/cosine<0.999/vs-fp32"))
    assert row["verdicts"] == {"1.19.2": "good", "1.20.0": "bad"} and row["first_bad"] == "1.20.0"
