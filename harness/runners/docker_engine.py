"""Docker engine plumbing for the docker backend.

* :func:`engine_status` - is an engine reachable through ``DOCKER_HOST``?
* :func:`ensure_image` - the probe image ``ortbisect/probe:<arch>`` for
  ``amd64`` or ``arm64``, built locally (no registry needed): a debootstrap
  root filesystem with CPython 3.11 (``provision.rootfs``) becomes
  ``ortbisect/bookworm-python:<arch>``, then
  ``dockerfiles/python-slim.Dockerfile`` is built on top of it.
* :func:`run_container` - run one command in a throw-away container with the
  network disabled, a memory limit and a timeout; the container is always
  removed.

The probe's site-packages (onnxruntime + numpy for the target architecture)
is not part of any image: it is bind-mounted read-only at run time and put on
``PYTHONPATH``.

Building the base images needs root on the host (debootstrap), and for arm64
a binfmt_misc registration of qemu-aarch64 with flag F
(``.ci/docker-engine.sh binfmt`` does it; see ``provision.binfmt``). The ``docker`` Python SDK
(``docker>=7``) is imported lazily so that this module imports without it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal as _signal
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, NamedTuple

from harness.runners.provision import Log, quiet
from harness.runners.provision.debian import debian_arch
from harness.runners.provision.rootfs import SUITE as ROOTFS_SUITE
from harness.runners.provision.rootfs import rootfs_key, rootfs_tarball

if TYPE_CHECKING:  # pragma: no cover
    import docker

__all__ = [
    "ARCHES",
    "BASE_IMAGE_REPO",
    "PROBE_IMAGE_REPO",
    "ContainerResult",
    "DockerEngineError",
    "base_image_tag",
    "client_from_env",
    "default_cache_dir",
    "docker_platform",
    "engine_status",
    "ensure_base_image",
    "ensure_image",
    "image_provenance",
    "probe_image_tag",
    "run_container",
]

BASE_IMAGE_REPO = "ortbisect/bookworm-python"
PROBE_IMAGE_REPO = "ortbisect/probe"
ARCHES = ("amd64", "arm64")

# Part of the base image's recipe: a change needs rootfs.RECIPE_VERSION bumped.
_BASE_DOCKERFILE = """\
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
CMD ["python3"]
"""
LABEL_RECIPE = "org.ortbisect.recipe"
LABEL_ROLE = "org.ortbisect.role"

DOCKERFILES_DIR = Path(__file__).resolve().parents[2] / "dockerfiles"
PROBE_DOCKERFILE = "python-slim.Dockerfile"

_UNAME_MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}


class DockerEngineError(RuntimeError):
    """Building or running something on the engine failed."""


class ContainerResult(NamedTuple):
    """Outcome of :func:`run_container`.

    ``exit_code`` is the container's exit status as docker reports it (128+N
    when the process died of signal N); ``signal`` is N in that case (always
    9 after a timeout or an OOM kill), else None. ``seconds`` is wall time
    from container start to exit. ``oom_killed`` mirrors State.OOMKilled.
    """

    exit_code: int | None
    signal: int | None
    timed_out: bool
    stdout: str
    stderr: str
    seconds: float
    oom_killed: bool


# --------------------------------------------------------------------------- #
# names
# --------------------------------------------------------------------------- #


def docker_platform(arch: str) -> str:
    """``arm64`` -> ``linux/arm64``."""
    return f"linux/{debian_arch(arch)}"


def uname_machine(arch: str) -> str:
    """``arm64`` -> ``aarch64`` (what ``platform.machine()`` says inside)."""
    return _UNAME_MACHINE[debian_arch(arch)]


def base_image_tag(arch: str) -> str:
    return f"{BASE_IMAGE_REPO}:{debian_arch(arch)}"


def probe_image_tag(arch: str) -> str:
    return f"{PROBE_IMAGE_REPO}:{debian_arch(arch)}"


def default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    root = Path(xdg) if xdg else Path.home() / ".cache"
    return root / "ortbisect" / "docker"


# --------------------------------------------------------------------------- #
# engine
# --------------------------------------------------------------------------- #


def client_from_env(timeout: int = 120) -> "docker.DockerClient":
    """A docker SDK client configured from DOCKER_HOST & co."""
    import docker

    return docker.from_env(timeout=timeout)


def engine_status() -> tuple[bool, str]:
    """(ok, reason): can we talk to an engine through the environment?

    On success the reason names the server version, API version, OS/arch and
    the DOCKER_HOST in use; on failure it says why (no SDK, no socket, ...).
    """
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock (default)")
    try:
        import docker  # noqa: F401
    except ImportError:
        return False, "the docker Python SDK is not installed (add docker>=7)"
    try:
        client = client_from_env(timeout=10)
    except Exception as exc:  # DockerException for a missing socket, bad host, ...
        return False, f"no docker engine at {host}: {exc}"
    try:
        client.ping()
        v = client.version()
    except Exception as exc:
        return False, f"docker engine at {host} does not answer: {exc}"
    finally:
        try:
            client.close()
        except Exception:
            pass
    return True, (
        f"docker engine {v.get('Version', '?')} (API {v.get('ApiVersion', '?')}, "
        f"{v.get('Os', '?')}/{v.get('Arch', '?')}) at {host}"
    )


# --------------------------------------------------------------------------- #
# images
# --------------------------------------------------------------------------- #


def _get_image(client, ref: str):
    import docker.errors

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None


def _build(client, log: Log, **kwargs) -> None:
    """Classic-builder build through the API, streaming its output to log."""
    stream = client.api.build(rm=True, forcerm=True, decode=True, timeout=3600, **kwargs)
    for chunk in stream:
        if "error" in chunk:
            detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
            raise DockerEngineError(f"docker build {kwargs.get('tag')} failed: {detail}")
        text = chunk.get("stream", "").rstrip()
        if text:
            log(f"  {text}")


def _built_image(client, tag: str, recipe: str, arch: str, log: Log) -> str | None:
    """The id of `tag` if it was built from `recipe` (checked to be `arch`), else None."""
    img = _get_image(client, tag)
    if img is None or img.labels.get(LABEL_RECIPE) != recipe:
        return None
    _check_arch(img, arch, tag)
    log(f"image {tag}: exists ({img.id[:19]})")
    return img.id


def _check_arch(image, arch: str, ref: str) -> None:
    got = image.attrs.get("Architecture")
    if got != arch:
        raise DockerEngineError(f"{ref} has architecture {got!r}, expected {arch!r}")


def ensure_base_image(client, arch: str, cache_dir: Path | str, log: Log = quiet) -> str:
    """``ortbisect/bookworm-python:<arch>`` from the cached debootstrap rootfs.

    Skipped when an image with that tag and the same recipe label exists.
    Returns the image id.
    """
    arch = debian_arch(arch)
    tag = base_image_tag(arch)
    recipe = rootfs_key(arch)
    existing = _built_image(client, tag, recipe, arch, log)
    if existing is not None:
        return existing

    tar, meta = rootfs_tarball(arch, cache_dir, log)
    ctx = Path(tempfile.mkdtemp(prefix=f"ctx-{arch}-", dir=tar.parent))
    try:
        try:
            os.link(tar, ctx / "rootfs.tar")
        except OSError:
            shutil.copyfile(tar, ctx / "rootfs.tar")
        (ctx / "Dockerfile").write_text(_BASE_DOCKERFILE)
        t0 = time.monotonic()
        log(f"image {tag}: building from {tar.name}")
        _build(
            client,
            log,
            path=str(ctx),
            tag=tag,
            platform=docker_platform(arch),
            labels={
                LABEL_RECIPE: recipe,
                LABEL_ROLE: "base",
                "org.ortbisect.rootfs.sha256": meta["sha256"],
                "org.ortbisect.rootfs.suite": ROOTFS_SUITE,
            },
        )
        log(f"image {tag}: built in {time.monotonic() - t0:.1f} s")
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    img = client.images.get(tag)
    _check_arch(img, arch, tag)
    return img.id


def ensure_image(
    client,
    arch: str,
    cache_dir: Path | str | None = None,
    log: Log = quiet,
    *,
    base: str | None = None,
) -> str:
    """The probe image ``ortbisect/probe:<arch>``; returns its image id.

    ``base=None`` (no registry): the base is ``ortbisect/bookworm-python:<arch>``
    built locally by :func:`ensure_base_image`. ``base="python:3.11-slim"``
    (registry reachable): the Dockerfile's default base, pulled for the arch.
    An existing image built from the same Dockerfile and base id is reused.
    Record the returned id (``sha256:...``) for provenance.
    """
    arch = debian_arch(arch)
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if base is None:
        base_ref = base_image_tag(arch)
        base_id = ensure_base_image(client, arch, cache_dir, log)
    else:
        base_ref = base
        img = _get_image(client, base)
        if img is None or img.attrs.get("Architecture") != arch:
            log(f"pulling {base} for {docker_platform(arch)}")
            img = client.images.pull(base, platform=docker_platform(arch))
        base_id = img.id

    dockerfile = DOCKERFILES_DIR / PROBE_DOCKERFILE
    recipe = hashlib.sha256(dockerfile.read_bytes() + b"\0" + base_id.encode()).hexdigest()[:16]
    tag = probe_image_tag(arch)
    existing = _built_image(client, tag, recipe, arch, log)
    if existing is not None:
        return existing

    t0 = time.monotonic()
    log(f"image {tag}: building {PROBE_DOCKERFILE} on {base_ref}")
    _build(
        client,
        log,
        path=str(DOCKERFILES_DIR),
        dockerfile=PROBE_DOCKERFILE,
        tag=tag,
        platform=docker_platform(arch),
        buildargs={"BASE": base_ref},
        pull=False,
        labels={LABEL_RECIPE: recipe, LABEL_ROLE: "probe", "org.ortbisect.base": base_ref, "org.ortbisect.base.id": base_id},
    )
    log(f"image {tag}: built in {time.monotonic() - t0:.1f} s")
    img = client.images.get(tag)
    _check_arch(img, arch, tag)
    return img.id


def image_provenance(client, ref: str) -> dict:
    """What to record about the image a probe ran in."""
    img = client.images.get(ref)
    a = img.attrs
    return {
        "id": img.id,
        "tags": list(img.tags),
        "repo_digests": list(a.get("RepoDigests") or []),
        "os": a.get("Os"),
        "architecture": a.get("Architecture"),
        "created": a.get("Created"),
        "labels": dict(img.labels or {}),
    }


# --------------------------------------------------------------------------- #
# running
# --------------------------------------------------------------------------- #


def _signal_from_exit(code: int | None) -> int | None:
    if code is None or code <= 128:
        return None
    n = code - 128
    try:
        _signal.Signals(n)
    except ValueError:
        return None
    return n


def run_container(
    client,
    image: str,
    argv: list[str],
    mounts: Mapping[str | os.PathLike, tuple[str, str]] | None = None,
    env: Mapping[str, str] | None = None,
    platform: str | None = None,
    mem_limit: int | str | None = None,
    timeout: float | None = None,
    *,
    user: str | None = None,
    workdir: str | None = None,
    pids_limit: int | None = 4096,
) -> ContainerResult:
    """Run ``argv`` in a fresh container of ``image`` and remove it afterwards.

    ``mounts`` maps host path -> (container path, "ro" | "rw"). The container
    has no network (``network_mode="none"``), no capabilities and
    no-new-privileges; ``mem_limit`` (bytes or "512m") caps memory and swap.
    After ``timeout`` seconds the container is killed (SIGKILL) and the
    result has ``timed_out=True``. The container is removed in every case.
    """
    import docker.errors
    import requests.exceptions

    volumes = {}
    for host, (cpath, mode) in (mounts or {}).items():
        if mode not in ("ro", "rw"):
            raise ValueError(f"mount mode must be 'ro' or 'rw', not {mode!r}")
        volumes[os.path.abspath(os.fspath(host))] = {"bind": cpath, "mode": mode}

    kwargs = dict(
        command=list(argv),
        environment=dict(env or {}),
        volumes=volumes,
        network_mode="none",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        labels={LABEL_ROLE: "run"},
        # docker-init as PID 1: the probe then dies of signals like on the
        # host (PID 1 ignores signals it has no handler for) and tini reports
        # 128+N
        init=True,
        detach=True,
        stdin_open=False,
        tty=False,
    )
    if platform:
        kwargs["platform"] = platform
    if mem_limit is not None:
        kwargs["mem_limit"] = mem_limit
        kwargs["memswap_limit"] = mem_limit
    if pids_limit:
        kwargs["pids_limit"] = pids_limit
    if user is not None:
        kwargs["user"] = user
    if workdir is not None:
        kwargs["working_dir"] = workdir

    container = client.containers.create(image, **kwargs)
    timed_out = False
    exit_code: int | None = None
    seconds = 0.0
    try:
        t0 = time.monotonic()
        container.start()
        try:
            status = container.wait(timeout=timeout)
            seconds = time.monotonic() - t0
            exit_code = status.get("StatusCode")
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            seconds = time.monotonic() - t0
            timed_out = True
            try:
                container.kill()
            except docker.errors.APIError:
                pass  # exited meanwhile
            try:
                exit_code = container.wait(timeout=60).get("StatusCode")
            except Exception:
                exit_code = None
        container.reload()
        state = container.attrs.get("State", {})
        oom = bool(state.get("OOMKilled"))
        if exit_code is None:
            exit_code = state.get("ExitCode")
        stdout = container.logs(stdout=True, stderr=False).decode("utf-8", "replace")
        stderr = container.logs(stdout=False, stderr=True).decode("utf-8", "replace")
    finally:
        try:
            container.remove(force=True, v=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError:
            # removal already in progress, or engine hiccup: try once more
            time.sleep(0.5)
            try:
                container.remove(force=True, v=True)
            except docker.errors.APIError:
                pass
    sig = 9 if timed_out else _signal_from_exit(exit_code)
    return ContainerResult(exit_code, sig, timed_out, stdout, stderr, seconds, oom)
