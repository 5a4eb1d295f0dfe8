"""A new virtualenv holding the built agent package and the repository's pins of what it needs (issue 31 §2).

No system site-packages and no Django: what runs there proves the package works in an app that has nothing of the
server. Built once per test process (`venv_python` in tests/agents/conftest.py; in a parallel run the modules that
use it run in turn on one worker: `xdist_scope` in tests/conftest.py). Apps run with its Python, outside the
repository.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# What the package and the apps run there need, at the repository's pins (the versions the server's tests run).
PINNED = ("langchain", "langchain-core", "langgraph", "httpx", "langgraph-swarm")


def pins() -> list[str]:
    lines = (REPO_ROOT / "requirements.txt").read_text().splitlines()
    found = dict(line.split("#")[0].strip().split("==") for line in lines if "==" in line and "[" not in line)
    return [f"{name}=={found[name]}" for name in PINNED]


def run(command: list[str], **options) -> subprocess.CompletedProcess:
    completed = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False, **options)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-3000:]
    return completed


def build(where: Path) -> Path:
    """The wheel of `agent/` and the pins installed into a new virtualenv under `where`; its Python."""
    run([sys.executable, "-m", "pip", "wheel", str(REPO_ROOT / "agent"), "--no-deps", "-q", "-w", str(where)])
    (wheel,) = where.glob("sidewisp_agent-*.whl")
    run([sys.executable, "-m", "venv", str(where / "venv")])
    python = where / "venv" / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel), *pins()])
    return python


def clean_environment() -> dict[str, str]:
    """This process's environment without the server's settings and Python path."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SIDEWISP_", "DJANGO", "PYTHON"))}


def in_venv(python: Path, *args: str, env: dict | None = None, cwd: Path) -> subprocess.CompletedProcess:
    """Run the venv's Python outside the repository (so nothing of the server is on its path) to its end."""
    return subprocess.run(
        [str(python), *args], env={**clean_environment(), **(env or {})}, cwd=cwd, capture_output=True, text=True
    )


@contextmanager
def started_in_venv(python: Path, *args: str, env: dict, cwd: Path) -> Iterator[subprocess.Popen]:
    """`in_venv`, started (its output read line by line as it comes); killed if it still runs when the block
    ends, and then its stderr must hold no traceback and no ERROR line."""
    app = subprocess.Popen(
        [str(python), *args],
        env={**clean_environment(), **env},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield app
    finally:
        if app.poll() is None:
            app.kill()
        errors = app.stderr.read()
    assert not re.search(r"Traceback|ERROR", errors), errors[-2000:]
