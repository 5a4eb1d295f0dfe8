"""No import circle between modules, and no module that does several jobs (issue 23).

Beside the layering rules (tests/agents/test_layering.py): a module's imports, lazy ones inside functions
included, never lead back to it, and a module of the three apps stays under MAX_LINES unless its docstring
says why it must be one piece (a sentence starting "One piece:").
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
APPS = ("agents", "receipts", "sidewisp")
MAX_LINES = 400


def modules_under(root: Path, packages: tuple[str, ...] = APPS) -> dict[str, Path]:
    """Every module of `packages` under `root` by dotted name (a package by its own name), migrations aside."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if "migrations" in parts:
                continue
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _under_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imported_names(path: Path, package: str) -> set[str]:
    """The dotted names `path` imports, at any depth: `from p import x` is p.x (the module p.x, or x of p)."""
    names: set[str] = set()
    todo = list(ast.parse(path.read_text(), filename=str(path)).body)
    while todo:
        node = todo.pop()
        if _under_type_checking(node):
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names |= {f"{base}.{alias.name}" for alias in node.names}
        todo.extend(ast.iter_child_nodes(node))
    return names


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of `modules` it imports (a name imported from a module counts as that module).

    A package's own `__init__` is run by importing any of its modules, but that is no edge: a package that
    re-exports its modules' names would otherwise be in a circle with each of them.
    """

    def owner(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        imported = {owner(name) for name in _imported_names(path, package)}
        graph[module] = {other for other in imported if other and other != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: each strongly connected set of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_no_module_of_the_three_apps_is_in_an_import_circle() -> None:
    assert circles(import_graph(APP_MODULES)) == []


def test_the_check_finds_a_circle_through_a_lazy_import(tmp_path) -> None:
    package = tmp_path / "app"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "first.py").write_text("from app import second\n")
    (package / "second.py").write_text("def late():\n    from app.first import something\n")
    (package / "third.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from app import first\n"
    )

    graph = import_graph(modules_under(tmp_path, ("app",)))

    assert circles(graph) == [["app.first", "app.second"]]
    assert graph["app.third"] == set()  # a type-only import is no circle


def test_a_relative_import_is_resolved_to_its_module(tmp_path) -> None:
    package = tmp_path / "app" / "room"
    package.mkdir(parents=True)
    for folder in (tmp_path / "app", package):
        (folder / "__init__.py").write_text("")
    (package / "one.py").write_text("from . import two\n")
    (package / "two.py").write_text("from .one import x\n")

    assert circles(import_graph(modules_under(tmp_path, ("app",)))) == [["app.room.one", "app.room.two"]]


def _says_why_it_is_one_piece(path: Path) -> bool:
    docstring = ast.get_docstring(ast.parse(path.read_text(), filename=str(path))) or ""
    return "One piece:" in docstring


# The agent package (issue 31) is held to the same rules: it is the recording side the server runs too.
APP_MODULES = modules_under(REPO_ROOT) | modules_under(REPO_ROOT / "agent" / "src", ("sidewisp_agent",))


@pytest.mark.parametrize("module", sorted(APP_MODULES))
def test_a_long_module_says_why_it_is_one_piece(module: str) -> None:
    path = APP_MODULES[module]
    lines = len(path.read_text().splitlines())

    assert lines <= MAX_LINES or _says_why_it_is_one_piece(path), (
        f'{path.relative_to(REPO_ROOT)} has {lines} lines: split it, or say in its docstring why it is "One piece: …"'
    )


def test_every_room_says_what_it_is_for() -> None:
    rooms = [path for path in APP_MODULES.values() if path.name == "__init__.py"]
    rooms = [path for path in rooms if path.parent.name not in ("management", "commands", "templatetags")]
    silent = [str(path.relative_to(REPO_ROOT)) for path in rooms if not ast.get_docstring(ast.parse(path.read_text()))]

    assert silent == []
