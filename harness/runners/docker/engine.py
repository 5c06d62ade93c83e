"""Docker engine plumbing for the docker backend.

* :func:`ensure_image` - the probe image ``ortbisect/probe:<arch>`` for
  ``amd64`` or ``arm64``, built locally (no registry needed): a debootstrap
  root filesystem with CPython 3.11 (``provision.rootfs``) becomes
  ``ortbisect/bookworm-python:<arch>``, then
  ``dockerfiles/python-slim.Dockerfile`` is built on top of it.
* :func:`run_container` - run one command in a throw-away container with the
  network disabled, a memory limit and a timeout; the container is always
  removed.

The probe's site-packages (onnxruntime + numpy for the target architecture)
is not part of any image: it lives in a named volume on the engine
(``docker_volumes``), mounted read-only and put on ``PYTHONPATH``. Nothing
of the client's file system is ever mounted: the engine may be another
machine's.

Building the base images needs root on the host (debootstrap), and for arm64
a binfmt_misc registration of qemu-aarch64 with flag F
(``.ci/docker-engine.sh binfmt`` does it; see ``provision.binfmt``). The ``docker`` Python SDK
(``docker>=7``) is imported lazily so that this module imports without it.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import signal as _signal
import tarfile
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, NamedTuple

from harness.runners.provision import Log, quiet
from harness.runners.provision.debian import debian_arch
from harness.runners.provision.rootfs import SUITE as ROOTFS_SUITE
from harness.runners.provision.rootfs import rootfs_key, rootfs_tarball

if TYPE_CHECKING:  # pragma: no cover
    pass

__all__ = [
    "ARCHES",
    "BASE_IMAGE_REPO",
    "PROBE_IMAGE_REPO",
    "ContainerResult",
    "DockerEngineError",
    "base_image_tag",
    "default_cache_dir",
    "docker_platform",
    "ensure_base_image",
    "ensure_image",
    "find_image",
    "image_provenance",
    "probe_image_tag",
    "fetch_dir",
    "put_files",
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
LABEL_RUN = "org.ortbisect.run"  # the harness invocation a container belongs to
LABEL_RELEASE = "org.ortbisect.release"  # the release a probe container runs

DOCKERFILES_DIR = Path(__file__).resolve().parents[3] / "dockerfiles"
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
# images
# --------------------------------------------------------------------------- #


def find_image(client, ref: str) -> str | None:
    """The id of image `ref` on the engine, or None."""
    img = _get_image(client, ref)
    return img.id if img is not None else None


def _get_image(client, ref: str):
    import docker.errors

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None


def _build(client, log: Log, **kwargs) -> None:
    """Classic-builder build through the API, streaming its output to log.

    No network: no build step fetches anything, and an engine may have no default bridge (`--bridge=none`, or
    its docker0 removed by another engine on the host started that way)."""
    stream = client.api.build(rm=True, forcerm=True, decode=True, timeout=3600, network_mode="none", **kwargs)
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


def put_files(container, files: Mapping[str, bytes]) -> None:
    """Copy `files` (absolute container path -> content) into a created container, through the API."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        dirs = sorted({"/".join(p.strip("/").split("/")[:i]) for p in files for i in range(1, p.strip("/").count("/") + 1)})
        for d in dirs:
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, int(time.time())
            tar.addfile(info)
        for path, data in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    container.put_archive("/", buf.getvalue())


def fetch_dir(container, path: str, into: Path) -> list[str]:
    """The regular files directly in `path` of a container (running or not) copied into `into`; their names."""
    import docker.errors

    try:
        stream, _ = container.get_archive(path)
    except docker.errors.NotFound:
        return []
    spool = tempfile.SpooledTemporaryFile(max_size=64 << 20)
    for chunk in stream:
        spool.write(chunk)
    spool.seek(0)
    got = []
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=spool, mode="r|") as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) != 2 or parts[1] in ("", ".", ".."):
                continue
            with open(into / parts[1], "wb") as out:
                shutil.copyfileobj(tar.extractfile(member), out)
            got.append(parts[1])
    return got


def run_container(
    client,
    image: str,
    argv: list[str],
    volumes: Mapping[str, tuple[str, str]] | None = None,
    env: Mapping[str, str] | None = None,
    platform: str | None = None,
    mem_limit: int | str | None = None,
    timeout: float | None = None,
    *,
    files: Mapping[str, bytes] | None = None,
    fetch: tuple[str, Path] | None = None,
    user: str | None = None,
    workdir: str | None = None,
    pids_limit: int | None = 4096,
    role: str = "run",
    labels: Mapping[str, str] | None = None,
) -> ContainerResult:
    """Run ``argv`` in a fresh container of ``image`` and remove it afterwards.

    Nothing of the client's file system is mounted (the engine may be another
    machine's): ``volumes`` maps a named volume on the engine -> (container
    path, "ro" | "rw"); ``files`` (container path -> bytes) are copied in
    through the API before the start, and ``fetch=(dir, host_dir)`` copies
    the regular files of that container directory out after the exit. The
    container has no network (``network_mode="none"``), no capabilities and
    no-new-privileges; ``mem_limit`` (bytes or "512m") caps memory and swap.
    After ``timeout`` seconds the container is killed (SIGKILL) and the
    result has ``timed_out=True``. The container is removed in every case.
    It is labelled ``org.ortbisect.role=<role>`` and with ``labels`` (the
    run and release a probe belongs to), so ``docker ps --filter label=...``
    finds what a run made and a watch can tell its containers from others'.
    An engine that stops answering raises (the docker SDK's or requests'
    exception), never a result.
    """
    import docker.errors
    import requests.exceptions
    from docker.types import Mount

    mounts = []
    for name, (cpath, mode) in (volumes or {}).items():
        if mode not in ("ro", "rw"):
            raise ValueError(f"volume mode must be 'ro' or 'rw', not {mode!r}")
        mounts.append(Mount(cpath, name, type="volume", read_only=mode == "ro"))

    kwargs = dict(
        command=list(argv),
        environment=dict(env or {}),
        mounts=mounts,
        network_mode="none",
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        labels={**(labels or {}), LABEL_ROLE: role},
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
        if files:
            put_files(container, files)
        t0 = time.monotonic()
        container.start()
        try:
            status = container.wait(timeout=timeout)
            seconds = time.monotonic() - t0
            exit_code = status.get("StatusCode")
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            seconds = time.monotonic() - t0
            if timeout is None or seconds < timeout - 1:
                raise  # the engine went away, not the probe's time
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
        if fetch is not None:
            fetch_dir(container, *fetch)
    finally:
        _remove(container)
    sig = 9 if timed_out else _signal_from_exit(exit_code)
    return ContainerResult(exit_code, sig, timed_out, stdout, stderr, seconds, oom)


def _remove(container) -> None:
    import docker.errors
    import requests.exceptions

    for attempt in range(2):
        try:
            container.remove(force=True, v=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError:
            time.sleep(0.5)  # removal already in progress, or engine hiccup: try once more
        except requests.exceptions.ConnectionError:
            return  # the engine is gone; the caller sees why
