"""The cost of a probe of each binding: onnxruntime-node and onnxruntime-web against the Python wheel.

    uv run python benchmarks/bindings.py [--reps 5] [--model gemma-tiny-fused] [--from 1.19.2 --to 1.24.1]

The same warm `bisect sweep` (every environment installed first, a fresh results directory each time, so no
probe is reused) with --binding python, node and web, the three interleaved and their order rotated between
repetitions so that a noisy neighbour hits each. Per binding: the sweep's wall time from outside (`uv run
bisect ...`, as a user pays it), the probes' own worker time (`probes.jsonl` `seconds`) per probe, and the
session and run() times the worker reports; medians over --reps, and each binding's ratio to python's. Only
releases every binding has are swept (npm lacks some of the wheels'). Writes results/benchmarks/bindings.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BINDINGS = ("python", "node", "web")


def sweep(binding: str, args, cache: Path) -> dict:
    results = Path(tempfile.mkdtemp(prefix=f"bench-{binding}-"))
    argv = ["uv", "run", "bisect", "sweep", "--binding", binding, "--model", args.model, "--from", args.from_,
            "--to", args.to, "--threads", "1", "--no-margin", "--json", "--cache-dir", str(cache),
            "--results-dir", str(results)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{binding}: bisect sweep failed: {proc.stderr.strip().splitlines()[-1:]}")
    run_id = json.loads(proc.stdout)["run_id"]
    records = [json.loads(x) for x in (results / run_id / "probes.jsonl").read_text().splitlines()]
    ran = [r for r in records if r["status"] == "ran"]
    return {"wall_s": wall, "probes": len(records), "worker_s": sum(r["seconds"] for r in ran) / max(1, len(ran)),
            "session_s": statistics.median(r["result"]["session_s"] for r in ran),
            "run_s": statistics.median(r["result"]["run_s"] for r in ran)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--model", default="gemma-tiny-fused")
    ap.add_argument("--from", dest="from_", default="1.19.2")
    ap.add_argument("--to", default="1.24.1")
    ap.add_argument("--bench-cache", type=Path, default=Path.home() / ".cache" / "ortbisect-bench")
    args = ap.parse_args()
    for binding in BINDINGS:  # the environments, installed once (not measured)
        sweep(binding, args, args.bench_cache)
    runs: dict[str, list[dict]] = {b: [] for b in BINDINGS}
    for rep in range(args.reps):
        for binding in BINDINGS[rep % 3:] + BINDINGS[:rep % 3]:
            runs[binding].append(sweep(binding, args, args.bench_cache))
    med = {b: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for b, rs in runs.items()}
    base = med["python"]
    print(f"{args.model}, {args.from_}..{args.to}, warm sweeps, medians of {args.reps} (interleaved):")
    print(f"{'binding':<8} {'probes':>6} {'sweep s':>8} {'worker s/probe':>15} {'session s':>10} {'run s':>8} "
          f"{'probe vs python':>16}")
    for b in BINDINGS:
        m = med[b]
        print(f"{b:<8} {m['probes']:>6.0f} {m['wall_s']:>8.2f} {m['worker_s']:>15.3f} {m['session_s']:>10.3f} "
              f"{m['run_s']:>8.3f} {m['worker_s'] / base['worker_s']:>15.2f}x")
    out = REPO / "results" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    (out / "bindings.json").write_text(json.dumps({"args": vars(args) | {"bench_cache": str(args.bench_cache)},
                                                   "runs": runs, "medians": med}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
