"""The Docker engines probes run on: how to reach each, what each is, and a pool that shares them out.

An engine is named the way the user named it: a ``--docker-host`` address
(``unix://``, ``tcp://``, ``ssh://user@host``), a docker context's name, or
nothing (``DOCKER_HOST`` and the docker SDK's defaults). ``HOST=N`` caps how
many probes run on it at once (default: its CPU count). Each engine is asked
its architecture, CPU count and Docker version (``info()``) and, in a tiny
container of the probe image, its CPU flags (``/proc/cpuinfo``): what a probe
on it records as ``provenance.engine``.

A pool hands each probe the engine with the most free room; an engine that
stops answering is marked down (its probe becomes a *skip*). A run's pool holds
one engine (harness.runners.make_runner refuses a second --docker-host):
several machines are a Ray cluster's work (harness.executors).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field

from harness.runners.docker import ssh as docker_ssh
from harness.runners.docker.volumes import VolumeCache

DEFAULT_HOST = "DOCKER_HOST"
SCHEMES = ("unix", "tcp", "ssh", "http", "https", "npipe")
_SLOTS = re.compile(r"^(?P<host>.+?)=(?P<slots>[0-9]+)$")
_CONTEXT = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.+-]*$")

CPUINFO = ("import json, platform\n"
           "lines = open('/proc/cpuinfo').read().splitlines()\n"
           "def field(*keys):\n"
           "    return next((l.split(':', 1)[1].strip() for l in lines if l.split(':')[0].strip() in keys), '')\n"
           "print(json.dumps({'machine': platform.machine(), 'flags': field('flags', 'Features'),\n"
           "                  'model': field('model name', 'CPU part')}))\n")


class EngineError(RuntimeError):
    """An engine cannot be reached or does not answer."""


def address_problem(value: str) -> str | None:
    """Why `value` is not an engine address (`scheme://...` or a context name, optionally `=N`), or None."""
    m = _SLOTS.match(value)
    host, slots = (m["host"], int(m["slots"])) if m else (value, None)
    if slots is not None and slots < 1:
        return "=N must be at least 1"
    if "://" in host:
        scheme = host.split("://", 1)[0]
        if scheme not in SCHEMES:
            return f"unknown scheme {scheme}:// (use one of: {', '.join(s + '://' for s in SCHEMES)})"
        if not host.split("://", 1)[1]:
            return "no address after the scheme"
        return None
    if not _CONTEXT.match(host):
        return "neither an address (ssh://user@host, tcp://host:port, unix:///path) nor a docker context's name"
    return None


def split_slots(value: str | None) -> tuple[str | None, int | None]:
    if value is None:
        return None, None
    m = _SLOTS.match(value)
    return (m["host"], int(m["slots"])) if m else (value, None)


def client_for(host: str | None = None, timeout: int = 120):
    """A docker SDK client for an address, a context's name, or (None) the environment (DOCKER_HOST & co).

    ssh:// (an address, DOCKER_HOST, or a context's endpoint) goes through the system's OpenSSH client, its
    config, keys, agent and known_hosts, as the docker CLI does (`docker_ssh`)."""
    import docker

    if host is None:
        env_host = os.environ.get(DEFAULT_HOST, "")
        if env_host.startswith("ssh://"):
            return docker_ssh.make_client(env_host, timeout=timeout)
        return docker.from_env(timeout=timeout)
    if "://" not in host:
        from docker.context import ContextAPI

        ctx = ContextAPI.get_context(host)
        if ctx is None:
            raise EngineError(f"no docker context named {host} (see `docker context ls`)")
        url = ctx.Host or "unix:///var/run/docker.sock"
        if url.startswith("ssh://"):
            return docker_ssh.make_client(url, timeout=timeout)
        return docker.DockerClient(base_url=url, tls=ctx.TLSConfig or False, timeout=timeout)
    if host.startswith("ssh://"):
        return docker_ssh.make_client(host, timeout=timeout)
    return docker.DockerClient(base_url=host, timeout=timeout)


def _why(client, exc: BaseException) -> str:
    """An engine's failure in one line: ssh's own words where ssh failed, else the exception's first line."""
    said = docker_ssh.failure(client)
    endpoint = getattr(client.api, "ssh_endpoint", None)
    if said and endpoint is not None:
        return docker_ssh.explain(endpoint, said, exc)
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def shown(host: str | None) -> str:
    """How an engine is named in messages and provenance."""
    if host is None:
        return os.environ.get(DEFAULT_HOST) or "default engine"
    return host


def engine_status(host: str | None = None) -> tuple[bool, str]:
    """(ok, reason): does the engine at `host` (None: the environment's) answer?"""
    host, _ = split_slots(host)
    where = shown(host) if host or os.environ.get(DEFAULT_HOST) else "unix:///var/run/docker.sock (default)"
    try:
        import docker  # noqa: F401
    except ImportError:
        return False, "the docker Python SDK is not installed (add docker>=7)"
    try:
        client = client_for(host, timeout=10)
    except Exception as exc:  # DockerException for a missing socket, bad host, ...
        return False, f"no docker engine at {where}: {exc}"
    try:
        client.ping()
        v = client.version()
    except Exception as exc:
        return False, f"docker engine at {where} does not answer: {_why(client, exc)}"
    finally:
        _close(client)
    return True, (f"docker engine {v.get('Version', '?')} (API {v.get('ApiVersion', '?')}, "
                  f"{v.get('Os', '?')}/{v.get('Arch', '?')}) at {where}")


def _close(client) -> None:
    try:
        client.close()
    except Exception:
        pass


def machine(arch: str) -> str:
    """An engine's Architecture (x86_64, aarch64, or arm64 / amd64 on some) as uname spells it."""
    return {"arm64": "aarch64", "amd64": "x86_64"}.get(arch, arch)


@dataclass
class Engine:
    """One engine of a pool: its client, what it is, how many probes it takes at once, and whether it is up."""

    host: str | None
    client: object
    info: dict
    slots: int
    volumes: VolumeCache
    images: dict[str, str] = field(default_factory=dict)  # arch -> probe image id on this engine
    cpu: dict = field(default_factory=dict)  # what /proc/cpuinfo says in a container
    busy: int = 0
    down: str | None = None  # why it dropped out

    @property
    def name(self) -> str:
        return shown(self.host)

    @property
    def remote(self) -> bool:
        """Reached over a network (tcp, ssh): what is shipped to it is compressed."""
        return not str(getattr(self.client.api, "base_url", "")).startswith("http+docker://localhost")

    @property
    def arch(self) -> str:
        return machine(self.info.get("Architecture", "?"))

    def provenance(self, arch: str) -> dict:
        """What a probe on this engine records: name, id, arch, CPU flags and model, Docker version, image."""
        return {"name": self.name, "id": self.info.get("ID"), "hostname": self.info.get("Name"),
                "arch": self.arch, "docker": self.info.get("ServerVersion"), "cpus": self.info.get("NCPU"),
                "cpu_model": self.cpu.get("model"), "cpu_flags": self.cpu.get("flags"),
                "image": self.images.get(arch)}

    def answers(self) -> bool:
        try:
            self.client.ping()
            return True
        except Exception:
            return False


def connect(host: str | None, lock_dir) -> Engine:
    """An engine reached and asked what it is; EngineError when it does not answer."""
    host, slots = split_slots(host)
    try:
        client = client_for(host)
    except EngineError:
        raise
    except Exception as exc:
        raise EngineError(f"docker engine {shown(host)} does not answer: {str(exc).splitlines()[0]}") from None
    try:
        info = client.info()
    except Exception as exc:
        why = _why(client, exc)
        _close(client)
        raise EngineError(f"docker engine {shown(host)} does not answer: {why}") from None
    return Engine(host, client, info, slots or max(1, int(info.get("NCPU") or 1)),
                  VolumeCache(info.get("ID") or shown(host), lock_dir))


class Pool:
    """Engines sharing a run's probes: `acquire` blocks until one of the live engines has a free slot."""

    def __init__(self, engines: list[Engine]):
        self.engines = engines
        self._cond = threading.Condition()

    def acquire(self) -> Engine:
        """The live engine with the most free room (in use / slots lowest; earlier ones first on a tie)."""
        with self._cond:
            while True:
                live = [e for e in self.engines if e.down is None]
                if not live:
                    raise EngineError("every docker engine dropped out: " +
                                      "; ".join(f"{e.name}: {e.down}" for e in self.engines))
                free = [e for e in live if e.busy < e.slots]
                if free:
                    engine = min(free, key=lambda e: e.busy / e.slots)
                    engine.busy += 1
                    return engine
                self._cond.wait(timeout=5)

    def release(self, engine: Engine) -> None:
        with self._cond:
            engine.busy -= 1
            self._cond.notify_all()

    def drop(self, engine: Engine, why: str) -> None:
        with self._cond:
            engine.down = why
            self._cond.notify_all()

    def close(self) -> None:
        for e in self.engines:
            _close(e.client)
