"""The `bisect` command line: registers the commands and turns errors into exit statuses.

Each command is one module of `harness.commands` exposing `command`; adding a
command is adding a module and a name to COMMANDS. A command's module is
imported when that command is asked for, so `bisect run` does not pay for the
imports of the other commands before its first probe.
"""

from __future__ import annotations

import errno
import faulthandler
import importlib
import json
import os
import signal
import sys
import warnings

import click
from rich.markup import escape

from harness import __version__
from harness.commands.common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    STOPPED,
    err,
    stopped_status,
)
from harness.errors import EnvironmentSkip, HarnessError, Terminated, UsageError
from harness.results.store import TornLineWarning

COMMANDS = ("run", "sweep", "compare", "versions", "models", "trace", "diff", "reduce", "blame", "options", "repeat", "mitigate", "report",
            "drift", "matrix", "merge", "dashboard", "setup", "doctor")


class Commands(click.Group):
    """The commands of COMMANDS, each module imported the first time its command is looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.add_command(importlib.import_module(f"harness.commands.{cmd_name}").command)
        return self.commands.get(cmd_name)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ortbisect")
def cli():
    """Find the onnxruntime release where a model's outputs went wrong."""


def main(argv: list[str] | None = None) -> int:
    """Run one command. A failure is an exit status (1 environment or internal, 2 bad input, 130
    interrupted, 143 terminated), one line on stderr and, when the command line has --json, one JSON object
    `{"error": ..., "exit_status": ...}` on stdout."""
    args = sys.argv[1:] if argv is None else list(argv)
    # nothing the tool makes (runs, environments, uv's and the worker's files: children inherit it) is group or
    # world writable, whatever the umask it was given: a shared machine's other users could change what runs
    os.umask(os.umask(0o022) | 0o022)
    if argv is None:  # the process is ours: `kill -USR1 PID` prints every thread's stack (to diagnose a hang)
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        signal.signal(signal.SIGTERM, _terminated)
    as_json = "--json" in (args[:args.index("--")] if "--" in args else args)
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, TornLineWarning):
            err.print(f"warning: {escape(str(message))}")
        else:
            shown(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.showwarning = show
        try:
            status, message, said = _run(args)
        except Exception as exc:  # a bug: the traceback follows on stderr
            if as_json:
                click.echo(json.dumps({"error": f"internal error: {type(exc).__name__}: {exc}",
                                       "exit_status": EXIT_FAILURE}))
            raise
    if message is not None:
        if not said:
            err.print(message if status in STOPPED else f"error: {escape(message)}")
        if as_json:
            click.echo(json.dumps({"error": message, "exit_status": status}))
    # what was printed leaves now: an exit handler of a library (Ray's, after a node of its cluster was lost)
    # may end the process without flushing
    sys.stdout.flush()
    sys.stderr.flush()
    return status


def _terminated(signum, frame) -> None:
    """SIGTERM stops the command as Ctrl-C does (workers ended, finished probes kept), with its own status.

    A second SIGTERM while that runs is let go: raised inside the cleanup, it would cut short the killing
    of the workers it is there for. SIGKILL still ends the process at once."""
    signal.signal(signal.SIGTERM, lambda *_: None)  # a handler, not SIG_IGN: a process started now keeps SIGTERM
    raise Terminated()


# commands whose finished work is kept and reused by the same command run again (options' combinations, mitigate's
# probes, a finished trace, report's probe of the newest release); run, sweep, compare, reduce, blame and matrix
# say where theirs are themselves
GO_ON_BY_RUNNING_AGAIN = ("options", "mitigate", "trace", "diff", "report")

# errors of the filesystem a command reads or writes (full, read-only, not allowed, failing): the environment's
FILESYSTEM_FAILURES = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


def _run(args: list[str]) -> tuple[int, str | None, bool]:
    """(exit status, the failure's one line or None, whether the command has said it already)."""
    try:
        rc = cli.main(args=args, standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt) as exc:
        status = stopped_status(exc)
        if next((a for a in args if not a.startswith("-")), None) in GO_ON_BY_RUNNING_AGAIN:
            err.print(f"{STOPPED[status]}: what finished is saved; run the same command again to go on (it is reused)")
            return status, STOPPED[status], True
        return status, STOPPED[status], False
    except click.ClickException as exc:
        return EXIT_USAGE, exc.format_message(), False
    except (UsageError, EnvironmentSkip) as exc:
        return EXIT_USAGE, str(exc), False
    except HarnessError as exc:
        return EXIT_FAILURE, str(exc), False
    except OSError as exc:
        if exc.errno not in FILESYSTEM_FAILURES:
            raise
        # the machine's disk, not the command: one line, as a full disk mid-run already is
        where = f"{exc.filename}: " if exc.filename else ""
        return EXIT_FAILURE, f"cannot read or write {where}{exc.strerror or exc}", False
    rc = rc if isinstance(rc, int) else 0
    if rc in STOPPED:  # the command stopped and said so (what is saved, how to resume)
        return rc, STOPPED[rc], True
    return rc, None, False  # a command that returns 1 or 2 has printed its own result (matrix: "failed")


if __name__ == "__main__":
    sys.exit(main())
