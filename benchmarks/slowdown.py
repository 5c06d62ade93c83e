"""Slowdown verdicts on a noisy machine: no false alarm in an A/A bisection, the real slowdown found every time.

    uv run python benchmarks/slowdown.py [--trials 20] [--budget 30] [--bound 1.3] [--no-noise] [--only timeit,aa,found]

The model is `light_inception_v1` from the onnx package's own backend test data (nobody here built it), on a
random 1x3x224x224 image. Three parts, measured in one run:

* `timeit`: the slowdown established without ortbisect first: bare onnxruntime 1.20.1 and 1.21.0 in fresh
  processes, one intra-op thread, `timeit.repeat`, the two releases interleaved (A B B A ...); the median ratio.
* `aa`: `--trials` bisections of 1.19.0..1.20.1 (a range whose latency does not move) under `slower>1.15`,
  each in a fresh results directory; a false alarm is any probe judged *bad*.
* `found`: `--trials` bisections of 1.20.0..1.21.1 under `slower>BOUND`; found is last good 1.20.1 and first
  bad 1.21.0, exactly.

While `aa` and `found` run, the repository's fast test suite runs in a loop on both cores beside them (the
noise), unless --no-noise. Every probe is the real `bisect run` as a subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
TIMEIT = r"""
import json, os, sys, timeit
import numpy as np, onnxruntime as ort
os.sched_setaffinity(0, {max(os.sched_getaffinity(0))})
so = ort.SessionOptions(); so.intra_op_num_threads = 1; so.inter_op_num_threads = 1
s = ort.InferenceSession(sys.argv[1], so, providers=["CPUExecutionProvider"])
feeds = dict(np.load(sys.argv[2]))
s.run(None, feeds)
print(json.dumps(timeit.repeat(lambda: s.run(None, feeds), number=1, repeat=int(sys.argv[3]))))
"""


def model_and_image(work: Path) -> tuple[Path, Path]:
    import onnx

    model = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_inception_v1.onnx"
    image = work / "image.npz"
    np.savez(image, data_0=np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32))
    return model, image


def python_of(cache: Path, version: str) -> Path:
    """The release's environment, made by ortbisect itself (`bisect versions --install` would do the same)."""
    env = cache / "envs" / "x86_64-py3.11" / f"onnxruntime-{version}" / "bin" / "python"
    if not env.exists():
        subprocess.run(["uv", "run", "bisect", "run", "--model", "gemma-tiny-fused", "--from", version, "--to", version,
                        "--cache-dir", str(cache), "--results-dir", tempfile.mkdtemp()], cwd=REPO, capture_output=True)
    return env


def by_timeit(cache: Path, model: Path, image: Path, rounds: int = 10, runs: int = 30) -> dict:
    a, b = python_of(cache, "1.20.1"), python_of(cache, "1.21.0")
    ratios, medians = [], {"1.20.1": [], "1.21.0": []}
    for i in range(rounds):
        got = {}
        for version, py in ((("1.20.1", a), ("1.21.0", b)) if i % 2 == 0 else (("1.21.0", b), ("1.20.1", a))):
            out = subprocess.run([str(py), "-c", TIMEIT, str(model), str(image), str(runs)], capture_output=True,
                                 text=True, check=True)
            got[version] = statistics.median(json.loads(out.stdout))
            medians[version].append(got[version])
        ratios.append(got["1.21.0"] / got["1.20.1"])
    return {"rounds": rounds, "runs_per_round": runs, "ratio": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios),
            "ms": {v: 1e3 * statistics.median(x) for v, x in medians.items()}}


def bisection(cache: Path, model: Path, image: Path, start: str, end: str, bad_if: str, budget: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="slowdown-bench-") as results:
        t0 = time.perf_counter()
        out = subprocess.run(["uv", "run", "bisect", "run", "--model", str(model), "--inputs", str(image), "--from",
                              start, "--to", end, "--bad-if", bad_if, "--time-budget", str(budget), "--cache-dir",
                              str(cache), "--results-dir", results, "--json"], cwd=REPO, capture_output=True, text=True)
        doc = json.loads(out.stdout)
    return {"seconds": time.perf_counter() - t0, "status": doc["status"], "last_good": doc.get("last_good"),
            "first_bad": doc.get("first_bad"), "probes": doc["probe_count"],
            "verdicts": {p["version"]: p["verdict"] for p in doc["probes"]},
            "ratios": {p["version"]: (p["metrics"].get("timing") or {}).get("ratio") for p in doc["probes"]}}


class Noise:
    """The fast test suite in a loop beside the measurement, on every core."""

    def __init__(self, on: bool):
        self.on, self.proc = on, None

    def __enter__(self):
        if self.on:
            loop = 'while true; do uv run pytest -m "not release and not qemu and not docker" -n 2 -q -p no:cacheprovider >/dev/null 2>&1; done'
            self.proc = subprocess.Popen(["bash", "-c", loop], cwd=REPO, start_new_session=True)
        return self

    def __exit__(self, *exc):
        if self.proc is not None:
            os.killpg(self.proc.pid, 15)
            self.proc.wait()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--budget", type=float, default=30.0, help="--time-budget of each bisection")
    p.add_argument("--bound", type=float, default=1.3, help="the slowdown bound of the `found` trials")
    p.add_argument("--no-noise", action="store_true")
    p.add_argument("--only", default="timeit,aa,found")
    p.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "ortbisect")
    args = p.parse_args(argv)
    parts = set(args.only.split(","))
    work = Path(tempfile.mkdtemp(prefix="slowdown-bench-"))
    model, image = model_and_image(work)
    report: dict = {"model": str(model), "budget_s": args.budget, "trials": args.trials, "noise": not args.no_noise}
    if "timeit" in parts:
        report["timeit"] = t = by_timeit(args.cache_dir, model, image)
        print(f"timeit, bare onnxruntime, {t['rounds']} interleaved rounds of {t['runs_per_round']} runs: 1.21.0 / "
              f"1.20.1 = {t['ratio']:.3f} (rounds {t['ratio_min']:.3f}-{t['ratio_max']:.3f}; "
              f"{t['ms']['1.20.1']:.2f} vs {t['ms']['1.21.0']:.2f} ms)", flush=True)
    with Noise(not args.no_noise):
        if "aa" in parts:
            trials = []
            for i in range(args.trials):
                trials.append(bisection(args.cache_dir, model, image, "1.19.0", "1.20.1", "slower>1.15", args.budget))
                bad = [v for v, x in trials[-1]["verdicts"].items() if x == "bad"]
                print(f"A/A {i + 1:>2}: {trials[-1]['status']}, verdicts {trials[-1]['verdicts']}, ratios "
                      f"{ {v: round(r, 3) for v, r in trials[-1]['ratios'].items() if r} }"
                      f"{' FALSE ALARM ' + ','.join(bad) if bad else ''} ({trials[-1]['seconds']:.0f} s)", flush=True)
            alarms = sum(any(x == "bad" for x in t["verdicts"].values()) for t in trials)
            report["aa"] = {"trials": trials, "false_alarms": alarms}
            print(f"A/A: {alarms} false alarms in {len(trials)} trials (range 1.19.0..1.20.1, slower>1.15)", flush=True)
        if "found" in parts:
            trials = []
            for i in range(args.trials):
                trials.append(bisection(args.cache_dir, model, image, "1.20.0", "1.21.1", f"slower>{args.bound:g}",
                                        args.budget))
                t = trials[-1]
                print(f"found {i + 1:>2}: {t['status']} {t['last_good']} -> {t['first_bad']}, {t['probes']} probes, "
                      f"ratios { {v: round(r, 3) for v, r in t['ratios'].items() if r} } ({t['seconds']:.0f} s)",
                      flush=True)
            hits = sum(t["last_good"] == "1.20.1" and t["first_bad"] == "1.21.0" for t in trials)
            report["found"] = {"bound": args.bound, "trials": trials, "found": hits,
                               "probes_median": statistics.median(t["probes"] for t in trials),
                               "seconds_median": statistics.median(t["seconds"] for t in trials)}
            print(f"found: 1.20.1 -> 1.21.0 in {hits} of {len(trials)} trials under slower>{args.bound:g} (median "
                  f"{report['found']['probes_median']} probes, {report['found']['seconds_median']:.0f} s each)",
                  flush=True)
    out = REPO / "results" / "benchmarks" / "slowdown.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"written: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
