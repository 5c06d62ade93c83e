"""Who may change what the harness executes: the cache and each environment in it.

An environment's `bin/python` and site-packages run as the user. A cache that
another user owns, or may write (a shared one of mode 1777 above all), lets
that user plant an environment; so does an environment with a group or world
writable file. Each is refused with one line naming it and the fix, before
anything in it runs. The files the harness makes are not group or world
writable, whatever the umask (harness.cli tightens it); uv's own lock file,
which uv makes writable by all, is tightened after each build.
"""

from __future__ import annotations

import os
import shlex
import stat
import threading
from pathlib import Path

from harness.errors import UsageError

OPEN = stat.S_IWGRP | stat.S_IWOTH
UV_LOCK = ".lock"  # uv's lock file, made writable by all (uv >= 0.6), only ever locked, never read

_trusted: set[Path] = set()  # environments checked in this process: nobody else can change them since
_trusted_lock = threading.Lock()


def entry_problem(st: os.stat_result) -> str | None:
    """Why another user could change the entry whose lstat is `st`: owned by someone else, or writable by
    group or others (a symbolic link's own mode means nothing)."""
    if st.st_uid not in (os.geteuid(), 0):
        return f"is owned by uid {st.st_uid}, not by you (uid {os.geteuid()})"
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & OPEN:
        return f"is writable by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def check_cache_dir(path: Path, flag: str = "--cache-dir") -> Path:
    """`path`, refused (one line, UsageError) when it exists and another user owns it or may write it. A
    cache not made yet is made by the harness, under its umask; a sticky /tmp above it is no one's to plant in."""
    try:
        st = os.stat(path)  # through a link: what the cache is, wherever it is
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot look at it ({exc.strerror or exc})") from None
    problem = entry_problem(st)
    if problem is None:
        return path
    fix = "choose a cache you own" if problem.startswith("is owned") else \
        f"chmod go-w {shlex.quote(str(path))}, or choose a cache you own"
    raise UsageError(f"{flag} {path} {problem}: another user could plant what the harness runs; {fix}")


def check_environment(env: Path, cache_dir: Path) -> None:
    """Refuse (one line, UsageError) an environment that another user owns or may change: each directory from
    `cache_dir` down to `env`, and every file and folder in it. Once per environment and process."""
    with _trusted_lock:
        if env in _trusted:
            return
    # uv's lock at the top of a venv, or of a --target site (harness.runners.sites)
    locks = {os.path.join(env, UV_LOCK), os.path.join(env, "site", UV_LOCK)}
    for entry, st in _entries(env, cache_dir):
        if entry in locks and stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            continue  # uv's lock of an environment built before its lock was tightened: only ever locked
        problem = entry_problem(st)
        if problem:
            q = shlex.quote(str(env))
            raise UsageError(f"environment {env}: {entry} {problem}: another user could change what runs; "
                             f"remove it (rm -rf {q}) to have it built again, or choose a cache you own")
    with _trusted_lock:
        _trusted.add(env)


def tighten(env: Path) -> None:
    """Take group and world write off everything of ours in `env` (uv makes its lock file writable by all)."""
    forget(env)
    for entry, st in _entries(env, env):
        if st.st_mode & OPEN and not stat.S_ISLNK(st.st_mode) and st.st_uid == os.geteuid():
            os.chmod(entry, stat.S_IMODE(st.st_mode) & ~OPEN)


def forget(env: Path) -> None:
    """Check `env` again before its next use (it is being built, or discarded)."""
    with _trusted_lock:
        _trusted.discard(env)


def _entries(env: Path, top: Path):
    """(path, lstat) of each directory from `top` down to `env`, then of everything under `env` (links not
    followed; strings below `env`: an environment holds thousands of files)."""
    env, top = Path(env), Path(top)
    chain = [env, *env.parents]
    for d in reversed(chain[: chain.index(top) + 1] if top in chain else [env]):
        yield d, os.stat(d) if d == top else os.lstat(d)  # the cache through a link, as check_cache_dir
    folders = [str(env)]
    while folders:
        with os.scandir(folders.pop()) as listing:
            for entry in listing:
                st = entry.stat(follow_symlinks=False)
                yield entry.path, st
                if stat.S_ISDIR(st.st_mode):
                    folders.append(entry.path)
