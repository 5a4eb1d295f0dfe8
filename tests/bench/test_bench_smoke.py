"""`make bench` as shipped, tiny: every section runs through `python -m bench.run --tiny` and prints its rows.

The runner runs in its own process, as `make bench` runs it, on the database server and Redis the tests use
(it makes and drops its own throwaway databases), so a section that no longer runs on a fresh database fails
here, in `make test`, and not on the day someone wants figures. Tiny figures mean nothing; only that each
section measured something is checked. The app's virtualenv has no tracing peers, so their rows say "not
installed"; in .venv-bench they are measured. On SQLite the sections that load with PostgreSQL's COPY say
that they need it (the suite runs on PostgreSQL in CI, where they run).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from bench.overhead import NOT_INSTALLED
from bench.run import NEEDS_POSTGRES, SECTIONS
from bench.table import COLUMNS, TIMES

HEADER = "| " + " | ".join(COLUMNS) + " |"
HANG_GUARD = 600  # seconds: a hung section fails the test instead of the whole suite; nothing here is timed
# What bench.run prints for a section that raised, and what a section prints for a measurement that failed.
BROKEN_FIGURE = re.compile(r"not run|raised|failed|error", re.IGNORECASE)
BROKEN_NOTE = re.compile(r"raised|traceback", re.IGNORECASE)
X = re.escape(TIMES)


def run_bench(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bench.run", *args],
        cwd=settings.BASE_DIR,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=HANG_GUARD,
    )


def table_rows(stdout: str, section: str) -> list[list[str]]:
    return [line.strip("| ").split(" | ") for line in stdout.splitlines() if line.startswith(f"| {section} |")]


@pytest.fixture(scope="module")
def tiny() -> subprocess.CompletedProcess:
    return run_bench("--tiny")


def _postgres_only(section: str) -> bool:
    return section in NEEDS_POSTGRES and connection.vendor != "postgresql"


@pytest.mark.parametrize("section", list(SECTIONS))
def test_every_section_runs_tiny_and_prints_rows_with_figures_and_the_load_beside_them(tiny, section):
    assert tiny.returncode == 0, tiny.stderr[-3000:]
    rows = table_rows(tiny.stdout, section)

    assert rows, f"no {section} row in:\n{tiny.stdout}\n{tiny.stderr[-3000:]}"
    if _postgres_only(section):
        assert [row[2] for row in rows] == ["not run"] and "needs PostgreSQL" in rows[0][4]
        return
    for row in rows:
        assert not BROKEN_FIGURE.search(row[2]) and not BROKEN_NOTE.search(row[4]), f"{row}\n{tiny.stderr[-3000:]}"
        assert re.search(r"\d", row[2]) or row[2] == NOT_INSTALLED, row
        assert re.fullmatch(r"\d+\.\d\d → \d+\.\d\d", row[5]), row


def test_the_tiny_run_prints_one_table_the_explain_block_and_the_machine_with_its_load(tiny):
    assert tiny.stdout.count(HEADER) == 1
    assert "## EXPLAIN (ANALYZE)" in tiny.stdout
    assert "## Machine" in tiny.stdout and "- Redis " in tiny.stdout
    assert re.search(r"- load average \(1, 5, 15 min\) at the end: [\d.]+, [\d.]+, [\d.]+", tiny.stdout)
    assert "- size: tiny" in tiny.stdout


def test_the_overhead_section_prints_sidewisp_beside_the_peers(tiny):
    overhead = table_rows(tiny.stdout, "overhead")

    assert [row[1] for row in overhead] == [
        "scripted two-agent handoff run, bare",
        "scripted two-agent handoff run with SidewispMiddleware + observe recording to the database",
        "scripted two-agent handoff run with Sidewisp, receipts handed to the evidence writer but not stored "
        "(its sink discards them)",
        "scripted two-agent handoff run with OpenInference LangChainInstrumentor",
        "scripted two-agent handoff run with Langfuse LangChain CallbackHandler",
    ]
    assert "median" in overhead[0][2] and "new DB connections per run" in overhead[1][2]
    assert "verdicts HEALTHY" in overhead[1][4]
    assert all("median" in row[2] or row[2] == NOT_INSTALLED for row in overhead[3:])


def test_the_workers_section_counts_the_runs_stored_complete_against_the_ceiling_measured_with_them(tiny):
    throughput, burst, alone, build = table_rows(tiny.stdout, "workers")

    assert "runs/min stored complete" in throughput[2] and "3/3 stored complete, verdicts HEALTHY" in throughput[4]
    assert re.search(rf"{X}\d+\.\d+ of the ceiling 2 processes ÷ hold time = \d+ runs/min", throughput[3])
    assert "p95" in burst[2] and re.search(rf"{X}\d+\.\d+ of the queueing model's median", burst[3])
    assert "sent → received" in alone[4]
    assert re.search(r"p50 [\d.]+ ms", build[2])
    assert re.search(rf"{X}\d+\.\d+ of building it with its factory", build[3])


def test_the_map_section_draws_a_tiny_team_map_and_reads_it_against_the_goal(tiny):
    flat, nested = table_rows(tiny.stdout, "map")

    assert flat[1] == "team map of 6 agents and 8 routes, one flat team"
    assert nested[1] == "team map of 6 agents and 8 routes in 5 nested teams (boxes)"
    assert "8 arrows drawn" in flat[4] and "layout" in flat[4] and "render" in flat[4]
    assert re.search(rf"{X}\d+\.\d+ of the goal", flat[3])


def test_it_says_in_one_line_that_redis_does_not_answer_and_exits_non_zero():
    result = run_bench("--tiny", "--only", "workers", REDIS_URL="redis://127.0.0.1:1/0")

    assert result.returncode == 2
    assert "bench: Redis does not answer at redis://127.0.0.1:1/0 (ConnectionError)" in result.stderr
    assert HEADER not in result.stdout
