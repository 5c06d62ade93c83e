"""The documentation against the code: docs/cli.md is the commands' own reference, and every relative link of the
README and docs/ resolves.

`uv run python tests/test_docs.py` writes docs/cli.md again (harness.report.clidoc.REGENERATE).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from pathlib import Path
from urllib.parse import unquote

import click

from harness.cli import cli as bisect_cli
from harness.report.clidoc import REGENERATE, Machine, commands, reference, slug

ROOT = Path(__file__).resolve().parent.parent
CLI_MD = ROOT / "docs" / "cli.md"


def pages(root: Path = ROOT) -> list[Path]:
    """The README and every Markdown page under docs/."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


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


# -- links -------------------------------------------------------------------------------------

_FENCE = re.compile(r"^\s*(`{3,}|~{3,})")  # indented too: a code block in a list item


def fenced(text: str) -> list[bool]:
    """For each line of a Markdown text, whether it is inside a fenced code block (its fences included)."""
    inside, fence, marks = False, "", []
    for line in text.splitlines():
        m = _FENCE.match(line)
        if not inside and m:
            inside, fence = True, m.group(1)
            marks.append(True)
        elif inside and m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and not line.strip()[len(m.group(1)):].strip():
            inside = False
            marks.append(True)
        else:
            marks.append(inside)
    return marks


def _outside_code(text: str, spans: bool = False) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks; with `spans`, inline code spans blanked too."""
    span = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)")
    return [(n, span.sub("", line) if spans else line)
            for n, (line, code) in enumerate(zip(text.splitlines(), fenced(text)), 1) if not code]


def anchors(text: str) -> set[str]:
    """The fragments a Markdown page answers: each ATX heading's GitHub slug (a repeated one -1, -2, ...), and
    the names and ids of its HTML anchors."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in _outside_code(text):
        m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            heading = re.sub(r"<[^>]+>", "", re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1)))
            base = slug(heading)
            found.add(base if base not in seen else f"{base}-{seen[base]}")
            seen[base] = seen.get(base, 0) + 1
        found |= set(re.findall(r"<a\s[^>]*?(?:name|id)=\"([^\"]+)\"", line))
    return found


_LINK = re.compile(r"!?\[[^\]]*\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+\"[^\"]*\")?\s*\)")
_DEFINITION = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(\S+)")
_HREF = re.compile(r"<a\s[^>]*?href=\"([^\"]*)\"")
_EXTERNAL = re.compile(r"^(?:https?:|mailto:)", re.I)


def links(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every link of a Markdown page: [text](target), ![alt](target), [ref]: target and
    <a href="target">, outside code."""
    found = []
    for n, line in _outside_code(text, spans=True):
        for m in [*_LINK.finditer(line), *_DEFINITION.finditer(line), *_HREF.finditer(line)]:
            found.append((n, m.group(1).strip("<>")))
    return found


def broken_links(page: Path, root: Path) -> list[str]:
    """'page:line: target: why' for each relative link of `page` whose file or directory is not there (relative
    to the page; '/...' to the repository's root), or whose #fragment no heading of the Markdown page it names
    makes (a link to the page's own #fragment included)."""
    text = page.read_text()
    where = page.relative_to(root)
    broken = []
    for n, target in links(text):
        if _EXTERNAL.match(target) or not target:
            continue
        path, _, fragment = target.partition("#")
        path = unquote(path)
        to = page if not path else (root / path.lstrip("/") if path.startswith("/") else page.parent / path)
        to = Path(os.path.normpath(to))
        if not to.is_relative_to(root):
            broken.append(f"{where}:{n}: {target}: outside the repository")
        elif not to.exists():
            broken.append(f"{where}:{n}: {target}: no {to.relative_to(root)}")
        elif fragment:
            markdown = to / "README.md" if to.is_dir() else to
            answered = anchors(markdown.read_text()) if markdown.suffix == ".md" and markdown.exists() else None
            if answered is not None and unquote(fragment) not in answered:
                broken.append(f"{where}:{n}: {target}: no heading #{fragment} in {markdown.relative_to(root)}")
    return broken


def test_every_relative_link_of_the_readme_and_docs_resolves():
    broken = [b for page in pages() for b in broken_links(page, ROOT)]
    assert sum(len(links(p.read_text())) for p in pages()) > 5  # the walk sees the pages' links
    assert broken == [], "\n".join(broken)


def test_a_missing_file_and_a_heading_no_page_has_are_broken_links(tmp_path):
    (tmp_path / "docs" / "guide").mkdir(parents=True)
    (tmp_path / "docs" / "guide" / "cluster.md").write_text(
        "# On a cluster\n\n## Ray's nodes: what they need?\n\n## Options\n\n## Options\n\n```\n# not a heading\n```\n")
    (tmp_path / "README.md").write_text(
        "# Tool\n\n## Two `commands`, then more\n\n"
        "[ok](docs/guide/cluster.md) [ok](docs/guide/cluster.md#rays-nodes-what-they-need)\n"
        "[ok](#two-commands-then-more)\n"
        "[ok](docs/guide/cluster.md#options-1) [ok](docs/guide/) [ok](https://example.org/x.md) `[code](gone.md)`\n"
        "[gone](docs/guide/nightly.md) ![img](docs/pic.png)\n"
        "[bad anchor](docs/guide/cluster.md#options-2) [not a heading](docs/guide/cluster.md#not-a-heading)\n"
        "[own](#tool-1) <a href=\"docs/gone/\">x</a>\n\n[ref]: ../outside.md\n")
    broken = broken_links(tmp_path / "README.md", tmp_path)
    assert broken == [
        "README.md:8: docs/guide/nightly.md: no docs/guide/nightly.md",
        "README.md:8: docs/pic.png: no docs/pic.png",
        "README.md:9: docs/guide/cluster.md#options-2: no heading #options-2 in docs/guide/cluster.md",
        "README.md:9: docs/guide/cluster.md#not-a-heading: no heading #not-a-heading in docs/guide/cluster.md",
        "README.md:10: #tool-1: no heading #tool-1 in README.md",
        "README.md:10: docs/gone/: no docs/gone",
        "README.md:12: ../outside.md: outside the repository",
    ], broken


if __name__ == "__main__":
    CLI_MD.write_text(reference(bisect_cli))
    sys.stdout.write(f"wrote {CLI_MD.relative_to(ROOT)}\n")
