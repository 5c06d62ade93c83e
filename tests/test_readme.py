"""The README and the guide against the commands: their figures and examples are what the commands print and take (every option
is in docs/cli.md, every example command parses: tests/test_docs.py)."""

from __future__ import annotations

import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
GUIDE = ROOT / "docs" / "guide"


def test_the_guide_points_to_the_json_schemas():
    text = (GUIDE / "own-model.md").read_text()
    for schema in (ROOT / "docs" / "schema").glob("*.json"):
        assert f"docs/schema/{schema.name}" in text, schema.name


def _block_after(marker: str, text: str = README) -> list[str]:
    """The lines of the first code block after `marker` in `text` (default: the README)."""
    rest = text[text.index(marker):]
    return rest.split("```\n", 2)[1].splitlines()


def test_the_slowdown_example_makes_its_model_and_a_batch_of_the_model_s_real_input(tmp_path):
    """The slowdown page's two `python -c` lines, run as written: the onnx package's model, and image.npz holding exactly
    the inputs the model needs fed (data_0: the rest of what it lists as inputs are initializers)."""
    import onnx

    page = (GUIDE / "slowdowns.md").read_text()
    lines = [x for x in _block_after("# Slowdowns and memory growth", page) if x.startswith("uv run python -c ")]
    assert len(lines) == 2, lines
    for line in lines:
        argv = shlex.split(line)[3:]  # after `uv run python`
        proc = subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    model = onnx.load(str(tmp_path / "light_inception_v1.onnx"))
    fed = {i.name for i in model.graph.input} - {t.name for t in model.graph.initializer}
    with np.load(tmp_path / "image.npz") as batch:
        assert set(batch.files) == fed == {"data_0"}
        assert batch["data_0"].shape == (1, 3, 224, 224) and batch["data_0"].dtype == np.float32


@pytest.mark.release
@pytest.mark.skipif(platform.machine() != "x86_64", reason="the README's figures are of an x86_64 run")
def test_the_first_command_s_lines_run_id_and_the_trace_figures_are_what_they_print(bisect):
    """The README's sample of `bisect run --model gemma-tiny-fused --from 1.19.0 --to 1.30.0` (each probe's line up
    to its times; the run id that reduce, blame, report and drift name), and the lines of `trace` it quotes."""
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.0", "--to", "1.30.0")
    assert r.returncode == 0, r.stderr
    shown = _block_after("in fp16 from 1.20.0, where a residual stream")
    probes = [x.split(" (")[0] for x in shown if x.startswith("probe ")]
    assert probes == [x.split(" (")[0] for x in r.stderr.splitlines() if x.startswith("probe ")], r.stderr
    (run_id,) = re.findall(r"^results: results/(\S+)$", "\n".join(shown), re.M)
    assert r.stdout.rstrip().endswith(f"results: {bisect.results_dir / run_id}"), r.stdout
    for used in ("bisect reduce", "bisect blame", "bisect report", "bisect drift"):
        assert f"{used} {run_id}" in README, used

    t = bisect("trace", "--model", "gemma-tiny-fused", "--version", "1.20.0", "--cache-dir", str(bisect.cache_dir),
               "--results-dir", str(bisect.results_dir))
    assert t.returncode in (0, 3), t.stderr
    quoted = [x for x in _block_after("and separately the first one seen only by the observer",
                                      (GUIDE / "explain-reduce-blame.md").read_text()) if x]
    assert any("fp16 tensors past 50 %" in x for x in quoted)
    printed = t.stdout.splitlines()
    assert [x for x in quoted if x not in printed] == [], t.stdout


def test_ci_runs_the_readme_s_test_command():
    """`.ci/run` runs the README's test command as written, so what CI passes is what a newcomer runs."""
    block = README.split("## Two commands", 1)[1].split("```", 2)[1]
    (tests,) = [ln.split("#", 1)[0].strip() for ln in block.splitlines() if ln.rstrip().endswith("# the tests")
                or "# the tests " in ln]
    ci = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert tests in ci, (tests, [ln for ln in ci if "pytest" in ln])


def test_the_readme_stays_a_two_minute_read_and_links_every_page_of_the_guide():
    """The manual is the guide's; the README keeps the two commands, a short tour and a link to each page."""
    assert len(README) < 12_000, len(README)
    pages = sorted(p.name for p in GUIDE.glob("*.md") if p.name != "README.md")
    assert len(pages) >= 8 and [p for p in pages if f"(docs/guide/{p})" not in README] == []
