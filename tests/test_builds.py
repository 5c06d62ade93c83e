"""The published wheels' build commits: a build that names another release's commit is not the release asked."""

from harness.releases import builds
from harness.releases.builds import WHEEL_COMMITS, build_mismatch


def info(commit: str) -> str:
    return f"ORT Build Info: git-branch=HEAD, git-commit-id={commit}, build type=Release"


def test_each_known_release_matches_its_own_commit_and_no_other():
    known = WHEEL_COMMITS["onnxruntime"]
    assert len(set(known.values())) == len(known)  # one commit per release, so a commit names its release
    for version, commit in known.items():
        assert build_mismatch("onnxruntime", version, info(commit)) is None
        others = [v for v in known if v != version]
        said = build_mismatch("onnxruntime", others[0], info(commit))
        assert said is not None and f"(onnxruntime {version}'s)" in said


def test_abbreviations_of_one_commit_agree_and_short_ones_decide_nothing():
    assert build_mismatch("onnxruntime", "1.24.1", info("470ae16099abcdef")) is None
    assert build_mismatch("onnxruntime", "1.32.0", info("fab30a4ffff")) is None
    assert build_mismatch("onnxruntime", "1.24.1", info("470ae1")) is not None  # under 7 digits: not the same


def test_what_the_table_does_not_know_is_not_refused():
    assert build_mismatch("onnxruntime", "9.0.0", info("0123456789")) is None  # a newer release
    assert build_mismatch("onnxruntime", "9.0.0", info("26250ae74d")) == "its build names commit 26250ae74d (onnxruntime 1.19.0's)"
    assert build_mismatch("onnxruntime", "1.20.0.dev2", info("c4fb724e81")) is None  # a dev build of a release's commit
    assert build_mismatch("onnxruntime", "1.20.0rc1", info("c4fb724e81")) is None
    assert build_mismatch("onnxruntime-openvino", "1.24.1", info("b5963e82c8")) is None  # another package's builds
    assert build_mismatch("onnxruntime", "1.24.1", None) is None  # nothing reported: the worker never imported it


def test_a_build_that_names_no_commit_is_no_build_of_any_package_or_release():
    """A stub's or a hand-made build's information may name no commit: it tells nothing, so it is not trusted,
    whether the release is one the table knows, a newer one, a development build or another package's."""
    for package, version in (("onnxruntime", "1.24.1"), ("onnxruntime", "1.20.3"), ("onnxruntime", "1.20.0.dev2"),
                             ("onnxruntime-openvino", "1.24.1"), ("onnxruntime-gpu", "9.0.0")):
        for text in ("", "ORT Build Info: build type=Release", "ORT Build Info: git-branch=HEAD, git-commit-id="):
            assert build_mismatch(package, version, text) is not None, (package, version, text)
    assert build_mismatch("onnxruntime", "1.24.1", "ORT Build Info: build type=Release") == (
        "its build names no commit, not 470ae16099 (1.24.1's wheel)")
    assert build_mismatch("onnxruntime", "1.20.3", "git-commit-id=not-hex") == (
        "its build names something that is not a commit id")


def test_a_package_whose_early_builds_name_no_commit_is_exempt_before_its_first_that_does():
    assert builds.COMMITLESS_BEFORE["onnxruntime-node"] == "1.21.0"  # measured: its library names none before
    assert build_mismatch("onnxruntime-node", "1.20.1", "") is None
    assert build_mismatch("onnxruntime-node", "1.20.1", "git-commit-id=not-hex") is not None  # a bad one is still bad
    assert build_mismatch("onnxruntime-node", "1.21.0", "") == "its build names no commit, not e0b66cad28 (1.21.0's npm build)"
    assert build_mismatch("onnxruntime-node", "1.31.1", "git-commit-id=6af1a93") == (  # the wheel's, not npm's
        "its build names commit 6af1a93, not 41d4d61f1 (1.31.1's npm build)")
    assert build_mismatch("onnxruntime", "1.20.1", "") is not None

