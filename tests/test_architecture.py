"""The rules that keep the architecture easy to see, checked on the code itself (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import click
import pytest

HARNESS = Path(__file__).resolve().parent.parent / "harness"
MAX_LINES = 500
SINGLE_CONCEPT = "holds one concept"  # the docstring phrase that lets a module pass MAX_LINES

# Where printing and terminal rendering are allowed: the command line, the renderers, the worker (a leaf).
PRESENTATION = {"cli.py", "terminal.py", "terminal_table.py", "charts.py", "chart.py", "worker.py"}


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
            assert not node.module.startswith(("harness.commands", "harness.cli", "harness.report.terminal")), \
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


def test_the_javascript_worker_requires_only_node_s_own_modules_and_the_binding():
    """worker.js, worker.py's twin for the node and web bindings, is a leaf too: Node.js's built-in modules, and
    the binding resolved in its prefix (`require(main)`), nothing else."""
    text = (HARNESS / "worker.js").read_text()
    required = set(re.findall(r"require\(\s*'([^']+)'\s*\)", text))
    assert required <= {"fs", "path", "zlib", "readline", "worker_threads"}, required
    assert set(re.findall(r"require\(\s*([A-Za-z_]+)\s*\)", text)) == {"main"}


def test_the_worker_imports_only_onnxruntime_numpy_and_the_standard_library():
    import sys

    tree = ast.parse((HARNESS / "worker.py").read_text())
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert names - set(sys.stdlib_module_names) <= {"onnxruntime", "numpy"}, names


# -- wings: the import graph, built from the sources ----------------------------------------


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(HARNESS.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """harness module -> the harness modules it imports, anywhere in its source (functions, TYPE_CHECKING)."""
    names = {_module_name(p): p for p in modules()}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                wanted = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in names else base for a in node.names]
            else:
                continue
            for target in wanted:
                while target and target not in names:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def wing_of(module: str) -> int:
    from harness import WINGS

    best = max(((len(prefix), level) for level, (_, prefixes) in enumerate(WINGS) for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), default=None)
    assert best is not None, f"{module} is in no wing of harness.WINGS"
    return best[1]


def test_the_import_graph_has_no_circle():
    from graphlib import CycleError, TopologicalSorter

    graph = import_graph()
    assert len(graph) > 80 and sum(map(len, graph.values())) > 300  # the walk saw the package and its imports
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as e:
        # graphlib lists each module before one that imports it
        raise AssertionError(f"import circle (A -> B: A imports B): {' -> '.join(reversed(e.args[1]))}") from None
    assert set(order) == set(graph)


def test_imports_point_down_the_wings():
    from harness import WINGS

    upward = [f"{a} ({WINGS[wing_of(a)][0]}) imports {b} ({WINGS[wing_of(b)][0]})"
              for a, targets in sorted(import_graph().items()) for b in sorted(targets) if wing_of(b) > wing_of(a)]
    assert not upward, "\n".join(upward)


def test_the_top_of_the_package_keeps_only_the_probe_path_and_the_shared_words():
    top = sorted(p.name for p in HARNESS.glob("*.py"))
    assert len(top) <= 15, top
    packages = [p for p in HARNESS.iterdir() if p.is_dir() and p.name != "__pycache__"]
    for package in packages:  # every wing says what it is for
        assert ast.get_docstring(ast.parse((package / "__init__.py").read_text())), package.name


def test_only_the_runners_start_worker_processes():
    outside = sorted(a for a, targets in import_graph().items()
                     if "harness.runners.workers" in targets and not a.startswith("harness.runners"))
    assert not outside, outside


def _calls(path: Path, names: set[str]) -> list[str]:
    """Where `path` calls a function or method named in `names`: 'file:line receiver.name()'."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
            if name in names:
                found.append(f"{rel(path)}:{node.lineno} {ast.unparse(f)}()")
    return found


def test_one_prober_owns_a_probes_life():
    """Only the Prober runs a worker on a job (through its executor: here, or a task on a cluster) and records
    it; only `serving()` makes the pool that serves many probes: no other module calls run_probe or
    reusing_workers, nor appends to a run's store itself (merge, in the results wing, appends records it read,
    not probes)."""
    allowed = {"probe.py", "runners/__init__.py", "runners/workers.py"}
    stray = [c for p in modules() if rel(p) not in allowed for c in _calls(p, {"run_probe", "reusing_workers"})]
    appends = [c for p in modules() if rel(p) != "probe.py" and not rel(p).startswith("results/")
               for c in _calls(p, {"append"}) if "store.append" in c]
    handed = [c for c in _calls(HARNESS / "probe.py", {"probe"}) if "executor_of" in c]
    assert handed and "run_probe" in (HARNESS / "probe.py").read_text(), "the walk sees the executor's call"
    assert _calls(HARNESS / "results" / "history.py", {"append"}), "the walk sees appends"
    assert not stray, stray
    assert not appends, appends
