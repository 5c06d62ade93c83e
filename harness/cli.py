"""The `bisect` command line: registers the commands and turns errors into exit statuses.

Each command is one module of `harness.commands` exposing `command`; adding a
command is adding a module and a name to COMMANDS.
"""

from __future__ import annotations

import importlib
import sys

import click
from rich.markup import escape

from harness import __version__
from harness.commands.common import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE, err
from harness.errors import EnvironmentSkip, HarnessError, UsageError

COMMANDS = ("run", "sweep", "versions", "models", "trace", "diff", "reduce", "options", "repeat", "mitigate", "report",
            "matrix", "merge", "dashboard", "setup", "doctor")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ortbisect")
def cli():
    """Find the onnxruntime release where a model's outputs went wrong."""


for _name in COMMANDS:
    cli.add_command(importlib.import_module(f"harness.commands.{_name}").command)


def main(argv: list[str] | None = None) -> int:
    try:
        rc = cli.main(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        err.print("interrupted")
        return EXIT_INTERRUPTED
    except click.ClickException as exc:
        err.print(f"error: {escape(exc.format_message())}")
        return EXIT_USAGE
    except (UsageError, EnvironmentSkip) as exc:
        err.print(f"error: {escape(str(exc))}")
        return EXIT_USAGE
    except HarnessError as exc:
        err.print(f"error: {escape(str(exc))}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        err.print("interrupted")
        return EXIT_INTERRUPTED
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":
    sys.exit(main())
