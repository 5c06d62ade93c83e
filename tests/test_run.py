"""`bisect run` and `sweep` end to end on real onnxruntime releases installed with uv."""

from __future__ import annotations

import json
import math
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import builders
import numpy as np
import pytest
from gates import WorkerGate, foreground, interrupted, wait_for

from harness.driver import Driver
from harness.probe import ProbeJob
from harness.releases.uvtool import uv_bin
from harness.releases.versions import Release, ReleaseIndex, Target, select_range
from harness.results.store import RunStore
from harness.runners.uv import UvRunner
from harness.verdicts import parse_predicate

pytestmark = pytest.mark.release


def test_run_names_first_bad_release(bisect, residual_norm):
    model, batch = residual_norm
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.0", "--to", "1.22.1", "--json")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert (doc["last_good"], doc["first_bad"]) == ("1.19.2", "1.20.0")
    n = len(doc["releases"])
    assert n == 8
    assert doc["probe_count"] <= math.ceil(math.log2(n)) + 2
    assert doc["monotone"] is True
    bad = {p["version"]: p for p in doc["probes"] if p["verdict"] == "bad"}
    assert bad["1.20.0"]["nan_rows"] == 2 and bad["1.20.0"]["rows"] == 4
    # a progress line per probe went to stderr: where the search stands against its bound, and an ETA
    lines = re.findall(r"^probe +(\d+) of at most (\d+): .*\((.*)\)$", r.stderr, re.M)
    assert len(lines) == doc["probe_count"], r.stderr
    made, bounds = [int(i) for i, _, _ in lines], [int(b) for _, b, _ in lines]
    assert made == list(range(1, len(lines) + 1))
    assert all(i <= b for i, b in zip(made, bounds)) and bounds == sorted(bounds, reverse=True)
    assert bounds[0] == 2 + math.ceil(math.log2(n - 1))  # the ends, then a binary search of what lies between
    assert all(how.endswith(" s left") for _, _, how in lines), r.stderr


def test_same_command_again_reuses_every_probe(bisect, residual_norm, tmp_path):
    model, batch = residual_norm
    args = ("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.0", "--to", "1.20.1", "--json")
    first = bisect(*args, results=tmp_path / "res").json()
    second = bisect(*args, results=tmp_path / "res").json()
    assert second["run_id"] == first["run_id"]
    assert all(p["reused"] for p in second["probes"])
    assert [p["version"] for p in second["probes"]] == [p["version"] for p in first["probes"]]
    lines = (tmp_path / "res" / first["run_id"] / "probes.jsonl").read_text().splitlines()
    assert len(lines) == first["probe_count"]
    # the second endpoint's worker imported while the first endpoint's probe ran
    early = [r["version"] for r in map(json.loads, lines) if "imported_early_s" in (r.get("result") or {})]
    assert early and first["releases"][0] not in early


def test_fix_mode_and_endpoints_agree(bisect, residual_norm):
    model, batch = residual_norm
    # Looking for a fix over a range that only regresses: wrong direction, exit 3.
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.0", "--to", "1.20.0",
               "--mode", "fix", "--json")
    assert r.returncode == 3 and r.json()["status"] == "wrong_direction"
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.20.0", "--to", "1.21.0")
    assert r.returncode == 3
    assert "Both ends are bad" in r.stdout


def test_sweep_lists_transition(bisect, residual_norm):
    model, batch = residual_norm
    r = bisect("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.0", "--to", "1.20.1", "--json", "-j", "2")
    assert r.returncode == 0, r.stderr
    doc = r.json()
    assert doc["probe_count"] == 4
    assert doc["transitions"] == [{"from": "1.19.2", "to": "1.20.0", "verdicts": ["good", "bad"]}]


@pytest.mark.parametrize("build, inputs, extra, verdict, why", [
    (builders.int_div_model, builders.int_div_inputs(), (), "crash", "SIGFPE"),
    (builders.spin_model, {"x": np.zeros(1, np.float32)}, ("--timeout", "3"), "timeout", "no result after"),
    (builders.unknown_op_model, {"x": np.zeros(2, np.float32)}, (), "error", "at session"),
])
def test_faulty_probes_get_their_verdict_and_the_run_completes(bisect, tmp_path, build, inputs, extra, verdict, why):
    model = builders.save(build(), tmp_path / "m.onnx")
    np.savez(tmp_path / "b.npz", **inputs)
    r = bisect("run", "--model", str(model), "--inputs", str(tmp_path / "b.npz"), "--from", "1.19.0", "--to", "1.19.2",
               "--json", *extra)
    assert r.returncode == 3, r.stderr  # no boundary: nothing could be judged
    doc = r.json()
    assert doc["status"] == "undecidable"
    assert [p["verdict"] for p in doc["probes"]] == [verdict, verdict]
    assert all(why in p["why"] for p in doc["probes"]), doc["probes"]


def test_missing_wheel_is_a_skip_stepped_around(cache_dir, residual_norm, tmp_path):
    """A release with no wheel for the target (here: its wheels removed from the listing)."""
    model, batch = residual_norm
    target = Target(os.uname().machine, f"{sys.version_info.major}.{sys.version_info.minor}")
    releases = select_range(ReleaseIndex(cache_dir, uv_bin()).releases(), "1.19.0", "1.20.1")
    releases = [Release(r.version, [] if r.version == "1.19.2" else r.wheels) for r in releases]
    store = RunStore.open(tmp_path, "skip-test", {"k": 1}, {}, ["test"])
    driver = Driver(UvRunner(target, cache_dir), releases, store, ProbeJob(model, batch), parse_predicate("nan-or-inf"))
    outcome = driver.run()
    assert outcome.records["1.19.2"]["verdict"] == "skip"
    assert "no onnxruntime 1.19.2 wheel" in outcome.records["1.19.2"]["reason"]
    step = outcome.step
    assert step.status == "found"
    assert (releases[step.lo].version, releases[step.hi].version) == ("1.19.0", "1.20.0")
    assert [releases[i].version for i in step.untestable] == ["1.19.2"]


def test_interrupted_run_resumes_without_repeating_a_probe(cache_dir, tmp_path):
    """Ctrl-C (SIGINT) to the harness while its third worker runs, then the same command:
    no finished probe runs twice."""
    model = builders.save(builders.spin_model(1_000), tmp_path / "m.onnx")
    np.savez(tmp_path / "b.npz", x=np.zeros(1, np.float32))
    argv = [sys.executable, "-m", "harness.cli", "sweep", "--model", str(model), "--inputs", str(tmp_path / "b.npz"),
            "--from", "1.19.0", "--to", "1.21.1", "--cache-dir", str(cache_dir), "--results-dir", str(tmp_path / "res"),
            "--json"]
    gate = WorkerGate(tmp_path / "gate")

    def third_held(proc):
        for _ in range(2):
            gate.let_go(gate.next_running(proc))
        gate.next_running(proc)  # the third worker is inside its probe, held before run()
        (probes,) = (tmp_path / "res").rglob("probes.jsonl")
        wait_for(lambda: len(probes.read_text().splitlines()) == 2, "the first two probes to be recorded")

    status, stderr = interrupted(argv, gate, third_held)
    assert status == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    (probes,) = (tmp_path / "res").rglob("probes.jsonl")
    before = [json.loads(x)["version"] for x in probes.read_text().splitlines()]
    assert len(before) == 2, before

    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 3, done.stderr  # the spin model is good everywhere: no transition
    after = [json.loads(x)["version"] for x in probes.read_text().splitlines()]
    assert sorted(after) == sorted(set(after)), "a finished probe was repeated"
    assert after[: len(before)] == before
    assert len(after) == 6
    doc = json.loads(done.stdout)
    assert sum(p["reused"] for p in doc["probes"]) == len(before)


def _processes_with(env_entry: str) -> list[int]:
    """The pids of every process whose environment holds `env_entry` (NAME=value)."""
    found = []
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and env_entry.encode() in (d / "environ").read_bytes().split(b"\0"):
                found.append(int(d.name))
        except OSError:  # ended meanwhile, or not ours to read
            pass
    return found


def _spin_run(cache_dir, tmp_path) -> list[str]:
    """`bisect run --json` over 1.19.0..1.20.0 of a model that spins a Loop 1,000 times (held at a gate)."""
    model = builders.save(builders.spin_model(1_000), tmp_path / "m.onnx")
    np.savez(tmp_path / "b.npz", x=np.zeros(1, np.float32))
    return [sys.executable, "-m", "harness.cli", "run", "--model", str(model), "--inputs", str(tmp_path / "b.npz"),
            "--from", "1.19.0", "--to", "1.20.0", "--cache-dir", str(cache_dir), "--results-dir",
            str(tmp_path / "res"), "--json"]


def test_sigterm_ends_the_workers_and_keeps_what_finished(cache_dir, tmp_path):
    """SIGTERM to `bisect run` (a service manager's stop, `timeout`) while its second worker is held inside
    its probe: as on Ctrl-C the harness ends its workers before it exits (none is left to keep a core busy),
    the finished probe stays saved, the exit status is 143 and --json prints one error object."""
    from harness.probe import HOLD_DIR_ENV

    argv = _spin_run(cache_dir, tmp_path)
    gate = WorkerGate(tmp_path / "gate")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **gate.env})
    worker = None
    try:
        gate.let_go(gate.next_running(proc))
        worker = gate.next_running(proc)  # the second probe's worker, held before run()
        (probes,) = (tmp_path / "res").rglob("probes.jsonl")
        wait_for(lambda: len(probes.read_text().splitlines()) == 1, "the first probe to be recorded")
        proc.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # every thread's stack, on stderr: where it hangs
            time.sleep(2)
            proc.kill()
            raise AssertionError(f"the harness did not end 60 s after SIGTERM:\n{proc.communicate()[1][-8000:]}")
        # looked at the moment the harness is gone: a worker it left behind has not noticed yet
        left = _processes_with(f"{HOLD_DIR_ENV}={gate.directory}")
    finally:
        proc.kill()
        if worker is not None:
            gate.open()  # a worker left behind runs its short probe and ends
    assert not Path(f"/proc/{worker}").exists() and not left, f"workers outlived the harness: {left}\n{stderr}"
    assert proc.returncode == 143, stderr
    assert json.loads(stdout) == {"error": "terminated", "exit_status": 143}
    assert "terminated: 1 finished probes are saved" in stderr and "Traceback" not in stderr, stderr
    assert len(probes.read_text().splitlines()) == 1


def test_nondeterministic_model_is_neither_good_nor_bad(bisect, tmp_path, residual_norm):
    model = builders.save(builders.noisy_model(), tmp_path / "noisy.onnx")
    np.savez(tmp_path / "b.npz", x=np.ones((2, 4), np.float32))
    r = bisect("sweep", "--model", str(model), "--inputs", str(tmp_path / "b.npz"), "--from", "1.19.2", "--to", "1.20.0",
               "--repeat", "3", "--json")
    assert r.returncode == 3, r.stderr
    assert [p["verdict"] for p in r.json()["probes"]] == ["nondeterministic", "nondeterministic"]
    # a deterministic model stays decisive under --repeat
    model, batch = residual_norm
    r = bisect("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0",
               "--repeat", "2", "--json")
    assert [p["verdict"] for p in r.json()["probes"]] == ["good", "bad"]


def test_nothing_heavy_is_loaded_while_the_first_probe_runs(cache_dir, tmp_path):
    """`bisect run` on the generated default model, held at its first worker's run(): the harness process has
    mapped none of the compiled libraries of what a run does not need before (or during) its probes: tokenizers
    (the model is generated already), onnx (the graph's facts are cached from an earlier read), pandas (history),
    matplotlib (charts), PIL. These imports counted against the warm overhead target (benchmarks/ `overhead`);
    what is held here is a module, not a timing."""
    from harness.models import registry as models

    models.resolve("gemma-tiny-fused", cache_dir)  # generated (with tokenizers) and read now if the cache has not got it
    argv = [sys.executable, "-m", "harness.cli", "run", "--model", "gemma-tiny-fused", "--from", "1.19.0",
            "--to", "1.20.0", "--cache-dir", str(cache_dir), "--results-dir", str(tmp_path / "res"), "--json"]
    gate = WorkerGate(tmp_path / "gate")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **gate.env})
    try:
        gate.next_running(proc)
        maps = (Path("/proc") / str(proc.pid) / "maps").read_text()
        gate.open()
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode in (0, 3), err
    files = [Path(line.split()[-1]).parts for line in maps.splitlines() if "site-packages/" in line]
    libs = {parts[parts.index("site-packages") + 1] for parts in files}
    assert "numpy" in libs, sorted(libs)  # what the batch's checks need: the map is read right
    assert not libs & {"tokenizers", "onnx", "pandas", "matplotlib", "PIL"}, sorted(libs)


WAITING = "another run is probing it"


def _started(argv: list[str], tmp_path: Path, name: str, env: dict, in_foreground: bool = False) -> subprocess.Popen:
    """`argv` started with its stdout and stderr in files (two runs at once must never block on a pipe)."""
    if in_foreground:  # SIGINT at its default, as a terminal's foreground job has it
        argv = foreground(argv)
    out, err = (open(tmp_path / f"{name}.{s}", "w") for s in ("out", "err"))
    with out, err:
        return subprocess.Popen(argv, stdout=out, stderr=err, text=True, env={**os.environ, **env})


def _said(tmp_path: Path, name: str, stream: str = "err") -> str:
    return (tmp_path / f"{name}.{stream}").read_text()


def test_two_identical_runs_at_once_probe_each_release_once(cache_dir, residual_norm, tmp_path):
    """The same `bisect run` twice at once on one results directory: the run that comes second to a release
    waits for the other's probe of it and reuses the record, so each release is probed once in all, and both
    runs give the same verdicts. The first worker is held until the other run is seen waiting: the two
    certainly overlap, whatever the machine's load."""
    model, batch = residual_norm
    argv = [sys.executable, "-m", "harness.cli", "run", "--model", str(model), "--inputs", str(batch),
            "--from", "1.19.0", "--to", "1.20.1", "--cache-dir", str(cache_dir), "--results-dir",
            str(tmp_path / "res"), "--json"]
    gate = WorkerGate(tmp_path / "gate")
    runs = {name: _started(argv, tmp_path, name, gate.env) for name in ("a", "b")}
    try:
        gate.next_running(runs["a"])  # one run's first worker, held before run()
        wait_for(lambda: any(WAITING in _said(tmp_path, n) for n in runs), "the other run to wait for that probe")
        gate.open()
        for proc in runs.values():
            proc.wait(timeout=600)
    finally:
        gate.open()
        for proc in runs.values():
            proc.kill()
    docs = {}
    for name, proc in runs.items():
        assert proc.returncode == 0, _said(tmp_path, name)
        docs[name] = json.loads(_said(tmp_path, name, "out"))
    (probes,) = (tmp_path / "res").rglob("probes.jsonl")
    recorded = [json.loads(x)["version"] for x in probes.read_text().splitlines()]
    assert len(recorded) == len(set(recorded)), f"a release was probed twice: {recorded}"
    made = {n: {p["version"] for p in d["probes"] if not p["reused"]} for n, d in docs.items()}
    assert not made["a"] & made["b"] and made["a"] | made["b"] == set(recorded), made
    verdicts = {n: {p["version"]: p["verdict"] for p in d["probes"]} for n, d in docs.items()}
    assert verdicts["a"] == verdicts["b"]
    assert (docs["a"]["last_good"], docs["a"]["first_bad"]) == (docs["b"]["last_good"], docs["b"]["first_bad"]) \
        == ("1.19.2", "1.20.0")


def test_ctrl_c_while_waiting_for_another_runs_probe(cache_dir, tmp_path):
    """Ctrl-C to a run that waits for another run's probe of a release: it ends at once (130, one line, no
    traceback), records nothing, and the other run, its worker let go, finishes and records each probe once."""
    argv = _spin_run(cache_dir, tmp_path)
    gate = WorkerGate(tmp_path / "gate")
    first = _started(argv, tmp_path, "first", gate.env)
    second = None
    try:
        gate.next_running(first)  # the first run's first worker, held: it holds that release's lock
        second = _started(argv, tmp_path, "second", gate.env, in_foreground=True)
        wait_for(lambda: WAITING in _said(tmp_path, "second"), "the second run to wait for the first's probe")
        second.send_signal(signal.SIGINT)
        try:
            second.wait(timeout=60)
        except subprocess.TimeoutExpired:
            second.send_signal(signal.SIGUSR1)  # every thread's stack, on stderr: where it hangs
            time.sleep(2)
            raise AssertionError(f"a waiting run did not end 60 s after Ctrl-C:\n{_said(tmp_path, 'second')[-8000:]}")
        assert first.poll() is None  # the first run's probe is still held
        gate.open()
        assert first.wait(timeout=600) == 3, _said(tmp_path, "first")  # the spin model is good at both ends
    finally:
        gate.open()
        for proc in (first, second):
            if proc is not None:
                proc.kill()
    stderr = _said(tmp_path, "second")
    assert second.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr, stderr
    (probes,) = (tmp_path / "res").rglob("probes.jsonl")
    recorded = [json.loads(x)["version"] for x in probes.read_text().splitlines()]
    assert sorted(recorded) == ["1.19.0", "1.20.0"]


@pytest.mark.parametrize("command, kept", [("reduce", "reduced"), ("blame", "blame")])
def test_ctrl_c_in_reduce_or_blame_says_what_is_saved_and_how_to_go_on(bisect, residual_norm, tmp_path, command, kept):
    """Ctrl-C (SIGINT) while `reduce` or `blame` has a probe inside its worker: exit 130, no traceback, and one line
    that names where its finished probes are and says to run the same command again, as `run` and `sweep` do."""
    model, batch = residual_norm
    r = bisect("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.0", "--to", "1.20.1", "--json")
    assert r.returncode == 0, r.stderr
    run_dir = bisect.results_dir / r.json()["run_id"]
    argv = [sys.executable, "-m", "harness.cli", command, str(run_dir), "--cache-dir", str(bisect.cache_dir)]
    gate = WorkerGate(tmp_path / "gate")
    status, stderr = interrupted(argv, gate, gate.next_running)  # its first probe, held inside the worker
    assert status == 130, stderr
    assert "Traceback" not in stderr, stderr
    (said,) = [x for x in stderr.splitlines() if x.startswith("interrupted")]
    assert said == (f"interrupted: the finished probes are saved in {run_dir / kept}; run the same command again "
                    "to continue"), stderr
