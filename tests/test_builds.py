"""The published wheels' build commits: a build that names another release's commit is not the release asked."""

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
    assert build_mismatch("onnxruntime", "1.24.1", "a local build, no commit") is None
