"""A probe worker as a local process of its own: run once, or served from a pool of live ones.

`run_worker_process` runs one request in a new process group and kills the
group on timeout; within `reusing_workers()` a live `worker.py --serve` of the
same command line takes the request instead (a pool of them, `WorkerPool`).
Every worker is known here until it ends, so `kill_live_workers` can end them
all on Ctrl-C. A harness that cannot (SIGKILL) loses none to init either: each
worker is told its harness's pid and each request its own deadline
(`with_deadline`), and its watchdog ends it when either is past. Runners (harness.runners.base) use this; nothing here knows a
backend.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness.vocabulary import WORKER_PARENT_ENV

STDERR_TAIL = 2000
#: seconds a worker's own deadline gives a request past the harness's timeout: the harness's kill comes first
#: (a timeout is its outcome to record); the worker's is for a harness that is gone or cannot see it
DEADLINE_GRACE_S = 30.0

_live: set[subprocess.Popen] = set()
_live_lock = threading.Lock()


def kill_live_workers() -> None:
    """End every worker still running (on Ctrl-C), so no probe outlives the harness."""
    with _live_lock:
        procs = list(_live)
    for proc in procs:
        _kill_group(proc)


@dataclass
class ProcessOutcome:
    """How one worker process ended, and the result it wrote if any."""

    returncode: int | None
    signal: int | None
    timed_out: bool
    seconds: float
    stderr_tail: str
    result: dict | None
    out_of_memory: bool = False
    engine: dict | None = None  # where the worker ran, when a backend has several places (recorded per probe)


def with_deadline(request: dict, timeout: float) -> dict:
    """`request` with the deadline its worker holds itself to: `timeout` and a grace, counted from when the
    worker reads it (no clock is shared with a container or another machine)."""
    return {**request, "deadline_s": float(timeout) + DEADLINE_GRACE_S}


def write_request(workdir: Path, request: dict, timeout: float, result_path: str | None = None) -> Path:
    """The request file the worker reads, with its deadline; `result_path` as the worker will see it."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "result.json").unlink(missing_ok=True)
    path = workdir / "request.json"
    path.write_text(json.dumps({**with_deadline(request, timeout),
                                "result_path": result_path or str(workdir / "result.json")}))
    return path


def read_result(workdir: Path) -> dict | None:
    """The worker's result, if it finished writing one (it renames it into place)."""
    try:
        return json.loads((workdir / "result.json").read_text())
    except (OSError, ValueError):
        return None


def run_worker_process(argv: list[str], request: dict, workdir: Path, timeout: float,
                       env: dict | None = None) -> ProcessOutcome:
    """Run a worker command as its own process group; kill the group on timeout.

    Inside `reusing_workers()`, a live serving worker of the same command runs it instead.
    """
    pool = _pool
    if pool is not None:
        return pool.run(argv, request, workdir, timeout, env)
    request_path = write_request(workdir, request, timeout)
    stderr_path = workdir / "stderr.txt"
    t0 = time.perf_counter()
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            [*argv, str(request_path)], stdin=subprocess.DEVNULL, stdout=err, stderr=err,
            env=_own_tmpdir(env, workdir), start_new_session=True,
        )
        with _live_lock:
            _live.add(proc)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
        except BaseException:  # Ctrl-C: never leave a worker behind
            _kill_group(proc)
            raise
        finally:
            with _live_lock:
                _live.discard(proc)
    return _outcome(proc.returncode, timed_out, t0, stderr_path.read_bytes(), workdir)


def _outcome(rc: int | None, timed_out: bool, t0: float, stderr: bytes, workdir: Path) -> ProcessOutcome:
    """How a worker's request ended: its exit status (or the signal that ended it) and the result it wrote."""
    return ProcessOutcome(
        returncode=rc if rc is not None and rc >= 0 else None,
        signal=-rc if rc is not None and rc < 0 else None,
        timed_out=timed_out,
        seconds=time.perf_counter() - t0,
        stderr_tail=stderr[-STDERR_TAIL:].decode("utf-8", "replace"),
        result=read_result(workdir),
    )


def _own_tmpdir(env: dict | None, directory: Path) -> dict:
    """The worker's environment with its temporary files under `directory`, which goes when the probe (or the
    pool) ends: some releases leave files in the temp dir at every start (1.30.0: .ses, mat-debug-PID.log);
    and with this process's pid, the parent its watchdog expects."""
    return {**(os.environ if env is None else env), "TMPDIR": str(directory), WORKER_PARENT_ENV: str(os.getpid())}


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


# --- serving workers ------------------------------------------------------------------------------------


def _key(argv: list[str], env: dict | None, memory_limit_mb, side: str | None = None) -> str:
    """One serving process serves one command line, environment and memory cap (set once, at its first request);
    `side` keeps the two workers of a timed comparison apart when both run one release (an A/A comparison)."""
    return json.dumps([argv, sorted((env or {}).items()), memory_limit_mb, *([side] if side else [])])


def _set_idle(pid: int, idle: bool) -> None:
    """Run the process at idle priority (SCHED_IDLE: only cycles no other process wants), or normal again.

    A worker started early imports for a probe that may never run (a round's likely next ones: up to two per
    probe made); at normal priority its imports take cores from the probe running now. Back to normal is
    allowed without privileges (sched(7)); where the policy is unavailable the worker keeps normal priority."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE if idle else os.SCHED_OTHER, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or the process has ended
        pass


class _Served:
    """One `worker.py --serve` process: requests one at a time, its stderr in a file of its own.

    Started early (`tag`), it imports numpy and onnxruntime before its first request arrives, at idle priority
    until that request comes."""

    def __init__(self, argv: list[str], env: dict | None, stderr_path: Path, tag: str | None = None):
        self.stderr_path = stderr_path
        self.tag = tag
        self.ran = False
        flags = ["--serve", "--import-first"] if tag is not None else ["--serve"]
        with open(stderr_path, "wb") as err:
            self.proc = subprocess.Popen([*argv, *flags], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, env=_own_tmpdir(env, stderr_path.parent),
                                         start_new_session=True)
        if tag is not None:
            _set_idle(self.proc.pid, True)
        with _live_lock:
            _live.add(self.proc)

    def run(self, request: dict, workdir: Path, timeout: float) -> tuple[ProcessOutcome, bool]:
        """The outcome of one request, and whether the process can take another."""
        if self.tag is not None and not self.ran:
            _set_idle(self.proc.pid, False)  # its probe is asked for now: it may be still importing
        self.ran = True
        request_path = write_request(workdir, request, timeout)
        offset = self.stderr_path.stat().st_size
        t0 = time.perf_counter()
        answer, timed_out = b"", False
        try:
            self.proc.stdin.write(f"{request_path}\n".encode())
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            if ready:
                answer = self.proc.stdout.readline()  # one line, written at once; b"" if the process died
            else:
                timed_out = True
        except BrokenPipeError:
            pass  # it died before taking the request: its end is read below
        except BaseException:  # Ctrl-C: never leave a worker behind
            self.close(kill=True)
            raise
        alive = answer.strip().isdigit()
        if not alive:
            self.close(kill=True)
        with open(self.stderr_path, "rb") as err:
            err.seek(offset)  # this request's part of the process's stderr
            stderr = err.read()
        return _outcome(int(answer) if alive else self.proc.returncode, timed_out, t0, stderr, workdir), alive

    def close(self, kill: bool = False, wait: bool = True) -> None:
        """End the process: EOF (it returns), or a kill. Without `wait`, it exits in the background: its
        interpreter's teardown (tens of ms natively) overlaps the next probe; it is reaped when the pool closes."""
        if not kill:
            try:
                self.proc.stdin.close()  # EOF: the worker returns
                if not wait:
                    return
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                kill = True
        if kill:
            _kill_group(self.proc)
        with _live_lock:
            _live.discard(self.proc)


class WorkerPool:
    """Serving workers kept alive between requests of the same command (release, backend, limits).

    A probe under QEMU spends most of its time importing numpy and
    onnxruntime (20-30 s for a tiny model); a reduction or a triage probes the
    same two releases dozens of times. A worker that died, timed out or was
    interrupted is not reused: the next request starts a new one. With
    `keep=False` (a bisection: each release once) a worker ends after its
    request; only workers started early (`start`) wait for one.
    """

    def __init__(self, scratch: Path, keep: bool = True):
        self.scratch = scratch
        self.keep = keep
        self._idle: dict[str, list[_Served]] = {}
        self._all: list[_Served] = []
        self._lock = threading.Lock()
        self._closed = False

    def _new(self, argv: list[str], env: dict | None, tag: str | None = None) -> _Served:
        served = _Served(argv, env, self.scratch / f"stderr-{len(self._all)}.txt", tag)
        self._all.append(served)
        return served

    def start(self, argv: list[str], env: dict | None, tag: str) -> None:
        """A worker for the next request of this command (without a memory cap), unless one is waiting."""
        key = _key(argv, env, None)
        with self._lock:
            idle = self._idle.setdefault(key, [])
            if not self._closed and not any(s.proc.poll() is None for s in idle):
                idle.append(self._new(argv, env, tag))

    def retire(self, keep_tags: set[str]) -> None:
        """End the early-started workers still waiting whose tag is not in `keep_tags` (no probe of theirs to come)."""
        with self._lock:
            going = [s for idle in self._idle.values() for s in idle if s.tag is not None and s.tag not in keep_tags]
            for idle in self._idle.values():
                idle[:] = [s for s in idle if s not in going]
        for served in going:
            served.close(kill=True)  # it never ran a request (maybe still importing): nothing to lose

    def run(self, argv: list[str], request: dict, workdir: Path, timeout: float, env: dict | None) -> ProcessOutcome:
        """`request["fresh_process"]`: a new worker takes it and ends after it (its peak memory is this
        request's); `request["serve_again"]` (a side's name): the worker waits for the next request of its
        command and side even in a pool that keeps none (a timed comparison's two workers, until `end_idle`)."""
        side = request.get("serve_again")
        key = _key(argv, env, request.get("memory_limit_mb"), side if isinstance(side, str) else None)
        fresh = bool(request.get("fresh_process"))
        with self._lock:
            idle = self._idle.setdefault(key, [])
            served = None
            while idle and served is None and not fresh:
                served = idle.pop()
                if served.proc.poll() is not None:  # ended while idle: its end is no request's outcome
                    served.close(kill=True)
                    served = None
            if served is None:
                served = self._new(argv, env)
        outcome, alive = served.run(request, workdir, timeout)
        if alive and not fresh and (self.keep or request.get("serve_again")):
            with self._lock:
                self._idle[key].append(served)
        elif alive:
            served.close(wait=False)
        return outcome

    def end_idle(self, argv: list[str], env: dict | None, side: str | None = None) -> None:
        """End the idle workers of this command and side (no memory cap): nothing more will be asked of them."""
        with self._lock:
            going = self._idle.pop(_key(argv, env, None, side), [])
        for served in going:
            served.close(wait=False)

    def close(self) -> None:
        with self._lock:
            self._closed = True  # a worker started early from another thread after this would outlive the pool
        for served in self._all:
            served.close(kill=not served.ran)


_pool: WorkerPool | None = None


@contextlib.contextmanager
def reusing_workers(keep: bool = True):
    """Within: `run_worker_process` runs on serving workers. `keep`: each serves every later request of the
    same command; otherwise one request each, and only `Runner.start_early` saves (it overlaps imports)."""
    global _pool
    if _pool is not None:  # nested: the outer pool serves
        yield
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ortbisect-workers-") as scratch:
        _pool = WorkerPool(Path(scratch), keep)
        try:
            yield
        finally:
            pool, _pool = _pool, None
            pool.close()


def retire_early_workers(keep_tags: set[str]) -> None:
    """Within `reusing_workers()`: end the early-started workers not tagged with one of `keep_tags`."""
    if _pool is not None:
        _pool.retire(keep_tags)


def end_idle_workers(argv: list[str], env: dict | None, side: str | None = None) -> None:
    """Within `reusing_workers()`: end the idle serving workers of this command (and side)."""
    if _pool is not None:
        _pool.end_idle(argv, env, side)


def start_early(argv: list[str], env: dict | None, tag: str) -> None:
    """Within `reusing_workers()`: start a worker of this command now, for the next request of it."""
    if _pool is not None:
        _pool.start(argv, env, tag=tag)
