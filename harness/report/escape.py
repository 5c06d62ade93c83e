"""Untrusted text made safe where the report wing writes it: a terminal, Markdown, generated Python.

Everything read back from a results directory (manifest.json, probes.jsonl,
documents) may come from another machine and is data, never markup or code:

* `printable`: control characters (ANSI escapes, newlines, bidi overrides, NUL)
  become visible ``\\x..`` escapes, as Python's repr() writes them;
* `md_text`, `md_code`, `md_prose`, `md_fence`: Markdown that shows the text and
  makes no heading, link, emphasis, HTML or table cell of it, and a code fence
  no line of its content can close;
* `py_literal`, `py_docstring`: a value as a Python literal (repr() of plain JSON
  data, nothing else), and text that cannot end the docstring it sits in;
* `js_json`: a value as JSON text that can sit inside a JavaScript String.raw template
  (no backtick, no `${`) for JSON.parse: never an object literal, whose `__proto__` key
  would set a prototype;
* `sh_line`: a command a reader is told to paste into a shell, each value one
  quoted word (shlex.quote), on one line.

The terminal renderer adds rich's markup escape on top of `printable`
(harness.report.terminal.plain).
"""

from __future__ import annotations

import json
import math
import re
import shlex


def _escaped(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def printable(text) -> str:
    """`text` on one line with every non-printable character (str.isprintable: control, format, separator,
    surrogate, unassigned; the space excepted) written as the escape repr() would use."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else _escaped(ch) for ch in text)


# characters that open Markdown (GFM) inline markup anywhere in a line: code, emphasis, links, HTML,
# entities, table cells, strikethrough, headings; '_' only where it is not between two letters or digits
_MD_SPECIAL = frozenset("\\`*[]<>&|~#")
# what makes a list item, a thematic break or a setext underline of a line that begins with it
_MD_LINE_START = re.compile(r"^(?:[-+](?=\s|$)|[-=]+\s*$|\d{1,9}(?=[.)](?:\s|$)))")


def md_text(text) -> str:
    """`text` for a text position of Markdown: shown as it is, made into no markup (one line)."""
    text = printable(text)
    out = []
    for i, ch in enumerate(text):
        if ch in _MD_SPECIAL or (ch == "_" and not (0 < i < len(text) - 1 and text[i - 1].isalnum()
                                                    and text[i + 1].isalnum())):
            out.append("\\" + ch)
        else:
            out.append(ch)
    text = "".join(out)
    lead = _MD_LINE_START.match(text)
    if lead:  # escape the character that would make a list item, a break or an underline
        end = lead.end()
        text = text[:end] + "\\" + text[end:] if text[:1].isdigit() else "\\" + text
    return text


def _longest_run(text: str, ch: str = "`") -> int:
    return max((len(m) for m in re.findall(re.escape(ch) + "+", text)), default=0)


def md_code(text) -> str:
    """`text` as a Markdown code span (one line): fenced by more backticks than any run in it."""
    text = printable(text)
    if not text:
        return ""
    fence = "`" * (_longest_run(text) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""  # CommonMark strips one space each side
    return f"{fence}{pad}{text}{pad}{fence}"


_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")  # a run of backticks closed by one as long


def md_prose(text) -> str:
    """The harness's own Markdown prose read back from a document (an explanation, a message): its code spans
    kept as code spans, everything else as `md_text`, so a node name in it can make no other markup."""
    text = printable(text)
    out, at = [], 0
    for m in _CODE_SPAN.finditer(text):
        out += [md_text(text[at:m.start()]) if at < m.start() else "", md_code(m.group(2))]
        at = m.end()
    out.append(md_text(text[at:]) if at < len(text) else "")
    return "".join(out)


def md_fence(content: str, info: str = "") -> list[str]:
    """`content` as the lines of a fenced code block: each line `printable`, the fence longer than any
    backtick run in it (at least three), so no line of it can close the block."""
    lines = [printable(line) for line in str(content).split("\n")]
    fence = "`" * max(3, _longest_run("\n".join(lines)) + 1)
    return [fence + info, *lines, fence]


def _check_data(value, where: str = "value") -> None:
    if value is None or isinstance(value, (bool, int, str)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: {value!r} has no Python literal")
        return
    if isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_data(item, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, item in value.items():
            if not isinstance(k, str):
                raise ValueError(f"{where}: key {k!r} is not a string")
            _check_data(item, f"{where}[{k!r}]")
        return
    raise ValueError(f"{where}: {type(value).__name__} is not plain data")


def sh_words(words) -> list[str]:
    """The words of `sh_line`, each quoted and printable on its own: a page that must never break a command
    inside a word shows them one by one (`" ".join` of them is the line)."""
    return [shlex.quote(printable(w)) for w in words]


def sh_line(words, comment: str = "", width: int = 0) -> str:
    """A shell command of `words`, each quoted (shlex.join) so that it stays one argument and runs nothing, and
    made printable so that the command stays one line; then `# comment` (printable: a comment ends at the line),
    the command padded to `width` characters first so that a block's comments line up."""
    line = " ".join(sh_words(words))
    if not comment:
        return line
    return f"{line.ljust(width) if len(line) < width else line + '   '}# {printable(comment)}"


def py_literal(value) -> str:
    """Plain data (None, bool, int, finite float, str, list, tuple, dict with str keys) as a Python literal:
    repr() of it, which ast.literal_eval reads back as the same value; anything else is refused (ValueError)."""
    _check_data(value)
    return repr(value)


def py_docstring(text) -> str:
    """`text` for the inside of a triple-quoted docstring: one printable line whose backslashes and quotes are
    escaped, so it can neither end the string nor hold an escape sequence."""
    return printable(text).replace("\\", "\\\\").replace('"', '\\"')


def js_json(value, indent: int | None = None) -> str:
    """Plain data (as `py_literal` takes) as JSON text for JSON.parse(String.raw`...`) in generated JavaScript:
    ASCII only (no line separator ends a line inside it), and the characters that would end or interpolate the
    template (a backtick, `$`) written as JSON's own \\u escapes, which only strings can hold."""
    _check_data(value)
    text = json.dumps(value, ensure_ascii=True, allow_nan=False, indent=indent)
    return text.replace("`", "\\u0060").replace("$", "\\u0024")
