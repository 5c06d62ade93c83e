"""Probes as Ray tasks on a cluster (`--ray-address`): the driver keeps the search and writes every record.

Each probe is one task. The node runs it with its own local runner (the backend the run asked for: uv, or
QEMU where --backend qemu asks for emulation) and its own environment cache (`ORTBISECT_NODE_CACHE`, else
the XDG cache), and gives back the record (JSON text) and the outputs (.npz bytes) through the object
store. The model, its data files, the batch and the margin model are put into the object store once per
run; a node writes them into its cache under their sha256, checked on arrival. No shared filesystem is
needed, nor ortbisect on the nodes: the job's runtime environment ships the driver's harness and what its
probes import (harness.executors.shipping), and a node serves only when the harness it imports has the
driver's source digest.

Placement: a node says which arch its probes are for with the Ray label `ortbisect/arch`
(`ray start --labels ortbisect/arch=aarch64`). A node without it is asked once, by a tiny task pinned to
it, and serves the arch its machine reports, so a cluster works as it is. A node serves a target whose arch
is not its machine's only by emulation, and only with `--backend qemu`. Each task carries the label
selector `ray.io/node-id in(...)` of the nodes that serve its target: a retry after a lost node goes to
another of them, never to a node of another arch.

Faults: a task whose worker or node is lost is retried by Ray (MAX_RETRIES); its first try is never
recorded, only the one that returns. A task lost past its retries, or one that failed on the node, is a
*skip* with why, never a verdict. `stop()` (Ctrl-C) cancels every task in flight; the records of the
finished ones are on disk already.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import io
import json
import os
import platform
import socket
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import harness
from harness.errors import HarnessError, UsageError
from harness.executors.shipping import runtime_env, source_digest
from harness.results.evidence import EvidenceError, ProbeRecord
from harness.results.store import write_atomic
from harness.vocabulary import default_cache_dir

ARCH_LABEL = "ortbisect/arch"
NODE_ID_LABEL = "ray.io/node-id"
NODE_CACHE_ENV = "ORTBISECT_NODE_CACHE"
MAX_RETRIES = 3  # tries after the first for a task whose worker or node was lost
SURVEY_TIMEOUT_S = 300.0  # a node's first task waits for its runtime environment (minutes, cold, emulated)
MAX_OUTPUTS_BYTES = 2 << 30
SHIPPED = "ray-inputs"  # the node cache's folder of shipped models and batches, by digest


@dataclass(frozen=True)
class Node:
    """A node of the cluster as it answered the driver: what a record that ran on it says."""

    node_id: str
    address: str
    hostname: str
    machine: str  # what its CPU is (platform.machine())
    arch: str  # the arch its probes are for: the label, else its machine
    cpu_model: str
    cpu_flags: str
    harness: str  # the ortbisect version its workers import
    digest: str  # the source digest of the harness its workers import (shipping.source_digest)


@dataclass(frozen=True)
class RunnerSpec:
    """What a node needs to make the run's runner: the backend the driver chose, the target, CPU and package."""

    backend: str
    target: object
    cpu: str | None
    package: object


@dataclass(frozen=True)
class Shipped:
    """A file of the job in the object store: its path under the job's folder, its sha256, its reference."""

    rel: str
    sha256: str
    ref: object


def cpu_facts() -> dict:
    """This machine's CPU model and flags as /proc/cpuinfo says them ('' where it says nothing)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []

    def field(*keys: str) -> str:
        return next((ln.split(":", 1)[1].strip() for ln in lines if ln.split(":")[0].strip() in keys), "")

    return {"cpu_model": field("model name", "CPU part"), "cpu_flags": field("flags", "Features")}


def _node_facts() -> dict:
    return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
            "machine": platform.machine(), "harness": harness.__version__, "digest": source_digest(), **cpu_facts()}


_survey = ray.remote(_node_facts)


def node_cache() -> Path:
    return Path(os.environ.get(NODE_CACHE_ENV) or default_cache_dir())


def _materialize(cache: Path, shipped: list[Shipped]) -> Path:
    """The job's files in this node's cache, each checked against its sha256 (what arrives is not trusted to be
    what was sent); a file already there with that digest is not fetched again."""
    key = hashlib.sha256(json.dumps([(s.rel, s.sha256) for s in shipped]).encode()).hexdigest()[:32]
    folder = cache / SHIPPED / key
    for s in shipped:
        rel = PurePosixPath(s.rel)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise ValueError(f"{s.rel!r} is not a path inside the job's folder")
        dest = folder / rel
        if dest.is_file() and not dest.is_symlink() and _sha256_file(dest) == s.sha256:
            continue
        data = ray.get(s.ref)
        if hashlib.sha256(data).hexdigest() != s.sha256:
            raise ValueError(f"{s.rel} arrived with another sha256 than the driver sent")
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(dest, data)
    return folder


def _sha256_file(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


_runners: dict[RunnerSpec, object] = {}  # one provisioned runner per spec in a worker process
_runners_lock = threading.Lock()


def _node_runner(spec: RunnerSpec, cache: Path):
    from harness.runners import make_runner

    with _runners_lock:
        runner = _runners.get(spec)
        if runner is None:
            runner = make_runner(spec.backend, spec.target, cache, spec.cpu, spec.package)
            runner.provision()
            _runners[spec] = runner
        return runner


def _probe_task(probe, spec: RunnerSpec, release, job, shipped: list[Shipped], paths: dict[str, str],
                want_outputs: bool) -> tuple[str, bytes | None]:
    """On the node: the job's files from the object store, the probe by the node's runner; the record as JSON
    text and the outputs' bytes."""
    cache = node_cache()
    folder = _materialize(cache, shipped)
    local = {role: folder / rel for role, rel in paths.items()}
    # what later probes reuse of the margin is kept in this node's own cache, laid out as the driver's is
    margin = job.margin and dataclasses.replace(
        job.margin, model=local["margin"],
        memo_dir=job.margin.memo_dir and cache / "margin" / job.margin.model_digest[:16])
    job = dataclasses.replace(job, model=local["model"], inputs=local["inputs"], margin=margin)
    runner = _node_runner(spec, cache)
    with tempfile.TemporaryDirectory(prefix=f"ortbisect-{release.version}-") as scratch:
        out = Path(scratch) / "outputs.npz" if want_outputs else None
        record = probe(runner, release, job, Path(scratch) / "work", out)
        data = out.read_bytes() if out is not None and out.is_file() else None
    facts = _node_facts()
    record["provenance"] = {**record.get("provenance", {}),
                            "node": {"id": facts["node_id"], "hostname": facts["hostname"],
                                     "arch": facts["machine"], "cpu_model": facts["cpu_model"],
                                     "cpu_flags": facts["cpu_flags"]}}
    return json.dumps(record), data


_probe_remote = ray.remote(_probe_task)


def _line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[-1].strip()[:300]


def serving_nodes(nodes: list[Node], arch: str, emulated: bool, digest: str) -> list[Node]:
    """The nodes that run `arch` probes: of that arch (label, else machine), on a machine of that arch unless the
    run emulates it, and importing the driver's own harness (its source digest)."""
    return [n for n in nodes if n.arch == arch and (n.machine == arch or emulated) and n.digest == digest]


def no_node_serves(nodes: list[Node], left_out: list[str], arch: str, emulated: bool) -> str:
    """Why no node runs `arch` probes, in one line: every node as it answered, and those that did not."""
    mine = source_digest()

    def said(n: Node) -> str:
        other = "" if n.digest == mine else f", another harness (ortbisect {n.harness}, sources {n.digest[:12]})"
        return f"{n.hostname} ({n.arch}{'' if n.machine == n.arch else ' on ' + n.machine}{other})"

    seen = ", ".join([*(said(n) for n in nodes), *left_out]) or "no node with a CPU"
    from harness.runners import emulators

    how = " under emulation" if emulated else " natively"
    hint = f"; a node says which arch it runs with: ray start --labels {ARCH_LABEL}={arch}"
    if not emulated and emulators(arch):
        hint += f"; to emulate {arch} on nodes of another arch: {emulators(arch)}"
    return f"no node of the cluster runs {arch} probes{how} (nodes: {seen}){hint}"


class RayExecutor:
    """Probes of one run as Ray tasks on the nodes that serve its target (see the module docstring)."""

    remote = True
    cpus_per_probe = 1  # each task asks Ray for one CPU and its session uses one thread

    def __init__(self, address: str, nodes: list[Node], serving: list[Node], spec: RunnerSpec,
                 model_files: tuple[Path, ...]):
        self.address = address
        self.nodes = nodes
        self.serving = serving
        self.spec = spec
        self.model_files = model_files
        self._selector = {NODE_ID_LABEL: f"in({','.join(n.node_id for n in serving)})"}
        self._lock = threading.Lock()
        self._inflight: set = set()
        self._shipped: dict[tuple, Shipped] = {}  # (path, size, mtime) -> in the object store
        self._stopped = threading.Event()

    # -- connecting and placing ------------------------------------------------------------------

    @classmethod
    def connect(cls, address: str, runner, model_files: tuple[Path, ...] = ()) -> RayExecutor:
        """Join the cluster at `address` (`auto`: the one this machine belongs to), ask each node once what it
        is, and keep the nodes that serve the runner's target; refuse in one line where none does."""
        # Ray's uv hook would start every worker under `uv run` in the session's folder, a project without ray
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        _init(address)
        nodes, left_out = survey()
        arch = runner.target.arch
        emulated = runner.emulates(arch)
        serving = serving_nodes(nodes, arch, emulated, source_digest())
        if not serving:
            raise UsageError(f"--ray-address {address}: {no_node_serves(nodes, left_out, arch, emulated)}")
        spec = RunnerSpec(runner.backend, runner.target, runner.cpu, runner.package)
        return cls(address, nodes, serving, spec, tuple(model_files))

    # -- one probe -------------------------------------------------------------------------------

    def probe(self, probe, runner, release, job, workdir: Path, outputs_path: Path | None) -> dict:
        """`probe` on a node that serves the target; the record as the driver keeps it (validated as evidence
        from another machine), the outputs written to `outputs_path`."""
        t0 = time.perf_counter()
        try:
            shipped, paths = self._ship(job)
        except OSError as exc:
            raise HarnessError(f"cannot read the job's files to send to the cluster: {exc}") from None
        ref = _probe_remote.options(num_cpus=self.cpus_per_probe, max_retries=MAX_RETRIES, retry_exceptions=False,
                                    label_selector=self._selector).remote(
            probe, self.spec, release, job, shipped, paths, outputs_path is not None)
        with self._lock:
            if self._stopped.is_set():
                ray.cancel(ref, force=True)
            self._inflight.add(ref)
        try:
            text, data = self._wait(ref)
        except ray.exceptions.TaskCancelledError:
            return self._skip(runner, release, t0, "cancelled")
        except ray.exceptions.RayTaskError as exc:
            return self._skip(runner, release, t0, f"the probe failed on its node: {_line(exc)}")
        except ray.exceptions.RayError as exc:  # a worker or node lost past the retries, an object lost
            return self._skip(runner, release, t0, f"the cluster lost the probe after {MAX_RETRIES + 1} tries: "
                                                   f"{_line(exc)}")
        finally:
            with self._lock:
                self._inflight.discard(ref)
        return self._received(runner, release, t0, text, data, outputs_path)

    def _wait(self, ref):
        # never an unbounded wait: stop() cancels the task and the next get raises TaskCancelledError
        while True:
            ready, _ = ray.wait([ref], timeout=1.0)
            if ready or self._stopped.is_set():
                return ray.get(ref, timeout=30 if not ready else None)

    def _received(self, runner, release, t0: float, text, data, outputs_path: Path | None) -> dict:
        """The node's record, parsed as any record from another machine; a record that does not parse, or is
        not of the release asked for, is a skip that says so, never a verdict."""
        try:
            record = json.loads(text) if isinstance(text, str) else None
            ProbeRecord.parse(record)
        except (ValueError, EvidenceError) as exc:
            return self._skip(runner, release, t0, f"the node's record does not parse: {_line(exc)}")
        if record["version"] != release.version:
            return self._skip(runner, release, t0, f"the node sent the record of {record['version'][:64]!r}, "
                                                   f"not {release.version}")
        if data is not None and outputs_path is not None:
            why = _outputs_problem(data)
            if why:
                record["outputs_saved"] = f"not saved: {why}"
            else:
                try:
                    outputs_path.parent.mkdir(parents=True, exist_ok=True)
                    write_atomic(outputs_path, data)
                except OSError as exc:
                    record["outputs_saved"] = f"not saved: {exc.strerror or exc}"
        return record

    def _skip(self, runner, release, t0: float, why: str) -> dict:
        return {"version": release.version, "package": runner.package.name, "provenance": runner.provenance(),
                "status": "skip", "reason": why, "seconds": time.perf_counter() - t0,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def _ship(self, job) -> tuple[list[Shipped], dict[str, str]]:
        """The job's files in the object store (each file put once per run) and where each lands on the node."""
        model = Path(job.model)
        files = [(model.name, model)]
        if self.model_files and model == Path(self.model_files[0]):
            files += [(str(PurePosixPath(p.relative_to(model.parent))), p) for p in self.model_files[1:]]
        files.append((f"inputs/{Path(job.inputs).name}", Path(job.inputs)))
        paths = {"model": model.name, "inputs": files[-1][0]}
        if job.margin is not None:
            files.append(("margin/margin.onnx", Path(job.margin.model)))
            paths["margin"] = "margin/margin.onnx"
        return [self._put(rel, path) for rel, path in files], paths

    def _put(self, rel: str, path: Path) -> Shipped:
        st = path.stat()
        key = (str(path.resolve()), rel, st.st_size, st.st_mtime_ns)
        with self._lock:
            if key not in self._shipped:
                data = path.read_bytes()
                self._shipped[key] = Shipped(rel, hashlib.sha256(data).hexdigest(), ray.put(data))
            return self._shipped[key]

    def stop(self) -> None:
        """Cancel every task in flight (Ctrl-C): none of them is recorded."""
        with self._lock:
            self._stopped.set()
            for ref in list(self._inflight):
                ray.cancel(ref, force=True)


def _outputs_problem(data) -> str | None:
    """Why the node's outputs are not an .npz of arrays (loaded without pickles), or None."""
    import numpy as np

    if not isinstance(data, bytes) or len(data) > MAX_OUTPUTS_BYTES:
        return "the node's outputs are not an .npz of a size this run takes"
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            for name in arrays.files:
                arrays[name]
    except Exception as exc:  # whatever a damaged or hostile file raises in numpy's reader
        return f"the node's outputs are not an .npz of arrays: {_line(exc)}"
    return None


_connected: str | None = None


def _init(address: str) -> None:
    global _connected
    if ray.is_initialized():
        if _connected == address:
            return
        ray.shutdown()
    try:
        # the job's workers import the driver's harness and its probe path's packages, not the node's own
        ray.init(address=address, logging_level="WARNING", log_to_driver=False, configure_logging=True,
                 runtime_env=runtime_env())
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise HarnessError(f"--ray-address {address}: no Ray cluster answers there: {_line(exc)}") from None
    if _connected is None:
        # disconnected before the interpreter's own teardown: Ray's exit handler, left to itself, took 0.5 s more
        atexit.register(ray.shutdown)
    _connected = address
    _cluster_errors_to_stderr()


def _cluster_errors_to_stderr() -> None:
    """Ray's driver prints the cluster's errors (a raylet lost, say) on stdout, where a --json document must be
    alone: they go to stderr instead, with the progress lines."""
    from ray._private import worker as ray_worker

    printer = getattr(ray_worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "to_stderr", False):
        return

    def to_stderr(data, ignore_prefix):
        printer({**data, "is_err": True}, ignore_prefix)

    to_stderr.to_stderr = True
    ray_worker.print_to_stdstream = to_stderr


def survey() -> tuple[list[Node], list[str]]:
    """Every live node that can take a probe (a CPU), asked once by a task pinned to it, in the job's runtime
    environment; and, one line each, the nodes left out: one that does not answer in time, cannot set up that
    environment, or answers with what is not a node's facts."""
    alive = [n for n in ray.nodes() if n.get("Alive") and (n.get("Resources") or {}).get("CPU", 0) >= 1]
    refs = {_survey.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
            .remote(): n for n in alive}
    ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=SURVEY_TIMEOUT_S) if refs else ([], [])
    nodes, left_out = [], []

    def leave_out(info: dict, why: str) -> None:
        left_out.append(f"{_printable(str(info.get('NodeManagerAddress')))[:64]} ({why})")

    for ref in late:
        leave_out(refs[ref], f"no answer in {SURVEY_TIMEOUT_S:.0f} s")
        ray.cancel(ref, force=True)
    for ref in ready:
        info = refs[ref]
        try:
            facts = ray.get(ref)
        except ray.exceptions.RuntimeEnvSetupError as exc:
            leave_out(info, f"cannot set up the job's runtime environment: {_printable(_line(exc))}")
            continue
        except ray.exceptions.RayError as exc:
            leave_out(info, f"cannot answer: {_printable(_line(exc))}")
            continue
        if not (isinstance(facts, dict) and all(isinstance(facts.get(k), str) for k in
                                                ("node_id", "hostname", "machine", "harness", "digest",
                                                 "cpu_model", "cpu_flags"))):
            leave_out(info, "its answer is not a node's facts")
            continue
        label = (info.get("Labels") or {}).get(ARCH_LABEL)
        nodes.append(Node(info["NodeID"], str(info.get("NodeManagerAddress")), _printable(facts["hostname"])[:255],
                          _printable(facts["machine"])[:64], _printable(str(label or facts["machine"]))[:64],
                          facts["cpu_model"][:255], facts["cpu_flags"][:4096], _printable(facts["harness"])[:64],
                          _printable(facts["digest"])[:64]))
    return sorted(nodes, key=lambda n: n.node_id), sorted(left_out)


def _printable(text: str) -> str:
    """What another machine said, as one line of text (a control character shows as '?')."""
    return "".join(c if c.isprintable() else "?" for c in text)
