"""Matrices (`bisect matrix`), the results history (`--refresh`) and `bisect merge`."""

from __future__ import annotations

import html
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

import builders
import inproc
import jsonschema
import numpy as np
import pytest
from gates import WorkerGate, interrupted, wait_for

from harness.errors import UsageError
from harness.nightly import cells as cells_mod
from harness.nightly import matrix
from harness.releases.versions import Release
from harness.results import history
from harness.results.store import RunStore, read_cell_document

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
SCHEMA = ROOT / "docs" / "schema"

# The commands as `bisect` runs them (registered in harness.cli; registered here too if not yet).
ENTRY = """\
import sys
from harness.cli import cli, main
from harness.commands import dashboard, matrix, merge
for m in (matrix, merge, dashboard):
    if m.command.name not in cli.commands:
        cli.add_command(m.command)
sys.exit(main(sys.argv[1:]))
"""


class Result:
    def __init__(self, proc):
        self.returncode, self.stdout, self.stderr = proc.returncode, proc.stdout, proc.stderr

    def json(self):
        return json.loads(self.stdout)


def ob(*args, timeout: float = 900, env: dict | None = None) -> Result:
    proc = subprocess.run([sys.executable, "-c", ENTRY, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, "COLUMNS": "200", **(env or {})})
    return Result(proc)


def one_line_error(r: Result) -> str:
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """Two test-built models and their batch, next to where the matrices are written."""
    d = tmp_path_factory.mktemp("tiny")
    builders.save(builders.residual_overflow_model(), d / "residual_overflow.onnx")
    builders.save(builders.residual_norm_model(), d / "residual_norm.onnx")
    np.savez(d / "batch.npz", **builders.residual_norm_inputs())
    return d


def write_matrix(d: Path, name: str, models=("residual_overflow", "residual_norm"), targets=None,
                 releases='{ from = "1.23.2", to = "1.24.1" }', head: str = "", tail: str = "") -> Path:
    """A matrix next to the models (paths in it are relative to the file)."""
    targets = targets or [("x86_64", "auto")]
    text = f'{head}mode = "sweep"\nreleases = {releases}\n'
    for m in models:
        text += f'[[models]]\npath = "{m}.onnx"\ninputs = "batch.npz"\n'
    for arch, backend in targets:
        text += f'[[targets]]\narch = "{arch}"\nbackend = "{backend}"\n'
    text += tail
    path = d / f"{name}.toml"
    path.write_text(text)
    return path


# -- validation (no probes) ---------------------------------------------------------------

def test_shipped_matrices_load():
    nightly = matrix.load(ROOT / "matrices" / "nightly.toml")
    assert {c.model for c in nightly.cells} == {"gemma-tiny-fused", "gemma-tiny-decomposed"}
    assert {c.arch for c in nightly.cells} == {"x86_64", "aarch64"}
    assert all(c.releases == {"since": "1.19.0"} for c in nightly.cells)
    hub = matrix.load(ROOT / "matrices" / "embeddinggemma.toml")
    assert {c.model for c in hub.cells} == {"embeddinggemma"}
    shipped = matrix.load(ROOT / "matrices" / "providers.toml")
    asked = {(c.package, c.ep, c.reference, c.bad_if) for c in shipped.cells}
    assert asked == {(pkg, ep, ref, bad_if) for pkg, ep in [("onnxruntime", "cpu"), ("onnxruntime-openvino", "openvino"),
                                                             ("onnxruntime-gpu", "cuda")]
                     for ref, bad_if in [(None, "nan-or-inf"), ("fp32", "cosine<0.999")]}
    ov = [c for c in shipped.cells if c.ep == "openvino"]
    assert all(c.ep_options == {"device_type": "CPU"} and c.releases == {"from": "1.23.0", "to": "1.24.1"} for c in ov)


def test_cells_json_is_a_ci_job_matrix():
    r = ob("matrix", "cells", ROOT / "matrices" / "nightly.toml", "--json")
    assert r.returncode == 0, r.stderr
    cells = r.json()["include"]
    assert [c["index"] for c in cells] == list(range(len(cells)))
    assert {c["arch"]: c["runner"] for c in cells} == {"x86_64": "ubuntu-latest", "aarch64": "ubuntu-24.04-arm"}
    assert len({c["key"] for c in cells}) == len(cells)


@pytest.mark.parametrize("edit, message", [
    ('frobnicate = 1\n', "unknown key 'frobnicate' in the matrix"),
    ('[[options]]\nthreads = 2\n', "unknown key 'threads' in [[options]] #1"),
    ('[[options]]\ngraph_optimization_level = "max"\n', "graph_optimization_level 'max'"),
    ('[[models]]\nname = "no-such-model"\n', "unknown model 'no-such-model'"),
])
def test_bad_matrix_is_one_line_exit_2(tiny, edit, message):
    table = edit.startswith("[[")
    path = write_matrix(tiny, f"bad-{abs(hash(edit))}", head="" if table else edit, tail=edit if table else "")
    line = one_line_error(ob("matrix", "cells", path))
    assert message in line, line


NATIVE = platform.machine()
FOREIGN = "aarch64" if NATIVE == "x86_64" else "x86_64"
ALIAS = {"x86_64": "amd64", "aarch64": "arm64"}.get(NATIVE, NATIVE)

ONE_MODEL = '[[models]]\npath = "residual_norm.onnx"\ninputs = "batch.npz"\n'
NATIVE_TARGET = f'[[targets]]\narch = "{NATIVE}"\n'


@pytest.mark.parametrize("text, message", [
    (f'mode = []\nreleases = {{ since = "1.19.0" }}\n{ONE_MODEL}{NATIVE_TARGET}', "mode = []: no cells"),
    (f'python = "3.11/../.."\nreleases = {{ since = "1.19.0" }}\n{ONE_MODEL}{NATIVE_TARGET}',
     "python '3.11/../..': not a Python version (MAJOR.MINOR, e.g. 3.11)"),
    (f'python = 3.10\nreleases = {{ since = "1.19.0" }}\n{ONE_MODEL}{NATIVE_TARGET}', "python 3.1: give the version as a string"),
    (f'releases = {{ since = "1.19.0" }}\n{ONE_MODEL}outputs = ["y", "nope"]\n{NATIVE_TARGET}',
     "[[models]] #1: output 'nope': the model has no such output (its outputs: y)"),
    (f'releases = {{ since = "1.19.0" }}\n{ONE_MODEL}{NATIVE_TARGET}[[targets]]\narch = "{ALIAS}"\n',
     f"cells 0 and 1 are the same search (residual_norm/{NATIVE}/auto/bisect)"),
    (f'mode = ["sweep", "sweep"]\nreleases = {{ since = "1.19.0" }}\n{ONE_MODEL}{NATIVE_TARGET}',
     "cells 0 and 1 are the same search"),
], ids=["no-mode", "python-path", "python-float", "unknown-output", "arch-alias", "mode-twice"])
def test_a_matrix_that_asks_nothing_or_the_same_twice_or_a_bad_name_is_refused(tiny, text, message):
    """`matrix cells` refuses what would make no cell, a cell twice, an environment path that is not a Python
    version or an output the model has not got: one line, exit 2, before any cell is listed."""
    path = tiny / "refused.toml"
    path.write_text(text)
    line = one_line_error(ob("matrix", "cells", path))
    assert message in line, line


def test_outputs_of_a_registered_model_are_said_to_be_checked_when_the_cell_runs(tiny):
    path = tiny / "registered.toml"
    path.write_text(f'releases = {{ since = "1.19.0" }}\n[[models]]\nname = "gemma-tiny-fused"\noutputs = ["nope"]\n'
                    f'{NATIVE_TARGET}')
    r = ob("matrix", "cells", path, "--json")
    assert r.returncode == 0, r.stderr
    assert len(r.json()["include"]) == 1
    assert "note: [[models]] #1 outputs nope: checked when the cell runs" in r.stderr, r.stderr


@pytest.mark.parametrize("target, message", [
    (f'arch = "{NATIVE}"\ncpus = ["neoverse-n1"]', f"cpu 'neoverse-n1': {NATIVE} probes run on this host's own CPU"),
    (f'arch = "{NATIVE}"\nbackend = "podman"', "backend 'podman': unknown backend (choose from auto, "),
    (f'arch = "{FOREIGN}"\nbackend = "uv"', f"backend 'uv' runs {NATIVE} probes, not {FOREIGN}"),
    ('arch = "aarch64"\nbackend = "qemu"\ncpus = ["graviton"]', "cpu 'graviton': not a CPU model of qemu-aarch64"),
], ids=["cpus-native", "unknown-backend", "foreign-uv", "unknown-cpu"])
def test_targets_are_checked_by_the_rules_of_run(tiny, target, message):
    path = tiny / "target.toml"
    path.write_text(f'releases = {{ since = "1.19.0" }}\n[[models]]\npath = "residual_norm.onnx"\n'
                    f'inputs = "batch.npz"\n[[targets]]\n{target}\n')
    with pytest.raises(UsageError, match="target.toml: \\[\\[targets\\]\\] #1: ") as err:
        matrix.load(path)
    assert message in str(err.value)


def test_empty_range_is_refused(tiny, tmp_path):
    path = write_matrix(tiny, "empty", releases='{ from = "1.24.1", to = "1.23.2" }')
    assert "empty range" in one_line_error(ob("matrix", "cells", path))
    # "since" past the newest release: empty in the current listing
    path = write_matrix(tiny, "future", releases='{ since = "99.0" }')
    line = one_line_error(ob("matrix", "run", path, "--cache-dir", tmp_path / "cache", "--offline",
                             "--results-dir", tmp_path / "res"))
    assert "empty range" in line or "release listing" in line, line


def test_since_picks_up_a_new_release_with_no_edit():
    cell_range = {"since": "1.23.2"}
    today = [Release(v, [f"onnxruntime-{v}-cp311-cp311-manylinux_2_27_x86_64.whl"]) for v in
             ("1.22.1", "1.23.2", "1.24.1")]
    assert matrix.resolve_range(cell_range, today) == ("1.23.2", "1.24.1")
    tomorrow = today + [Release("1.25.0", ["onnxruntime-1.25.0-cp311-cp311-manylinux_2_27_x86_64.whl"])]
    assert matrix.resolve_range(cell_range, tomorrow) == ("1.23.2", "1.25.0")
    with pytest.raises(UsageError, match="empty range"):
        matrix.resolve_range({"from": "1.19.0", "to": "1.19.1"}, today)


def test_workflow_file_is_a_valid_github_workflow():
    try:
        import check_jsonschema  # noqa: F401
    except ImportError:
        pytest.skip("check-jsonschema is not installed (dev dependency; or: uv run --with check-jsonschema pytest)")
    proc = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                           str(WORKFLOW)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = WORKFLOW.read_text()
    for needle in ("matrix cells", "CELL_INDEX: ${{ matrix.index }}", '--cell "$CELL_INDEX"',
                   "runs-on: ${{ matrix.runner }}", "bisect merge", "bisect dashboard", ".ci/history restore",
                   ".ci/history save", "upload-artifact", "deploy-pages"):
        assert needle in text, needle


# -- packages, providers, references and rows: what `bisect run` takes, in a matrix -------------------------

def provider_matrix(d: Path, top: str = "", model: str = "", tail: str = "", name: str = "asked") -> Path:
    """One file model of `d`, the native target; `top` at the top level, `model` in its [[models]] entry,
    `tail` after the tables ([[providers]], ...)."""
    path = d / f"{name}.toml"
    path.write_text(f'releases = {{ from = "1.23.2", to = "1.24.1" }}\n{top}{ONE_MODEL}{model}{NATIVE_TARGET}{tail}')
    return path


def refused_in_process(*argv) -> str:
    """`bisect ARGV` run here: exit 2 and one line on stderr, which is returned."""
    r = inproc.run(*argv)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.lines) == 1 and r.lines[0].startswith("error: "), r.stderr
    return r.lines[0].removeprefix("error: ")


@pytest.mark.parametrize("top, model, tail, message", [
    ("", "", '[[providers]]\npackage = "onnxruntime-silicon"\n',
     "[[providers]] #1: package onnxruntime-silicon: not an onnxruntime package this harness knows (known: "
     "onnxruntime, onnxruntime-openvino, onnxruntime-gpu, onnxruntime-node, onnxruntime-web)"),
    ("", "", '[[providers]]\npackage = "onnxruntime-openvino"\nep = "TPUExecutionProvider"\n',
     "[[providers]] #1: ep TPUExecutionProvider: onnxruntime-openvino runs cpu, openvino, not TPUExecutionProvider "
     "(providers: cpu, cuda, openvino, wasm)"),
    ("", "", '[[providers]]\nep = "OpenVINOExecutionProvider"\n',
     "[[providers]] #1: ep openvino: onnxruntime runs cpu, not openvino; openvino is in onnxruntime-openvino"),
    ("", "", '[[providers]]\nep_options = { device_type = "CPU" }\n',
     "[[providers]] #1: ep_options device_type=CPU: the CPU provider takes no provider options (onnxruntime runs "
     "cpu; options are for another provider)"),
    ("", "", '[[providers]]\npackage = "onnxruntime-openvino"\nep = "openvino"\nep_options = { device_type = true }\n',
     "[[providers]] #1: ep_options.device_type = True: give the value as a string"),
    ("", "", '[[providers]]\npackage = "onnxruntime-openvino"\nreleases = { from = "1.24.1", to = "1.23.0" }\n',
     "[[providers]] #1 releases: empty range (1.24.1 is after 1.23.0)"),
    ('bad_if = "cosine<0.999"\nreference = "missing.npz"\n', "", "",
     "the matrix: reference {d}/missing.npz: no such file"),
    ("", 'bad_if = "cosine<0.999"\nreference = "refs/missing.npz"\n', "",
     "[[models]] #1: reference {d}/refs/missing.npz: no such file"),
    ('bad_if = "cosine<1.5"\nreference = "fp32"\n', "", "", "the matrix: bad_if cosine<1.5: a cosine is at most 1"),
    ('bad_if = "frobnicate"\n', "", "", "the matrix: bad_if 'frobnicate': expected one of nan-or-inf"),
    ("", 'bad_if = "rel-diff>1e-2"\n', "",
     "[[models]] #1: bad_if rel-diff>0.01: compares with a reference; give reference fp32, reference_release V or "
     "reference FILE.npz"),
    ('reference = "fp32"\n', 'bad_if = "cosine<0.999"\nreference_release = "1.23.2"\nreference = "fp32"\n', "",
     "[[models]] #1: give one reference: reference FILE.npz, reference fp32 or reference_release V"),
    ("", 'reference_release = "latest"\n', "", "[[models]] #1: reference_release: 'latest' is not a version number"),
    ('mode = "sweep"\nrows = "fewest"\n', "", "",
     "the matrix: rows fewest: a sweep probes every release; it applies to `bisect run`"),
    ("", 'rows = "most"\n', "", "[[models]] #1: rows 'most' (choose from all, fewest)"),
    ("", "", '[[providers]]\npackage = "onnxruntime"\n[[providers]]\nep = "CPUExecutionProvider"\n',
     f"cells 0 and 1 are the same search (residual_norm/{NATIVE}/auto/bisect)"),
    ("", "", '[[providers]]\npackage = "onnxruntime-gpu"\nep = "cuda"\nname = "a"\n'
             '[[providers]]\npackage = "onnxruntime-gpu"\nep = "CUDAExecutionProvider"\nname = "b"\n',
     f"cells 0 and 1 are the same search (residual_norm/{NATIVE}/auto/b/bisect)"),
], ids=["unknown-package", "unknown-provider", "provider-of-another-package", "ep-option-on-the-default",
        "ep-option-not-text", "provider-empty-range", "reference-file-missing", "model-reference-file-missing",
        "cosine-past-1", "bad-if-unknown", "compares-with-nothing", "two-references", "reference-release-not-a-version",
        "fewest-rows-in-a-sweep", "rows-unknown", "one-provider-twice", "cuda-twice-by-two-names"])
def test_a_provider_or_question_run_would_refuse_is_one_line_naming_the_file_and_table(tiny, top, model, tail,
                                                                                         message):
    """Each is refused by the function that refuses `bisect run`'s flag (harness.request, triage.rows), in the
    file's words, before anything is listed or probed; a CUDA cell is refused for what it asks, not for the GPU."""
    path = provider_matrix(tiny, top, model, tail)
    line = refused_in_process("matrix", "cells", path)
    assert line.startswith(f"{path}: {message.format(d=tiny)}"), line


def test_cells_are_the_product_of_models_targets_providers_options_and_modes(tiny):
    path = tiny / "product.toml"
    path.write_text(
        'mode = ["bisect", "sweep"]\nreleases = { from = "1.23.2", to = "1.24.1" }\nbad_if = "nan-or-inf"\n'
        f'{ONE_MODEL}'
        '[[models]]\npath = "residual_overflow.onnx"\ninputs = "batch.npz"\nbad_if = "cosine<0.999"\n'
        'reference_release = "1.23.2"\n'
        f'{NATIVE_TARGET}'
        '[[providers]]\npackage = "onnxruntime"\n'
        '[[providers]]\nname = "openvino-cpu"\npackage = "onnxruntime-openvino"\nep = "OpenVINOExecutionProvider"\n'
        'ep_options = { device_type = "CPU", num_of_threads = 2 }\nreleases = { from = "1.23.0", to = "1.24.1" }\n'
        '[[providers]]\npackage = "onnxruntime-gpu"\nep = "cuda"\n'
        '[[options]]\n[[options]]\ngraph_optimization_level = "disable"\n')
    cells = matrix.load(path).cells
    models = [("residual_norm", None, "nan-or-inf"), ("residual_overflow", "1.23.2", "cosine<0.999")]
    providers = [("onnxruntime", "cpu", (), None), ("onnxruntime-openvino", "openvino",
                                                    (("device_type", "CPU"), ("num_of_threads", "2")), "openvino-cpu"),
                 ("onnxruntime-gpu", "cuda", (), None)]
    options = [(), (("graph_optimization_level", "disable"),)]
    expected = [(*m, *p, o, mode) for m in models for p in providers for o in options for mode in ("bisect", "sweep")]
    got = [(c.model_label, c.reference_release, c.bad_if, c.package, c.ep, tuple(sorted(c.ep_options.items())),
            c.provider, tuple(sorted(c.options.items())), c.mode) for c in cells]
    assert got == expected  # the product, in file order: --cell N is the same cell on every machine
    assert [c.index for c in cells] == list(range(24))
    assert len({c.key for c in cells}) == len({c.name for c in cells}) == 24
    ranges = {(c.package, json.dumps(c.releases, sort_keys=True)) for c in cells}
    assert ranges == {("onnxruntime", '{"from": "1.23.2", "to": "1.24.1"}'),
                      ("onnxruntime-openvino", '{"from": "1.23.0", "to": "1.24.1"}'),
                      ("onnxruntime-gpu", '{"from": "1.23.2", "to": "1.24.1"}')}
    ov = next(c for c in cells if c.ep == "openvino" and c.reference_release)
    assert ov.name == f"residual_overflow/{NATIVE}/auto/openvino-cpu/cosine<0.999 vs 1.23.2/bisect"
    spec = cells_mod.spec_for(ov, "1.23.0", "1.24.1", tiny / "cache", tiny / "res", True)
    assert (spec.package.name, spec.package.ep, spec.package.ep_options) == \
        ("onnxruntime-openvino", "openvino", (("device_type", "CPU"), ("num_of_threads", "2")))
    assert (spec.bad_if, spec.reference, spec.reference_release) == ("cosine<0.999", None, "1.23.2")


def test_a_model_s_own_question_wins_and_its_reference_replaces_the_matrix_s(tiny):
    (tiny / "refs").mkdir(exist_ok=True)
    np.savez(tiny / "refs" / "y.npz", y=np.zeros((4, 8), np.float32))
    path = tiny / "own.toml"
    path.write_text('releases = { from = "1.23.2", to = "1.24.1" }\nbad_if = "cosine<0.99"\nreference = "refs/y.npz"\n'
                    f'rows = "fewest"\n{ONE_MODEL}{ONE_MODEL.replace("residual_norm", "residual_overflow")}'
                    f'reference_release = "1.23.2"\nrows = "all"\n{NATIVE_TARGET}')
    first, second = matrix.load(path).cells
    assert (first.bad_if, first.reference, first.reference_release, first.rows) == \
        ("cosine<0.99", str((tiny / "refs" / "y.npz").resolve()), None, "fewest")
    assert (second.bad_if, second.reference, second.reference_release, second.rows) == \
        ("cosine<0.99", None, "1.23.2", "all")
    assert first.name.endswith("/cosine<0.99 vs y.npz/rows=fewest/bisect"), first.name


def test_a_file_without_the_new_keys_keeps_its_cells_keys(tiny):
    """The keys name the run documents of every night before (cells/<key>.json): a file that names no
    provider, reference or rows keeps them (these are the keys of the format before those keys)."""
    path = tiny / "old.toml"
    path.write_text('mode = ["bisect", "sweep"]\nreleases = { since = "1.19.0" }\npython = "3.11"\n'
                    'bad_if = "max-abs>1e4"\n[[models]]\nname = "gemma-tiny-fused"\n[[targets]]\narch = "x86_64"\n'
                    '[[options]]\n[[options]]\ngraph_optimization_level = "disable"\n')
    assert [c.key for c in matrix.load(path).cells] == ["d0c7dbf399", "68fe3a6832", "e52248fd39", "d235643afc"]


def _without_a_gpu(tmp_path: Path, how: str) -> dict:
    """The environment of a host without a usable NVIDIA GPU: nvidia-smi absent from PATH, or there and failing
    as it does where the tool is installed and no driver answers."""
    dirs = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not (Path(d) / "nvidia-smi").exists()]
    if how == "failing":
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                       "driver.\"\nexit 9\n")
        smi.chmod(0o755)
        dirs.insert(0, str(bin_dir))
    return {"PATH": os.pathsep.join(dirs)}


@pytest.mark.parametrize("how, why", [
    ("absent", "no NVIDIA GPU is visible (nvidia-smi is not installed)"),
    ("failing", "no NVIDIA GPU is visible (nvidia-smi exited with status 9: NVIDIA-SMI has failed because it "
                "couldn't communicate with the NVIDIA driver.)"),
])
def test_a_cuda_cell_without_a_gpu_is_skipped_with_why_and_the_matrix_does_not_fail(tiny, cache_dir, tmp_path, how,
                                                                                     why):
    """Nothing is installed or probed; each CUDA cell's run document says `skipped` and why, the matrix exits 0
    and the dashboard shows each cell as its own row, skipped with the reason."""
    path = provider_matrix(tiny, "", "", '[[providers]]\npackage = "onnxruntime-gpu"\nep = "CUDAExecutionProvider"\n'
                                         '[[providers]]\npackage = "onnxruntime-gpu"\nep = "cuda"\n'
                                         'ep_options = { device_id = "0" }\n', name=f"cuda-{how}")
    results, env = tmp_path / "results", _without_a_gpu(tmp_path, how)
    gpu_envs = set((cache_dir / "envs").glob("*/onnxruntime-gpu-*"))
    r = ob("matrix", "run", path, "--cache-dir", cache_dir, "--results-dir", results, "--json", env=env)
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert doc["failed"] == [] and [s["cell"] for s in doc["skipped"]] == [0, 1]
    assert {s["why"] for s in doc["skipped"]} == {why}
    assert [(c["status"], c["skipped"], c["probes"]) for c in doc["cells"]] == [("skipped", why, [])] * 2
    assert r.stderr.count(f"skipped: {why}") == 2, r.stderr
    for cell in doc["cells"]:
        run_dir = results / cell["run_id"]
        assert not (run_dir / "probes.jsonl").exists()  # nothing probed
        kept = read_cell_document(run_dir / "cells" / f"{cell['cell']['key']}.json").raw  # the harness's reader ...
        jsonschema.Draft202012Validator(json.loads((SCHEMA / "cell-document.v1.json").read_text())).validate(kept)
        assert (kept["status"], kept["skipped"], kept["cell"]["package"], kept["cell"]["ep"]) == \
            ("skipped", why, "onnxruntime-gpu", "cuda")
    assert set((cache_dir / "envs").glob("*/onnxruntime-gpu-*")) == gpu_envs  # no environment of it was made
    one = ob("matrix", "run", path, "--cell", "1", "--cache-dir", cache_dir, "--results-dir", results, env=env)
    assert one.returncode == 0 and "0 cells run, 1 skipped, 0 not run" in one.stdout, (one.stdout, one.stderr)

    site = tmp_path / "site"
    page = ob("dashboard", results, "-o", site)
    assert page.returncode == 0, page.stderr
    grid = json.loads((site / "dashboard.json").read_text())
    assert sorted(g["skipped"] for g in grid.values()) == [why, why]
    text = (site / "index.html").read_text()
    rows = re.findall(r'<tr class="row".*?</tr>', text, re.S)
    assert len(rows) == 2, rows
    for row in rows:
        assert "onnxruntime-gpu:cuda" in row and f"<b>skipped</b>: {why}" in html.unescape(row), row
    assert any("device_id=0" in row for row in rows)


# -- history: newest record wins, --refresh appends, merge ----------------------------------

def fake_run(root: Path, run_id: str, key: dict, records: list[dict], name: str = "m") -> Path:
    d = root / run_id
    (d / "outputs").mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"run_id": run_id, "key": key, "created": "2025-01-01T00:00:00Z",
                                                 "model": {"name": name, "digest": key["model"]},
                                                 "batch": {"digest": key["batch"]}, "commands": []}))
    store = RunStore(d)
    for r in records:
        store.append(r)
    return d


def rec(version, nan, finished, arch="x86_64"):
    return {"version": version, "status": "ran", "finished": finished, "seconds": 1.0,
            "provenance": {"arch": arch, "backend": "uv", "cpu": None, "python": "3.11"},
            "result": {"outputs": [{"rows": 4, "nan_rows": nan, "inf_rows": 0}]}}


KEY = {"model": "a" * 64, "batch": "b" * 64, "outputs": [], "session_options": {}, "arch": "x86_64",
       "backend": "uv", "python": "3.11", "cpu": None}


def test_newest_record_decides_and_refresh_hides_only_older_ones(tmp_path):
    d = fake_run(tmp_path, "m-x86_64-1", KEY, [rec("1.0", 2, "2025-01-02T00:00:00Z"), rec("1.0", 0, "2025-01-01T00:00:00Z")])
    latest = history.latest_by_version(RunStore(d).records())
    assert latest["1.0"]["finished"] == "2025-01-02T00:00:00Z"  # by time, not by line
    refresh = history.RefreshStore.since_now(d)
    assert refresh.records() == []
    refresh.append(rec("1.0", 0, "2025-01-03T00:00:00Z"))
    assert len(refresh.records()) == 1 and len(RunStore(d).records()) == 3  # appended, nothing deleted


def test_merge_is_idempotent_and_refuses_another_key(tmp_path):
    fake_run(tmp_path / "a", "m-x86_64-1", KEY, [rec("1.0", 0, "2025-01-01T00:00:00Z")])
    fake_run(tmp_path / "b", "m-x86_64-1", KEY, [rec("1.0", 0, "2025-01-01T00:00:00Z"),
                                                    rec("1.1", 3, "2025-01-02T00:00:00Z")])
    root = tmp_path / "root"
    r = ob("merge", root, tmp_path / "a", tmp_path / "b", "--json")
    assert r.returncode == 0, r.stderr
    assert sum(x["added"] for x in r.json()) == 2
    before = (root / "m-x86_64-1" / "probes.jsonl").read_bytes()
    again = ob("merge", root, tmp_path / "a", tmp_path / "b", "--json")
    assert again.returncode == 0 and sum(x["added"] for x in again.json()) == 0
    assert (root / "m-x86_64-1" / "probes.jsonl").read_bytes() == before
    # the same run id made for another model digest: refused, nothing written
    other = fake_run(tmp_path / "c", "m-x86_64-1", {**KEY, "model": "c" * 64}, [rec("1.2", 0, "2025-01-03T00:00:00Z")])
    line = one_line_error(ob("merge", root, other.parent))
    assert "another manifest key" in line and "model" in line
    assert (root / "m-x86_64-1" / "probes.jsonl").read_bytes() == before
    # a manifest whose key disagrees with its own recorded digest: refused
    bad = fake_run(tmp_path / "d", "m-x86_64-2", KEY, [rec("1.0", 0, "2025-01-01T00:00:00Z")])
    man = json.loads((bad / "manifest.json").read_text())
    man["batch"]["digest"] = "e" * 64
    (bad / "manifest.json").write_text(json.dumps(man))
    assert "batch digest" in one_line_error(ob("merge", root, bad))
    assert not (root / "m-x86_64-2").exists()


# -- real releases ------------------------------------------------------------------------

def run_matrix(path: Path, cache_dir: Path, results: Path, *extra) -> dict:
    r = ob("matrix", "run", path, "--cache-dir", cache_dir, "--results-dir", results, "--json", *extra)
    assert r.returncode == 0, r.stderr
    return r.json()


def comparable(root: Path):
    """The probes of a results root without what differs between two runs of the same probe (times)."""
    frame = history.history_frame(root)
    cols = ["run_id", "model_digest", "batch_digest", "version", "status", "verdict", "nan_rows", "inf_rows",
            "rows", "arch", "backend", "cpu", "python", "session_options"]
    return sorted(map(tuple, frame[cols].astype(str).values.tolist()))


@pytest.mark.release
@pytest.mark.qemu
@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 native + aarch64 under QEMU")
def test_matrix_two_models_two_archs_end_to_end_then_reused(tiny, cache_dir, tmp_path):
    path = write_matrix(tiny, "e2e", targets=[("x86_64", "auto"), ("aarch64", "qemu")])
    results = tmp_path / "results"
    t0 = time.perf_counter()
    first = run_matrix(path, cache_dir, results, "-j", "2")
    t1 = time.perf_counter()
    cells = {(c["cell"]["model_label"], c["cell"]["arch"]): c for c in first["cells"]}
    assert len(cells) == 4 and not first["failed"]
    verdicts = {k: {p["version"]: p["verdict"] for p in c["probes"]} for k, c in cells.items()}
    assert verdicts[("residual_overflow", "x86_64")] == {"1.23.2": "good", "1.24.1": "good"}
    assert verdicts[("residual_overflow", "aarch64")] == {"1.23.2": "good", "1.24.1": "bad"}
    assert cells[("residual_overflow", "aarch64")]["first_bad"] == "1.24.1"
    assert verdicts[("residual_norm", "x86_64")] == {"1.23.2": "bad", "1.24.1": "bad"}  # NaN since 1.20.0
    assert cells[("residual_overflow", "aarch64")]["provenance"]["backend"] == "qemu"
    lines = {d.name: (d / "probes.jsonl").read_text() for d in history.run_dirs(results)}
    assert len(lines) == 4

    second = run_matrix(path, cache_dir, results)
    t2 = time.perf_counter()
    assert all(p["reused"] for c in second["cells"] for p in c["probes"])  # every cell reused
    assert {d.name: (d / "probes.jsonl").read_text() for d in history.run_dirs(results)} == lines
    print(f"\nmatrix 2 models x 2 archs x 2 releases: first run {t1 - t0:.1f} s, second (all reused) {t2 - t1:.1f} s")

    # --refresh probes again and appends: the old records stay, the newest decides
    one = run_matrix(path, cache_dir, results, "--cell", "0", "--refresh")
    assert not any(p["reused"] for p in one["cells"][0]["probes"])
    run = results / one["cells"][0]["run_id"] / "probes.jsonl"
    assert run.read_text().startswith(lines[run.parent.name])
    assert len(run.read_text().splitlines()) == 2 * len(lines[run.parent.name].splitlines())


@pytest.mark.release
def test_merge_of_per_cell_results_equals_one_run_of_both(tiny, cache_dir, tmp_path):
    """What CI does: each cell on its own machine, then `merge`; the same as one run of the whole matrix."""
    path = write_matrix(tiny, "split")
    run_matrix(path, cache_dir, tmp_path / "cell0", "--cell", "0")
    run_matrix(path, cache_dir, tmp_path / "cell1", "--cell", "1")
    run_matrix(path, cache_dir, tmp_path / "both")
    merged = tmp_path / "merged"
    r = ob("merge", merged, tmp_path / "cell0", tmp_path / "cell1", "--json")
    assert r.returncode == 0, r.stderr
    assert comparable(merged) == comparable(tmp_path / "both")
    assert sorted(d.name for d in history.run_dirs(merged)) == sorted(d.name for d in history.run_dirs(tmp_path / "both"))
    # idempotent: merging again adds nothing
    again = ob("merge", merged, tmp_path / "cell0", tmp_path / "cell1", "--json")
    assert sum(x["added"] for x in again.json()) == 0
    # the merged root is a results root like any other: a run over it reuses every probe
    reused = run_matrix(path, cache_dir, merged)
    assert all(p["reused"] for c in reused["cells"] for p in c["probes"])
    # pandas reads the whole history in one call
    frame = history.history_frame(merged)
    assert set(frame["verdict"]) == {"good", "bad"} and frame["newest"].all()


@pytest.mark.release
@pytest.mark.skipif(platform.machine() != "x86_64", reason="onnxruntime-openvino publishes x86_64 wheels only")
def test_an_openvino_cell_and_an_fp32_cell_end_to_end_then_each_is_its_own_row_on_the_dashboard(cache_dir, tmp_path):
    """gemma-tiny-fused as it is and against its fp32 version, on the CPU provider and on OpenVINO (2 releases
    each): each cell searched as `bisect run` searches it, into the run of its package and provider, and a row of
    its own; the fp32 probes a reference cell adds to a run are not the plain cell's verdicts."""
    path = tmp_path / "shipped.toml"
    path.write_text('mode = "bisect"\nreleases = { from = "1.19.2", to = "1.20.0" }\n[[models]]\nname = "gemma-tiny-fused"\n'
                    '[[models]]\nname = "gemma-tiny-fused"\nreference = "fp32"\nbad_if = "cosine<0.999"\n'
                    '[[targets]]\narch = "x86_64"\n'
                    '[[providers]]\npackage = "onnxruntime"\n'
                    '[[providers]]\nname = "openvino-cpu"\npackage = "onnxruntime-openvino"\n'
                    'ep = "OpenVINOExecutionProvider"\nep_options = { device_type = "CPU" }\n'
                    'releases = { from = "1.23.0", to = "1.24.1" }\n')
    results = tmp_path / "results"
    t0 = time.perf_counter()
    doc = run_matrix(path, cache_dir, results)
    plain, plain_ov, cpu, ov = doc["cells"]
    assert doc["skipped"] == [] and doc["failed"] == []
    assert (plain["last_good"], plain["first_bad"], plain["reference"]) == ("1.19.2", "1.20.0", None)
    assert plain["run_id"] == cpu["run_id"] and plain_ov["run_id"] == ov["run_id"]  # one run, two questions
    assert cpu["reference"]["kind"] == "fp32" and cpu["predicate"] == "cosine<0.999"
    assert {p["version"]: p["verdict"] for p in cpu["probes"]} == {"1.19.2": "good", "1.20.0": "bad"}
    assert (cpu["last_good"], cpu["first_bad"]) == ("1.19.2", "1.20.0")  # NaN rows from 1.20.0: cosine -1
    assert ov["releases"] == ["1.23.0", "1.24.1"] and ov["reference"]["kind"] == "fp32"
    assert ov["run_id"] != cpu["run_id"] and "onnxruntime-openvino-openvino" in ov["run_id"]
    own = [r for r in RunStore(results / ov["run_id"]).records() if not r.get("series")]
    assert sorted(r["version"] for r in own) == ["1.23.0", "1.24.1"]
    for rec in own:  # what `bisect run --package onnxruntime-openvino --ep openvino --ep-option device_type=CPU` records
        assert (rec["provenance"]["package"], rec["provenance"]["ep"], rec["provenance"]["ep_options"]) == \
            ("onnxruntime-openvino", "openvino", {"device_type": "CPU"})
        assert rec["providers"]["requested"] == "OpenVINOExecutionProvider"
    print(f"\nmatrix (plain, fp32) x (cpu, openvino) x 2 releases: {time.perf_counter() - t0:.1f} s; openvino verdicts "
          + ", ".join(f"{p['version']} {p['verdict']} ({p.get('why')})" for p in ov["probes"]))

    site = tmp_path / "site"
    r = ob("dashboard", results, "-o", site)
    assert r.returncode == 0, r.stderr
    rows = {re.sub(r"<[^>]+>", " ", re.search(r'<th class="target" scope="row">(.*?)</th>', row).group(1)): row
            for row in re.findall(r'<tr class="row".*?</tr>', (site / "index.html").read_text(), re.S)}
    labels = sorted(html.unescape(label) for label in rows)
    openvino = " gemma-tiny-fused x86_64 · uv · onnxruntime-openvino:openvino device_type=CPU · py3.11"
    assert labels == [openvino, f"{openvino} · bad if cosine<0.999 vs fp32", " gemma-tiny-fused x86_64 · uv · py3.11",
                      " gemma-tiny-fused x86_64 · uv · py3.11 · bad if cosine<0.999 vs fp32"], labels
    for label, row in rows.items():
        if "openvino" not in label:  # both questions of the CPU run: good at 1.19.2, bad from 1.20.0
            assert 'data-first-bad="1.20.0"' in row, label


@pytest.mark.release
def test_a_fewest_rows_cell_is_the_search_of_run_rows_fewest(bisect, cache_dir, tmp_path):
    """rows = "fewest" searches as `bisect run --rows fewest` does, into the same run; --refresh, which that search
    cannot honour on its row subsets, is refused before any probe."""
    path = tmp_path / "fewest.toml"
    path.write_text('releases = { from = "1.19.2", to = "1.20.0" }\nrows = "fewest"\n[[models]]\nname = "gemma-tiny-fused"\n'
                    f'[[targets]]\narch = "{NATIVE}"\n')
    results = tmp_path / "results"
    line = one_line_error(ob("matrix", "run", path, "--refresh", "--cache-dir", cache_dir, "--results-dir", results))
    assert "--refresh: cell 0 searches on the fewest rows" in line and not results.exists(), line
    (doc,) = run_matrix(path, cache_dir, results)["cells"]
    assert (doc["last_good"], doc["first_bad"], doc["rows"]["strategy"]) == ("1.19.2", "1.20.0", "fewest")
    assert [s["rows"] for s in doc["rows"]["searches"]] == [[12]]  # the longest row decides, as for `run`
    kept = read_cell_document(results / doc["run_id"] / "cells" / f"{doc['cell']['key']}.json").raw
    assert kept["rows"] == doc["rows"] and kept["matrix"]["name"] == "fewest"
    r = bisect("run", "--model", "gemma-tiny-fused", "--from", "1.19.2", "--to", "1.20.0", "--rows", "fewest", "--json",
               results=results)
    assert r.returncode == 0, r.stderr
    assert r.json()["run_id"] == doc["run_id"] and r.json()["rows"]["searches"] == doc["rows"]["searches"]


def test_a_slowdown_matrix_gives_its_cells_the_time_budget_and_refuses_a_bad_one(tiny):
    from harness.nightly.cells import spec_for

    path = tiny / "slow.toml"
    path.write_text('releases = { from = "1.20.0", to = "1.21.1" }\nbad_if = "slower>1.3"\ntime_budget = 20\n'
                    f'{ONE_MODEL}{NATIVE_TARGET}')
    (cell,) = matrix.load(path).cells
    spec = spec_for(cell, "1.20.0", "1.21.1", tiny, tiny / "results", False)
    assert (cell.bad_if, spec.time_budget) == ("slower>1.3", 20.0)
    keys = []
    for extra in ("", "time_budget = 60\n", "time_budget = 20\n"):
        other = tiny / "other.toml"
        other.write_text(f'releases = {{ from = "1.20.0", to = "1.21.1" }}\n{extra}{ONE_MODEL}{NATIVE_TARGET}')
        keys.append(matrix.load(other).cells[0].key)
    assert keys[0] == keys[1] != keys[2]  # the default adds nothing to the keys of cells written before it
    path.write_text(path.read_text().replace("time_budget = 20", "time_budget = 0"))
    with pytest.raises(UsageError, match="time_budget 0: give a finite number of seconds"):
        matrix.load(path)


def test_a_provider_entry_takes_the_package_sources_run_takes(tiny):
    """index_url, find_links (relative to the matrix file) and pre reach each cell's package as --index-url,
    --find-links and --pre give them; a cell without them keeps the key it had."""
    from harness.nightly.cells import spec_for

    (tiny / "wheels").mkdir(exist_ok=True)
    path = tiny / "sources.toml"
    head = f'releases = {{ from = "1.20.0", to = "1.21.1" }}\n{ONE_MODEL}{NATIVE_TARGET}'
    path.write_text(head + '[[providers]]\npackage = "onnxruntime"\nindex_url = "https://example.org/simple/"\n'
                    'find_links = ["wheels"]\npre = true\n[[providers]]\npackage = "onnxruntime"\n')
    with_sources, plain = matrix.load(path).cells
    pkg = spec_for(with_sources, "1.20.0", "1.21.1", tiny, tiny / "r", False).package
    assert pkg.index_urls == ("https://example.org/simple",) and pkg.find_links == (str((tiny / "wheels").resolve()),)
    assert pkg.pre is True and plain.package_of().sources == () and plain.package_of().pre is False
    bare = tiny / "bare.toml"
    bare.write_text(head)
    assert matrix.load(bare).cells[0].key == plain.key
    for bad, said in (('pre = "yes"', "pre 'yes': expected true or false"),
                      ("find_links = [1]", "find_links [1]: give a text or a list of them")):
        path.write_text(head + f'[[providers]]\npackage = "onnxruntime"\n{bad}\n')
        with pytest.raises(UsageError, match=re.escape(said)):
            matrix.load(path)


@pytest.mark.release
def test_matrix_run_shows_its_cells_and_probes_as_it_goes_and_ctrl_c_says_how_to_resume(tiny, cache_dir, tmp_path):
    """Piped (no terminal): a line as each cell starts (n of N, elapsed, an ETA once a cell is done) and as each
    probe starts and ends (where its search stands, elapsed, an ETA): a long emulated probe is not silence. Ctrl-C
    (SIGINT) while a probe runs: exit 130 and one line that says what is saved and how to go on; the same command
    then reuses the finished probe."""
    path = write_matrix(tiny, "stopped")
    results = tmp_path / "results"
    argv = [sys.executable, "-c", ENTRY, "matrix", "run", str(path), "--cache-dir", str(cache_dir),
            "--results-dir", str(results)]
    gate = WorkerGate(tmp_path / "gate")

    def second_held(proc):
        gate.let_go(gate.next_running(proc))
        gate.next_running(proc)  # the second probe, held inside its worker
        wait_for(lambda: any(len(p.read_text().splitlines()) == 1 for p in results.rglob("probes.jsonl")),
                 "the first probe to be recorded")

    status, stderr = interrupted(argv, gate, second_held, timeout=120, cwd=ROOT)
    assert status == 130, stderr
    assert "Traceback" not in stderr
    assert re.search(r"^cell 0 \(1 of 2; 0 s elapsed\): ", stderr, re.M), stderr
    starts = re.findall(r"^  \[0\] probing (\S+) \(probe (\d) of at most (\d); (.*)\)$", stderr, re.M)
    assert [(i, n) for _, i, n, _ in starts] == [("1", "2"), ("2", "2")], stderr
    assert starts[0][3].endswith("s elapsed") and starts[1][3].endswith(" s left"), starts
    done = re.findall(r"^  \[0\] onnxruntime (\S+) .*\((.*)\)$", stderr, re.M)
    assert len(done) == 1 and "s elapsed" in done[0][1] and done[0][1].endswith("probe 1 of at most 2"), done
    (said,) = [x for x in stderr.splitlines() if x.startswith("interrupted")]
    assert said == (f"interrupted: 0 of 2 cells finished; they and every finished probe are saved in {results}; "
                    "run the same command again to continue"), stderr

    again = ob("matrix", "run", path, "--cache-dir", cache_dir, "--results-dir", results, "--json")
    assert again.returncode == 0, again.stderr
    first = again.json()["cells"][0]["probes"]
    assert [p["reused"] for p in first] == [True, False], first
    assert re.search(r"^cell 1 \(2 of 2; \d+ s elapsed; about \d+ s left\): ", again.stderr, re.M), again.stderr


# -- bisect matrix init: a nightly from a tool install -----------------------------------------------------

def init(cwd: Path, *args) -> Result:
    return Result(subprocess.run([sys.executable, "-m", "harness.cli", "matrix", "init", *map(str, args)],
                                 capture_output=True, text=True, timeout=120, cwd=cwd))


def test_init_writes_a_starter_matrix_that_loads_and_the_reusable_workflow_and_refuses_to_overwrite(tmp_path):
    """The starter matrix is package data (it ships with `uv tool install`) and loads as `matrix run` loads it; the
    workflow written is the repository's reusable one. A second init is refused (one line, exit 2, nothing
    touched) unless --force."""
    from harness.nightly import starter

    r = init(tmp_path)
    assert r.returncode == 0, r.stderr
    m = matrix.load(tmp_path / "ortbisect.toml")
    assert {c.model for c in m.cells} == {"gemma-tiny-fused", "gemma-tiny-decomposed"}
    assert {c.arch for c in m.cells} == {"x86_64", "aarch64"} and all(c.releases == {"since": "1.19.0"} for c in m.cells)
    workflow = tmp_path / ".github" / "workflows" / "ortbisect.yml"
    assert workflow.read_text() == (ROOT / ".github" / "workflows" / "ortbisect.yml").read_text() \
        == starter.packaged("workflow.yml")

    (tmp_path / "ortbisect.toml").write_text("# mine\n")
    again = init(tmp_path)
    assert one_line_error(again) == "error: ortbisect.toml: already there; give --force to overwrite it"
    assert (tmp_path / "ortbisect.toml").read_text() == "# mine\n"
    forced = init(tmp_path, "--force")
    assert forced.returncode == 0, forced.stderr
    assert len(matrix.load(tmp_path / "ortbisect.toml").cells) == 4
    # elsewhere (the README's my-nightly/ortbisect.toml): the workflow goes to .github/ of the matrix's directory
    nested = init(tmp_path, "my-nightly/ortbisect.toml")
    assert nested.returncode == 0, nested.stderr
    assert (tmp_path / "my-nightly" / ".github" / "workflows" / "ortbisect.yml").read_text() == workflow.read_text()


def test_init_writes_the_models_and_range_asked_and_refuses_one_the_loader_refuses(tiny, tmp_path):
    """--model FILE.onnx:BATCH.npz (relative to the matrix) and a registered name, --from/--to or --since: the matrix
    has those cells; a model the loader refuses is one line, exit 2, and nothing is written."""
    import shutil

    (tmp_path / "models").mkdir()
    for f in ("residual_norm.onnx", "batch.npz"):
        shutil.copy(tiny / f, tmp_path / "models" / f)
    r = init(tmp_path, "mine.toml", "--model", "models/residual_norm.onnx:models/batch.npz", "--model",
             "gemma-tiny-fused", "--from", "1.20.0", "--to", "1.22.0", "--no-workflow")
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / ".github").exists()
    cells = matrix.load(tmp_path / "mine.toml").cells
    assert {(Path(c.model).name, c.arch) for c in cells} == {(n, a) for n in ("residual_norm.onnx", "gemma-tiny-fused")
                                                              for a in ("x86_64", "aarch64")}
    assert all(c.releases == {"from": "1.20.0", "to": "1.22.0"} for c in cells)
    since = init(tmp_path, "since.toml", "--model", "gemma-tiny-fused", "--since", "1.21.0", "--no-workflow")
    assert since.returncode == 0 and matrix.load(tmp_path / "since.toml").cells[0].releases == {"since": "1.21.0"}

    for args, message in ((("--model", "nope"), "unknown model 'nope'"),
                          (("--since", "1.21.0", "--from", "1.20.0", "--to", "1.22.0"), "not both"),
                          (("--from", "1.20.0"), "give --to too")):
        bad = init(tmp_path, "bad.toml", *args)
        assert message in one_line_error(bad)
        assert not (tmp_path / "bad.toml").exists() and not (tmp_path / ".github").exists()
    assert [p.name for p in tmp_path.glob(".init-*")] == []  # no trial file left behind
