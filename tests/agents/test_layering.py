"""Who may import whom: the demo is one registered graph among others, and receipts never imports agents."""

from __future__ import annotations

import ast
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (lazy imports inside functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def importers_of(prefix: str, folders: list[str], *, outside: str | None = None) -> list[str]:
    offenders = []
    for folder in folders:
        for path in sorted((REPO_ROOT / folder).rglob("*.py")):
            relative = path.relative_to(REPO_ROOT).as_posix()
            if outside and relative.startswith(outside):
                continue
            if any(name == prefix or name.startswith(f"{prefix}.") for name in imported_modules(path)):
                offenders.append(relative)
    return offenders


def test_nothing_outside_the_demo_imports_the_demo() -> None:
    assert importers_of("agents.demo", ["agents", "receipts", "sidewisp"], outside="agents/demo/") == []


def test_the_evidence_domain_imports_no_agent_module() -> None:
    assert importers_of("agents", ["receipts"]) == []


def test_the_check_notices_a_lazy_import_inside_a_function(tmp_path) -> None:
    module = tmp_path / "sneaky.py"
    module.write_text("def f():\n    from agents.demo.scenarios import SCENARIOS\n    return SCENARIOS\n")

    assert "agents.demo.scenarios" in imported_modules(module)


def test_the_agent_package_imports_neither_django_nor_the_server() -> None:
    """Issue 31 §1: `sidewisp_agent` is installed into apps that have no Django and no Sidewisp server."""
    offenders = [
        importer
        for prefix in ("django", "receipts", "agents", "sidewisp", "asgiref", "channels", "celery", "psycopg", "kombu")
        for importer in importers_of(prefix, ["agent/src"])
    ]

    assert offenders == []
