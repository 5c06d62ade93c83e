"""The command-line reference, docs/cli.md, made from the click commands themselves.

`reference(root)` is the page: every command and subcommand in the order `--help` lists them, each with its
help, its usage line, its subcommands, its arguments and every option (all its flags, its value, its default as
`--help` shows it, its environment variable, its help). The commands wing is above this one, so the caller
hands the root group; tests/test_docs.py holds docs/cli.md equal to the page and writes it (REGENERATE).

The page is the same on every machine: no terminal width is read (click's own text is taken before its
formatter wraps it), and a default that is this machine's own (its arch, the running Python's version, a path
under the home directory) is written as what it stands for (`Machine`).

The page also states the convention of the examples in the README and the guide (PLACEHOLDERS,
`is_placeholder`): tests/test_docs.py parses each example command with click against these commands.
"""

from __future__ import annotations

import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from harness.report.escape import md_code, md_prose

REGENERATE = "uv run python tests/test_docs.py"

PLACEHOLDERS = (
    "In the example commands of the README and the guide, a value holding a word written in capitals (`M`, "
    "`RUN`, `MODEL`, `HEAD:6379`, `RAY_VERSION`, `FILE.npz`) or text in angle brackets (`<run id>`) is a "
    "placeholder: put your own value there. `tests/test_docs.py` parses every example with these commands' own "
    "parser: an unknown command or option, a missing value, a bad choice or a bad number fails. A placeholder is "
    "not checked against its option's type or choices; the command, its option names and how many values each "
    "takes still are, and a command without placeholders is parsed in full.")

# a word: letters, digits, '_' and '-' (ORT-Nightly is one word, and not in capitals)
_WORD = re.compile(r"[A-Za-z0-9_-]+")
_ANGLED = re.compile(r"<[^<>]+>")


def is_placeholder(value: str) -> bool:
    """Whether an example's value is one the reader replaces (PLACEHOLDERS)."""
    return bool(_ANGLED.search(value)) or any(re.search("[A-Z]", w) and not re.search("[a-z]", w)
                                              for w in _WORD.findall(value))


@dataclass(frozen=True)
class Machine:
    """The values of the machine the commands were imported on that a default may hold."""

    arch: str
    python: str
    home: str

    @classmethod
    def here(cls) -> Machine:
        return cls(platform.machine(), f"{sys.version_info.major}.{sys.version_info.minor}", str(Path.home()))

    def default(self, text: str) -> str:
        """A default as the page writes it: this machine's own values as what they stand for, else as code."""
        if text == self.arch:
            return "this machine's arch"
        if text == self.python:
            return "the running Python's version"
        if self.home not in ("", "/") and (text == self.home or text.startswith(self.home + "/")):
            text = "~" + text[len(self.home):]
        return cell(md_code(text))


def cell(text: str) -> str:
    """Markdown for a table cell: a `|` (md_code keeps one) would end the cell, where `\\|` shows it."""
    return text.replace("\\|", "|").replace("|", "\\|")


def commands(root: click.Group, name: str = "bisect") -> list[tuple[tuple[str, ...], click.Command, click.Context]]:
    """Every command under `root`, itself first and each group before its subcommands, as `--help` lists them:
    (the names after `name`, the command, a context of it that parses nothing)."""
    found = []

    def walk(cmd: click.Command, ctx: click.Context, path: tuple[str, ...]) -> None:
        found.append((path, cmd, ctx))
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(ctx):
                child = cmd.get_command(ctx, sub)
                walk(child, click.Context(child, info_name=sub, parent=ctx), (*path, sub))

    walk(root, click.Context(root, info_name=name, **root.context_settings), ())
    return found


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lowercase, every character but letters, digits, '_', '-' and spaces
    dropped, each space a '-' (the caller numbers a repeated one: -1, -2, ...)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _paragraphs(help_text: str) -> list[str]:
    """A command's help as click shows it (up to \\f), each paragraph as Markdown; a \\b paragraph kept as lines."""
    out = []
    for para in re.split(r"\n\s*\n", help_text.split("\f", 1)[0].strip()):
        lines = para.splitlines()
        if lines and lines[0].strip() == "\b":
            body = "\n".join(lines[1:])
            fence = "`" * max(3, max((len(m) for m in re.findall("`+", body)), default=0) + 1)
            out.append(f"{fence}text\n{body}\n{fence}")
        elif para.strip():
            out.append(md_prose(" ".join(para.split())))
    return out


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def _value(param: click.Parameter, ctx: click.Context, extra: dict) -> str:
    if isinstance(param, click.Option) and param.is_flag:
        return ""
    if isinstance(param.type, click.Choice):
        shown = ", ".join(cell(md_code(str(c))) for c in param.type.choices)
    elif isinstance(param, click.Option):
        shown = cell(md_code(param.make_metavar(ctx)))
    else:  # an argument's metavar is its name, in the first column
        shown = cell(md_code(param.type.name.upper()))
    return shown + (f", {cell(md_code(extra['range']))}" if extra.get("range") else "")


def _option(param: click.Option, ctx: click.Context, machine: Machine) -> str:
    flags = ", ".join(cell(md_code(o)) for o in param.opts)
    if param.secondary_opts:
        flags += " / " + ", ".join(cell(md_code(o)) for o in param.secondary_opts)
    extra = param.get_help_extra(ctx)
    default = []
    if extra.get("required"):
        default.append("required")
    if "default" in extra:
        default.append(machine.default(str(extra["default"])))
    envvars = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or ())
    default += [f"env {cell(md_code(e))}" for e in envvars]
    words = cell(md_prose(" ".join((param.help or "").split())))
    return _row(flags, _value(param, ctx, extra), "; ".join(default), words)


def _argument(param: click.Argument, ctx: click.Context, machine: Machine) -> str:
    many = param.nargs == -1 or param.nargs > 1
    need = ("one or more" if param.required else "any number") if many else "required" if param.required else "optional"
    default = param.get_default(ctx, call=False)
    shown = machine.default(str(default)) if isinstance(default, (str, int, float, Path)) else ""
    return _row(cell(md_code(param.human_readable_name)), _value(param, ctx, {}), need, shown)


def _section(path: tuple[str, ...], cmd: click.Command, ctx: click.Context, machine: Machine) -> list[str]:
    title = ctx.command_path
    lines = [f"{'#' * min(2 + max(len(path) - 1, 0), 6)} {title}", ""]
    for para in _paragraphs(cmd.help or ""):
        lines += [para, ""]
    lines += ["```text", f"Usage: {title} {' '.join(cmd.collect_usage_pieces(ctx))}".rstrip(), "```", ""]
    if isinstance(cmd, click.Group):
        lines += [_row("Command", "What it does"), _row("---", "---")]
        for sub in cmd.list_commands(ctx):
            child = cmd.get_command(ctx, sub)
            link = f"[{cell(md_code(sub))}](#{slug(f'{title} {sub}')})"
            lines.append(_row(link, cell(md_prose(child.get_short_help_str(limit=10_000)))))
        lines.append("")
    params = [p for p in cmd.get_params(ctx) if not getattr(p, "hidden", False)]
    arguments = [p for p in params if isinstance(p, click.Argument)]
    if arguments:
        lines += [_row("Argument", "Value", "Takes", "Default"), _row("---", "---", "---", "---")]
        lines += [_argument(p, ctx, machine) for p in arguments] + [""]
    options = [p for p in params if isinstance(p, click.Option)]
    if options:
        lines += [_row("Option", "Value", "Default", "What it does"), _row("---", "---", "---", "---")]
        lines += [_option(p, ctx, machine) for p in options] + [""]
    return lines


def reference(root: click.Group, name: str = "bisect", machine: Machine | None = None) -> str:
    """docs/cli.md: the page of every command under `root`, run as `name`."""
    machine = machine or Machine.here()
    lines = [f"<!-- Made from the commands by harness/report/clidoc.py: do not edit. Regenerate: {REGENERATE} -->",
             "", "# Command-line reference", "",
             f"Every command of {md_code(name)}, in the order {md_code(name + ' --help')} lists them: what it does, "
             f"its usage, its arguments and its options, as {md_code(name + ' COMMAND --help')} says them. Made "
             "from the commands themselves; `tests/test_docs.py` fails when this page and they differ.", "",
             PLACEHOLDERS, ""]
    for path, cmd, ctx in commands(root, name):
        lines += _section(path, cmd, ctx, machine)
    return "\n".join(lines).rstrip("\n") + "\n"
