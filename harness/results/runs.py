"""Which runs a results root holds, and how their files are read and written: run directories from other
machines (CI artifacts, `bisect merge`) are untrusted evidence.

* Runs are searched for (`run_dirs`) SEARCH_DEPTH folders deep and never
  through a symbolic link. A link where a run could be, or among a run's
  evidence (EVIDENCE_FILES, EVIDENCE_DIRS and all under them: what merge and
  the dashboard read), refuses that run, named by the link; so does any entry
  there that is not a plain file or folder (a FIFO would hang the reader).
  Links elsewhere in a run (a reduction's candidates link the model's
  external data) are neither read nor copied. `copy_file` never reads
  through a link either.
* Every file merge or the dashboard writes is checked to lie inside its root
  once resolved (`inside`): no `..`, no link leads a write out of it.
* A folder holding SITE_MARK is a dashboard's site (`bisect dashboard -o
  results/site`) and STAGING is where merge stages a run: neither is searched
  for runs. A site is never the results root, nor inside a run (`check_site`).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from harness.errors import HarnessError, UsageError
from harness.results.store import (
    MANIFEST,
    OUTPUTS,
    PROBES,
    QUARANTINE,
    SIDE_DIRS,
    SIDE_FILES,
    write_atomic,
)

SITE_MARK = ".ortbisect-site"  # in a folder the dashboard wrote: a site, not runs
STAGING = ".merging"  # ROOT/.merging/: where merge writes a run's files before they go into place
EVIDENCE_FILES = (MANIFEST, PROBES, QUARANTINE, *SIDE_FILES)  # what merge and the dashboard read of a run
EVIDENCE_DIRS = (OUTPUTS, *SIDE_DIRS)
SEARCH_DEPTH = 3  # runs lie at most this many folders below the root searched


def run_dirs(root: Path, refused: list | None = None) -> list[Path]:
    """Run directories under `root` (or `root` itself if it is one), resolved, in name order.

    Searched SEARCH_DEPTH folders deep, never through a symbolic link, nor in a
    dashboard's site (SITE_MARK) or merge's STAGING; a run directory is not
    searched inside for more runs. A link where a run could be, or a run whose
    evidence holds one (`refusal`), is refused: UsageError naming the link, or,
    given `refused`, (run directory or link, why, naming the link) appended
    there and the run left out.
    """
    root = Path(root).resolve()
    found: list[Path] = []
    bad: list[tuple[Path, str]] = []

    def search(d: Path, depth: int) -> None:
        if depth and is_run(d):
            found.append(d)
            return
        if depth == SEARCH_DEPTH or os.path.lexists(d / SITE_MARK):
            return
        try:
            entries = sorted(os.scandir(d), key=lambda x: x.name)
        except OSError as exc:
            raise HarnessError(f"cannot read {d}: {exc.strerror or exc}") from None
        for entry in entries:
            path = Path(entry.path)
            if entry.is_symlink():
                if entry.name == MANIFEST or path.is_dir():  # where a run could be: never followed
                    bad.append((path, f"{path}: {_LINK} (where a run could be)"))
            elif entry.is_dir(follow_symlinks=False) and entry.name != STAGING:
                search(path, depth + 1)

    if is_run(root):
        found.append(root)
    else:
        search(root, 0)
    out = []
    for d in found:
        why = refusal(d)
        if why:
            bad.append((d, f"{why[0]}: {why[1]}"))
        else:
            out.append(d)
    if bad and refused is None:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise UsageError(f"{bad[0][1]}{more}; the run is refused")
    if refused is not None:
        refused.extend(bad)
    return sorted(out, key=lambda d: (d.name, str(d)))


_LINK = "a symbolic link, never followed"


def is_run(d: Path) -> bool:
    return os.path.lexists(d / MANIFEST)


def refusal(run_dir: Path) -> tuple[Path, str] | None:
    """(path, why) of the first entry of a run's evidence (EVIDENCE_FILES, EVIDENCE_DIRS and all under them)
    that is a symbolic link, or anything but a plain file or folder; None when there is none."""
    def why(path: Path) -> str | None:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(mode):
            return _LINK
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            return "neither a file nor a folder, never read"
        return None

    for path in (run_dir, *(run_dir / name for name in (*EVIDENCE_FILES, *EVIDENCE_DIRS))):
        if (w := why(path)):
            return path, w
    for sub in EVIDENCE_DIRS:
        for top, dirs, files in os.walk(run_dir / sub):  # os.walk does not descend into a link
            for name in sorted(dirs + files):
                if (w := why(Path(top, name))):
                    return Path(top, name), w
    return None


def inside(root: Path, path: Path) -> Path:
    """`path`, refused (UsageError) unless, resolved, it lies inside `root` (resolved): a write of merge or
    the dashboard never leaves its root, through `..` or a link."""
    real = Path(path).resolve()
    if real == root or not real.is_relative_to(root):
        raise UsageError(f"{path}: resolves to {real}, outside {root}; nothing written there")
    return path


def write_inside(root: Path, path: Path, content: str | bytes) -> None:
    """Write `path` whole (store.write_atomic), refused unless it lies inside `root` once resolved."""
    write_atomic(inside(root, path), content)


def why(exc: OSError) -> str:
    """An OSError in words, with the file it names."""
    return f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")


def copy_file(src: Path, dst: Path) -> None:
    """Copy the file `src` to `dst` with its modification time, never reading through a link (O_NOFOLLOW)."""
    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fin:
        st = os.fstat(fin.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{src}: not a file; not copied")
        with open(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout)
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def files_in(run_dir: Path, sub: str, deep: bool = False) -> list[str]:
    """The plain files in `run_dir`/`sub` (paths relative to `run_dir`), sorted; `deep`: in its subfolders too.
    The run was vetted (`refusal`): os.walk does not descend into a link."""
    rels = []
    for top, dirs, files in os.walk(run_dir / sub):
        rels += [str(Path(top, f).relative_to(run_dir)) for f in files if Path(top, f).is_file()]
        if not deep:
            break
    return sorted(rels)


def copy_into(run_dir: Path, dst: Path, rels: list[str], root: Path) -> None:
    """Copy the files `rels` of `run_dir` to the same places under `dst`, each checked to land inside `root`."""
    for rel in rels:
        target = inside(root, dst / rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        copy_file(run_dir / rel, target)

SITE_NOTE = "A page `bisect dashboard` wrote: merge and the readers of results do not take this folder for runs.\n"


def check_site(root: Path, out: Path) -> None:
    """Refuse (UsageError) a site that is the results root, holds it in its data/, or lies inside a run."""
    root, site = Path(root).resolve(), Path(out).resolve()
    if site == root:
        raise UsageError(f"{out}: the site would be the results root itself; give a folder of its own "
                         f"(e.g. {Path(out) / 'site'})")
    if root.is_relative_to(site / "data"):
        raise UsageError(f"{out}: the site's data/ would hold the results root {root}; give another folder")
    for d in (site, *site.parents):
        if d.is_relative_to(root) and is_run(d):
            raise UsageError(f"{out}: inside the run {d}; a site is not written into a run")


def mark_site(out: Path) -> None:
    """Make the folder `out` and mark it a site (SITE_MARK), before runs are searched: then a site inside the
    results root is passed over from its first build on."""
    site = Path(out).resolve()
    site.mkdir(parents=True, exist_ok=True)
    write_inside(site, site / SITE_MARK, SITE_NOTE)
