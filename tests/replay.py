"""A runner that serves recorded probe outcomes through the runner interface.

It installs nothing and starts no process: `prepare` and `run` answer from a
table of outcomes, so the logic above the runner (driver, session, summary,
report, history) is tested in milliseconds. Outcomes are either written by
the test (`ok`, `nan`, `crash`, ...) or read back from a real run's
probes.jsonl (`ReplayRunner.from_probes`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path

import numpy as np

from harness.errors import EnvironmentSkip
from harness.releases.builds import WHEEL_COMMITS
from harness.releases.versions import Release, Target
from harness.runners.base import Environment, Runner
from harness.runners.workers import ProcessOutcome

def outputs(rows: int = 4, nan_rows: int = 0, inf_rows: int = 0, name: str = "y") -> dict:
    """The worker's statistics of one output."""
    return {"name": name, "dtype": "float16", "shape": [rows, 8], "sha256": f"{rows}-{nan_rows}-{inf_rows}",
            "rows": rows, "nan_rows": nan_rows, "inf_rows": inf_rows, "zero_rows": 0, "nan": nan_rows, "inf": inf_rows,
            "max_abs": 1.0, "min": -1.0, "max": 1.0}

def ran(nan_rows: int = 0, rows: int = 4) -> ProcessOutcome:
    return ProcessOutcome(0, None, False, 0.01, "", {"stage": "done", "outputs": [outputs(rows, nan_rows)]})

def crash(signal: int = 9) -> ProcessOutcome:
    return ProcessOutcome(None, signal, False, 0.01, "", {"stage": "run"})

def error(message: str = "ValueError: no kernel") -> ProcessOutcome:
    return ProcessOutcome(3, None, False, 0.01, "", {"stage": "session", "error": message})

def commit_of(version: str) -> str:
    """The git commit id a release's wheel names in get_build_info(): the published one where it is known
    (harness.releases.builds checks it), else a stand-in."""
    return WHEEL_COMMITS["onnxruntime"].get(version) or hashlib.sha1(version.encode()).hexdigest()[:10]

SKIP = "skip"  # an outcome that makes prepare() raise EnvironmentSkip

class ReplayRunner(Runner):
    backend = "replay"

    @classmethod
    def archs(cls, host: str | None = None) -> tuple[str, ...]:
        return ("x86_64", "aarch64")

    def __init__(self, outcomes: dict[str, ProcessOutcome | str], target: Target | None = None, arrays=None,
                 latency: dict[str, float] | None = None, rss: dict[str, float] | None = None, noise: float = 0.05,
                 load: float = 0.0):
        """`arrays(version, model_path)`: the outputs a probe saves (as the worker would), or None. `latency`
        and `rss`: a release's median latency (s) and peak memory (MB), which a timed request's runs scatter
        around (log-normal, `noise` its sigma; seeded, so a test sees the same runs every time). `load`: the
        chance that a neighbour shares the CPU while one request's runs go (they take 1.5-3x as long), each run
        also preempted (2-10x) one time in twenty: a loaded machine, hitting one side of a round and not the other."""
        super().__init__(target or Target("x86_64", "3.11"), Path("/nonexistent-cache"))
        self.outcomes = outcomes
        self.arrays = arrays
        self.latency = latency or {}
        self.rss = rss or {}
        self.rng = np.random.default_rng(0)
        self.noise = noise
        self.load = load
        self.calls: list[str] = []  # versions whose worker "ran", in order
        self.models: list[str] = []  # the model file of each call

    @classmethod
    def from_probes(cls, probes_jsonl: Path) -> "ReplayRunner":
        """Replay a real run: each release answers as its newest record says."""
        outcomes: dict[str, ProcessOutcome | str] = {}
        for line in Path(probes_jsonl).read_text().splitlines():
            rec = json.loads(line)
            status = rec["status"]
            if status == "skip":
                outcomes[rec["version"]] = SKIP
            elif status == "crash":
                outcomes[rec["version"]] = crash()
            elif status == "timeout":
                outcomes[rec["version"]] = ProcessOutcome(None, 9, True, rec.get("seconds") or 1.0, "", None)
            else:
                outcomes[rec["version"]] = ProcessOutcome(0 if status == "ran" else 3, None, False,
                                                          rec.get("seconds") or 0.0, "", rec.get("result"))
        return cls(outcomes)

    def prepare(self, release: Release) -> Environment:
        outcome = self.outcomes.get(release.version)
        if outcome is None or outcome == SKIP:
            raise EnvironmentSkip(f"no recorded outcome for {release.version}")
        return Environment(release.version, Path("/nonexistent-env"), False, 0.0)

    def verify(self, env: Environment) -> str | None:
        return None  # a replayed outcome has no files to verify

    def native_problem(self, env: Environment, native) -> str | None:
        return None  # nor a native library

    def run(self, env: Environment, request: dict, workdir: Path, timeout: float) -> ProcessOutcome:
        self.calls.append(env.version)
        self.models.append(Path(request["model"]).name)
        time.sleep(0)  # yield, as a real probe would, so parallel rounds interleave
        outcome = self.outcomes[env.version]
        saved = self.arrays(env.version, Path(request["model"])) if self.arrays else None
        if saved is not None and request.get("outputs_path") and outcome.result and outcome.result.get("stage") == "done":
            np.savez(request["outputs_path"], **saved)
        timing = request.get("timing")
        if timing and outcome.result is not None and env.version in self.latency:
            n = max(int(timing.get("runs_min") or 1), 3)
            runs = self.latency[env.version] * self.rng.lognormal(0.0, self.noise, n)
            if self.load:
                runs *= self.rng.uniform(1.5, 3.0) if self.rng.random() < self.load else 1.0
                runs *= np.where(self.rng.random(n) < 0.05, self.rng.uniform(2.0, 10.0, n), 1.0)
            outcome = dataclasses.replace(outcome, result={**outcome.result, "timing": {
                "latencies_s": [float(x) for x in runs], "warmup": 0, "threads": 1},
                "peak_rss_mb": self.rss.get(env.version, 100.0) * float(self.rng.lognormal(0.0, self.noise / 10))})
        if outcome.result is not None and "onnxruntime" not in outcome.result:
            build = f"ORT Build Info: git-branch=rel-{env.version}, git-commit-id={commit_of(env.version)}, build type=Release"
            outcome = dataclasses.replace(outcome, result={**outcome.result, "onnxruntime": {"version": env.version,
                                                                                         "build_info": build}})
        return outcome

def releases(*versions: str) -> list[Release]:
    return [Release(v, [f"onnxruntime-{v}-cp311-cp311-manylinux_2_27_x86_64.whl"]) for v in versions]
