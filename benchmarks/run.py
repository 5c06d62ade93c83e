"""ortbisect benchmarks: every target measured side by side in one run.

    uv run python benchmarks/run.py [--quick] [--only NAME[,NAME]] [--reps N] [--bench-cache DIR]

Prints a table (target, measured, bound, PASS/MISS) and writes it as JSON and
Markdown under results/benchmarks/. Timings are medians of --reps runs, the
two sides of a comparison interleaved (and their order alternated) so that a
noisy neighbour hits both. Every `bisect` is the real command line
(`uv run bisect ...`) run as a subprocess and timed from outside; the
environments live in a dedicated cache (default ~/.cache/ortbisect-bench,
or $ORTBISECT_BENCH_CACHE) except where a fresh cache is the point.

Names for --only: probes, overhead, byhand, parallel, prefetch, memory, trace, backends, dashboard, volumes, ray.
See benchmarks/README.md for what each one measures and the bound it checks.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# A user's Python writes bytecode caches; some sandboxes switch that off, which
# would make every command (and every bare worker) recompile its imports from
# source. Measure what a user's machine does, for both sides alike.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

import scale  # noqa: E402

from harness.runners.base import WORKER  # noqa: E402

BISECT = ["uv", "run", "--quiet", "bisect"]
MODEL = "gemma-tiny-fused"
RUN_FROM, RUN_TO = "1.19.0", "1.30.0"  # N = 22
WIDE_TO = "1.32.0"  # N = 25
TRACE_VERSION = "1.20.0"
ENV_VERSION = "1.20.0"  # the release whose environment creation is timed
NAMES = ("probes", "overhead", "byhand", "parallel", "prefetch", "memory", "trace", "backends", "dashboard", "volumes", "scale",
         "margin", "ray")
NO_ENVS = {"dashboard", "volumes"}  # measurements that need no probe environment (no warm-up)
OWN_ENVS = {"margin"}  # measurements that install only the releases they probe
DASH_MODELS, DASH_RECORDS = 20, 25_000
T_START = time.perf_counter()


# --- plumbing -----------------------------------------------------------------------------------

def say(msg: str) -> None:
    print(f"[{time.perf_counter() - T_START:7.1f}s] {msg}", file=sys.stderr, flush=True)


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs, unit="s", digits=2) -> str:
    """'median (min-max, n)' of a list of numbers."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    f = f"{{:.{digits}f}}"
    if len(xs) == 1:
        return f"{f.format(xs[0])} {unit} (1 run)"
    return f"{f.format(statistics.median(xs))} {unit} (median of {len(xs)}, {f.format(min(xs))}-{f.format(max(xs))})"


@dataclass
class Row:
    section: str
    target: str
    measured: str
    bound: str
    status: str  # PASS | MISS | info
    note: str = ""
    data: dict = field(default_factory=dict)


class Bench:
    def __init__(self, args):
        self.args = args
        self.quick = args.quick
        self.reps = args.reps
        self.cold_reps = args.cold_reps
        self.cache = Path(args.bench_cache).expanduser()
        self.tmp = Path(tempfile.mkdtemp(prefix="ortbisect-bench-"))
        self.rows: list[Row] = []
        self.raw: dict = {}
        self.arch = platform.machine()
        self.python = f"{sys.version_info.major}.{sys.version_info.minor}"
        self._versions: list[str] | None = None
        self._run_docs: list[dict] = []  # warm `bisect run` summaries (overhead), reused for the probe count

    # -- helpers ---------------------------------------------------------------------------------
    def fresh(self, what: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{what}-", dir=self.tmp))

    def bisect(self, args: list[str], cache: Path | None = None, results: Path | None = None,
               env: dict | None = None, as_json: bool = True, ok=(0, 3), bisect=BISECT) -> tuple[float, dict | None]:
        """Run `uv run bisect ARGS`, timed from outside; (wall seconds, parsed --json output)."""
        cmd = [*bisect, *args, "--cache-dir", str(cache or self.cache)]
        if results is not None:
            cmd += ["--results-dir", str(results)]
        if as_json:
            cmd.append("--json")
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              env={**os.environ, **(env or {})})
        wall = time.perf_counter() - t0
        if proc.returncode not in ok:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        doc = json.loads(proc.stdout) if as_json else None
        return wall, doc

    def versions(self) -> list[str]:
        if self._versions is None:
            _, rows = self.bisect(["versions", "--from", RUN_FROM, "--to", WIDE_TO])
            self._versions = [r["version"] for r in rows if r["wheel"]]
        return self._versions

    def inputs(self):
        """Model and default batch of gemma-tiny-fused in the bench cache, as the harness resolves them."""
        from harness.models import inputs
        from harness.models import registry as models

        resolved = models.resolve(MODEL, self.cache)
        return resolved, inputs.default_batch(resolved, self.cache)

    def env_python(self, version: str, cache: Path | None = None) -> Path:
        return (cache or self.cache) / "envs" / f"{self.arch}-py{self.python}" / f"onnxruntime-{version}" / "bin" / "python"

    def bare_probe(self, version: str, request: dict) -> dict:
        """The worker alone, as the harness runs it, timed from outside."""
        work = self.fresh(f"bare-{version}")
        req = {**request, "result_path": str(work / "result.json")}
        if req.get("outputs_path"):
            req["outputs_path"] = str(work / "outputs.npz")
        (work / "request.json").write_text(json.dumps(req))
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        t0 = time.perf_counter()
        proc = subprocess.run([str(self.env_python(version)), "-I", str(WORKER), str(work / "request.json")],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=child_env, cwd=work)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"bare worker {version} exited {proc.returncode}: {proc.stderr.decode()[-2000:]}")
        result = json.loads((work / "result.json").read_text())
        shutil.rmtree(work, ignore_errors=True)
        return {"version": version, "wall_s": wall, "result": result}

    def seeded_cache(self) -> Path:
        """A cache with the bench cache's release listing, models and batches but no environment."""
        d = self.fresh("cache-noenvs")
        for item in self.cache.iterdir():
            if item.name in ("envs", "trace-work"):
                continue
            if item.is_dir():
                shutil.copytree(item, d / item.name, symlinks=True)
            else:
                shutil.copy2(item, d / item.name)
        return d

    @staticmethod
    def probe_records(results: Path, doc: dict) -> list[dict]:
        path = results / doc["run_id"] / "probes.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    # -- warm-up ---------------------------------------------------------------------------------
    def warm_up(self):
        self.cache.mkdir(parents=True, exist_ok=True)
        missing = [v for v in self.versions() if not (self.env_python(v).parent.parent / "ortbisect-ready.json").exists()]
        if not missing:
            say(f"warm-up: all {len(self.versions())} environments of {RUN_FROM}..{WIDE_TO} present in {self.cache}")
            self.inputs()
            return
        say(f"warm-up: installing {len(missing)} environments of {RUN_FROM}..{WIDE_TO} into {self.cache} "
            f"(once; later runs reuse them)")
        wall, doc = self.bisect(["sweep", "--model", MODEL, "--from", RUN_FROM, "--to", WIDE_TO],
                                results=self.fresh("warmup"))
        created = sum(1 for v in self.versions() if self.env_python(v).exists())
        say(f"warm-up done in {wall:.1f} s: {created}/{len(self.versions())} environments present")
        self.inputs()

    # -- 1. probes -------------------------------------------------------------------------------
    def bench_probes(self):
        from harness.search import simulate

        say("probes: worst case over every boundary position (harness.search.simulate)")
        vs = self.versions()
        n22 = len([v for v in vs if _v(v) <= _v(RUN_TO)])
        for n in (n22, len(vs)):
            bound = math.ceil(math.log2(n)) + 2
            counts = {}
            for b in range(1, n):  # first bad release at index b; index 0 good, n-1 bad
                truth = ["good"] * b + ["bad"] * (n - b)
                sim = simulate(truth, "regression", 1)
                assert sim.step.status == "found" and sim.step.hi == b, (n, b, sim.step)
                counts[b] = len(sim.probed)
            worst = max(counts.values())
            at = [b for b, c in counts.items() if c == worst]
            self.rows.append(Row("1 probes", f"worst-case probes, N={n} (simulate, all {n - 1} boundaries)",
                                 f"{worst} (at boundary index {at[0]}{'...' if len(at) > 1 else ''})",
                                 f"<= ceil(log2 {n})+2 = {bound}", "PASS" if worst <= bound else "MISS",
                                 data={"n": n, "counts": counts, "worst": worst, "bound": bound}))
        docs = self._run_docs
        if not docs:
            say(f"probes: real `bisect run --model {MODEL} --from {RUN_FROM} --to {RUN_TO}`")
            _, doc = self.bisect(["run", "--model", MODEL, "--from", RUN_FROM, "--to", RUN_TO], results=self.fresh("run"))
            docs = [doc]
        doc = docs[0]
        n = doc["release_count"]
        bound = math.ceil(math.log2(n)) + 2
        counts = sorted({d["probe_count"] for d in docs})
        self.rows.append(Row("1 probes", f"real `bisect run {MODEL} {RUN_FROM}..{RUN_TO}` probe count (N={n})",
                             f"{doc['probe_count']} (last good {doc.get('last_good')}, first bad {doc.get('first_bad')})",
                             f"<= {bound}", "PASS" if max(counts) <= bound else "MISS",
                             note="same count in every run" if len(counts) == 1 else f"counts seen: {counts}",
                             data={"probes": [p["version"] for p in doc["probes"]]}))

    # -- 2. overhead -----------------------------------------------------------------------------
    def bench_overhead(self):
        resolved, batch = self.inputs()
        request = {"model": str(resolved.path), "inputs": str(batch), "outputs": list(resolved.spec.outputs),
                   "session_options": {}, "memory_limit_mb": None, "outputs_path": "set per run"}
        harness_walls, internal_walls, bare_sums, per_probe_over, nonrun, counts = [], [], [], [], [], []
        inside_sums = []
        probed: list[str] | None = None
        for rep in range(self.reps):
            order = ("harness", "bare") if rep % 2 == 0 or probed is None else ("bare", "harness")
            for side in order:
                if side == "harness":
                    results = self.fresh("overhead")
                    wall, doc = self.bisect(["run", "--model", MODEL, "--from", RUN_FROM, "--to", RUN_TO],
                                            results=results)
                    assert not any(p["reused"] for p in doc["probes"]), "a probe was reused: results dir not fresh"
                    self._run_docs.append(doc)
                    probed = [p["version"] for p in doc["probes"]]
                    recs = self.probe_records(results, doc)
                    nonrun += [r["seconds"] - r["result"]["run_s"] for r in recs if r.get("result", {}).get("run_s")]
                    inside_sums.append(sum(r["seconds"] for r in recs))
                    harness_walls.append(wall)
                    internal_walls.append(doc["harness"]["wall_s"])
                    counts.append(len(probed))
                    say(f"overhead rep {rep + 1}/{self.reps}: bisect run {wall:.2f} s "
                        f"(harness's own wall {doc['harness']['wall_s']:.2f} s, {len(probed)} probes)")
                else:
                    bare = [self.bare_probe(v, request) for v in probed]
                    bare_sums.append(sum(b["wall_s"] for b in bare))
                    say(f"overhead rep {rep + 1}/{self.reps}: {len(bare)} bare worker processes {bare_sums[-1]:.2f} s")
            per_probe_over.append((harness_walls[-1] - bare_sums[-1]) / counts[-1])
        h, b = med(harness_walls), med(bare_sums)
        ratio = h / b
        self.rows.append(Row("2 overhead", f"warm `bisect run` wall / sum of its {counts[0]} bare worker processes",
                             f"{ratio:.3f}x ({h:.2f} s / {b:.2f} s)", "<= 1.10x", "PASS" if ratio <= 1.10 else "MISS",
                             note=f"bisect run {spread(harness_walls)}; bare sum {spread(bare_sums)}; "
                                  f"harness's own wall_s {spread(internal_walls)} (without `uv run` start-up)",
                             data={"harness_walls": harness_walls, "internal_walls": internal_walls, "bare_sums": bare_sums,
                                   "probed": probed}))
        self.raw["overhead_internal_ratio"] = med(internal_walls) / b
        startup, cli = [], []
        for _ in range(self.reps):
            t0 = time.perf_counter()
            subprocess.run(["uv", "run", "--quiet", "true"], cwd=REPO, check=True, capture_output=True)
            startup.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            subprocess.run([*BISECT, "--version"], cwd=REPO, check=True, capture_output=True)
            cli.append(time.perf_counter() - t0)
        self.rows.append(Row("2 overhead", "harness's own wall_s / bare sum (without `uv run` start-up)",
                             f"{med(internal_walls) / b:.3f}x", "(diagnostic)", "info",
                             note=f"`uv run true` alone (project sync check + bytecode compile): {spread(startup)}; "
                                  f"`uv run bisect --version` (+ CLI imports): {spread(cli)}; "
                                  f"sum of the worker processes' wall inside the harness {spread(inside_sums)} "
                                  f"vs bare {spread(bare_sums)}",
                             data={"uv_run_startup": startup, "cli_startup": cli, "inside_sums": inside_sums}))
        self.rows.append(Row("2 overhead", "harness overhead per probe ((bisect wall - bare sum) / probes)",
                             spread(per_probe_over), "", "info", data={"values": per_probe_over}))
        self.rows.append(Row("2 overhead", "per probe: worker process wall - its run_s (start-up, import, session)",
                             spread(nonrun, digits=3), "", "info",
                             note="what a probe costs besides inference; the same in the bare runs",
                             data={"values": nonrun}))
        self.bench_env_create()

    def bench_env_create(self):
        from harness.releases.uvtool import uv_bin
        from harness.releases.versions import ReleaseIndex, Target
        from harness.runners.uv import UvRunner

        release = next(r for r in ReleaseIndex(self.cache, uv_bin()).releases() if r.version == ENV_VERSION)
        target = Target(self.arch, self.python)
        times = {"warm": [], "cold": []}
        for rep in range(self.reps):
            for kind in (("warm", "cold") if rep % 2 == 0 else ("cold", "warm")):
                cache = self.fresh(f"env-{kind}")
                saved = os.environ.get("UV_CACHE_DIR")
                if kind == "cold":
                    os.environ["UV_CACHE_DIR"] = str(self.fresh("uvcache"))
                try:
                    t0 = time.perf_counter()
                    env = UvRunner(target, cache).prepare(release)
                    times[kind].append(time.perf_counter() - t0)
                    assert env.created
                finally:
                    if kind == "cold":
                        shutil.rmtree(os.environ["UV_CACHE_DIR"], ignore_errors=True)
                        if saved is None:
                            os.environ.pop("UV_CACHE_DIR")
                        else:
                            os.environ["UV_CACHE_DIR"] = saved
                    shutil.rmtree(cache, ignore_errors=True)
                say(f"environment {ENV_VERSION} rep {rep + 1}/{self.reps} {kind}: {times[kind][-1]:.2f} s")
        self.rows.append(Row("2 overhead", f"create an environment ({ENV_VERSION}), warm uv cache",
                             spread(times["warm"]), "", "info", note="UvRunner.prepare: uv venv + uv pip install",
                             data=times))
        self.rows.append(Row("2 overhead", f"create an environment ({ENV_VERSION}), cold uv cache (download)",
                             spread(times["cold"]), "", "info", note="UV_CACHE_DIR = an empty directory"))

    # -- 3. against the by-hand loop ----------------------------------------------------------------
    def bench_byhand(self):
        resolved, batch = self.inputs()
        vs = [v for v in self.versions() if _v(v) <= _v(RUN_TO)]
        n = len(vs)
        loop_vs = vs if not self.quick else [vs[round(i * (n - 1) / 3)] for i in range(4)]
        cold = []
        for rep in range(self.cold_reps):
            uvc = self.fresh("uvcache")
            cache = self.fresh("cache-cold")
            wall, doc = self.bisect(["run", "--model", MODEL, "--from", RUN_FROM, "--to", RUN_TO], cache=cache,
                                    results=self.fresh("cold"), env={"UV_CACHE_DIR": str(uvc)})
            cold.append(wall)
            say(f"by-hand rep {rep + 1}/{self.cold_reps}: cold `bisect run` (fresh --cache-dir and UV_CACHE_DIR) "
                f"{wall:.1f} s, {doc['probe_count']} probes")
            shutil.rmtree(uvc, ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)
        py = subprocess.run(["python3", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True,
                            check=True).stdout.strip()
        work = self.fresh("byhand")
        cmd = ["bash", str(REPO / "benchmarks" / "byhand.sh"), str(resolved.path), str(batch), str(work), *loop_vs]
        say(f"by-hand loop over {len(loop_vs)} of {n} releases ({py} -m venv, pip install --no-cache-dir): "
            f"a few minutes")
        t0 = time.perf_counter()
        per = {}
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHON": py}, stdin=subprocess.DEVNULL) as proc:
            for line in proc.stdout:
                if line.startswith("TIME "):
                    _, v, secs, *rest = line.split(maxsplit=3)
                    per[v] = float(secs)
                    say(f"by-hand {v}: {float(secs):.1f} s  {' '.join(rest).strip()}")
            stderr = proc.stderr.read()
        loop_wall = time.perf_counter() - t0
        if proc.returncode != 0 or len(per) != len(loop_vs):
            raise RuntimeError(f"by-hand loop failed ({proc.returncode}): {stderr[-2000:]}")
        shutil.rmtree(work, ignore_errors=True)
        loop_total = sum(per.values()) * n / len(loop_vs)
        how = (f"extrapolated: {len(loop_vs)} of {n} releases ({', '.join(loop_vs)}) x {n}/{len(loop_vs)}"
               if len(loop_vs) < n else f"all {n} releases, one pass (outside wall {loop_wall:.1f} s)")
        c = med(cold)
        ratio = loop_total / c
        self.rows.append(Row("3 by-hand", f"by-hand loop over {n} releases / cold `bisect run`",
                             f"{ratio:.1f}x ({loop_total:.0f} s / {c:.1f} s)", ">= 20x",
                             "PASS" if ratio >= 20 else "MISS",
                             note=f"loop {how}, per release {spread(list(per.values()), digits=1)}; "
                                  f"cold bisect run {spread(cold, digits=1)}",
                             data={"loop_per_release": per, "loop_total": loop_total, "extrapolated": len(loop_vs) < n,
                                   "cold_bisect": cold}))

    # -- 4. parallel sweep -------------------------------------------------------------------------
    def bench_parallel(self):
        vs = self.versions()[:12]
        ks = [1, 2] + ([4] if (os.cpu_count() or 1) >= 4 else [])
        walls = {k: [] for k in ks}
        for rep in range(self.reps):
            for k in (ks if rep % 2 == 0 else ks[::-1]):
                wall, doc = self.bisect(["sweep", "--model", MODEL, "--from", vs[0], "--to", vs[-1], "-j", str(k)],
                                        results=self.fresh(f"sweep-j{k}"))
                assert doc["probe_count"] == len(vs) and not any(p["reused"] for p in doc["probes"])
                walls[k].append(wall)
                say(f"parallel rep {rep + 1}/{self.reps}: sweep of {len(vs)} releases -j {k}: {wall:.2f} s")
        r = med(walls[1]) / med(walls[2])
        curve = "; ".join(f"-j {k}: {spread(walls[k])}" for k in ks)
        self.rows.append(Row("4 parallel", f"sweep {vs[0]}..{vs[-1]} ({len(vs)} releases): -j 1 wall / -j 2 wall",
                             f"{r:.2f}x", ">= 1.00x (-j 2 not slower)", "PASS" if r >= 1.0 else "MISS",
                             note=f"{os.cpu_count()} CPUs; {curve}" + ("" if 4 in ks else "; K=4 curve skipped (< 4 CPUs)"),
                             data={str(k): v for k, v in walls.items()}))

    # -- ray ------------------------------------------------------------------------------------------
    def bench_ray(self):
        """The engine's overhead: a sweep of every release (1.19.0..1.32.0) on a local Ray cluster of two nodes
        (one CPU each, on 127.0.0.1, started by tests/raycluster.py) against the same sweep on the local runner at
        -j 2, interleaved; both sides with the extra installed, the nodes on the bench cache's environments. Every
        cluster sweep ships the harness in the job's runtime environment (harness.executors.shipping); the first
        one of a fresh cluster also waits for each node to set that environment up, timed apart as its
        first-use cost. The bound is on the sweeps after it; what the cluster adds per command whatever its
        length (importing Ray, joining, the survey's first task on each node, leaving) is reported apart."""
        try:
            import ray  # noqa: F401
        except ImportError:
            raise RuntimeError("Ray is not installed: uv sync --extra ray") from None
        vs = self.versions()
        scratch = tempfile.mkdtemp(prefix="ortray-")
        env = {"RAY_TMPDIR": scratch, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
               "RAY_USAGE_STATS_ENABLED": "0", "ORTBISECT_NODE_CACHE": str(self.cache)}
        with_ray = [*BISECT[:3], "--extra", "ray", *BISECT[3:]]
        cluster = subprocess.Popen([sys.executable, str(REPO / "tests" / "raycluster.py"), "1", "worker=1"],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                   env={**os.environ, **env})
        walls = {"local -j 2": [], "ray -j 2": []}

        def sweep(side: str) -> float:
            extra = ["--ray-address", address] if side.startswith("ray") else []
            wall, doc = self.bisect(["sweep", "--model", MODEL, "--from", vs[0], "--to", vs[-1], "-j", "2", *extra],
                                    results=self.fresh("sweep-ray"), env=env, bisect=with_ray)
            assert doc["probe_count"] == len(vs) and not any(p["reused"] for p in doc["probes"])
            return wall

        try:
            address = json.loads(cluster.stdout.readline())["address"]
            first = sweep("ray -j 2")  # each node sets up the job's runtime environment at its first task
            say(f"ray: first sweep of a fresh cluster (runtime environment set up on both nodes): {first:.2f} s")
            for rep in range(self.reps):
                for side in (walls if rep % 2 == 0 else list(walls)[::-1]):
                    walls[side].append(sweep(side))
                    say(f"ray rep {rep + 1}/{self.reps}: sweep of {len(vs)} releases, {side}: {walls[side][-1]:.2f} s")
        finally:
            cluster.stdin.close()
            try:
                cluster.wait(timeout=120)
            except subprocess.TimeoutExpired:
                cluster.kill()
            shutil.rmtree(scratch, ignore_errors=True)
        r = med(walls["ray -j 2"]) / med(walls["local -j 2"])
        self.rows.append(Row("ray", f"sweep {vs[0]}..{vs[-1]} ({len(vs)} releases): 2-node local Ray cluster wall / "
                             f"local runner -j 2 wall (the harness shipped with every job)", f"{r:.2f}x", "<= 1.15x",
                             "PASS" if r <= 1.15 else "MISS",
                             note="; ".join(f"{k}: {spread(v)}" for k, v in walls.items()) +
                             f"; the cluster's own seconds: +{med(walls['ray -j 2']) - med(walls['local -j 2']):.2f} s",
                             data=walls))
        self.rows.append(Row("ray", "first sweep of a fresh cluster over the later ones: each node sets up the job's "
                             "runtime environment (a virtualenv over its Python, numpy, onnx and uv from uv's cache, "
                             "the harness unpacked)", f"+{first - med(walls['ray -j 2']):.2f} s", "(report)", "info",
                             note=f"first: {first:.2f} s; later: {spread(walls['ray -j 2'])}",
                             data={"first": first, "later": walls["ray -j 2"]}))

    # -- 5. prefetch -------------------------------------------------------------------------------
    def bench_prefetch(self):
        walls = {"--prefetch": [], "--no-prefetch": []}
        for rep in range(self.cold_reps):
            for flag in (walls if rep % 2 == 0 else list(walls)[::-1]):
                cache = self.seeded_cache()
                wall, doc = self.bisect(["run", "--model", MODEL, "--from", RUN_FROM, "--to", RUN_TO, flag],
                                        cache=cache, results=self.fresh("prefetch"))
                walls[flag].append(wall)
                say(f"prefetch rep {rep + 1}/{self.cold_reps}: {flag}: {wall:.2f} s ({doc['probe_count']} probes)")
                shutil.rmtree(cache, ignore_errors=True)
        on, off = med(walls["--prefetch"]), med(walls["--no-prefetch"])
        self.rows.append(Row("5 prefetch", "`bisect run`, environments absent, uv cache warm: time saved by --prefetch",
                             f"{off - on:.2f} s ({(off - on) / off * 100:.0f} %)", "(report; > 0 expected)",
                             "PASS" if on < off else "MISS",
                             note=f"--prefetch {spread(walls['--prefetch'])}; --no-prefetch {spread(walls['--no-prefetch'])}",
                             data=walls))

    # -- margin ---------------------------------------------------------------------------------
    MARGIN_PAIRS = {MODEL: ("1.19.2", "1.20.0"), "gemma-300m-synthetic": ("1.23.2", "1.24.1")}
    MARGIN_BOUNDS = {MODEL: 1.5, "gemma-300m-synthetic": 1.3}

    def clear_margin_memo(self, model: str) -> None:
        """What later margins of `model` reuse (harness.models.margin_memo) removed: the next margin reads every row
        and saves the release's optimized graph, as the first probe of a model and batch does."""
        from harness.models import registry as models

        for f in (self.cache / "margin" / models.resolve(model, self.cache).digest[:16]).glob("*.json"):
            f.unlink()

    def bench_margin(self):
        """What the internal fp16 margin costs on the tiny model and on gemma-300m-synthetic (617 MB, the full 20x512
        batch): the same two-release sweep with and without it, each in a new results directory, the two sides and
        the two models interleaved and their order alternated; the probes' own worker seconds (the record's
        `seconds`), the sweep's wall and the workers' peak RSS. The first margin of each model is measured apart,
        with nothing kept (cold: every row read, the optimized graph saved); the reps reuse what it kept."""
        sides = {m: {"--margin": {"wall": [], "probe": [], "rss": []}, "--no-margin": {"wall": [], "probe": [], "rss": []}}
                 for m in self.MARGIN_PAIRS}
        cold = {}

        def sweep(model: str, flag: str) -> tuple[float, float, float]:
            pair = self.MARGIN_PAIRS[model]
            results = self.fresh("margin")
            wall, doc = self.bisect(["sweep", "--model", model, "--from", pair[0], "--to", pair[1], flag],
                                    results=results)
            recs = self.probe_records(results, doc)
            return (wall, sum(r.get("seconds") or 0 for r in recs),
                    max((r.get("result") or {}).get("peak_rss_mb") or 0 for r in recs))

        for model in self.MARGIN_PAIRS:  # the environments and the model made (untimed), then the cold margin
            sweep(model, "--no-margin")
            self.clear_margin_memo(model)
            cold[model] = sweep(model, "--margin")
            say(f"margin cold {model}: {cold[model][0]:.2f} s wall, {cold[model][1]:.2f} s in probes")
        for rep in range(self.reps):
            for model in (list(self.MARGIN_PAIRS) if rep % 2 == 0 else list(self.MARGIN_PAIRS)[::-1]):
                for flag in (["--margin", "--no-margin"] if rep % 2 == 0 else ["--no-margin", "--margin"]):
                    wall, probe, rss = sweep(model, flag)
                    for k, v in (("wall", wall), ("probe", probe), ("rss", rss)):
                        sides[model][flag][k].append(v)
                    say(f"margin rep {rep + 1}/{self.reps}: {model} {flag}: {wall:.2f} s wall, {probe:.2f} s in probes, "
                        f"worker peak {rss:.0f} MB")
        for model, pair in self.MARGIN_PAIRS.items():
            on, off = sides[model]["--margin"], sides[model]["--no-margin"]
            probe, wall = med(on["probe"]) / med(off["probe"]), med(on["wall"]) / med(off["wall"])
            bound = self.MARGIN_BOUNDS[model]
            self.rows.append(Row("margin", f"{model} sweep {pair[0]}..{pair[1]}: probe seconds with the internal "
                                           "margin / without", f"{probe:.2f}x (wall {wall:.2f}x)", f"<= {bound}x",
                                 "PASS" if probe <= bound else "MISS",
                                 note=f"with {spread(on['probe'])}; without {spread(off['probe'])}; the first margin, "
                                      f"nothing kept: {cold[model][1] / med(off['probe']):.2f}x ({cold[model][1]:.2f} s)",
                                 data={**sides[model], "cold": cold[model]}))
            self.rows.append(Row("margin", f"{model}: probe worker peak RSS with the margin / without",
                                 f"{med(on['rss']):.0f} MB / {med(off['rss']):.0f} MB", "<= 1.25x",
                                 "PASS" if med(on["rss"]) <= 1.25 * med(off["rss"]) else "MISS",
                                 note=f"the first margin, nothing kept: {cold[model][2]:.0f} MB"))

    # -- 6. memory ---------------------------------------------------------------------------------
    def bench_memory(self):
        vs = self.versions()
        results = self.fresh("sweep25")
        wall, doc = self.bisect(["sweep", "--model", MODEL, "--from", vs[0], "--to", vs[-1]], results=results)
        recs = self.probe_records(results, doc)
        peaks = [r["result"]["peak_rss_mb"] for r in recs if (r.get("result") or {}).get("peak_rss_mb")]
        h = doc["harness"]["peak_rss_mb"]
        say(f"memory: sweep of {doc['release_count']} releases in {wall:.1f} s, harness peak RSS {h} MB")
        self.rows.append(Row("6 memory", f"harness peak RSS, `sweep` {vs[0]}..{vs[-1]} ({doc['release_count']} releases)",
                             f"{h:.1f} MB", "< 200 MB", "PASS" if h < 200 else "MISS",
                             note=f"JSON harness.peak_rss_mb, one sweep ({len(recs)} probes run, {wall:.0f} s)",
                             data={"harness_peak_rss_mb": h}))
        self.rows.append(Row("6 memory", "probe worker peak RSS (probes.jsonl result.peak_rss_mb)",
                             spread(peaks, unit="MB", digits=1), "", "info", data={"peaks": peaks}))

    # -- backends: the same tiny model on each backend; emulation slowdown -------------------------
    def bench_backends(self):
        sys.path.insert(0, str(REPO / "tests"))
        import builders
        import numpy as np

        d = self.tmp / "backends"
        d.mkdir(parents=True, exist_ok=True)
        tiny = builders.save(builders.residual_overflow_model(), d / "residual_overflow.onnx")
        np.savez(d / "batch.npz", **builders.residual_norm_inputs())
        from harness.runners.docker.pool import engine_status

        docker_ok, docker_why = engine_status()
        targets = [("native x86_64", ["--arch", "x86_64", "--backend", "uv"]),
                   ("qemu aarch64 neoverse-n1", ["--arch", "aarch64", "--backend", "qemu", "--cpu", "neoverse-n1"]),
                   ("docker amd64", ["--arch", "x86_64", "--backend", "docker"]),
                   ("docker arm64 neoverse-n1", ["--arch", "aarch64", "--backend", "docker", "--cpu", "neoverse-n1"])]
        version = "1.24.1"
        for label, flags in targets:
            if "docker" in flags and not docker_ok:
                self.rows.append(Row("backends", f"probe seconds, tiny model, {label}", "not measured", "", "info",
                                     note=f"no docker engine: {docker_why}"))
                continue
            args = ["sweep", "--model", str(tiny), "--inputs", str(d / "batch.npz"), "--from", version, "--to", version,
                    *flags]
            self.bisect(args, results=self.fresh("backend-warm"))  # environment, image, sysroot in place
            probe_s, walls = [], []
            for _ in range(self.args.reps):
                wall, doc = self.bisect(args, results=self.fresh("backend"))
                probe_s.append(doc["probes"][0]["seconds"])
                walls.append(wall)
            say(f"backends: {label}: probe {statistics.median(probe_s):.2f} s, command {statistics.median(walls):.2f} s")
            self.rows.append(Row("backends", f"probe seconds (worker process), tiny model, {label}",
                                 spread(probe_s), "", "info", note=f"whole command {spread(walls)}",
                                 data={"probe_s": probe_s, "wall_s": walls}))
        # Emulation slowdown on the embedded decomposed model: inference time (run_s) under qemu vs native.
        run_s = {}
        for label, flags in (("native", ["--arch", "x86_64", "--backend", "uv"]),
                             ("qemu", ["--arch", "aarch64", "--backend", "qemu", "--cpu", "neoverse-n1"])):
            args = ["sweep", "--model", "gemma-tiny-decomposed", "--from", "1.23.2", "--to", "1.23.2", *flags,
                    "--timeout", "900"]
            self.bisect(args, results=self.fresh("emu-warm"))
            run_s[label] = []
            for _ in range(self.args.reps):
                results = self.fresh("emu")
                _, doc = self.bisect(args, results=results)
                (rec,) = self.probe_records(results, doc)
                run_s[label].append(rec["result"]["run_s"])
        ratio = statistics.median(run_s["qemu"]) / statistics.median(run_s["native"])
        self.rows.append(Row("backends", "emulation slowdown: gemma-tiny-decomposed inference (run_s), qemu / native",
                             f"{ratio:.0f}x", "", "info",
                             note=f"qemu {spread(run_s['qemu'])}; native {spread(run_s['native'])} (1.23.2, 20x512 batch)",
                             data=run_s))

    # -- 7. trace memory ---------------------------------------------------------------------------
    def bench_trace(self):
        from bigmodel import build

        say("trace: building the fp16 model (16 x MatMul 4096x4096 + residual Add) with external data")
        model, batch, weight_bytes = build(REPO / "results" / "benchmarks" / "bigmodel", log=say)
        model_mb = weight_bytes / 2**20
        budget = 256
        allowance = 256
        bound = model_mb + budget + allowance
        request = {"model": str(model), "inputs": str(batch), "outputs": [], "session_options": {},
                   "memory_limit_mb": None, "outputs_path": None}
        plain_walls, plain_peaks, trace_walls, trace_inner, trace_peaks, npasses = [], [], [], [], [], []
        for rep in range(self.reps):
            for side in (("plain", "trace") if rep % 2 == 0 else ("trace", "plain")):
                if side == "plain":
                    b = self.bare_probe(TRACE_VERSION, request)
                    plain_walls.append(b["wall_s"])
                    plain_peaks.append(b["result"]["peak_rss_mb"])
                    say(f"trace rep {rep + 1}/{self.reps}: plain inference {b['wall_s']:.2f} s, "
                        f"peak RSS {b['result']['peak_rss_mb']:.0f} MB")
                else:
                    wall, doc = self.bisect(["trace", "--model", str(model), "--inputs", str(batch), "--version",
                                             TRACE_VERSION, "--budget-mb", str(budget), "--refresh"],
                                            results=self.fresh("trace"), ok=(0,))
                    passes = doc.get("passes") or []
                    peak = max((p.get("peak_rss_mb") or 0) for p in passes) if passes else None
                    trace_walls.append(wall)
                    trace_inner.append(doc.get("seconds"))
                    trace_peaks.append(peak)
                    npasses.append(len(passes))
                    say(f"trace rep {rep + 1}/{self.reps}: bisect trace {wall:.2f} s ({len(passes)} passes, "
                        f"max pass peak RSS {peak:.0f} MB, verdict {doc.get('verdict')})")
        shutil.rmtree(self.cache / "trace-work", ignore_errors=True)  # the optimized copies of the big model
        tp, pp = max(trace_peaks), max(plain_peaks)
        self.rows.append(Row("7 trace", f"`bisect trace` max pass peak RSS, {model_mb:.0f} MiB fp16 model, --budget-mb {budget}",
                             f"{tp:.0f} MB (max over {len(trace_peaks)} traces of {npasses[0]} passes)",
                             f"<= {model_mb:.0f} + {budget} + {allowance} = {bound:.0f} MB",
                             "PASS" if tp <= bound else "MISS",
                             note=f"bound = model weights + budget + {allowance} MB allowance for the interpreter, "
                                  f"onnxruntime, numpy and the arena; plain inference peak {pp:.0f} MB "
                                  f"({'within' if pp <= bound else 'ALSO above'} the same bound)",
                             data={"trace_peaks": trace_peaks, "plain_peaks": plain_peaks, "model_mib": model_mb,
                                   "bound": bound}))
        self.rows.append(Row("7 trace", "trace max pass peak - plain inference peak",
                             f"{tp - pp:+.0f} MB", f"<= budget {budget} MB", "PASS" if tp - pp <= budget else "MISS",
                             note=f"plain inference peak RSS {spread(plain_peaks, unit='MB', digits=0)}; "
                                  f"trace pass peak {spread(trace_peaks, unit='MB', digits=0)}"))
        r = med(trace_walls) / med(plain_walls)
        self.rows.append(Row("7 trace", "trace time / plain inference time",
                             f"{r:.1f}x ({med(trace_walls):.1f} s / {med(plain_walls):.1f} s)", "", "info",
                             note=f"bisect trace {spread(trace_walls)} (its own seconds {spread(trace_inner)}); "
                                  f"plain worker {spread(plain_walls)}",
                             data={"trace_walls": trace_walls, "plain_walls": plain_walls}))

    # -- 10. real scale: gemma-300m-synthetic natively, traced and emulated (benchmarks/scale.py) -----------------
    def bench_scale(self):
        scale.run(self, self.args.scale_parts, sys.modules[__name__])

    # -- 9. the nightly at scale: a 20-model x 3-target matrix, a dashboard of 25,000 records ---------------
    def bench_dashboard(self):
        sys.path.insert(0, str(REPO / "tests"))
        import builders

        d = self.fresh("dashboard")
        text = 'description = "the nightly at scale"\nmode = "sweep"\nreleases = { since = "1.19.0" }\n'
        for i in range(DASH_MODELS):  # 20 distinct small models (files, so no registry entry is needed)
            builders.save(builders.residual_overflow_model(width=8 + i), d / f"model{i:02d}.onnx")
            text += f'[[models]]\npath = "model{i:02d}.onnx"\n'
        text += '[[targets]]\narch = "x86_64"\n[[targets]]\narch = "aarch64"\nbackend = "qemu"\n' \
                'cpus = ["neoverse-n1", "cortex-a72"]\n'
        matrix = d / "nightly-20.toml"
        matrix.write_text(text)
        cell_walls, ncells = [], None
        for _ in range(self.reps):
            t0 = time.perf_counter()
            proc = subprocess.run([*BISECT, "matrix", "cells", str(matrix), "--json"], cwd=REPO, capture_output=True,
                                  text=True, check=True)
            cell_walls.append(time.perf_counter() - t0)
            ncells = len(json.loads(proc.stdout)["include"])
        say(f"dashboard: `bisect matrix cells` of {DASH_MODELS} models x 3 targets: {ncells} cells, "
            f"{spread(cell_walls)}")
        self.rows.append(Row("9 scale", f"`bisect matrix cells`, {DASH_MODELS} models x 3 targets",
                             f"{ncells} cells in {med(cell_walls):.2f} s", f"= {DASH_MODELS * 3} cells",
                             "PASS" if ncells == DASH_MODELS * 3 else "MISS", note=f"wall {spread(cell_walls)}",
                             data={"walls": cell_walls, "cells": ncells}))
        # the history: a run per model x target (60), 25 releases, re-probed every night until 25,000 records
        versions = [f"1.{m}.{p}" for m in range(19, 44) for p in (0,)][:25]
        runs = DASH_MODELS * len(builders.HISTORY_TARGETS)
        nights = math.ceil((DASH_RECORDS / runs - 1) / (len(versions) - 1))
        root = d / "results"
        names = [f"model{i:02d}" for i in range(DASH_MODELS)]
        n = builders.write_history(root, names, versions, nights=nights, refresh=True)
        say(f"dashboard: {n} probe records in {runs} runs ({nights} nights x {len(versions)} releases)")
        import resource

        builds, walls, cpus, sizes = [], [], [], []
        for rep in range(self.reps):
            site = d / f"site{rep}"
            t0 = time.perf_counter()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            proc = subprocess.run([*BISECT, "dashboard", str(root), "-o", str(site)], cwd=REPO, capture_output=True,
                                  text=True, env={**os.environ, "COLUMNS": "300"})
            if proc.returncode != 0:
                raise RuntimeError(f"bisect dashboard exited {proc.returncode}: {proc.stderr[-2000:]}")
            walls.append(time.perf_counter() - t0)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)  # CPU of the command: what a busy machine inflates
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            m = re.search(r"\(([0-9.]+) s\)", proc.stdout)
            builds.append(float(m.group(1)) if m else None)
            sizes.append((site / "index.html").stat().st_size)
            say(f"dashboard rep {rep + 1}/{self.reps}: build {builds[-1]} s (command {walls[-1]:.2f} s, "
                f"CPU {cpus[-1]:.2f} s), page {sizes[-1] / 1e6:.2f} MB")
        site_mb = sum(f.stat().st_size for f in (d / "site0").rglob("*") if f.is_file()) / 1e6
        self.rows.append(Row("9 scale", f"`bisect dashboard` of {n:,} probe records ({runs} runs)",
                             f"{med(builds):.2f} s", "< 10 s", "PASS" if med(builds) < 10 else "MISS",
                             note=f"the command's own build time {spread(builds)}; `uv run bisect dashboard` timed "
                                  f"from outside (with uv and Python start-up) {spread(walls)}, its CPU time (user + "
                                  f"system) {spread(cpus)}; load average at the end "
                                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs",
                             data={"builds": builds, "walls": walls, "cpus": cpus, "records": n}))
        self.rows.append(Row("9 scale", "dashboard page (index.html), self-contained", f"{med(sizes) / 1e6:.2f} MB",
                             "< 5 MB", "PASS" if med(sizes) < 5e6 else "MISS",
                             note=f"the whole site with the raw data copied next to the page: {site_mb:.1f} MB",
                             data={"sizes": sizes, "site_mb": site_mb}))

    # -- 10. docker volumes ------------------------------------------------------------------------
    def bench_volumes(self):
        """A docker probe through volumes and the API against the old bind-mount probe, on the local engine; and the
        first-use cost of shipping a release's site into a volume (plain, and gzip level 1 as to a remote engine)."""
        sys.path.insert(0, str(REPO / "tests"))
        import builders
        import numpy as np

        from harness.releases.versions import Target
        from harness.request import release_listing
        from harness.runners import make_runner
        from harness.runners.docker import volumes as dv
        from harness.runners.docker.pool import engine_status

        ok, why = engine_status()
        if not ok:
            raise RuntimeError(f"no docker engine: {why}")
        d = self.tmp / "volumes"
        d.mkdir(parents=True, exist_ok=True)
        model = builders.save(builders.residual_overflow_model(), d / "residual_overflow.onnx")
        np.savez(d / "batch.npz", **builders.residual_norm_inputs())
        version = "1.24.1"
        release = next(r for r in release_listing(self.cache) if r.version == version)
        runner = make_runner("docker", Target(self.arch, "3.11"), self.cache)
        runner.provision(say)
        env = runner.prepare(release)
        engine = runner.pool.engines[0]
        request = {"model": str(model), "inputs": str(d / "batch.npz"), "outputs": [], "session_options": {},
                   "memory_limit_mb": None, "outputs_path": None, "hold_dir": None}
        runner.run(env, request, d / "warm", 300)  # volumes in place: what every probe after the first finds
        sides = {"volumes": [], "bind mounts": []}
        for i in range(self.reps):
            order = ["volumes", "bind mounts"] if i % 2 == 0 else ["bind mounts", "volumes"]
            for side in order:
                work = self.fresh("probe")
                t0 = time.perf_counter()
                if side == "volumes":
                    out = runner.run(env, request, work, 300)
                else:
                    out = _bind_mount_probe(engine.client, engine.images[self.arch], env.path / "site", request, work)
                sides[side].append(time.perf_counter() - t0)
                if (out.get("stage") if isinstance(out, dict) else (out.result or {}).get("stage")) != "done":
                    raise RuntimeError(f"the {side} probe did not finish: {out}")
        ratio = med(sides["volumes"]) / med(sides["bind mounts"])
        say(f"volumes: probe {med(sides['volumes']):.2f} s through volumes, {med(sides['bind mounts']):.2f} s with "
            f"bind mounts: {ratio:.2f}x")
        self.rows.append(Row("10 volumes", "docker probe through volumes / old bind-mount probe (warm, local engine)",
                             f"{ratio:.2f}x", "", "info",
                             note=f"volumes {spread(sides['volumes'])}; bind mounts {spread(sides['bind mounts'])} "
                                  f"(tiny model, {version}, interleaved)", data=sides))
        site = env.path / "site"
        for compress, label in ((False, "plain tar (a local engine)"), (True, "gzip -1 (a remote engine)")):
            secs, mbs = [], []
            for _ in range(self.cold_reps):
                cache = dv.VolumeCache(engine.volumes.engine_id, engine.volumes.lock_dir)
                name = dv.volume_name("site", self.arch, "py3.11", runner.package.env_name(version),
                                      dv.tree_digest(site)[:16])
                dv._remove_volume(engine.client, name)
                shipped = dv.site_volume(engine.client, cache, engine.images[self.arch], site, self.arch, "3.11",
                                         runner.package.env_name(version), compress)
                secs.append(shipped.seconds)
                mbs.append(shipped.bytes / 1e6)
            self.rows.append(Row("10 volumes", f"first use: shipping the site of {version} into a volume, {label}",
                                 f"{med(secs):.1f} s, {med(mbs):.0f} MB", "", "info", note=f"seconds {spread(secs)}",
                                 data={"seconds": secs, "mb": mbs}))
        runner.pool.close()


    # -- report ------------------------------------------------------------------------------------
    def report(self, command: str, wall: float, failures: dict) -> str:
        head = ["#", "target", "measured", "bound", "status"]
        lines = [
            f"ortbisect benchmarks · {platform.machine()} · {os.cpu_count()} CPUs · Python {platform.python_version()} · "
            f"{'quick' if self.quick else 'full'} · {self.reps} reps ({self.cold_reps} for installing runs) · {time.strftime('%Y-%m-%d %H:%M:%S')}",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "|".join("---" for _ in head) + "|",
        ]
        for r in self.rows:
            lines.append("| " + " | ".join([r.section, r.target, r.measured, r.bound, r.status]) + " |")
        lines.append("")
        lines.append("Notes:")
        for r in self.rows:
            if r.note:
                lines.append(f"- [{r.section}] {r.target}: {r.note}")
        for name, msg in failures.items():
            lines.append(f"- [{name}] FAILED TO MEASURE: {msg}")
        misses = [r for r in self.rows if r.status == "MISS"]
        lines.append("")
        lines.append(f"{sum(r.status == 'PASS' for r in self.rows)} PASS, {len(misses)} MISS, "
                     f"{len(failures)} not measured · command: {command} · benchmark wall {wall:.0f} s")
        return "\n".join(lines)


def _bind_mount_probe(client, image: str, site: Path, request: dict, work: Path) -> dict:
    """The docker probe as it was before volumes (kept here only to measure against): the site, model, batch, worker
    and work directory bind-mounted from this machine."""
    model, inputs = Path(request["model"]), Path(request["inputs"])
    work.mkdir(parents=True, exist_ok=True)
    inside = {**request, "model": f"/in/model/{model.name}", "inputs": "/in/inputs.npz",
              "result_path": "/work/result.json"}
    (work / "request.json").write_text(json.dumps(inside))
    binds = {str(site): {"bind": "/site", "mode": "ro"}, str(model.parent): {"bind": "/in/model", "mode": "ro"},
             str(inputs): {"bind": "/in/inputs.npz", "mode": "ro"}, str(WORKER): {"bind": "/harness/worker.py", "mode": "ro"},
             str(work): {"bind": "/work", "mode": "rw"}}
    c = client.containers.create(image, ["python3", "-s", "/harness/worker.py", "/work/request.json"], volumes=binds,
                                 environment={"PYTHONPATH": "/site", "PYTHONNOUSERSITE": "1"}, network_mode="none",
                                 cap_drop=["ALL"], security_opt=["no-new-privileges"], init=True, detach=True,
                                 mem_limit="8g", memswap_limit="8g", pids_limit=4096)
    try:
        c.start()
        c.wait(timeout=300)
        c.reload()
        c.logs(stdout=True, stderr=False)
        c.logs(stdout=False, stderr=True)
    finally:
        c.remove(force=True, v=True)
    return json.loads((work / "result.json").read_text())


def _v(text: str):
    from packaging.version import Version

    return Version(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="by-hand loop on 4 releases, extrapolated")
    p.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(NAMES)}")
    p.add_argument("--reps", type=int, default=3, help="repetitions of every timing (median reported)")
    p.add_argument("--cold-reps", type=int, default=3,
                   help="repetitions of the runs that install environments (prefetch, cold bisect run)")
    p.add_argument("--bench-cache", default=os.environ.get("ORTBISECT_BENCH_CACHE", "~/.cache/ortbisect-bench"))
    p.add_argument("--keep-tmp", action="store_true", help="keep the scratch directories")
    p.add_argument("--scale-parts", default=",".join(scale.DEFAULT_PARTS),
                   help=f"scale: comma-separated subset of {', '.join(scale.PARTS)} (emu-run: 19 min to over an "
                        "hour on 2 cores, by host; emu-batch hours)")
    args = p.parse_args(argv)
    args.scale_parts = tuple(n.strip() for n in args.scale_parts.split(",") if n.strip())
    if set(args.scale_parts) - set(scale.PARTS):
        p.error(f"--scale-parts: unknown {sorted(set(args.scale_parts) - set(scale.PARTS))}; "
                f"choose from {', '.join(scale.PARTS)}")
    only = [n.strip() for n in args.only.split(",") if n.strip()] or list(NAMES)
    unknown = set(only) - set(NAMES)
    if unknown:
        p.error(f"--only: unknown {sorted(unknown)}; choose from {', '.join(NAMES)}")
    if args.reps < 1 or args.cold_reps < 1:
        p.error("--reps must be at least 1")
    command = "uv run python benchmarks/run.py " + " ".join(sys.argv[1:] if argv is None else argv)
    bench = Bench(args)
    say(f"benchmarks {', '.join(only)}; bench cache {bench.cache}; scratch {bench.tmp}")
    failures = {}
    try:
        if set(only) - NO_ENVS - OWN_ENVS:
            bench.warm_up()
        # overhead first: its warm `bisect run`s also give the real probe count
        for name in ("overhead", "probes", "parallel", "memory", "prefetch", "trace", "backends", "byhand",
                     "dashboard", "volumes", "scale", "margin", "ray"):
            if name not in only:
                continue
            say(f"=== {name} ===")
            try:
                getattr(bench, f"bench_{name}")()
            except Exception as exc:  # one broken measurement must not lose the others
                failures[name] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                say(f"{name} failed: {exc}")
    finally:
        if not args.keep_tmp:
            shutil.rmtree(bench.tmp, ignore_errors=True)
    wall = time.perf_counter() - T_START
    text = bench.report(command, wall, failures)
    print(text)
    out = REPO / "results" / "benchmarks"
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    doc = {"command": command, "quick": args.quick, "reps": args.reps, "wall_s": wall, "cpus": os.cpu_count(),
           "machine": platform.machine(), "generated": time.strftime("%Y-%m-%dT%H:%M:%S"), "failures": failures,
           "rows": [r.__dict__ for r in bench.rows], "raw": bench.raw}
    for name in (f"bench-{stamp}", "latest"):
        (out / f"{name}.json").write_text(json.dumps(doc, indent=1, default=str))
        (out / f"{name}.md").write_text(text + "\n")
    say(f"written {out / f'bench-{stamp}.json'} and .md (also latest.json / latest.md)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
