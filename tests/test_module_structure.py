"""The package's module structure: no import cycles, and no module a reader cannot hold.

The import graph is read from the source, not from ``sys.modules``: an import under
``if TYPE_CHECKING:`` or inside a function is an edge too, because a type checker (and a
reader) follows it just the same.  A cycle means two modules that cannot be understood, or
split, one without the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import trio_tools

PACKAGE = Path(trio_tools.__file__).parent
MAX_LINES = 500


def _module_name(path: Path) -> str:
    parts = ["trio_tools", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _package_of(module: str) -> str:
    is_package = MODULES[module].name == "__init__.py"
    return module if is_package else module.rpartition(".")[0]


def _resolve(target: str) -> str | None:
    """The package module ``target`` names, or its nearest enclosing package module."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def imports_of(module: str) -> dict[str, int]:
    """The package modules ``module`` imports (anywhere in its source), each with one line."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: dict[str, int] = {}

    def add(target: str | None, line: int) -> None:
        if target is not None and target != module:
            found.setdefault(target, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("trio_tools"):
                    add(_resolve(alias.name), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(module)
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = f"{base}.{node.module}" if node.module else base
            elif node.module is not None and node.module.startswith("trio_tools"):
                source = node.module
            else:
                continue
            for alias in node.names:
                # ``from . import _x`` imports the submodule ``_x``, not a name of ``.``.
                submodule = f"{source}.{alias.name}"
                add(_resolve(submodule if submodule in MODULES else source), node.lineno)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def _private(module: str) -> bool:
    """A private implementation module (no package ``__init__``, which re-exports)."""
    return MODULES[module].name != "__init__.py"


def test_no_import_cycle_among_private_modules() -> None:
    """No two private modules import each other, directly or through others (counting
    ``TYPE_CHECKING`` and function-level imports)."""
    private = {
        module: {target: line for target, line in targets.items() if _private(target)}
        for module, targets in GRAPH.items()
        if _private(module)
    }
    described = [
        [f"{a} -> {b} (line {line})" for a in cycle for b, line in private[a].items() if b in cycle]
        for cycle in import_cycles(private)
    ]
    assert described == []


def test_the_graph_sees_type_checking_and_relative_imports() -> None:
    """The graph is not trivially empty: it finds a ``TYPE_CHECKING`` import and a
    subpackage's ``..`` import."""
    assert "trio_tools._execution" in GRAPH["trio_tools._instrument"]
    assert "trio_tools._registry" in GRAPH["trio_tools.otel._spans"]


def test_import_cycles_finds_a_cycle() -> None:
    """The cycle finder reports a three-module cycle and nothing for a chain."""
    cycle = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert import_cycles(cycle) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b": 1}, "b": {}}) == []


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_module_is_short_enough_to_read(module: str) -> None:
    """Every module of the package (subpackages too) stays under ``MAX_LINES`` lines: split
    one by concept, into modules named for what they hold, before it grows past that."""
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines"


def test_the_module_map_names_every_private_module() -> None:
    """``docs/index.md``'s module map names each top-level private module (``_x.py``)."""
    index = (PACKAGE.parent / "docs" / "index.md").read_text(encoding="utf-8")
    private = sorted(path.name for path in PACKAGE.glob("_*.py") if path.name != "__init__.py")
    assert [name for name in private if f"`{name}`" not in index] == []
