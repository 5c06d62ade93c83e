"""`bisect report` on evidence from elsewhere: a results directory is data, never code, markup or a way to a file.

Each test makes a real run directory as `bisect run` opens it (tests/inproc.py, nothing installed), records
probes as the driver writes them, tampers with what another machine could have written (manifest.json,
probes.jsonl, reduce.json), makes the report and its repro script, and looks at what came out: the script is
executed in a fresh directory, parsed, and its embedded files decoded; the Markdown is parsed.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import builders
import inproc
import numpy as np
import pytest
from replay import outputs as output_stats

from harness.report import escape, terminal, upstream
from harness.results.store import REDUCED, REPRO, RunStore

# Each breaks out of one way of pasting a value into Python source: a docstring, a string literal of either
# quote, a bad escape (a SyntaxError if pasted raw), and a code fence and a heading of the Markdown around it.
ESCAPES = 'tiny"""\nimport os; os.system("touch pwned")\n"""'
PAYLOAD = (ESCAPES + "'''\nimport os; os.system('touch pwned')\n'''" + '"\nimport os; os.system("touch pwned")#'
           + "\\N{\n````\n## Injected heading\n\x1b[2J")


def _run(root: Path, listing: Path) -> Path:
    """A run of the residual-norm model (small enough to embed) with 1.19.2 good and 1.20.0 bad recorded."""
    d = root / "made"
    d.mkdir(parents=True)
    builders.save(builders.residual_norm_model(), d / "model.onnx")
    np.savez(d / "batch.npz", **builders.residual_norm_inputs())
    cache = root / "cache"
    shutil.copytree(listing, cache / "index")
    plan = inproc.open_run(d / "model.onnx", d / "batch.npz", cache, root / "results")
    for version, nan in (("1.19.2", 0), ("1.20.0", 2)):
        plan.store.append({
            "version": version, "package": "onnxruntime", "provenance": plan.runner.provenance(), "status": "ran",
            "reason": "ran", "finished": f"2026-01-01T00:00:0{nan}Z", "seconds": 0.1, "repeats": 1,
            "result": {"stage": "done", "outputs": [output_stats(4, nan)], "platform": "Linux-6.1-x86_64",
                       "python": "3.11.7", "numpy": "2.1.0", "cpu": {"model": "Example CPU @ 2.0GHz", "flags": ["avx2"]},
                       "onnxruntime": {"version": version, "build_info": f"git-commit-id=abc{nan}, build type=Release"}}})
    return plan.store.dir


@pytest.fixture
def run_dir(tmp_path, listing) -> Path:
    return _run(tmp_path / "run", listing)


def _edit_manifest(run_dir: Path, edit) -> None:
    path = run_dir / "manifest.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


def _edit_question(run_dir: Path, predicate: str, reference: dict) -> None:
    """Every run document of the run asks `predicate` against `reference` (what a tampered artifact could say)."""
    cells = run_dir / "cells"
    if not list(cells.glob("*.json")):  # records only: the run document a search would have kept beside them
        cells.mkdir(exist_ok=True)
        (cells / "asked.json").write_text(json.dumps({
            "run_id": run_dir.name, "status": "found", "mode": "regression", "releases": ["1.19.2", "1.20.0"],
            "probes": [], "cell": {"key": "asked"}, "generated": "2026-01-01T00:00:09Z"}))
    for path in cells.glob("*.json"):
        doc = json.loads(path.read_text())
        doc["question"] = {**(doc.get("question") or {}), "predicate": predicate, "reference": reference}
        doc.update(predicate=predicate, reference=reference)
        path.write_text(json.dumps(doc))


def _edit_records(run_dir: Path, edit) -> None:
    path = run_dir / "probes.jsonl"
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    for rec in recs:
        edit(rec)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def _report(run_dir: Path) -> tuple[dict, str, str]:
    """(the report document, its Markdown as report.md keeps it, the repro script as written)."""
    doc = upstream.build(run_dir, cache_dir=run_dir.parent.parent / "cache", offline=True, probe=False)
    md = upstream.save(run_dir, doc).read_text()
    return doc, md, (run_dir / REPRO).read_text()


def _execute(script: str, where: Path) -> subprocess.CompletedProcess:
    """The repro script run as a reader would run it, in a directory of its own (no onnxruntime needed to show
    what runs before its imports: the project's Python has none, a release's environment is a release test)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / REPRO).write_text(script)
    return subprocess.run([sys.executable, REPRO], cwd=where, capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})


def _constants(script: str) -> dict:
    """The script's module body: a docstring, imports, constants that are literals, functions, the main guard;
    its constants (each value read by ast.literal_eval, so none of them is code)."""
    tree = ast.parse(script)
    consts = {"__doc__": ast.get_docstring(tree, clean=False)}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            (target,) = node.targets
            consts[target.id] = ast.literal_eval(node.value)
        else:
            assert isinstance(node, (ast.Import, ast.FunctionDef, ast.If)) or (
                node is tree.body[0] and isinstance(node, ast.Expr)), ast.dump(node)[:200]
    return consts


def _decoded(consts: dict) -> dict[str, bytes]:
    return {k: base64.b64decode("".join(v.split())) for k, v in consts.items() if k.endswith("_B64") and v}


# -- 1. a value of the evidence reaches the repro script as data -------------------------------------------


TAMPERINGS = {
    "manifest model name": lambda run: _edit_manifest(run, lambda m: m["model"].update(name=PAYLOAD)),
    "record CPU model": lambda run: _edit_records(run, lambda r: r["result"]["cpu"].update(model=PAYLOAD)),
    "key package name": lambda run: _edit_manifest(run, lambda m: m["key"].update(package=PAYLOAD)),
    "key output names": lambda run: _edit_manifest(run, lambda m: m["key"].update(outputs=[PAYLOAD, "y"])),
    "key session options": lambda run: _edit_manifest(
        run, lambda m: m["key"].update(session_options={PAYLOAD: PAYLOAD, "intra_op_num_threads": PAYLOAD})),
    "key provider options": lambda run: _edit_manifest(
        run, lambda m: m["key"].update(ep="cpu", ep_options={PAYLOAD: PAYLOAD})),
    "model file name": lambda run: _edit_manifest(
        run, lambda m: m["model"].update(path=str(Path(m["model"]["path"]).with_name(PAYLOAD.replace("/", "_"))))),
}


@pytest.mark.parametrize("where", sorted(TAMPERINGS))
def test_a_hostile_string_in_the_evidence_is_data_in_the_repro_script(run_dir, tmp_path, where):
    TAMPERINGS[where](run_dir)
    doc, md, script = _report(run_dir)
    ran = _execute(script, tmp_path / "elsewhere")
    assert not (tmp_path / "elsewhere" / "pwned").exists(), ran.stderr
    assert "SyntaxError" not in ran.stderr, ran.stderr
    consts = _constants(script)  # it parses, and every constant is a literal
    shown = json.dumps(consts) + consts["__doc__"]
    assert "touch pwned" in shown  # the value is there, as data (a test that dropped it would prove nothing)
    assert "\x1b" not in script and "\n## Injected" not in consts["__doc__"]
    if where == "key output names":
        assert consts["FULL_OUTPUTS"] == [PAYLOAD, "y"]
    if where == "key session options":
        assert consts["SESSION_OPTIONS"] == {PAYLOAD: PAYLOAD, "intra_op_num_threads": PAYLOAD}
    if where == "key provider options":
        assert consts["PROVIDERS"] == [["CPUExecutionProvider", {PAYLOAD: PAYLOAD}]]
    # the script inside report.md is the script, whole: no value closed its fence
    assert _fences(md)["python"] == script.rstrip() + "\n"


def test_a_clean_run_embeds_its_model_and_batch(run_dir, tmp_path):
    """What the tampered runs below must not do is what a clean run does: the model and batch are embedded."""
    _, md, script = _report(run_dir)
    files = _decoded(_constants(script))
    assert files["FULL_MODEL_B64"] == (tmp_path / "run" / "made" / "model.onnx").read_bytes()
    with np.load(io.BytesIO(files["FULL_INPUTS_NPZ_B64"])) as batch:
        assert np.array_equal(batch["x"], builders.residual_norm_inputs()["x"], equal_nan=True)
    assert "Note:" not in md and "not embedded" not in script


# -- 2. only the run's own files are embedded ---------------------------------------------------------------


SECRET = b"-----BEGIN OPENSSH PRIVATE KEY----- not the run's model -----END OPENSSH PRIVATE KEY-----\n"


def _assert_not_embedded(script: str, md: str, secret: bytes) -> None:
    files = _decoded(_constants(script))
    assert all(secret not in data for data in files.values())
    assert base64.b64encode(secret).decode()[:40] not in script + md


def test_a_manifest_naming_another_file_as_the_model_does_not_embed_it(run_dir, tmp_path):
    secret = tmp_path / "home" / "id_ed25519"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    _edit_manifest(run_dir, lambda m: m["model"].update(path=str(secret)))
    doc, md, script = _report(run_dir)
    _assert_not_embedded(script, md, SECRET)
    consts = _constants(script)
    assert consts["FULL_MODEL_B64"] is None and consts["FULL_MODEL_SHA256"] is None
    assert not doc["repro"]["model_embedded"]
    line = "the file at the run's model path (id_ed25519) is not the run's model"
    assert line in consts["__doc__"] and f"Note: {escape.md_text(line)}" in md
    assert consts["FULL_INPUTS_NPZ_B64"]  # the batch is still the run's, and embedded


def test_a_manifest_naming_another_npz_as_the_batch_does_not_embed_it(run_dir, tmp_path):
    secret = tmp_path / "home" / "other.npz"
    secret.parent.mkdir()
    np.savez(secret, secret=np.frombuffer(SECRET, np.uint8))
    _edit_manifest(run_dir, lambda m: m["batch"].update(path=str(secret)))
    doc, md, script = _report(run_dir)
    consts = _constants(script)
    assert consts["FULL_INPUTS_NPZ_B64"] is None
    files = _decoded(consts)
    assert all(SECRET not in data for data in files.values())
    for data in files.values():  # nor the array compressed inside an .npz
        if data[:2] == b"PK":
            with np.load(io.BytesIO(data)) as z:
                assert "secret" not in z.files
    assert "the file at the run's batch path (other.npz) is not the run's batch" in consts["__doc__"]
    assert consts["FULL_MODEL_B64"]  # the model is still the run's, and embedded


def test_a_manifest_naming_another_npz_as_the_reference_does_not_embed_it(run_dir, tmp_path):
    from harness.models.inputs import arrays_digest

    secret = tmp_path / "home" / "other.npz"
    secret.parent.mkdir()
    arrays = {"y": np.frombuffer(SECRET, np.uint8)}
    np.savez(secret, **arrays)
    _edit_question(run_dir, "cosine<0.999", {"kind": "file", "id": f"file:{arrays_digest(arrays)[:16]}", "label": "x",
                                             "path": str(secret)})
    doc, md, script = _report(run_dir)
    consts = _constants(script)
    assert consts["FULL_REFERENCE_NPZ_B64"] is None and not doc["repro"]["reference"]
    assert all(SECRET not in data for data in _decoded(consts).values())
    assert "the reference's values are not on the machine that made this report" in consts["__doc__"]


@pytest.mark.parametrize("how", ["path out of the run", "link"])
def test_a_reduction_naming_a_file_outside_the_run_does_not_embed_it(run_dir, tmp_path, how):
    secret = tmp_path / "home" / "id_ed25519"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    reduced = run_dir / REDUCED
    reduced.mkdir()
    np.savez(reduced / "inputs.npz", **builders.residual_norm_inputs())
    if how == "link":
        (reduced / "model.onnx").symlink_to(secret)
        name = "model.onnx"
    else:
        name = os.path.relpath(secret, reduced)
    RunStore(reduced).save_document("reduce", {
        "kind": "reduce", "pair": ["1.19.2", "1.20.0"], "rows": {"before": 4, "after": 1, "kept": [1]},
        "positions": {"before": None, "after": None}, "nodes": {"before": 3, "after": 1, "kept": ["n"]},
        "model": {"file": name, "bytes": len(SECRET), "inputs": ["x"], "outputs": ["y"]},
        "inputs": {"file": "inputs.npz", "bytes": 1}, "verified": {"verdicts": {}, "flips": True}})
    doc, md, script = _report(run_dir)
    _assert_not_embedded(script, md, SECRET)
    assert _constants(script)["REDUCED_MODEL_B64"] is None and doc["repro"]["reduced"] is None


def test_the_repro_writes_the_model_s_data_files_only_under_its_own_folder(tmp_path):
    """The attachment carries a model with its external data; repro.py writes them into repro-model/ beside
    itself under names the evidence gave: a name that climbs out, or is absolute, stops the script (exit 2)
    before anything is written."""
    from harness.report import repro

    text = repro.script(title="t", predicate="nan-or-inf", bad_means="b", session_options={}, where="w",
                        reduced=None, full={"model": b"m", "file": "model.onnx", "outputs": [],
                                            "data_files": [["../../evil", "0" * 64, 1]], "notes": []})
    tree = ast.parse(text)
    inside = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "inside")

    class Stopped(Exception):
        pass

    def no_verdict(why):
        raise Stopped(why)

    namespace = {"os": os, "no_verdict": no_verdict}
    exec(compile(ast.Module([inside], []), "repro.py", "exec"), namespace)  # the project's own text
    where = str(tmp_path / "repro-model")
    assert namespace["inside"](where, "weights/model.onnx_data") == os.path.join(where, "weights", "model.onnx_data")
    for hostile in ("../../evil", "/etc/passwd", "a/../../b", ".."):
        with pytest.raises(Stopped):
            namespace["inside"](where, hostile)
    assert _constants(text)["FULL_MODEL_DATA"] == [["../../evil", "0" * 64, 1]]  # data, never code


# -- 3. Markdown and terminal escapes in names make no markup ---------------------------------------------


def _tokens(md: str):
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(md)


def _fences(md: str) -> dict[str, str]:
    return {t.info or f"block {i}": t.content for i, t in enumerate(_tokens(md)) if t.type == "fence"}


def _inline(md: str) -> list:
    return [child for t in _tokens(md) if t.type == "inline" for child in t.children or []]


MARKDOWN = ("evil](http://evil.example) [click](http://evil.example) <img src=x onerror=alert(1)> **b** _i_ ~~s~~ "
            "&amp; | cell ``")


def _structure(md: str) -> tuple[list, list]:
    """The report's blocks and inline markup, without the text: what a value of the evidence must not change."""
    tokens = _tokens(md)
    return ([(t.type, t.tag, t.info) for t in tokens if t.type != "inline"],
            [(c.type, c.content if c.type == "html_inline" else "") for c in _inline(md) if c.type != "text"])


def test_markdown_and_line_breaks_in_names_make_no_heading_link_html_or_cell(tmp_path, listing):
    clean, _, _ = _report(_run(tmp_path / "clean", listing))
    run_dir = _run(tmp_path / "tampered", listing)
    _edit_manifest(run_dir, lambda m: m["model"].update(name="## " + MARKDOWN + "\n# Heading\n```"))
    _edit_records(run_dir, lambda r: (r.update(reason=MARKDOWN), r["result"]["cpu"].update(model=MARKDOWN + "\n| x |"),
                                      r["result"].update(platform="1. " + MARKDOWN, python="- " + MARKDOWN)))
    doc, md, script = _report(run_dir)
    # the same headings, paragraphs, table cells, fences and inline markup as the clean run's report: no value of
    # the evidence made a heading, a link, an image, HTML, emphasis, a cell or a row, nor closed a fence
    assert _structure(md) == _structure(upstream.markdown(clean))
    assert not [c for c in _inline(md) if c.type in ("link_open", "image")]
    text = "".join(c.content for c in _inline(md) if c.type == "text")
    assert MARKDOWN.replace("`", "") in text  # shown as written
    assert _fences(md)["python"] == script.rstrip() + "\n"
    assert "\x1b" not in md


ANSI = "\x1b]8;;http://evil.example\x07click\x1b]8;;\x07 \x1b[2J\x1b[H [link=http://evil.example]x[/link] [bold]b"


def _render(renderable) -> str:
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, force_terminal=True, color_system="truecolor", width=400).print(renderable)
    return buf.getvalue()


def _assert_inert(shown: str) -> None:
    # rich writes SGR colours of its own (ESC [ ... m) and nothing else: any other escape (a link, OSC 8; a screen
    # clear; a bell) or control character is the input's
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    assert not [c for c in text if not c.isprintable() and c != "\n"], repr(text)
    assert "\\x1b]8;;http://evil.example\\x07click" in text  # made printable, shown
    assert "[link=http://evil.example]x[/link]" in text  # markup of the evidence is text


def test_the_terminal_shows_control_characters_and_markup_of_records_as_text(run_dir):
    _edit_records(run_dir, lambda r: r.update(reason=ANSI, package=ANSI))
    from rich.console import Console

    recs = RunStore(run_dir).records()
    console = Console(file=io.StringIO(), force_terminal=True, width=400)
    lines = terminal.ProbeLines(console, spinner=False)
    for rec in recs:
        lines.probe_finished({**rec, "verdict": "bad", "why": rec["reason"]}, reused=True)
    _assert_inert(console.file.getvalue())
    doc = {"provenance": {**recs[0]["provenance"], "cpu": ANSI},
           "probes": [{"version": r["version"], "verdict": "bad", "why": r["reason"], "nan_rows": 2, "inf_rows": 0,
                       "rows": 4, "seconds": 0.1, "commit": ANSI, "reused": True, "decided_by": ["error"]} for r in recs]}
    _assert_inert(_render(terminal.run_table(doc)))
    pairs = {"model": ANSI, "version": "1.20.0", "provenance": {}, "pairs": [
        {"label": ANSI, "status": ANSI, "reason": ANSI, "providers": {"used": [ANSI]}},
        {"label": "b", "status": "ran", "diverges": True, "why": ANSI}]}
    _assert_inert(_render(terminal.compare_table(pairs)))
    ranged = {"model": ANSI, "from": "1.20.0", "to": ANSI, "provenance": {}, "releases": ["1.20.0"],
              "probes": {"made": 0, "reused": 2}, "seconds": 0.1,
              "reference": {"label": ANSI, "releases": [{"release": "1.20.0", "status": ANSI, "why": ANSI}]},
              "pairs": [{"label": ANSI, "releases": [{"release": "1.20.0", "diverges": True, "why": ANSI,
                                                      "cosine": 0.5, "max_abs_diff": 1.0}]}]}
    _assert_inert(_render(terminal.compare_range_table(ranged)))


# -- the shell commands the report suggests ------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["qemu", "docker"])
def test_a_hostile_cpu_or_python_in_a_record_stays_one_argument_of_the_suggested_commands(backend):
    from harness.runners import describe

    hostile = "neoverse-n1; touch pwned #"
    ran = describe({"backend": backend, "arch": "aarch64", "cpu": hostile, "python": "3.11"}, None, "1.20.0", REPRO)
    words = [w for line in ran["reproduce"].splitlines() if not line.startswith("#") for w in shlex.split(line)]
    assert "touch" not in words and (hostile in words or f"QEMU_CPU={hostile}" in words), ran["reproduce"]
    env = upstream.environment({"1.20.0": {"provenance": {"backend": backend, "arch": "aarch64", "cpu": "a72",
                                                          "python": "3.11\ntouch pwned"}, "result": {}}},
                               {"backend": backend, "arch": "aarch64"}, "1.20.0")
    assert not [line for line in env["reproduce"].splitlines() if line.lstrip().startswith("touch")], env["reproduce"]


# A file name and a package name that, pasted unquoted, run `touch` three ways (a list, a substitution, backticks)
SHELL_NAME = "m.onnx; touch PASTED-RAN $(touch PASTED-RAN2) `touch PASTED-RAN3` 'q\"&|<>*"
SHELL_PACKAGE = "onnxruntime; touch PASTED-RAN4 #"
STUBBED = ("python", "pip", "uv", "bisect", "node", "npm")


def _stub_path(scratch: Path) -> tuple[dict, Path]:
    """An environment whose PATH finds, first, stubs of the commands a report suggests (python, pip, uv, bisect,
    good/bin/pip) that only record their argv; the real coreutils after them, so an injected `touch` would run."""
    log = scratch / "argv.log"
    stub = '#!/bin/sh\n{ printf "%s\\0" "$0" "$@"; printf "\\036"; } >> "$ARGV_LOG"\n'
    for where in [scratch / "stubs" / name for name in STUBBED] + [scratch / "good" / "bin" / "pip"]:
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(stub)
        where.chmod(0o755)
    return {"PATH": f"{scratch / 'stubs'}:/usr/bin:/bin", "ARGV_LOG": str(log), "HOME": str(scratch)}, log


def _pasted(lines: list[str], scratch: Path) -> list[list[str]]:
    """Each line run by `sh -c` in `scratch`, as a reader pastes it: the argv each stubbed command received."""
    env, log = _stub_path(scratch)
    for line in lines:
        ran = subprocess.run(["sh", "-c", line], cwd=scratch, env=env, capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0, (line, ran.stderr)
    calls = log.read_bytes().decode().split("\x1e")[:-1] if log.exists() else []
    return [[Path(c.split("\0")[0]).name, *c.split("\0")[1:-1]] for c in calls]


def _suggested_lines(md: str, script: str) -> list[str]:
    """Every shell line the report and the repro script's docstring tell a reader to run (comments left to sh)."""
    commands = next(c for k, c in _fences(md).items() if k.startswith("block") and "pip install" in c)
    doc = _constants(script)["__doc__"]
    told = [ln.strip() for ln in doc.splitlines() if ln.startswith("    ") and ln.split()[0] in ("pip", "python")]
    return [ln for ln in commands.splitlines() if ln.strip()] + told


def test_every_suggested_shell_line_of_a_hostile_report_runs_nothing_and_keeps_each_value_one_argument(
        run_dir, tmp_path):
    _edit_manifest(run_dir, lambda m: (m["model"].update(path=f"/elsewhere/{SHELL_NAME}"),
                                       m["key"].update(package=SHELL_PACKAGE)))
    doc, md, script = _report(run_dir)
    lines = _suggested_lines(md, script)
    assert len(lines) >= 4, lines  # pip install and python repro.py --full, in the report and in the docstring
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    calls = _pasted(lines, scratch)
    assert not list(scratch.glob("PASTED-RAN*")), sorted(p.name for p in scratch.iterdir())
    assert len(calls) == len(lines), (lines, calls)  # each line one command: nothing cut a line in two
    fulls = [c for c in calls if c[0] == "python" and "--full" in c]
    assert fulls and all(c == ["python", REPRO, "--full", SHELL_NAME] for c in fulls), fulls
    installs = [c for c in calls if c[0] == "pip"]
    # the bad release, the good one (the same commands exit 0 there) and the docstring's VERSION
    assert {c[2] for c in installs} == {f"{SHELL_PACKAGE}==1.20.0", f"{SHELL_PACKAGE}==1.19.2",
                                        f"{SHELL_PACKAGE}==VERSION"}, installs
    assert all(len(c) == 4 for c in installs), installs


def test_a_slowdown_report_s_venv_line_and_baseline_stay_one_argument_each(run_dir, tmp_path):
    """The slowdown's lines (a venv of the good release, the script timed against it) from a hostile record."""
    _edit_manifest(run_dir, lambda m: m["model"].update(path=f"/elsewhere/{SHELL_NAME}"))
    doc, _, _ = _report(run_dir)
    for p in doc["probes"]:  # probes with timings: the document of a slowdown
        p["timing"] = {}
    md = upstream.markdown(doc)
    commands = next(c for k, c in _fences(md).items() if k.startswith("block") and "--baseline" in c)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    calls = _pasted([ln for ln in commands.splitlines() if ln.strip()], scratch)
    assert not list(scratch.glob("PASTED-RAN*"))
    assert ["python", REPRO, "--baseline", "good/bin/python", "--full", SHELL_NAME] in calls, calls
    assert ["pip", "install", "onnxruntime==1.19.2", "numpy"] in calls, calls


@pytest.mark.release
def test_the_repro_script_s_give_the_model_line_keeps_a_hostile_file_name_one_argument(run_dir, tmp_path,
                                                                                      fresh_python):
    _edit_manifest(run_dir, lambda m: m["model"].update(path=f"/elsewhere/{SHELL_NAME}"))
    _, _, script = _report(run_dir)
    where = tmp_path / "elsewhere"
    where.mkdir()
    (where / REPRO).write_text(script)
    asked = subprocess.run([str(fresh_python("1.19.2")), REPRO, "--full"], cwd=where, capture_output=True,
                           text=True, timeout=300)
    assert asked.returncode == 2, asked.stderr
    (line,) = [ln.removeprefix("give the model: ") for ln in asked.stderr.splitlines() if "give the model" in ln]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert _pasted([line], scratch) == [["python", REPRO, "--full", SHELL_NAME]]
    assert not list(scratch.glob("PASTED-RAN*"))


def test_the_dashboard_s_suggested_report_line_quotes_the_run_id(tmp_path):
    from harness.report.escape import sh_line

    assert shlex.split(sh_line(["bisect", "report", SHELL_NAME])) == ["bisect", "report", SHELL_NAME]
    line = sh_line(["python", REPRO, "--full", "a\nb; touch x"], "said\n rm -rf ~", 20)
    assert "\n" not in line and shlex.split(line, comments=True) == ["python", REPRO, "--full", "a\\x0ab; touch x"]


# -- repro.mjs: a run of the node binding ---------------------------------------------------------------------

NODE = pytest.mark.skipif(shutil.which("node") is None, reason="Node.js runs repro.mjs (apt-get install nodejs)")


def _as_node_run(run_dir: Path) -> Path:
    """The run as `--binding node` makes it: its key and every record's provenance name onnxruntime-node and
    Node.js (no Python), and the cache holds a listing of onnxruntime-node's releases (a report reads it)."""
    from harness.releases import npm
    from harness.releases.packages import Package

    node = {"backend": "nodejs", "node_version": "20.0.0", "package": "onnxruntime-node", "ep": "cpu", "binding": "node"}
    _edit_manifest(run_dir, lambda m: (m["key"].pop("python", None), m["key"].update(node)))
    _edit_records(run_dir, lambda r: (r["provenance"].pop("python", None), r["provenance"].update(node)))
    package = Package("onnxruntime-node")
    npm.NpmIndex(run_dir.parent.parent / "cache", True, package)._write_cache(
        npm.releases_of_versions(package.name, ["1.19.2", "1.20.0"]))
    return run_dir


def _js_data(script: str) -> tuple[dict, str]:
    """(the document repro.mjs holds, read as JSON: all the evidence it has; the rest of its text, its code, with
    its comment lines left out)."""
    m = re.search(r"^const R = JSON\.parse\(String\.raw`\n(.*?)\n`\);$", script, re.M | re.S)
    assert m, script[:2000]
    code = script[:m.start()] + script[m.end():]
    return json.loads(m.group(1)), "\n".join(ln for ln in code.splitlines() if not ln.startswith("// "))


NODE_TAMPERINGS = {**{k: v for k, v in TAMPERINGS.items() if k != "key package name"},  # that one is no node run
                   "record Node.js version": lambda run: _edit_records(
                       run, lambda r: r["provenance"].update(node_version=PAYLOAD))}


@NODE
@pytest.mark.parametrize("where", sorted(NODE_TAMPERINGS))
def test_a_hostile_string_in_the_evidence_is_data_in_repro_mjs(run_dir, tmp_path, where):
    """repro.mjs holds the evidence as one JSON document that JSON.parse reads (never an object literal, whose
    `__proto__` key would set a prototype), and comment lines: Node.js parses it, it runs nothing, and the value
    is there as data."""
    _as_node_run(run_dir)
    NODE_TAMPERINGS[where](run_dir)
    doc, md, _ = _report(run_dir)
    script = (run_dir / "repro.mjs").read_text()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "repro.mjs").write_text(script)
    assert subprocess.run(["node", "--check", "repro.mjs"], cwd=elsewhere, capture_output=True).returncode == 0
    ran = subprocess.run(["node", "repro.mjs"], cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2 and not (elsewhere / "pwned").exists(), ran.stdout + ran.stderr
    stopped = "give the model: " if where == "model file name" else "onnxruntime-node is not installed here"
    assert ran.stderr.startswith(stopped) and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    data, code = _js_data(script)
    assert "touch pwned" not in code and "\x1b" not in script
    header = script.split("\nimport ")[0].splitlines()
    assert all(ln.startswith("//") for ln in header), header  # no value began a line of code
    assert "touch pwned" in json.dumps(data) + "\n".join(header)  # the value is there (else this proves nothing)
    if where == "key output names":
        assert data["full"]["outputs"] == [PAYLOAD, "y"]
    if where == "key session options":  # only the options a run sets reach the session
        assert data["session_options"] == {"intra_op_num_threads": PAYLOAD}
    if where == "key provider options":
        assert data["providers"] == [["CPUExecutionProvider", {PAYLOAD: PAYLOAD}]]
    assert _fences(md)["js"] == script.rstrip() + "\n"  # the script inside report.md is the script, whole


@NODE
def test_a_proto_key_in_the_evidence_sets_no_prototype_of_repro_mjs_s_data(run_dir, tmp_path):
    _as_node_run(run_dir)
    _edit_manifest(run_dir, lambda m: m["key"].update(ep_options={"__proto__": {"polluted": "yes"}}))
    _report(run_dir)
    data, code = _js_data((run_dir / "repro.mjs").read_text())
    probe = tmp_path / "probe.mjs"
    probe.write_text(re.sub(r"\nmain\(process.argv.slice\(2\)\).*", "", (run_dir / "repro.mjs").read_text(), flags=re.S)
                     + "\nconsole.log(JSON.stringify([({}).polluted ?? null, Object.getPrototypeOf(R.providers[0][1]) "
                       "=== Object.prototype, Object.keys(R.providers[0][1])]));\n")
    out = subprocess.run(["node", str(probe)], capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout) == [None, True, ["__proto__"]], out.stderr


@NODE
def test_every_suggested_line_of_a_hostile_node_report_runs_nothing_and_keeps_each_value_one_argument(
        run_dir, tmp_path):
    """The npm and node lines, repro.py's on the wheel, the compare that asks core or binding, and repro.mjs's own
    'give the model' line: each run by `sh` as a reader pastes it, every value one argument."""
    _as_node_run(run_dir)
    _edit_manifest(run_dir, lambda m: m["model"].update(path=f"/elsewhere/{SHELL_NAME}"))
    doc, md, _ = _report(run_dir)
    outside = md.split("<details>")[0]
    lines = [ln for k, c in _fences(outside).items() if k.startswith("block") for ln in c.splitlines() if ln.strip()]
    script = (run_dir / "repro.mjs").read_text()
    lines += [ln.removeprefix("//").strip() for ln in script.split("\nimport ")[0].splitlines()
              if ln.startswith("//     ")]
    where = tmp_path / "elsewhere"
    where.mkdir()
    (where / "repro.mjs").write_text(script)
    asked = subprocess.run(["node", "repro.mjs", "--full"], cwd=where, capture_output=True, text=True, timeout=60)
    assert asked.returncode == 2, asked.stderr
    lines += [ln.removeprefix("give the model: ") for ln in asked.stderr.splitlines() if "give the model" in ln]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    calls = _pasted(lines, scratch)
    assert not list(scratch.glob("PASTED-RAN*")), sorted(p.name for p in scratch.iterdir())
    assert len(calls) == len(lines), (lines, calls)
    assert ["bisect", "compare", "onnxruntime:cpu", "onnxruntime-node:cpu", "--from", "1.19.2", "--to", "1.20.0",
            "--model", SHELL_NAME, "--inputs", "batch.npz"] in calls, calls
    assert ["node", str(where / "repro.mjs"), "--full", SHELL_NAME] in calls, calls
    assert ["npm", "install", "--ignore-scripts", "onnxruntime-node@1.20.0"] in calls, calls
    assert sum(c[:2] == ["node", "repro.mjs"] and c[-1] == SHELL_NAME for c in calls) == 2, calls  # report, header


# -- with a release: the hostile script still judges ---------------------------------------------------------


@pytest.mark.release
def test_the_repro_of_a_tampered_run_judges_on_a_release_and_runs_nothing_else(run_dir, tmp_path, fresh_python):
    for where in ("manifest model name", "record CPU model", "key package name"):
        TAMPERINGS[where](run_dir)
    _, _, script = _report(run_dir)
    where = tmp_path / "elsewhere"
    where.mkdir()
    (where / REPRO).write_text(script)
    out = builders.run_script(fresh_python("1.20.0"), where / REPRO)
    assert not (where / "pwned").exists()
    assert out.returncode == 1 and out.stdout.startswith("onnxruntime 1.20.0, full model: bad"), out.stderr


@NODE
@pytest.mark.release
def test_repro_mjs_of_a_tampered_run_judges_on_the_binding_and_runs_nothing_else(run_dir, tmp_path, cache_dir):
    _as_node_run(run_dir)
    for where in ("manifest model name", "record CPU model", "record Node.js version"):
        NODE_TAMPERINGS[where](run_dir)
    _report(run_dir)
    prefix = builders.npm_prefix(cache_dir, "node", "1.20.0")
    out = builders.run_node_repro(run_dir, prefix, tmp_path / "elsewhere")
    assert not (tmp_path / "elsewhere" / "pwned").exists()
    assert out.returncode == 1 and out.stdout.startswith("onnxruntime-node 1.20.0, full model: bad"), out.stderr


# -- the helpers themselves ----------------------------------------------------------------------------------


def test_a_value_with_no_python_literal_stops_the_repro_with_one_line(run_dir):
    from harness.errors import HarnessError

    path = run_dir / "manifest.json"
    path.write_text(path.read_text().replace('"session_options": {}', '"session_options": {"x": NaN}'))
    with pytest.raises(HarnessError, match="no repro script: the run's evidence holds"):
        _report(run_dir)
    assert not (run_dir / REPRO).exists()


@pytest.mark.parametrize("text", [PAYLOAD, MARKDOWN, ANSI, "x86_64 1.20.0 a_b", "``", "- item", "1. item", "---",
                                  "\ud800 lone surrogate", "\u202e bidi"])
def test_the_escapes_show_the_text_and_make_nothing_of_it(text):
    shown = escape.printable(text)
    assert shown.isprintable() and (shown == text) == text.isprintable()
    assert "\n" not in escape.md_text(text) and "\n" not in escape.md_code(text)
    para = [t for t in _tokens(escape.md_text(text)) if t.type == "inline"]
    assert [c.type for p in para for c in p.children] in ([], ["text"])  # one text: no markup
    assert "".join(c.content for p in para for c in p.children) == shown.strip()
    code = [c for t in _tokens(escape.md_code(text)) if t.type == "inline" for c in t.children]
    assert [c.type for c in code] == ["code_inline"] and code[0].content == shown
    content = text + "\n```\n" + text
    fenced = [t for t in _tokens("\n".join(escape.md_fence(content))) if t.type == "fence"]
    assert [t.content for t in fenced] == ["\n".join(map(escape.printable, content.split("\n"))) + "\n"]
    assert ast.literal_eval(escape.py_literal({text: [text]})) == {text: [text]}
    assert ast.literal_eval(f'"""{escape.py_docstring(text)}"""') == shown
    for bad in (float("nan"), {1: "x"}, b"bytes", object()):
        with pytest.raises(ValueError):
            escape.py_literal({"k": bad})


def test_a_report_that_cannot_be_written_is_one_line_with_exit_1(tmp_path, listing):
    """`bisect report` of a run on a full filesystem: exit 1 (the environment failed) and one line naming the
    file, as `run` and `merge` end; it was an internal error with a traceback."""
    small = tmp_path / "small"
    small.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(small)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount here ({r.stderr.strip()})")
    try:
        run_dir = _run(small / "run", listing)
        with open(small / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
            while True:
                f.write(b"\0" * 4096)
        r = inproc.run("report", run_dir, "--no-probe", "--offline", "--cache-dir", small / "run" / "cache")
    finally:
        subprocess.run(["umount", str(small)], check=True)
    assert r.returncode == 1, r.stderr
    (line,) = r.stderr.strip().splitlines()[-1:]
    assert line.startswith("error: cannot read or write ") and "No space left on device" in line, r.stderr
    assert "Traceback" not in r.stderr
