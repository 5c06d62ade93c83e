"""Which commits between two onnxruntime builds touch the source of a blamed transformer or kernel.

Given a clone of onnxruntime, the last good release L and the first bad release
B (each by the commit its wheel's `get_build_info()` names, else by its tag
v{version}), this lists the commits of L..B that touch the files of B's tree
where the blamed graph transformer or kernel lives. They are suspects, not a
verdict: code those files call elsewhere (MLAS, shared helpers, the session)
is not followed, and the range's size says how much was left out.

Where a thing lives, read in B's tree:

  transformer NAME   a .cc/.h under onnxruntime/core/optimizer (or the training
                     optimizer) holding the string literal "NAME", the name it
                     gives GraphTransformer(...) or RewriteRule(...); files that
                     only instantiate it (graph_transformer_utils.cc) have none.
  kernel OP          a file under the provider's directories where a macro whose
                     name holds KERNEL (or a #define forwarding its first
                     parameter to one) is called with OP as its first argument;
                     a domain constant stated there must be the blamed domain.
                     Registration lists (..._CLASS_NAME(kCpuExecutionProvider,
                     ..., Add)) name the provider first and do not match.

Each located file brings the .h/.cc (and _impl) of the same stem beside it. A
located file that L's tree lacks is followed through its renames.

Names are data: they reach git only as the argument of `-e` and regular
expressions only through re.escape. git runs from an argument list, never a
shell, with no terminal prompt. Everything reads revisions (`git grep REV`,
`git cat-file`, `git log`), so a blobless clone without a work tree serves;
the blobs a search needs are fetched in one batch first.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.errors import HarnessError, UsageError

OPTIMIZER_DIRS = ("onnxruntime/core/optimizer", "orttraining/orttraining/core/optimizer", "orttraining/core/optimizer")
# Execution provider -> the directories of its kernels. Providers that compile subgraphs through op builders
# (TensorRT, OpenVINO, QNN, CoreML, ...) or register through tables (DirectML) have no kernel macros to find.
PROVIDER_DIRS = {
    "CPUExecutionProvider": ("onnxruntime/core/providers/cpu", "onnxruntime/contrib_ops/cpu"),
    "CUDAExecutionProvider": ("onnxruntime/core/providers/cuda", "onnxruntime/contrib_ops/cuda"),
    "ROCMExecutionProvider": ("onnxruntime/core/providers/rocm", "onnxruntime/contrib_ops/rocm"),
    "JsExecutionProvider": ("onnxruntime/core/providers/js", "onnxruntime/contrib_ops/js"),
    "WebGpuExecutionProvider": ("onnxruntime/core/providers/webgpu", "onnxruntime/contrib_ops/webgpu"),
}
# Operator domain -> the constant onnxruntime's kernel registrations spell it with.
DOMAINS = {
    "": "kOnnxDomain", "ai.onnx": "kOnnxDomain", "ai.onnx.ml": "kMLDomain", "com.microsoft": "kMSDomain",
    "com.microsoft.nchwc": "kMSNchwcDomain", "com.ms.internal.nhwc": "kMSInternalNHWCDomain",
}
SOURCE_SUFFIXES = (".cc", ".h", ".cpp", ".hpp", ".cu", ".cuh")
BUILD_COMMIT = "build commit"

_HEX = re.compile(r"[0-9a-fA-F]{7,40}")
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]*")
_PR = re.compile(r"\(#(\d+)\)\s*$")
# Variables that would point git at another repository than the one named with -C.
_REPO_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                   "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_COMMON_DIR")


# --- git --------------------------------------------------------------------------------------


def git(repo: Path | None, *args: str, ok: Iterable[int] = (0,), stdin: str = "",
        binary: bool = False) -> subprocess.CompletedProcess:
    """Run git (in `repo` when given); an exit status outside `ok` is a HarnessError with git's own words."""
    env = {k: v for k, v in os.environ.items() if k not in _REPO_VARIABLES}
    env.update(GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    cmd = ["git", *(["-C", str(repo)] if repo is not None else []), "-c", "core.quotePath=false", *args]
    try:
        if binary:
            proc = subprocess.run(cmd, check=False, capture_output=True, input=stdin.encode(), env=env)
        else:
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True, encoding="utf-8",
                                  errors="replace", input=stdin, env=env)
    except FileNotFoundError:
        raise HarnessError("git is not installed (it reads the onnxruntime clone)") from None
    if proc.returncode not in tuple(ok):
        raise HarnessError(f"git {args[0]} failed{f' in {repo}' if repo else ''}: {git_error(proc)}")
    return proc


def git_error(proc: subprocess.CompletedProcess) -> str:
    """The line of git's stderr that says why (its first fatal/error line, else its last line)."""
    err = proc.stderr.decode("utf-8", "replace") if isinstance(proc.stderr, bytes) else proc.stderr or ""
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith(("fatal:", "error:")):
            return ln
    return lines[-1] if lines else f"exit status {proc.returncode}"


def _is_repo_root(path: Path) -> bool:
    """Whether `path` is itself a git repository (a work tree's top or a bare repository), not inside one."""
    if not path.is_dir():
        return False
    proc = git(path, "rev-parse", "--is-bare-repository", "--absolute-git-dir", ok=range(256))
    if proc.returncode != 0:
        return False
    bare, git_dir = proc.stdout.split("\n")[:2]
    if bare == "true":
        return Path(git_dir).resolve() == path.resolve()
    top = git(path, "rev-parse", "--show-toplevel", ok=range(256)).stdout.strip()
    return bool(top) and Path(top).resolve() == path.resolve()


def _check_repo(repo: Path) -> None:
    if not _is_repo_root(Path(repo)):
        raise UsageError(f"{repo} is not a git repository: name a clone of onnxruntime")


def _commit(repo: Path, rev: str) -> str | None:
    """The full sha of commit `rev`, None when the clone has no such commit."""
    if not rev or rev.startswith("-") or any(c in rev for c in "\n\0"):
        return None
    proc = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", ok=range(256))
    return proc.stdout.strip() if proc.returncode == 0 else None


def _sha(repo: Path, rev: str) -> str:
    sha = _commit(repo, rev)
    if sha is None:
        raise UsageError(f"{repo} has no commit {rev!r}")
    return sha


# --- which builds -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    sha: str
    origin: str  # "build commit" | "tag v1.24.1"


def resolve(repo: Path, commit: str | None, version: str) -> Resolved:
    """The full sha of a release's build commit when the clone has it, else of its tag v{version}."""
    _check_repo(repo)
    if commit is not None and not _HEX.fullmatch(commit):
        raise UsageError(f"{commit!r} is not a commit id (7 to 40 hex digits)")
    if not _VERSION.fullmatch(version or ""):
        raise UsageError(f"{version!r} is not a release version")
    if commit and (sha := _commit(repo, commit)):
        return Resolved(sha, BUILD_COMMIT)
    tag = f"v{version}"
    if sha := _commit(repo, f"refs/tags/{tag}"):
        return Resolved(sha, f"tag {tag}")
    build = f"the build commit {commit}" if commit else "no build commit (the build info names none)"
    raise UsageError(f"{repo} has neither {build} nor the tag {tag}: fetch them (git fetch --tags) or clone again")


# --- where a thing lives in a tree ------------------------------------------------------------


def _tree(repo: Path, rev: str, dirs: Sequence[str]) -> set[str]:
    out = git(repo, "ls-tree", "-r", "-z", "--name-only", rev, "--", *dirs).stdout
    return {p for p in out.split("\0") if p}


def _prefetch(repo: Path, rev: str, dirs: Sequence[str]) -> None:
    """In a partial clone, fetch the blobs under `dirs` in one batch: git grep would fetch them one by one.
    A diff against the empty tree with --numstat reads them all, and git fetches what a diff needs at once."""
    promisors = git(repo, "config", "--get-regexp", r"^remote\..*\.promisor$", ok=(0, 1)).stdout.split()
    if "true" not in promisors[1::2]:
        return
    empty = git(repo, "hash-object", "-t", "tree", "--stdin").stdout.strip()
    git(repo, "diff-tree", "-r", "--numstat", "--no-renames", empty, rev, "--", *dirs)


def _grep(repo: Path, rev: str, dirs: Sequence[str], text: str, *, word: bool = False) -> list[str]:
    """Source files of `rev` under `dirs` that hold `text` (fixed, never a pattern)."""
    if not text or any(c in text for c in "\n\r\0"):
        return []
    _prefetch(repo, rev, dirs)
    out = git(repo, "grep", "-l", "-z", "-I", "-F", *(["-w"] if word else []), "-e", text, rev, "--", *dirs,
              ok=(0, 1)).stdout
    paths = (p.removeprefix(f"{rev}:") for p in out.split("\0") if p)
    return sorted(p for p in paths if p.endswith(SOURCE_SUFFIXES))


def _with_siblings(files: Iterable[str], tree: set[str]) -> list[str]:
    """Each file with the .h/.cc (and _impl) of the same stem beside it: a class's header and body."""
    found = set(files)
    for f in list(found):
        stem = f.rsplit(".", 1)[0]
        found |= {s for base in (stem, f"{stem}_impl") for s in (base + ext for ext in SOURCE_SUFFIXES) if s in tree}
    return sorted(found)


def transformer_sources(repo: Path, rev: str, name: str) -> list[str]:
    """The files of `rev` that register the graph transformer (or rewrite rule) `name` by its string literal,
    with the header/body beside them."""
    sha = _sha(repo, rev)
    if '"' in name or "\\" in name:
        return []  # no C++ string literal spells it as it is
    found = _grep(repo, sha, OPTIMIZER_DIRS, f'"{name}"')
    return _with_siblings(found, _tree(repo, sha, OPTIMIZER_DIRS)) if found else []


def _read(repo: Path, rev: str, paths: Sequence[str]) -> dict[str, str]:
    """The text of each file of `rev`, through one `git cat-file --batch`."""
    out = git(repo, "cat-file", "--batch", stdin="".join(f"{rev}:{p}\n" for p in paths), binary=True).stdout
    texts, at = {}, 0
    for p in paths:
        end = out.index(b"\n", at)
        header = out[at:end].split()
        at = end + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            texts[p] = out[at:at + size].decode("utf-8", "replace")
            at += size + 1
    return texts


# Joined continuation lines first, then comments out (the order of C's translation phases); literals kept so a
# "//" inside one is not a comment.
_CONTINUATION = re.compile(r"\\\r?\n")
_COMMENT_OR_LITERAL = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/', re.S)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)\(([^)]*)\)(.*)$", re.M)
_DOMAIN_CONSTANT = re.compile(r"\bk\w*Domain\b")


def _code(text: str) -> str:
    text = _CONTINUATION.sub(" ", text)
    return _COMMENT_OR_LITERAL.sub(lambda m: m.group() if m.group()[0] in "\"'" else " ", text)


def _arguments(code: str, open_paren: int) -> str:
    depth = 0
    for i in range(open_paren, min(len(code), open_paren + 8000)):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        if depth == 0:
            return code[open_paren + 1:i]
    return code[open_paren + 1:open_paren + 8000]


def _implied_domains(macro: str) -> set[str]:
    """The domain a macro's name implies: ONNX_CPU_OPERATOR_KERNEL registers in ai.onnx, ..._ML_... in ai.onnx.ml."""
    if "_ML_" in macro:
        return {"kMLDomain"}
    if "_MS_" in macro:
        return {"kMSDomain"}
    return {"kOnnxDomain"} if macro.startswith("ONNX_CPU_OPERATOR") else set()


def _kernel_macros(code: str) -> dict[str, set[str]]:
    """The file's #defines that register a kernel for their first parameter (they forward it as the first
    argument of a KERNEL macro, or of another such #define), each with the domain constants it states."""
    defines = {m.group(1): ([p.strip() for p in m.group(2).split(",")], m.group(3)) for m in _DEFINE.finditer(code)}
    macros: dict[str, set[str]] = {}
    changed = True
    while changed:
        changed = False
        for name, (params, body) in defines.items():
            if name in macros or not params or not params[0]:
                continue
            for call in re.finditer(r"\b(\w+)\s*\(\s*" + re.escape(params[0]) + r"\s*[,)]", body):
                inner = call.group(1)
                if _is_kernel_macro(inner) or inner in macros:
                    macros[name] = (set(_DOMAIN_CONSTANT.findall(body)) | _implied_domains(name)
                                    | macros.get(inner, _implied_domains(inner)))
                    changed = True
                    break
    return macros


def _is_kernel_macro(name: str) -> bool:
    return "KERNEL" in name and not name.endswith("CLASS_NAME")


def registers_kernel(text: str, op_type: str, domain: str) -> bool:
    """Whether a source file registers a kernel for `op_type`: a KERNEL macro (or a #define forwarding to one)
    called with `op_type` first, stating no other domain than `domain`'s."""
    code = _code(text)
    derived = _kernel_macros(code)
    wanted = DOMAINS.get(domain)
    # inside a #define, a parameter of that name is whatever the define is called with, not the op
    forwarded = [d.span() for d in _DEFINE.finditer(code) if op_type in (p.strip() for p in d.group(2).split(","))]
    for m in re.finditer(r"\b(\w+)\s*\(\s*" + re.escape(op_type) + r"\s*[,)]", code):
        macro = m.group(1)
        if not (_is_kernel_macro(macro) or macro in derived) or any(a <= m.start() < b for a, b in forwarded):
            continue
        stated = (set(_DOMAIN_CONSTANT.findall(_arguments(code, code.index("(", m.start()))))
                  | derived.get(macro, _implied_domains(macro)))
        if wanted is None or not stated or wanted in stated:
            return True
    return False


def kernel_sources(repo: Path, rev: str, op_type: str, domain: str, provider: str) -> list[str]:
    """The files of `rev` that register `provider`'s kernel for `op_type` in `domain`, with the header/body beside
    them; none for a provider without known kernel directories (PROVIDER_DIRS)."""
    sha = _sha(repo, rev)
    dirs = PROVIDER_DIRS.get(provider)
    if dirs is None:
        return []
    candidates = _grep(repo, sha, dirs, op_type, word=True)
    texts = _read(repo, sha, candidates) if candidates else {}
    found = [p for p, text in texts.items() if registers_kernel(text, op_type, domain)]
    return _with_siblings(found, _tree(repo, sha, dirs)) if found else []


# --- the commits ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Suspect:
    sha: str
    date: str  # YYYY-MM-DD, the committer date: when it entered the branch (a cherry-pick's, not its author's)
    subject: str
    pr: int | None  # from "(#12345)" at the end of the subject
    paths: tuple[str, ...]  # the located files it touches, as B's tree names them


@dataclass
class CommitRange:
    """The commits of good..bad that touch the located sources, newest first: suspects, not a verdict."""

    good: str
    bad: str
    good_from: str  # "build commit" | "tag v1.x.y"
    bad_from: str
    total: int  # commits in good..bad
    sources: dict[str, list[str]] = field(default_factory=dict)  # "transformer X" / "kernel Add (ai.onnx) on ..."
    unlocated: dict[str, str] = field(default_factory=dict)  # blamed thing -> why no file was found
    suspects: list[Suspect] = field(default_factory=list)

    @property
    def left(self) -> int:
        return len(self.suspects)

    def document(self) -> dict:
        doc = asdict(self)
        doc["left"] = self.left
        doc["suspects"] = [{**asdict(s), "paths": list(s.paths)} for s in self.suspects]
        return doc


_LOG_FORMAT = "--format=%H%x00%cs%x00%s"


def _log(repo: Path, rng: str, paths: Sequence[str], *, follow: bool = False) -> list[tuple[str, str, str, list[str]]]:
    """(sha, date, subject, touched paths) of the commits of `rng` touching `paths`."""
    out = git(repo, "log", "-z", "--name-only", "--no-show-signature", "--no-decorate", "--no-color",
              "--follow" if follow else "--no-follow", _LOG_FORMAT, rng, "--", *paths).stdout
    # -z: "sha NUL date NUL subject NUL" then "\npath NUL" for each touched path; a subject holds no NUL
    tokens = [t.strip("\n") for t in out.split("\0")]
    commits: list[tuple[str, str, str, list[str]]] = []
    i = 0
    while i < len(tokens):
        if _SHA.fullmatch(tokens[i]) and i + 2 < len(tokens):
            commits.append((tokens[i], tokens[i + 1], tokens[i + 2], []))
            i += 3
            continue
        if commits and tokens[i]:
            commits[-1][3].append(tokens[i])
        i += 1
    return commits


def suspects(repo: Path, good: str | None, bad: str | None, transformers: Sequence[str] = (),
             kernels: Sequence[tuple[str, str, str]] = (), *, good_version: str, bad_version: str) -> CommitRange:
    """The commits between the good and the bad build (each its build commit, else its version's tag) that touch
    the sources, located in the bad tree, of the blamed transformers and kernels (op type, domain, provider)."""
    g, b = resolve(repo, good, good_version), resolve(repo, bad, bad_version)
    rng = f"{g.sha}..{b.sha}"
    order = {sha: i for i, sha in enumerate(git(repo, "rev-list", rng).stdout.split())}
    found = CommitRange(g.sha, b.sha, g.origin, b.origin, len(order))
    for name in transformers:
        what = f"transformer {name}"
        if files := transformer_sources(repo, b.sha, name):
            found.sources[what] = files
        else:
            found.unlocated[what] = (f'no source under {OPTIMIZER_DIRS[0]} of the bad tree holds the name "{name}" '
                                     "that a transformer registers itself with")
    for op_type, domain, provider in kernels:
        what = f"kernel {op_type} ({domain or 'ai.onnx'}) on {provider}"
        files = kernel_sources(repo, b.sha, op_type, domain, provider)
        if files:
            found.sources[what] = files
        elif provider not in PROVIDER_DIRS:
            found.unlocated[what] = f"no kernel directories known for {provider}"
        else:
            found.unlocated[what] = (f"no file under {', '.join(PROVIDER_DIRS[provider])} of the bad tree registers "
                                     f"a kernel for {op_type}")
    located = sorted({f for files in found.sources.values() for f in files})
    if not located or not order:
        return found
    touched: dict[str, tuple[str, str, set[str]]] = {}
    for sha, date, subject, paths in _log(repo, rng, located):
        touched[sha] = (date, subject, set(paths) & set(located))
    old = _tree(repo, g.sha, located)
    for path in (p for p in located if p not in old):  # new in the range, or moved: follow it back
        for sha, date, subject, _ in _log(repo, rng, [path], follow=True):
            touched.setdefault(sha, (date, subject, set()))[2].add(path)
    for sha in sorted(touched, key=lambda s: order.get(s, len(order))):
        date, subject, paths = touched[sha]
        pr = _PR.search(subject)
        found.suspects.append(Suspect(sha, date, subject, int(pr.group(1)) if pr else None, tuple(sorted(paths))))
    return found


# --- a clone ----------------------------------------------------------------------------------


def clone(url: str, dest: Path, log: Callable[[str], None] = lambda _line: None) -> Path:
    """A clone of `url` in `dest` for the above: blobless and without a work tree (everything reads revisions).
    A `dest` that is already a clone is fetched (new commits and tags), and used as it is when that fails."""
    dest = Path(dest)
    if _is_repo_root(dest):
        proc = git(dest, "fetch", "--tags", "--quiet", "origin", ok=range(256))
        log(f"{dest}: an existing clone, " + ("fetched" if proc.returncode == 0 else
                                              f"not fetched ({git_error(proc)}): used as it is"))
        return dest
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest} exists and is not a git clone: name a new or empty directory")
    proc = git(None, "clone", "--filter=blob:none", "--no-checkout", "--tags", "--quiet", "--", url, str(dest),
               ok=range(256))
    if proc.returncode != 0:
        raise HarnessError(f"cannot clone {url}: {git_error(proc)}")
    if "filtering not recognized" in proc.stderr:
        log(f"{url} does not serve blobless clones: {dest} is a full clone (larger, same answers)")
    else:
        log(f"{dest}: a blobless clone of {url} (file contents are fetched when first read)")
    return dest
