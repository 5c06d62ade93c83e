"""Digests of the model a copy cannot fool: every memo of a file's content is keyed by its identity (device,
inode, size, mtime and ctime), so bytes replaced by a copy that keeps size and mtime are hashed again."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import builders
import numpy as np
import pytest

from harness import worker
from harness.models import registry as models
from harness.runners.docker import volumes


def nan_weights_keeping_size_and_mtime(data: Path) -> None:
    """What `cp -p`, `rsync -a`, `tar x` or `touch -r` leave: the same size and mtime, other bytes (fp16 NaN)."""
    st = data.stat()
    nan = np.full(st.st_size // 2, np.nan, np.float16).tobytes()
    assert len(nan) == st.st_size and data.read_bytes() != nan
    data.write_bytes(nan)
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = data.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def settled(*paths: Path) -> None:
    """Wait until each file's last change is old enough to key a memo (settled_identity)."""
    deadline = time.monotonic() + 5
    while any(models.settled_identity(p) is None for p in paths):
        assert time.monotonic() < deadline, "a file's ctime never settled"
        time.sleep(0.02)


def test_data_overwritten_keeping_size_and_mtime_changes_every_memoised_digest(tmp_path):
    model = builders.external_data_model(tmp_path / "m.onnx")
    data = tmp_path / "m.onnx_data"
    cache = tmp_path / "cache"
    settled(model, data)
    before = models.files_digest([model, data], cache)
    memo = json.loads((cache / "digests.json").read_text())
    assert memo[str(data.resolve())]["identity"] == worker.file_identity(data)  # memoised, by identity
    assert models.files_digest([model, data], cache) == before
    shipped_before = volumes.file_digest(data)
    request = {"model": str(data), "session_options": {}}
    session_before = worker.session_key(request)

    nan_weights_keeping_size_and_mtime(data)

    after = models.files_digest([model, data], cache)
    assert after != before
    assert after == models.digest_of([models.file_sha256(model), models.file_sha256(data)])
    assert volumes.file_digest(data) != shipped_before
    assert volumes.file_digest(data) == models.file_sha256(data)
    assert worker.session_key(request) != session_before


def test_a_model_file_replaced_keeping_size_and_mtime_is_read_again(tmp_path):
    """The facts memo: the graph's inputs of the replaced file, not the former one's."""
    path = builders.save(builders.new_opset_model(17, width=8), tmp_path / "m.onnx")
    other = builders.save(builders.new_opset_model(17, width=9), tmp_path / "other.onnx")
    assert path.stat().st_size == other.stat().st_size
    cache = tmp_path / "cache"
    settled(path)
    assert models.model_facts(path, cache).inputs[0].dims == ("batch", 8)
    st = path.stat()
    path.write_bytes(other.read_bytes())
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert models.model_facts(path, cache).inputs[0].dims == ("batch", 9)


def test_a_file_changed_just_now_keys_no_memo_until_its_ctime_can_tell_a_next_change(tmp_path):
    """A change within the same clock tick may leave the ctime as it was: such a file is hashed every time until
    its last change is older than a tick, then memoised."""
    f = tmp_path / "w.bin"
    f.write_bytes(b"\0" * 64)
    cache = tmp_path / "cache"
    if models.settled_identity(f) is None:  # the usual case: written a moment ago
        models.files_digest([f], cache)
        assert not (cache / "digests.json").exists()
    settled(f)
    models.files_digest([f], cache)
    assert str(f.resolve()) in json.loads((cache / "digests.json").read_text())


def test_a_memo_of_the_former_keys_or_of_the_wrong_shape_is_not_trusted(tmp_path):
    f = tmp_path / "w.bin"
    f.write_bytes(b"\1" * 64)
    settled(f)
    cache = tmp_path / "cache"
    cache.mkdir()
    st = f.stat()
    forged = {f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}": "0" * 64,
              str(f.resolve()): {"identity": worker.file_identity(f), "sha256": "not hex"}}
    (cache / "digests.json").write_text(json.dumps(forged))
    assert models.files_digest([f], cache) == models.digest_of([models.file_sha256(f)])
    assert list(json.loads((cache / "digests.json").read_text())) == [str(f.resolve())]


@pytest.mark.release
def test_a_run_after_the_data_was_overwritten_keeping_mtime_probes_again(bisect, tmp_path):
    """Before: the second run found the first run's key and printed "(saved) good" for both ends; a fresh
    cache said both ends are bad. Now the digest changes, so does the run's key, and both ends are probed."""
    model = builders.external_data_model(tmp_path / "m.onnx")
    np.savez(tmp_path / "batch.npz", x=np.ones((2, 8), np.float16))
    settled(model, tmp_path / "m.onnx_data")
    args = ("run", "--model", str(model), "--inputs", str(tmp_path / "batch.npz"), "--from", "1.19.0", "--to", "1.19.2",
            "--json")
    first = bisect(*args, results=tmp_path / "res")
    assert first.returncode == 3, first.stderr  # both ends good: nothing to find
    assert {p["verdict"] for p in first.json()["probes"]} == {"good"}

    nan_weights_keeping_size_and_mtime(tmp_path / "m.onnx_data")

    second = bisect(*args, results=tmp_path / "res")
    doc = second.json()
    assert doc["run_id"] != first.json()["run_id"]
    assert [(p["verdict"], p["reused"]) for p in doc["probes"]] == [("bad", False), ("bad", False)], second.stderr
