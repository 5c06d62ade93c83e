"""Container backend: one throw-away container per probe, on one Docker engine or a pool of them.

The probe image (`dockerfiles/`) holds only CPython; the release's wheels are
a host-resolved site directory (`sites`) shipped to each engine once, into a
named volume (`docker_volumes`), with the model and the batch in another;
the worker and its request are copied into each container and the result
copied out, all through the Docker API. Nothing of the client's file system
is mounted, so an engine may be another machine's (`--docker-host
ssh://user@host`, tcp://, a docker context; default: DOCKER_HOST).

The engine is asked its arch and CPU flags (`docker_pool`): a target runs
natively on an engine of its arch; only when the engine has another, or `--cpu`
asks for an emulated CPU model, does it run under the engine's binfmt QEMU
(QEMU_CPU). Containers have no network and a memory limit, and are removed
afterwards. Each probe records the engine it ran on; an engine that drops out
turns its probe into a *skip*. One engine per run (harness.runners.make_runner
refuses a second): several machines are a Ray cluster's (harness.executors).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import uuid
from pathlib import Path

from harness.errors import EnvironmentSkip, UsageError
from harness.releases.packages import Package
from harness.releases.versions import Release
from harness.runners.base import WORKER, Check, Environment, Runner, native_arch
from harness.runners.docker import engine as de
from harness.runners.docker import pool as dp
from harness.runners.docker import volumes as dv
from harness.runners.provision import ENGINE_SCRIPT, Log, ProvisionError, quiet
from harness.runners.provision import qemu as qp
from harness.runners.provision.binfmt import binfmt_status
from harness.runners.sites import discard_site, prepare_site
from harness.runners.workers import ProcessOutcome, read_result, with_deadline

MEMORY_LIMIT = os.environ.get("ORTBISECT_DOCKER_MEMORY", "8g")
#: session options naming a file the session writes, and its name inside the container's /work
SESSION_FILES = {"optimized_model_filepath": "optimized.onnx", "session_log_path": "session.log"}
RUN_LABEL_ENV = "ORTBISECT_RUN_LABEL"  # names this invocation's containers (a CI job id, say); default: made up
ENGINE_STATE = "/tmp/ortbisect-docker"  # where the engine script keeps a private engine's state
ARCHS = ("x86_64", "aarch64")


def _engine_script(args: str) -> str | None:
    """The repository's engine script run with `args`, by absolute path (it works from any directory)."""
    return f"bash {shlex.quote(str(ENGINE_SCRIPT))} {args}" if ENGINE_SCRIPT.is_file() else None  # none in a wheel


class DockerRunner(Runner):
    backend = "docker"
    cpus = qp.KNOWN_CPUS  # a foreign arch runs under the engine's binfmt qemu-aarch64, with QEMU_CPU
    provenance_extra = ("image",)
    takes_engines = True

    def __init__(self, target, cache_dir, cpu=None):
        self.cpu_asked = cpu
        # until the engines are asked: the local engine's guess (provision decides)
        guess = qp.DEFAULT_CPU if target.arch == "aarch64" and native_arch() != "aarch64" else None
        super().__init__(target, cache_dir, cpu or guess)
        self.pool: dp.Pool | None = None
        self.image: str | None = None
        # every container this invocation makes carries it: `docker ps -a --filter label=org.ortbisect.run=...`
        self.run_label = os.environ.get(RUN_LABEL_ENV) or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    @classmethod
    def archs(cls, host: str | None = None) -> tuple[str, ...]:
        return ARCHS

    @classmethod
    def emulates(cls, arch: str) -> bool:
        """aarch64 may run emulated (on an x86_64 engine), so --cpu may name its model; x86_64 never is."""
        return arch == "aarch64"

    @classmethod
    def cpu_problem(cls, cpu: str) -> str | None:
        return qp.cpu_problem(cpu, cls.cpus)

    @classmethod
    def doctor(cls, cache_dir: Path, engines: tuple[str, ...] = ()) -> list[Check]:
        rows = []
        if not engines:
            b = binfmt_status()
            if not b["mounted"]:
                rows.append(Check("binfmt_misc", False, "not mounted (needed by arm64 containers only)",
                                  "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc"))
            else:
                reg = b["registered"]
                rows.append(Check("binfmt qemu-aarch64", bool(reg),
                                  f"interpreter {b['interpreter']} flags {b['flags']}" if reg
                                  else "not registered (arm64 containers only)",
                                  _engine_script("binfmt") or "register qemu-aarch64 in binfmt_misc with flag F"))
        for host in engines or (None,):
            ok, reason = dp.engine_status(host)
            if not ok and host is None and not shutil.which("docker"):
                reason += "; no docker client either"
            start = _engine_script(f"start {ENGINE_STATE}")
            fix = (f'eval "$({start})" (as root; Debian: installs docker.io)' if start and host is None
                   else "start a Docker engine and export DOCKER_HOST" if host is None
                   else f"check that `docker -H {dp.split_slots(host)[0]} info` answers (ssh keys, the engine running)")
            rows.append(Check("docker engine" if host is None else f"docker engine {host}", ok, reason, fix))
            if ok and host is not None:
                rows.append(_engine_row(host))
        return rows

    @classmethod
    def describe(cls, provenance: dict, seen_cpu: str | None, version: str, script: str) -> dict:
        cpu = provenance.get("cpu")
        python = provenance.get("python") or "3.11"
        platform = de.docker_platform(provenance.get("arch") or native_arch())
        inside = f"{shlex.join(['pip', 'install', *Package().install_args(version)])} && python {shlex.quote(script)}"
        # values of a record, quoted: the command is for a reader to paste
        reproduce = (f"docker run --rm --platform {shlex.quote(platform)}"
                     + (f" -e {shlex.quote(f'QEMU_CPU={cpu}')}" if cpu else "")
                     + f' -v "$PWD:/w" -w /w {shlex.quote(f"python:{python}-slim")} sh -c {shlex.quote(inside)}')
        engine = provenance.get("engine") or {}
        on = f" on engine {engine.get('name')} ({engine.get('arch')})" if engine else ""
        return {"how": f"container {provenance.get('image', '?')}{on}" + (f", emulated CPU {cpu}" if cpu else ""),
                "cpu_model": seen_cpu or "?", "reproduce": reproduce}

    def provision(self, log: Log = quiet) -> None:
        """Every engine asked what it is; the ones that run the target chosen, each with its probe image."""
        if self.pool is not None:
            return
        lock_dir = self.cache_dir / "docker-volumes"
        engines = []
        for host in self.engines or (None,):
            try:
                engines.append(dp.connect(host, lock_dir))
            except dp.EngineError as exc:
                flag = f"--docker-host {host}" if host else "--backend docker"
                raise UsageError(f"{flag}: {exc} (see `bisect doctor`)") from None
        arch = self.target.arch
        native = [e for e in engines if e.arch == arch]
        if self.cpu_asked:  # told to emulate: the engines of another arch
            chosen = [e for e in engines if e.arch != arch]
            if not chosen:
                raise UsageError(f"--cpu {self.cpu_asked}: every docker engine runs {arch} natively; leave out --cpu")
        else:
            chosen = native or engines
        for e in engines:
            if e not in chosen:
                log(f"docker engine {e.name} ({e.arch}) left out: " + (
                    f"it runs {arch} natively and --cpu asks for emulation" if self.cpu_asked
                    else f"another engine runs {arch} natively (give --cpu to emulate on it)"))
        emulated = chosen[0].arch != arch
        self.cpu = (self.cpu_asked or qp.DEFAULT_CPU) if emulated and arch == "aarch64" else None
        for e in chosen:
            try:
                e.images[arch] = de.ensure_image(e.client, arch, self.cache_dir, log=log)
                if e.arch in ARCHS:
                    e.images.setdefault(e.arch, de.ensure_image(e.client, e.arch, self.cache_dir, log=log))
                    e.cpu = _cpuinfo(e.client, e.images[e.arch], e.arch, {de.LABEL_RUN: self.run_label})
            except (de.DockerEngineError, ProvisionError) as exc:
                raise UsageError(f"--backend docker: engine {e.name}: {exc}".splitlines()[0]) from None
            except Exception as exc:  # the SDK's or requests' error: the engine went away while it was asked
                raise UsageError(f"--backend docker: engine {e.name} stopped answering: {type(exc).__name__}: "
                                 f"{exc}".splitlines()[0]) from None
            log(f"docker engine {e.name}: {e.arch}, {e.info.get('NCPU')} CPUs, Docker {e.info.get('ServerVersion')}, "
                f"{e.slots} probes at once, {arch} probes " + (f"emulated ({self.cpu})" if emulated else "native"))
        log(f"containers labelled {de.LABEL_RUN}={self.run_label}")
        self.image = chosen[0].images[arch]
        self.pool = dp.Pool(chosen)

    def provenance(self) -> dict:
        if self.pool is None:
            raise RuntimeError("the docker runner is used before provision()")
        return {**super().provenance(), "image": self.image}

    def prepare(self, release: Release) -> Environment:
        return prepare_site(self.cache_dir, self.target, release, self.package)

    def discard(self, env: Environment) -> None:
        discard_site(env)

    def worker_site(self, env: Environment) -> str:
        return "/site"  # the site's volume, mounted read-only

    def run(self, env: Environment, request: dict, workdir: Path, timeout: float) -> ProcessOutcome:
        """The worker in a container of the engine with the most room; a skip when that engine drops out."""
        if self.pool is None:
            raise RuntimeError("the docker runner is used before provision()")
        try:
            engine = self.pool.acquire()
        except dp.EngineError as exc:
            raise EnvironmentSkip(str(exc)) from None
        try:
            out = self._run_on(engine, env, request, workdir, timeout)
        except Exception as exc:  # the SDK's and requests' errors: which one depends on where the engine went
            why = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
            if not engine.answers():
                self.pool.drop(engine, why)
                raise EnvironmentSkip(f"docker engine {engine.name} dropped out during the probe ({why})") from None
            raise EnvironmentSkip(f"docker engine {engine.name} failed the probe ({why})") from None
        finally:
            self.pool.release(engine)
        if out.signal is not None and not engine.answers():  # its container stopped with the engine
            self.pool.drop(engine, f"stopped while a probe ran (signal {out.signal})")
            raise EnvironmentSkip(f"docker engine {engine.name} dropped out during the probe")
        return out

    def _run_on(self, engine: dp.Engine, env: Environment, request: dict, workdir: Path,
                timeout: float) -> ProcessOutcome:
        arch, client = self.target.arch, engine.client
        image = engine.images[arch]
        compress = engine.remote
        site = dv.site_volume(client, engine.volumes, image, env.path / "site", arch, self.target.python,
                              self.package.env_name(env.version), compress)
        inputs, model_in, inputs_in = dv.inputs_volume(client, engine.volumes, image, Path(request["model"]),
                                                       Path(request["inputs"]), compress)
        # files the session writes (the optimized graph, its log) are written in /work and brought back
        opts = dict(request.get("session_options") or {})
        written = {key: Path(opts[key]) for key in SESSION_FILES if opts.get(key)}
        opts.update({key: f"/work/{SESSION_FILES[key]}" for key in written})
        # the deadline ends a worker whose harness died: its parent in the container is the container's init
        inside = {**with_deadline(request, timeout), "model": model_in, "inputs": inputs_in, "result_path": "/work/result.json",
                  "outputs_path": "/work/outputs.npz" if request.get("outputs_path") else None, "hold_dir": None,
                  "session_options": opts, "margin": None}  # the margin model is not shipped to engines
        workdir.mkdir(parents=True, exist_ok=True)
        for name in ("result.json", "outputs.npz", *SESSION_FILES.values()):
            (workdir / name).unlink(missing_ok=True)
        child_env = {"PYTHONPATH": "/site", "PYTHONNOUSERSITE": "1"}
        if self.cpu:
            child_env["QEMU_CPU"] = self.cpu
        res = de.run_container(client, image, ["python3", "-S", "-s", "-B", "/harness/worker.py", "/work/request.json"],
                               volumes={site.name: ("/site", "ro"), inputs.name: ("/in", "ro")}, env=child_env,
                               platform=de.docker_platform(arch), mem_limit=MEMORY_LIMIT, timeout=timeout,
                               files={"/work/request.json": json.dumps(inside).encode(),
                                      "/harness/worker.py": WORKER.read_bytes()},
                               fetch=("/work", workdir), role="probe",
                               labels={de.LABEL_RUN: self.run_label, de.LABEL_RELEASE: env.version})
        wanted = request.get("outputs_path")
        if wanted and (workdir / "outputs.npz").exists() and Path(wanted) != workdir / "outputs.npz":
            shutil.move(workdir / "outputs.npz", wanted)
        for key, path in written.items():
            # the graph's external data file is named after it ("optimized.onnx.data" beside "optimized.onnx")
            for made in sorted(workdir.glob(f"{SESSION_FILES[key]}*")):
                dest = path.with_name(path.name + made.name[len(SESSION_FILES[key]):])
                if made != dest:
                    shutil.move(made, dest)
        result = read_result(workdir)
        if result is not None and request.get("margin"):
            result["margin_skipped"] = "the margin model is not shipped to docker engines"
        shipped = {k: {"seconds": round(v.seconds, 3), "mb": round(v.bytes / 1e6, 1)}
                   for k, v in (("site", site), ("inputs", inputs)) if v.created}
        return ProcessOutcome(
            returncode=None if res.signal else res.exit_code,
            signal=res.signal,
            timed_out=res.timed_out,
            seconds=res.seconds,
            stderr_tail=res.stderr[-2000:],
            result=result,
            out_of_memory=res.oom_killed,
            engine={**engine.provenance(arch), **({"shipped": shipped} if shipped else {})},
        )


def _cpuinfo(client, image: str, arch: str, labels: dict | None = None) -> dict:
    """What /proc/cpuinfo says in a container of the engine's own arch: model and flags."""
    res = de.run_container(client, image, ["python3", "-c", dp.CPUINFO], platform=de.docker_platform(arch),
                           mem_limit="256m", timeout=120, role="cpuinfo", labels=labels)
    try:
        return json.loads(res.stdout)
    except ValueError:
        return {"machine": arch, "flags": None, "model": None, "error": res.stderr[-200:]}


def _engine_row(host: str) -> Check:
    """An engine's arch, CPUs, Docker version and (with a probe image of its arch there) its CPU flags."""
    try:
        engine = dp.connect(host, Path("/nonexistent"))
    except dp.EngineError as exc:
        return Check(f"  {host} arch", False, str(exc))
    try:
        tag = de.probe_image_tag(engine.arch) if engine.arch in ARCHS else None
        image = de.find_image(engine.client, tag) if tag else None
        flags = _cpuinfo(engine.client, image, engine.arch).get("flags") if image else None
        detail = (f"{engine.arch}, {engine.info.get('NCPU')} CPUs, Docker {engine.info.get('ServerVersion')}, "
                  f"{engine.info.get('OperatingSystem')}; CPU flags: "
                  + (flags or f"unknown until its probe image {tag} is built (the first probe builds it)"))
        return Check(f"  {host} arch", engine.arch in ARCHS, detail,
                     "" if engine.arch in ARCHS else f"probes run on {', '.join(ARCHS)} engines")
    finally:
        dp.Pool([engine]).close()
