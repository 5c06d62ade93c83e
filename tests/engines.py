"""Docker engines for tests: a second engine started by .ci/docker-engine.sh, and a watch of what containers get.

The second engine runs on this machine with its own data root and socket, and stands for a remote one: the
harness reaches it only through its address. `ContainerWatch` follows an engine's events and inspects each
container as it is created, so a test can assert that none the harness makes has a bind mount. It sees only the
containers that carry its label: test files run in parallel against one engine, and another file's containers
are not this test's.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "docker-engine.sh"


def start_engine(state: Path, name: str) -> str:
    """Start (or find running) the named engine whose state is under `state`; its address."""
    qemu = Path(os.environ.get("ORTBISECT_TEST_CACHE", Path.home() / ".cache" / "ortbisect-tests")) / "tools/bin/qemu-aarch64"
    env = {**os.environ, **({"ORTBISECT_QEMU_AARCH64": str(qemu)} if qemu.exists() else {})}  # as .ci/run registers it
    proc = subprocess.run(["bash", str(SCRIPT), "start", str(state), "--name", name], capture_output=True,
                          text=True, timeout=600, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"engine {name} did not start: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout.strip().split("DOCKER_HOST=", 1)[1]


def stop_engine(state: Path) -> None:
    """Stop the engine by the PID the script recorded in `state`."""
    subprocess.run(["bash", str(SCRIPT), "stop", str(state)], capture_output=True, text=True, timeout=120)


class ContainerWatch:
    """Every container created on an engine with the label `label` ("key=value") while the watch runs: its
    inspection, or why there is none."""

    def __init__(self, host: str, label: str):
        import docker

        self.client = docker.DockerClient(base_url=host, timeout=30)
        self.label = label
        self.inspected: dict[str, dict] = {}
        self.vanished: list[str] = []
        self._events = self.client.events(decode=True, filters={"type": "container", "event": "create",
                                                                "label": [label]},
                                          since=int(time.time()) - 1)
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self) -> None:
        import docker.errors

        try:
            for event in self._events:
                cid = event.get("id") or event.get("Actor", {}).get("ID")
                try:
                    self.inspected[cid] = self.client.api.inspect_container(cid)
                except docker.errors.NotFound:
                    self.vanished.append(cid)
        except Exception:  # the stream closes when the watch stops or the engine does
            pass

    def stop(self) -> None:
        time.sleep(0.5)
        try:
            self._events.close()
        except Exception:
            pass
        self.client.close()

    def bind_mounts(self) -> list[str]:
        """Bind mounts of the containers seen (HostConfig.Binds, or a mount of type bind): none is the rule."""
        found = []
        for cid, attrs in self.inspected.items():
            host = attrs.get("HostConfig") or {}
            found += [f"{cid[:12]} {b}" for b in host.get("Binds") or []]
            found += [f"{cid[:12]} {m.get('Source')}" for m in (host.get("Mounts") or []) if m.get("Type") == "bind"]
            found += [f"{cid[:12]} {m.get('Source')}" for m in attrs.get("Mounts") or [] if m.get("Type") == "bind"]
        return found


def unique_label(what: str) -> tuple[str, str]:
    """(value, "org.ortbisect.run=value"): a run label no other test or process uses."""
    import uuid

    value = f"test-{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return value, f"org.ortbisect.run={value}"


def root_and_dockerd() -> str | None:
    """Why a second engine cannot be started here, or None."""
    import shutil

    if os.geteuid() != 0:
        return "starting a Docker engine needs root"
    if not shutil.which("dockerd"):
        return "no dockerd installed (.ci/docker-engine.sh start installs docker.io)"
    return None
