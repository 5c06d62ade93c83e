"""The one inter-process lock: a second process waits while the first holds it, and says so."""

from __future__ import annotations

import subprocess
import sys
import textwrap

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from harness.results.locking import file_lock
    lock, release = Path(sys.argv[1]), Path(sys.argv[2])
    with file_lock(lock, on_wait=lambda s: print(s, flush=True)):
        print("got", flush=True)
        while not release.exists():
            time.sleep(0.01)
""")


def test_a_second_process_waits_for_the_holder(tmp_path):
    lock = tmp_path / "t.lock"
    first = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), str(tmp_path / "release-first")],
                             stdout=subprocess.PIPE, text=True)
    second = None
    try:
        assert first.stdout.readline() == "got\n"
        second = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), str(tmp_path / "release-second")],
                                  stdout=subprocess.PIPE, text=True)
        assert second.stdout.readline().startswith("waiting for another run")
        assert second.poll() is None  # still waiting: the holder has not let go
        (tmp_path / "release-first").touch()
        assert second.stdout.readline() == "got\n"
        assert first.wait(timeout=30) == 0
        (tmp_path / "release-second").touch()
        assert second.wait(timeout=30) == 0
    finally:
        for proc in (first, second):
            if proc is not None:
                proc.kill()


def test_a_waiter_told_to_stop_gives_up_at_once(tmp_path):
    """A probe thread waiting for another run's probe hears no signal (only the main thread does): on Ctrl-C the
    run sets its stop event, and the wait ends in LockWaitStopped instead of lasting as long as the holder."""
    import threading
    import time

    import pytest

    from harness.results.locking import LockWaitStopped, file_lock

    lock = tmp_path / "t.lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), str(tmp_path / "never")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "got\n"
        stop, heard = threading.Event(), []
        threading.Timer(0.3, stop.set).start()
        t0 = time.monotonic()
        with pytest.raises(LockWaitStopped):
            with file_lock(lock, on_wait=heard.append, stop=stop):
                raise AssertionError("got the lock another process holds")
        assert heard and time.monotonic() - t0 < 10
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_that_dies_lets_the_next_run_in(tmp_path):
    """A run killed while it holds a probe's lock (SIGKILL: nothing of it runs on the way out) leaves nothing
    that blocks the next run: the kernel lets go of a dead process's flock."""
    from harness.results.store import RunStore

    store = RunStore.open(tmp_path, "r", {"k": 1}, {}, ["test"])
    take = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from harness.results.store import RunStore
        with RunStore(Path(sys.argv[1])).probe_lock("1.19.0", on_wait=lambda s: print(s, flush=True)):
            print("got", flush=True)
            if sys.argv[2] == "hold":
                time.sleep(600)
    """)
    holder = subprocess.Popen([sys.executable, "-c", take, str(store.dir), "hold"], stdout=subprocess.PIPE, text=True)
    waiter = None
    try:
        assert holder.stdout.readline() == "got\n"
        waiter = subprocess.Popen([sys.executable, "-c", take, str(store.dir), "go"], stdout=subprocess.PIPE, text=True)
        assert waiter.stdout.readline().startswith("waiting for another run")
        holder.kill()
        assert waiter.stdout.readline() == "got\n"
        assert waiter.wait(timeout=30) == 0
    finally:
        for proc in (holder, waiter):
            if proc is not None:
                proc.kill()
                proc.wait()
