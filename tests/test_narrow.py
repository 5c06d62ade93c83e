"""Tables on a narrow terminal (COLUMNS=80, stdout piped): columns fold or give way, and no header, release,
verdict or count is cut short with "…"."""

from __future__ import annotations

import re

import pytest

WIDTH = 80
ENV = {"COLUMNS": str(WIDTH)}


def lines_fit(text: str) -> None:
    """The table's lines (rich's box) fit the width, and nothing is cut short."""
    boxed = [line for line in text.splitlines() if line[:1] in "┏┃┡│└"]
    assert boxed and all(len(line) <= WIDTH for line in boxed), text
    assert "…" not in text, text


def cells(text: str) -> list[list[str]]:
    """The cells of each row of the first table in `text` (rich's box: │ between cells)."""
    return [[c.strip() for c in line.strip().strip("│┃").split("│" if "│" in line else "┃")]
            for line in text.splitlines() if line.lstrip().startswith(("│", "┃"))]


@pytest.fixture(scope="module")
def swept(module_bisect, residual_norm):
    """A sweep over two releases whose table has the graded columns (headroom, cosine) of a sweep."""
    model, batch = residual_norm
    r = module_bisect("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0",
                      env=ENV)
    assert r.returncode == 0, r.stderr
    return r


def test_the_sweep_table_keeps_its_headers_releases_verdicts_and_counts_whole_at_80_columns(swept):
    lines_fit(swept.stdout)
    rows = cells(swept.stdout)
    header = " ".join(" ".join(row) for row in rows[:2])
    for word in ("release", "verdict", "NaN", "Inf", "rows"):
        assert re.search(rf"\b{re.escape(word)}\b", header), swept.stdout
    found = {row[0]: row[1] for row in rows if row and re.fullmatch(r"1\.\d+\.\d+", row[0])}
    assert found == {"1.19.2": "good", "1.20.0": "bad"}, swept.stdout
    for row in rows:
        if row and row[0] in found:
            assert all(re.fullmatch(r"\d+", c) for c in row[2:5]), row  # NaN, Inf rows and rows: whole numbers


def test_a_column_that_gave_way_is_named_under_the_table(swept):
    assert "not shown at 80 columns:" in swept.stdout, swept.stdout
    assert "seconds" in swept.stdout.split("not shown at 80 columns:")[1].splitlines()[0], swept.stdout


def test_the_drift_table_keeps_releases_and_verdicts_whole_at_80_columns(swept, module_bisect):
    run_dir = re.search(r"results: (\S+)", swept.stdout).group(1)
    r = module_bisect("drift", run_dir, env=ENV)
    assert r.returncode == 0, r.stderr
    lines_fit(r.stdout)
    rows = cells(r.stdout)
    assert {row[0]: row[1] for row in rows if row and row[0] in ("1.19.2", "1.20.0")} == \
        {"1.19.2": "good", "1.20.0": "bad"}, r.stdout


def test_a_word_wider_than_the_room_left_folds_inside_its_column_and_keeps_the_key_columns_whole():
    """An onnxruntime error names a node in one 57-character word; at 80 columns the release and verdict still
    show whole, and the note folds inside that word instead of squeezing them to one character."""
    import io

    from rich.console import Console

    from harness.report.terminal_table import KEY, FitTable

    table = FitTable()
    for header, fit in (("release", KEY), ("verdict", KEY), ("NaN rows", KEY), ("note", None)):
        table.add_column(header, fit=fit)
    word = "(jax2tf_get_logits_/pjit_get_logits_/pjit__one_hot_/Cast_1:0)"
    table.add_row("1.19.0", "error", "0", f"Fail: Type Error: output arg {word} of node {word} {word}")
    buf = io.StringIO()
    Console(file=buf, width=80, force_terminal=False).print(table)
    text = buf.getvalue()
    assert all(len(line) <= 80 for line in text.splitlines()), text
    assert "1.19.0" in text and "error" in text and "release" in text and "verdict" in text, text
    assert "…" not in text, text
