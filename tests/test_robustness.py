"""Fault injection, each for real: the outcome is recorded, no finished probe is lost or
repeated, and the harness ends with one clear line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import builders
import numpy as np
import pytest
from gates import WorkerGate

pytestmark = pytest.mark.release


def harness(*args: str, cache: Path, results: Path) -> list[str]:
    return [sys.executable, "-m", "harness.cli", *args, "--cache-dir", str(cache), "--results-dir", str(results), "--json"]


def probes(results: Path) -> list[dict]:
    (path,) = results.rglob("probes.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def versions(results: Path) -> list[str]:
    return [p["version"] for p in probes(results)]


@pytest.fixture
def fresh_cache(listing, tmp_path) -> Path:
    """An empty environment cache that knows the release listing (no network needed for it)."""
    cache = tmp_path / "cache"
    shutil.copytree(listing, cache / "index")
    return cache


def test_worker_killed_mid_run_is_a_crash_and_the_run_goes_on(cache_dir, tmp_path):
    model = builders.save(builders.spin_model(1_000), tmp_path / "m.onnx")
    np.savez(tmp_path / "m.npz", x=np.zeros(1, np.float32))
    argv = harness("sweep", "--model", str(model), "--inputs", str(tmp_path / "m.npz"), "--from", "1.19.0",
                   "--to", "1.20.0", cache=cache_dir, results=tmp_path / "res")
    gate = WorkerGate(tmp_path / "gate")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **gate.env})
    try:
        victim = gate.next_running(proc)  # held just before run(): it cannot have finished
        os.kill(victim, signal.SIGKILL)
        gate.open()
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 3, stderr  # the model is good everywhere: no boundary
    doc = json.loads(stdout)
    verdicts = {p["version"]: p["verdict"] for p in doc["probes"]}
    assert sorted(verdicts.values()) == ["crash", "good", "good"], verdicts
    crashed = next(p for p in doc["probes"] if p["verdict"] == "crash")
    assert "SIGKILL" in crashed["why"]
    again = subprocess.run(argv, capture_output=True, text=True)
    assert again.returncode == 3
    assert sorted(versions(tmp_path / "res")) == ["1.19.0", "1.19.2", "1.20.0"]  # nothing probed twice


def test_worker_over_its_memory_limit_is_recorded(bisect, tmp_path):
    model = builders.save(builders.big_alloc_model(), tmp_path / "big.onnx")  # wants 4 GiB
    np.savez(tmp_path / "b.npz", x=np.ones(1, np.float32))
    r = bisect("sweep", "--model", str(model), "--inputs", str(tmp_path / "b.npz"), "--from", "1.19.2", "--to", "1.19.2",
               "--memory-limit", "1024", "--json")
    assert r.returncode == 3, r.stderr
    (probe,) = r.json()["probes"]
    assert probe["verdict"] == "error"
    assert "Failed to allocate memory" in probe["why"]


def test_corrupt_environment_is_rebuilt(fresh_cache, residual_norm, tmp_path):
    model, batch = residual_norm
    args = ("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.19.2")
    first = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r1"), capture_output=True, text=True)
    assert first.returncode == 3, first.stderr
    (site,) = fresh_cache.glob("envs/*/onnxruntime-1.19.2/lib/python*/site-packages")
    (site / "onnxruntime" / "__init__.py").unlink()  # a damaged environment
    second = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r2"), capture_output=True, text=True)
    assert second.returncode == 3, second.stderr
    (rec,) = probes(tmp_path / "r2")
    assert rec["status"] == "ran" and "environment rebuilt" in rec["reason"]
    assert (site / "onnxruntime" / "__init__.py").exists()


def _mount(*args: str) -> None:
    r = subprocess.run(["mount", *args], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"mount {' '.join(args)} failed: {r.stderr.strip()}")
        pytest.skip(f"cannot mount here ({r.stderr.strip()})")


def test_read_only_cache_serves_what_it_holds(fresh_cache, residual_norm, tmp_path):
    model, batch = residual_norm
    warm = subprocess.run(harness("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to",
                                  "1.19.2", cache=fresh_cache, results=tmp_path / "r1"), capture_output=True, text=True)
    assert warm.returncode == 3, warm.stderr
    _mount("--bind", str(fresh_cache), str(fresh_cache))
    try:
        _mount("-o", "remount,ro,bind", str(fresh_cache))
        r = subprocess.run(harness("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to",
                                   "1.20.0", cache=fresh_cache, results=tmp_path / "r2"), capture_output=True, text=True)
    finally:
        subprocess.run(["umount", str(fresh_cache)], check=True)
    assert r.returncode == 3, r.stderr  # one good release, one that cannot be installed: no boundary
    got = {p["version"]: (p["verdict"], p["why"]) for p in json.loads(r.stdout)["probes"]}
    assert got["1.19.2"][0] == "good"
    assert got["1.20.0"][0] == "skip" and "Read-only file system" in got["1.20.0"][1]
    assert "Traceback" not in r.stderr


def test_full_results_disk_stops_cleanly_and_loses_nothing(cache_dir, residual_norm, tmp_path):
    model, batch = residual_norm
    results = tmp_path / "res"
    results.mkdir()
    _mount("-t", "tmpfs", "-o", "size=128k", "tmpfs", str(results))
    try:
        filler = results / "filler"
        argv = harness("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.0", "--to", "1.21.1",
                       cache=cache_dir, results=results)
        with open(filler, "wb") as f:  # leave room for the manifest and about two probes
            f.write(b"\0" * (128 - 16) * 1024)
        full = subprocess.run(argv, capture_output=True, text=True)
        assert full.returncode == 1, full.stderr
        lines = full.stderr.strip().splitlines()
        assert "Traceback" not in full.stderr
        assert lines[-1].startswith("error: cannot record the probe of") and "No space left on device" in lines[-1]
        saved = versions(results)
        assert 1 <= len(saved) < 6
        filler.unlink()
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        after = versions(results)
        assert after[: len(saved)] == saved and sorted(after) == sorted(set(after)) and len(after) == 6
    finally:
        subprocess.run(["umount", str(results)], check=True)


def test_two_runs_share_one_cache(fresh_cache, residual_norm, tmp_path):
    model, batch = residual_norm
    other = builders.save(builders.residual_overflow_model(), tmp_path / "overflow.onnx")
    runs = [
        subprocess.Popen(harness("sweep", "--model", str(m), "--inputs", str(batch), "--from", "1.19.0", "--to",
                                 "1.20.0", cache=fresh_cache, results=tmp_path / f"r{i}"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i, m in enumerate((model, other))
    ]
    docs = []
    for proc in runs:
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode in (0, 3), stderr
        docs.append(json.loads(stdout))
    first = {p["version"]: p["verdict"] for p in docs[0]["probes"]}
    second = {p["version"]: p["verdict"] for p in docs[1]["probes"]}
    assert first == {"1.19.0": "good", "1.19.2": "good", "1.20.0": "bad"}
    assert second == {"1.19.0": "good", "1.19.2": "good", "1.20.0": "good"}
    assert len(list(fresh_cache.glob("envs/*/onnxruntime-*/ortbisect-ready.json"))) == 3


def _replace(path: Path, content: bytes) -> None:
    """A new file in place of `path`: uv links an environment's files to its own cache, so writing into one
    would damage every environment of that wheel on this machine."""
    path.unlink()
    path.write_bytes(content)


def _site(cache: Path, version: str) -> Path:
    (site,) = cache.glob(f"envs/*/onnxruntime-{version}/lib/python*/site-packages")
    return site


def _run_then_copy_1_19_2_into_1_20_0(cache: Path, residual_norm, tmp_path: Path) -> tuple[tuple, Path]:
    """A real run over 1.19.2..1.20.0 (boundary found), then 1.20.0's site-packages replaced by 1.19.2's: the
    run's arguments and the site that now holds the other release."""
    model, batch = residual_norm
    args = ("run", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.20.0")
    first = subprocess.run(harness(*args, cache=cache, results=tmp_path / "r1"), capture_output=True, text=True)
    assert first.returncode == 0, first.stderr
    wrong, right = _site(cache, "1.20.0"), _site(cache, "1.19.2")
    shutil.rmtree(wrong)
    shutil.copytree(right, wrong, symlinks=True)
    return args, wrong


def test_an_environment_holding_another_release_is_rebuilt_not_judged(fresh_cache, residual_norm, tmp_path):
    """A cached 1.20.0 environment that holds the 1.19.2 package (a cache restored from another machine, a
    hand-made install): the worker's own version is compared with the release asked, the environment rebuilt,
    and 1.20.0 is judged on 1.20.0 (bad), not called good on 1.19.2's behalf."""
    args, wrong = _run_then_copy_1_19_2_into_1_20_0(fresh_cache, residual_norm, tmp_path)
    second = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r2"), capture_output=True, text=True)
    assert second.returncode == 0, second.stderr  # the boundary again, not "no boundary" (exit 3)
    rec = next(r for r in probes(tmp_path / "r2") if r["version"] == "1.20.0")
    assert rec["result"]["onnxruntime"]["version"] == "1.20.0"
    assert ("environment rebuilt: the environment of 1.20.0 is not the release's wheels: "
            "it holds onnxruntime 1.19.2, not 1.20.0") in rec["reason"], rec["reason"]


def test_a_damaged_library_that_crashes_the_worker_is_no_verdict(fresh_cache, residual_norm, tmp_path):
    """onnxruntime's compiled module cut short in a cached environment: the worker dies by a signal (or fails
    to import). The installed files are checked against the wheel's RECORD before a crash can be a verdict:
    the environment is rebuilt and the probe runs; with --bad-if crash there is no false boundary."""
    model, batch = residual_norm
    args = ("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.19.2",
            "--bad-if", "crash")
    first = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r1"), capture_output=True, text=True)
    assert first.returncode == 3, first.stderr
    (lib,) = _site(fresh_cache, "1.19.2").glob("onnxruntime/capi/onnxruntime_pybind11_state*.so")
    data = lib.read_bytes()
    _replace(lib, data[: len(data) // 2])
    second = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r2"), capture_output=True, text=True)
    assert second.returncode == 3, second.stderr
    (rec,) = probes(tmp_path / "r2")
    # the RECORD check before the first probe caught it: the cut library never ran
    assert rec["status"] == "ran" and "not the release's wheels: onnxruntime/capi/" in rec["reason"], rec["reason"]
    assert lib.stat().st_size == len(data)


def _swept_1_19_2(cache: Path, residual_norm, tmp_path: Path) -> Path:
    """The site-packages of 1.19.2's environment, made by a real sweep of that one release."""
    model, batch = residual_norm
    subprocess.run(harness("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.19.2",
                           cache=cache, results=tmp_path / "r"), capture_output=True, text=True, check=False)
    return _site(cache, "1.19.2")


def test_installed_files_are_checked_against_the_wheels_record(fresh_cache, residual_norm, tmp_path):
    from harness.runners.verify import verify_site

    site = _swept_1_19_2(fresh_cache, residual_norm, tmp_path)
    memo = tmp_path / "memo.json"
    assert verify_site(site, "onnxruntime", "1.19.2", memo) is None
    assert verify_site(site, "onnxruntime", "1.20.0", memo) == "it holds onnxruntime 1.19.2, not 1.20.0"
    target = site / "onnxruntime" / "__init__.py"
    _replace(target, target.read_bytes() + b"\n# changed\n")
    said = verify_site(site, "onnxruntime", "1.19.2", memo)
    assert said is not None and "onnxruntime/__init__.py" in said


def _forge_record(site: Path, dist_info: Path, changed: tuple[str, ...]) -> None:
    """Rewrite RECORD as a careful forger would: the hash and size of each `changed` file as it is now, and
    every path under the dist-info renamed for 1.20.0."""
    import base64
    import csv
    import hashlib
    import io

    record = dist_info / "RECORD"
    rows = []
    for name, digest, size in csv.reader(record.read_text().splitlines()):
        if name in changed:
            data = (site / name).read_bytes()
            digest = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            size = str(len(data))
        rows.append([name.replace("1.19.2.dist-info", "1.20.0.dist-info"), digest, size])
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    record.write_text(out.getvalue())


def test_a_forged_release_is_never_judged_as_the_one_asked(fresh_cache, residual_norm, tmp_path):
    """1.19.2's package in 1.20.0's environment, forged through and through: `__version__` edited, the dist-info
    renamed, METADATA and RECORD rewritten so that every hash matches. Only the build's own commit tells, and it
    is checked before the probe is a verdict: 1.20.0 is rebuilt and judged bad, the boundary found (exit 0)."""
    args, wrong = _run_then_copy_1_19_2_into_1_20_0(fresh_cache, residual_norm, tmp_path)
    info = wrong / "onnxruntime-1.19.2.dist-info"
    meta = info / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 1.19.2", "Version: 1.20.0", 1))
    init = wrong / "onnxruntime" / "__init__.py"
    text = init.read_text()
    assert '__version__ = "1.19.2"' in text
    _replace(init, text.replace('__version__ = "1.19.2"', '__version__ = "1.20.0"').encode())
    _forge_record(wrong, info, ("onnxruntime/__init__.py", f"{info.name}/METADATA"))
    info.rename(wrong / "onnxruntime-1.20.0.dist-info")

    second = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r2"), capture_output=True, text=True)
    assert second.returncode == 0, second.stderr  # the boundary, not "both ends are good" (exit 3)
    rec = next(r for r in probes(tmp_path / "r2") if r["version"] == "1.20.0")
    assert rec["result"]["onnxruntime"]["version"] == "1.20.0"
    assert "its build names commit ffceed9d44 (onnxruntime 1.19.2's), not c4fb724e81" in rec["reason"], rec["reason"]
    assert "git-commit-id=ffceed9d44" not in rec["result"]["onnxruntime"]["build_info"]


def test_a_planted_pth_never_runs_and_the_environment_is_rebuilt(fresh_cache, residual_norm, tmp_path):
    """A `.pth` in site-packages runs at every start of a Python with `site`: it could put a forged package
    first on sys.path without touching the real one. The worker runs without `site`, and the environment,
    holding a file no wheel's RECORD names, is rebuilt before its first probe."""
    model, batch = residual_norm
    args = ("sweep", "--model", str(model), "--inputs", str(batch), "--from", "1.19.2", "--to", "1.19.2")
    first = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r1"), capture_output=True, text=True)
    assert first.returncode == 3, first.stderr
    site = _site(fresh_cache, "1.19.2")
    ran = tmp_path / "PTH-RAN"
    forged = tmp_path / "forged"
    (forged / "onnxruntime").mkdir(parents=True)
    (forged / "onnxruntime" / "__init__.py").write_text(f"open({str(ran)!r}, 'w')\n__version__ = '1.19.2'\n")
    (site / "zz-planted.pth").write_text(f"{forged}\nimport os; open({str(ran)!r}, 'w')\n")

    second = subprocess.run(harness(*args, cache=fresh_cache, results=tmp_path / "r2"), capture_output=True, text=True)
    assert second.returncode == 3, second.stderr
    assert not ran.exists()
    (rec,) = probes(tmp_path / "r2")
    assert rec["status"] == "ran" and rec["result"]["onnxruntime"]["version"] == "1.19.2"
    assert "zz-planted.pth is on its sys.path but in no installed wheel's RECORD" in rec["reason"], rec["reason"]
    assert not (site / "zz-planted.pth").exists()  # rebuilt: the planted file is gone


def test_the_hash_memo_is_not_fooled_by_a_restored_mtime_and_bytecode_is_never_trusted(fresh_cache, residual_norm,
                                                                                       tmp_path):
    """The memo that spares hashing keys each file by inode, size, mtime and ctime: a same-size edit whose
    mtime is put back (`touch -r`, `cp -p`) is hashed again. Bytecode, which no RECORD lists, is removed rather
    than imported; a link where a wheel installed a file is refused."""
    from harness.runners.verify import verify_site

    site = _swept_1_19_2(fresh_cache, residual_norm, tmp_path)
    memo = tmp_path / "memo.json"
    assert verify_site(site, "onnxruntime", "1.19.2", memo) is None
    assert json.loads(memo.read_text())["files"]  # what was hashed is remembered
    target = site / "onnxruntime" / "__init__.py"
    before = target.stat()
    data = target.read_bytes()
    _replace(target, data.replace(b"import", b"IMPORT", 1))  # the same size
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert target.stat().st_size == before.st_size and target.stat().st_mtime_ns == before.st_mtime_ns
    assert verify_site(site, "onnxruntime", "1.19.2", memo) == (
        "onnxruntime/__init__.py differs from the file the wheel installed (sha256)")
    _replace(target, data)
    assert verify_site(site, "onnxruntime", "1.19.2", memo) is None

    cache = site / "onnxruntime" / "__pycache__"
    cache.mkdir(exist_ok=True)
    (cache / "__init__.cpython-311.pyc").write_bytes(b"planted")
    assert verify_site(site, "onnxruntime", "1.19.2", memo) is None
    assert not cache.exists()

    (site / "numpy_forged.py").symlink_to(target)
    assert verify_site(site, "onnxruntime", "1.19.2", memo) == (
        "numpy_forged.py is on its sys.path but in no installed wheel's RECORD")
    (site / "numpy_forged.py").unlink()
    real = site / "onnxruntime" / "LICENSE"
    moved = tmp_path / "LICENSE"
    shutil.copy2(real, moved)
    real.unlink()
    real.symlink_to(moved)
    assert verify_site(site, "onnxruntime", "1.19.2", memo) == (
        "onnxruntime/LICENSE is not the regular file the wheel installed")


def test_a_rebuild_is_told_by_the_probe_that_used_it_and_by_no_later_one():
    """Why an environment was rebuilt belongs to the first probe that ran in it: a later probe of the same
    release in the command (a repeat, a timed baseline) found it right and must not say "rebuilt"."""
    from replay import ReplayRunner, ran

    from harness.releases.versions import Release

    class ForgedOnce(ReplayRunner):
        forged = True

        def verify(self, env):
            forged, ForgedOnce.forged = ForgedOnce.forged, False
            return "onnxruntime/__init__.py: hash differs from RECORD" if forged else None

    runner = ForgedOnce({"1.20.0": ran(4, 0)})
    release = Release("1.20.0", ["onnxruntime-1.20.0-cp311-cp311-manylinux_2_27_x86_64.whl"])
    _, first = runner.prepare_verified(release)
    _, second = runner.prepare_verified(release)
    assert first is not None and "hash differs from RECORD" in first
    assert second is None
    # a rebuild made ahead of the probe (an install in the background) is told by the probe that follows
    ForgedOnce.forged = True
    _, ahead = runner.prepare_verified(release, report=False)
    _, probe = runner.prepare_verified(release)
    assert ahead is None and probe is not None and "hash differs from RECORD" in probe
