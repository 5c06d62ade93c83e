"""Release listing from a PEP 691 page: ordering, pre-releases, yanked files, wheel tags."""

import pytest
from packaging.tags import Tag

from harness.errors import UsageError
from harness.releases.versions import (
    Release,
    Target,
    releases_from_simple_json,
    select_range,
)


def page(*files):
    return {"name": "onnxruntime", "files": [{"filename": f, "yanked": y} for f, y in files]}


LINUX = "cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64"
ARM = "cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64"
DOC = page(
    (f"onnxruntime-1.10.0-{LINUX}.whl", False),
    (f"onnxruntime-1.9.0-{LINUX}.whl", False),
    (f"onnxruntime-1.24.0.dev20251031003-{LINUX}.whl", False),
    (f"onnxruntime-1.24.1rc1-{LINUX}.whl", False),
    (f"onnxruntime-1.24.1-{LINUX}.whl", False),
    (f"onnxruntime-1.24.1-{ARM}.whl", False),
    (f"onnxruntime-1.24.2-{LINUX}.whl", True),
    ("onnxruntime-1.24.3-cp311-cp311-macosx_14_0_arm64.whl", False),
    ("onnxruntime-1.24.3.tar.gz", False),
)


def test_order_prereleases_and_yanked():
    rels = releases_from_simple_json(DOC)
    assert [r.version for r in rels] == ["1.9.0", "1.10.0", "1.24.1", "1.24.3"]


def test_wheel_for_target():
    rels = {r.version: r for r in releases_from_simple_json(DOC)}
    x86, arm, py310 = Target("x86_64", "3.11"), Target("aarch64", "3.11"), Target("x86_64", "3.10")
    assert rels["1.24.1"].wheel_for(x86).endswith("x86_64.whl")
    assert rels["1.24.1"].wheel_for(arm).endswith("aarch64.whl")
    assert rels["1.24.1"].wheel_for(py310) is None
    assert rels["1.24.3"].wheel_for(x86) is None  # only a macOS wheel: a skip on Linux


def test_target_accepts_abi3_and_pure():
    t = Target("x86_64", "3.11")
    assert t.accepts(Tag("cp38", "abi3", "manylinux_2_17_x86_64"))
    assert t.accepts(Tag("py3", "none", "any"))
    assert not t.accepts(Tag("cp311", "cp311", "win_amd64"))
    assert not t.accepts(Tag("cp312", "cp312", "manylinux_2_17_x86_64"))


RELS = [Release(v, ["x"]) for v in ("1.19.0", "1.19.2", "1.20.0", "1.21.0")]


def test_select_range_inclusive():
    assert [r.version for r in select_range(RELS, "1.19.2", "1.21.0")] == ["1.19.2", "1.20.0", "1.21.0"]


@pytest.mark.parametrize("lo, hi, message", [
    ("1.24.0", "1.21.0", "--from 1.24.0: no such onnxruntime release"),
    ("1.19.0", "banana", "--to: 'banana' is not a version number"),
    ("1.21.0", "1.19.0", "--from 1.21.0 is after --to 1.19.0"),
])
def test_select_range_errors(lo, hi, message):
    with pytest.raises(UsageError, match=message.replace(".", r"\.")):
        select_range(RELS, lo, hi)
