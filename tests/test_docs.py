"""The documentation against the code: docs/cli.md is the commands' own reference, every relative link of the README
and docs/ resolves, and every command they show parses as `bisect` parses it.

`uv run python tests/test_docs.py` writes docs/cli.md again (harness.report.clidoc.REGENERATE).
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import shlex
import sys
from contextlib import ExitStack, contextmanager
from pathlib import Path
from urllib.parse import unquote

import click
import pytest

from harness.cli import cli as bisect_cli
from harness.errors import HarnessError
from harness.report.clidoc import REGENERATE, Machine, commands, is_placeholder, reference, slug

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


# -- example commands ----------------------------------------------------------------------

# uv run's options that take a value (uv run --extra ray bisect ...)
_UV_VALUED = {"--extra", "--with", "--group", "--python", "-p", "--project", "--directory", "--package", "--env-file"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


_ANGLED = re.compile(r"<(?=\S)[^<>]*(?<=\S)>")


def _words(line: str) -> list[str]:
    """A shell line's words up to its first operator (>, |, &&, ;), its trailing # comment dropped; a placeholder
    in angle brackets (<run id>) is one word, not a redirection."""
    line = _ANGLED.sub(lambda m: shlex.quote(m.group(0)), line)
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    words = []
    for word in lex:
        if word and set(word) <= set(lex.punctuation_chars):
            break
        words.append(word)
    return words


def bisect_args(line: str) -> list[str] | None:
    """The arguments after `bisect` of a line that runs the tool (`bisect ...`, `uv run [--extra X] bisect ...`,
    after an optional `$ ` and VAR=value assignments), else None."""
    words = _words(line)
    words = words[1:] if words[:1] == ["$"] else words
    while words and _ASSIGNMENT.match(words[0]):
        words = words[1:]
    if words[:2] == ["uv", "run"]:
        i = 2
        while i < len(words) and words[i] != "bisect":
            if not words[i].startswith("-"):
                return None
            i += 2 if words[i] in _UV_VALUED else 1
        words = words[i:]
    return words[1:] if words[:1] == ["bisect"] else None


def example_commands(text: str) -> list[tuple[int, str, list[str] | str]]:
    """(line number, line, the arguments after `bisect` or why they cannot be split) of each line of a fenced code
    block that runs the tool; a line ending in a backslash goes on on the next one. Lines of output in a code
    block start otherwise and are not commands."""
    found, held, start = [], "", 0
    lines = text.splitlines()
    for n, (line, code) in enumerate(zip(lines, fenced(text)), 1):
        if not code or _FENCE.match(line):
            held = ""
            continue
        if not held:
            start = n
        if line.rstrip().endswith("\\"):
            held += line.rstrip()[:-1] + " "
            continue
        whole, held = held + line, ""
        if not re.match(r"^\s*(?:\$\s+)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:uv\s+run\s.*?)?\bbisect(?:\s|$)", whole):
            continue
        try:
            args = bisect_args(whole)
        except ValueError as exc:  # an unclosed quote
            found.append((start, whole.strip(), f"cannot be split as a shell line: {exc}"))
            continue
        if args is not None:
            found.append((start, whole.strip(), args))
    return found


class _AsWritten(click.ParamType):
    """A parameter's own type, except that a placeholder passes as written and a path need not exist."""

    def __init__(self, inner: click.ParamType):
        self.inner = inner
        self.name = inner.name
        self.is_composite = inner.is_composite
        self.arity = inner.arity
        if isinstance(inner, click.Path) and inner.exists:
            self.inner = copy.copy(inner)
            self.inner.exists = False

    def convert(self, value, param, ctx):
        if isinstance(value, str) and is_placeholder(value):
            return value
        return self.inner.convert(value, param, ctx)


@contextmanager
def _as_written(cmd: click.Command):
    """`cmd`'s parameters taking values as `_AsWritten` for the time of a parse (flags keep theirs)."""
    swapped = [(p, p.type) for p in cmd.params if not (isinstance(p, click.Option) and p.is_flag)]
    for p, kind in swapped:
        p.type = _AsWritten(kind)
    try:
        yield
    finally:
        for p, kind in swapped:
            p.type = kind


def command_problem(args: list[str], root: click.Group = bisect_cli) -> str | None:
    """Why `bisect ARGS` would be refused by its own parser (click's: subcommand, option names, value counts,
    types and choices, required options), or None.

    Placeholders (harness.report.clidoc.is_placeholder) are taken as written by any option or argument, and a
    placeholder where a subcommand goes ends the check there. A path an example names need not exist (the
    reader has it): click.Path's existence check is off during the parse, which the caller runs in an empty
    directory with an empty cache so that nothing of the checkout (its results/) or of this machine changes
    the answer."""
    ctx, cmd, name, rest = None, root, "bisect", list(args)
    with ExitStack() as stack:
        while True:
            stack.enter_context(_as_written(cmd))
            try:
                ctx = cmd.make_context(name, rest, parent=ctx)
            except click.exceptions.Exit:  # --help, --version
                return None
            except click.exceptions.NoArgsIsHelpError:  # click's message is the whole --help
                return f"Missing command: one of {', '.join(cmd.list_commands(click.Context(cmd)))}."
            except click.ClickException as exc:
                return exc.format_message()
            except HarnessError as exc:  # a callback's check (a directory that is a file)
                return str(exc)
            if not isinstance(cmd, click.Group):
                return None
            rest = [*ctx._protected_args, *ctx.args]  # what Group.invoke hands the subcommand
            if rest and is_placeholder(rest[0]):
                return None
            try:
                name, cmd, rest = cmd.resolve_command(ctx, rest)
            except click.ClickException as exc:
                return exc.format_message()


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """An empty working directory and cache: the parse sees no file of the checkout or of this machine."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path


def problems_of(page: Path, root: Path = ROOT) -> list[str]:
    where = page.relative_to(root) if page.is_relative_to(root) else page
    out = []
    for n, line, args in example_commands(page.read_text()):
        why = args if isinstance(args, str) else command_problem(args)
        if why:
            out.append(f"{where}:{n}: {line}\n    {why}")
    return out


def test_every_command_the_readme_and_docs_show_parses(nowhere):
    """Every command in a code block of README.md and docs/ is one `bisect` takes: its subcommand exists, its
    options exist and have their values, and its values are of their types and choices, placeholders excepted.

    A placeholder (docs/cli.md's header says so to readers) is a value the reader replaces: one holding a word
    (letters, digits, '_' and '-') with capitals and no small letters, M, RUN, MODEL, HEAD:6379, RAY_VERSION,
    FILE.npz, or text in angle brackets, <run id>. A command holding one is checked for its subcommand, option
    names and value counts; one without is parsed in full. The README's first command is also run, by
    tests/test_readme.py and .ci/run."""
    shown = [(p, c) for p in pages() for c in example_commands(p.read_text())]
    assert len(shown) > 10, shown  # the walk sees the pages' commands
    problems = [x for p in pages() for x in problems_of(p)]
    assert problems == [], "\n".join(problems)


def test_the_command_check_refuses_what_bisect_refuses_and_takes_placeholders(nowhere):
    page = nowhere / "page.md"
    page.write_text("\n".join([
        "Text: bisect run --nope is prose, not a command.",
        "```sh",
        "$ uv run bisect run --model M --from 1.19.0 --to 1.30.0 --ray-address HEAD:6379 -j 8   # fine",
        "uv run --extra ray bisect sweep --model my.onnx --inputs batch.npz --from 1.19.0 \\",
        "    --to 1.21.1 --jobs 2",
        "RAY_ADDRESS=auto uv run bisect report RUN --format markdown > issue.md",
        "bisect matrix run matrices/missing.toml --cell 3 | tee log",
        "bisect run --model M --from A --to B --backend qemu --rows <fewest>",
        "bisect --help",
        "bisect: error: --nope is not an option (output, not a command)",
        "uv run python -c 'print(1)'",
        "uv run bisect run --model M --from 1.19.0 --to 1.30.0 --nope",
        "uv run bisect frobnicate --model M",
        "uv run bisect matrix frob x.toml",
        "uv run bisect run --model m.onnx --from 1.19.0 --to 1.30.0 --rows some",
        "uv run bisect sweep --model m.onnx --from 1.19.0 --to 1.30.0 -j two",
        "uv run bisect trace --model m.onnx --version",
        "uv run bisect run --model m.onnx --to 1.30.0",
        "uv run bisect dashboard results/ -o site/ extra",
        "uv run bisect repeat --model m.onnx --version 1.20.0 -n 1",
        "uv run bisect mitigate --model m.onnx --from 1.19.0 --to 1.30.0 --reference-model ref.onnx",
        "uv run bisect run --model 'unclosed --from 1.19.0",
        "uv run bisect setup",
        "uv run bisect report <run id> --no-probe",
        "```",
    ]) + "\n")
    found = problems_of(page)
    assert [p.split(":", 2)[1] for p in found] == [
        "12", "13", "14", "15", "16", "17", "18", "19", "20", "22", "23"], "\n".join(found)
    whys = [p.split("\n    ", 1)[1] for p in found]
    assert "No such option" in whys[0] and "--nope" in whys[0]
    assert "No such command 'frobnicate'" in whys[1] and "No such command 'frob'" in whys[2]
    assert "'some' is not one of 'all', 'fewest'" in whys[3]
    assert "'two' is not a valid integer range" in whys[4]
    assert "--version" in whys[5] and "requires an argument" in whys[5]
    assert "Missing option '--from'" in whys[6]
    assert "unexpected extra argument (extra)" in whys[7]
    assert "1 is not in the range x>=2" in whys[8]
    assert whys[9].startswith("cannot be split") and "Missing command" in whys[10]
    # the backslash joins the sweep's two lines: counted from the first, with --to and --jobs of the second
    (sweep,) = [c for c in example_commands(page.read_text()) if c[0] == 4]
    assert sweep[2][-4:] == ["--to", "1.21.1", "--jobs", "2"]
    assert command_problem(["run", "--model", "m.onnx", "--from", "1.19.0", "--to", "1.30.0", "--backend",
                            "qemu", "--arch", "aarch64", "--bad-if", "slower>1.15", "--no-prefetch"]) is None


def test_a_value_is_a_placeholder_when_a_word_of_it_is_in_capitals_or_it_is_in_angle_brackets():
    assert all(map(is_placeholder, ["M", "RUN", "MODEL", "HEAD:6379", "RAY_VERSION", "FILE.npz", "<run id>",
                                    "results/RUN/report.md", "KEY=VALUE"]))
    assert not any(map(is_placeholder, ["my.onnx", "1.19.0", "x86_64", "ssh://me@graviton=2", "127.0.0.1:6379",
                                        "https://h/_packaging/ORT-Nightly/pypi/simple/", "slower>1.15", "-j"]))


if __name__ == "__main__":
    CLI_MD.write_text(reference(bisect_cli))
    sys.stdout.write(f"wrote {CLI_MD.relative_to(ROOT)}\n")


def test_every_page_the_tool_s_own_words_point_to_exists():
    """A refusal or a starter file that sends the reader to docs/... names a page that is there."""
    named = {m for path in (ROOT / "harness").rglob("*") if path.suffix in (".py", ".toml", ".js")
             for m in re.findall(r"docs/[\w/.-]+\.md", path.read_text())}
    assert {"docs/guide/cluster.md", "docs/guide/nightly.md"} <= named  # the walk reaches them
    assert sorted(p for p in named if not (ROOT / p).is_file()) == []
