"""Container backend: one throw-away container per probe, x86_64 or aarch64.

The probe image (`dockerfiles/`) holds only CPython; the release's wheels are
a host-resolved site directory (`sites`) mounted read-only, with the model,
the inputs and the worker. Containers have no network and a memory limit,
and are removed afterwards. aarch64 containers on an x86_64 host run under
binfmt QEMU, whose CPU model is chosen with QEMU_CPU.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness.errors import UsageError
from harness.runners import docker_engine as de
from harness.runners import native_arch
from harness.runners.base import WORKER, Environment, ProcessOutcome, Runner, read_result, write_request
from harness.runners.provision import Log, ProvisionError, quiet
from harness.runners.sites import discard_site, prepare_site
from harness.versions import Release

DEFAULT_EMULATED_CPU = "neoverse-n1"
MEMORY_LIMIT = os.environ.get("ORTBISECT_DOCKER_MEMORY", "8g")


class DockerRunner(Runner):
    backend = "docker"

    def __init__(self, target, cache_dir, cpu=None):
        emulated = target.arch != native_arch()
        if cpu and not emulated:
            raise UsageError("--cpu chooses an emulated CPU: a native container runs on the host's")
        super().__init__(target, cache_dir, cpu or (DEFAULT_EMULATED_CPU if emulated else None))
        self.emulated = emulated
        self.client = None
        self.image: str | None = None

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
        return prepare_site(self.cache_dir, self.target, release)

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
