"""The JavaScript bindings' backend: one npm prefix per release, the probe run by Node.js (harness/worker.js).

`--binding node` installs onnxruntime-node (its N-API addon and the native onnxruntime library it loads),
`--binding web` onnxruntime-web (onnxruntime compiled to WebAssembly, run by Node.js as a browser would run
it). Each release goes into its own prefix of the cache with npm, from npm's configured registry:

- exactly that version (`--save-exact`), its install scripts not run (`--ignore-scripts`: onnxruntime-node's
  downloads CUDA libraries at install, which no CPU probe loads, and fails the whole install where the
  download is refused);
- the lockfile keeps every package's integrity (sha512, checked by npm against the registry at install); the
  harness then writes the sha256 and size of every file of the prefix into a manifest, and checks the prefix
  against it (and the lock against the version asked) before its first probe in a run, as the wheels' RECORD
  is checked (harness.runners.verify): a file changed, planted or gone after the install is no verdict;
- nothing is fetched at probe time: the worker loads the binding from the prefix alone.

What `get_build_info()` says in the wheels the npm builds keep in their binaries: the commit, read once from
the native library (onnxruntime-node from 1.21.0; earlier ones carry none) or the WebAssembly module.

The worker writes the outputs; their statistics and the batch's rows are worked out here with worker.py's own
functions, so every binding's records say the same things in the same words.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

from harness.errors import EnvironmentSkip, HarnessError
from harness.releases.npm import NPM_TIMEOUT_S, first_line, installable_archive, npm_bin, npm_version, pep440
from harness.releases.versions import Release
from harness.runners.base import Check, Environment, Runner, forget_build, locked_build, native_arch
from harness.runners.provision import Log, quiet
from harness.runners.verify import MEMO, record_tree, verify_tree
from harness.runners.workers import ProcessOutcome, run_worker_process

WORKER_JS = Path(__file__).resolve().parent.parent / "worker.js"
MANIFEST = "ortbisect-files.csv"  # every installed file's sha256 and size, in a wheel RECORD's format
MIN_NODE = 18
_COMMIT = re.compile(rb"git-commit-id=([0-9a-f]{7,40})")
_BRANCH = re.compile(rb"git-branch=([A-Za-z0-9._/-]{1,100})")


def node_bin() -> str:
    found = shutil.which("node")
    if found is None:
        raise HarnessError("node is not on PATH: the node and web bindings run their probes with Node.js "
                           f"{MIN_NODE} or newer (Debian: apt-get install nodejs npm)")
    return found


def node_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30,
                             stdin=subprocess.DEVNULL).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HarnessError(f"{binary} --version failed: {exc}") from None
    return out.removeprefix("v")


def _major(version: str) -> int:
    try:
        return int(version.split(".")[0])
    except ValueError:
        return 0


def binaries(prefix: Path, package: str, arch: str) -> list[Path]:
    """The files of `package` in `prefix` that hold its build's commit: onnxruntime-node's native library for
    Linux `arch` (napi-v3 up to 1.21, napi-v6 from 1.22), onnxruntime-web's WebAssembly module."""
    root = prefix / "node_modules" / package
    if package == "onnxruntime-web":
        return sorted((root / "dist").glob("ort-wasm-simd-threaded.wasm"))
    node_arch = {"x86_64": "x64", "aarch64": "arm64"}.get(arch, arch)
    return sorted(root.glob(f"bin/napi-v*/linux/{node_arch}/libonnxruntime.so*"))[:1]


def build_info_of(files: list[Path]) -> str:
    """"git-branch=...,git-commit-id=..." as the wheels' get_build_info() says it, from the binaries' own bytes
    ("" where they name no commit)."""
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:
            continue
        commit = _COMMIT.search(data)
        if commit:
            near = data[max(0, commit.start() - 200):commit.start()]
            branch = _BRANCH.search(near)
            parts = ([f"git-branch={branch.group(1).decode()}"] if branch else []) + \
                    [f"git-commit-id={commit.group(1).decode()}"]
            return ", ".join(parts)
    return ""


class NodeRunner(Runner):
    backend = "nodejs"
    auto = True
    bindings = ("node", "web")
    provenance_keys = ("arch", "backend", "cpu")
    provenance_extra = ("node_version",)
    supports_memory_limit = False  # Node.js cannot cap its own address space before its heap is made

    def __init__(self, target, cache_dir, cpu=None):
        super().__init__(target, cache_dir, cpu)
        self.node = node_bin()
        self.node_version = node_version(self.node)
        if _major(self.node_version) < MIN_NODE:
            raise HarnessError(f"node {self.node_version} ({self.node}): the node and web bindings need Node.js "
                               f"{MIN_NODE} or newer")

    @classmethod
    def archs(cls, host: str | None = None) -> tuple[str, ...]:
        arch = host or native_arch()  # npm's prebuilt binaries are native: nothing is emulated
        return (arch,) if arch in ("x86_64", "aarch64") else ()

    @classmethod
    def doctor(cls, cache_dir: Path, engines: tuple[str, ...] = ()) -> list[Check]:
        fix = "apt-get install nodejs npm (Debian), or Node.js from nodejs.org"
        checks = []
        for name, find in (("node", node_bin), ("npm", npm_bin)):
            try:
                binary = find()
                checks.append(Check(f"{name} (bindings node, web)", True, f"{binary} {node_version(binary)}"))
            except HarnessError as exc:
                checks.append(Check(f"{name} (bindings node, web)", False, str(exc), fix))
        return checks

    @classmethod
    def describe(cls, provenance: dict, seen_cpu: str | None, version: str, script: str) -> dict:
        package = provenance.get("package") or "onnxruntime-node"
        how = "WebAssembly in Node.js" if provenance.get("binding") == "web" else "Node.js, native"
        return {"how": f"{package} ({how} {provenance.get('node_version') or '?'})", "cpu_model": seen_cpu or "?",
                "reproduce": None}

    def provenance(self) -> dict:
        return {"backend": self.backend, "arch": self.target.arch, "cpu": self.cpu, "node_version": self.node_version,
                **self.package.key()}

    def env_dir(self, version: str) -> Path:
        return self.cache_dir / "envs" / f"{self.target.arch}-npm" / self.package.env_name(version)

    def prepare(self, release: Release) -> Environment:
        pkg = self.package.name
        spelled = npm_version(release, pkg)
        if installable_archive(release, self.target, pkg) is None or spelled is None:
            raise EnvironmentSkip(f"no {pkg} {release.version} on npm for {self.target.arch}")

        def build(path: Path) -> dict:
            path.mkdir(parents=True)
            (path / "package.json").write_text(json.dumps({"name": "ortbisect-release", "private": True,
                                                           "dependencies": {pkg: spelled}}))
            args = [npm_bin(), "install", "--prefix", str(path), "--ignore-scripts", "--save-exact", "--no-audit",
                    "--no-fund", "--no-update-notifier", "--omit-lockfile-registry-resolved=false",
                    "--cache", str(self.cache_dir / "npm"), "--loglevel=error"]
            try:
                proc = subprocess.run(args, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                      timeout=NPM_TIMEOUT_S * 5, env=npm_environment())
            except subprocess.TimeoutExpired:
                raise EnvironmentSkip(f"npm install {pkg}@{spelled} gave no answer in {NPM_TIMEOUT_S * 5} s") from None
            if proc.returncode != 0:
                raise EnvironmentSkip(f"npm could not install {pkg}@{spelled}: {first_line(proc.stderr + proc.stdout)}")
            lock = locked(path, pkg)
            if lock is None or lock.get("version") != spelled:
                raise EnvironmentSkip(f"npm installed {pkg} {(lock or {}).get('version', '(none)')}, not {spelled}")
            record_tree(path, "node_modules", path / MANIFEST)
            return {"package": pkg, "npm_version": spelled, "integrity": lock.get("integrity"),
                    "build_info": build_info_of(binaries(path, pkg, self.target.arch))}

        return locked_build(self.env_dir(release.version), release.version, build, self.cache_dir)

    def discard(self, env: Environment) -> None:
        forget_build(env.path)

    def verify(self, env: Environment) -> str | None:
        """Why the prefix is not what npm installed (its lock and the manifest written then), or None."""
        if env.path not in self._verified:
            pkg = self.package.name
            lock = locked(env.path, pkg)
            spelled = env.info.get("npm_version")
            if lock is None or lock.get("version") != spelled or lock.get("integrity") != env.info.get("integrity"):
                why = f"its lock does not say {pkg} {spelled} with the integrity it was installed with"
            else:
                why = verify_tree(env.path, "node_modules", env.path / MANIFEST, env.path / MEMO)
            self._verified[env.path] = why
        return self._verified[env.path]

    def forget_verified(self, env: Environment) -> None:
        self._verified.pop(env.path, None)

    def native_problem(self, env: Environment, native) -> str | None:
        """None: the binding's native code (the addon and its library, or the WebAssembly module) is the prefix's
        own, held by `verify`'s manifest, and its commit is read from that very file (`build_info_of`), not
        from what the worker says."""
        return None

    def build_info(self, release: Release, install: bool = False) -> str | None:
        try:
            info = json.loads((self.env_dir(release.version) / "ortbisect-ready.json").read_text())
            return info.get("build_info") if isinstance(info.get("build_info"), str) else None
        except (OSError, ValueError):
            pass
        if not install:
            return None
        env = self.prepare(release)
        return None if self.verify(env) else env.info.get("build_info")

    def worker_command(self, env: Environment) -> tuple[list[str], dict]:
        # the binding comes from the prefix alone: no NODE_OPTIONS (--require), NODE_PATH or npm settings of the
        # harness's environment reach the worker
        child_env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("NODE_", "NPM_"))}
        child_env.update(ORTBISECT_NODE_PREFIX=str(env.path), ORTBISECT_BINDING_PACKAGE=self.package.name)
        return [self.node, "--no-warnings", str(WORKER_JS)], child_env

    def run(self, env: Environment, request: dict, workdir: Path, timeout: float) -> ProcessOutcome:
        argv, child_env = self.worker_command(env)
        out = run_worker_process(argv, request, workdir, timeout, env=child_env)
        if out.result is not None:
            described(out.result, request, workdir, env.info.get("build_info") or "")
        return out

    def provision(self, log: Log = quiet) -> None:
        npm_bin()


def npm_environment() -> dict:
    """npm's environment for an install: the user's npm configuration stands (its registry, proxy and
    credentials), but no install script of the harness's own environment's making."""
    return {k: v for k, v in os.environ.items() if k.lower() not in ("npm_config_ignore_scripts",)}


def locked(prefix: Path, package: str) -> dict | None:
    """The lockfile's entry of `package` ({version, integrity, ...}), read as untrusted input."""
    try:
        doc = json.loads((prefix / "package-lock.json").read_text())
        entry = doc["packages"][f"node_modules/{package}"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return entry if isinstance(entry, dict) and isinstance(entry.get("version"), str) else None


def described(result: dict, request: dict, workdir: Path, build_info: str) -> None:
    """The worker's result in every worker's words (harness.worker): each output's statistics and the batch's rows,
    from the outputs it wrote; the CPU and platform of this host (where the worker ran); the build's commit."""
    import numpy as np

    from harness import worker as words

    result.update(cpu=words.cpu_info(), platform=platform.platform())
    ort = result.get("onnxruntime")
    if isinstance(ort, dict):
        ort["build_info"] = build_info
        if isinstance(ort.get("version"), str):  # npm's spelling of the build, in the harness's (as the run names it)
            ort["npm_version"], ort["version"] = ort["version"], pep440(ort["version"]) or ort["version"]
    saved = Path(request.get("outputs_path") or workdir / "outputs.npz")
    if result.get("stage") != "done" or result.get("error"):
        return
    names = result.get("output_names")
    try:
        with np.load(saved, allow_pickle=False) as data:
            values = [data[n] for n in names]
        with np.load(request["inputs"], allow_pickle=False) as batch:
            feeds = {k: batch[k] for k in batch.files}
    except Exception as exc:  # noqa: BLE001 - the worker's file is read back as untrusted input
        result.update(stage="outputs", error=f"the worker's outputs could not be read: {type(exc).__name__}: {exc}")
        return
    finally:
        if not request.get("outputs_path"):
            saved.unlink(missing_ok=True)
    result["outputs"] = [words.output_stats(np, n, v) for n, v in zip(names, values)]
    result["rows"] = words.rows_summary(np, feeds, names, values)
