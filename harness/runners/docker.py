"""Container backend: one throw-away container per probe, x86_64 or aarch64.

The probe image (`dockerfiles/`) holds only CPython; the release's wheels are
a host-resolved site directory (`sites`) mounted read-only, with the model,
the inputs and the worker. Containers have no network and a memory limit,
and are removed afterwards. aarch64 containers on an x86_64 host run under
binfmt QEMU, whose CPU model is chosen with QEMU_CPU.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from harness.errors import UsageError
from harness.runners import docker_engine as de
from harness.runners.base import (
    WORKER, Check, Environment, ProcessOutcome, Runner, native_arch, read_result, write_request,
)
from harness.runners.provision import ENGINE_SCRIPT, Log, ProvisionError, quiet
from harness.runners.provision import qemu as qp
from harness.runners.provision.binfmt import binfmt_status
from harness.runners.sites import discard_site, prepare_site
from harness.versions import Release

MEMORY_LIMIT = os.environ.get("ORTBISECT_DOCKER_MEMORY", "8g")
ENGINE_STATE = "/tmp/ortbisect-docker"  # where the engine script keeps a private engine's state


def _engine_script(args: str) -> str | None:
    """The repository's engine script run with `args`, by absolute path (it works from any directory)."""
    return f"bash {shlex.quote(str(ENGINE_SCRIPT))} {args}" if ENGINE_SCRIPT.is_file() else None  # none in a wheel


class DockerRunner(Runner):
    backend = "docker"
    cpus = qp.KNOWN_CPUS  # a foreign arch runs under the kernel's binfmt qemu-aarch64, with QEMU_CPU
    provenance_extra = ("image",)

    def __init__(self, target, cache_dir, cpu=None):
        self.emulated = self.emulates(target.arch)
        super().__init__(target, cache_dir, cpu or (qp.DEFAULT_CPU if self.emulated else None))
        self.client = None
        self.image: str | None = None

    @classmethod
    def archs(cls) -> tuple[str, ...]:
        return ("x86_64", "aarch64")

    @classmethod
    def emulates(cls, arch: str) -> bool:
        return arch != native_arch()

    @classmethod
    def cpu_problem(cls, cpu: str) -> str | None:
        return qp.cpu_problem(cpu, cls.cpus)

    @classmethod
    def doctor(cls, cache_dir: Path) -> list[Check]:
        rows = []
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
        ok, reason = de.engine_status()
        if not ok and not shutil.which("docker"):
            reason += "; no docker client either"
        start = _engine_script(f"start {ENGINE_STATE}")
        rows.append(Check("docker engine", ok, reason,
                          f'eval "$({start})" (as root; Debian: installs docker.io)' if start
                          else "start a Docker engine and export DOCKER_HOST"))
        return rows

    @classmethod
    def describe(cls, provenance: dict, seen_cpu: str | None, version: str, script: str) -> dict:
        cpu = provenance.get("cpu")
        python = provenance.get("python") or "3.11"
        platform = de.docker_platform(provenance.get("arch") or native_arch())
        inside = f"pip install onnxruntime=={version} numpy && python {script}"
        reproduce = (f"docker run --rm --platform {platform}" + (f" -e QEMU_CPU={cpu}" if cpu else "")
                     + f' -v "$PWD:/w" -w /w python:{python}-slim sh -c {shlex.quote(inside)}')
        return {"how": f"container {provenance.get('image', '?')}" + (f", emulated CPU {cpu}" if cpu else ""),
                "cpu_model": seen_cpu or "?", "reproduce": reproduce}

    def provision(self, log: Log = quiet) -> None:
        """An engine that answers, and the probe image for the arch, built if absent."""
        if self.image is not None:
            return
        ok, reason = de.engine_status()
        if not ok:
            raise UsageError(f"--backend docker: {reason} (see `bisect doctor`)")
        client = de.client_from_env()
        try:
            self.image = de.ensure_image(client, self.target.arch, self.cache_dir, log=log)
        except (de.DockerEngineError, ProvisionError) as exc:
            raise UsageError(f"--backend docker: {exc}".splitlines()[0]) from None
        self.client = client

    def _engine(self):
        if self.image is None:
            raise RuntimeError("the docker runner is used before provision()")
        return self.client, self.image

    def provenance(self) -> dict:
        return {**super().provenance(), "image": self._engine()[1]}

    def prepare(self, release: Release) -> Environment:
        return prepare_site(self.cache_dir, self.target, release, self.package)

    def discard(self, env: Environment) -> None:
        discard_site(env)

    def run(self, env: Environment, request: dict, workdir: Path, timeout: float) -> ProcessOutcome:
        model, inputs = Path(request["model"]), Path(request["inputs"])
        inside = {**request, "model": f"/in/model/{model.name}", "inputs": "/in/inputs.npz",
                  "outputs_path": "/work/outputs.npz" if request.get("outputs_path") else None}
        write_request(workdir, inside, result_path="/work/result.json")
        mounts = {
            env.path / "site": ("/site", "ro"),
            model.parent: ("/in/model", "ro"),
            inputs: ("/in/inputs.npz", "ro"),  # a file: its directory may be the model's
            WORKER: ("/harness/worker.py", "ro"),
            workdir: ("/work", "rw"),
        }
        child_env = {"PYTHONPATH": "/site", "PYTHONNOUSERSITE": "1"}
        if self.emulated:
            child_env["QEMU_CPU"] = self.cpu
        client, image = self._engine()
        res = de.run_container(client, image, ["python3", "-s", "/harness/worker.py", "/work/request.json"],
                               mounts=mounts, env=child_env, platform=de.docker_platform(self.target.arch),
                               mem_limit=MEMORY_LIMIT, timeout=timeout)
        if request.get("outputs_path") and (workdir / "outputs.npz").exists():
            shutil.move(workdir / "outputs.npz", request["outputs_path"])
        return ProcessOutcome(
            returncode=None if res.signal else res.exit_code,
            signal=res.signal,
            timed_out=res.timed_out,
            seconds=res.seconds,
            stderr_tail=res.stderr[-2000:],
            result=read_result(workdir),
            out_of_memory=res.oom_killed,
        )
