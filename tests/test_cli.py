"""The command line's failures: an exit status, one line on stderr and, with --json, one JSON object on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import builders
import click
import inproc
import numpy as np
import pytest

from harness import cli
from harness.errors import HarnessError, Terminated, UsageError
from harness.results.store import RunStore


def fake(monkeypatch, body):
    """Register `bisect boom [--json] [ARGS]...` running `body`."""

    @click.command("boom")
    @click.option("--json", "as_json", is_flag=True)
    @click.option("--size", type=int)
    @click.argument("rest", nargs=-1)
    def boom(as_json, size, rest):
        return body()

    monkeypatch.setitem(cli.cli.commands, "boom", boom)


def raises(exc):
    def body():
        raise exc
    return body


def interrupted_after_saying_so():
    from harness.commands.common import EXIT_INTERRUPTED, err

    err.print("interrupted: 2 finished probes are saved in results/x; run the same command again")
    return EXIT_INTERRUPTED


@pytest.mark.parametrize("body, status, message", [
    (raises(UsageError("--from 9.9: no such release")), 2, "--from 9.9: no such release"),
    (raises(HarnessError("cannot record the probe of 1.20.0")), 1, "cannot record the probe of 1.20.0"),
    (raises(KeyboardInterrupt()), 130, "interrupted"),
    (raises(click.exceptions.Abort()), 130, "interrupted"),
    (raises(Terminated()), 143, "terminated"),  # SIGTERM, as harness.cli raises it
    (interrupted_after_saying_so, 130, "interrupted"),
])
def test_a_failure_with_json_is_one_json_object_on_stdout(monkeypatch, capsys, body, status, message):
    fake(monkeypatch, body)
    assert cli.main(["boom", "--json"]) == status
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"error": message, "exit_status": status}
    lines = [x for x in captured.err.splitlines() if x.strip()]
    assert len(lines) == 1 and message in lines[0], captured.err
    assert cli.main(["boom"]) == status  # without --json: nothing on stdout
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("name, hint", [("options", True), ("trace", True), ("versions", False)])
def test_ctrl_c_in_a_command_that_reuses_what_finished_says_to_run_it_again(monkeypatch, capsys, name, hint):
    """A command that does not say where its work is (run, sweep, compare, reduce, blame and matrix do) but keeps
    and reuses it: the one line says to run it again; --json's error object stays "interrupted"."""
    @click.command(name)
    @click.option("--json", "as_json", is_flag=True)
    def stopped(as_json):
        raise KeyboardInterrupt()

    monkeypatch.setitem(cli.cli.commands, name, stopped)
    assert cli.main([name, "--json"]) == 130
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"error": "interrupted", "exit_status": 130}
    lines = [x for x in captured.err.splitlines() if x.strip()]
    assert lines == (["interrupted: what finished is saved; run the same command again to go on (it is reused)"]
                     if hint else ["interrupted"]), captured.err


def test_a_usage_error_click_finds_is_exit_2_and_json(monkeypatch, capsys):
    fake(monkeypatch, lambda: 0)
    assert cli.main(["boom", "--size", "many", "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["exit_status"] == 2 and "'many' is not a valid integer" in doc["error"]


def test_success_prints_no_error_object_and_json_after_a_double_dash_is_an_argument(monkeypatch, capsys):
    fake(monkeypatch, lambda: 0)
    assert cli.main(["boom", "--json"]) == 0
    assert capsys.readouterr().out == ""
    fake(monkeypatch, raises(UsageError("bad")))
    assert cli.main(["boom", "--", "--json"]) == 2
    assert capsys.readouterr().out == ""


def test_an_internal_error_with_json_says_so_and_keeps_its_traceback(monkeypatch, capsys):
    fake(monkeypatch, raises(ZeroDivisionError("division by zero")))
    with pytest.raises(ZeroDivisionError):
        cli.main(["boom", "--json"])
    assert json.loads(capsys.readouterr().out) == {"error": "internal error: ZeroDivisionError: division by zero",
                                                   "exit_status": 1}


def test_a_torn_last_line_is_one_warning_line(monkeypatch, capsys, tmp_path):
    store = RunStore(tmp_path)
    store.append({"version": "1.0", "status": "skip"})
    (tmp_path / "probes.jsonl").write_bytes((tmp_path / "probes.jsonl").read_bytes() + b'{"vers')
    fake(monkeypatch, lambda: len(store.records() + store.records()) and 0)
    assert cli.main(["boom"]) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert lines == [f"warning: {tmp_path / 'probes.jsonl'} line 2: cut off mid-write (6 bytes, no newline; "
                     "not JSON (Unterminated string starting at: line 1 column 2 (char 1))): left out; the next "
                     "probe recorded cuts it off"]


def test_the_bisect_entry_point_prints_the_json_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "merge", str(tmp_path / "root"),
                           str(tmp_path / "missing"), "--json"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2
    assert json.loads(proc.stdout) == {"error": f"{tmp_path / 'missing'}: no such directory", "exit_status": 2}
    assert proc.stderr.strip() == f"error: {tmp_path / 'missing'}: no such directory"


def test_a_command_imports_no_other_command():
    """`bisect run` loads its own module, not the other commands' (their imports were paid before its first probe)."""
    code = ("import sys; from harness.cli import main; main(['run', '--help']); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('harness.commands.', 'harness.explain.trace', "
            "'harness.explain.diff', 'harness.report.drift', 'harness.report.dashboard', 'harness.results.history')))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = proc.stdout.splitlines()[-1].split()
    assert "harness.commands.run" in loaded, proc.stdout
    assert set(loaded) <= {"harness.commands.common", "harness.commands.run"}, loaded


@pytest.mark.parametrize("how", ["read-only", "a file"])
def test_a_home_where_uv_cannot_keep_its_cache_is_exit_1_with_uv_s_reason(tmp_path, how):
    """uv cannot make its cache (HOME on a read-only filesystem, or a file) while the release listing is fetched: the
    tool's environment failed (exit 1, not 2 for bad input), in one line that carries uv's own reason."""
    home = tmp_path / "home"
    if how == "a file":
        home.write_text("not a directory")
    else:
        home.mkdir()
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,ro", "tmpfs", str(home)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount here ({r.stderr.strip()})")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "XDG_"))}
    try:
        proc = subprocess.run([sys.executable, "-m", "harness.cli", "versions", "--cache-dir", str(tmp_path / "cache")],
                              capture_output=True, text=True, timeout=300, env={**env, "HOME": str(home)})
    finally:
        if how == "read-only":
            subprocess.run(["umount", str(home)], check=True)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("error: cannot list onnxruntime releases from the package index: "), lines[0]
    assert "Failed to initialize cache" in lines[0], lines[0]


@pytest.mark.parametrize("how", ["read-only", "full"])
def test_results_that_cannot_be_written_at_the_start_are_exit_1(listing, tmp_path, monkeypatch, how):
    """A results directory on a read-only or a full filesystem when `bisect run` opens its run: the environment
    failed (exit 1, README's "results cannot be written"), not bad input (2); one line, and the --json object."""
    from harness.runners import REGISTRY, Runner

    model = builders.save(builders.residual_norm_model(), tmp_path / "m.onnx")
    np.savez(tmp_path / "b.npz", **builders.residual_norm_inputs())
    results = tmp_path / "res"
    results.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k" + (",ro" if how == "read-only" else ""), "tmpfs",
                        str(results)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount here ({r.stderr.strip()})")
    try:
        if how == "full":
            with open(results / "filler", "wb", buffering=0) as f, pytest.raises(OSError):
                while True:
                    f.write(b"\0" * 4096)
        for cls in REGISTRY.values():  # the backend is ready; no probe may start (a store that opened is a failure)
            monkeypatch.setattr(cls, "provision", Runner.provision)
        monkeypatch.setattr("harness.session.run_search", inproc.refuse)
        r = inproc.run("run", "--offline", "--model", model, "--inputs", tmp_path / "b.npz", "--from", "1.19.0",
                       "--to", "1.20.0", "--cache-dir", listing.parent, "--results-dir", results, "--json")
    finally:
        subprocess.run(["umount", str(results)], check=True)
    assert r.returncode == 1, r.stderr
    assert len(r.lines) == 1 and r.lines[0].startswith(f"error: cannot write results to {results}/"), r.stderr
    assert ("Read-only file system" if how == "read-only" else "No space left on device") in r.lines[0]
    assert json.loads(r.stdout) == {"error": r.lines[0].removeprefix("error: "), "exit_status": 1}
