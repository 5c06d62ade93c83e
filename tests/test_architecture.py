"""The rules that keep the architecture easy to see, checked on the code itself (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import click
import pytest

HARNESS = Path(__file__).resolve().parent.parent / "harness"
MAX_LINES = 500
SINGLE_CONCEPT = "holds one concept"  # the docstring phrase that lets a module pass MAX_LINES

# Where printing and terminal rendering are allowed: the command line, the renderers, the worker (a leaf).
PRESENTATION = {"cli.py", "render.py", "charts.py", "worker.py"}


def modules(root: Path = HARNESS) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def rel(path: Path) -> str:
    return str(path.relative_to(HARNESS))


def is_logic(path: Path) -> bool:
    return not rel(path).startswith("commands/") and path.name not in PRESENTATION


@pytest.mark.parametrize("path", modules(), ids=rel)
def test_no_module_over_500_lines_unless_it_holds_one_concept(path):
    lines = path.read_text().count("\n")
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    assert lines <= MAX_LINES or SINGLE_CONCEPT in doc, f"{rel(path)}: {lines} lines"


@pytest.mark.parametrize("path", [p for p in modules() if is_logic(p)], ids=rel)
def test_logic_modules_neither_import_commands_nor_print(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert not node.module.startswith(("harness.commands", "harness.cli", "harness.render")), \
                f"{rel(path)} imports {node.module}"
            assert not node.module.startswith("rich"), f"{rel(path)} renders with rich"
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith(("harness.commands", "rich")), f"{rel(path)} imports {alias.name}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
            raise AssertionError(f"{rel(path)}:{node.lineno} prints")


def test_every_command_module_is_registered():
    from harness.cli import COMMANDS, cli

    files = {p.stem for p in (HARNESS / "commands").glob("*.py")} - {"__init__", "common"}
    assert files == set(COMMANDS)
    ctx = click.Context(cli)
    assert set(cli.list_commands(ctx)) == set(COMMANDS)
    assert {name: cli.get_command(ctx, name).name for name in COMMANDS} == {name: name for name in COMMANDS}


def test_the_worker_imports_only_onnxruntime_numpy_and_the_standard_library():
    import sys

    tree = ast.parse((HARNESS / "worker.py").read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names - set(sys.stdlib_module_names) <= {"onnxruntime", "numpy"}, names
