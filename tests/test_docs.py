"""The documentation against the code: docs/cli.md is the commands' own reference.

`uv run python tests/test_docs.py` writes docs/cli.md again (harness.report.clidoc.REGENERATE).
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

import click

from harness.cli import cli as bisect_cli
from harness.report.clidoc import REGENERATE, Machine, commands, reference

ROOT = Path(__file__).resolve().parent.parent
CLI_MD = ROOT / "docs" / "cli.md"


# -- docs/cli.md ---------------------------------------------------------------------------


def test_the_cli_reference_is_what_the_commands_say():
    """docs/cli.md is made from the click commands: an option added, renamed or reworded fails until it is
    written again."""
    page = reference(bisect_cli)
    shown = CLI_MD.read_text() if CLI_MD.exists() else ""
    diff = list(difflib.unified_diff(shown.splitlines(), page.splitlines(), "docs/cli.md", "the commands",
                                     lineterm="", n=0))
    assert shown == page, f"docs/cli.md is not what the commands say; write it again: {REGENERATE}\n" + \
        "\n".join(diff[:40])


def _sections(text: str) -> dict[str, str]:
    """docs/cli.md's text of each command's section (its heading, `bisect ...`, to the next heading)."""
    parts = re.split(r"^#{2,6} (bisect\b.*)$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_option_and_argument_of_every_command_is_in_its_section():
    """Each option of `bisect COMMAND --help`, by every flag it has (-j and --jobs, --prefetch and --no-prefetch),
    and each argument, is in that command's own section of docs/cli.md: groups' subcommands (matrix run, setup
    qemu) included."""
    sections = _sections(CLI_MD.read_text())
    walked = commands(bisect_cli)
    missing = []
    for _, cmd, ctx in walked:
        section = sections.get(ctx.command_path)
        if section is None:
            missing.append(f"{ctx.command_path} (no section)")
            continue
        for p in cmd.get_params(ctx):
            names = p.opts + p.secondary_opts if isinstance(p, click.Option) else [p.human_readable_name]
            missing += [f"{ctx.command_path} {n}" for n in names if f"`{n}`" not in section]
    assert len(walked) > 20 and {"bisect matrix run", "bisect setup qemu"} <= {c.command_path for _, _, c in walked}
    assert missing == [], "not in docs/cli.md: " + ", ".join(missing)


def test_every_option_says_what_it_does():
    """An option without help is a line of `--help` (and of docs/cli.md) that says nothing."""
    silent = [f"{ctx.command_path} {'/'.join(p.opts + p.secondary_opts)}" for _, cmd, ctx in commands(bisect_cli)
              for p in cmd.get_params(ctx) if isinstance(p, click.Option) and not (p.help or "").strip()]
    assert silent == [], "options without help: " + ", ".join(silent)


def test_the_reference_holds_nothing_of_the_machine_it_was_made_on(monkeypatch):
    """A default of the machine's own (arch, Python, a path under the home directory) is written as what it stands
    for, a '|' in a table cell is escaped, and the terminal's width changes nothing."""
    machine = Machine(arch="sparc64", python="3.99", home="/home/someone")

    @click.command("go")
    @click.option("--arch", default="sparc64", show_default=True, help="The arch.")
    @click.option("--python", default="3.99", show_default=True, help="The Python.")
    @click.option("--dir", "dir_", default="/home/someone/.cache/x", show_default=True, help="A | in the help.")
    @click.option("--mode", type=click.Choice(["a|b", "c"]), default="c", show_default=True, help="`x | y` too.")
    def go(arch, python, dir_, mode):
        """Go somewhere."""

    tool = click.Group("tool", commands={"go": go})
    page = reference(tool, "tool", machine)
    assert "sparc64" not in page and "3.99" not in page and "/home/someone" not in page, page
    assert "| `--dir` | `TEXT` | `~/.cache/x` | A \\| in the help. |" in page
    assert "| `--mode` | `a\\|b`, `c` | `c` | `x \\| y` too. |" in page
    assert "this machine's arch" in page and "the running Python's version" in page
    assert "[`go`](#tool-go)" in page and "\n## tool go\n" in page
    rows = [ln for ln in page.splitlines() if ln.startswith("| ")]
    assert {len(re.findall(r"(?<!\\)\|", ln)) for ln in rows} == {3, 5}  # 2 columns (commands) or 4

    monkeypatch.setenv("COLUMNS", "20")
    narrow = reference(bisect_cli)
    monkeypatch.setenv("COLUMNS", "300")
    assert narrow == reference(bisect_cli)
    assert str(Path.home()) not in narrow and str(ROOT) not in narrow


if __name__ == "__main__":
    CLI_MD.write_text(reference(bisect_cli))
    sys.stdout.write(f"wrote {CLI_MD.relative_to(ROOT)}\n")
