"""The nightly workflow (.github/workflows/nightly.yml): linted by zizmor, and its own steps run here.

`Workflow` reads the YAML and runs each job's steps in order, as a runner
would: every `run:` script with bash (-eo pipefail, as GitHub's default
shell), in a fresh workspace (a copy of this checkout), with the env the
workflow, the job and the step set (their `${{ }}` expressions resolved from
the matrix, the step outputs and the run). The `uses:` steps have local
stand-ins, one per action the workflow names (an action without one fails the
test): checkout copies this tree, the cache restores the probe environments
from the tests' shared cache (a hit), artifacts are folders, Pages is the
folder the site was uploaded to. The history's durable store, the `results`
branch, is a bare git repository here (HISTORY_REMOTE).
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import builders
import numpy as np
import pytest
import yaml

from harness.results import history
from harness.results.store import RunStore

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
REUSABLE = ROOT / ".github" / "workflows" / "ortbisect.yml"  # what `bisect matrix init` writes (package data)
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
SHELL = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]


def _zizmor() -> str:
    exe = Path(sys.executable).parent / "zizmor"
    return str(exe) if exe.exists() else shutil.which("zizmor") or "zizmor"


@pytest.mark.parametrize("workflow", [WORKFLOW, REUSABLE], ids=lambda p: p.name)
def test_workflow_is_zizmor_clean(workflow):
    """Pinned actions, no persisted credentials, no template expansion in scripts, least permissions."""
    proc = subprocess.run([_zizmor(), "--offline", "--persona=pedantic", str(workflow)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No findings to report" in proc.stdout + proc.stderr
    assert "anchors" not in proc.stdout + proc.stderr  # GitHub reads YAML anchors only since late 2025


@pytest.mark.parametrize("workflow", [WORKFLOW, REUSABLE], ids=lambda p: p.name)
def test_every_action_is_pinned_to_a_commit_with_its_version(workflow):
    doc = yaml.safe_load(workflow.read_text())
    uses = [line.strip() for line in workflow.read_text().splitlines() if re.match(r"\s*(- )?uses:", line)]
    assert uses and all(re.search(r"@[0-9a-f]{40} # v\d+(\.\d+)*$", u) for u in uses), uses
    for name, job in doc["jobs"].items():
        assert "permissions" in job, f"job {name} names its permissions"
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), f"{name}: an expression inside a script: {step['run']}"
            if step.get("uses", "").startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


# -- the workflow, run here -------------------------------------------------------------------

class Workflow:
    def __init__(self, tmp: Path, cache_dir: Path, remote: Path, env: dict):
        self.doc = yaml.safe_load(WORKFLOW.read_text())
        self.tmp, self.cache_dir, self.remote = tmp, cache_dir, remote
        self.artifacts = tmp / "artifacts"
        self.override = env  # what this machine sets differently from the workflow (named by each test)
        self.log: list[tuple[str, str, float, str]] = []  # (job, step, seconds, output)
        self.runs = 0

    def night(self, jobs=("cells", "cell", "publish", "deploy"), matrix: list[dict] | None = None) -> dict:
        """One scheduled run of the workflow: its jobs in order; returns each job's outputs."""
        self.runs += 1
        shutil.rmtree(self.artifacts, ignore_errors=True)
        self.artifacts.mkdir(parents=True)
        outputs: dict[str, dict] = {}
        for name in jobs:
            job = self.doc["jobs"][name]
            strategy = (job.get("strategy") or {}).get("matrix")
            if strategy is None:
                entries = [None]
            elif matrix is not None:
                entries = matrix
            else:
                assert strategy == "${{ fromJSON(needs.cells.outputs.matrix) }}", strategy
                entries = json.loads(outputs["cells"]["matrix"])["include"]
            for entry in entries:
                outputs[name] = self.job(name, job, entry, outputs)
        return outputs

    def _resolve(self, text, ctx: dict) -> str:
        def one(m):
            expr = m.group(1)
            if expr in ctx:
                return str(ctx[expr])
            head, _, rest = expr.partition(".")
            if head == "matrix" and ctx.get("matrix") is not None and rest in ctx["matrix"]:
                return str(ctx["matrix"][rest])
            raise AssertionError(f"no stand-in for the expression ${{{{ {expr} }}}}")

        return EXPR.sub(one, str(text))

    def job(self, name: str, job: dict, entry: dict | None, needs: dict) -> dict:
        # a fresh workspace for each job, at one path: the workspaces' `uv run` installs this project once
        ws = self.tmp / "workspace"
        shutil.rmtree(ws, ignore_errors=True)
        ws.mkdir(parents=True)
        self.workspace = ws
        steps_out: dict[str, dict] = {}
        ctx = {"matrix": entry, "github.token": "", "github.run_id": str(1000 + self.runs), "inputs.refresh": "",
               **{f"needs.{n}.outputs.{k}": v for n, out in needs.items() for k, v in out.items()}}
        env = {**os.environ, "CI": "true", "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(ws),
               "GITHUB_REPOSITORY": "local/ortbisect", "GITHUB_RUN_ID": ctx["github.run_id"],
               "RUNNER_TEMP": str(self.tmp / "runner-temp"), "XDG_CACHE_HOME": str(ws / ".home-cache"),
               "HISTORY_REMOTE": str(self.remote), "COLUMNS": "200"}
        env.pop("VIRTUAL_ENV", None)
        for k, v in {**(self.doc.get("env") or {}), **(job.get("env") or {})}.items():
            env[k] = self._resolve(v, ctx)
        env.update(self.override)
        for i, step in enumerate(job["steps"]):
            label = step.get("name") or step.get("uses") or step.get("id") or f"step {i}"
            cond = step.get("if")
            assert cond in (None, "always()"), f"{name}: no stand-in for the condition {cond!r}"
            step_env = {**env, **{k: self._resolve(v, {**ctx, **self._steps(steps_out)})
                                  for k, v in (step.get("env") or {}).items()}}
            t0 = time.perf_counter()
            if "run" in step:
                out_file = ws / f".github-output-{i}"
                out_file.write_text("")
                step_env["GITHUB_OUTPUT"] = str(out_file)
                script = ws / f".step-{i}.sh"
                script.write_text(step["run"])
                proc = subprocess.run([*SHELL, str(script)], cwd=ws, env=step_env, capture_output=True, text=True,
                                      timeout=900)
                output = proc.stdout + proc.stderr
                self.log.append((name, label, time.perf_counter() - t0, output))
                assert proc.returncode == 0, f"{name}: {label} exited {proc.returncode}:\n{output[-4000:]}"
                if step.get("id"):
                    steps_out[step["id"]] = dict(line.split("=", 1) for line in out_file.read_text().splitlines()
                                                 if "=" in line)
            else:
                with_ = {k: self._resolve(v, {**ctx, **self._steps(steps_out)})
                         for k, v in (step.get("with") or {}).items()}
                output = self.uses(step["uses"].split("@")[0], with_, ws, step_env)
                self.log.append((name, label, time.perf_counter() - t0, output))
        return {k: self._resolve(v, {**ctx, **self._steps(steps_out)}) for k, v in (job.get("outputs") or {}).items()}

    @staticmethod
    def _steps(steps_out: dict) -> dict:
        return {f"steps.{sid}.outputs.{k}": v for sid, out in steps_out.items() for k, v in out.items()}

    def uses(self, action: str, with_: dict, ws: Path, env: dict) -> str:
        if action == "actions/checkout":
            files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, check=True,
                                   capture_output=True).stdout.decode().split("\0")
            for f in filter(None, files):
                if (ROOT / f).is_file():
                    (ws / f).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(ROOT / f, ws / f)
            return f"checked out {len(files)} files"
        if action == "astral-sh/setup-uv":
            assert shutil.which("uv", path=env["PATH"]), "uv on PATH"
            return "uv present"
        if action == "actions/cache":
            assert with_["path"] == "~/.cache/ortbisect", with_
            target = Path(env["XDG_CACHE_HOME"]) / "ortbisect"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.symlink_to(self.cache_dir)  # a cache hit: the tests' shared environments
            return f"cache restored: {self.cache_dir}"
        if action == "actions/upload-artifact":
            src = ws / with_["path"]
            if not src.exists():
                assert with_.get("if-no-files-found") == "ignore", f"nothing at {src}"
                return "no files"
            shutil.copytree(src, self.artifacts / with_["name"], ignore=shutil.ignore_patterns("work"))
            return f"uploaded {with_['name']}"
        if action == "actions/download-artifact":
            got = []
            for a in sorted(self.artifacts.glob(with_["pattern"])):
                shutil.copytree(a, ws / with_["path"] / a.name)
                got.append(a.name)
            return f"downloaded {got}"
        if action == "actions/upload-pages-artifact":
            shutil.copytree(ws / with_["path"], self.artifacts / "github-pages")
            return "pages artifact"
        if action == "actions/configure-pages":
            return "pages configured"
        if action == "actions/deploy-pages":
            assert (self.artifacts / "github-pages" / "index.html").is_file(), "a site to deploy"
            return "deployed"
        raise AssertionError(f"no local stand-in for {action}: add one to tests/test_workflow.py")

    def outputs_of(self, label: str) -> list[str]:
        return [out for _, step, _, out in self.log if step == label]


def bare_remote(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


def uv_env(cache_dir: Path) -> dict:
    """uv's own cache as this machine has it (the workspace sets XDG_CACHE_HOME), and one environment for
    the workspaces' `uv run`, kept in the tests' cache so it is made once."""
    cache = subprocess.run(["uv", "cache", "dir"], capture_output=True, text=True, check=True).stdout.strip()
    return {"UV_CACHE_DIR": cache, "UV_PROJECT_ENVIRONMENT": str(cache_dir / "workflow-venv")}


def all_records(root: Path) -> dict[str, list[str]]:
    return {d.name: sorted(history.record_id(r) for r in RunStore(d).records()) for d in history.run_dirs(root)}


@pytest.mark.parametrize("args, line", [
    (["restore", "results/"], "history: set HISTORY_REMOTE (a git remote or a path, e.g. HISTORY_REMOTE="),
    (["save", "results/"], "history: set HISTORY_REMOTE"),
    (["restore"], "history: usage: .ci/history restore|save DIR"),
    (["load", "results/"], "history: usage: .ci/history restore|save DIR"),
])
def test_history_without_a_remote_or_with_bad_arguments_is_one_line_and_exit_2(tmp_path, args, line):
    """The README's `bash .ci/history restore results/` outside CI: what to set, not bash's own message."""
    env = {k: v for k, v in os.environ.items() if k not in ("HISTORY_REMOTE", "GITHUB_REPOSITORY")}
    r = subprocess.run(["bash", str(ROOT / ".ci" / "history"), *args], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stdout) == (2, ""), r
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(line), r.stderr
    assert not (tmp_path / "results").exists()


def test_publish_with_an_empty_cache_restores_the_whole_history(cache_dir, tmp_path):
    """Eviction: the publish job starts with no cache at all; the results branch gives the history back."""
    remote = bare_remote(tmp_path / "origin.git")
    old = tmp_path / "old-nights"
    n = builders.write_history(old, ["fused", "decomposed"], ["1.23.2", "1.24.1", "1.25.0"], nights=2, rows=2)
    env = {**os.environ, **uv_env(cache_dir), "HISTORY_REMOTE": str(remote)}
    subprocess.run(["bash", ".ci/history", "save", str(old)], cwd=ROOT, env=env, check=True, capture_output=True)
    # tonight's cell found one more release on one run
    cell = tmp_path / "artifacts-in"
    shutil.copytree(old / "fused-x86_64-0", cell / "fused-x86_64-0")
    tonight = {"version": "1.26.0", "status": "ran", "finished": "2026-11-05T03:00:00Z", "seconds": 1.0,
               "provenance": {"arch": "x86_64", "backend": "uv", "cpu": None, "python": "3.11"},
               "result": {"outputs": [{"name": "y", "dtype": "float16", "rows": 2, "nan_rows": 0, "inf_rows": 0,
                                       "max_abs": 100.0}]}}
    RunStore(cell / "fused-x86_64-0").append(tonight)

    wf = Workflow(tmp_path / "wf", cache_dir, remote, uv_env(cache_dir))
    wf.artifacts.mkdir(parents=True)
    shutil.copytree(cell, wf.artifacts / "results-cell-0")
    wf.runs = 1
    t0 = time.perf_counter()
    wf.job("publish", wf.doc["jobs"]["publish"], None, {})
    seconds = time.perf_counter() - t0
    published = wf.workspace / "results"
    expected = all_records(old)
    expected["fused-x86_64-0"] = sorted([*expected["fused-x86_64-0"], history.record_id(tonight)])
    assert all_records(published) == expected  # every old night's record is back, and tonight's
    assert sum(map(len, expected.values())) == n + 1
    # the branch now holds it too: a later night with an empty cache starts from all of it
    again = tmp_path / "later"
    subprocess.run(["bash", ".ci/history", "restore", str(again)], cwd=ROOT, env=env, check=True, capture_output=True)
    assert all_records(again) == expected
    grid = json.loads((wf.artifacts / "github-pages" / "dashboard.json").read_text())
    assert {k.split("/")[0] for k in grid} == set(expected)
    assert grid["fused-x86_64-0/nan-or-inf"]["verdicts"]["1.26.0"] == "good"
    print(f"\npublish with an empty cache: {sum(map(len, expected.values()))} records restored and published "
          f"in {seconds:.1f} s")


@pytest.fixture(scope="module")
def tiny_matrix(tmp_path_factory) -> Path:
    """The residual-overflow model, a batch of two rows (one that overflows fp16), two releases, both archs."""
    d = tmp_path_factory.mktemp("nightly-tiny")
    builders.save(builders.residual_overflow_model(), d / "residual_overflow.onnx")
    x = np.ones((2, 8), np.float16)
    x[1] = 30000
    np.savez(d / "batch.npz", x=x)
    path = d / "tiny.toml"
    path.write_text('description = "the nightly exercised here: one tiny model, two releases"\nmode = "sweep"\n'
                    'releases = { from = "1.23.2", to = "1.24.1" }\ntimeout = 300\n'
                    '[[models]]\npath = "residual_overflow.onnx"\ninputs = "batch.npz"\n'
                    '[[targets]]\narch = "x86_64"\n[[targets]]\narch = "aarch64"\n')
    return path


@pytest.mark.release
@pytest.mark.qemu
@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 natively, aarch64 under QEMU")
def test_two_nights_of_the_workflow_here(cache_dir, tmp_path, tiny_matrix):
    """cells -> the x86_64 cell natively, the aarch64 cell under QEMU -> merge, history, dashboard; then a
    second night that reuses every finished probe. The one deviation from the workflow's env: MATRIX_FILE
    names a tiny matrix (the nightly's own is 2 models x 25 releases per arch)."""
    remote = bare_remote(tmp_path / "origin.git")
    wf = Workflow(tmp_path / "wf", cache_dir, remote, {**uv_env(cache_dir), "MATRIX_FILE": str(tiny_matrix)})
    t0 = time.perf_counter()
    first = wf.night()
    t1 = time.perf_counter()
    cells = json.loads(first["cells"]["matrix"])["include"]
    assert [(c["arch"], c["runner"]) for c in cells] == [("x86_64", "ubuntu-latest"), ("aarch64", "ubuntu-24.04-arm")]
    site = wf.artifacts / "github-pages"
    grid = json.loads((site / "dashboard.json").read_text())
    by_arch = {g["provenance"]["arch"]: g for g in grid.values()}
    assert by_arch["x86_64"]["verdicts"] == {"1.23.2": "good", "1.24.1": "good"}
    assert by_arch["aarch64"]["verdicts"] == {"1.23.2": "good", "1.24.1": "bad"}
    assert by_arch["aarch64"]["provenance"]["backend"] == "qemu"  # emulated here; native on CI's arm runner
    assert by_arch["aarch64"]["first_bad"] == "1.24.1"
    assert (site / by_arch["aarch64"]["report"]).is_file()  # the cell wrote the report, merge carried it
    assert "upstream report" in (site / "index.html").read_text()
    probed = wf.outputs_of("Run the cell")
    assert [bool(re.search(r"\b2 probed, 0 reused", o)) for o in probed] == [True, True], probed
    branch = all_records_on(remote, tmp_path / "branch1")

    night1 = list(wf.log)
    wf.log.clear()
    second = wf.night(jobs=("cells", "cell"))  # the cells start from the branch: what publish would merge
    t2 = time.perf_counter()
    assert second["cells"] == first["cells"]
    reused = wf.outputs_of("Run the cell")
    assert [bool(re.search(r"\b0 probed, 2 reused", o)) for o in reused] == [True, True], reused
    tonight = {}
    for a in sorted(wf.artifacts.glob("results-cell-*")):
        tonight.update(all_records(a))
    assert tonight == branch  # every record of the cells is one of the branch's: nothing probed again
    steps = "\n".join(f"  {n} {job:8} {step[:48]:48} {s:6.1f} s" for n, log in ((1, night1), (2, wf.log))
                      for job, step, s, _ in log)
    print(f"\nworkflow here: night 1 {t1 - t0:.1f} s, night 2 (every probe reused) {t2 - t1:.1f} s\n{steps}")


def all_records_on(remote: Path, into: Path) -> dict[str, list[str]]:
    """The history on the results branch of `remote`."""
    into.mkdir(parents=True)
    tar = subprocess.run(["git", "--git-dir", str(remote), "archive", "results"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return all_records(into)


def test_the_reusable_workflow_makes_the_matrix_of_its_inputs(tmp_path):
    """The reusable workflow's own steps (ortbisect.yml, as `bisect matrix init` writes it), run here: its inputs
    (models separated by spaces or commas, a file with its batch; a range with an empty `to`) become the matrix
    every job makes alike, and its cells the job matrix. `uvx --from $ORTBISECT bisect` is this checkout's."""
    from harness.nightly import matrix

    doc = yaml.safe_load(REUSABLE.read_text())
    assert set(doc[True]["workflow_call"]["inputs"]) == {"models", "from", "to", "ortbisect"}  # YAML reads on: as True
    steps = {job: {s.get("id") or s.get("name"): s for s in spec["steps"]} for job, spec in doc["jobs"].items()}
    made = steps["cells"]["The matrix of the models and range"]["run"]
    assert steps["cell"]["The matrix of the models and range"]["run"] == made
    shim = tmp_path / "bin" / "uvx"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\n[ "$1" = --from ] && [ "$3" = bisect ] || exit 9\nshift 3\n'
                    f'exec {sys.executable} -m harness.cli "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "repo"
    (work / "models").mkdir(parents=True)
    builders.save(builders.residual_norm_model(), work / "models" / "enc.onnx")
    np.savez(work / "models" / "batch.npz", **builders.residual_norm_inputs())
    output = tmp_path / "github_output"
    env = {**os.environ, **doc["env"], "MODELS": "models/enc.onnx:models/batch.npz, gemma-tiny-fused",
           "FROM": "1.21.0", "TO": "", "ORTBISECT": "ortbisect", "GITHUB_OUTPUT": str(output),
           "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}
    for script in (made, steps["cells"]["cells"]["run"]):
        proc = subprocess.run([*SHELL, "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    cells = matrix.load(work / doc["env"]["MATRIX_FILE"]).cells
    assert {(Path(c.model).name, c.arch) for c in cells} == {(m, a) for m in ("enc.onnx", "gemma-tiny-fused")
                                                              for a in ("x86_64", "aarch64")}
    assert all(c.releases == {"since": "1.21.0"} for c in cells)
    (line,) = output.read_text().splitlines()
    assert len(json.loads(line.removeprefix("matrix="))["include"]) == 4
