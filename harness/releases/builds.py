"""The commit each onnxruntime release's published wheel (and npm build) names in `get_build_info()`.

Read from the wheels themselves (`onnxruntime.get_build_info()` after
installing each release for Linux x86_64; the aarch64 wheels of 1.19.0, 1.24.1
and 1.32.0 name the same commits). Every one says `git-branch=HEAD`, so the
branch tells nothing; the commit does. A worker that reports another
release's commit is running another release, whatever its `__version__` says.
Pure: no I/O.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from harness.releases.packages import parse_build_info
from harness.vocabulary import binding_of

#: release -> the commit (as abbreviated in the build info) its `onnxruntime` wheel names
WHEEL_COMMITS = {
    "onnxruntime": {
        "1.19.0": "26250ae74d", "1.19.2": "ffceed9d44", "1.20.0": "c4fb724e81", "1.20.1": "5c1b7ccbff",
        "1.21.0": "e0b66cad28", "1.21.1": "0e4dd5cbb1", "1.22.0": "f217402897", "1.22.1": "89746dc19a",
        "1.23.0": "be835efc56", "1.23.1": "d9b2048791", "1.23.2": "a83fc4d58c", "1.24.1": "470ae16099",
        "1.24.2": "058787ceea", "1.24.3": "3a728b7506", "1.24.4": "2d924974ef", "1.25.0": "93cef98d34",
        "1.25.1": "8a77e45942", "1.26.0": "8c546c37b4", "1.27.0": "8f0278c77b", "1.28.0": "45de2a8b06",
        "1.29.0": "2e2543fbe9", "1.30.0": "f2c39fe", "1.31.0": "402979a", "1.31.1": "6af1a93",
        "1.32.0": "fab30a4",
    },
    # npm's builds, read from their binaries (`git-commit-id=` in onnxruntime-node's libonnxruntime.so.1, which
    # names none before 1.21.0, and in onnxruntime-web's .wasm). A few are of other commits than the wheels of
    # the same number (1.21.1, 1.31.1; web's 1.25.1)
    "onnxruntime-node": {
        "1.21.0": "e0b66cad28", "1.21.1": "8f7cce3a49", "1.22.0": "f217402897", "1.23.0": "be835efc56",
        "1.23.2": "a83fc4d58c", "1.24.1": "470ae16099", "1.24.2": "058787ceea", "1.24.3": "3a728b7506",
        "1.25.1": "8a77e45942", "1.26.0": "8c546c37b4", "1.27.0": "8f0278c77b", "1.29.0": "2e2543fbe9",
        "1.30.0": "f2c39fe2f", "1.31.1": "41d4d61f1",
    },
    "onnxruntime-web": {
        "1.19.0": "26250ae74d", "1.19.2": "ffceed9d44", "1.20.0": "c4fb724e81", "1.20.1": "5c1b7ccbff",
        "1.21.0": "e0b66cad28", "1.21.1": "8f7cce3a49", "1.22.0": "f217402897", "1.23.0": "be835efc56",
        "1.23.2": "a83fc4d58c", "1.24.1": "470ae16099", "1.24.2": "058787ceea", "1.24.3": "3a728b7506",
        "1.25.1": "b743a35beb", "1.26.0": "8c546c37b4", "1.27.0": "8f0278c77b", "1.29.0": "2e2543fbe9",
        "1.30.0": "f2c39fe2f", "1.31.1": "41d4d61f1",
    },
}


#: package -> the first release whose builds name their commit: a build of an earlier one that names none is
#: judged on what else it reports. Every build of a package not listed names its commit (the wheels of
#: onnxruntime and onnxruntime-openvino all do), so one of them that names none is no build of it.
COMMITLESS_BEFORE: dict[str, str] = {"onnxruntime-node": "1.21.0"}  # its library names none before 1.21.0


def _may_name_no_commit(package: str, version: str) -> bool:
    first = COMMITLESS_BEFORE.get(package)
    try:
        return first is not None and Version(version) < Version(first)
    except InvalidVersion:
        return False


def _same_commit(a: str, b: str) -> bool:
    """Abbreviations of one commit: the shorter is a prefix of the longer (7 hex digits at least)."""
    a, b = a.lower(), b.lower()
    n = min(len(a), len(b))
    return n >= 7 and a[:n] == b[:n]


def _is_pre(version: str) -> bool:
    try:
        return Version(version).is_prerelease
    except InvalidVersion:
        return True


def build_mismatch(package: str, version: str, build_info: str | None) -> str | None:
    """Why a build that reports `build_info` is not `package` `version` as published, or None (also where
    nothing more is known: a release newer than this table, another package). A build names the commit it was
    built from: one that names none is no build at all, unless its package's builds of that release name none
    (COMMITLESS_BEFORE). None where nothing was reported (`build_info` None: the worker never imported it)."""
    if build_info is None:
        return None
    commit = parse_build_info(build_info)["commit"]
    known = WHEEL_COMMITS.get(package)
    expected = (known or {}).get(version)
    if not commit:
        if "git-commit-id=" not in build_info and _may_name_no_commit(package, version):
            return None
        said = "something that is not a commit id" if "git-commit-id=" in build_info else "no commit"
        return f"its build names {said}" + (f", not {expected} ({version}'s {_published(package)})" if expected else "")
    if not known:
        return None
    if expected is not None and _same_commit(commit, expected):
        return None
    other = next((v for v, c in known.items() if v != version and _same_commit(commit, c)), None)
    whose = f" ({package} {other}'s)" if other else ""
    if expected is None:
        # a development build or release candidate may come from a release's own commit: only a final
        # release this table does not know yet is held to having a commit of its own
        return f"its build names commit {commit}{whose}" if other and not _is_pre(version) else None
    return f"its build names commit {commit}{whose}, not {expected} ({version}'s {_published(package)})"


def _published(package: str) -> str:
    return "wheel" if binding_of(package) == "python" else "npm build"
