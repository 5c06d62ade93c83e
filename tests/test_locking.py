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
