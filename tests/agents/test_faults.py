"""The fault-injection hook of the crash tests (agents/faults.py): it kills at the boundary it names, once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from agents.host import faults

# A process that hands the writer's hooks three `created` entries, as the middleware would, then says so.
SCRIPT = """
from types import SimpleNamespace

from agents.host import faults

entries = [SimpleNamespace(part=part) for part in ["created", "reduced", "created"]]
for entry in entries:
    faults.submitted(entry)
faults.stored(entries)
print("survived")
"""


def run_hooked(tmp_path, kill: str, *, once: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, faults.KILL_ENV: kill}
    if once:
        env[faults.ONCE_FILE_ENV] = str(tmp_path / "killed")
    return subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.mark.parametrize("kill", ["submitted:created:2", "stored:created:2", "stored:reduced:1"])
def test_the_process_kills_itself_at_the_named_boundary_and_leaves_the_once_file(tmp_path, kill):
    died = run_hooked(tmp_path, kill)

    assert died.returncode == -signal.SIGKILL
    assert (tmp_path / "killed").read_text().startswith(f"{kill} pid=")


def test_a_boundary_the_process_never_reaches_kills_nothing(tmp_path):
    lived = run_hooked(tmp_path, "submitted:created:3")

    assert (lived.returncode, lived.stdout.strip()) == (0, "survived")
    assert not (tmp_path / "killed").exists()


def test_once_the_file_exists_the_next_process_runs_past_the_boundary(tmp_path):
    run_hooked(tmp_path, "submitted:created:1")

    again = run_hooked(tmp_path, "submitted:created:1")

    assert (again.returncode, again.stdout.strip()) == (0, "survived")


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("submitted:created", "<when>:<part>:<n>"),
        ("later:created:1", "when must be submitted or stored"),
        ("stored:handoff:1", "part must be one of"),
        ("stored:created:0", "n must be a whole number from 1"),
    ],
)
def test_a_kill_point_that_does_not_parse_says_what_is_wrong(value, complaint):
    with pytest.raises(ValueError, match=complaint):
        faults.parse(value)


def test_a_kill_point_that_does_not_parse_kills_nothing_and_says_so(tmp_path):
    lived = run_hooked(tmp_path, "stored:created:zero")

    assert (lived.returncode, lived.stdout.strip()) == (0, "survived")
    assert "fault injection off: SIDEWISP_FAULT_KILL: n must be a whole number from 1" in lived.stderr
