"""Serving workers (`reusing_workers`): one process answers many requests of the same release, and a worker
that dies or times out is replaced, never reused; a worker started early has imported before its request.
Real releases, real worker processes."""

from __future__ import annotations

import os
import platform

import builders
import numpy as np
import pytest

import harness.runners.workers as workers
from harness.releases.versions import Target
from harness.runners.uv import UvRunner
from harness.runners.workers import reusing_workers

pytestmark = pytest.mark.release
VERSION = "1.19.2"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("serving")
    norm = builders.save(builders.residual_norm_model(), d / "norm.onnx")
    np.savez(d / "norm.npz", **builders.residual_norm_inputs())
    spin = builders.save(builders.spin_model(), d / "spin.onnx")
    np.savez(d / "spin.npz", x=np.zeros(1, np.float32))
    return d


def request(files, name: str, outputs_path=None) -> dict:
    return {"model": str(files / f"{name}.onnx"), "inputs": str(files / f"{name}.npz"), "outputs": [],
            "session_options": {}, "memory_limit_mb": None, "outputs_path": outputs_path}


def probe(runner, env, req, workdir, timeout=120.0):
    return runner.run(env, req, workdir, timeout)


def test_one_worker_serves_many_requests_with_the_answers_of_one_process_each(env, files, tmp_path):
    runner, e = env
    alone = probe(runner, e, request(files, "norm", str(tmp_path / "alone.npz")), tmp_path / "alone")
    assert alone.returncode == 0 and "served" not in alone.result, alone.stderr_tail
    with reusing_workers():
        served = [probe(runner, e, request(files, "norm", str(tmp_path / f"s{i}.npz")), tmp_path / f"s{i}")
                  for i in range(3)]
    assert [o.returncode for o in served] == [0, 0, 0], [o.stderr_tail for o in served]
    assert [o.result.get("served") for o in served] == [None, 1, 2]  # one process: the 2nd and 3rd came after
    assert [o.result.get("session_reused", False) for o in served] == [False, True, True]  # same model, options
    assert served[1].result["import_s"] < alone.result["import_s"] / 5  # imported once
    for i, o in enumerate(served):
        assert o.result["outputs"] == alone.result["outputs"] and o.result["rows"] == alone.result["rows"]
        with np.load(tmp_path / f"s{i}.npz") as got, np.load(tmp_path / "alone.npz") as want:
            np.testing.assert_array_equal(got["y"], want["y"])


def test_a_worker_that_times_out_or_dies_is_replaced_and_the_next_request_runs(env, files, tmp_path):
    runner, e = env
    with reusing_workers():
        first = probe(runner, e, request(files, "norm"), tmp_path / "a")
        spun = probe(runner, e, request(files, "spin"), tmp_path / "b", timeout=3.0)
        after = probe(runner, e, request(files, "norm"), tmp_path / "c")
        assert first.returncode == 0 and after.returncode == 0, after.stderr_tail
        assert spun.timed_out and spun.result is None and spun.returncode is None
        assert "served" not in after.result  # a new process: the one that spun was killed, not reused

        # a worker killed while it waits for its next request: the request goes to a new one, not to its end
        pool = workers._pool
        idle = [s for s in pool._all if s.proc.poll() is None]
        assert len(idle) == 1
        os.killpg(idle[0].proc.pid, 9)
        idle[0].proc.wait()
        again = probe(runner, e, request(files, "norm"), tmp_path / "d")
        assert again.returncode == 0 and "served" not in again.result, again.stderr_tail
    assert len(pool._all) == 3 and all(s.proc.poll() is not None for s in pool._all)  # none outlives the pool
    assert workers._pool is None


def test_outside_a_pool_every_request_is_its_own_process(env, files, tmp_path):
    runner, e = env
    outs = [probe(runner, e, request(files, "norm"), tmp_path / f"p{i}") for i in range(2)]
    assert [o.returncode for o in outs] == [0, 0] and all("served" not in o.result for o in outs)


def test_a_worker_started_early_imports_before_its_request_and_serves_only_that_one(env, files, tmp_path):
    runner, e = env
    alone = probe(runner, e, request(files, "norm", str(tmp_path / "alone.npz")), tmp_path / "alone")
    with reusing_workers(keep=False):
        pool = workers._pool
        runner.start_early(e, None, VERSION)
        (early,) = pool._all
        out = probe(runner, e, request(files, "norm", str(tmp_path / "early.npz")), tmp_path / "early")
        assert out.returncode == 0, out.stderr_tail
        assert out.result["imported_early_s"] > 0  # it read the request only once numpy and onnxruntime were in
        # one request each in a bisection's pool: told to end after it (EOF), it exits on its own
        assert early.proc.stdin.closed and early.proc.wait(timeout=30) == 0
        assert out.result["outputs"] == alone.result["outputs"]
        with np.load(tmp_path / "early.npz") as got, np.load(tmp_path / "alone.npz") as want:
            np.testing.assert_array_equal(got["y"], want["y"])

        second = probe(runner, e, request(files, "norm"), tmp_path / "second")  # no early worker: a new one
        assert second.returncode == 0 and "imported_early_s" not in second.result

        runner.start_early(e, None, "other")  # started for a release no longer likely: retired unused
        runner.start_early(e, 512, "capped")  # a memory cap is set before the import: not started early
        assert len(pool._all) == 3
        workers.retire_early_workers({VERSION})
        assert all(s.proc.wait(timeout=30) is not None for s in pool._all)  # the 2nd one's may still be exiting
        runner.start_early(e, None, VERSION)  # left waiting: the pool's end ends it
    assert all(s.proc.poll() is not None for s in pool._all) and len(pool._all) == 4



@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="scheduling policies are Linux's")
def test_a_worker_started_early_imports_at_idle_priority_and_runs_its_probe_at_normal_priority(env, files, tmp_path):
    """An early worker's imports may be for a probe that never runs: they must not take cores from one running."""
    runner, e = env
    with reusing_workers():
        pool = workers._pool
        runner.start_early(e, None, VERSION)
        (early,) = pool._all
        assert os.sched_getscheduler(early.proc.pid) == os.SCHED_IDLE
        out = probe(runner, e, request(files, "norm"), tmp_path / "early")
        assert out.returncode == 0 and out.result["imported_early_s"] > 0, out.stderr_tail
        assert early.proc.poll() is None and os.sched_getscheduler(early.proc.pid) == os.SCHED_OTHER


def test_a_probe_leaves_nothing_in_the_temp_dir_served_or_not(cache_dir, files, tmp_path, monkeypatch):
    """Some releases leave a file in the temp dir at every start (1.30.0: .ses and an empty mat-debug-PID.log); a worker
    writes its temporary files under its probe's (or its pool's) own directory, so none pile up in /tmp."""
    from harness.releases.uvtool import uv_bin
    from harness.releases.versions import ReleaseIndex

    runner = UvRunner(Target(platform.machine(), "3.11"), cache_dir)
    e = runner.prepare(ReleaseIndex(cache_dir, uv_bin()).releases()[-1])
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    alone = probe(runner, e, request(files, "norm"), tmp_path / "alone")
    with reusing_workers():
        runner.start_early(e, None, "early")
        served = [probe(runner, e, request(files, "norm"), tmp_path / f"s{i}") for i in range(2)]
    assert [o.returncode for o in (alone, *served)] == [0, 0, 0], alone.stderr_tail
    assert sorted(p.name for p in tmp.iterdir()) == []


# A serving worker whose teardown is held until the test opens a gate (a real process; no onnxruntime needed).
GATED_WORKER = r"""
import os, sys, time
gate = sys.argv[1]
for line in sys.stdin:
    sys.stdout.write("0\n")
    sys.stdout.flush()
while not os.path.exists(gate):
    time.sleep(0.01)
"""


def test_a_probe_returns_while_its_worker_is_still_exiting_and_the_pool_reaps_it(tmp_path):
    """In a bisection each worker serves one request: its interpreter's teardown must not delay the next probe."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    script, gate = tmp_path / "gated.py", tmp_path / "gate"
    script.write_text(GATED_WORKER)
    (tmp_path / "scratch").mkdir()
    pool = workers.WorkerPool(tmp_path / "scratch", keep=False)
    try:
        with ThreadPoolExecutor(1) as ex:
            run = ex.submit(pool.run, [sys.executable, str(script), str(gate)], {}, tmp_path / "probe", 60.0, None)
            outcome = run.result(timeout=30)  # the worker cannot exit before the gate opens
        assert outcome.returncode == 0 and not outcome.timed_out
        (worker,) = pool._all
        assert worker.proc.poll() is None  # still tearing down, in the background
    finally:
        gate.touch()
        pool.close()
    assert worker.proc.returncode == 0  # reaped when the pool closed, having exited on its own
